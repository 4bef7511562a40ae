//! Scenario 15: fenced writes (docs/semantics.md, "Fenced writes"). One lease held by accord's
//! Rust core; an UPDATE of one row of an application table on a tokio-postgres connection of
//! the application's own, with and without accord's check in its transaction, and the parts
//! of the check apart (its row lock, the function), to see where the time goes. Then a result
//! write with `done_in` in the same transaction against the write and then `done`, with the
//! round trips each takes.
//!
//! Round trips are counted where they are made: the application's connection by construction
//! (each awaited call is one; a pipelined group is one), accord's own connection from the
//! client's statement count.

use std::time::{Duration, Instant};

use accord::{AcquireOptions, Client, ClientOptions, Lease};
use tokio_postgres::Statement;

use crate::record::Record;
use crate::{raw, BenchResult, Config, NAMESPACE, SCHEMA};

/// The application's table (in the public schema, beside accord's).
const TABLE: &str = "bench_fenced_resource";
/// The same, guarded by accord's `fenced_write` trigger (rows carry their writer's fence).
const GUARDED: &str = "bench_fenced_guarded";

/// One contender: how it writes once, and the round trips that takes on the application's
/// connection.
#[derive(Clone, Copy)]
enum Write {
    /// The UPDATE alone, in its own transaction (autocommit).
    Plain,
    /// BEGIN, the UPDATE, COMMIT, one round trip each.
    PlainTx,
    /// BEGIN, the UPDATE and COMMIT sent at once (one round trip): the fenced pipeline without
    /// its check, so the difference between the two is the check alone.
    PlainTxPipelined,
    /// BEGIN, `Lease::fenced`, the UPDATE, COMMIT, one round trip each: the helper as the
    /// README shows it.
    Helper,
    /// BEGIN, `Lease::fenced`, the UPDATE and COMMIT sent at once (one round trip): a refused
    /// check aborts the transaction, so the UPDATE fails and COMMIT answers ROLLBACK.
    Pipelined,
    /// The same pipeline with the key's lease row locked `FOR SHARE` by a plain SELECT
    /// instead of `check_fence`: the lock without the function (no guarantee: a part).
    LockOnly,
    /// `check_fence` alone, autocommit: the check's own transaction (its row lock gives it a
    /// transaction id, so its commit is flushed).
    CheckAlone,
    /// The UPDATE alone, autocommit, on a table whose `fenced_write` trigger checks the fence
    /// the row carries: the check inside the application's one statement.
    Trigger,
}

impl Write {
    fn record(self) -> Record {
        let (id, label) = match self {
            Write::Plain => ("rust/fenced-plain", "UPDATE, autocommit (no check)"),
            Write::PlainTx => ("rust/fenced-plain-tx", "BEGIN; UPDATE; COMMIT (no check)"),
            Write::PlainTxPipelined => (
                "rust/fenced-plain-tx-pipelined",
                "BEGIN; UPDATE; COMMIT, pipelined (no check)",
            ),
            Write::Helper => (
                "rust/fenced-helper",
                "BEGIN; Lease::fenced; UPDATE; COMMIT, one round trip each",
            ),
            Write::Pipelined => (
                "rust/fenced-pipelined",
                "BEGIN; Lease::fenced; UPDATE; COMMIT, pipelined (one round trip)",
            ),
            Write::LockOnly => (
                "rust/fenced-lock-only",
                "part: the lease row FOR SHARE + UPDATE, pipelined (no check_fence)",
            ),
            Write::CheckAlone => (
                "rust/fenced-check-alone",
                "part: SELECT check_fence, autocommit (no UPDATE)",
            ),
            Write::Trigger => (
                "rust/fenced-trigger",
                "UPDATE, autocommit, on a table with the fenced_write trigger",
            ),
        };
        let mut record = Record::new(id, label);
        record.metric("app_round_trips", self.round_trips());
        record
    }

    fn round_trips(self) -> u64 {
        match self {
            Write::Plain
            | Write::PlainTxPipelined
            | Write::Pipelined
            | Write::LockOnly
            | Write::CheckAlone
            | Write::Trigger => 1,
            Write::PlainTx => 3,
            Write::Helper => 4,
        }
    }
}

struct App {
    db: tokio_postgres::Client,
    update: Statement,
    lock: Statement,
    /// The UPDATE of the table guarded by the trigger: $1 n, $2 key, $3 fence.
    guarded_update: Statement,
}

impl App {
    async fn write(&mut self, how: Write, lease: &Lease, n: i64) -> BenchResult<()> {
        let key = lease.key();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&n, &key];
        match how {
            Write::Plain => {
                self.db.execute(&self.update, &params).await?;
            }
            Write::PlainTx => {
                let tx = self.db.transaction().await?;
                tx.execute(&self.update, &params).await?;
                tx.commit().await?;
            }
            Write::PlainTxPipelined => {
                let db = &self.db;
                tokio::try_join!(
                    async { db.batch_execute("BEGIN").await.map_err(box_error) },
                    async { db.execute(&self.update, &params).await.map_err(box_error) },
                    async { db.batch_execute("COMMIT").await.map_err(box_error) },
                )?;
            }
            Write::Helper => {
                let tx = self.db.transaction().await?;
                lease.fenced(&tx).await?;
                tx.execute(&self.update, &params).await?;
                tx.commit().await?;
            }
            Write::Pipelined => {
                let db = &self.db;
                tokio::try_join!(
                    async { db.batch_execute("BEGIN").await.map_err(box_error) },
                    async { lease.fenced(db).await.map_err(box_error) },
                    async { db.execute(&self.update, &params).await.map_err(box_error) },
                    async { db.batch_execute("COMMIT").await.map_err(box_error) },
                )?;
            }
            Write::LockOnly => {
                let db = &self.db;
                let ns: &str = NAMESPACE;
                tokio::try_join!(
                    async { db.batch_execute("BEGIN").await.map_err(box_error) },
                    async {
                        db.query_one(&self.lock, &[&ns, &key])
                            .await
                            .map_err(box_error)
                    },
                    async { db.execute(&self.update, &params).await.map_err(box_error) },
                    async { db.batch_execute("COMMIT").await.map_err(box_error) },
                )?;
            }
            Write::CheckAlone => lease.fenced(&self.db).await?,
            Write::Trigger => {
                let fence = lease.fence();
                self.db
                    .execute(&self.guarded_update, &[&n, &key, &fence])
                    .await?;
            }
        }
        Ok(())
    }
}

fn box_error<E: std::error::Error + Send + Sync + 'static>(
    e: E,
) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(e)
}

async fn client(config: &Config) -> BenchResult<Client> {
    Ok(Client::connect(
        &config.url,
        ClientOptions::new()
            .schema(SCHEMA)
            .namespace(NAMESPACE)
            .pool_size(1)
            .ttl(Duration::from_secs(60)),
    )
    .await?)
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let accord = client(config).await?;
    let db = raw::connect(&config.url).await?;
    db.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {TABLE} (key text PRIMARY KEY, n bigint NOT NULL);
         INSERT INTO {TABLE} VALUES ('fenced', 0), ('done', 0) ON CONFLICT (key) DO NOTHING"
    ))
    .await?;
    // The same table guarded by the trigger, its rows carrying their writer's fence.
    db.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {GUARDED} (key text PRIMARY KEY, n bigint NOT NULL, fence bigint);
         INSERT INTO {GUARDED} VALUES ('fenced', 0, NULL) ON CONFLICT (key) DO NOTHING;
         DROP TRIGGER IF EXISTS fenced ON {GUARDED};
         CREATE TRIGGER fenced BEFORE UPDATE ON {GUARDED} FOR EACH ROW
           EXECUTE FUNCTION {SCHEMA}.fenced_write('{NAMESPACE}', 'key', 'fence')"
    ))
    .await?;
    let update = db
        .prepare(&format!("UPDATE {TABLE} SET n = $1 WHERE key = $2"))
        .await?;
    let guarded_update = db
        .prepare(&format!(
            "UPDATE {GUARDED} SET n = $1, fence = $3 WHERE key = $2"
        ))
        .await?;
    let lock = db
        .prepare(&format!(
            "SELECT 1 FROM {SCHEMA}.leases WHERE namespace = $1 AND key = $2 FOR SHARE"
        ))
        .await?;
    let mut app = App {
        db,
        update,
        lock,
        guarded_update,
    };
    let lease = accord.acquire("fenced", AcquireOptions::new()).await?;
    let ways = [
        Write::Plain,
        Write::PlainTx,
        Write::PlainTxPipelined,
        Write::Helper,
        Write::Pipelined,
        Write::LockOnly,
        Write::CheckAlone,
        Write::Trigger,
    ];
    let mut records: Vec<Record> = ways.iter().map(|w| w.record()).collect();
    // A fifth of scenario 1's pairs each, interleaved in rounds (the machine's drift spreads
    // over every contender alike).
    let per = (config.pairs / 5).max(2);
    let rounds = 5;
    let mut n = 0i64;
    for &how in &ways {
        for _ in 0..config.warmup / 5 {
            n += 1;
            app.write(how, &lease, n).await?;
        }
    }
    for _ in 0..rounds {
        for (record, &how) in records.iter_mut().zip(&ways) {
            let mut samples = Vec::with_capacity(per / rounds + 1);
            let started = Instant::now();
            for _ in 0..(per / rounds).max(1) {
                n += 1;
                let t = Instant::now();
                app.write(how, &lease, n).await?;
                samples.push(t.elapsed());
            }
            record.add(samples, started.elapsed());
        }
    }
    lease.release().await?;
    records.extend(done_rounds(&accord, &mut app, per).await?);
    accord.close().await;
    Ok(records)
}

/// The result write and the key's done: written then `done` (two transactions: the
/// application's and accord's), or in one transaction with `done_in` (its round trips one by
/// one, and pipelined). Each op takes a key of its own (acquired before the clock starts).
async fn done_rounds(accord: &Client, app: &mut App, per: usize) -> BenchResult<Vec<Record>> {
    let ways = [
        (
            "rust/done-after-write",
            "UPDATE, autocommit; then Lease::done (accord's connection)",
            1u64,
        ),
        (
            "rust/done-in",
            "BEGIN; UPDATE; Lease::done_in; COMMIT, one round trip each",
            4,
        ),
        (
            "rust/done-in-pipelined",
            "BEGIN; UPDATE; Lease::done_in; COMMIT, pipelined (one round trip)",
            1,
        ),
    ];
    let mut records = Vec::new();
    let n = (per / 2).max(2);
    // Keys of this pass alone (the scenario runs again with fsync on, and done keys stay done).
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    for (which, (id, label, app_trips)) in ways.iter().enumerate() {
        let mut record = Record::new(id, *label);
        let mut accord_statements = 0;
        for i in 0..n {
            let lease = accord
                .acquire(&format!("done-{run_id}-{which}-{i}"), AcquireOptions::new())
                .await?;
            let key = "done";
            let value = i as i64;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&value, &key];
            let before = accord.stats().statements;
            let t = Instant::now();
            match which {
                0 => {
                    app.db.execute(&app.update, &params).await?;
                    lease.done(None).await?;
                }
                1 => {
                    let tx = app.db.transaction().await?;
                    tx.execute(&app.update, &params).await?;
                    lease.done_in(&tx, None).await?;
                    tx.commit().await?;
                }
                _ => {
                    let db = &app.db;
                    tokio::try_join!(
                        async { db.batch_execute("BEGIN").await.map_err(box_error) },
                        async { db.execute(&app.update, &params).await.map_err(box_error) },
                        async { lease.done_in(db, None).await.map_err(box_error) },
                        async { db.batch_execute("COMMIT").await.map_err(box_error) },
                    )?;
                }
            }
            let elapsed = t.elapsed();
            accord_statements += accord.stats().statements - before;
            record.add(vec![elapsed], elapsed);
            // done_in settles the lease at its next look (not timed): wait for it, so that no
            // renewal of this key runs in the next op's window.
            if which > 0 {
                tokio::time::timeout(Duration::from_secs(10), lease.lost_signal().ended())
                    .await
                    .map_err(|_| "a lease finished with done_in never settled")?;
            }
        }
        record.metric("app_round_trips", *app_trips);
        record.metric(
            "accord_statements",
            accord_statements as f64 / record.ops.max(1) as f64,
        );
        records.push(record);
    }
    Ok(records)
}
