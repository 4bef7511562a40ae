//! Scenario 13: what recording stats costs. The same loops as scenarios 1 and 2 (one caller's
//! try_acquire + release on one key; 64 tasks each on a key of their own), on two clients that
//! differ only in `ClientOptions::record_stats` (on: the default; off: nothing recorded). The
//! two alternate in rounds (on, off, then off, on, ...), so that a load that comes and goes on
//! the machine falls on both alike; the report takes each round's ratio of time per pair and
//! judges the median (bench/report.py: ≤ 2%).

use std::time::{Duration, Instant};

use accord::{Client, ClientOptions};
use futures_util::future::try_join_all;

use crate::raw;
use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

/// Rounds per contender: each round's ratio is one sample of the overhead.
const ROUNDS: usize = 10;
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

/// `tasks` tasks, `per_task` pairs each, on keys `<id>/<task>`: every pair's latency and the
/// wall time.
async fn round(
    client: &Client,
    id: &str,
    tasks: usize,
    per_task: usize,
) -> BenchResult<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let runs = (0..tasks).map(|task| {
        let client = client.clone();
        let key = format!("bench-{id}/{task}");
        tokio::spawn(async move {
            let mut samples = Vec::with_capacity(per_task);
            for _ in 0..per_task {
                let t = Instant::now();
                raw::accord_pair(&client, &key).await?;
                samples.push(t.elapsed());
            }
            BenchResult::Ok(samples)
        })
    });
    let mut samples = Vec::new();
    for task in try_join_all(runs).await? {
        samples.extend(task?);
    }
    Ok((samples, started.elapsed()))
}

/// One pair of contenders (on, off) with `tasks` tasks, `per_task` pairs per task per round.
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
    let warmup = (config.warmup / tasks).max(2);
    for (k, c) in clients.iter().enumerate() {
        round(c, ids[k], tasks, warmup).await?;
    }
    // Microseconds per pair (wall time / pairs) of each round, per contender.
    let mut per_round: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for r in 0..ROUNDS {
        let order: [usize; 2] = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let (samples, elapsed) = round(&clients[k], ids[k], tasks, per_task).await?;
            per_round[k].push(elapsed.as_secs_f64() * 1e6 / samples.len().max(1) as f64);
            records[k].add(samples, elapsed);
        }
    }
    let check = clients[0].stats();
    let off = clients[1].stats();
    // The switch did what it says: the recording client counted its grants, the other none.
    if check.grants == 0 || off.grants != 0 || off.statement_time.count != 0 {
        return Err(format!(
            "record_stats: on counted {} grants, off {} grants and {} statements",
            check.grants, off.grants, off.statement_time.count
        )
        .into());
    }
    for c in clients {
        c.close().await;
    }
    for (k, record) in records.iter_mut().enumerate() {
        record.metric("tasks", tasks as u64);
        record.metric("rounds", ROUNDS as u64);
        record.metric("round_us_per_pair", per_round[k].clone());
    }
    Ok(records.into_iter().collect())
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let mut records = pair_of(
        config,
        ["rust/stats-on", "rust/stats-off"],
        "one caller",
        1,
        (config.pairs / ROUNDS).max(2),
        1,
    )
    .await?;
    records.extend(
        pair_of(
            config,
            ["rust/stats-on-64", "rust/stats-off-64"],
            &format!("{TASKS} tasks (group commit), pool of 2"),
            TASKS,
            (config.pairs / 25 / ROUNDS).max(2),
            2,
        )
        .await?,
    );
    Ok(records)
}
