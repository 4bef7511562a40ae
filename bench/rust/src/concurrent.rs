//! Scenario 2: 64 tasks in one process, each on a key of its own, try_acquire + release in a
//! loop. accord's client against the same statements through a pool of as many connections
//! (deadpool-postgres, what a Rust service would use), and through the same connections shared
//! by all tasks (tokio-postgres pipelines concurrent queries: the floor).

use std::sync::Arc;
use std::time::{Duration, Instant};

use accord::{Client, ClientOptions};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures_util::future::try_join_all;
use tokio_postgres::NoTls;

use crate::raw::{self, AccordSql, Prepared};
use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

pub const TASKS: usize = 64;
/// accord's default pool size; the raw pools get as many connections.
const CONNECTIONS: usize = 2;

#[derive(Clone)]
enum Contender {
    Accord(Client),
    Pool(Pool, Arc<AccordSql>),
    Pipelined(Arc<Vec<(tokio_postgres::Client, Prepared)>>),
}

impl Contender {
    async fn pair(&self, task: usize, key: &str) -> BenchResult<()> {
        match self {
            Contender::Accord(client) => raw::accord_pair(client, key).await?,
            Contender::Pool(pool, sql) => {
                // A connection per statement, as a request handler holds one per query.
                let fence = {
                    let conn = pool.get().await?;
                    let stmts = Prepared::cached(&conn, sql).await?;
                    stmts.try_acquire(&conn, key).await?
                }
                .ok_or_else(|| format!("{key} is held"))?;
                let conn = pool.get().await?;
                Prepared::cached(&conn, sql)
                    .await?
                    .release(&conn, key, fence)
                    .await?;
            }
            Contender::Pipelined(connections) => {
                let (client, stmts) = &connections[task % connections.len()];
                stmts.pair(client, key).await?;
            }
        }
        Ok(())
    }
}

/// All tasks, `per_task` pairs each; returns every pair's latency and the wall time.
async fn round(
    contender: &Contender,
    id: &str,
    per_task: usize,
) -> BenchResult<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let tasks = (0..TASKS).map(|task| {
        let contender = contender.clone();
        let key = format!("bench-{id}/{task}");
        tokio::spawn(async move {
            let mut samples = Vec::with_capacity(per_task);
            for _ in 0..per_task {
                let t = Instant::now();
                contender.pair(task, &key).await?;
                samples.push(t.elapsed());
            }
            BenchResult::Ok(samples)
        })
    });
    let mut samples = Vec::new();
    for task in try_join_all(tasks).await? {
        samples.extend(task?);
    }
    Ok((samples, started.elapsed()))
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let accord = Client::connect(
        &config.url,
        ClientOptions::new()
            .schema(SCHEMA)
            .namespace(NAMESPACE)
            .pool_size(CONNECTIONS),
    )
    .await?;
    let sql = Arc::new(AccordSql::new()?);
    let manager = Manager::from_config(
        config.url.parse()?,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager).max_size(CONNECTIONS).build()?;
    let mut pipelined = Vec::new();
    for _ in 0..CONNECTIONS {
        let client = raw::connect(&config.url).await?;
        let stmts = Prepared::on(&client, &sql).await?;
        pipelined.push((client, stmts));
    }

    let mut contenders = [
        (
            Record::new(
                "rust/accord-64",
                format!("accord, {TASKS} tasks, pool of {CONNECTIONS}"),
            ),
            Contender::Accord(accord.clone()),
        ),
        (
            Record::new(
                "rust/raw-sql-64",
                format!("raw SQL, {TASKS} tasks, deadpool of {CONNECTIONS}"),
            ),
            Contender::Pool(pool, sql),
        ),
        (
            Record::new(
                "rust/raw-sql-64-pipelined",
                format!("raw SQL, {TASKS} tasks sharing {CONNECTIONS} pipelined connections"),
            ),
            Contender::Pipelined(Arc::new(pipelined)),
        ),
    ];
    let per_task = (config.pairs / 25 / 2).max(4);
    for (record, contender) in &contenders {
        round(contender, record.id, (config.warmup / 25).max(2)).await?;
    }
    for _half in 0..2 {
        for (record, contender) in &mut contenders {
            let (samples, elapsed) = round(contender, record.id, per_task).await?;
            record.add(samples, elapsed);
        }
    }
    for (record, _) in &mut contenders {
        record.metric("tasks", TASKS as u64);
        record.metric("connections", CONNECTIONS as u64);
    }
    accord.close().await;
    Ok(contenders.into_iter().map(|(record, _)| record).collect())
}
