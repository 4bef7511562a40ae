//! Names spliced into SQL: schemas with quotes of every kind, dollar-quote tags, semicolons,
//! backslashes, unicode and the longest allowed length work through the printed migration
//! (piped to psql), connect, every statement and the wake-up channel; longer ones are refused
//! with InvalidArgument; none of them runs SQL of its own.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use accord::{AcquireOptions, Client, ErrorKind, Event, ListQuery};
use support::{eventually, Harness};

fn nasty_schemas() -> Vec<String> {
    vec![
        "we\"ird".into(),
        "it's".into(),
        "$accord$".into(),
        "x$accord".into(),
        "$accord$'; DROP TABLE canary; --".into(),
        "a;b\"; DROP TABLE canary; --".into(),
        "back\\slash'".into(),
        "E'\\'; DROP TABLE canary; --".into(),
        "schéma ✓ 名前".into(),
        "a;\nb\"; DROP TABLE canary; --\n".into(),
        "n".repeat(63),
    ]
}

/// Applies `script` with psql, as a DBA would (`accord migrate --print-sql | psql`).
fn psql(url: &str, script: &str) -> Option<std::process::Output> {
    let mut child = match Command::new("psql")
        .args([url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("psql: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    Some(child.wait_with_output().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nasty_schema_names_are_quoted_everywhere() {
    let h = Harness::postgres("names").await;
    let canary = format!("canary_{}", h.tag);
    h.admin()
        .batch_execute(&format!("CREATE TABLE \"{canary}\" (id int)"))
        .await
        .unwrap();
    for base in nasty_schemas() {
        // Unique per run, within the 63 bytes of an identifier.
        let schema = if base.len() == 63 {
            format!("{}{}", &h.tag[h.tag.len() - 8..], &base[8..])
        } else {
            format!("{base}{}", &h.tag[h.tag.len() - 8..])
        };
        let script = accord::migration_sql(&schema).unwrap();
        match psql(&h.url, &script) {
            Some(out) => assert!(
                out.status.success(),
                "schema {schema:?}: psql refused the printed migration: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            None => {
                // No psql on this machine: apply it the way psql would, one simple query.
                eprintln!("psql not found: the printed migration is applied as one script");
                h.admin().batch_execute(&script).await.unwrap();
            }
        }
        // The printed migration made the whole schema: a client needs no migration of its own.
        let options = |owner: &str| {
            h.options(owner)
                .schema(schema.clone())
                .migrate(false)
                .ttl(Duration::from_millis(600))
        };
        let a = Client::connect(&h.url, options("a"))
            .await
            .unwrap_or_else(|e| panic!("schema {schema:?}: {e}"));
        let b = Client::connect(&h.url, options("b").migrate(true))
            .await
            .unwrap();

        let lease = a
            .try_acquire("k", AcquireOptions::new())
            .await
            .unwrap()
            .expect("granted");
        lease.renew().await.unwrap();
        // The functions of the application's transaction (here one statement's).
        lease
            .fenced(h.admin())
            .await
            .unwrap_or_else(|e| panic!("schema {schema:?}: check_fence: {e}"));
        // The keepalive's batch statement (ttl 600 ms: a tick every 200 ms).
        let ticks = a.keepalive_statements();
        assert!(
            eventually(Duration::from_secs(10), || async {
                a.keepalive_statements() > ticks + 1
            })
            .await,
            "schema {schema:?}: no keepalive tick"
        );
        assert!(
            !lease.is_lost(),
            "schema {schema:?}: the keepalive lost the lease"
        );

        lease.release().await.unwrap();

        // The wake-up channel: a waiter gets the key on release, long before the holder's
        // expiry (a minute away: the wait would time out first).
        let held = a
            .try_acquire("k", AcquireOptions::new().ttl(Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("granted");
        let waiting = tokio::spawn({
            let b = b.clone();
            async move {
                b.acquire("k", AcquireOptions::new().timeout(Duration::from_secs(20)))
                    .await
            }
        });
        let wakeups = accord::wakeup_channel(&schema).unwrap();
        assert!(
            eventually(Duration::from_secs(10), || async {
                b.listening_channels().await.unwrap().contains(&wakeups)
            })
            .await,
            "schema {schema:?}: the waiter does not listen on {wakeups:?}"
        );
        held.release().await.unwrap();
        let taken = waiting.await.unwrap().unwrap_or_else(|e| {
            panic!("schema {schema:?}: the waiter was not woken by the release: {e}")
        });
        taken
            .done_in(h.admin(), None)
            .await
            .unwrap_or_else(|e| panic!("schema {schema:?}: done in SQL: {e}"));
        let done = b.list(ListQuery::new()).await.unwrap();
        assert_eq!(done.items.len(), 1);
        assert!(b.reset("k").await.unwrap());

        // A channel named like the schema.
        let channel = &schema[..schema.len().min(63)];
        let subscription = b.listen([channel]).await.unwrap();
        a.notify(channel, "hi").await.unwrap();
        match tokio::time::timeout(Duration::from_secs(10), subscription.recv()).await {
            Ok(Ok(Some(Event::Message(m)))) => assert_eq!(m.payload, "hi"),
            other => panic!("schema {schema:?}: no notification: {other:?}"),
        }
        a.close().await;
        b.close().await;
    }
    h.admin()
        .batch_execute(&format!("SELECT 1 FROM \"{canary}\""))
        .await
        .expect("no name ran SQL of its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlong_schema_names_are_refused() {
    let h = Harness::postgres("longnames").await;
    // 64 bytes: PostgreSQL would cut it to 63 silently, merging it with another schema.
    for schema in ["n".repeat(64), "é".repeat(32)] {
        let err = Client::connect(&h.url, h.options("a").schema(schema.clone()))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.message().contains("schema"), "{err}");
        let err = accord::migration_sql(&schema).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    }
    let err = Client::connect(&h.url, h.options("a").schema("a\0b"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}
