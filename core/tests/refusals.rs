//! P5: a refusal writes nothing. `try_acquire` of a held or a done key, and a claim on a pool
//! with nothing claimable, take no row lock, no fence and write no WAL; a grant still takes one
//! statement.
//!
//! The WAL is judged per statement, by pg_stat_statements' `wal_records` for the statements of
//! a schema of this test's own (its name is in their text): the server-wide WAL position also
//! moves with other tests, checkpoints and the server's own records, so it could not tell.

mod support;

use std::time::Duration;

use accord::{AcquireOptions, ClaimOptions, ErrorKind};
use support::Harness;

const REFUSALS: i64 = 50;

/// What the refusals are refused on: `holder` holds "held" (returned) and has finished "done";
/// of the pool "pool/", it holds one key and has finished the other.
async fn hold_and_finish(holder: &accord::Client) -> (accord::Lease, accord::Lease) {
    holder
        .offer("pool/", ["pool/a", "pool/b"], None)
        .await
        .unwrap();
    let mut claimed = holder
        .claim("pool/", ClaimOptions::new().limit(2))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    claimed.pop().unwrap().done(None).await.unwrap();
    let pooled = claimed.pop().unwrap();
    (hold_and_finish_keys(holder).await, pooled)
}

async fn hold_and_finish_keys(holder: &accord::Client) -> accord::Lease {
    let finished = holder
        .try_acquire("done", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    finished.done(None).await.unwrap();
    holder
        .try_acquire("held", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_refusals_write_nothing() {
    let h = Harness::postgres("p5").await;
    if h.admin()
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .is_err()
    {
        // The cluster `make test` starts always loads it.
        assert!(
            std::env::var("ACCORD_TEST_PGDATA").is_err(),
            "pg_stat_statements is missing from the test cluster"
        );
        eprintln!("p5_refusals_write_nothing: skipped, pg_stat_statements is not loaded");
        return;
    }
    let schema = format!("p5_{}", h.tag);
    let options = |owner: &str| {
        h.options(owner)
            .schema(schema.clone())
            .ttl(Duration::from_secs(60))
    };
    let holder = h.client_with("o1", options("o1")).await;
    let other = h.client_with("o2", options("o2")).await;
    let (held, _pooled) = hold_and_finish(&holder).await;

    let stats = || async {
        let row = h
            .admin()
            .query_one(
                &format!(
                    "SELECT COALESCE(sum(calls), 0)::bigint, COALESCE(sum(wal_records), 0)::bigint,
                            (SELECT last_value FROM \"{schema}\".fence_seq)
                       FROM pg_stat_statements WHERE query LIKE $1 AND query LIKE '%nextval%'"
                ),
                &[&format!("%\"{schema}\".leases%")],
            )
            .await
            .unwrap();
        (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2),
        )
    };
    // One refusal of each first: the first reads of a page after a checkpoint may set hint
    // bits, which servers with checksums or wal_log_hints log (as full pages); the refusals
    // measured below must be judged on their own.
    assert!(other
        .try_acquire("held", AcquireOptions::new())
        .await
        .unwrap()
        .is_none());
    assert!(other
        .try_acquire("done", AcquireOptions::new())
        .await
        .is_err());
    let (calls_before, wal_before, fence_before) = stats().await;
    for _ in 0..REFUSALS {
        assert!(other
            .try_acquire("held", AcquireOptions::new())
            .await
            .unwrap()
            .is_none());
        let done = other.try_acquire("done", AcquireOptions::new()).await;
        assert_eq!(done.unwrap_err().kind(), ErrorKind::Done);
        assert!(other
            .claim("pool/", ClaimOptions::new())
            .await
            .unwrap()
            .is_empty());
    }
    let (calls, wal, fence) = stats().await;
    assert_eq!(
        calls - calls_before,
        3 * REFUSALS,
        "every refusal was one statement"
    );
    assert_eq!(wal - wal_before, 0, "refusals wrote WAL records");
    assert_eq!(fence, fence_before, "refusals took fences");

    // A grant is still one statement, and it writes.
    held.release().await.unwrap();
    let lease = other
        .try_acquire("held", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    assert!(lease.fence() > fence_before);
    let (calls_after, wal_after, _) = stats().await;
    assert_eq!(calls_after - calls, 1, "a grant is one statement");
    assert!(wal_after > wal, "a grant is written");
    lease.release().await.unwrap();
    holder.close().await;
    other.close().await;
}

/// On the embedded store a refusal (and an empty claim) takes no write lock: it is answered while another
/// connection holds the store's write lock (a grant would wait for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_refusals_take_no_write_lock_on_sqlite() {
    let h = Harness::sqlite("p5").await;
    let holder = h.client("o1").await;
    let other = h.client("o2").await;
    let _held = hold_and_finish(&holder).await;
    let path = h.url.strip_prefix("sqlite://").unwrap().to_string();
    let writer = rusqlite::Connection::open(&path).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Bounded generously, to fail rather than hang if a refusal waited for the lock.
    let refusals = tokio::time::timeout(Duration::from_secs(5), async {
        let held = other.try_acquire("held", AcquireOptions::new()).await;
        let done = other.try_acquire("done", AcquireOptions::new()).await;
        let claimed = other.claim("pool/", ClaimOptions::new()).await;
        (held, done, claimed)
    })
    .await;
    writer.execute_batch("ROLLBACK").unwrap();
    let (held, done, claimed) = refusals.expect("a refusal waited for the write lock");
    assert!(held.unwrap().is_none());
    assert!(claimed.unwrap().is_empty());
    assert_eq!(done.unwrap_err().kind(), ErrorKind::Done);
    holder.close().await;
    other.close().await;
}
