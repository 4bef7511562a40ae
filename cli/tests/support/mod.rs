//! What the CLI's test files share: a namespace of a test's own with the command pointed at it,
//! children killed when dropped, and the spawn-and-wait steps (a child's output read line by
//! line, with a bound).

// Each test file uses a part of this module; the rest would warn in that file's build.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_accord");

/// How long a child may take to print what it promised: a bound that catches hangs.
pub const BOUND: Duration = Duration::from_secs(30);

/// A namespace of its own for one test, and the command pointed at it.
pub struct Env {
    pub url: String,
    pub namespace: String,
}

impl Env {
    /// On the PostgreSQL named by `ACCORD_TEST_DATABASE_URL`.
    pub fn new(test: &str) -> Env {
        let url = std::env::var("ACCORD_TEST_DATABASE_URL").expect(
            "ACCORD_TEST_DATABASE_URL is not set: run the tests with `make test` \
             (or scripts/with-postgres.sh cargo test -p accord-coord-cli)",
        );
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Env {
            url,
            namespace: format!("cli-{test}-{}-{nanos}", std::process::id()),
        }
    }

    /// The same on an embedded SQLite file of this test's own (processes share it).
    pub fn sqlite(test: &str) -> Env {
        let mut env = Env::new(test);
        env.url = format!(
            "sqlite://{}/{}.db",
            std::env::temp_dir().display(),
            env.namespace
        );
        env
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .env("ACCORD_URL", &self.url)
            .env("ACCORD_NAMESPACE", &self.namespace)
            .env_remove("ACCORD_OWNER")
            .env_remove("ACCORD_SCHEMA");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run accord")
    }

    /// Runs the command to its end, which must be 0; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        succeeded(args, self.run(args))
    }

    /// Runs the command with `input` on its stdin to its end, which must be 0; its stdout.
    pub fn ok_with_stdin(&self, args: &[&str], input: &str) -> String {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run accord");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        succeeded(args, child.wait_with_output().unwrap())
    }

    /// Starts the command and waits for the first line of its stdout (an `acquire`'s fence:
    /// then it holds); the child runs until the guard is dropped.
    pub fn until_first_line(&self, args: &[&str]) -> (Guard, String) {
        let mut child = self
            .cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run accord");
        let lines = lines_of(child.stdout.take().unwrap());
        let guard = Guard(child);
        let line = expect_line(&lines, "", BOUND);
        (guard, line)
    }

    /// Starts the command and waits for a line of its stderr containing `contains` (a server's
    /// "serving …", a listener's "listening on …"). Also returns the rest of its stderr and
    /// its stdout, line by line.
    pub fn until_noted(&self, args: &[&str], contains: &str) -> Started {
        let mut child = self
            .cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run accord");
        let stderr = lines_of(child.stderr.take().unwrap());
        let stdout = lines_of(child.stdout.take().unwrap());
        let guard = Guard(child);
        let line = expect_line(&stderr, contains, BOUND);
        Started {
            child: guard,
            line,
            stderr,
            stdout,
        }
    }

    /// `accord top --prometheus 127.0.0.1:0 PREFIX`, once it serves: the server and its
    /// `host:port`.
    pub fn metrics_server(&self, prefix: &str) -> (Guard, String) {
        let started = self.until_noted(
            &["top", "--prometheus", "127.0.0.1:0", prefix],
            "serving http://",
        );
        let addr = started
            .line
            .split("http://")
            .nth(1)
            .and_then(|r| r.strip_suffix("/metrics"))
            .expect("the address")
            .to_string();
        (started.child, addr)
    }
}

fn succeeded(args: &[&str], out: Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "accord {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A child started by [`Env::until_noted`]: the line it noted, and its output after it.
pub struct Started {
    pub child: Guard,
    pub line: String,
    pub stderr: mpsc::Receiver<String>,
    pub stdout: mpsc::Receiver<String>,
}

/// Kills the child when dropped (a failed assertion must not leave a holder running).
pub struct Guard(pub Child);

impl Guard {
    /// Sends `signal` to the child.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on a child we have not reaped.
        let r = unsafe { libc::kill(self.0.id() as libc::pid_t, signal) };
        assert_eq!(r, 0, "kill({}, {signal})", self.0.id());
    }

    /// Waits for the child to end, within `limit` (a bound that catches hangs).
    pub fn exit_within(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the child did not end within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lines of a child's pipe, read on a thread.
pub fn lines_of(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first line containing `contains` within `within`; panics with what was seen otherwise.
pub fn expect_line(rx: &mpsc::Receiver<String>, contains: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(contains) => return line,
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    panic!("no line containing {contains:?} within {within:?}; saw {seen:?}");
}

/// One HTTP/1.1 GET: the status line and the body.
pub fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the metrics address");
    stream.set_read_timeout(Some(BOUND)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.lines().next().unwrap_or("").to_string();
    if head.to_ascii_lowercase().contains("content-length") {
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap();
        assert_eq!(len, body.len(), "Content-Length matches the body");
    }
    (status, body.to_string())
}

/// The value of the sample line that starts with `series ` (name and labels).
pub fn sample(body: &str, series: &str) -> f64 {
    try_sample(body, series).unwrap_or_else(|| panic!("no sample {series} in:\n{body}"))
}

/// The same, `None` when the body has no such sample.
pub fn try_sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map(|v| v.parse().unwrap())
}
