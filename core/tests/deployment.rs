//! O1: accord behind a real PgBouncer. `scripts/with-postgres.sh` starts one from the system's
//! binary in front of the test database, with three pools: `session`, `transaction` and
//! `tiny`, a session pool of two server connections (ACCORD_TEST_PGBOUNCER_SESSION_URL,
//! ACCORD_TEST_PGBOUNCER_TRANSACTION_URL, ACCORD_TEST_PGBOUNCER_TINY_SESSION_URL).
//!
//! Session pooling carries everything. Transaction pooling carries commands but not LISTEN: a
//! client there must say so (listen fails naming `listen_url`, waiters re-check every second)
//! and, with `listen_url` naming the server directly, hears everything again.

mod support;

use std::time::Duration;

use accord::{AcquireOptions, Client, ErrorKind};
use support::Harness;

/// The PgBouncer pool of this mode, when the harness started one. The test cluster of
/// `make test` always has it: there, a missing one fails the test rather than skipping it.
fn bouncer(mode: &str) -> Option<String> {
    let url = std::env::var(format!("ACCORD_TEST_PGBOUNCER_{mode}_URL")).ok();
    if url.is_none() {
        assert!(
            std::env::var("ACCORD_TEST_PGDATA").is_err(),
            "the test cluster has no PgBouncer: install it (apt-get install pgbouncer)"
        );
        eprintln!("skipped: no PgBouncer (ACCORD_TEST_PGBOUNCER_{mode}_URL is not set)");
    }
    url
}

/// Holds `key` from `a`, starts `b` waiting for it, releases once `b` has its place in line
/// (read from the coordinator, not guessed with a sleep), and returns how long `b` waited
/// after the release.
async fn waiter_after_release(
    h: &Harness,
    a: &Client,
    b: &Client,
    key: &str,
    schema: &str,
) -> Duration {
    let held = a
        .acquire(key, AcquireOptions::new().ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    let b = b.clone();
    let wanted = key.to_string();
    let waiter = tokio::spawn(async move {
        b.acquire(
            &wanted,
            AcquireOptions::new().timeout(Duration::from_secs(30)),
        )
        .await
    });
    let in_line = format!(
        "SELECT count(*) FROM \"{schema}\".tickets WHERE namespace = $1 AND key = $2 AND NOT granted"
    );
    for _ in 0..500 {
        let n: i64 = h
            .admin()
            .query_one(&in_line, &[&h.tag, &key])
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.release().await.unwrap();
    let released = std::time::Instant::now();
    let granted = waiter.await.unwrap().expect("the waiter gets the key");
    let waited = released.elapsed();
    granted.release().await.unwrap();
    waited
}

#[tokio::test]
async fn o1_session_pooling_carries_commands_and_notifications() {
    let Some(url) = bouncer("SESSION") else {
        return;
    };
    let h = Harness::postgres("o1_session").await;
    let a = Client::connect(&url, h.options("a")).await.unwrap();
    let b = Client::connect(&url, h.options("b")).await.unwrap();
    let sub = b.listen(["o1"]).await.unwrap();
    a.notify("o1", "hello").await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), sub.recv())
        .await
        .expect("a notification through session pooling arrives")
        .unwrap();
    assert!(format!("{heard:?}").contains("hello"), "{heard:?}");
    // Woken by the release's notification: well before the holder's 60 s expiry.
    let waited = waiter_after_release(&h, &a, &b, "k", "accord").await;
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    a.close().await;
    b.close().await;
}

/// A session pool with fewer server connections than its clients hold (`tiny`: two, and two
/// clients of one command connection each): a listening connection waits in PgBouncer for a
/// server connection that never frees. A waiter stops waiting for it within a few seconds and
/// takes its place in line, re-checking every second, instead of waiting for it until its own
/// deadline (60 s here, and a statement timeout as long, so that only the new bound can end
/// that wait early), and `listen` fails saying what holds the connection back.
#[tokio::test]
async fn o1_a_session_pool_too_small_for_listening_is_reported() {
    let Some(url) = bouncer("TINY_SESSION") else {
        return;
    };
    let h = Harness::postgres("o1_tiny").await;
    let long = Duration::from_secs(60);
    let a = Client::connect(&url, h.options("a").pool_size(1))
        .await
        .unwrap();
    let b = Client::connect(&url, h.options("b").pool_size(1).statement_timeout(long))
        .await
        .unwrap();
    let held = a
        .acquire("k", AcquireOptions::new().ttl(long))
        .await
        .unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire("k", AcquireOptions::new().timeout(long)).await })
    };
    // In line within a few seconds (bounded generously here, far below the waiter's 60 s).
    let in_line =
        "SELECT count(*) FROM accord.tickets WHERE namespace = $1 AND key = 'k' AND NOT granted";
    let bound = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let n: i64 = h
            .admin()
            .query_one(in_line, &[&h.tag])
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < bound,
            "the waiter is still waiting for its listening connection instead of trying"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    held.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter re-checks and gets the key")
        .unwrap()
        .unwrap();
    granted.release().await.unwrap();
    // `listen` waits its statement timeout (10 s), then says why.
    let err = a.listen(["o1"]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    for expected in ["is not up after", "session mode", "pool_size", "listen_url"] {
        assert!(
            err.message().contains(expected),
            "{expected:?} missing from: {err}"
        );
    }
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn o1_transaction_pooling_says_listen_cannot_hear_and_listen_url_fixes_it() {
    let Some(url) = bouncer("TRANSACTION") else {
        return;
    };
    let h = Harness::postgres("o1_transaction").await;
    // Statements sent unprepared: PgBouncer 1.18 cannot carry prepared statements in this
    // mode. The schema of its own names them in pg_prepared_statements, if any were left.
    let schema = format!("o1_tx_{}", h.tag);
    let pooled = |owner: &str| {
        h.options(owner)
            .schema(schema.clone())
            .prepare_statements(false)
    };
    let a = Client::connect(&url, pooled("a")).await.unwrap();
    let b = Client::connect(&url, pooled("b")).await.unwrap();
    // LISTEN through transaction pooling succeeds and then hears nothing: an error, never a
    // silent subscription.
    let err = b.listen(["o1"]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.to_string().contains("listen_url"), "{err}");
    // A waiter without notifications re-checks every second: late by a second at most (here
    // generously bounded), never left until the holder's 60 s expiry.
    let waited = waiter_after_release(&h, &a, &b, "k", &schema).await;
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");

    // Commands through the pooler, LISTEN straight to the server.
    let c = Client::connect(&url, pooled("c").listen_url(h.url.clone()))
        .await
        .unwrap();
    let sub = c.listen(["o1"]).await.unwrap();
    a.notify("o1", "through the pooler").await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), sub.recv())
        .await
        .expect("a notification reaches the listen_url connection")
        .unwrap();
    assert!(
        format!("{heard:?}").contains("through the pooler"),
        "{heard:?}"
    );
    let waited = waiter_after_release(&h, &a, &c, "k2", &schema).await;
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    // Nothing of this schema was prepared on the pool's server connection (its one server:
    // a plain session through the pool sees what every client left there).
    let (probe, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let left = probe
        .simple_query(&format!(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%{schema}%'"
        ))
        .await
        .unwrap();
    let left = left.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(left.as_deref(), Some("0"), "statements left prepared");
    for client in [a, b, c] {
        client.close().await;
    }
}

#[tokio::test]
async fn o1_a_bad_listen_url_is_refused_at_connect() {
    let memory = Client::connect(
        "memory:o1_listen_url",
        accord::ClientOptions::new().listen_url("postgres://localhost/x"),
    )
    .await
    .unwrap_err();
    assert_eq!(memory.kind(), ErrorKind::InvalidArgument);
    assert!(memory.to_string().contains("listen_url"), "{memory}");
    let Ok(url) = std::env::var("ACCORD_TEST_DATABASE_URL") else {
        return;
    };
    let bad = Client::connect(
        &url,
        accord::ClientOptions::new().listen_url("postgres://[nonsense"),
    )
    .await
    .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidArgument, "{bad}");
    assert!(bad.to_string().contains("listen_url"), "{bad}");
}
