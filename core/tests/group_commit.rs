//! Client-side group commit on PostgreSQL: the tries, endings (release, done) and
//! notifications that many tasks of one client start at once go out as a few statements, not
//! one each, and each caller still gets its own answer, also when the coordinator no longer
//! records some of the grants or someone waits in line for a free key.
//!
//! Statements are counted by pg_stat_statements for a schema of this test's own (its name is
//! in their text), so other tests running meanwhile do not count.

mod support;

use std::time::Duration;

use accord::{AcquireOptions, ErrorKind, LeaseStatus, LostReason};
use support::Harness;

const LEASES: usize = 40;

/// Whether pg_stat_statements could be created, decided once for this file's tests: two
/// `CREATE EXTENSION IF NOT EXISTS` at once make one fail on the catalog's unique index.
static EXTENSION: tokio::sync::OnceCell<bool> = tokio::sync::OnceCell::const_new();

/// Loads pg_stat_statements; false (the test skips) on a server without it, which the
/// harness's own cluster always has.
async fn statements_counted(h: &Harness, test: &str) -> bool {
    let created = EXTENSION
        .get_or_init(|| async {
            h.admin()
                .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                .await
                .is_ok()
        })
        .await;
    if !created {
        assert!(
            std::env::var("ACCORD_TEST_PGDATA").is_err(),
            "pg_stat_statements is missing from the test cluster"
        );
        eprintln!("{test}: skipped, pg_stat_statements is not loaded");
        return false;
    }
    true
}

/// Calls of the statements on `schema`'s leases whose text holds `marker`.
async fn calls(h: &Harness, schema: &str, marker: &str) -> i64 {
    h.admin()
        .query_one(
            "SELECT COALESCE(sum(calls), 0)::bigint FROM pg_stat_statements
              WHERE query LIKE $1 AND query LIKE $2",
            &[&format!("%\"{schema}\".leases%"), &format!("%{marker}%")],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
}

/// The text only the batched try has.
const TRIES: &str = "AS b(key, attempt, ttl, metadata)";

#[tokio::test]
async fn tries_started_together_share_statements() {
    let h = Harness::postgres("group_tries").await;
    if !statements_counted(&h, "tries_started_together_share_statements").await {
        return;
    }
    let schema = format!("gt_{}", h.tag);
    let options = |owner: &str| {
        h.options(owner)
            .schema(schema.clone())
            .ttl(Duration::from_secs(60))
    };
    let client = h.client_with("o1", options("o1")).await;
    let other = h.client_with("o2", options("o2")).await;
    // w0 is free, but someone waits in line for it (a place taken by a waiter whose turn has
    // not come yet): a try must not jump the line, in a round as alone.
    let w0 = other
        .try_acquire("w0", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    w0.release().await.unwrap();
    h.admin()
        .execute(
            &format!(
                "INSERT INTO \"{schema}\".tickets
                        (namespace, key, ticket, owner, shared, attempt, expires_at, updated_at)
                 VALUES ($1, 'w0', nextval('\"{schema}\".fence_seq'), 'ghost', false, 0,
                         clock_timestamp() + interval '1 hour', clock_timestamp())"
            ),
            &[&h.tag],
        )
        .await
        .unwrap();
    let before = calls(&h, &schema, TRIES).await;
    let keys: Vec<String> = (0..LEASES).map(|i| format!("k{i:02}")).collect();
    let tries = keys
        .iter()
        .map(String::as_str)
        .chain(["w0"])
        .map(|key| client.try_acquire(key, AcquireOptions::new()));
    let results = futures_util::future::join_all(tries).await;
    let rounds = calls(&h, &schema, TRIES).await - before;
    // One round when every try joined the first; two when the first went out before the rest
    // had queued (each try queues from a task of its own, and on this test's single-threaded
    // runtime they all run before the leader's yield ends).
    assert!(
        (1..=2).contains(&rounds),
        "{} tries took {rounds} batched statements",
        LEASES + 1
    );
    let (granted, refused) = results.split_at(LEASES);
    for (key, result) in keys.iter().zip(granted) {
        let lease = result
            .as_ref()
            .unwrap()
            .as_ref()
            .expect("a fresh key is granted");
        assert_eq!(lease.key(), key);
    }
    assert!(
        refused[0].as_ref().unwrap().is_none(),
        "a free key with a waiter in line is refused"
    );
    client.close().await;
    other.close().await;
}

#[tokio::test]
async fn endings_started_together_share_statements() {
    let h = Harness::postgres("group_commit").await;
    if !statements_counted(&h, "endings_started_together_share_statements").await {
        return;
    }
    let schema = format!("gc_{}", h.tag);
    let client = h
        .client_with(
            "o1",
            h.options("o1")
                .schema(schema.clone())
                .ttl(Duration::from_secs(60)),
        )
        .await;
    let mut leases = Vec::new();
    for i in 0..LEASES {
        let lease = client
            .try_acquire(&format!("k{i:02}"), AcquireOptions::new())
            .await
            .unwrap()
            .unwrap();
        leases.push(lease);
    }
    // Two grants expire behind the client's back (as if its keepalive had been partitioned
    // away): the coordinator no longer records them, the client does not know yet.
    let expired = ["k00", "k01"];
    h.admin()
        .execute(
            &format!(
                "UPDATE \"{schema}\".leases SET expires_at = clock_timestamp() - interval '1 second'
                  WHERE key = ANY($1)"
            ),
            &[&expired.to_vec()],
        )
        .await
        .unwrap();
    let endings = |kind: &'static str| {
        let schema = schema.clone();
        let admin = h.admin();
        async move {
            let row = admin
                .query_one(
                    "SELECT COALESCE(sum(calls), 0)::bigint FROM pg_stat_statements
                      WHERE query LIKE $1 AND query LIKE $2",
                    &[&format!("%\"{schema}\".leases%"), &format!("%{kind}%")],
                )
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    let (dones_before, releases_before) = (
        endings("finished AS (").await,
        endings("released AS (").await,
    );
    // Even keys done, odd ones released, all at once.
    let results =
        futures_util::future::join_all(leases.iter().enumerate().map(|(i, lease)| async move {
            if i % 2 == 0 {
                lease.done(None).await
            } else {
                lease.release().await
            }
        }))
        .await;
    let dones = endings("finished AS (").await - dones_before;
    let releases = endings("released AS (").await - releases_before;
    // One round for each kind when every call joined the first; two when the first round
    // went out before the rest had queued (each call queues before its task yields, so on
    // this test's single-threaded runtime it is one).
    assert!(
        (1..=2).contains(&dones),
        "{} dones took {dones} statements",
        LEASES / 2
    );
    assert!(
        (1..=2).contains(&releases),
        "{} releases took {releases} statements",
        LEASES / 2
    );
    for ((lease, result), i) in leases.iter().zip(&results).zip(0..) {
        if expired.contains(&lease.key()) {
            assert_eq!(
                result.as_ref().unwrap_err().kind(),
                ErrorKind::LeaseLost,
                "{}",
                lease.key()
            );
            assert_eq!(lease.status(), LeaseStatus::Lost(LostReason::NotRecorded));
        } else {
            result.as_ref().unwrap();
            let want = if i % 2 == 0 {
                LeaseStatus::Done
            } else {
                LeaseStatus::Released
            };
            assert_eq!(lease.status(), want, "{}", lease.key());
        }
    }
    client.close().await;
}

#[tokio::test]
async fn claims_started_together_share_statements() {
    let h = Harness::postgres("group_claims").await;
    if !statements_counted(&h, "claims_started_together_share_statements").await {
        return;
    }
    let schema = format!("gcl_{}", h.tag);
    let client = h
        .client_with(
            "o1",
            h.options("o1")
                .schema(schema.clone())
                .ttl(Duration::from_secs(60)),
        )
        .await;
    let keys: Vec<String> = (0..40).map(|i| format!("jobs/{i:02}")).collect();
    client.offer("jobs/", keys, None).await.unwrap();
    let before = calls(&h, &schema, "ORDER BY l.offered").await;
    let claims = (0..8).map(|_| client.claim("jobs/", accord::ClaimOptions::new().limit(5)));
    let results = futures_util::future::join_all(claims).await;
    let statements = calls(&h, &schema, "ORDER BY l.offered").await - before;
    // As for tries: one round, or two when the first left before the rest had queued.
    assert!(
        (1..=2).contains(&statements),
        "8 claims took {statements} statements"
    );
    let mut got: Vec<String> = results
        .into_iter()
        .flat_map(|r| {
            let leases = r.unwrap();
            assert_eq!(leases.len(), 5, "each claim gets its limit");
            leases.into_iter().map(|l| {
                let key = l.key().to_string();
                std::mem::forget(l);
                key
            })
        })
        .collect();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 40, "every key once");
    client.close().await;
}

/// The text only the batched notify has.
const NOTIFICATIONS: &str = "AS u(channel, payload)";

#[tokio::test]
async fn notifications_sent_together_share_statements() {
    let h = Harness::postgres("group_notify").await;
    if !statements_counted(&h, "notifications_sent_together_share_statements").await {
        return;
    }
    let channel = h.channel("gn");
    let client = h.client("o1").await;
    let listener = h.client("o2").await;
    let sub = listener.listen([&channel]).await.unwrap();
    let batches = || async {
        h.admin()
            .query_one(
                "SELECT COALESCE(sum(calls), 0)::bigint FROM pg_stat_statements
                  WHERE query LIKE $1",
                &[&format!("%{NOTIFICATIONS}%")],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let before = batches().await;
    let payloads: Vec<String> = (0..LEASES).map(|i| format!("n{i:02}")).collect();
    let sent =
        futures_util::future::join_all(payloads.iter().map(|p| client.notify(&channel, p))).await;
    for result in sent {
        result.unwrap();
    }
    let rounds = batches().await - before;
    // As for tries: one round, or two when the first went out before the rest had queued.
    assert!(
        (1..=2).contains(&rounds),
        "{LEASES} notifications took {rounds} batched statements"
    );
    let mut heard = Vec::new();
    while heard.len() < LEASES {
        match tokio::time::timeout(Duration::from_secs(10), sub.recv()).await {
            Ok(Ok(Some(accord::Event::Message(m)))) => heard.push(m.payload),
            Ok(Ok(Some(accord::Event::Reconnected))) => {}
            other => panic!("expected a notification, got {other:?}"),
        }
    }
    heard.sort();
    assert_eq!(heard, payloads);
}
