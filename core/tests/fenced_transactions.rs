//! Fenced writes and accord's operations in the application's own transaction (schema
//! version 10: `accord.check_fence`, `done`, `release`, `offer`, `publish`, the `fenced_write`
//! trigger), against a real PostgreSQL.

mod support;

use std::time::Duration;

use accord::{
    AcquireOptions, ClaimOptions, Client, ErrorKind, Lease, LeaseStatus, SqlCall, SqlParam,
    SubscribeOptions,
};
use support::proxy::Mode;
use support::{eventually, meta, Harness};
use tokio_postgres::types::{ToSql, Type};

/// A hang bound, never a timing assertion.
const BOUND: Duration = Duration::from_secs(60);

/// A connection of the application's own (not accord's), as the given role URL says.
async fn app_connection(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Runs a [`SqlCall`] as any driver would: its text, its parameters in order.
async fn run_call(
    c: &impl tokio_postgres::GenericClient,
    call: &SqlCall,
) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
    let params: Vec<(&(dyn ToSql + Sync), Type)> = call
        .params
        .iter()
        .map(|p| match p {
            SqlParam::Text(v) => (v as &(dyn ToSql + Sync), Type::TEXT),
            SqlParam::BigInt(v) => (v as &(dyn ToSql + Sync), Type::INT8),
            SqlParam::NullableText(v) => (v as &(dyn ToSql + Sync), Type::TEXT),
            _ => unreachable!("a parameter type this test does not know"),
        })
        .collect();
    c.query_typed_one(&call.text, &params).await
}

/// The SQLSTATE and message of a refused statement.
fn refused(e: tokio_postgres::Error) -> (String, String) {
    let db = e.as_db_error().expect("a refusal by the server");
    (db.code().code().to_string(), db.message().to_string())
}

/// Waits until the server's clock is past the key's recorded expiry.
async fn wait_expired_on_server(h: &Harness, key: &str) {
    let expired = eventually(BOUND, || async {
        h.admin()
            .query_one(
                "SELECT expires_at <= clock_timestamp() FROM accord.leases
                  WHERE namespace = $1 AND key = $2",
                &[&h.tag, &key],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;
    assert!(expired, "the lease of {key} never expired on the server");
}

async fn lease_ended(lease: &Lease) -> LeaseStatus {
    tokio::time::timeout(BOUND, lease.lost_signal().ended())
        .await
        .expect("the lease never settled")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fence_refuses_a_lease_that_expired_unrenewed() {
    let h = Harness::postgres("fence_expired").await;
    let (proxy, url) = h.proxy().await;
    let a = Client::connect(&url, h.options("a").ttl(Duration::from_secs(1)))
        .await
        .unwrap();
    let lease = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let call = lease.fence_check_sql().unwrap();
    // A live lease passes, in any transaction.
    let app = app_connection(&h.url).await;
    run_call(&app, &call).await.unwrap();

    // Its keepalive cut off, the lease runs out on the server.
    proxy.set(Mode::Cut);
    wait_expired_on_server(&h, "job").await;
    let (code, message) = refused(run_call(&app, &call).await.unwrap_err());
    assert_eq!(code, "AC001");
    assert!(
        message.contains("'job'") && message.contains(&lease.fence().to_string()),
        "{message}"
    );
    assert!(message.contains("expired at"), "{message}");
    // The helper refuses too (here already on the client's deadline).
    let mut conn = app_connection(&h.url).await;
    let tx = conn.transaction().await.unwrap();
    let e = lease.fenced(&tx).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseLost, "{e}");
    drop(tx);

    // The reasons name what happened: superseded, done, released, never granted.
    let b = h.client("b").await;
    let next = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let (code, message) = refused(run_call(&app, &call).await.unwrap_err());
    assert_eq!(code, "AC001");
    assert!(
        message.contains(&format!("superseded by fence {}", next.fence())),
        "{message}"
    );
    let next_call = next.fence_check_sql().unwrap();
    next.release().await.unwrap();
    let (_, message) = refused(run_call(&app, &next_call).await.unwrap_err());
    assert!(message.ends_with(": released"), "{message}");
    let last = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let last_call = last.fence_check_sql().unwrap();
    last.done(None).await.unwrap();
    let (_, message) = refused(run_call(&app, &last_call).await.unwrap_err());
    assert!(message.ends_with("the key is done"), "{message}");
    let mut never = last_call.clone();
    never.params[1] = SqlParam::Text("never-seen".into());
    let (code, message) = refused(run_call(&app, &never).await.unwrap_err());
    assert_eq!(code, "AC001");
    assert!(message.contains("never granted"), "{message}");
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checked_write_commits_before_the_next_grant() {
    let h = Harness::postgres("fence_order").await;
    let table = format!("order_{}", h.tag);
    h.admin()
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (fence bigint NOT NULL, written_at timestamptz NOT NULL)"
        ))
        .await
        .unwrap();
    let a = h
        .client_with("a", h.options("a").ttl(Duration::from_secs(1)))
        .await;
    let lease = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let mut app = app_connection(&h.url).await;
    let tx = app.transaction().await.unwrap();
    lease.fenced(&tx).await.unwrap();

    // The lease runs out while the transaction is open (its holder cannot renew it: the
    // check holds the row, and the keepalive passes over it).
    wait_expired_on_server(&h, "job").await;
    assert!(
        eventually(BOUND, || async { lease.is_lost() }).await,
        "the holder never saw its lease end"
    );
    // Nobody is granted the key meanwhile: a waiting acquire waits for the transaction.
    let b = h.client("b").await;
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.acquire("job", AcquireOptions::new().timeout(BOUND))
                .await
                .unwrap()
        })
    };
    let waiting = eventually(BOUND, || h.waits_for_a_lock("b")).await;
    assert!(
        waiting,
        "the waiting acquire never waited for the checked row"
    );

    // The write, after its lease expired on the server, still commits.
    tx.execute(
        &format!("INSERT INTO \"{table}\" VALUES ($1, clock_timestamp())"),
        &[&lease.fence()],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let next = tokio::time::timeout(BOUND, waiter).await.unwrap().unwrap();
    assert!(next.fence() > lease.fence());

    // The server's record: the next grant began after the write.
    let row = h
        .admin()
        .query_one(
            &format!(
                "SELECT w.written_at < l.granted_at, w.fence, l.fence
                   FROM \"{table}\" w, accord.leases l
                  WHERE l.namespace = $1 AND l.key = 'job'"
            ),
            &[&h.tag],
        )
        .await
        .unwrap();
    assert!(
        row.get::<_, bool>(0),
        "the next grant came before the write"
    );
    assert_eq!(row.get::<_, i64>(1), lease.fence());
    assert_eq!(row.get::<_, i64>(2), next.fence());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn done_in_commits_with_the_write_or_not_at_all() {
    let h = Harness::postgres("fence_done").await;
    let table = format!("results_{}", h.tag);
    h.admin()
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (key text PRIMARY KEY, result text NOT NULL)"
        ))
        .await
        .unwrap();
    let a = h
        .client_with("a", h.options("a").ttl(Duration::from_secs(2)))
        .await;
    let mut app = app_connection(&h.url).await;
    let insert = format!("INSERT INTO \"{table}\" VALUES ($1, 'ok')");

    // Rolled back: neither the result nor the done; the lease is still held, and renewed.
    let kept = a.acquire("kept", AcquireOptions::new()).await.unwrap();
    let tx = app.transaction().await.unwrap();
    tx.execute(&insert, &[&"kept"]).await.unwrap();
    kept.done_in(&tx, Some(meta(serde_json::json!({"r": 1}))))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let before = kept.expires_at();
    assert!(
        eventually(BOUND, || async { kept.expires_at() > before }).await,
        "the lease was not renewed after the rollback"
    );
    assert_eq!(kept.status(), LeaseStatus::Held);

    // Committed: both, and the lease ends as done, not lost.
    let lease = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let tx = app.transaction().await.unwrap();
    tx.execute(&insert, &[&"job"]).await.unwrap();
    let merged = lease
        .done_in(&tx, Some(meta(serde_json::json!({"r": 2}))))
        .await
        .unwrap();
    assert_eq!(merged.get("r"), Some(&serde_json::json!(2)));
    assert_eq!(lease.status(), LeaseStatus::Held);
    tx.commit().await.unwrap();
    assert_eq!(lease_ended(&lease).await, LeaseStatus::Done);

    let rows = h
        .admin()
        .query(
            &format!(
                "SELECT l.key, l.done, r.result IS NOT NULL FROM accord.leases l
                   LEFT JOIN \"{table}\" r ON r.key = l.key
                  WHERE l.namespace = $1 ORDER BY l.key"
            ),
            &[&h.tag],
        )
        .await
        .unwrap();
    let state: Vec<(String, bool, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        state,
        [("job".into(), true, true), ("kept".into(), false, false)]
    );
    assert_eq!(kept.status(), LeaseStatus::Held);
    assert_eq!(a.stats().lost, 0);
    kept.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offer_and_publish_take_effect_at_commit_and_wake_at_commit() {
    let h = Harness::postgres("fence_outbox").await;
    let claimer = h.client("claimer").await;
    let reader = h.client("reader").await;
    let mut app = app_connection(&h.url).await;
    let offer = "SELECT accord.offer($1, 'jobs/', $2::text[], '{\"n\": 1}'::jsonb)";
    let publish = "SELECT accord.publish($1, 'events', $2::text[])";
    let keys = vec!["jobs/1".to_string(), "jobs/2".to_string()];
    let payloads = vec!["a".to_string(), "b".to_string()];

    // Rolled back: nothing offered, nothing published.
    let tx = app.transaction().await.unwrap();
    let joined: i64 = tx.query_one(offer, &[&h.tag, &keys]).await.unwrap().get(0);
    assert_eq!(joined, 2);
    let seqs: Vec<i64> = tx
        .query_one(publish, &[&h.tag, &payloads])
        .await
        .unwrap()
        .get(0);
    assert_eq!(seqs, [1, 2]);
    tx.rollback().await.unwrap();
    let counts = claimer.counts("jobs/").await.unwrap();
    assert_eq!((counts.free, counts.held, counts.done), (0, 0, 0));
    assert_eq!(reader.stream_info("events").await.unwrap().last_seq, 0);

    // A claim waiting on the empty pool, and a subscriber, both already waiting.
    let subscription = reader
        .subscribe("events", SubscribeOptions::new())
        .await
        .unwrap();
    let claim = {
        let claimer = claimer.clone();
        tokio::spawn(async move {
            claimer
                .claim("jobs/", ClaimOptions::new().limit(2).timeout(BOUND))
                .await
                .unwrap()
        })
    };
    // Its first try found nothing (the server shows the claim statement run and done): from
    // here only a wake-up (or the bound) ends its wait.
    let claimer_name = h.app_name("claimer");
    let tried = eventually(BOUND, || async {
        h.admin()
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = $1 AND state = 'idle'
                    AND query LIKE '%ORDER BY l.offered%'",
                &[&claimer_name],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    })
    .await;
    assert!(tried, "the claim never tried");

    let tx = app.transaction().await.unwrap();
    tx.query_one(offer, &[&h.tag, &keys]).await.unwrap();
    tx.query_one(publish, &[&h.tag, &payloads]).await.unwrap();
    tx.commit().await.unwrap();

    let claimed = tokio::time::timeout(BOUND, claim).await.unwrap().unwrap();
    let mut got: Vec<String> = claimed.iter().map(|l| l.key().to_string()).collect();
    got.sort();
    assert_eq!(got, keys, "the waiting claim was not woken by the commit");
    for payload in &payloads {
        let event = tokio::time::timeout(BOUND, subscription.next())
            .await
            .expect("the subscriber was not woken by the commit")
            .unwrap()
            .unwrap();
        assert_eq!(&event.payload, payload);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trigger_refuses_a_stale_writer_and_takes_the_current_one() {
    let h = Harness::postgres("fence_trigger").await;
    let table = format!("accounts_{}", h.tag);
    h.admin()
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (id text PRIMARY KEY, balance int NOT NULL, fence bigint);
             CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON \"{table}\"
               FOR EACH ROW EXECUTE FUNCTION accord.fenced_write('{ns}', 'id', 'fence');",
            ns = h.tag
        ))
        .await
        .unwrap();
    let (proxy, url) = h.proxy().await;
    let stale = Client::connect(&url, h.options("stale").ttl(Duration::from_secs(1)))
        .await
        .unwrap();
    let old = stale
        .acquire("acct-1", AcquireOptions::new())
        .await
        .unwrap();
    let app = app_connection(&h.url).await;
    let upsert = format!(
        "INSERT INTO \"{table}\" VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, fence = EXCLUDED.fence"
    );
    app.execute(&upsert, &[&"acct-1", &10, &old.fence()])
        .await
        .unwrap();

    // The old holder stalls past its ttl; a new one takes the key.
    proxy.set(Mode::Cut);
    wait_expired_on_server(&h, "acct-1").await;
    let current = h.client("current").await;
    let new = current
        .acquire("acct-1", AcquireOptions::new().timeout(BOUND))
        .await
        .unwrap();
    let e = app
        .execute(&upsert, &[&"acct-1", &99, &old.fence()])
        .await
        .unwrap_err();
    let (code, message) = refused(e);
    assert_eq!(code, "AC001");
    assert!(message.contains("superseded by fence"), "{message}");
    app.execute(&upsert, &[&"acct-1", &20, &new.fence()])
        .await
        .unwrap();
    // A row without a fence is refused too.
    let e = app
        .execute(&upsert, &[&"acct-1", &30, &None::<i64>])
        .await
        .unwrap_err();
    assert_eq!(refused(e).0, "AC001");
    let balance: i32 = app
        .query_one(&format!("SELECT balance FROM \"{table}\""), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(balance, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_with_only_execute_can_use_the_functions() {
    let h = Harness::postgres("fence_role").await;
    drop(h.client("setup").await);
    let role = format!("app_{}", h.tag);
    let table = format!("{role}_results");
    // The role may use the schema and run the functions; it has no right on accord's tables.
    h.admin()
        .batch_execute(&format!(
            "CREATE ROLE \"{role}\" LOGIN PASSWORD 'app';
             GRANT USAGE ON SCHEMA accord TO \"{role}\";
             GRANT EXECUTE ON FUNCTION accord.check_fence(text, text, bigint),
                                       accord.done(text, text, bigint, jsonb),
                                       accord.offer(text, text, text[], jsonb),
                                       accord.publish(text, text, text[]),
                                       accord.fenced_write() TO \"{role}\";
             CREATE TABLE \"{table}\" (key text PRIMARY KEY, fence bigint);
             ALTER TABLE \"{table}\" OWNER TO \"{role}\";"
        ))
        .await
        .unwrap();
    let config: tokio_postgres::Config = h.url.parse().unwrap();
    let mut role_config = config.clone();
    role_config.user(&role).password("app");
    let (mut app, connection) = role_config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);

    // No right on the tables, nor on the inner functions.
    let e = app
        .query("SELECT count(*) FROM accord.leases", &[])
        .await
        .unwrap_err();
    assert_eq!(refused(e).0, "42501");
    let e = app
        .query(
            "SELECT * FROM accord._done_statement('x', 'y', 'z', 1, NULL, 'c')",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(refused(e).0, "42501");

    // The role fences its own table declaratively.
    app.batch_execute(&format!(
        "CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON \"{table}\"
           FOR EACH ROW EXECUTE FUNCTION accord.fenced_write('{ns}', 'key', 'fence')",
        ns = h.tag
    ))
    .await
    .unwrap();

    let a = h.client("a").await;
    let lease = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let tx = app.transaction().await.unwrap();
    lease.fenced(&tx).await.unwrap();
    tx.execute(
        &format!("INSERT INTO \"{table}\" VALUES ('job', $1)"),
        &[&lease.fence()],
    )
    .await
    .unwrap();
    lease.done_in(&tx, None).await.unwrap();
    tx.query_one("SELECT accord.offer($1, 'p/', ARRAY['p/1'])", &[&h.tag])
        .await
        .unwrap();
    tx.query_one("SELECT accord.publish($1, 's', ARRAY['x'])", &[&h.tag])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(lease_ended(&lease).await, LeaseStatus::Done);
    assert_eq!(a.counts("p/").await.unwrap().free, 1);
    assert_eq!(a.stream_info("s").await.unwrap().last_seq, 1);
    // Not granted: release.
    let e = app
        .query("SELECT accord.release($1, 'job', 1)", &[&h.tag])
        .await
        .unwrap_err();
    assert_eq!(refused(e).0, "42501");
    drop(app);
    h.admin()
        .batch_execute(&format!(
            "DROP TABLE \"{table}\";
             REVOKE ALL ON SCHEMA accord FROM \"{role}\";
             REVOKE ALL ON ALL FUNCTIONS IN SCHEMA accord FROM \"{role}\";
             DROP ROLE \"{role}\";"
        ))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_in_sql_wakes_the_channel_the_client_listens_on() {
    let h = Harness::postgres("fence_channel").await;
    drop(h.client("setup").await);
    for (namespace, stream) in [
        ("ns", "s"),
        ("", ""),
        ("naïve ünïcode", "strëam/with/slashes"),
        ("x", &"y".repeat(600)),
    ] {
        let sql: String = h
            .admin()
            .query_one(
                "SELECT accord._channel_for('accord_stream', $1, ARRAY[$2])",
                &[&namespace, &stream],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            sql,
            accord::__channel_for("accord_stream", namespace, &[stream])
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_says_why_it_has_no_fenced_writes() {
    let h = Harness::sqlite("fence_embedded").await;
    let client = h.client("a").await;
    let lease = client.acquire("job", AcquireOptions::new()).await.unwrap();
    let e = lease.fence_check_sql().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.message().contains("SQLite"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_a_transaction_holds_stalls_no_other_lease() {
    let h = Harness::postgres("fence_keepalive").await;
    let a = h
        .client_with("a", h.options("a").ttl(Duration::from_secs(1)))
        .await;
    let held = a.acquire("held", AcquireOptions::new()).await.unwrap();
    let other = a.acquire("other", AcquireOptions::new()).await.unwrap();
    let expiry = "SELECT expires_at, expires_at > clock_timestamp() FROM accord.leases
                   WHERE namespace = $1 AND key = $2";
    let first: chrono::DateTime<chrono::Utc> = h
        .admin()
        .query_one(expiry, &[&h.tag, &"other"])
        .await
        .unwrap()
        .get(0);
    let mut app = app_connection(&h.url).await;
    let tx = app.transaction().await.unwrap();
    // The lock check_fence takes, taken by hand (so this runs on a schema without it too).
    tx.query_one(
        "SELECT 1 FROM accord.leases WHERE namespace = $1 AND key = 'held' FOR SHARE",
        &[&h.tag],
    )
    .await
    .unwrap();
    // The held row cannot be renewed while the transaction lasts: that lease ends.
    assert!(
        eventually(BOUND, || async { held.is_lost() }).await,
        "the lease whose row was held was never lost"
    );
    // Past the other lease's expiry as it stood when the row was taken: it was renewed.
    let passed = eventually(BOUND, || async { h.now().await > first }).await;
    assert!(passed);
    assert_eq!(other.status(), LeaseStatus::Held);
    let live: bool = h
        .admin()
        .query_one(expiry, &[&h.tag, &"other"])
        .await
        .unwrap()
        .get(1);
    assert!(live, "the other lease expired on the server");
    tx.rollback().await.unwrap();
    other.release().await.unwrap();
}

/// Entry point of the worker process of
/// `done_in_killed_before_or_after_commit_leaves_neither_or_both`; a no-op in a normal run. It
/// acquires ACCORD_DONE_IN_KEY (ttl 1 s), and in one transaction of its own connection
/// inserts its result row and calls `done_in`, says `DONE_IN <fence>`, waits for a line, commits,
/// says `COMMITTED` and waits for another line: the test kills it with SIGKILL at either stop.
#[test]
fn done_in_worker() {
    let Ok(key) = std::env::var("ACCORD_DONE_IN_KEY") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap();
    let (url, namespace, table) = (
        var("ACCORD_DONE_IN_URL"),
        var("ACCORD_DONE_IN_NAMESPACE"),
        var("ACCORD_DONE_IN_TABLE"),
    );
    let told = || {
        let _ = std::io::stdin().read_line(&mut String::new());
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move {
            let options = accord::ClientOptions::new()
                .namespace(namespace)
                .owner(format!("worker-{key}"))
                .ttl(Duration::from_secs(1));
            let client = Client::connect(&url, options).await.unwrap();
            let lease = client.acquire(&key, AcquireOptions::new()).await.unwrap();
            // Named, so that the test sees when the server ended this backend.
            let mut config: tokio_postgres::Config = url.parse().unwrap();
            config.application_name(format!("done_in_{key}"));
            let (mut app, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(connection);
            let tx = app.transaction().await.unwrap();
            tx.execute(
                &format!("INSERT INTO \"{table}\" VALUES ($1, $2)"),
                &[&key, &lease.fence()],
            )
            .await
            .unwrap();
            lease.done_in(&tx, None).await.unwrap();
            println!("DONE_IN {}", lease.fence());
            tokio::task::spawn_blocking(told).await.unwrap();
            tx.commit().await.unwrap();
            println!("COMMITTED");
            tokio::task::spawn_blocking(told).await.unwrap();
        });
}

/// The worker's next line.
async fn next_line(lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(BOUND, lines.recv())
        .await
        .expect("the worker said nothing")
        .expect("the worker ended early")
}

/// "Crash between: neither or both, never one": a worker that writes its result and calls
/// `done_in` in one transaction is killed with SIGKILL (a) after `done_in`, before its COMMIT:
/// no result row, the key not done, and granted again once its ttl ran out; (b) after the
/// COMMIT: the row and the done, both. Each kill lands where the worker says it stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn done_in_killed_before_or_after_commit_leaves_neither_or_both() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    let h = Harness::postgres("fence_done_kill").await;
    let table = format!("results_{}", h.tag);
    h.admin()
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (key text PRIMARY KEY, fence bigint NOT NULL)"
        ))
        .await
        .unwrap();
    let other = h.client("other").await;
    for (key, commit) in [("before_commit", false), ("after_commit", true)] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "done_in_worker",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("ACCORD_DONE_IN_KEY", key)
            .env("ACCORD_DONE_IN_URL", &h.url)
            .env("ACCORD_DONE_IN_NAMESPACE", &h.tag)
            .env("ACCORD_DONE_IN_TABLE", &table)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // libtest may print its own "test … " prefix on the first line.
                for word in ["DONE_IN ", "COMMITTED"] {
                    if let Some(i) = line.find(word) {
                        let _ = lines_tx.send(line[i..].to_string());
                    }
                }
            }
        });
        let said = next_line(&mut lines).await;
        let fence: i64 = said
            .strip_prefix("DONE_IN ")
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("unexpected line {said:?}"));
        if commit {
            stdin.write_all(b"commit\n").unwrap();
            assert_eq!(next_line(&mut lines).await, "COMMITTED");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // The server ends the worker's transaction once its backend sees the socket closed.
        let application = format!("done_in_{key}");
        assert!(
            eventually(BOUND, || async {
                h.admin()
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                        &[&application],
                    )
                    .await
                    .unwrap()
                    .get::<_, i64>(0)
                    == 0
            })
            .await,
            "the killed worker's backend never ended"
        );
        let row = h
            .admin()
            .query_one(
                &format!(
                    "SELECT l.fence, l.done, l.expires_at, r.fence FROM accord.leases l
                       LEFT JOIN \"{table}\" r ON r.key = l.key
                      WHERE l.namespace = $1 AND l.key = $2"
                ),
                &[&h.tag, &key],
            )
            .await
            .unwrap();
        let (lease_fence, done, result): (i64, bool, Option<i64>) =
            (row.get(0), row.get(1), row.get(3));
        assert_eq!(lease_fence, fence);
        if commit {
            assert_eq!(
                (done, result),
                (true, Some(fence)),
                "both, after the commit"
            );
            let again = other
                .acquire(key, AcquireOptions::new().timeout(Duration::from_secs(1)))
                .await;
            assert_eq!(again.map(|_| ()).unwrap_err().kind(), ErrorKind::Done);
        } else {
            assert_eq!((done, result), (false, None), "neither, before the commit");
            let expired_at: std::time::SystemTime = row.get(2);
            let again = other
                .acquire(key, AcquireOptions::new().timeout(BOUND))
                .await
                .unwrap();
            assert!(again.fence() > fence);
            let granted_at: std::time::SystemTime = h
                .admin()
                .query_one(
                    "SELECT granted_at FROM accord.leases WHERE namespace = $1 AND key = $2",
                    &[&h.tag, &key],
                )
                .await
                .unwrap()
                .get(0);
            assert!(
                granted_at >= expired_at,
                "granted again before the killed worker's lease expired"
            );
            again.release().await.unwrap();
        }
    }
}

/// The helpers on sqlx's connections (feature `sqlx`), as the tokio-postgres ones above.
#[cfg(feature = "sqlx")]
mod on_sqlx {
    use super::*;
    use sqlx::{Connection, PgConnection};

    async fn results_table(h: &Harness) -> String {
        let table = format!("sqlx_{}", h.tag);
        h.admin()
            .batch_execute(&format!(
                "CREATE TABLE \"{table}\" (key text PRIMARY KEY, result text NOT NULL)"
            ))
            .await
            .unwrap();
        table
    }

    async fn written(h: &Harness, table: &str) -> Vec<String> {
        let rows = h
            .admin()
            .query(&format!("SELECT key FROM \"{table}\" ORDER BY key"), &[])
            .await
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlx_fenced_commits_while_live_and_refuses_an_expired_lease() {
        let h = Harness::postgres("fence_sqlx").await;
        let table = results_table(&h).await;
        let insert = format!("INSERT INTO \"{table}\" VALUES ($1, 'ok')");
        let (proxy, url) = h.proxy().await;
        let a = Client::connect(&url, h.options("a").ttl(Duration::from_secs(1)))
            .await
            .unwrap();
        let mut app = PgConnection::connect(&h.url).await.unwrap();

        let live = a.acquire("live", AcquireOptions::new()).await.unwrap();
        let mut tx = app.begin().await.unwrap();
        live.fenced_sqlx(&mut tx).await.unwrap();
        sqlx::query(&insert)
            .bind("live")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(written(&h, &table).await, ["live"]);

        // Its keepalive cut off, the lease runs out on the server and another client takes the
        // key: the fenced write is refused as LeaseLost, and nothing is written.
        let lease = a.acquire("job", AcquireOptions::new()).await.unwrap();
        proxy.set(Mode::Cut);
        wait_expired_on_server(&h, "job").await;
        let b = h.client("b").await;
        let _next = b.acquire("job", AcquireOptions::new()).await.unwrap();
        let mut tx = app.begin().await.unwrap();
        let e = lease.fenced_sqlx(&mut tx).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::LeaseLost, "{e}");
        tx.rollback().await.unwrap();
        assert_eq!(written(&h, &table).await, ["live"]);
        drop(a);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlx_done_in_commits_with_the_write_or_not_at_all() {
        let h = Harness::postgres("fence_sqlx_done").await;
        let table = results_table(&h).await;
        let insert = format!("INSERT INTO \"{table}\" VALUES ($1, 'ok')");
        let a = h
            .client_with("a", h.options("a").ttl(Duration::from_secs(2)))
            .await;
        let mut app = PgConnection::connect(&h.url).await.unwrap();

        // Rolled back: neither the result nor the done; the lease is still held, and renewed.
        // Inside, the server refuses a check after the done (the key is done in this
        // transaction): its refusal comes back as LeaseLost through sqlx.
        let kept = a.acquire("kept", AcquireOptions::new()).await.unwrap();
        let mut tx = app.begin().await.unwrap();
        sqlx::query(&insert)
            .bind("kept")
            .execute(&mut *tx)
            .await
            .unwrap();
        let merged = kept
            .done_in_sqlx(&mut tx, Some(meta(serde_json::json!({"r": 1}))))
            .await
            .unwrap();
        assert_eq!(merged.get("r"), Some(&serde_json::json!(1)));
        let e = kept.fenced_sqlx(&mut tx).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::LeaseLost, "{e}");
        assert!(e.message().ends_with("the key is done"), "{e}");
        tx.rollback().await.unwrap();
        let before = kept.expires_at();
        assert!(
            eventually(BOUND, || async { kept.expires_at() > before }).await,
            "the lease was not renewed after the rollback"
        );
        assert_eq!(kept.status(), LeaseStatus::Held);

        // Committed: both, and the lease ends as done, not lost.
        let lease = a.acquire("job", AcquireOptions::new()).await.unwrap();
        let mut tx = app.begin().await.unwrap();
        lease.fenced_sqlx(&mut tx).await.unwrap();
        sqlx::query(&insert)
            .bind("job")
            .execute(&mut *tx)
            .await
            .unwrap();
        lease.done_in_sqlx(&mut tx, None).await.unwrap();
        assert_eq!(lease.status(), LeaseStatus::Held);
        tx.commit().await.unwrap();
        assert_eq!(lease_ended(&lease).await, LeaseStatus::Done);

        assert_eq!(written(&h, &table).await, ["job"]);
        let done: Vec<(String, bool)> = h
            .admin()
            .query(
                "SELECT key, done FROM accord.leases WHERE namespace = $1 ORDER BY key",
                &[&h.tag],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(done, [("job".into(), true), ("kept".into(), false)]);
        assert_eq!(kept.status(), LeaseStatus::Held);
        assert_eq!(a.stats().lost, 0);
        kept.release().await.unwrap();
    }
}
