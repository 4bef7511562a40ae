//! L12: 8 worker processes × 200 rounds of acquire → fenced write → release on one key, while
//! the test freezes the current holder with SIGSTOP past its ttl. Workers are this test binary
//! started again with `ACCORD_L12_WORKER` set.

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
const STALLS: usize = 8;

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
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run_worker(worker, &url, &namespace, &table));
}

async fn run_worker(worker: i32, url: &str, namespace: &str, table: &str) {
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
    let mut children: Vec<_> = (0..WORKERS)
        .map(|i| {
            Command::new(&exe)
                .args(["l12_worker", "--exact", "--nocapture", "--test-threads=1"])
                .env("ACCORD_L12_WORKER", i.to_string())
                .env("ACCORD_L12_NAMESPACE", &h.tag)
                .env("ACCORD_L12_TABLE", &table)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
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

    // Freeze whoever holds the key, past its ttl, a few times.
    let mut stalls = 0;
    while stalls < STALLS && !readers.iter().all(|r| r.is_finished()) {
        tokio::time::sleep(Duration::from_millis(rand::random_range(200..500))).await;
        let holder: Option<String> = h
            .admin()
            .query_opt(
                "SELECT owner FROM accord.leases
                  WHERE namespace = $1 AND key = 'shared' AND expires_at > clock_timestamp()",
                &[&h.tag],
            )
            .await
            .unwrap()
            .and_then(|r| r.get(0));
        let Some(worker) = holder.and_then(|o| o.strip_prefix('w')?.parse::<usize>().ok()) else {
            continue;
        };
        let pid = children[worker].id() as libc::pid_t;
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        tokio::time::sleep(TTL + Duration::from_millis(600)).await;
        unsafe { libc::kill(pid, libc::SIGCONT) };
        stalls += 1;
    }

    let mut rounds = Vec::new();
    for (child, reader) in children.iter_mut().zip(readers) {
        let status = child.wait().unwrap();
        assert!(status.success(), "a worker failed: {status}");
        let lines = reader.join().unwrap();
        assert_eq!(lines.len(), ROUNDS, "a worker did not finish its rounds");
        for line in lines {
            let f: Vec<&str> = line.split_whitespace().collect();
            rounds.push(Round {
                fence: f[3].parse().unwrap(),
                stalled: f[4] == "true",
                lost: f[5] == "true",
                accepted: f[6] == "true",
                prompt: f[7] == "true",
            });
        }
    }
    assert_eq!(stalls, STALLS);

    // Every stalled holder saw lost.
    let stalled: Vec<_> = rounds.iter().filter(|r| r.stalled).collect();
    assert!(
        !stalled.is_empty(),
        "no holder was stalled during its work: the scenario did not run"
    );
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
