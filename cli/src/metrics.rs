//! `accord top --prometheus ADDR`: serves `GET /metrics` in Prometheus' text format (0.0.4),
//! and at `/` a short page that links to it. Each scrape reads one snapshot (one round trip,
//! as `accord top` refreshes) for the gauges: keys by state under the prefix, and the
//! namespace's groups, fleets, elections and streams; then the exporter's own client's
//! counters, prefixed `accord_exporter_` since they count its reads, not the namespace.
//!
//! The HTTP side is a small HTTP/1.1 responder on a tokio listener: one request per
//! connection, answered and closed. Prometheus needs no more, and the command stays free of an
//! HTTP framework's dependencies.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use accord::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::top::{self, Snapshot};
use crate::{exit, signals, Failure, Outcome};

/// A request's head must arrive within this long and fit in this many bytes.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_HEAD: usize = 16 * 1024;
/// Connections answered at once; further ones wait in the listen backlog.
const MAX_CONNECTIONS: usize = 16;
/// `GET /`: a link to the metrics, as exporters conventionally answer there.
const INDEX: &str = "<!DOCTYPE html>\n<html><head><title>accord exporter</title></head>\n<body><h1>accord exporter</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";

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
        // What a person who opens the address in a browser needs: where the metrics are.
        "/" => {
            reply(
                &mut stream,
                "200 OK",
                "text/html; charset=utf-8",
                INDEX,
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

/// The exposition: the namespace's gauges (read now), then this exporter's own client.
pub async fn exposition(client: &Client, prefix: &str) -> String {
    let read = top::read(client, prefix).await;
    if let Err(e) = &read {
        tracing_warn(&format!(
            "reading the namespace failed: {}",
            crate::output::said(e)
        ));
    }
    // Read after the snapshot, so that its statements are counted.
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
        "1 if this scrape read the namespace, 0 if the read failed (then only the exporter's own counters follow).",
    );
    let _ = writeln!(o, "accord_up{{{labels}}} {}", u8::from(snap.is_some()));
    if let Some(s) = snap {
        keys(&mut o, &labels, s);
        sections(
            &mut o,
            &format!("namespace=\"{}\"", escape(namespace)),
            &s.sections,
        );
    }
    exporter_client(&mut o, stats);
    o
}

/// The keys under the prefix: the counts `top`'s header shows.
fn keys(o: &mut String, labels: &str, s: &Snapshot) {
    gauge_head(
        o,
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
        o,
        "accord_shared_holders",
        "Shared holders of the keys held shared, read at this scrape.",
    );
    let _ = writeln!(
        o,
        "accord_shared_holders{{{labels}}} {}",
        s.counts.shared_holders
    );
    gauge_head(
        o,
        "accord_waiters",
        "Acquires waiting in line for the keys under the prefix, read at this scrape.",
    );
    let _ = writeln!(o, "accord_waiters{{{labels}}} {}", s.counts.waiting);
    gauge_head(
        o,
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

/// The recipes and streams of the whole namespace (the prefix does not narrow them): what one
/// alerts on. A series per group, fleet, election and stream consumer, as far as the
/// snapshot's read bounds reach (`accord_snapshot_truncated` says where they cut).
fn sections(o: &mut String, ns: &str, s: &accord::NamespaceSnapshot) {
    gauge_head(
        o,
        "accord_group_members",
        "Live members of each group, read at this scrape.",
    );
    for g in &s.groups {
        let _ = writeln!(
            o,
            "accord_group_members{{{ns},group=\"{}\"}} {}",
            escape(&g.group),
            g.members.len()
        );
    }
    gauge_head(
        o,
        "accord_fleet_members",
        "Live members of each fleet, read at this scrape.",
    );
    for f in &s.fleets {
        let _ = writeln!(
            o,
            "accord_fleet_members{{{ns},fleet=\"{}\"}} {}",
            escape(&f.fleet),
            f.members.len()
        );
    }
    gauge_head(
        o,
        "accord_fleet_shards",
        "Shards of each fleet, owned (held by a live lease) or unowned, read at this scrape.",
    );
    for f in &s.fleets {
        let unowned = f.unowned().len();
        let fleet = escape(&f.fleet);
        for (state, n) in [("owned", f.shards.len() - unowned), ("unowned", unowned)] {
            let _ = writeln!(
                o,
                "accord_fleet_shards{{{ns},fleet=\"{fleet}\",state=\"{state}\"}} {n}"
            );
        }
    }
    gauge_head(
        o,
        "accord_election_has_leader",
        "1 if the election has a leader now, 0 if it is vacant (its leader resigned or expired), read at this scrape.",
    );
    for e in &s.elections {
        let _ = writeln!(
            o,
            "accord_election_has_leader{{{ns},election=\"{}\"}} {}",
            escape(&e.election),
            u8::from(e.leader.is_some())
        );
    }
    gauge_head(
        o,
        "accord_stream_events",
        "Events stored in each stream, read at this scrape.",
    );
    for st in &s.streams {
        let _ = writeln!(
            o,
            "accord_stream_events{{{ns},stream=\"{}\"}} {}",
            escape(&st.stream),
            st.length()
        );
    }
    gauge_head(
        o,
        "accord_stream_consumer_lag_events",
        "Events published to the stream after the named consumer's last acknowledged one, read at this scrape.",
    );
    for st in &s.streams {
        for r in &st.readers {
            let _ = writeln!(
                o,
                "accord_stream_consumer_lag_events{{{ns},stream=\"{}\",consumer=\"{}\"}} {}",
                escape(&st.stream),
                escape(&r.consumer),
                r.lag
            );
        }
    }
    gauge_head(
        o,
        "accord_snapshot_truncated",
        "1 if a read bound cut this section short (its first rows only have series), read at this scrape.",
    );
    for (section, cut) in [
        ("elections", s.cut.elections),
        ("fleets", s.cut.fleets),
        ("groups", s.cut.groups),
        ("streams", s.cut.streams),
        ("waiters", s.cut.waiters),
    ] {
        let _ = writeln!(
            o,
            "accord_snapshot_truncated{{{ns},section=\"{section}\"}} {}",
            u8::from(cut)
        );
    }
}

/// The exporter's own client: its scrapes' statements and reconnects, never the namespace's
/// activity (which other processes' `Client::stats()` count). Hence the `accord_exporter_`
/// prefix, and none of the counters that an exporter, which only reads, would keep at 0.
fn exporter_client(o: &mut String, stats: &accord::Stats) {
    let why = "Counted by this exporter's own client, not the namespace's activity.";
    for (name, value, help) in [
        (
            "accord_exporter_statements_total",
            stats.statements,
            "Statements the exporter sent to the coordinator (its scrapes' reads).",
        ),
        (
            "accord_exporter_reconnects_total",
            stats.reconnects,
            "Connections of the exporter to the coordinator opened again after one broke.",
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help} {why}");
        let _ = writeln!(o, "# TYPE {name} counter");
        let _ = writeln!(o, "{name} {value}");
    }
    let (name, h) = ("accord_exporter_statement_seconds", &stats.statement_time);
    let _ = writeln!(
        o,
        "# HELP {name} One statement's round trip, as the exporter saw it. {why}"
    );
    let _ = writeln!(o, "# TYPE {name} summary");
    for (q, v) in [("0.5", h.p50), ("0.99", h.p99)] {
        let _ = writeln!(o, "{name}{{quantile=\"{q}\"}} {}", v.as_secs_f64());
    }
    let _ = writeln!(o, "{name}_sum {}", h.sum.as_secs_f64());
    let _ = writeln!(o, "{name}_count {}", h.count);
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
        assert!(
            text.contains("accord_exporter_statements_total 7\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE accord_exporter_statement_seconds summary\n"),
            "{text}"
        );
    }
}
