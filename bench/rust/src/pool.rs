//! Scenario 8: a work pool drained by workers. `--pool-keys` keys (2,000), `--pool-workers`
//! workers (8: tasks of one process, each with a client of its own), 1 ms of work per key:
//!
//! - `rust/pool-accord`: the keys offered, then each worker claims 50 → works → done, until a
//!   claim finds nothing (the counts, read after the drain, must say every key is done);
//! - `rust/pool-try-acquire`: the old way, each worker walking every name (in an order of its
//!   own) with try_acquire, skipping held keys and done ones;
//! - `rust/pool-raw-sql`: the floor, a hand-written queue table on raw tokio-postgres: a
//!   `FOR UPDATE SKIP LOCKED` claim of 50 and one UPDATE per done key.
//!
//! Then throughput, with no work: `--pool-keys` × 5 keys, the same workers claiming 50 and
//! marking each claimed batch done at once, until empty:
//!
//! - `rust/pool-batch-accord`: each worker with its client; the dones of a batch are started
//!   together (`join_all`), so the client's group commit sends them as one statement;
//! - `rust/pool-batch-raw-sql`: the floor, each worker on a connection of its own, one
//!   `UPDATE … WHERE key = ANY($1)` for its batch's dones.
//!
//! And `rust/pool-restart`: a restarted worker (a new client) asks a drained pool for work: one
//! claim, one statement, however many keys are done.
//!
//! Measured: the wall time from the first claim to the last done, keys claimed and done per
//! second, and the statements the database ran (pg_stat_statements, when it is loaded; the
//! client's own count of its calls otherwise). With a superuser connection the contenders also
//! run with fsync and synchronous_commit on (ALTER SYSTEM, then reset), the `-fsync` ids.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use accord::{AcquireOptions, ClaimOptions, Client, ClientOptions, ErrorKind};
use futures_util::future::try_join_all;
use rand::seq::SliceRandom;

use crate::raw;
use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

/// Keys claimed at once.
pub const BATCH: usize = 50;
/// Drains per way (interleaved with the floor's).
const ROUNDS: usize = 3;
/// The work done on each key.
const WORK: Duration = Duration::from_millis(1);
const RAW_TABLE: &str = "accord_bench.raw_queue";

#[derive(Clone, Copy, PartialEq)]
enum Way {
    Accord,
    TryAcquire,
    RawSql,
    BatchAccord,
    BatchRawSql,
}

impl Way {
    fn id(self, durable: bool) -> &'static str {
        match (self, durable) {
            (Way::Accord, false) => "rust/pool-accord",
            (Way::TryAcquire, false) => "rust/pool-try-acquire",
            (Way::RawSql, false) => "rust/pool-raw-sql",
            (Way::Accord, true) => "rust/pool-accord-fsync",
            (Way::TryAcquire, true) => "rust/pool-try-acquire-fsync",
            (Way::RawSql, true) => "rust/pool-raw-sql-fsync",
            (Way::BatchAccord, false) => "rust/pool-batch-accord",
            (Way::BatchRawSql, false) => "rust/pool-batch-raw-sql",
            (Way::BatchAccord, true) => "rust/pool-batch-accord-fsync",
            (Way::BatchRawSql, true) => "rust/pool-batch-raw-sql-fsync",
        }
    }

    fn label(self, workers: usize) -> String {
        match self {
            Way::Accord => format!("accord: offer, then {workers} workers claim {BATCH} → done"),
            Way::TryAcquire => {
                format!("accord, the old way: {workers} workers walk every name with try_acquire")
            }
            Way::RawSql => format!(
                "raw SQL: {workers} workers, FOR UPDATE SKIP LOCKED claim of {BATCH}, an UPDATE per done"
            ),
            Way::BatchAccord => format!(
                "accord: {workers} workers claim {BATCH}, no work, the batch's dones started together"
            ),
            Way::BatchRawSql => format!(
                "raw SQL: {workers} workers, claim of {BATCH}, no work, one UPDATE for the batch's dones"
            ),
        }
    }
}

/// 1 ms of work, on a thread of its own (as work would occupy one), precise to the OS's sleep.
async fn work() -> BenchResult<()> {
    tokio::task::spawn_blocking(|| std::thread::sleep(WORK)).await?;
    Ok(())
}

/// What one drain of the pool cost.
struct Drain {
    dones: Vec<Duration>,
    elapsed: Duration,
    /// Statements the client sent, by its own count.
    calls: u64,
}

async fn connect_accord(config: &Config) -> BenchResult<Client> {
    Ok(Client::connect(
        &config.url,
        ClientOptions::new()
            .schema(SCHEMA)
            .namespace(NAMESPACE)
            .pool_size(1),
    )
    .await?)
}

/// Workers claim a batch until a claim finds nothing. `batched`: no work, and the batch's dones
/// started together (the client's group commit sends them as one statement); otherwise 1 ms of
/// work and a done per key.
async fn drain_accord(clients: &[Client], prefix: &str, batched: bool) -> BenchResult<Drain> {
    let calls = AtomicU64::new(0);
    let started = Instant::now();
    let workers = clients.iter().map(|client| {
        let calls = &calls;
        async move {
            let mut dones = Vec::new();
            loop {
                let claimed = client
                    .claim(prefix, ClaimOptions::new().limit(BATCH))
                    .await?;
                calls.fetch_add(1, Ordering::Relaxed);
                // Until empty, as the raw workers do: no worker fails here, so every key held
                // by another is done by it (checked after the drain).
                if claimed.is_empty() {
                    break;
                }
                if batched {
                    let t = Instant::now();
                    try_join_all(claimed.iter().map(|lease| lease.done(None))).await?;
                    calls.fetch_add(claimed.len() as u64, Ordering::Relaxed);
                    dones.extend(std::iter::repeat_n(t.elapsed(), claimed.len()));
                    continue;
                }
                for lease in claimed {
                    work().await?;
                    let t = Instant::now();
                    lease.done(None).await?;
                    dones.push(t.elapsed());
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            }
            BenchResult::Ok(dones)
        }
    });
    let dones = try_join_all(workers).await?.concat();
    Ok(Drain {
        dones,
        elapsed: started.elapsed(),
        calls: calls.into_inner(),
    })
}

async fn drain_try_acquire(clients: &[Client], names: &[String]) -> BenchResult<Drain> {
    let calls = AtomicU64::new(0);
    let started = Instant::now();
    let workers = clients.iter().map(|client| {
        let calls = &calls;
        let mut order = names.to_vec();
        order.shuffle(&mut rand::rng());
        async move {
            let mut dones = Vec::new();
            // One walk finds every key done or held by someone else; keys held then are walked
            // again until every one is done.
            while !order.is_empty() {
                let mut left = Vec::new();
                for key in order {
                    calls.fetch_add(1, Ordering::Relaxed);
                    match client.try_acquire(&key, AcquireOptions::new()).await {
                        Ok(Some(lease)) => {
                            work().await?;
                            let t = Instant::now();
                            lease.done(None).await?;
                            dones.push(t.elapsed());
                            calls.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(None) => left.push(key),
                        Err(e) if e.kind() == ErrorKind::Done => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                order = left;
            }
            BenchResult::Ok(dones)
        }
    });
    let dones = try_join_all(workers).await?.concat();
    Ok(Drain {
        dones,
        elapsed: started.elapsed(),
        calls: calls.into_inner(),
    })
}

/// The hand-written queue: a row per key, claimed by owner and expiry, done by a flag.
async fn create_raw_table(db: &tokio_postgres::Client) -> BenchResult<()> {
    db.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS accord_bench;
         CREATE TABLE IF NOT EXISTS {RAW_TABLE} (
             id bigserial PRIMARY KEY,
             pool text NOT NULL,
             key text NOT NULL UNIQUE,
             owner text,
             expires_at timestamptz,
             done boolean NOT NULL DEFAULT false);
         CREATE INDEX IF NOT EXISTS raw_queue_claimable ON {RAW_TABLE} (pool, id) WHERE NOT done;"
    ))
    .await?;
    Ok(())
}

const RAW_CLAIM: &str = "UPDATE accord_bench.raw_queue q
    SET owner = $2, expires_at = clock_timestamp() + interval '30 seconds'
  WHERE q.id IN (SELECT id FROM accord_bench.raw_queue
                  WHERE pool = $1 AND NOT done
                    AND (expires_at IS NULL OR expires_at < clock_timestamp())
                  ORDER BY id LIMIT $3
                  FOR UPDATE SKIP LOCKED)
  RETURNING q.key";
const RAW_DONE: &str = "UPDATE accord_bench.raw_queue
    SET done = true, expires_at = NULL
  WHERE key = $1 AND owner = $2 AND NOT done";

const RAW_DONE_BATCH: &str = "UPDATE accord_bench.raw_queue
    SET done = true, expires_at = NULL
  WHERE key = ANY($1) AND owner = $2 AND NOT done";

/// The floor: a connection per worker, a `FOR UPDATE SKIP LOCKED` claim of a batch until one
/// finds nothing. `batched`: no work, one UPDATE for the batch's dones; otherwise 1 ms of work
/// and an UPDATE per key.
async fn drain_raw(
    conns: &[tokio_postgres::Client],
    pool: &str,
    batched: bool,
) -> BenchResult<Drain> {
    let mut prepared = Vec::new();
    for db in conns {
        let done = if batched { RAW_DONE_BATCH } else { RAW_DONE };
        prepared.push((db.prepare(RAW_CLAIM).await?, db.prepare(done).await?));
    }
    let calls = AtomicU64::new(0);
    let started = Instant::now();
    let workers = conns
        .iter()
        .zip(prepared)
        .enumerate()
        .map(|(i, (db, (claim, done)))| {
            let calls = &calls;
            async move {
                let owner = format!("raw-worker-{i}");
                let mut dones = Vec::new();
                loop {
                    let rows = db.query(&claim, &[&pool, &owner, &(BATCH as i64)]).await?;
                    calls.fetch_add(1, Ordering::Relaxed);
                    if rows.is_empty() {
                        break;
                    }
                    let keys: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                    if batched {
                        let t = Instant::now();
                        let n = db.execute(&done, &[&keys, &owner]).await?;
                        if n != keys.len() as u64 {
                            return Err(format!(
                                "raw batch done found {n} of {} claims",
                                keys.len()
                            )
                            .into());
                        }
                        calls.fetch_add(1, Ordering::Relaxed);
                        dones.extend(std::iter::repeat_n(t.elapsed(), keys.len()));
                        continue;
                    }
                    for key in keys {
                        work().await?;
                        let t = Instant::now();
                        if db.execute(&done, &[&key, &owner]).await? != 1 {
                            return Err(format!("raw done of {key} found no claim").into());
                        }
                        dones.push(t.elapsed());
                        calls.fetch_add(1, Ordering::Relaxed);
                    }
                }
                BenchResult::Ok(dones)
            }
        });
    let dones = try_join_all(workers).await?.concat();
    Ok(Drain {
        dones,
        elapsed: started.elapsed(),
        calls: calls.into_inner(),
    })
}

/// A restarted worker (a new client) asks the drained pool for work: one claim, empty.
async fn restart(
    config: &Config,
    db: &tokio_postgres::Client,
    prefix: &str,
    durable: bool,
    stat_statements: bool,
) -> BenchResult<Record> {
    let client = connect_accord(config).await?;
    let before = statements(db).await;
    let t = Instant::now();
    let claimed = client
        .claim(prefix, ClaimOptions::new().limit(BATCH))
        .await?;
    let took = t.elapsed();
    let after = statements(db).await;
    client.close().await;
    if !claimed.is_empty() {
        return Err(format!("{prefix}: a drained pool granted {} keys", claimed.len()).into());
    }
    let id = if durable {
        "rust/pool-restart-fsync"
    } else {
        "rust/pool-restart"
    };
    let mut record = Record::new(
        id,
        "accord: a restarted worker's first claim on the drained pool",
    );
    record.add(vec![took], took);
    let stmts = match (before, after) {
        (Some(b), Some(a)) if stat_statements => (a - b - 1).max(0) as u64,
        _ => 1,
    };
    record.metric("statements", stmts);
    record.metric("fsync", u64::from(durable));
    Ok(record)
}

/// Statements this database has run so far, when pg_stat_statements is loaded.
async fn statements(db: &tokio_postgres::Client) -> Option<i64> {
    db.query_one(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
        &[],
    )
    .await
    .ok()
    .map(|row| row.get(0))
}

/// The cluster's fsync setting, and the fsync modes to measure in: the cluster's, and (the
/// test cluster runs with fsync off) with the right to change it, on as well.
pub(crate) async fn fsync_modes(db: &tokio_postgres::Client) -> BenchResult<(String, Vec<bool>)> {
    let fsync_before: String = db.query_one("SHOW fsync", &[]).await?.get(0);
    let superuser: bool = db
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await?
        .get(0);
    let mut modes = vec![fsync_before == "on"];
    if fsync_before != "on" && superuser {
        modes.push(true);
    } else if fsync_before != "on" {
        println!("  (not a superuser: no run with fsync on)");
    }
    Ok((fsync_before, modes))
}

/// Turns fsync and synchronous_commit on (or back to the cluster's settings) and waits until a
/// new connection sees it. Err when the connection may not (not a superuser).
pub(crate) async fn durable(db: &tokio_postgres::Client, url: &str, on: bool) -> BenchResult<()> {
    let statements: [&str; 3] = if on {
        [
            "ALTER SYSTEM SET fsync = on",
            "ALTER SYSTEM SET synchronous_commit = on",
            "SELECT pg_reload_conf()",
        ]
    } else {
        [
            "ALTER SYSTEM RESET fsync",
            "ALTER SYSTEM RESET synchronous_commit",
            "SELECT pg_reload_conf()",
        ]
    };
    // One by one: ALTER SYSTEM cannot run in the implicit transaction of a multi-statement query.
    for statement in statements {
        db.batch_execute(statement).await?;
    }
    let want = if on { "on" } else { "" };
    for _ in 0..100 {
        let probe = raw::connect(url).await?;
        let fsync: String = probe.query_one("SHOW fsync", &[]).await?.get(0);
        if !on || fsync == want {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("fsync did not turn on after pg_reload_conf".into())
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let (keys, workers) = (config.pool_keys, config.pool_workers);
    let db = raw::connect(&config.url).await?;
    let stat_statements = db
        .execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", &[])
        .await
        .is_ok()
        && statements(&db).await.is_some();
    create_raw_table(&db).await?;
    let (fsync_before, modes) = fsync_modes(&db).await?;

    let setup = connect_accord(config).await?;
    let mut records = Vec::new();
    let run_id = std::process::id();
    for durable_mode in modes.clone() {
        if durable_mode && fsync_before != "on" {
            durable(&db, &config.url, true).await?;
        }
        let outcome = async {
            // New clients and connections, so that every session runs with the settings.
            let mut clients = Vec::new();
            let mut conns = Vec::new();
            for _ in 0..workers {
                clients.push(connect_accord(config).await?);
                conns.push(raw::connect(&config.url).await?);
            }
            let mut found = Vec::new();
            let mut drained: Vec<(Way, Record, u64)> = Vec::new();
            // Each way drains ROUNDS pools, interleaved with the floor's, so that a burst of
            // noise on this machine lands on both sides: the times add up.
            for round in 0..ROUNDS {
                for way in [
                    Way::RawSql,
                    Way::Accord,
                    Way::TryAcquire,
                    Way::BatchRawSql,
                    Way::BatchAccord,
                ] {
                    // The old way is slow and far from the others: once is enough.
                    if way == Way::TryAcquire && round > 0 {
                        continue;
                    }
                    let batch_way = matches!(way, Way::BatchAccord | Way::BatchRawSql);
                    let keys = if batch_way { keys * 5 } else { keys };
                    let prefix = format!("bench-pool-{run_id}-{round}-{}/", way.id(durable_mode));
                    let names: Vec<String> =
                        (0..keys).map(|i| format!("{prefix}{i:05}")).collect();
                    match way {
                        Way::Accord | Way::BatchAccord => {
                            for chunk in names.chunks(accord::limits::MAX_OFFER_KEYS) {
                                setup.offer(&prefix, chunk.iter().cloned(), None).await?;
                            }
                        }
                        Way::RawSql | Way::BatchRawSql => {
                            db.execute(
                                &format!(
                                    "INSERT INTO {RAW_TABLE} (pool, key) SELECT $1, unnest($2::text[])"
                                ),
                                &[&prefix, &names],
                            )
                            .await?;
                        }
                        Way::TryAcquire => {}
                    }
                    let before = statements(&db).await;
                    let cpu_before = crate::keepalive::cpu_time();
                    let drain = match way {
                        Way::Accord => drain_accord(&clients, &prefix, false).await?,
                        Way::TryAcquire => drain_try_acquire(&clients, &names).await?,
                        Way::RawSql => drain_raw(&conns, &prefix, false).await?,
                        Way::BatchAccord => drain_accord(&clients, &prefix, true).await?,
                        Way::BatchRawSql => drain_raw(&conns, &prefix, true).await?,
                    };
                    let cpu = crate::keepalive::cpu_time().saturating_sub(cpu_before);
                    let after = statements(&db).await;
                    if matches!(way, Way::Accord | Way::BatchAccord) {
                        let counts = setup.counts(&prefix).await?;
                        if counts.done != keys as u64 || counts.total() != keys as u64 {
                            return Err(format!("{prefix}: {counts:?} after the drain").into());
                        }
                    }
                    if drain.dones.len() != keys {
                        return Err(format!(
                            "{}: {} keys done, not {keys}",
                            way.id(durable_mode),
                            drain.dones.len()
                        )
                        .into());
                    }
                    let stmts = match (before, after) {
                        // The counting query in between ran once (counted after it ended).
                        (Some(b), Some(a)) if stat_statements => (a - b - 1).max(0) as u64,
                        _ => drain.calls,
                    };
                    let i = match drained.iter().position(|(w, _, _)| *w == way) {
                        Some(i) => i,
                        None => {
                            let mut record = Record::new(way.id(durable_mode), way.label(workers));
                            record.metric("keys", keys as u64);
                            record.metric("workers", workers as u64);
                            record.metric("batch", BATCH as u64);
                            record.metric(
                                "work_ms",
                                if batch_way {
                                    0.0
                                } else {
                                    WORK.as_secs_f64() * 1000.0
                                },
                            );
                            record.metric("fsync", u64::from(durable_mode));
                            record.metric(
                                "statements_source",
                                if stat_statements { 1u64 } else { 0u64 },
                            );
                            drained.push((way, record, 0));
                            drained.len() - 1
                        }
                    };
                    let (_, record, rounds) = &mut drained[i];
                    record.add(drain.dones, drain.elapsed);
                    *rounds += 1;
                    // This process's CPU (every runtime thread) over the drains, per drain: on
                    // a machine whose cores the server's backends share, the client's CPU
                    // is time the server does not get.
                    let total_cpu = record.metrics.get("client_cpu_total_ms").and_then(|v| v.as_f64()).unwrap_or(0.0)
                        + cpu.as_secs_f64() * 1000.0;
                    record.metric("client_cpu_total_ms", total_cpu);
                    record.metric("client_cpu_ms", total_cpu / *rounds as f64);
                    // Per drain: statements and calls of the last one (they vary little).
                    record.metric("statements", stmts);
                    record.metric("client_calls", drain.calls);
                    record.metric("rounds", *rounds);
                    if way == Way::Accord && round == 0 {
                        found.push(
                            restart(config, &db, &prefix, durable_mode, stat_statements).await?,
                        );
                    }
                }
            }
            for (_, mut record, rounds) in drained {
                record.metric("wall_s", record.elapsed.as_secs_f64() / rounds as f64);
                found.push(record);
            }
            for client in clients {
                client.close().await;
            }
            BenchResult::Ok(found)
        }
        .await;
        if durable_mode && fsync_before != "on" {
            durable(&db, &config.url, false).await?;
        }
        records.extend(outcome?);
    }
    setup.close().await;
    Ok(records)
}
