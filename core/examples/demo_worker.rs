//! The Rust worker of `make demo` (demo/run.py starts two of them beside the other languages'):
//!
//! ```text
//! demo_worker URL NAMESPACE NAME TASKS
//! ```
//!
//! Offers the keys `task/000`… to the work pool `task/` (idempotent: every worker does, whoever
//! comes first adds them), then claims a few at a time, "works" 20–60 ms on each, marks each done
//! with `{"worker", "lang", "fence"}` (refused with LeaseLost if the lease was lost), and
//! announces every 50th completion on the channel `demo` (the announcements are the work pool
//! `batch/`: offered by whoever sees a batch complete, claimed and announced once). Stops when
//! a claim finds nothing and the pool's counts say no task is free or held. Prints one JSON
//! line per event.

use std::time::Duration;

use accord::serde_json::{json, Value};
use accord::{ClaimOptions, Client, ClientOptions, ErrorKind};
use rand::Rng;

const TTL: Duration = Duration::from_secs(2);
const BATCH: usize = 50;
const POOL: &str = "task/";
/// Tasks claimed at once: few, so that a worker killed while holding them delays little.
const CLAIM: usize = 2;
/// How long an empty claim waits for a release, an offer or an expiry before the counts are read.
const CLAIM_WAIT: Duration = Duration::from_millis(500);

fn say(event: Value) {
    println!("{event}");
}

fn metadata(value: Value) -> accord::Metadata {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("an object"),
    }
}

#[tokio::main]
async fn main() -> accord::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, namespace, name, tasks] = args.as_slice() else {
        eprintln!("usage: demo_worker URL NAMESPACE NAME TASKS");
        std::process::exit(2);
    };
    let tasks: usize = tasks.parse().expect("TASKS is a number");
    let all: Vec<String> = (0..tasks).map(|i| format!("task/{i:03}")).collect();
    let mut offered = 0; // batches this worker offered so far
    let mut completed = 0;
    let client = Client::connect(
        url,
        ClientOptions::new()
            .namespace(namespace)
            .owner(name)
            .ttl(TTL),
    )
    .await?;
    say(json!({"ev": "start", "worker": name, "lang": "rust"}));
    for chunk in all.chunks(accord::limits::MAX_OFFER_KEYS) {
        client.offer(POOL, chunk.iter().cloned(), None).await?;
    }
    loop {
        let claimed = client
            .claim(
                POOL,
                ClaimOptions::new()
                    .limit(CLAIM)
                    .ttl(TTL)
                    .timeout(CLAIM_WAIT),
            )
            .await?;
        if claimed.is_empty() {
            let counts = client.counts(POOL).await?;
            if counts.free == 0 && counts.held == 0 {
                break;
            }
            continue;
        }
        for lease in claimed {
            let key = lease.key().to_string();
            let fence = lease.fence();
            say(json!({"ev": "acquired", "worker": name, "key": key, "fence": fence}));
            let work = rand::rng().random_range(20..=60);
            tokio::time::sleep(Duration::from_millis(work)).await;
            // Fenced by the core: refused (LeaseLost) if the lease was lost meanwhile.
            let result = json!({"worker": name, "lang": "rust", "fence": fence});
            match lease.done(Some(metadata(result))).await {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::LeaseLost => {
                    say(json!({"ev": "lost", "worker": name, "key": key, "fence": fence}));
                    continue;
                }
                Err(e) => return Err(e),
            }
            say(json!({"ev": "done", "worker": name, "key": key, "fence": fence}));
            completed += 1;
            offered = announce(&client, name, offered).await?;
        }
    }
    say(json!({"ev": "exit", "worker": name, "completed": completed}));
    client.close().await;
    Ok(())
}

/// Every BATCH completions, one worker notifies: the announcements are a work pool too. Whoever
/// sees a batch complete offers its key to the pool `batch/` (idempotent: others may offer it
/// too); whoever claims it announces it and marks it done, so each is announced once. A worker
/// killed holding one loses it at its ttl, and the next claim takes it. Returns the batches
/// offered so far.
async fn announce(client: &Client, name: &str, offered: usize) -> accord::Result<usize> {
    let ready = client.counts(POOL).await?.done as usize / BATCH;
    if ready > offered {
        let keys = (offered + 1..=ready).map(|b| format!("batch/{b}"));
        client.offer("batch/", keys, None).await?;
    }
    if ready == 0 {
        return Ok(ready);
    }
    let claim = ClaimOptions::new().limit(ready).ttl(TTL);
    for lease in client.claim("batch/", claim).await? {
        let batch: usize = lease.key()["batch/".len()..]
            .parse()
            .expect("a batch number");
        client
            .notify("demo", &format!("batch {batch} finished by {name}"))
            .await?;
        lease.done(Some(metadata(json!({"worker": name})))).await?;
        say(json!({"ev": "notify", "worker": name, "batch": batch}));
    }
    Ok(ready)
}
