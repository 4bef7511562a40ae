//! `accord top --prometheus` across a PostgreSQL outage: a scrape while the server is down says
//! `accord_up 0`, the next one after it came back reads again, and the exporter's reconnect is
//! counted. Its own test binary: it stops the shared test server, which no other test may see
//! (`make test` runs it alone, after every other binary: TESTS_ALONE in the Makefile). Needs
//! the throwaway server of `scripts/with-postgres.sh`, which exports its folder and binaries;
//! skipped otherwise.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{http_get, sample, Env, BOUND};

/// `pg_ctl ACTION` on the test server (as its owner when the tests run as root); `None` when
/// the tests run against a server they did not start.
fn pg_ctl(action: &str) -> Option<()> {
    let data = std::env::var("ACCORD_TEST_PGDATA").ok()?;
    let bindir = std::env::var("ACCORD_TEST_PG_BINDIR").ok()?;
    let pg_ctl = format!("{bindir}/pg_ctl");
    // SAFETY: geteuid(2) has no preconditions.
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &pg_ctl]);
        c
    } else {
        Command::new(&pg_ctl)
    };
    // The log where scripts/with-postgres.sh started it (pg_ctl appends).
    let log = format!("{data}/../server.log");
    cmd.args(["-D", &data, "-w", "-t", "60"]);
    match action {
        "stop" => cmd.args(["-m", "fast", "stop"]),
        _ => cmd.args(["-l", &log, "start"]),
    };
    let status = cmd.stdout(Stdio::null()).status().expect("run pg_ctl");
    assert!(status.success(), "pg_ctl {action} failed");
    Some(())
}

/// Starts the server again when dropped, so that a failed assertion does not leave it down
/// for the test binaries after this one.
struct Stopped;

impl Stopped {
    fn server() -> Option<Stopped> {
        pg_ctl("stop").map(|()| Stopped)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        pg_ctl("start");
    }
}

#[test]
fn prometheus_counts_its_reconnect_across_a_server_outage() {
    if std::env::var("ACCORD_TEST_PGDATA").is_err() {
        eprintln!("skipped: the test server was not started by the tests");
        return;
    }
    let env = Env::new("promrestart");
    let (_server, addr) = env.metrics_server("");
    let up = format!("accord_up{{namespace=\"{}\",prefix=\"\"}}", env.namespace);
    let (_, body) = http_get(&addr, "/metrics");
    assert_eq!(sample(&body, &up), 1.0, "{body}");
    assert_eq!(sample(&body, "accord_exporter_reconnects_total"), 0.0);

    let stopped = Stopped::server().expect("the test server is ours");
    // Scrapes while the server is down: each fails its read (and its attempt to connect again).
    for _ in 0..2 {
        let (status, body) = http_get(&addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(sample(&body, &up), 0.0, "{body}");
    }
    drop(stopped);

    let started = Instant::now();
    let body = loop {
        let (_, body) = http_get(&addr, "/metrics");
        if sample(&body, &up) == 1.0 {
            break body;
        }
        assert!(
            started.elapsed() < BOUND,
            "no successful scrape within {BOUND:?} of the restart: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        sample(&body, "accord_exporter_reconnects_total") >= 1.0,
        "the exporter's connection was opened again: {body}"
    );
}
