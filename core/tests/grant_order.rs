//! G2 under contention: worker processes hammer one key with try_acquire + immediate release,
//! and an audit of every grant, written by a trigger on the leases table in the order the grants
//! took the key's row (for one key, that is commit order: a grant keeps the row locked until it
//! commits), shows fences strictly increasing. On PostgreSQL each holder also writes its fence
//! to a resource that refuses a fence not larger than the last one: every live holder's write
//! is accepted. Workers are this test binary started again with `ACCORD_HAMMER_WORKER` set.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use accord::{AcquireOptions, Client, ClientOptions};
use support::Harness;

const WORKERS: usize = 6;
/// Grants each worker waits for before it stops.
const GRANTS: usize = 40;
const KEY: &str = "hot";

/// The worker's entry point; a no-op unless started by a test of this file.
#[test]
fn hammer_worker() {
    let Ok(worker) = std::env::var("ACCORD_HAMMER_WORKER") else {
        return;
    };
    let url = std::env::var("ACCORD_HAMMER_URL").unwrap();
    let namespace = std::env::var("ACCORD_HAMMER_NAMESPACE").unwrap();
    let resource = std::env::var("ACCORD_HAMMER_RESOURCE").ok();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(hammer(&worker, &url, &namespace, resource.as_deref()));
}

async fn hammer(worker: &str, url: &str, namespace: &str, resource: Option<&str>) {
    let client = Client::connect(
        url,
        ClientOptions::new()
            .namespace(namespace)
            .owner(format!("w{worker}"))
            .ttl(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let writer = match resource {
        Some(table) => {
            let (c, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let write = c
                .prepare(&format!(
                    "UPDATE \"{table}\" SET last_fence = $1 WHERE id = 1 AND last_fence < $1"
                ))
                .await
                .unwrap();
            Some((c, write))
        }
        None => None,
    };
    let mut grants = 0;
    let mut refused_writes = 0;
    while grants < GRANTS {
        let Some(lease) = client
            .try_acquire(KEY, AcquireOptions::new())
            .await
            .unwrap()
        else {
            continue;
        };
        grants += 1;
        if let Some((c, write)) = &writer {
            // A live holder (30 s ttl, held for a moment): its fence must be the largest yet.
            let accepted = c.execute(write, &[&lease.fence()]).await.unwrap();
            if accepted == 0 && !lease.is_lost() {
                refused_writes += 1;
            }
        }
        lease.release().await.unwrap();
    }
    client.close().await;
    println!("HAMMER {grants} {refused_writes}");
}

/// Starts the workers and waits for them; returns (grants, refused writes) summed.
fn run_workers(url: &str, namespace: &str, resource: Option<&str>) -> (usize, usize) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WORKERS)
        .map(|i| {
            let mut command = Command::new(&exe);
            command
                .args([
                    "--exact",
                    "hammer_worker",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("ACCORD_HAMMER_WORKER", i.to_string())
                .env("ACCORD_HAMMER_URL", url)
                .env("ACCORD_HAMMER_NAMESPACE", namespace)
                .stdout(Stdio::piped());
            if let Some(table) = resource {
                command.env("ACCORD_HAMMER_RESOURCE", table);
            }
            command.spawn().unwrap()
        })
        .collect();
    let (mut grants, mut refused) = (0, 0);
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a worker failed: {:?}", out.status);
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            // The harness prints "test hammer_worker ... " on the same line.
            .find_map(|l| l.split_once("HAMMER ").map(|(_, report)| report))
            .unwrap_or_else(|| panic!("no report from a worker: {text}"));
        let mut fields = line.split(' ').map(|f| f.parse::<usize>().unwrap());
        grants += fields.next().unwrap();
        refused += fields.next().unwrap();
    }
    (grants, refused)
}

/// The fences in audit order that are not larger than the one before them.
fn out_of_order(fences: &[i64]) -> Vec<(i64, i64)> {
    fences
        .windows(2)
        .filter(|w| w[1] <= w[0])
        .map(|w| (w[0], w[1]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g2_fences_grow_in_commit_order_on_postgres() {
    let h = Harness::postgres("hammer").await;
    let (audit, resource) = (format!("audit_{}", h.tag), format!("resource_{}", h.tag));
    // The schema exists before the trigger is put on its table.
    drop(h.client("setup").await);
    h.admin()
        .batch_execute(&format!(
            "CREATE TABLE \"{audit}\" (id bigserial PRIMARY KEY, fence bigint NOT NULL);
             CREATE TABLE \"{resource}\" (id int PRIMARY KEY, last_fence bigint NOT NULL);
             INSERT INTO \"{resource}\" VALUES (1, 0);
             CREATE FUNCTION \"{audit}\"() RETURNS trigger LANGUAGE plpgsql AS $f$
             BEGIN
               IF NEW.expires_at IS NOT NULL
                  AND (TG_OP = 'INSERT' OR NEW.fence IS DISTINCT FROM OLD.fence) THEN
                 INSERT INTO \"{audit}\" (fence) VALUES (NEW.fence);
               END IF;
               RETURN NULL;
             END $f$;
             CREATE TRIGGER \"{audit}\" AFTER INSERT OR UPDATE ON accord.leases FOR EACH ROW
               WHEN (NEW.namespace = '{tag}') EXECUTE FUNCTION \"{audit}\"();",
            tag = h.tag
        ))
        .await
        .unwrap();
    let (grants, refused) = run_workers(&h.url, &h.tag, Some(&resource));
    h.admin()
        .batch_execute(&format!(
            "DROP TRIGGER \"{audit}\" ON accord.leases; DROP FUNCTION \"{audit}\"();"
        ))
        .await
        .unwrap();
    let fences: Vec<i64> = h
        .admin()
        .query(&format!("SELECT fence FROM \"{audit}\" ORDER BY id"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(grants, WORKERS * GRANTS);
    assert_eq!(fences.len(), grants, "the audit saw every grant");
    let bad = out_of_order(&fences);
    assert!(
        bad.is_empty(),
        "{} of {} grants carried a fence not larger than the grant before them (e.g. {:?})",
        bad.len(),
        fences.len(),
        &bad[..bad.len().min(5)]
    );
    assert_eq!(refused, 0, "live holders' fenced writes were refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g2_fences_grow_in_commit_order_on_sqlite() {
    let h = Harness::sqlite("hammer").await;
    drop(h.client("setup").await);
    let path = h.url.strip_prefix("sqlite://").unwrap().to_string();
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute_batch(
        "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, fence INTEGER NOT NULL);
         CREATE TRIGGER audit_insert AFTER INSERT ON leases WHEN NEW.expires_at_ms IS NOT NULL
           BEGIN INSERT INTO audit (fence) VALUES (NEW.fence); END;
         CREATE TRIGGER audit_update AFTER UPDATE ON leases
           WHEN NEW.expires_at_ms IS NOT NULL AND NEW.fence IS NOT OLD.fence
           BEGIN INSERT INTO audit (fence) VALUES (NEW.fence); END;",
    )
    .unwrap();
    let (grants, _) = run_workers(&h.url, &h.tag, None);
    let fences: Vec<i64> = db
        .prepare("SELECT fence FROM audit ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(grants, WORKERS * GRANTS);
    assert_eq!(fences.len(), grants, "the audit saw every grant");
    let bad = out_of_order(&fences);
    assert!(bad.is_empty(), "fences out of commit order: {bad:?}");
}
