//! The `accord` command, run as a separate process against the PostgreSQL named by
//! `ACCORD_TEST_DATABASE_URL` (`scripts/with-postgres.sh cargo test -p accord-coord-cli`), and
//! its quick start on the etcd cluster named by `ACCORD_TEST_ETCD_URL` (skipped without it).
//! Each test uses its own namespace.

mod support;

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{expect_line, lines_of};

const BIN: &str = env!("CARGO_BIN_EXE_accord");

fn database_url() -> String {
    std::env::var("ACCORD_TEST_DATABASE_URL").expect(
        "ACCORD_TEST_DATABASE_URL is not set: run the tests with `make test` \
         (or scripts/with-postgres.sh cargo test -p accord-coord-cli)",
    )
}

/// A namespace of its own for one test, and the command pointed at it.
struct Env {
    url: String,
    namespace: String,
}

impl Env {
    fn new(test: &str) -> Env {
        Env {
            url: database_url(),
            namespace: format!("cli-{test}-{}-{}", std::process::id(), nanos()),
        }
    }

    /// A key prefix of its own on the etcd cluster named by `ACCORD_TEST_ETCD_URL` (the one
    /// scripts/with-etcd.sh starts for `make test`); `None`, after saying so, without it.
    fn etcd(test: &str) -> Option<Env> {
        let Ok(url) = std::env::var("ACCORD_TEST_ETCD_URL") else {
            eprintln!("{test}: skipped, ACCORD_TEST_ETCD_URL is not set (an etcd:// URL)");
            return None;
        };
        let separator = if url.contains('?') { '&' } else { '?' };
        let namespace = format!("cli-{test}-{}-{}", std::process::id(), nanos());
        Some(Env {
            url: format!("{url}{separator}prefix=/accord-test/{namespace}"),
            namespace,
        })
    }

    /// A fresh embedded store in a temporary file (no server needed).
    fn sqlite(test: &str) -> Env {
        Env {
            url: format!("sqlite://{}", temp_file(&format!("{test}.db")).display()),
            namespace: format!("cli-{test}-{}", nanos()),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .env("ACCORD_URL", &self.url)
            .env("ACCORD_NAMESPACE", &self.namespace)
            .env_remove("ACCORD_OWNER")
            .env_remove("ACCORD_SCHEMA");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run accord")
    }

    /// `ls --json` as parsed objects.
    fn ls(&self, extra: &[&str]) -> Vec<serde_json::Value> {
        let mut args = vec!["ls", "--json"];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        assert_eq!(code(&out), 0, "ls failed: {}", stderr(&out));
        stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    fn state_of(&self, key: &str) -> Option<String> {
        self.ls(&["--prefix", key])
            .into_iter()
            .find(|v| v["key"] == key)
            .map(|v| v["state"].as_str().unwrap().to_string())
    }
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited normally")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on a child process we have not reaped yet.
    let r = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill({}, {sig})", child.id());
}

fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Whether `pid` is a live process: not gone, and not a zombie (killed orphans are reparented
/// to an init that may never reap them).
fn is_running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("X");
    state != "Z" && state != "X"
}

/// Waits up to `limit` for the processes to end; the ones still running.
fn still_running_after(pids: &[i32], limit: Duration) -> Vec<i32> {
    let deadline = Instant::now() + limit;
    loop {
        let running: Vec<i32> = pids.iter().copied().filter(|&p| is_running(p)).collect();
        if running.is_empty() || Instant::now() > deadline {
            return running;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills what a failed test left running (it may be an unrelated process by now only if the
/// pid was reused, which needs the whole pid space to cycle first).
fn kill_leftovers(pids: &[i32]) {
    for &pid in pids {
        if is_running(pid) {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The number in `path`, once a command wrote it; kills `runner` and fails if that takes more
/// than 20 s.
fn read_pid(path: &Path, runner: &mut Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(pid) = s.trim().parse::<i32>() {
                let _ = std::fs::remove_file(path);
                return pid;
            }
        }
        if Instant::now() > deadline || runner.try_wait().unwrap().is_some() {
            let _ = runner.kill();
            let _ = runner.wait();
            panic!("the command did not write {}", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for the child, killing it if it outlives `limit`.
fn wait_within(mut child: Child, limit: Duration) -> Output {
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "accord did not exit within {limit:?}; stderr: {}",
                stderr(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "accord-cli-{}-{}-{name}",
        std::process::id(),
        nanos()
    ))
}

// --------------------------------------------------------------------- no database needed

#[test]
fn migrate_print_sql_needs_no_connection() {
    let out = Command::new(BIN)
        .args(["migrate", "--print-sql", "--schema", "jobs"])
        .env_remove("ACCORD_URL")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let sql = stdout(&out);
    assert!(
        sql.contains("CREATE SCHEMA IF NOT EXISTS \"jobs\""),
        "{sql}"
    );
    assert!(sql.contains("\"jobs\".leases"), "{sql}");
}

#[test]
fn bad_input_is_a_usage_error() {
    let cases: &[&[&str]] = &[
        &["acquire", ""],
        &["run", "", "--", "true"],
        &["acquire", "k", "--ttl", "3 parsecs"],
        &["run", "k", "--timeout", "soon", "--", "true"],
        &["ls", "--metadata", "[1,2]"],
        &["ls", "--state", "maybe"],
        &["run", "k"],
        &["frobnicate"],
        &["work", "p/", "--batch", "0", "--", "true"],
        &["work", "p/", "-j", "0", "--", "true"],
        &["work", "p/"],
        &["offer"],
        &["counts", ""],
    ];
    for args in cases {
        let out = Command::new(BIN)
            .args(*args)
            .env("ACCORD_URL", "postgres://127.0.0.1:1/unused")
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("error"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let out = Command::new(BIN)
        .args(["acquire", "k", "--ttl", "3 parsecs"])
        .output()
        .unwrap();
    assert!(stderr(&out).contains("--ttl"), "{}", stderr(&out));
}

/// A duration the core refuses reads as the user typed it (issue 32: `--ttl 25h` said
/// "90000s"), and the field as the flag.
#[test]
fn refused_durations_read_in_the_flags_words() {
    let env = Env::sqlite("durations-words");
    let out = env.run(&["acquire", "k", "--ttl", "25h"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("invalid ttl: 25h is outside the allowed range 100ms..=24h"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["acquire", "k", "--ttl", "90ms"]);
    assert!(
        stderr(&out).contains("invalid ttl: 90ms is outside the allowed range 100ms..=24h"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn missing_url_is_a_usage_error() {
    let out = Command::new(BIN)
        .args(["ls"])
        .env_remove("ACCORD_URL")
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("ACCORD_URL"), "{}", stderr(&out));
}

#[test]
fn release_explains_what_to_use_instead() {
    let out = Command::new(BIN)
        .args(["release", "k"])
        .env("ACCORD_URL", "postgres://127.0.0.1:1/unused")
        .output()
        .unwrap();
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("accord run"), "{}", stderr(&out));
}

#[test]
fn help_has_examples_and_exit_codes() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    assert!(help.contains("Examples:"), "{help}");
    assert!(help.contains("Exit codes:"), "{help}");
    let out = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    assert!(stdout(&out).contains("ACCORD_FENCE"));
    let out = Command::new(BIN).args(["work", "--help"]).output().unwrap();
    assert!(stdout(&out).contains("ACCORD_FENCE"));
}

#[test]
fn unreachable_coordinator_is_an_error_not_a_panic() {
    let out = Command::new(BIN)
        .args(["ls"])
        .env(
            "ACCORD_URL",
            "postgres://nobody@127.0.0.1:1/unused?connect_timeout=2",
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("accord: error:"),
        "{}",
        stderr(&out)
    );
}

/// The write end of a pipe whose read end is already closed: every write to it fails with
/// EPIPE, as `accord … 2>&1 | head -1` does once `head` has exited. Close-on-exec, so that no
/// other test's child inherits either end.
fn closed_pipe() -> Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors that this function then owns.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both are fresh descriptors of ours; the read end is closed once, here.
    unsafe {
        libc::close(fds[0]);
        Stdio::from(OwnedFd::from_raw_fd(fds[1]))
    }
}

/// A closed stderr drops accord's messages and log lines (ACCORD_LOG=debug writes some on
/// every run); a closed stdout ends accord quietly with 0. Neither is a panic (exit 101).
#[test]
fn closed_pipes_end_accord_quietly_not_with_a_panic() {
    let env = Env::sqlite("closed-pipes");
    let run = |args: &[&str], stdout: Stdio, stderr: Stdio| {
        env.cmd(args)
            .env("ACCORD_LOG", "debug")
            .stdout(stdout)
            .stderr(stderr)
            .output()
            .unwrap()
    };
    // Messages on stderr: "not known", the log's "connected".
    let out = run(&["reset", "nothing"], Stdio::piped(), closed_pipe());
    assert_eq!(code(&out), 0);
    let out = run(&["run", "k", "--", "true"], Stdio::piped(), closed_pipe());
    assert_eq!(code(&out), 0);
    // An error's message: the exit code is still the error's.
    let out = env
        .cmd(&["ls"])
        .env("ACCORD_URL", "sqlite:relative/path.db")
        .stderr(closed_pipe())
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    // Output nobody reads: quiet, 0, whatever stderr is.
    for args in [&["ls"][..], &["ls", "--json"], &["migrate", "--print-sql"]] {
        let out = run(args, closed_pipe(), Stdio::piped());
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("accord: error") && !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
        let out = run(args, closed_pipe(), closed_pipe());
        assert_eq!(code(&out), 0, "{args:?}");
    }
}

// ---------------------------------------------------------------------------- PostgreSQL

#[test]
fn migrate_connects_and_applies() {
    let env = Env::new("migrate");
    let out = env.run(&["migrate"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn run_passes_fence_and_exit_code_and_releases() {
    let env = Env::new("run");
    let out = env.run(&[
        "run",
        "job/1",
        "--",
        "sh",
        "-c",
        "echo \"$ACCORD_KEY $ACCORD_FENCE\"; exit 7",
    ]);
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    let printed = stdout(&out);
    let mut parts = printed.split_whitespace();
    assert_eq!(parts.next(), Some("job/1"));
    let fence: i64 = parts.next().unwrap().parse().expect("a numeric fence");
    assert!(fence > 0);
    let listed = env.ls(&[]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["state"], "free");
    assert_eq!(listed[0]["fence"], fence);

    // --done marks it done when the command succeeds; then it cannot be acquired (exit 4).
    let out = env.run(&["run", "--done", "job/1", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.state_of("job/1").as_deref(), Some("done"));
    let out = env.run(&["run", "job/1", "--", "true"]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert!(stderr(&out).contains("done"), "{}", stderr(&out));

    // A command that cannot be started: 127, and nothing left held.
    let out = env.run(&["run", "job/2", "--", "/nonexistent/command"]);
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert_eq!(env.state_of("job/2").as_deref(), Some("free"));
}

#[test]
fn acquire_holds_until_ctrl_c_and_run_timeout_0_on_held_key_exits_3() {
    let env = Env::new("acquire");
    let mut holder = env
        .cmd(&[
            "acquire",
            "lock",
            "--ttl",
            "5s",
            "--metadata",
            r#"{"who":"test"}"#,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out_lines = lines_of(holder.stdout.take().unwrap());
    let err_lines = lines_of(holder.stderr.take().unwrap());
    let fence_line = expect_line(&out_lines, "", Duration::from_secs(20));
    let fence: i64 = fence_line.trim().parse().expect("acquire prints the fence");
    expect_line(&err_lines, "holding", Duration::from_secs(5));

    let held = env.ls(&["--state", "held"]);
    assert_eq!(held.len(), 1);
    assert_eq!(held[0]["key"], "lock");
    assert_eq!(held[0]["fence"], fence);
    assert_eq!(held[0]["metadata"]["who"], "test");
    assert!(held[0]["owner"].is_string());
    assert!(held[0]["ttl_left_ms"].as_i64().unwrap() > 0);

    // Exit 3 proves it did not wait: a waiting run would block while the holder renews.
    let out = env.run(&["run", "--timeout", "0", "lock", "--", "true"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("held"), "{}", stderr(&out));

    let out = env.run(&["run", "--timeout", "300ms", "lock", "--", "true"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));

    // Held keys cannot be reset.
    let out = env.run(&["reset", "lock"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));

    // Still held past its first ttl: the keepalive renews it.
    std::thread::sleep(Duration::from_millis(5500));
    assert_eq!(env.state_of("lock").as_deref(), Some("held"));

    signal(&holder, libc::SIGINT);
    let status = wait_within(holder, Duration::from_secs(10));
    assert_eq!(status.status.code(), Some(0));
    assert_eq!(env.state_of("lock").as_deref(), Some("free"));

    let out = env.run(&["run", "--timeout", "0", "lock", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// `accord acquire` waits for a held key without limit, as `accord run` does (it gave up after
/// 10 s with exit 3 where `run` waited on): still in line 11 s after it took its place there,
/// then granted, with a larger fence, once the holder lets go.
#[test]
fn acquire_waits_for_a_held_key_without_limit_as_run_does() {
    let env = Env::new("acquire-waits");
    let mut holder = env
        .cmd(&["acquire", "lock"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let held = lines_of(holder.stdout.take().unwrap());
    let first: i64 = expect_line(&held, "", Duration::from_secs(20))
        .trim()
        .parse()
        .expect("acquire prints the fence");
    let mut waiter = env
        .cmd(&["acquire", "lock"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let granted = lines_of(waiter.stdout.take().unwrap());
    let started = Instant::now();
    while !stdout(&env.run(&["top", "--once", "lock"])).contains("waiting 1") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the waiter never took its place in line"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Past the old default of 10 s: still waiting, and granted nothing.
    std::thread::sleep(Duration::from_secs(11));
    if let Some(status) = waiter.try_wait().unwrap() {
        let out = waiter.wait_with_output().unwrap();
        panic!("accord acquire stopped waiting: {status}; {}", stderr(&out));
    }
    assert!(
        granted.try_recv().is_err(),
        "granted while the key was held"
    );
    signal(&holder, libc::SIGINT);
    assert_eq!(
        wait_within(holder, Duration::from_secs(10)).status.code(),
        Some(0)
    );
    let second: i64 = expect_line(&granted, "", Duration::from_secs(20))
        .trim()
        .parse()
        .expect("acquire prints the fence");
    assert!(second > first, "{second} after {first}");
    signal(&waiter, libc::SIGINT);
    assert_eq!(
        wait_within(waiter, Duration::from_secs(10)).status.code(),
        Some(0)
    );
}

#[test]
fn shared_holders_are_listed_each_and_keep_an_exclusive_run_out() {
    let env = Env::new("shared");
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut holder = env
            .cmd(&["acquire", "config", "--shared", "--ttl", "30s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out_lines = lines_of(holder.stdout.take().unwrap());
        expect_line(&out_lines, "", Duration::from_secs(20));
        holders.push(holder);
    }
    let held = env.ls(&["--state", "held"]);
    assert_eq!(held.len(), 2, "{held:?}");
    assert!(held
        .iter()
        .all(|h| h["shared"] == true && h["key"] == "config"));
    // Another reader gets in at once; a writer does not.
    let out = env.run(&["run", "--shared", "--timeout", "0", "config", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = env.run(&["run", "--timeout", "0", "config", "--", "true"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    // A shared holder cannot finish the key.
    let out = env.run(&["run", "--shared", "--done", "config", "--", "true"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    for holder in holders {
        signal(&holder, libc::SIGINT);
        assert_eq!(
            wait_within(holder, Duration::from_secs(10)).status.code(),
            Some(0)
        );
    }
    let out = env.run(&["run", "--timeout", "0", "config", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn ls_table_json_and_filters_follow_cursors() {
    let env = Env::new("ls");
    for i in 0..5 {
        let key = format!("batch/{i}");
        let meta = format!(
            r#"{{"parity":"{}"}}"#,
            if i % 2 == 0 { "even" } else { "odd" }
        );
        let mut args = vec!["run", key.as_str(), "--metadata", meta.as_str()];
        if i < 2 {
            args.push("--done");
        }
        args.extend_from_slice(&["--", "true"]);
        let out = env.run(&args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let out = env.run(&["run", "other", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // The table.
    let out = env.run(&["ls"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let table = stdout(&out);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    for col in ["KEY", "STATE", "HOLDER", "FENCE", "LEFT", "METADATA"] {
        assert!(header.contains(col), "{header}");
    }
    assert_eq!(lines.count(), 6, "{table}");
    assert!(
        table.contains("batch/0") && table.contains("done"),
        "{table}"
    );
    assert!(table.contains(r#"{"parity":"even"}"#), "{table}");

    // JSON lines and filters.
    assert_eq!(env.ls(&[]).len(), 6);
    assert_eq!(env.ls(&["--prefix", "batch/"]).len(), 5);
    let done = env.ls(&["--state", "done"]);
    assert_eq!(done.len(), 2);
    assert!(done.iter().all(|v| v["done"] == true));
    assert_eq!(env.ls(&["--state", "free"]).len(), 4);
    assert_eq!(env.ls(&["--state", "held"]).len(), 0);
    assert_eq!(env.ls(&["--metadata", r#"{"parity":"odd"}"#]).len(), 2);
    assert_eq!(
        env.ls(&["--metadata", r#"{"parity":"even"}"#, "--state", "free"])
            .len(),
        2
    );
    assert_eq!(env.ls(&["--limit", "4"]).len(), 4);
    // Paging: cursors are followed to the end, or to the limit.
    let paged = env.ls(&["--page-size", "2"]);
    assert_eq!(paged.len(), 6);
    let mut keys: Vec<_> = paged.iter().map(|v| v["key"].to_string()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 6, "no key twice: {paged:?}");
    assert_eq!(env.ls(&["--page-size", "2", "--limit", "5"]).len(), 5);

    // reset: a done key becomes unknown again, then acquirable.
    let out = env.run(&["reset", "batch/0"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.state_of("batch/0"), None);
    let out = env.run(&["run", "--timeout", "0", "batch/0", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn notify_reaches_listen() {
    let env = Env::new("notify");
    let channel = format!("cli-chan-{}", nanos());
    let mut listener = env
        .cmd(&["listen", &channel, "other-chan"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out_lines = lines_of(listener.stdout.take().unwrap());
    let err_lines = lines_of(listener.stderr.take().unwrap());
    expect_line(&err_lines, "listening on", Duration::from_secs(20));

    let out = env.run(&["notify", &channel, "hello world"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = expect_line(&out_lines, "hello", Duration::from_secs(10));
    assert_eq!(line, format!("{channel}\thello world"));

    signal(&listener, libc::SIGINT);
    let out = wait_within(listener, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0));

    // --json
    let mut listener = env
        .cmd(&["listen", "--json", &channel])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out_lines = lines_of(listener.stdout.take().unwrap());
    let err_lines = lines_of(listener.stderr.take().unwrap());
    expect_line(&err_lines, "listening on", Duration::from_secs(20));
    let out = env.run(&["notify", &channel, "tab\there"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = expect_line(&out_lines, "payload", Duration::from_secs(10));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["channel"], channel.as_str());
    assert_eq!(v["payload"], "tab\there");
    signal(&listener, libc::SIGTERM);
    let out = wait_within(listener, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0));
}

/// The quick start on etcd (the command is built with the cargo feature `etcd`): `run` passes
/// the fence, a held key refuses `--timeout 0`, a waiting `run` is granted once the holder
/// lets go (with a larger fence), `--done` and `reset`, `ls`, and `notify` reaches `listen`.
#[test]
fn quick_start_on_etcd() {
    let Some(env) = Env::etcd("etcd") else { return };
    let out = env.run(&[
        "run",
        "job/1",
        "--",
        "sh",
        "-c",
        "echo \"$ACCORD_KEY $ACCORD_FENCE\"",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).starts_with("job/1 "), "{}", stdout(&out));

    let mut holder = env
        .cmd(&["acquire", "lock", "--ttl", "10s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let held = lines_of(holder.stdout.take().unwrap());
    let first: i64 = expect_line(&held, "", Duration::from_secs(20))
        .trim()
        .parse()
        .expect("acquire prints the fence");
    let out = env.run(&["run", "--timeout", "0", "lock", "--", "true"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(env.state_of("lock").as_deref(), Some("held"));
    // Granted once the holder lets go: within the wait's 30 s bound, long before the
    // holder's 10 s ttl would free the key by itself (it renews it).
    let waiter = env
        .cmd(&[
            "run",
            "--timeout",
            "30s",
            "lock",
            "--",
            "sh",
            "-c",
            "echo $ACCORD_FENCE",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    signal(&holder, libc::SIGINT);
    assert_eq!(
        wait_within(holder, Duration::from_secs(10)).status.code(),
        Some(0)
    );
    let out = wait_within(waiter, Duration::from_secs(60));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let second: i64 = stdout(&out).trim().parse().expect("run passes the fence");
    assert!(second > first, "{second} after {first}");

    let out = env.run(&["run", "--done", "job/2", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.state_of("job/2").as_deref(), Some("done"));
    let out = env.run(&["run", "job/2", "--", "true"]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    // reset deletes the key's row: unlisted, and acquirable again.
    let out = env.run(&["reset", "job/2"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.state_of("job/2"), None);
    let out = env.run(&["run", "--timeout", "0", "job/2", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let mut listener = env
        .cmd(&["listen", "jobs"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out_lines = lines_of(listener.stdout.take().unwrap());
    let err_lines = lines_of(listener.stderr.take().unwrap());
    expect_line(&err_lines, "listening on", Duration::from_secs(20));
    let out = env.run(&["notify", "jobs", "report ready"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = expect_line(&out_lines, "report", Duration::from_secs(10));
    assert_eq!(line, "jobs\treport ready");
    signal(&listener, libc::SIGINT);
    assert_eq!(
        wait_within(listener, Duration::from_secs(10)).status.code(),
        Some(0)
    );
}

/// Text lines escape what could forge a line or drive a terminal; the next notification is
/// the next line.
#[test]
fn listen_escapes_control_characters() {
    let env = Env::new("escape");
    let channel = format!("cli-escape-{}", nanos());
    let mut listener = env
        .cmd(&["listen", &channel])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out_lines = lines_of(listener.stdout.take().unwrap());
    let err_lines = lines_of(listener.stderr.take().unwrap());
    expect_line(&err_lines, "listening on", Duration::from_secs(20));
    let forged = format!("a\nb\rc\td\x1b[31me\\f\n{channel}\tforged");
    for payload in [forged.as_str(), "next"] {
        let out = env.run(&["notify", &channel, payload]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let first = out_lines.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        first,
        format!("{channel}\ta\\nb\\rc\\td\\x1b[31me\\\\f\\n{channel}\\tforged")
    );
    let second = out_lines.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(second, format!("{channel}\tnext"));
    signal(&listener, libc::SIGTERM);
    let out = wait_within(listener, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0));
}

/// README's `accord listen` example, run as written by bash: the listener in the background,
/// the wait for its "listening on" line, the notify, which the listener then prints.
#[test]
fn readme_listen_example_is_heard() {
    let env = Env::new("readme-listen");
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let start = readme
        .find("accord listen jobs 2>listen.log &")
        .expect("README's listen example");
    let end = start
        + readme[start..]
            .find("accord notify jobs 'batch 7 finished'")
            .expect("README's notify after the listen example");
    let snippet = &readme[start..end + readme[end..].find('\n').unwrap()];
    let dir = temp_file("readme-listen");
    std::fs::create_dir(&dir).unwrap();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let mut shell = Command::new("bash")
        .arg("-c")
        .arg(format!("{snippet}\necho $! > listener.pid\n"))
        .current_dir(&dir)
        .env("PATH", path)
        .env("ACCORD_URL", &env.url)
        .env("ACCORD_NAMESPACE", &env.namespace)
        .env_remove("ACCORD_OWNER")
        .env_remove("ACCORD_SCHEMA")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out_lines = lines_of(shell.stdout.take().unwrap());
    let status = shell.wait().unwrap();
    let pid: i32 = std::fs::read_to_string(dir.join("listener.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Other tests may notify `jobs` too (channels are not namespaced): look for ours.
    let heard = (|| loop {
        match out_lines.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if line == "jobs\tbatch 7 finished" => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    })();
    // SAFETY: kill(2) on the listener the snippet started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let log = std::fs::read_to_string(dir.join("listen.log")).unwrap_or_default();
    assert!(
        status.success(),
        "the snippet failed: {status}; listen.log: {log}"
    );
    assert!(
        heard,
        "the listener did not print the notification; listen.log: {log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// O1 from the shell: through a PgBouncer in transaction mode `listen` says it cannot hear and
/// names the way out; with ACCORD_LISTEN_URL naming the server directly it hears.
#[test]
fn listen_through_a_transaction_pooler_needs_listen_url() {
    let Ok(pooler) = std::env::var("ACCORD_TEST_PGBOUNCER_TRANSACTION_URL") else {
        assert!(
            std::env::var("ACCORD_TEST_PGDATA").is_err(),
            "the test cluster has no PgBouncer: install it (apt-get install pgbouncer)"
        );
        return;
    };
    let mut env = Env::new("pooler");
    let direct = std::mem::replace(&mut env.url, pooler);
    let channel = format!("cli-pooled-{}", nanos());
    // Every process through the transaction pool sends its statements unprepared.
    let pooled = |args: &[&str]| {
        let mut c = env.cmd(args);
        c.env("ACCORD_PREPARE_STATEMENTS", "false");
        c
    };
    let out = pooled(&["listen", &channel]).output().unwrap();
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).contains("listen_url"), "{}", stderr(&out));

    let mut listener = pooled(&["listen", &channel])
        .env("ACCORD_LISTEN_URL", &direct)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out_lines = lines_of(listener.stdout.take().unwrap());
    let err_lines = lines_of(listener.stderr.take().unwrap());
    expect_line(&err_lines, "listening on", Duration::from_secs(20));
    let out = pooled(&["notify", &channel, "pooled"]).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = expect_line(&out_lines, "pooled", Duration::from_secs(10));
    assert_eq!(line, format!("{channel}\tpooled"));
    signal(&listener, libc::SIGINT);
    let out = wait_within(listener, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn run_forwards_sigterm_to_the_command() {
    let env = Env::new("forward");
    let mut runner = env
        .cmd(&[
            "run",
            "fwd",
            "--",
            "sh",
            "-c",
            "trap 'echo got-term; exit 42' TERM; echo started; while :; do sleep 0.1; done",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out_lines = lines_of(runner.stdout.take().unwrap());
    expect_line(&out_lines, "started", Duration::from_secs(20));
    signal(&runner, libc::SIGTERM);
    let out = wait_within(runner, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(42), "{}", stderr(&out));
    expect_line(&out_lines, "got-term", Duration::from_secs(2));
    assert_eq!(env.state_of("fwd").as_deref(), Some("free"));
}

/// SIGTERM (what Docker and Kubernetes send to a container's first process) makes `acquire`,
/// `run` and `work` give their keys back before they exit. Every ttl is 120 s and every wait is
/// bounded well below it, so only a release passes, never an expiry.
#[test]
fn sigterm_releases_what_acquire_run_and_work_hold() {
    const HANG: Duration = Duration::from_secs(60);
    let env = Env::new("sigterm");
    let mut holder = env
        .cmd(&["acquire", "term/held", "--ttl", "120s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let notes = lines_of(holder.stderr.take().unwrap());
    expect_line(&notes, "holding", HANG);
    let mut runner = env
        .cmd(&[
            "run",
            "term/run",
            "--ttl",
            "120s",
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 300",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kept open until the end: a closed pipe would end accord in its own way (EPIPE).
    let runner_out = lines_of(runner.stdout.take().unwrap());
    expect_line(&runner_out, "started", HANG);
    // Two keys claimed at once: one runs, the other waits its turn in the batch.
    env.offer("term/pool/", "term/pool/a\nterm/pool/b\nterm/pool/c");
    let mut worker = env
        .cmd(&[
            "work",
            "term/pool/",
            "--ttl",
            "120s",
            "--batch",
            "2",
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 300",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let worker_out = lines_of(worker.stdout.take().unwrap());
    expect_line(&worker_out, "started", HANG);
    assert_eq!(env.counts("term/pool/"), (1, 2, 0));

    for child in [&holder, &runner, &worker] {
        signal(child, libc::SIGTERM);
    }
    let out = wait_within(holder, HANG);
    assert_eq!(code(&out), 0, "acquire: {}", stderr(&out));
    assert_eq!(env.state_of("term/held").as_deref(), Some("free"));
    let out = wait_within(runner, HANG);
    assert_eq!(code(&out), 128 + libc::SIGTERM, "run: {}", stderr(&out));
    assert_eq!(env.state_of("term/run").as_deref(), Some("free"));
    let out = wait_within(worker, HANG);
    assert_eq!(code(&out), 143, "work: {}", stderr(&out));
    assert_eq!(
        env.counts("term/pool/"),
        (3, 0, 0),
        "work: {}",
        stderr(&out)
    );
}

/// Starts `accord run KEY --ttl TTL -- sh -c 'echo $$ >PIDFILE; exec sleep 30'` and returns it
/// with the pid of its command once that runs.
#[allow(clippy::zombie_processes)] // returned to the caller, which waits for it
fn start_sleeper(env: &Env, key: &str, ttl: &str) -> (Child, i32) {
    let pidfile = temp_file("pid");
    let script = format!("echo $$ >{}; exec sleep 30", pidfile.display());
    let mut runner = env
        .cmd(&[
            "run",
            key,
            "--ttl",
            ttl,
            "--kill-after",
            "2s",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(&pidfile) {
            if let Ok(pid) = s.trim().parse::<i32>() {
                let _ = std::fs::remove_file(&pidfile);
                return (runner, pid);
            }
        }
        if Instant::now() > deadline {
            let _ = runner.kill();
            let out = runner.wait_with_output().unwrap();
            panic!("the command did not start: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn run_stops_the_command_when_the_lease_is_lost_to_a_stall() {
    let env = Env::new("stall");
    let (runner, child_pid) = start_sleeper(&env, "stalled", "1s");
    // Stall accord past its ttl: it cannot renew, so the lease is lost for real.
    signal(&runner, libc::SIGSTOP);
    // Meanwhile the coordinator lets someone else have the key once it expires (however long
    // that takes here: the wait, not a sleep, decides).
    let out = env.run(&["run", "--timeout", "20s", "stalled", "--", "true"]);
    signal(&runner, libc::SIGCONT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let out = wait_within(runner, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
    assert!(
        !process_exists(child_pid),
        "the command (pid {child_pid}) still runs"
    );
}

#[tokio::test]
async fn run_stops_the_command_when_the_row_expires_underneath() {
    let env = Env::new("expire");
    let (runner, child_pid) = start_sleeper(&env, "expired", "3s");
    let (db, connection) = tokio_postgres::connect(&env.url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let n = db
        .execute(
            "UPDATE accord.leases SET expires_at = clock_timestamp() - interval '1 s' \
             WHERE namespace = $1 AND key = $2",
            &[&env.namespace, &"expired"],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let out = tokio::task::spawn_blocking(move || wait_within(runner, Duration::from_secs(15)))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        !process_exists(child_pid),
        "the command (pid {child_pid}) still runs"
    );
}

/// The command works against any backend URL: the embedded store shared by processes here.
#[test]
fn run_and_ls_on_a_sqlite_store() {
    let path = temp_file("cli-store.db");
    let env = Env {
        url: format!("sqlite://{}", path.display()),
        namespace: format!("cli-sqlite-{}", nanos()),
    };
    // One `run` holds the key while another process tries it once: held (exit 3). The
    // holder's command waits for a file, not a timer, so that a slow machine cannot let it
    // finish before the second try.
    let ready = temp_file("cli-run-ready");
    let go = temp_file("cli-run-go");
    let script = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done",
        ready.display(),
        go.display()
    );
    let holder = env
        .cmd(&["run", "job", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !ready.exists() {
        assert!(
            Instant::now() < until,
            "the first run never started its command"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(env.state_of("job").as_deref(), Some("held"));
    assert_eq!(
        code(&env.run(&["run", "--timeout", "0", "job", "--", "true"])),
        3
    );
    std::fs::write(&go, b"").unwrap();
    let held = wait_within(holder, Duration::from_secs(20));
    assert_eq!(code(&held), 0);
    let out = env.run(&[
        "run",
        "--done",
        "job",
        "--",
        "sh",
        "-c",
        "test -n \"$ACCORD_FENCE\"",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.state_of("job").as_deref(), Some("done"));
    assert_eq!(
        code(&env.run(&["run", "--timeout", "0", "job", "--", "true"])),
        4
    );
}

/// SIGKILL runs no code in accord: its command (PR_SET_PDEATHSIG) and the command's children
/// (the watchdog in the command's process group) must end anyway, instead of running on
/// unsupervised while the lease lapses.
#[test]
fn run_killed_with_sigkill_takes_its_command_and_its_children_along() {
    let env = Env::sqlite("sigkill");
    let (pidfile, childfile) = (temp_file("pid"), temp_file("grandchild"));
    let script = format!(
        "sleep 1000 >/dev/null 2>&1 & echo $! >{}; echo $$ >{}; wait",
        childfile.display(),
        pidfile.display()
    );
    let mut runner = env
        .cmd(&["run", "killed", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let command = read_pid(&pidfile, &mut runner);
    let grandchild = read_pid(&childfile, &mut runner);
    assert!(is_running(command) && is_running(grandchild));
    signal(&runner, libc::SIGKILL);
    let status = runner.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    let left = still_running_after(&[command, grandchild], Duration::from_secs(10));
    kill_leftovers(&left);
    assert!(
        left.is_empty(),
        "still running 10 s after accord was killed: {left:?} (command {command}, its child {grandchild})"
    );
}

/// When the command exits, what it left running in its process group is stopped before the
/// lease is released (it would run on without the lease otherwise).
#[test]
fn run_stops_what_the_command_left_running() {
    let env = Env::sqlite("leftover");
    let childfile = temp_file("grandchild");
    let script = format!(
        "sleep 1000 >/dev/null 2>&1 & echo $! >{}; exit 3",
        childfile.display()
    );
    let runner = env
        .cmd(&["run", "left", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_within(runner, Duration::from_secs(20));
    let grandchild: i32 = std::fs::read_to_string(&childfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = std::fs::remove_file(&childfile);
    let running = is_running(grandchild);
    kill_leftovers(&[grandchild]);
    assert!(
        !running,
        "the command's child {grandchild} still runs after accord exited"
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("left 1 process"), "{}", stderr(&out));
    assert_eq!(env.state_of("left").as_deref(), Some("free"));
}

/// A TCP proxy to PostgreSQL that can be cut: every connection closed, and no new ones
/// accepted (the port refuses them), as when the server goes away.
struct Proxy {
    url: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy for `url` (postgres://user:pass@host:port/db...) and the URL to reach it.
    fn start(url: &str) -> Proxy {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (format!("{u}@"), h),
            None => (String::new(), authority),
        };
        let target = hostport
            .to_socket_addrs()
            .expect("the test database's host:port")
            .next()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let acceptor = {
            let (stop, conns) = (stop.clone(), conns.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let client = match listener.accept() {
                        Ok((c, _)) => c,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                        Err(e) => panic!("proxy accept: {e}"),
                    };
                    client.set_nonblocking(false).unwrap();
                    let Ok(server) = TcpStream::connect(target) else {
                        continue;
                    };
                    let mut list = conns.lock().unwrap();
                    for (mut from, mut to) in [
                        (client.try_clone().unwrap(), server.try_clone().unwrap()),
                        (server.try_clone().unwrap(), client.try_clone().unwrap()),
                    ] {
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut from, &mut to);
                            let _ = to.shutdown(Shutdown::Both);
                        });
                    }
                    list.push(client);
                    list.push(server);
                }
                // The listener is dropped here: the port refuses connections from now on.
            })
        };
        Proxy {
            url: format!("{scheme}://{userinfo}127.0.0.1:{port}{path}"),
            stop,
            conns,
            acceptor: Some(acceptor),
        }
    }

    /// Closes every connection and the port; returns once done.
    fn cut(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            a.join().unwrap();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// The command did its work; only the final release (or done-marking) failed because the
/// coordinator went away meanwhile: `run` exits with the command's code and warns, and the
/// lease lapses at its ttl.
#[test]
fn run_passes_the_command_code_when_only_the_release_fails() {
    let base = Env::new("unreleased");
    for (case, (command_code, done)) in [(0, false), (7, false), (0, true)].into_iter().enumerate()
    {
        let mut proxy = Proxy::start(&base.url);
        let env = Env {
            url: proxy.url.clone(),
            namespace: base.namespace.clone(),
        };
        let key = format!("job/{case}");
        let script = format!("echo started; read line; exit {command_code}");
        let mut args = vec!["run", key.as_str()];
        if done {
            args.push("--done");
        }
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        let mut runner = env
            .cmd(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out_lines = lines_of(runner.stdout.take().unwrap());
        expect_line(&out_lines, "started", Duration::from_secs(20));
        // The coordinator is gone before the command ends (it waits for our line).
        proxy.cut();
        let mut stdin = runner.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        drop(stdin);
        let out = wait_within(runner, Duration::from_secs(60));
        let err = stderr(&out);
        assert_eq!(code(&out), command_code, "case {case}: {err}");
        assert!(err.contains("warning"), "case {case}: {err}");
        let what = if done { "marking" } else { "releasing" };
        assert!(err.contains(what), "case {case}: {err}");
        // The coordinator still has it held, until its ttl.
        assert_eq!(base.state_of(&key).as_deref(), Some("held"), "case {case}");
    }
}

// ------------------------------------------------------------------------------ work pools

impl Env {
    /// `accord offer PREFIX` with `input` on stdin.
    fn offer(&self, prefix: &str, input: &str) -> Output {
        let mut child = self
            .cmd(&["offer", prefix])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        wait_within(child, Duration::from_secs(30))
    }

    /// `accord counts PREFIX --json`: (free, held, done), checked against total.
    fn counts(&self, prefix: &str) -> (u64, u64, u64) {
        let out = self.run(&["counts", prefix, "--json"]);
        assert_eq!(code(&out), 0, "counts failed: {}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
        let n = |f: &str| v[f].as_u64().unwrap_or_else(|| panic!("{f} in {v}"));
        assert_eq!(n("total"), n("free") + n("held") + n("done"), "{v}");
        (n("free"), n("held"), n("done"))
    }
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:02}")).collect()
}

/// The keys a work run wrote to `path`, one line per command run, sorted.
fn lines_written(path: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn offer_reads_stdin_and_counts_say_free_held_done() {
    let env = Env::new("offer");
    let input = format!("{}\n\r\n\n", keys("job/", 5).join("\n"));
    let out = env.offer("job/", &input);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "5");
    assert_eq!(env.counts("job/"), (5, 0, 0));
    // Idempotent: nothing joins twice; one new key does.
    let out = env.offer("job/", "job/00\njob/04\njob/05\n");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "1");
    assert_eq!(env.counts("job/"), (6, 0, 0));
    // A key outside the prefix: the core's refusal, a usage error; nothing joins.
    let out = env.offer("job/", "job/06\nother/1\n");
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("prefix"), "{}", stderr(&out));
    assert_eq!(env.counts("job/"), (6, 0, 0));
    // Plain counts.
    let out = env.run(&["counts", "job/"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("free 6"), "{}", stdout(&out));
}

#[test]
fn work_runs_the_command_once_for_every_key_and_marks_it_done() {
    let env = Env::new("work");
    let all = keys("img/", 30);
    let out = env.offer("img/", &all.join("\n"));
    assert_eq!(stdout(&out).trim(), "30", "{}", stderr(&out));
    let written = temp_file("work-out");
    let runner = env
        .cmd(&[
            "work",
            "img/",
            "-j",
            "3",
            "--batch",
            "4",
            "--",
            "sh",
            "-c",
            "test \"$ACCORD_KEY\" = '{}' && test -n \"$ACCORD_FENCE\" && echo {} >> \"$OUT\"",
        ])
        .env("OUT", &written)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_within(runner, Duration::from_secs(120));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(lines_written(&written), all, "every key exactly once");
    let _ = std::fs::remove_file(&written);
    assert_eq!(env.counts("img/"), (0, 0, 30));
    assert!(stderr(&out).contains("30 done"), "{}", stderr(&out));
    // Nothing left: a watch (not on a terminal) prints one line and ends.
    let out = env.run(&["counts", "img/", "--watch", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    // A second run finds everything done at once.
    let out = env.run(&["work", "img/", "-j", "2", "--", "false"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn work_releases_the_keys_whose_command_failed_and_exits_non_zero() {
    let env = Env::new("work-fail");
    let all = keys("t/", 12);
    env.offer("t/", &all.join("\n"));
    let written = temp_file("work-fail-out");
    // Odd keys fail.
    let out = env
        .cmd(&[
            "work",
            "t/",
            "-j",
            "3",
            "--",
            "sh",
            "-c",
            "echo {} >> \"$OUT\"; case {} in *[13579]) exit 3;; esac",
        ])
        .env("OUT", &written)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_within(out, Duration::from_secs(120));
    assert_eq!(code(&out), 123, "{}", stderr(&out));
    // Each key ran once: a failed key is not taken again by the same run.
    assert_eq!(lines_written(&written), all);
    let _ = std::fs::remove_file(&written);
    assert_eq!(env.counts("t/"), (6, 0, 6));
    for key in &all {
        let odd = key.ends_with(['1', '3', '5', '7', '9']);
        let want = if odd { "free" } else { "done" };
        assert_eq!(env.state_of(key).as_deref(), Some(want), "{key}");
    }
    assert!(stderr(&out).contains("6 failed"), "{}", stderr(&out));
    // A command that cannot be started: 127, the key left free.
    let out = env.run(&["work", "t/", "--", "/nonexistent/command", "{}"]);
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert_eq!(env.counts("t/"), (6, 0, 6));
}

#[test]
fn publish_subscribe_and_retention() {
    let env = Env::new("streams");
    // One event from the arguments, then one per stdin line.
    let out = env.run(&["publish", "orders", "first"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "1");
    let mut publisher = env
        .cmd(&["publish", "orders"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    publisher
        .stdin
        .take()
        .unwrap()
        .write_all("second\ntab\there\n🦀\n".as_bytes())
        .unwrap();
    let out = wait_within(publisher, Duration::from_secs(20));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "2\n3\n4\n");

    // A named consumer prints JSON lines and resumes after what it printed.
    let read = |extra: &[&str]| {
        let mut args = vec!["subscribe", "orders"];
        args.extend_from_slice(extra);
        let out = env.run(&args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
            .collect::<Vec<_>>()
    };
    let events = read(&["--from", "earliest", "--consumer", "c1", "--count", "2"]);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["seq"], 1);
    assert_eq!(events[0]["payload"], "first");
    assert_eq!(events[0]["stream"], "orders");
    assert!(events[0]["published_at"].as_str().unwrap().ends_with('Z'));
    let events = read(&["--consumer", "c1", "--count", "2"]);
    assert_eq!(events[0]["seq"], 3);
    assert_eq!(events[0]["payload"], "tab\there");
    assert_eq!(events[1]["payload"], "🦀");
    let events = read(&["--from", "1", "--count", "1"]);
    assert_eq!(events[0]["seq"], 2);

    // Retention: the info, a trim, and a subscriber asking for trimmed events exits 6.
    let out = env.run(&["stream", "orders", "--max-len", "2"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(info["first_seq"], 3);
    assert_eq!(info["last_seq"], 4);
    assert_eq!(info["max_len"], 2);
    let out = env.run(&["subscribe", "orders", "--from", "0", "--count", "1"]);
    assert_eq!(code(&out), 6, "{}", stderr(&out));
    assert!(stderr(&out).contains("starts at seq 3"), "{}", stderr(&out));
    let out = env.run(&["subscribe", "orders", "--from", "-1"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
}

// ------------------------------------------------------------------------ escaped output

/// Names as hostile workers could choose them: a terminal retitle, bell and screen wipe; a
/// newline; a right-to-left override; zero-width and line-separator characters; a C1 CSI.
const EVIL_KEY: &str = "k\x1b]0;T\x07\x1b[2J";
const NEWLINE_KEY: &str = "line\nbreak";
const RTL_KEY: &str = "rtl\u{202e}txt.exe";
const ZERO_WIDTH_KEY: &str = "zero\u{200b}width\u{2028}sep";
const EVIL_OWNER: &str = "o\x1b[31m\u{202e}\x07";
const EVIL_METADATA: &str = r#"{"m":"v\u001b[2J\u202e\u009b\u200d"}"#;

/// Characters that must never reach a terminal raw: every control character but the line
/// ends and tabs accord writes itself, format characters (U+200B..U+200F, U+202A..U+202E,
/// U+2060..U+206F, U+FEFF, U+00AD) and the line and paragraph separators.
fn raw_hazard(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}')
        || matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}' | '\u{ad}')
}

/// Asserts that neither stdout nor stderr of `out` holds a hazard; returns stdout.
fn assert_escaped(what: &str, out: &Output) -> String {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let text = String::from_utf8(bytes.clone()).expect("UTF-8 output");
        let raw: Vec<char> = text.chars().filter(|&c| raw_hazard(c)).collect();
        assert!(raw.is_empty(), "{what}: raw {raw:?} on {stream}: {text:?}");
    }
    stdout(out)
}

/// Every command that prints a name, value or payload escapes it (docs/semantics.md, "What
/// the CLI prints"): keys, holders and metadata in `ls`, `ls --json` and `top --once`; the
/// notes and errors that echo a key; a stream's name, consumer and payloads.
#[test]
fn hostile_names_never_reach_the_terminal_raw() {
    let env = Env::new("hostile");
    let mut holder = env
        .cmd(&[
            "--owner",
            EVIL_OWNER,
            "acquire",
            EVIL_KEY,
            "--ttl",
            "60s",
            "--metadata",
            EVIL_METADATA,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let fence = lines_of(holder.stdout.take().unwrap());
    let holder_notes = lines_of(holder.stderr.take().unwrap());
    expect_line(&fence, "", Duration::from_secs(30));
    let note = expect_line(&holder_notes, "holding", Duration::from_secs(30));
    assert!(!note.chars().any(raw_hazard), "{note:?}");
    for (key, done) in [
        (NEWLINE_KEY, false),
        (RTL_KEY, true),
        (ZERO_WIDTH_KEY, false),
    ] {
        let mut args = vec!["run", key, "--", "true"];
        if done {
            args.insert(1, "--done");
        }
        let out = env.run(&args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_escaped("run", &out);
    }

    // ls: one row per key, the names escaped as `printf '%b'` reads them back.
    let table = assert_escaped("ls", &env.run(&["ls"]));
    assert_eq!(table.lines().count(), 1 + 4, "{table}");
    for escaped in [
        "k\\x1b]0;T\\x07\\x1b[2J",
        "line\\nbreak",
        "rtl\\u202etxt.exe",
        "zero\\u200bwidth\\u2028sep",
        "o\\x1b[31m\\u202e\\x07",
    ] {
        assert!(table.contains(escaped), "{escaped} in {table}");
    }
    // ls --json: the values exact once parsed, nothing raw in the text.
    let json = assert_escaped("ls --json", &env.run(&["ls", "--json"]));
    let rows: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    for key in [EVIL_KEY, NEWLINE_KEY, RTL_KEY, ZERO_WIDTH_KEY] {
        assert!(keys.contains(&key), "{key:?} in {keys:?}");
    }
    let held = rows.iter().find(|r| r["key"] == EVIL_KEY).unwrap();
    assert_eq!(held["owner"], EVIL_OWNER);
    assert_eq!(held["metadata"]["m"], "v\x1b[2J\u{202e}\u{9b}\u{200d}");

    // top --once: the same, as plain tables (cells split on whitespace).
    let once = assert_escaped("top --once", &env.run(&["top", "--once"]));
    let rows: Vec<&str> = once.lines().skip(2).take_while(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 4, "{once}");
    let evil = rows
        .iter()
        .find(|l| l.starts_with("k\\x1b]0;T\\x07\\x1b[2J "))
        .unwrap_or_else(|| panic!("the held key's row in {once}"));
    assert!(evil.contains(" o\\x1b[31m\\u202e\\x07 "), "{evil}");
    assert!(evil.ends_with("m=v\\x1b[2J\\u202e\\u009b\\u200d"), "{evil}");
    assert!(
        rows.iter().any(|l| l.starts_with("line\\nbreak ")),
        "{once}"
    );

    // An error and a note that echo the key.
    let out = env.run(&["run", "--timeout", "0", EVIL_KEY, "--", "true"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_escaped("run on a held key", &out);
    assert_escaped("reset", &env.run(&["reset", RTL_KEY]));

    // Streams: the payload and the consumer's name, in JSON lines and in top's table.
    let stream = "s\x1b]0;T\x07";
    let out = env.run(&["publish", stream, "pay\x1b[2J\u{202e}load\u{85}"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_escaped("publish", &out);
    let out = env.run(&[
        "subscribe",
        stream,
        "--from",
        "earliest",
        "--consumer",
        EVIL_OWNER,
        "--count",
        "1",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = assert_escaped("subscribe", &out);
    let event: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(event["payload"], "pay\x1b[2J\u{202e}load\u{85}");
    assert_eq!(event["stream"], stream);
    assert_escaped("stream", &env.run(&["stream", stream]));
    let once = assert_escaped("top --once", &env.run(&["top", "--once"]));
    assert!(
        once.contains("s\\x1b]0;T\\x07 ") && once.contains(" o\\x1b[31m\\u202e\\x07 "),
        "{once}"
    );

    signal(&holder, libc::SIGTERM);
    let out = wait_within(holder, Duration::from_secs(20));
    assert_eq!(code(&out), 0);
    let released = expect_line(&holder_notes, "released", Duration::from_secs(10));
    assert!(!released.chars().any(raw_hazard), "{released:?}");
}

/// `listen` escapes format characters in payloads too, and its JSON lines keep them exact
/// without writing them raw.
#[test]
fn listen_escapes_format_characters_in_text_and_json() {
    let env = Env::new("listen-format");
    let channel = format!("cli-format-{}", nanos());
    let payload = "a\u{202e}b\u{200b}c\u{2028}d\u{9b}e\x07";
    for json in [false, true] {
        let mut args = vec!["listen", channel.as_str()];
        if json {
            args.push("--json");
        }
        let mut listener = env
            .cmd(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out_lines = lines_of(listener.stdout.take().unwrap());
        let err_lines = lines_of(listener.stderr.take().unwrap());
        expect_line(&err_lines, "listening on", Duration::from_secs(20));
        assert_eq!(code(&env.run(&["notify", &channel, payload])), 0);
        let line = out_lines.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(!line.chars().any(raw_hazard), "{line:?}");
        if json {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["payload"], payload);
        } else {
            assert_eq!(
                line,
                format!("{channel}\ta\\u202eb\\u200bc\\u2028d\\u009be\\x07")
            );
        }
        signal(&listener, libc::SIGTERM);
        assert_eq!(
            wait_within(listener, Duration::from_secs(10)).status.code(),
            Some(0)
        );
    }
}

/// A new print site that bypassed output.rs (std::io::stdout or stderr called elsewhere) fails
/// clippy (cli/clippy.toml); this keeps that rule in place: the lint configured, and allowed
/// nowhere but in output.rs.
#[test]
fn only_output_rs_writes_to_stdout_and_stderr() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let clippy =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/clippy.toml")).unwrap();
    for path in ["std::io::stdout", "std::io::stderr"] {
        assert!(
            clippy.contains(&format!("path = \"{path}\"")),
            "clippy.toml disallows {path}"
        );
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            if name != "output.rs" {
                for banned in ["disallowed_methods", "print_stdout", "print_stderr"] {
                    assert!(
                        !(code.contains("allow(") && code.contains(banned)),
                        "{name}:{}: only output.rs may allow {banned}: {line}",
                        n + 1
                    );
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------ subscribe

/// The `accord subscribe … --consumer billing` example of `source`, as written: the words after
/// `accord`, up to its comment.
fn subscribe_example(source: &str, text: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| l.contains("accord subscribe orders") && l.contains("--consumer billing"))
        .unwrap_or_else(|| panic!("{source}: no `accord subscribe orders … --consumer billing`"));
    let command = line.split('#').next().unwrap();
    let words: Vec<String> = command.split_whitespace().map(String::from).collect();
    let at = words.iter().position(|w| w == "accord").unwrap();
    words[at + 1..].to_vec()
}

/// The documented `accord subscribe orders … --consumer billing` (README, cli/README, `accord
/// --help`), run as written, printed and acked 3 events; run again, as a restarted service
/// would be, it resumes after them instead of replaying the stream.
#[test]
fn documented_subscribe_examples_resume_after_a_restart() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let sources = [
        (
            "README.md",
            std::fs::read_to_string(format!("{root}/README.md")).unwrap(),
        ),
        (
            "cli/README.md",
            std::fs::read_to_string(format!("{root}/cli/README.md")).unwrap(),
        ),
        ("accord --help", stdout(&help)),
    ];
    for (source, text) in sources {
        let args = subscribe_example(source, &text);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env = Env::new("sub-example");
        let publish = |payload: &str| {
            let out = env.run(&["publish", "orders", payload]);
            assert_eq!(code(&out), 0, "{}", stderr(&out));
        };
        // Until Ctrl-C, as the example runs; the seqs of the first `n` lines.
        let run = |n: usize| -> Vec<i64> {
            let mut child = env
                .cmd(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let lines = lines_of(child.stdout.take().unwrap());
            let seqs = (0..n)
                .map(|_| {
                    let line = lines
                        .recv_timeout(Duration::from_secs(20))
                        .unwrap_or_else(|_| {
                            panic!(
                                "{source}: `accord {}` printed too few lines",
                                args.join(" ")
                            )
                        });
                    let event: serde_json::Value = serde_json::from_str(&line).unwrap();
                    event["seq"].as_i64().unwrap()
                })
                .collect();
            // Each line is acked before the next event is awaited, and Ctrl-C is only taken
            // there: every printed line is acked when it exits.
            signal(&child, libc::SIGINT);
            let out = wait_within(child, Duration::from_secs(20));
            assert_eq!(code(&out), 0, "{source}: {}", stderr(&out));
            seqs
        };
        for p in ["a", "b", "c"] {
            publish(p);
        }
        assert_eq!(run(3), [1, 2, 3], "{source}: the first run");
        publish("d");
        assert_eq!(
            run(1),
            [4],
            "{source}: `accord {}` run again replayed the stream instead of resuming",
            args.join(" ")
        );
    }
}

// ------------------------------------------------------------------------- closed readers

/// A reader that goes away (EPIPE) ends every printing command quietly with 0, as Unix tools
/// do: commands with one answer, `top --once` among them, and the streaming `subscribe` and
/// `listen` once their next line finds the pipe closed. A real pipe whose read end is closed,
/// and the shell's `| head -1` with pipefail over output larger than a pipe holds.
#[test]
fn closed_readers_end_every_printing_command_with_0() {
    let env = Env::new("epipe");
    // Long keys: top's and ls's tables are larger than a pipe's buffer (64 KiB).
    let keys: String = (0..1001)
        .map(|i| format!("pipe/{i:05}-{}\n", "x".repeat(90)))
        .collect();
    let mut offer = env
        .cmd(&["offer", "pipe/"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    offer
        .stdin
        .take()
        .unwrap()
        .write_all(keys.as_bytes())
        .unwrap();
    assert_eq!(code(&wait_within(offer, Duration::from_secs(60))), 0);
    assert_eq!(code(&env.run(&["publish", "s", "one"])), 0);

    for args in [
        &["top", "--once"][..],
        &["ls"],
        &["ls", "--json"],
        &["counts", "pipe/"],
        &["stream", "s"],
        &["publish", "s", "two"],
        &["subscribe", "s", "--from", "earliest", "--consumer", "gone"],
    ] {
        let out = env
            .cmd(args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("error"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // The subscriber's event was not delivered, so not acked: the consumer starts over.
    let out = env.run(&[
        "subscribe",
        "s",
        "--consumer",
        "gone",
        "--from",
        "earliest",
        "--count",
        "1",
    ]);
    assert!(stdout(&out).contains("\"seq\":1"), "{}", stdout(&out));

    // As a shell runs them, `set -o pipefail` making accord's exit the pipeline's.
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    for pipeline in ["accord top --once | head -1", "accord ls | head -1"] {
        let out = Command::new("bash")
            .args(["-c", &format!("set -o pipefail; {pipeline}")])
            .env("PATH", &path)
            .env("ACCORD_URL", &env.url)
            .env("ACCORD_NAMESPACE", &env.namespace)
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{pipeline}: {}", stderr(&out));
        assert_eq!(stdout(&out).lines().count(), 1, "{pipeline}");
        assert!(stderr(&out).is_empty(), "{pipeline}: {}", stderr(&out));
    }

    // Streaming: the next line finds the pipe closed.
    let mut subscriber = env
        .cmd(&["subscribe", "live"])
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let notes = lines_of(subscriber.stderr.take().unwrap());
    expect_line(&notes, "reading", Duration::from_secs(20));
    assert_eq!(code(&env.run(&["publish", "live", "x"])), 0);
    assert_eq!(code(&wait_within(subscriber, Duration::from_secs(20))), 0);

    let channel = format!("cli-epipe-{}", nanos());
    let mut listener = env
        .cmd(&["listen", &channel])
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let notes = lines_of(listener.stderr.take().unwrap());
    expect_line(&notes, "listening on", Duration::from_secs(20));
    assert_eq!(code(&env.run(&["notify", &channel, "x"])), 0);
    assert_eq!(code(&wait_within(listener, Duration::from_secs(20))), 0);
}

/// One holder as `accord ls --state held --json` and the view `holders` show it.
#[derive(Debug, PartialEq)]
struct Holding {
    key: String,
    shared: bool,
    owner: String,
    fence: i64,
    metadata: serde_json::Value,
}

/// Holds a mix in `env`'s namespace: an exclusive holder with metadata, two shared holders of
/// one key, a key finished and one released. The handles keep the grants alive.
async fn hold_a_mix(env: &Env) -> (Vec<accord::Client>, Vec<accord::Lease>) {
    use accord::{AcquireOptions, Client, ClientOptions};
    let mut clients = Vec::new();
    for owner in ["w-a", "w-b"] {
        let options = ClientOptions::new()
            .namespace(env.namespace.clone())
            .owner(owner)
            .ttl(Duration::from_secs(60));
        clients.push(Client::connect(&env.url, options).await.unwrap());
    }
    let (a, b) = (&clients[0], &clients[1]);
    let mut meta = accord::Metadata::new();
    meta.insert("host".into(), "n1".into());
    let mut leases = vec![a
        .acquire("job/1", AcquireOptions::new().metadata(meta))
        .await
        .unwrap()];
    for c in [a, b] {
        leases.push(
            c.acquire("config", AcquireOptions::new().shared(true))
                .await
                .unwrap(),
        );
    }
    let done = b.acquire("job/2", AcquireOptions::new()).await.unwrap();
    done.done(None).await.unwrap();
    let free = b.acquire("job/3", AcquireOptions::new()).await.unwrap();
    free.release().await.unwrap();
    (clients, leases)
}

/// `accord ls --state held --json`, as holdings in its order (key, then fence).
fn held_by_ls(env: &Env) -> Vec<(Holding, String)> {
    env.ls(&["--state", "held"])
        .into_iter()
        .map(|v| {
            (
                Holding {
                    key: v["key"].as_str().unwrap().to_string(),
                    shared: v["shared"].as_bool().unwrap(),
                    owner: v["owner"].as_str().unwrap().to_string(),
                    fence: v["fence"].as_i64().unwrap(),
                    metadata: v["metadata"].clone(),
                },
                v["expires_at"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The view lists what `ls --state held` lists, row for row; each expiry is the one `ls` read
/// or a later one (a renewal may come in between).
fn assert_view_matches_ls(view: Vec<(Holding, String)>, ls: Vec<(Holding, String)>) {
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).unwrap();
    assert_eq!(
        view.iter().map(|(h, _)| h).collect::<Vec<_>>(),
        ls.iter().map(|(h, _)| h).collect::<Vec<_>>()
    );
    for ((_, seen), (_, listed)) in view.iter().zip(&ls) {
        assert!(parse(seen) >= parse(listed), "{seen} before {listed}");
    }
    let keys: Vec<(&str, bool)> = ls.iter().map(|(h, _)| (h.key.as_str(), h.shared)).collect();
    assert_eq!(
        keys,
        [("config", true), ("config", true), ("job/1", false)],
        "the mix as held"
    );
}

/// "Who holds what, from psql": `accord.holders` lists what `accord ls --state held` does, row
/// for row: the exclusive holder, each shared holder (a ticket), and neither a grant nor a
/// shared holder whose expiry passed, a finished key or a released one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_view_matches_ls_held() {
    let env = Env::new("holders");
    let (clients, _leases) = hold_a_mix(&env).await;
    let (admin, connection) = tokio_postgres::connect(&env.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    // Grants whose expiry passed, of holders that went away without a word.
    admin
        .execute(
            "INSERT INTO accord.leases (namespace, key, owner, fence, attempt, expires_at,
                                        metadata, updated_at, granted_at)
             VALUES ($1, 'gone', 'w-gone', nextval('accord.fence_seq'), 1,
                     now() - interval '1 s', '{}', now(), now() - interval '2 s')",
            &[&env.namespace],
        )
        .await
        .unwrap();
    admin
        .execute(
            "INSERT INTO accord.tickets (namespace, key, ticket, owner, shared, attempt, granted,
                                         fence, expires_at, metadata, updated_at, granted_at)
             SELECT $1, 'config', f, 'w-gone', true, 1, true, f, now() - interval '1 s', '{}',
                    now(), now() - interval '2 s'
               FROM nextval('accord.fence_seq') f",
            &[&env.namespace],
        )
        .await
        .unwrap();
    let ls = held_by_ls(&env);
    let rows = admin
        .query(
            "SELECT key, shared, owner, fence, metadata::text, expires_at
               FROM accord.holders WHERE namespace = $1 ORDER BY key, fence",
            &[&env.namespace],
        )
        .await
        .unwrap();
    let view = rows
        .iter()
        .map(|r| {
            (
                Holding {
                    key: r.get(0),
                    shared: r.get(1),
                    owner: r.get(2),
                    fence: r.get(3),
                    metadata: serde_json::from_str(r.get(4)).unwrap(),
                },
                r.get::<_, chrono::DateTime<chrono::Utc>>(5).to_rfc3339(),
            )
        })
        .collect();
    assert_view_matches_ls(view, ls);
    for client in clients {
        client.close().await;
    }
}

/// The same view in the embedded store's file, for sqlite3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_view_matches_ls_held_on_a_sqlite_store() {
    let env = Env::sqlite("holders");
    let (clients, _leases) = hold_a_mix(&env).await;
    let db = rusqlite::Connection::open(env.url.trim_start_matches("sqlite://")).unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    db.execute(
        "INSERT INTO leases (namespace, key, owner, fence, attempt, expires_at_ms, metadata,
                             updated_at_ms, granted_at_ms)
         VALUES (?1, 'gone', 'w-gone', 1000001, 1, ?2, '{}', ?2, ?2)",
        rusqlite::params![env.namespace, now - 1000],
    )
    .unwrap();
    db.execute(
        "INSERT INTO tickets (namespace, key, ticket, owner, shared, attempt, granted, fence,
                              expires_at_ms, metadata, updated_at_ms, granted_at_ms)
         VALUES (?1, 'config', 1000002, 'w-gone', 1, 1, 1, 1000002, ?2, '{}', ?2, ?2)",
        rusqlite::params![env.namespace, now - 1000],
    )
    .unwrap();
    let ls = held_by_ls(&env);
    let mut query = db
        .prepare(
            "SELECT key, shared, owner, fence, metadata, expires_at
               FROM holders WHERE namespace = ?1 ORDER BY key, fence",
        )
        .unwrap();
    let view = query
        .query_map([&env.namespace], |r| {
            Ok((
                Holding {
                    key: r.get(0)?,
                    shared: r.get(1)?,
                    owner: r.get(2)?,
                    fence: r.get(3)?,
                    metadata: serde_json::from_str(&r.get::<_, String>(4)?).unwrap(),
                },
                r.get(5)?,
            ))
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_view_matches_ls(view, ls);
    for client in clients {
        client.close().await;
    }
}
