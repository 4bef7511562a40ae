//! L12: 8 worker processes × 200 rounds of acquire → fenced write → release on one key, while
//! holders are frozen with SIGSTOP past their ttl. Workers are this test binary started again
//! with `ACCORD_L12_WORKER` set.
//!
//! The freezes are planned, not aimed: in the rounds `ACCORD_L12_STALLS` names, a worker stops
//! itself (SIGSTOP) inside its work window, between the grant and its check of the lease; the
//! test sees it stopped, waits past the ttl, and resumes it. Every planned stall is thus a
//! holder frozen during its work, whatever the scheduler does.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use accord::{AcquireOptions, Client, ClientOptions, ErrorKind};
use support::Harness;

const WORKERS: usize = 8;
const ROUNDS: usize = 200;
const TTL: Duration = Duration::from_secs(1);
/// The safety margin accord keeps for a 1 s ttl: a holder that saw its lease alive and wrote
/// within this long was still the only holder.
const MARGIN: Duration = Duration::from_millis(100);
/// The planned stalls, as (worker, round): one per worker, spread over the rounds.
const STALLS: [(usize, usize); 8] = [
    (0, 12),
    (1, 37),
    (2, 61),
    (3, 88),
    (4, 110),
    (5, 134),
    (6, 157),
    (7, 181),
];
/// A hang bound: a planned stall that is not seen within this long fails the test.
const STALL_SEEN_WITHIN: Duration = Duration::from_secs(300);

/// The worker's entry point; a no-op unless started by `l12_fenced_writes_under_stalls`.
#[test]
fn l12_worker() {
    let Ok(worker) = std::env::var("ACCORD_L12_WORKER") else {
        return;
    };
    let worker: i32 = worker.parse().unwrap();
    let url = std::env::var("ACCORD_TEST_DATABASE_URL").unwrap();
    let namespace = std::env::var("ACCORD_L12_NAMESPACE").unwrap();
    let table = std::env::var("ACCORD_L12_TABLE").unwrap();
    // "worker:round" pairs, comma-separated: the rounds in which this worker stops itself.
    let stall_rounds: Vec<usize> = std::env::var("ACCORD_L12_STALLS")
        .unwrap()
        .split(',')
        .filter_map(|pair| {
            let (w, r) = pair.split_once(':').unwrap();
            (w.parse::<i32>().unwrap() == worker).then(|| r.parse().unwrap())
        })
        .collect();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run_worker(worker, &url, &namespace, &table, &stall_rounds));
}

async fn run_worker(worker: i32, url: &str, namespace: &str, table: &str, stall_rounds: &[usize]) {
    let client = Client::connect(
        url,
        ClientOptions::new()
            .namespace(namespace)
            .owner(format!("w{worker}"))
            .ttl(TTL),
    )
    .await
    .unwrap();
    let (resource, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let write = resource
        .prepare(&format!(
            "WITH ok AS (UPDATE \"{table}\" SET last_fence = $1 WHERE id = 1 AND last_fence < $1 RETURNING 1)
             INSERT INTO \"{table}_log\" (fence, worker) SELECT $1, $2 FROM ok RETURNING id"
        ))
        .await
        .unwrap();
    for round in 0..ROUNDS {
        let lease = client
            .acquire(
                "shared",
                AcquireOptions::new().timeout(Duration::from_secs(120)),
            )
            .await
            .unwrap();
        let started = Instant::now();
        if stall_rounds.contains(&round) {
            // Frozen while holding: the test resumes this process past the ttl.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        tokio::time::sleep(Duration::from_micros(rand::random_range(3000..10_000))).await;
        // Frozen by SIGSTOP between the grant and now for longer than the ttl?
        let stalled = started.elapsed() > TTL;
        let checked = Instant::now();
        let lost = lease.is_lost();
        let (accepted, prompt) = if lost {
            (false, false)
        } else {
            let rows = resource
                .query(&write, &[&lease.fence(), &worker])
                .await
                .unwrap();
            (!rows.is_empty(), checked.elapsed() < MARGIN)
        };
        println!(
            "ROUND {worker} {round} {} {stalled} {lost} {accepted} {prompt}",
            lease.fence()
        );
        match lease.release().await {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::LeaseLost => {}
            Err(e) => panic!("release failed: {e}"),
        }
    }
    client.close().await;
}

struct Round {
    worker: usize,
    round: usize,
    fence: i64,
    stalled: bool,
    lost: bool,
    accepted: bool,
    prompt: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l12_fenced_writes_under_stalls() {
    let h = Harness::postgres("l12").await;
    let table = format!("fenced_{}", h.tag);
    h.admin()
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (id int PRIMARY KEY, last_fence bigint NOT NULL);
             INSERT INTO \"{table}\" VALUES (1, 0);
             CREATE TABLE \"{table}_log\" (id bigserial PRIMARY KEY, fence bigint NOT NULL, worker int NOT NULL);"
        ))
        .await
        .unwrap();
    // Make sure the schema exists before eight processes race to create it.
    drop(h.client("setup").await);

    let exe = std::env::current_exe().unwrap();
    let plan = STALLS
        .iter()
        .map(|(w, r)| format!("{w}:{r}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut children: Vec<_> = (0..WORKERS)
        .map(|i| {
            Command::new(&exe)
                .args(["l12_worker", "--exact", "--nocapture", "--test-threads=1"])
                .env("ACCORD_L12_WORKER", i.to_string())
                .env("ACCORD_L12_NAMESPACE", &h.tag)
                .env("ACCORD_L12_TABLE", &table)
                .env("ACCORD_L12_STALLS", &plan)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Should the test fail while a worker is stopped, end the workers rather than leave them.
    let mut reaper = Reaper(children.iter().map(|c| c.id() as libc::pid_t).collect());
    let readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let out = c.stdout.take().unwrap();
            std::thread::spawn(move || {
                BufReader::new(out)
                    .lines()
                    .map_while(Result::ok)
                    // libtest may print its own "test … " prefix on the first line.
                    .filter_map(|l| l.find("ROUND ").map(|i| l[i..].to_string()))
                    .collect::<Vec<_>>()
            })
        })
        .collect();

    // Each planned stall: wait until the worker has stopped itself, keep it stopped past its
    // ttl, resume it. One stall per worker, so a worker seen stopped is that stall.
    let pids: Vec<libc::pid_t> = children.iter().map(|c| c.id() as libc::pid_t).collect();
    let mut pending: Vec<usize> = STALLS.iter().map(|(w, _)| *w).collect();
    let mut stopped: Vec<(usize, tokio::time::Instant)> = Vec::new();
    let mut stalls = 0;
    let give_up = tokio::time::Instant::now() + STALL_SEEN_WITHIN;
    while !pending.is_empty() || !stopped.is_empty() {
        pending.retain(|&w| {
            if is_stopped(pids[w]) {
                stopped.push((w, tokio::time::Instant::now()));
                false
            } else {
                // A worker that ended without its stall is reported below (stalls, rounds).
                !readers[w].is_finished()
            }
        });
        stopped.retain(|&(w, seen)| {
            if seen.elapsed() < TTL + Duration::from_millis(600) {
                return true;
            }
            unsafe { libc::kill(pids[w], libc::SIGCONT) };
            stalls += 1;
            false
        });
        assert!(
            tokio::time::Instant::now() < give_up,
            "workers {pending:?} never stopped for their planned stall"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut rounds = Vec::new();
    for (child, reader) in children.iter_mut().zip(readers) {
        let status = child.wait().unwrap();
        reaper.0.retain(|&pid| pid != child.id() as libc::pid_t);
        assert!(status.success(), "a worker failed: {status}");
        let lines = reader.join().unwrap();
        assert_eq!(lines.len(), ROUNDS, "a worker did not finish its rounds");
        for line in lines {
            let f: Vec<&str> = line.split_whitespace().collect();
            rounds.push(Round {
                worker: f[1].parse().unwrap(),
                round: f[2].parse().unwrap(),
                fence: f[3].parse().unwrap(),
                stalled: f[4] == "true",
                lost: f[5] == "true",
                accepted: f[6] == "true",
                prompt: f[7] == "true",
            });
        }
    }
    assert_eq!(stalls, STALLS.len());

    // Every planned stall froze a holder during its work, past its ttl.
    for (w, n) in STALLS {
        let r = rounds
            .iter()
            .find(|r| r.worker == w && r.round == n)
            .unwrap();
        assert!(
            r.stalled,
            "worker {w} round {n}: stopped during its work, yet not past its ttl"
        );
    }
    // Every stalled holder saw lost (the planned ones, and any a slow machine stalled too).
    let stalled: Vec<_> = rounds.iter().filter(|r| r.stalled).collect();
    for r in &stalled {
        assert!(
            r.lost,
            "fence {} was stalled past its ttl but not lost",
            r.fence
        );
    }
    // A holder that saw its lease alive and wrote promptly was the only holder: accepted.
    for r in rounds.iter().filter(|r| !r.lost && r.prompt) {
        assert!(
            r.accepted,
            "fence {}: a live holder's prompt write was refused",
            r.fence
        );
    }
    // Accepted writes carry strictly increasing fences, in the order they were accepted.
    let log: Vec<i64> = h
        .admin()
        .query(
            &format!("SELECT fence FROM \"{table}_log\" ORDER BY id"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(log.windows(2).all(|w| w[0] < w[1]), "fences went backwards");
    assert_eq!(log.len(), rounds.iter().filter(|r| r.accepted).count());
    // Fences are unique across every grant.
    let mut fences: Vec<i64> = rounds.iter().map(|r| r.fence).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), WORKERS * ROUNDS);
    eprintln!(
        "L12: {} rounds, {} accepted writes, {} stalled holders (all saw lost)",
        rounds.len(),
        log.len(),
        stalled.len()
    );
}

/// Whether the process is stopped (state `T` in /proc/<pid>/stat).
fn is_stopped(pid: libc::pid_t) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) state …": the command name may hold spaces and parentheses.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        == Some("T")
}

/// Kills the workers not yet waited for when the test fails, so that none is left stopped.
struct Reaper(Vec<libc::pid_t>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for &pid in &self.0 {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}
