//! `accord top --prometheus ADDR`: serves `GET /metrics` in Prometheus' text format (0.0.4).
//! Each scrape reads one `list` page (one round trip, as `accord top` refreshes) for the gauges
//! of keys by state, and this process's own `Client::stats()` for the counters.
//!
//! The HTTP side is a small HTTP/1.1 responder on a tokio listener: one request per
//! connection, answered and closed. Prometheus needs no more, and the command stays free of an
//! HTTP framework's dependencies.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use accord::{Client, Histogram};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::top::{self, Snapshot};
use crate::{exit, signals, Failure, Outcome};

/// A request's head must arrive within this long and fit in this many bytes.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_HEAD: usize = 16 * 1024;
/// Connections answered at once; further ones wait in the listen backlog.
const MAX_CONNECTIONS: usize = 16;

pub async fn serve(client: &Client, prefix: String, addr: SocketAddr) -> Outcome {
    let (mut int, mut term) = signals()?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot listen on {addr}: {e}")))?;
    // Tests (and people) read the address from here: with port 0 it is the one chosen.
    note!("accord: serving http://{bound}/metrics");
    let prefix = std::sync::Arc::new(prefix);
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            _ = int.recv() => break,
            _ = term.recv() => break,
        };
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (client, prefix) = (client.clone(), prefix.clone());
                    tokio::spawn(async move {
                        let _ = respond(stream, &client, &prefix).await;
                        drop(slot);
                    });
                }
                // Out of file descriptors and the like: wait a little instead of spinning.
                Err(e) => {
                    tracing_warn(&format!("accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = int.recv() => break,
            _ = term.recv() => break,
        }
    }
    Ok(exit::OK)
}

fn tracing_warn(message: &str) {
    note!("accord: warning: {message}");
}

/// Reads one request's head and answers it.
async fn respond(mut stream: TcpStream, client: &Client, prefix: &str) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let complete = tokio::time::timeout(READ_TIMEOUT, async {
        let mut buf = [0u8; 2048];
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
                return Ok(true);
            }
            if head.len() > MAX_HEAD {
                return Ok(false);
            }
        }
    })
    .await;
    let Ok(Ok(true)) = complete else {
        return reply(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            "bad request\n",
            true,
        )
        .await;
    };
    let text = String::from_utf8_lossy(&head);
    let mut parts = text.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let body_wanted = method != "HEAD";
    if method != "GET" && method != "HEAD" {
        return reply(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n",
            true,
        )
        .await;
    }
    match path {
        "/metrics" => {
            let body = exposition(client, prefix).await;
            reply(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
                body_wanted,
            )
            .await
        }
        "/" => {
            reply(
                &mut stream,
                "200 OK",
                "text/plain",
                "accord: metrics at /metrics\n",
                body_wanted,
            )
            .await
        }
        _ => {
            reply(
                &mut stream,
                "404 Not Found",
                "text/plain",
                "not found\n",
                body_wanted,
            )
            .await
        }
    }
}

async fn reply(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
    with_body: bool,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if with_body {
        out.push_str(body);
    }
    stream.write_all(out.as_bytes()).await?;
    stream.shutdown().await
}

/// The exposition: the keys' gauges (read now), then this client's counters and summaries.
pub async fn exposition(client: &Client, prefix: &str) -> String {
    let read = top::read(client, prefix).await;
    if let Err(e) = &read {
        tracing_warn(&format!(
            "reading the keys failed: {}",
            crate::output::said(e)
        ));
    }
    // Read after the list, so that its statement is counted.
    let stats = client.stats();
    render(client.namespace(), prefix, read.as_ref().ok(), &stats)
}

fn render(namespace: &str, prefix: &str, snap: Option<&Snapshot>, stats: &accord::Stats) -> String {
    let mut o = String::new();
    let labels = format!(
        "namespace=\"{}\",prefix=\"{}\"",
        escape(namespace),
        escape(prefix)
    );
    gauge_head(
        &mut o,
        "accord_up",
        "1 if this scrape read the namespace's keys, 0 if the read failed.",
    );
    let _ = writeln!(o, "accord_up{{{labels}}} {}", u8::from(snap.is_some()));
    if let Some(s) = snap {
        gauge_head(
            &mut o,
            "accord_keys",
            "Keys under the prefix by state, read at this scrape (a key held shared counts once).",
        );
        for (state, n) in [
            ("held", s.counts.held),
            ("free", s.counts.free),
            ("done", s.counts.done),
        ] {
            let _ = writeln!(o, "accord_keys{{{labels},state=\"{state}\"}} {n}");
        }
        gauge_head(
            &mut o,
            "accord_shared_holders",
            "Shared holders of the keys held shared, read at this scrape.",
        );
        let _ = writeln!(
            o,
            "accord_shared_holders{{{labels}}} {}",
            s.counts.shared_holders
        );
        gauge_head(
            &mut o,
            "accord_waiters",
            "Acquires waiting in line for the keys under the prefix, read at this scrape.",
        );
        let _ = writeln!(o, "accord_waiters{{{labels}}} {}", s.counts.waiting);
        gauge_head(
            &mut o,
            "accord_keys_truncated",
            &format!(
                "1 if more keys lie under the prefix than top's table shows (the first {}); accord_keys counts every key regardless.",
                top::PAGE
            ),
        );
        let _ = writeln!(
            o,
            "accord_keys_truncated{{{labels}}} {}",
            u8::from(s.truncated)
        );
    }
    let counters: [(&str, u64, &str); 11] = [
        (
            "accord_acquires_total",
            stats.acquires,
            "Calls to acquire, try_acquire, claim and semaphore acquires.",
        ),
        ("accord_grants_total", stats.grants, "Leases granted."),
        (
            "accord_refusals_total",
            stats.refusals,
            "Tries that found the key held, claims that found nothing.",
        ),
        (
            "accord_timeouts_total",
            stats.timeouts,
            "Waiting acquires and claims that timed out.",
        ),
        (
            "accord_cancellations_total",
            stats.cancellations,
            "Waiting acquires and claims cancelled.",
        ),
        ("accord_lost_total", stats.lost, "Leases lost."),
        ("accord_releases_total", stats.releases, "Leases released."),
        ("accord_done_total", stats.done, "Leases marked done."),
        (
            "accord_notifications_total",
            stats.notifications,
            "Notifications delivered to this client's subscriptions.",
        ),
        (
            "accord_reconnects_total",
            stats.reconnects,
            "Connections to the coordinator opened again after one broke.",
        ),
        (
            "accord_statements_total",
            stats.statements,
            "Statements this client sent to the coordinator.",
        ),
    ];
    for (name, value, help) in counters {
        let _ = writeln!(o, "# HELP {name} {help} Counted by this accord process.");
        let _ = writeln!(o, "# TYPE {name} counter");
        let _ = writeln!(o, "{name} {value}");
    }
    let summaries: [(&str, &Histogram, &str); 4] = [
        (
            "accord_acquire_wait_seconds",
            &stats.acquire_wait,
            "From an acquire's call to its grant.",
        ),
        (
            "accord_hold_seconds",
            &stats.hold_time,
            "From a grant to its release, done or loss.",
        ),
        (
            "accord_statement_seconds",
            &stats.statement_time,
            "One statement's round trip.",
        ),
        (
            "accord_keepalive_tick_seconds",
            &stats.keepalive_tick,
            "One keepalive tick's renew statement.",
        ),
    ];
    for (name, h, help) in summaries {
        let _ = writeln!(o, "# HELP {name} {help} Counted by this accord process.");
        let _ = writeln!(o, "# TYPE {name} summary");
        for (q, v) in [("0.5", h.p50), ("0.99", h.p99)] {
            let _ = writeln!(o, "{name}{{quantile=\"{q}\"}} {}", v.as_secs_f64());
        }
        let _ = writeln!(o, "{name}_sum {}", h.sum.as_secs_f64());
        let _ = writeln!(o, "{name}_count {}", h.count);
    }
    o
}

fn gauge_head(o: &mut String, name: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} gauge");
}

/// A label value: the name as accord prints it (`output::escape`: control and format
/// characters escaped, line feeds too, so that no dashboard shows them raw), then as the text
/// format wants it (backslash and double quote escaped): Prometheus reads back the printed name.
fn escape(s: &str) -> String {
    crate::output::escape(s)
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\\\\\c\\\\nd");
        assert_eq!(
            escape("k\x1b]0;T\x07\u{202e}"),
            "k\\\\x1b]0;T\\\\x07\\\\u202e"
        );
    }

    #[test]
    fn waiters_are_a_gauge_of_the_namespace_and_prefix() {
        let snap = Snapshot {
            counts: accord::KeyCounts {
                held: 1,
                waiting: 3,
                ..Default::default()
            },
            ..Default::default()
        };
        let text = render("ns", "p/", Some(&snap), &accord::Stats::default());
        assert!(text.contains("# TYPE accord_waiters gauge\n"), "{text}");
        assert!(
            text.contains("accord_waiters{namespace=\"ns\",prefix=\"p/\"} 3\n"),
            "{text}"
        );
    }

    #[test]
    fn a_failed_read_says_down_and_keeps_the_counters() {
        let stats = accord::Stats {
            statements: 7,
            ..Default::default()
        };
        let text = render("ns", "p/", None, &stats);
        assert!(
            text.contains("accord_up{namespace=\"ns\",prefix=\"p/\"} 0\n"),
            "{text}"
        );
        assert!(!text.contains("accord_keys{"), "{text}");
        assert!(text.contains("accord_statements_total 7\n"), "{text}");
        assert!(
            text.contains("# TYPE accord_statement_seconds summary\n"),
            "{text}"
        );
    }
}
