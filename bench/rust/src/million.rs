//! Scenario 12: calls on a namespace of `--million-keys` keys (1,000,000), one work pool
//! `k/` half way through its work: the first 60% done, 200 held by workers (the keys claimed
//! next, as claims go in offer order), the rest free. Each call runs `REPEATS` times on one
//! client; the p50 is what the targets read.
//!
//! - `rust/million-page`, `-page-deep`: list's first page, and a page from a cursor half way;
//! - `rust/million-prefix`: list with a prefix 1,000 keys share;
//! - `rust/million-state-done`, `-held`, `-free`: list one state (first page);
//! - `rust/million-counts`: the pool's counts;
//! - `rust/million-claim`: claim one key and release it, beside `rust/million-claim-small` on a
//!   pool of 1,000 keys in another namespace of the same table (the ratio).
//!
//! The rows are written by one `INSERT … SELECT` in accord's own format (what offer, claim and
//! done would leave; a million claims would take the bench minutes), then VACUUM ANALYZE, as
//! autovacuum would have run on a table that grew to this size.

use std::time::Instant;

use accord::{ClaimOptions, Client, ClientOptions, KeyState, ListQuery};

use crate::raw;
use crate::record::Record;
use crate::{BenchResult, Config, SCHEMA};

const NAMESPACE: &str = "million";
const SMALL_NAMESPACE: &str = "million-small";
const REPEATS: usize = 50;
const HELD: usize = 200;

async fn client(config: &Config, namespace: &str) -> BenchResult<Client> {
    Ok(Client::connect(
        &config.url,
        ClientOptions::new().schema(SCHEMA).namespace(namespace),
    )
    .await?)
}

/// `keys` keys `k/0000000`…, the first 60% done, the next `HELD` held for an hour, the rest
/// free: a pool as accord's offer, claim and done leave it.
async fn fill(db: &tokio_postgres::Client, namespace: &str, keys: usize) -> BenchResult<()> {
    let done = keys * 6 / 10;
    db.execute(
        &format!("DELETE FROM {SCHEMA}.leases WHERE namespace = $1"),
        &[&namespace],
    )
    .await?;
    db.execute(
        &format!(
            "INSERT INTO {SCHEMA}.leases
                    (namespace, key, owner, fence, attempt, expires_at, done, metadata,
                     updated_at, pool, offered)
             SELECT $1, 'k/' || lpad(i::text, 7, '0'),
                    CASE WHEN i < $3::bigint + $4::bigint THEN 'worker' END,
                    nextval('{SCHEMA}.fence_seq'),
                    CASE WHEN i >= $3::bigint AND i < $3::bigint + $4::bigint THEN i END,
                    CASE WHEN i >= $3::bigint AND i < $3::bigint + $4::bigint THEN now() + interval '1 hour' END,
                    i < $3::bigint, '{{}}', now(), 'k/', i
               FROM generate_series(0, $2::bigint - 1) AS i"
        ),
        &[&namespace, &(keys as i64), &(done as i64), &(HELD as i64)],
    )
    .await?;
    db.batch_execute(&format!("VACUUM ANALYZE {SCHEMA}.leases"))
        .await?;
    Ok(())
}

/// Runs `call` `REPEATS` times (after one unmeasured run) into a record.
async fn measure<F, Fut>(id: &'static str, label: String, mut call: F) -> BenchResult<Record>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = BenchResult<usize>>,
{
    let mut record = Record::new(id, label);
    let returned = call().await?;
    let mut samples = Vec::with_capacity(REPEATS);
    let started = Instant::now();
    for _ in 0..REPEATS {
        let t = Instant::now();
        call().await?;
        samples.push(t.elapsed());
    }
    record.add(samples, started.elapsed());
    record.metric("returned", returned as u64);
    Ok(record)
}

async fn list(client: &Client, query: ListQuery) -> BenchResult<usize> {
    Ok(client.list(query).await?.items.len())
}

async fn claim_and_release(client: &Client) -> BenchResult<usize> {
    let claimed = client.claim("k/", ClaimOptions::new()).await?;
    let n = claimed.len();
    for lease in claimed {
        lease.release().await?;
    }
    if n != 1 {
        return Err(format!("a claim on a pool with free keys granted {n}").into());
    }
    Ok(n)
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let keys = config.million_keys;
    let db = raw::connect(&config.url).await?;
    // The client first: it creates the schema.
    let big = client(config, NAMESPACE).await?;
    let small = client(config, SMALL_NAMESPACE).await?;
    let t = Instant::now();
    fill(&db, NAMESPACE, keys).await?;
    fill(&db, SMALL_NAMESPACE, 1000).await?;
    println!(
        "  {keys} keys written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut records = Vec::new();

    records.push(
        measure(
            "rust/million-page",
            format!("list: first page of 100 of {} keys", keys),
            || list(&big, ListQuery::new()),
        )
        .await?,
    );
    // A cursor half way: a page of one key among the middle key's ten neighbours ends there.
    let middle = format!("k/{:07}", keys / 2);
    let deep_query = ListQuery::new().cursor(
        big.list(
            ListQuery::new()
                .prefix(&middle[..middle.len() - 1])
                .limit(1),
        )
        .await?
        .next_cursor
        .ok_or("no page after the middle key")?,
    );
    records.push(
        measure(
            "rust/million-page-deep",
            "list: a page of 100 half way through".to_string(),
            || list(&big, deep_query.clone()),
        )
        .await?,
    );
    let prefix = format!("k/{:04}", (keys / 2) / 1000);
    records.push(
        measure(
            "rust/million-prefix",
            format!("list: prefix {prefix} (1,000 keys), first page"),
            || list(&big, ListQuery::new().prefix(prefix.clone())),
        )
        .await?,
    );
    for (id, state) in [
        ("rust/million-state-done", KeyState::Done),
        ("rust/million-state-held", KeyState::Held),
        ("rust/million-state-free", KeyState::Free),
    ] {
        records.push(
            measure(
                id,
                format!("list: state {}, first page", state.as_str()),
                || list(&big, ListQuery::new().state(state)),
            )
            .await?,
        );
    }
    records.push(
        measure(
            "rust/million-counts",
            format!("counts of the pool of {} keys", keys),
            || async { Ok(big.counts("k/").await?.done as usize) },
        )
        .await?,
    );
    records.push(
        measure(
            "rust/million-claim",
            format!("claim 1 + release, pool of {} keys", keys),
            || claim_and_release(&big),
        )
        .await?,
    );
    records.push(
        measure(
            "rust/million-claim-small",
            "claim 1 + release, pool of 1,000 keys".to_string(),
            || claim_and_release(&small),
        )
        .await?,
    );
    big.close().await;
    small.close().await;
    db.execute(
        &format!("DELETE FROM {SCHEMA}.leases WHERE namespace IN ($1, $2)"),
        &[&NAMESPACE, &SMALL_NAMESPACE],
    )
    .await?;
    for r in &mut records {
        r.metric("keys", keys as u64);
    }
    Ok(records)
}
