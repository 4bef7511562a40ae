//! The conformance suite on the embedded store (`sqlite:` and `memory:`), and what only a
//! store shared by processes through a file can show: exclusion, notifications and lost
//! signals across processes. Worker processes are this test binary started again with
//! `ACCORD_EMBEDDED_WORKER` set.

mod conformance;
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use accord::{AcquireOptions, Client, ClientOptions, Event};
use support::Harness;

mod sqlite {
    use super::*;
    conformance_suite!(Harness::sqlite, has [pools, streams, snapshot]);
}

mod memory {
    use super::*;
    conformance_suite!(Harness::memory, has [pools, streams, snapshot]);
}

/// Entry point of worker processes; a no-op in a normal run.
#[test]
fn embedded_worker() {
    let Ok(mode) = std::env::var("ACCORD_EMBEDDED_WORKER") else {
        return;
    };
    let url = std::env::var("ACCORD_EMBEDDED_URL").unwrap();
    let namespace = std::env::var("ACCORD_EMBEDDED_NAMESPACE").unwrap();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move {
            let client = Client::connect(
                &url,
                ClientOptions::new()
                    .namespace(namespace)
                    .ttl(Duration::from_secs(1)),
            )
            .await
            .unwrap();
            match mode.as_str() {
                // Rounds of acquire → critical section → release. The section creates a
                // sentinel file with O_EXCL: two holders at once would fail to.
                "contend" => {
                    let sentinel = std::env::var("ACCORD_EMBEDDED_SENTINEL").unwrap();
                    for _ in 0..100 {
                        let lease = client
                            .acquire(
                                "shared",
                                AcquireOptions::new().timeout(Duration::from_secs(30)),
                            )
                            .await
                            .unwrap();
                        let created = std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .open(&sentinel);
                        if created.is_err() {
                            println!("VIOLATION");
                            std::process::exit(3);
                        }
                        tokio::time::sleep(Duration::from_micros(500)).await;
                        std::fs::remove_file(&sentinel).unwrap();
                        lease.release().await.unwrap();
                    }
                    println!("OK");
                }
                "notify" => {
                    client
                        .notify("cross", &format!("{}", now_us()))
                        .await
                        .unwrap();
                }
                // Holds "held" until its lost signal fires (the parent stops this process past
                // the ttl, then resumes it), and reports whether it did. No timer ends the
                // hold: 30 s only bounds a signal that never comes.
                "hold" => {
                    let lease = client.acquire("held", AcquireOptions::new()).await.unwrap();
                    println!("HELD {}", lease.fence());
                    // Stop here, right after the grant: its first renewal is a third of the
                    // ttl away, so no SQLite transaction of this process is open while it is
                    // stopped (a stop sent from outside could land inside one and hold the
                    // store's write lock).
                    unsafe { libc::raise(libc::SIGSTOP) };
                    let fired = tokio::time::timeout(Duration::from_secs(30), lease.lost())
                        .await
                        .is_ok();
                    println!("LOST {fired}");
                }
                // A member of "g" waiting in line for "busy" (held by the parent), which says
                // READY once queued and is then killed with SIGKILL.
                "join_and_wait" => {
                    let _member = client.join("g", accord::JoinOptions::new()).await.unwrap();
                    let waiter = tokio::spawn({
                        let client = client.clone();
                        async move {
                            client
                                .acquire(
                                    "busy",
                                    AcquireOptions::new().timeout(Duration::from_secs(60)),
                                )
                                .await
                        }
                    });
                    while client.queued_count() == 0 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    println!("READY");
                    let _ = waiter.await;
                }
                other => panic!("unknown worker mode {other}"),
            }
            client.close().await;
        });
}

fn now_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

fn worker(h: &Harness, mode: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "embedded_worker",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("ACCORD_EMBEDDED_WORKER", mode)
    .env("ACCORD_EMBEDDED_URL", &h.url)
    .env("ACCORD_EMBEDDED_NAMESPACE", &h.tag)
    .stdout(Stdio::piped());
    cmd
}

fn lines(child: &mut std::process::Child) -> impl Iterator<Item = String> {
    BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            ["OK", "VIOLATION", "HELD", "LOST", "READY"]
                .iter()
                .find_map(|w| l.find(w).map(|i| l[i..].to_string()))
        })
}

/// G1 across processes: four processes × 100 rounds on one key of one SQLite file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_exclusion_across_processes() {
    let h = Harness::sqlite("xproc").await;
    drop(h.client("setup").await); // the schema exists before four processes race for it
    let sentinel = std::env::temp_dir().join(format!("accord-tests/{}.sentinel", h.tag));
    let mut children: Vec<_> = (0..4)
        .map(|_| {
            worker(&h, "contend")
                .env("ACCORD_EMBEDDED_SENTINEL", &sentinel)
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        let said: Vec<String> = lines(child).collect();
        assert!(child.wait().unwrap().success(), "a worker failed: {said:?}");
        assert_eq!(said, ["OK"]);
    }
}

/// G8 across processes: notifications from another process arrive (a few ms each here; the
/// bound asserted is only generous enough to catch a poller that stopped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_notifications_across_processes() {
    let h = Harness::sqlite("xnotify").await;
    let client = h.client("listener").await;
    let sub = client.listen(["cross"]).await.unwrap();
    let mut latencies = Vec::new();
    for _ in 0..5 {
        assert!(worker(&h, "notify").status().unwrap().success());
        match tokio::time::timeout(Duration::from_secs(10), sub.recv()).await {
            Ok(Ok(Some(Event::Message(m)))) => {
                let sent: u128 = m.payload.parse().unwrap();
                latencies.push((now_us() - sent) / 1000);
            }
            other => panic!("expected the notification, got {other:?}"),
        }
    }
    latencies.sort_unstable();
    eprintln!("sqlite cross-process notify latency (ms): {latencies:?}");
    // Delivery is polled every 5 ms; a generous bound catches a listener that stopped.
    assert!(latencies[2] < 1000, "median latency {} ms", latencies[2]);
}

/// G4 on SQLite: a holder stopped (SIGSTOP) past its ttl loses the key to another process's
/// waiter, and sees lost once resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_stalled_holder_loses_before_takeover() {
    let h = Harness::sqlite("xstall").await;
    let client = h.client("waiter").await;
    let mut holder = worker(&h, "hold").spawn().unwrap();
    let mut said = lines(&mut holder);
    let held = said.next().unwrap();
    let fence: i64 = held.strip_prefix("HELD ").unwrap().trim().parse().unwrap();
    let pid = holder.id() as libc::pid_t;
    // The holder stops itself after HELD; wait until it is stopped.
    let stat = format!("/proc/{pid}/stat");
    let until = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&stat)
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('T')
        })
        .unwrap_or(false)
    {
        assert!(Instant::now() < until, "the holder never stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    let lease = client
        .acquire(
            "held",
            AcquireOptions::new().timeout(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert!(lease.fence() > fence);
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(said.next().as_deref(), Some("LOST true"));
    assert_eq!(said.count(), 0); // read to the end, so the worker can finish writing
    assert!(holder.wait().unwrap().success());
}

/// Processes killed with SIGKILL while members of a group and waiting in line leave no rows
/// behind for long (docs/semantics.md, "What is deleted, and when"): after 100 of them, once
/// their places and memberships expired, one waiting acquire leaves no ticket and one join
/// leaves the live members' rows only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_killed_members_and_waiters_leave_no_rows() {
    let h = Harness::sqlite("xsweep").await;
    let long = Duration::from_secs(60);
    let holder = h.client("holder").await;
    let _busy = holder
        .acquire("busy", AcquireOptions::new().ttl(long))
        .await
        .unwrap();
    let _stable = holder
        .join("g", accord::JoinOptions::new().ttl(long))
        .await
        .unwrap();
    for _ in 0..100 {
        let mut child = worker(&h, "join_and_wait").spawn().unwrap();
        assert_eq!(lines(&mut child).next().as_deref(), Some("READY"));
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
        child.wait().unwrap();
    }
    let db = rusqlite::Connection::open(h.url.trim_start_matches("sqlite://")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [&h.tag], |r| r.get(0)).unwrap() };
    let now_ms = || chrono::Utc::now().timestamp_millis().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&format!(
        "SELECT count(*) FROM tickets WHERE namespace = ?1 AND expires_at_ms > {}",
        now_ms()
    )) > 0
    {
        assert!(Instant::now() < deadline, "places never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let other = h.client("other").await;
    let waited = other
        .acquire(
            "busy",
            AcquireOptions::new().timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap_err();
    assert_eq!(waited.kind(), accord::ErrorKind::Timeout);
    let tickets = "SELECT count(*) FROM tickets WHERE namespace = ?1";
    assert_eq!(count(tickets), 0, "dead tickets left after a wait");
    while holder.members("g").await.unwrap().len() > 1 {
        assert!(Instant::now() < deadline, "memberships never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _newcomer = other
        .join("g", accord::JoinOptions::new().ttl(long))
        .await
        .unwrap();
    let members = "SELECT count(*) FROM leases
                    WHERE namespace = ?1 AND key LIKE 'accord.group/g/%'";
    assert_eq!(count(members), 2, "the two live members' rows only");
}

/// `memory:` stores are per process and per name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stores_are_shared_by_name_within_a_process() {
    let a = Client::connect("memory:shared-by-name", ClientOptions::new())
        .await
        .unwrap();
    let b = Client::connect("memory:shared-by-name", ClientOptions::new())
        .await
        .unwrap();
    let other = Client::connect("memory:another", ClientOptions::new())
        .await
        .unwrap();
    let lease = a
        .try_acquire("k", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    assert!(b
        .try_acquire("k", AcquireOptions::new())
        .await
        .unwrap()
        .is_none());
    assert!(other
        .try_acquire("k", AcquireOptions::new())
        .await
        .unwrap()
        .is_some());
    lease.release().await.unwrap();
    assert!(b
        .try_acquire("k", AcquireOptions::new())
        .await
        .unwrap()
        .is_some());
    let bad = Client::connect("sqlite:relative.db", ClientOptions::new())
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), accord::ErrorKind::InvalidArgument);
}

/// SQLite's name for an in-memory database is `memory:`, the store this process's clients
/// share (no file named `/:memory:` or `:memory:` appears); query parameters, which no sqlite
/// URL takes, are refused naming them rather than ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_is_the_memory_store_and_query_parameters_are_refused() {
    let namespace = format!("sqlite-memory-{}", std::process::id());
    let options = || ClientOptions::new().namespace(namespace.clone());
    let plain = Client::connect("memory:", options()).await.unwrap();
    let lease = plain
        .try_acquire("k", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    for url in ["sqlite::memory:", "sqlite://:memory:", "sqlite:///:memory:"] {
        let client = Client::connect(url, options()).await.unwrap();
        assert!(
            client
                .try_acquire("k", AcquireOptions::new())
                .await
                .unwrap()
                .is_none(),
            "{url} is not the memory: store"
        );
        client.close().await;
    }
    lease.release().await.unwrap();
    assert!(!std::path::Path::new("/:memory:").exists());
    assert!(!std::path::Path::new(":memory:").exists());

    let dir = std::env::temp_dir().join(format!("accord-query-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("store.db");
    for (query, named) in [
        ("?mode=ro", "parameter mode"),
        ("?mode=ro&cache=shared", "parameters mode, cache"),
        ("?", "no query parameters"),
    ] {
        let url = format!("sqlite://{}{query}", file.display());
        let err = Client::connect(&url, ClientOptions::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), accord::ErrorKind::InvalidArgument, "{url}");
        assert!(err.message().contains(named), "{url}: {err}");
        assert!(err.message().contains("url"), "{url}: {err}");
    }
    assert!(!file.exists(), "a refused URL created its file");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rolling deploys on the embedded store, as on PostgreSQL
/// (`a_newer_schema_runs_this_accord_only_when_its_record_keeps_it`): a file at a newer schema
/// version is refused unless its record keeps this accord's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_newer_schema_runs_this_accord_only_when_its_record_keeps_it() {
    let h = Harness::sqlite("newer").await;
    h.client("o1").await.close().await;
    let path = h.url.trim_start_matches("sqlite://").to_string();
    let db = rusqlite::Connection::open(&path).unwrap();
    let mine: i32 = db
        .query_row("SELECT max(version) FROM schema_migrations", [], |r| {
            r.get(0)
        })
        .unwrap();
    let newer = mine + 1;
    db.execute(
        "INSERT INTO schema_migrations (version, applied_at_ms) VALUES (?1, 0)",
        [newer],
    )
    .unwrap();
    for keeps in [None, Some(newer)] {
        if let Some(keeps) = keeps {
            db.execute(
                "UPDATE schema_migrations SET compatible_from = ?1 WHERE version = ?2",
                [keeps, newer],
            )
            .unwrap();
        }
        let err = Client::connect(&h.url, h.options("o1")).await.unwrap_err();
        assert_eq!(err.kind(), accord::ErrorKind::Database, "{err}");
        for expected in [
            format!("the SQLite store {path} is at version {newer}"),
            format!("this accord (schema {mine}) cannot run on it"),
            format!("keeps clients from schema {newer} on"),
            "upgrade this client".to_string(),
        ] {
            assert!(
                err.message().contains(&expected),
                "{expected:?} missing from: {err}"
            );
        }
    }
    db.execute(
        "UPDATE schema_migrations SET compatible_from = ?1 WHERE version = ?2",
        [mine, newer],
    )
    .unwrap();
    let client = Client::connect(&h.url, h.options("o1"))
        .await
        .expect("a schema that keeps this accord");
    let lease = client
        .acquire("a", AcquireOptions::new().timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    lease.release().await.unwrap();
    client.close().await;
    let newest: i32 = db
        .query_row("SELECT max(version) FROM schema_migrations", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(newest, newer, "nothing migrated backwards or on");
}
