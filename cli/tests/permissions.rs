//! README.md's "Schema and permissions" SQL, run as written (the role names made unique, so
//! that runs against one server do not meet), against the PostgreSQL named by
//! `ACCORD_TEST_DATABASE_URL`: the worker role does everything accord does, the read-only role
//! runs `accord ls` and `accord top --once`, reads `list`, `snapshot` and the view `holders`,
//! and its acquire fails with a typed error instead of hanging; the monitoring role reads the
//! view `holders` and nothing else.

use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use accord::{
    AcquireOptions, ClaimOptions, Client, ClientOptions, ErrorKind, FleetEvent, FleetOptions,
    JoinOptions, ListQuery,
};

const BIN: &str = env!("CARGO_BIN_EXE_accord");
const MARKER: &str = "<!-- cli/tests/permissions.rs runs the next block -->";
const HOLDERS_MARKER: &str =
    "<!-- cli/tests/permissions.rs runs the next block as the read-only and the monitoring role -->";
/// Bounds every call, to catch a hang; never reached when things work.
const BOUND: Duration = Duration::from_secs(60);

fn database_url() -> String {
    std::env::var("ACCORD_TEST_DATABASE_URL").expect(
        "ACCORD_TEST_DATABASE_URL is not set: run the tests with `make test` \
         (or scripts/with-postgres.sh cargo test -p accord-coord-cli)",
    )
}

/// The fenced block after `marker` in README.md.
fn readme_sql(marker: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("read README.md");
    let after = readme
        .split_once(marker)
        .unwrap_or_else(|| panic!("README.md has no {marker:?}"))
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```sql\n")
        .expect("a ```sql block follows the marker");
    block
        .split_once("\n```")
        .expect("the block ends")
        .0
        .to_string()
}

/// `url` with `user:password` in place of its user information.
fn url_as(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}:{password}@{host}")
}

fn accord(url: &str, namespace: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("ACCORD_URL", url)
        .env("ACCORD_NAMESPACE", namespace)
        .env_remove("ACCORD_SCHEMA")
        .env_remove("ACCORD_OWNER")
        .output()
        .expect("run accord")
}

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {BOUND:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_grants_let_workers_work_and_readers_read() {
    let url = database_url();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let suffix = format!("{}_{nanos}", std::process::id());
    let namespace = format!("permissions-{suffix}");
    let (worker, reader, monitor) = (
        format!("accord_worker_{suffix}"),
        format!("accord_reader_{suffix}"),
        format!("accord_monitor_{suffix}"),
    );

    // The schema's owner brings it to this accord's version; then README's grants, as written.
    let owner = Client::connect(&url, ClientOptions::new().namespace(namespace.clone()))
        .await
        .expect("connect as the schema's owner");
    owner.close().await;
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect to run the SQL");
    tokio::spawn(connection);
    let sql = readme_sql(MARKER);
    assert!(
        sql.contains("accord_worker")
            && sql.contains("accord_reader")
            && sql.contains("accord_monitor")
    );
    let sql = sql
        .replace("accord_worker", &worker)
        .replace("accord_reader", &reader)
        .replace("accord_monitor", &monitor);
    admin.batch_execute(&sql).await.expect("README's SQL runs");
    let password = "secret";
    assert!(sql.contains(&format!("PASSWORD '{password}'")));

    let outcome = tokio::spawn(exercise(
        url_as(&url, &worker, password),
        url_as(&url, &reader, password),
        url_as(&url, &monitor, password),
        namespace,
    ))
    .await;
    for role in [&worker, &reader, &monitor] {
        admin
            .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
            .await
            .expect("drop the test's role");
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}

async fn exercise(worker_url: String, reader_url: String, monitor_url: String, namespace: String) {
    // The worker: migrations off (a DBA applied them), every kind of write.
    let worker = bounded(
        "worker connect",
        Client::connect(
            &worker_url,
            ClientOptions::new()
                .namespace(namespace.clone())
                .migrate(false),
        ),
    )
    .await
    .expect("the worker role connects");
    let lease = bounded(
        "acquire",
        worker.acquire("report", AcquireOptions::new().timeout(BOUND)),
    )
    .await
    .expect("the worker acquires");
    bounded("done", lease.done(None))
        .await
        .expect("the worker marks done");
    let offered = bounded("offer", worker.offer("jobs/", ["jobs/1", "jobs/2"], None))
        .await
        .expect("the worker offers");
    assert_eq!(offered, 2);
    let claimed = bounded("claim", worker.claim("jobs/", ClaimOptions::new().limit(2)))
        .await
        .expect("the worker claims");
    assert_eq!(claimed.len(), 2);
    for lease in claimed {
        bounded("done", lease.done(None))
            .await
            .expect("the worker marks a claimed key done");
    }
    let seq = bounded("publish", worker.publish("events", "hello"))
        .await
        .expect("the worker publishes");
    assert_eq!(seq, 1);
    let member = bounded("join", worker.join("workers", JoinOptions::new()))
        .await
        .expect("the worker joins a group");
    let fleet = bounded("fleet", worker.fleet("orders", FleetOptions::shards(2)))
        .await
        .expect("the worker joins a fleet");
    match bounded("fleet event", fleet.next_event()).await {
        Some(FleetEvent::Assigned { .. }) => {}
        other => panic!("the fleet's first event is not an assignment: {other:?}"),
    }
    bounded("fleet close", fleet.close()).await;
    bounded("leave", member.leave())
        .await
        .expect("the worker leaves its group");
    let held = bounded(
        "acquire",
        worker.acquire("held", AcquireOptions::new().timeout(BOUND)),
    )
    .await
    .expect("the worker acquires");

    // Who holds what, as the reader and as the monitoring role (the view alone).
    for (role, url) in [("reader", &reader_url), ("monitor", &monitor_url)] {
        let (sql, connection) = bounded(
            "connect",
            tokio_postgres::connect(url, tokio_postgres::NoTls),
        )
        .await
        .unwrap_or_else(|e| panic!("the {role} role connects: {e}"));
        tokio::spawn(connection);
        // README's query, as written; this test's namespace picked from its rows.
        let rows = bounded("holders", sql.query(&readme_sql(HOLDERS_MARKER), &[]))
            .await
            .unwrap_or_else(|e| panic!("the {role} role runs README's holders query: {e}"));
        let holders: Vec<(String, String, i64)> = rows
            .iter()
            .filter(|r| r.get::<_, &str>("namespace") == namespace)
            .map(|r| (r.get("key"), r.get("owner"), r.get("fence")))
            .collect();
        assert_eq!(
            holders,
            [("held".to_string(), worker.owner().to_string(), held.fence())],
            "{role}"
        );
    }
    let (sql, connection) = bounded(
        "connect",
        tokio_postgres::connect(&monitor_url, tokio_postgres::NoTls),
    )
    .await
    .expect("the monitor role connects");
    tokio::spawn(connection);
    let refused = bounded(
        "leases",
        sql.query("SELECT count(*) FROM accord.leases", &[]),
    )
    .await
    .expect_err("the monitoring role reads the view only");
    assert!(
        refused.to_string().contains("permission denied")
            || refused
                .as_db_error()
                .is_some_and(|e| e.message().contains("permission denied")),
        "{refused}"
    );
    bounded("release", held.release())
        .await
        .expect("the worker releases");
    worker.close().await;

    // The reader: the CLI's read commands, then list and snapshot.
    let ls = accord(&reader_url, &namespace, &["ls", "--prefix", "jobs/"]);
    assert!(
        ls.status.success(),
        "accord ls as the read-only role: {}",
        String::from_utf8_lossy(&ls.stderr)
    );
    assert!(String::from_utf8_lossy(&ls.stdout).contains("jobs/1"));
    let top = accord(&reader_url, &namespace, &["top", "--once"]);
    assert!(
        top.status.success(),
        "accord top --once as the read-only role: {}",
        String::from_utf8_lossy(&top.stderr)
    );
    assert!(String::from_utf8_lossy(&top.stdout).contains("report"));

    let reader = bounded(
        "reader connect",
        Client::connect(&reader_url, ClientOptions::new().namespace(namespace)),
    )
    .await
    .expect("the read-only role connects");
    let page = bounded("list", reader.list(ListQuery::new().prefix("jobs/")))
        .await
        .expect("the reader lists");
    assert_eq!(page.items.len(), 2);
    bounded("snapshot", reader.snapshot(ListQuery::new()))
        .await
        .expect("the reader reads a snapshot");
    let refused = bounded(
        "reader acquire",
        reader.acquire(
            "mine",
            AcquireOptions::new().timeout(Duration::from_secs(5)),
        ),
    )
    .await
    .expect_err("the read-only role cannot acquire");
    assert_eq!(refused.kind(), ErrorKind::Database, "{refused}");
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );
    reader.close().await;
}
