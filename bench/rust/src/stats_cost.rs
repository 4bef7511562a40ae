//! Scenario 13: what recording stats costs. The same loops as scenarios 1 and 2 (one caller's
//! try_acquire + release; 64 tasks each on keys of their own), on two clients that differ only
//! in `ClientOptions::record_stats` (on: the default; off: nothing recorded). Each caller
//! alternates between the two pair by pair (A/B/A/B), so that a load that comes and goes on the
//! machine falls on both alike; the pairs are grouped in blocks, and the report takes each
//! block's ratio of mean time per pair and judges their median (bench/report.py: ≤ 2%).

use std::time::{Duration, Instant};

use accord::{Client, ClientOptions};
use futures_util::future::try_join_all;

use crate::raw;
use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

/// Blocks: each block's ratio (time per pair with stats / without) is one sample of the
/// overhead, and the report takes their median.
const BLOCKS: usize = 40;
const TASKS: usize = crate::concurrent::TASKS;

async fn client(config: &Config, record: bool, pool_size: usize) -> BenchResult<Client> {
    Ok(Client::connect(
        &config.url,
        ClientOptions::new()
            .schema(SCHEMA)
            .namespace(NAMESPACE)
            .pool_size(pool_size)
            .record_stats(record),
    )
    .await?)
}

/// One block: `tasks` tasks, `per_task` pairs each, every task alternating between the two
/// clients pair by pair (task t starts with client t % 2), so that whatever load the machine
/// has at that moment falls on both alike. Each pair's latency, per client.
async fn block(
    clients: &[Client; 2],
    ids: [&'static str; 2],
    tasks: usize,
    per_task: usize,
) -> BenchResult<[Vec<Duration>; 2]> {
    let runs = (0..tasks).map(|task| {
        let clients = clients.clone();
        let keys = ids.map(|id| format!("bench-{id}/{task}"));
        tokio::spawn(async move {
            let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
            for i in 0..per_task {
                let k = (task + i) % 2;
                let t = Instant::now();
                raw::accord_pair(&clients[k], &keys[k]).await?;
                samples[k].push(t.elapsed());
            }
            BenchResult::Ok(samples)
        })
    });
    let mut out: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for task in try_join_all(runs).await? {
        let [a, b] = task?;
        out[0].extend(a);
        out[1].extend(b);
    }
    Ok(out)
}

/// One pair of contenders (on, off) with `tasks` tasks and `per_task` pairs per task per block.
async fn pair_of(
    config: &Config,
    ids: [&'static str; 2],
    what: &str,
    tasks: usize,
    per_task: usize,
    pool_size: usize,
) -> BenchResult<Vec<Record>> {
    let clients = [
        client(config, true, pool_size).await?,
        client(config, false, pool_size).await?,
    ];
    let mut records = [
        Record::new(
            ids[0],
            format!("accord, {what}, stats recorded (the default)"),
        ),
        Record::new(ids[1], format!("accord, {what}, stats not recorded")),
    ];
    block(&clients, ids, tasks, (config.warmup / tasks).max(2)).await?;
    // Microseconds per pair (mean latency) of each block, per contender.
    let mut per_block: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..BLOCKS {
        let started = Instant::now();
        let samples = block(&clients, ids, tasks, per_task).await?;
        let elapsed = started.elapsed();
        for (k, s) in samples.into_iter().enumerate() {
            let sum: Duration = s.iter().sum();
            per_block[k].push(sum.as_secs_f64() * 1e6 / s.len().max(1) as f64);
            // Both ran during the whole block: each is charged half of its wall time.
            records[k].add(s, elapsed / 2);
        }
    }
    let on = clients[0].stats();
    let off = clients[1].stats();
    // The switch did what it says: the recording client counted its grants, the other none.
    if on.grants == 0 || off.grants != 0 || off.statement_time.count != 0 {
        return Err(format!(
            "record_stats: on counted {} grants, off {} grants and {} statements",
            on.grants, off.grants, off.statement_time.count
        )
        .into());
    }
    for c in clients {
        c.close().await;
    }
    for (k, record) in records.iter_mut().enumerate() {
        record.metric("tasks", tasks as u64);
        record.metric("rounds", BLOCKS as u64);
        record.metric("round_us_per_pair", per_block[k].clone());
    }
    Ok(records.into_iter().collect())
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    // Scenario 1's pairs, split into blocks (each an even number of pairs, half per client).
    let mut records = pair_of(
        config,
        ["rust/stats-on", "rust/stats-off"],
        "one caller",
        1,
        (config.pairs / BLOCKS).max(2) & !1,
        1,
    )
    .await?;
    records.extend(
        pair_of(
            config,
            ["rust/stats-on-64", "rust/stats-off-64"],
            &format!("{TASKS} tasks (group commit), pool of 2"),
            TASKS,
            (config.pairs / 25 / BLOCKS).max(2) & !1,
            2,
        )
        .await?,
    );
    Ok(records)
}
