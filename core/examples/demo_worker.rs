//! The Rust worker of `make demo` (demo/run.py starts two of them beside the other languages'):
//!
//! ```text
//! demo_worker URL NAMESPACE NAME TASKS
//! ```
//!
//! Takes the keys `task/000`… in a random order with `try_acquire`, "works" 20–60 ms, marks each
//! done with `{"worker", "lang", "fence"}` (refused with LeaseLost if the lease was lost), and
//! announces every 50th completion on the channel `demo`. Prints one JSON line per event.

use std::collections::HashSet;
use std::time::Duration;

use accord::serde_json::{json, Value};
use accord::{AcquireOptions, Client, ClientOptions, ErrorKind, KeyState, ListQuery};
use rand::seq::SliceRandom;
use rand::Rng;

const TTL: Duration = Duration::from_secs(2);
const BATCH: usize = 50;

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
    let mut remaining: Vec<String> = (0..tasks).map(|i| format!("task/{i:03}")).collect();
    remaining.shuffle(&mut rand::rng());
    let mut announced = HashSet::new();
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
    while !remaining.is_empty() {
        let mut progressed = false;
        for key in remaining.clone() {
            let lease = match client
                .try_acquire(&key, AcquireOptions::new().ttl(TTL))
                .await
            {
                Ok(Some(lease)) => lease,
                Ok(None) => continue, // someone else holds it
                Err(e) if e.kind() == ErrorKind::Done => {
                    remaining.retain(|k| *k != key);
                    continue;
                }
                Err(e) => return Err(e),
            };
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
            remaining.retain(|k| *k != key);
            completed += 1;
            progressed = true;
            announce(&client, name, &mut announced).await?;
        }
        if !remaining.is_empty() && !progressed {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    say(json!({"ev": "exit", "worker": name, "completed": completed}));
    client.close().await;
    Ok(())
}

/// Every BATCH completions, one worker (whoever gets the batch's key first) notifies.
async fn announce(
    client: &Client,
    name: &str,
    announced: &mut HashSet<usize>,
) -> accord::Result<()> {
    let query = ListQuery::new()
        .prefix("task/")
        .state(KeyState::Done)
        .limit(1000);
    let done = client.list(query).await?.items.len();
    for batch in 1..=done / BATCH {
        if announced.contains(&batch) {
            continue;
        }
        let lease = match client
            .try_acquire(&format!("batch/{batch}"), AcquireOptions::new())
            .await
        {
            Ok(Some(lease)) => lease,
            Ok(None) => continue,
            Err(e) if e.kind() == ErrorKind::Done => {
                announced.insert(batch);
                continue;
            }
            Err(e) => return Err(e),
        };
        client
            .notify("demo", &format!("batch {batch} finished by {name}"))
            .await?;
        lease.done(Some(metadata(json!({"worker": name})))).await?;
        say(json!({"ev": "notify", "worker": name, "batch": batch}));
        announced.insert(batch);
    }
    Ok(())
}
