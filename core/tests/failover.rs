//! O2: failover to a synchronous standby. Clients connect with one libpq URL naming both nodes
//! and `target_session_attrs=read-write`; the primary is stopped (fast, then, the other way
//! round, immediate) and the standby promoted. The same clients follow each time: the held
//! lease renews on the new primary, the waiting acquire gets the key when it is released, with
//! a larger fence, the listener reports `Reconnected` and hears what is sent afterwards, and a
//! write fenced by the old grant is refused by the resource.
//!
//! Runs under `scripts/failover-pair.sh run`, which makes the pair (ACCORD_TEST_FAILOVER_URL)
//! and performs the failovers (ACCORD_TEST_FAILOVER_CTL); skipped without it.

mod support;

use std::process::Command;
use std::time::Duration;

use accord::{AcquireOptions, Client, ClientOptions, Event};

const SEC: Duration = Duration::from_secs(1);
/// Long enough that a lease outlives a failover (well under a second here), short enough that
/// nothing in the test waits long for it.
const TTL: Duration = Duration::from_secs(10);

fn ctl(args: &[&str]) -> String {
    let script = std::env::var("ACCORD_TEST_FAILOVER_CTL").expect("ACCORD_TEST_FAILOVER_CTL");
    let out = Command::new(script)
        .args(args)
        .output()
        .expect("run failover-pair.sh");
    assert!(
        out.status.success(),
        "failover-pair.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A write to the resource the lease protects, fenced: accepted only with a fence larger than
/// any accepted before. Through a connection of its own to whichever node is the primary now.
async fn fenced_write(url: &str, key: &str, fence: i64) -> bool {
    let (db, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the primary");
    tokio::spawn(connection);
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS failover_resource (key text PRIMARY KEY, fence bigint NOT NULL)",
    )
    .await
    .unwrap();
    let accepted = db
        .query_opt(
            "INSERT INTO failover_resource AS r VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET fence = excluded.fence WHERE r.fence < excluded.fence
             RETURNING fence",
            &[&key, &fence],
        )
        .await
        .unwrap();
    accepted.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o2_clients_follow_a_promoted_standby() {
    let Ok(url) = std::env::var("ACCORD_TEST_FAILOVER_URL") else {
        eprintln!(
            "o2_clients_follow_a_promoted_standby: skipped, run under scripts/failover-pair.sh"
        );
        return;
    };
    a_standby_alone_is_refused_at_connect(&url).await;
    let tag = format!("o2_{:08x}", rand::random::<u32>());
    let options = |owner: &str| {
        ClientOptions::new()
            .namespace(tag.clone())
            .owner(owner)
            .ttl(TTL)
    };
    let holder = Client::connect(&url, options("holder")).await.unwrap();
    let waiter = Client::connect(&url, options("waiter")).await.unwrap();
    let channel = format!("{tag}_ch");
    let sub = waiter.listen([&channel]).await.unwrap();
    let key = "resource";
    let mut lease = holder.acquire(key, AcquireOptions::new()).await.unwrap();
    assert!(fenced_write(&url, key, lease.fence()).await);

    for mode in ["fast", "immediate"] {
        let old = ctl(&["primary"]);
        let new = if old == "a" { "b" } else { "a" };
        let wait = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                waiter
                    .acquire(key, AcquireOptions::new().timeout(60 * SEC))
                    .await
            })
        };
        // The waiter has its place in line before the failover: its ticket row is on both
        // nodes (synchronous replication).
        let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let queued = support::eventually(10 * SEC, || async {
            db.query_one(
                "SELECT count(*) FROM accord.tickets WHERE namespace = $1 AND key = $2
                   AND NOT granted",
                &[&tag, &key],
            )
            .await
            .map(|row| row.get::<_, i64>(0) == 1)
            .unwrap_or(false)
        })
        .await;
        assert!(queued, "{mode}: the waiter took its place in line");
        drop(db);

        ctl(&["stop", &old, mode]);
        ctl(&["promote", new]);
        assert_eq!(ctl(&["primary"]), new);

        // The listener noticed its connection went, and hears what is sent afterwards.
        match tokio::time::timeout(30 * SEC, sub.recv()).await {
            Ok(Ok(Some(Event::Reconnected))) => {}
            other => panic!("{mode}: expected Reconnected, got {other:?}"),
        }
        holder.notify(&channel, mode).await.unwrap();
        match tokio::time::timeout(10 * SEC, sub.recv()).await {
            Ok(Ok(Some(Event::Message(m)))) => assert_eq!(m.payload, mode),
            other => panic!("{mode}: expected the message, got {other:?}"),
        }

        // The lease was within its ttl throughout: it renews on the new primary.
        lease.renew().await.unwrap();
        assert!(!lease.is_lost(), "{mode}: the held lease was lost");
        assert!(!wait.is_finished(), "{mode}: the waiter got a held key");

        // Released on the new primary: the waiter gets the key, with a larger fence, and the
        // old holder's fenced writes are refused from then on.
        let old_fence = lease.fence();
        lease.release().await.unwrap();
        let next = tokio::time::timeout(30 * SEC, wait)
            .await
            .unwrap_or_else(|_| panic!("{mode}: the waiter is woken"))
            .unwrap()
            .unwrap();
        assert!(next.fence() > old_fence, "{mode}: fences keep growing");
        assert!(fenced_write(&url, key, next.fence()).await);
        assert!(
            !fenced_write(&url, key, old_fence).await,
            "{mode}: a stale fence was accepted"
        );
        // Hand the key back to the holder for the next round.
        next.release().await.unwrap();
        lease = holder
            .acquire(key, AcquireOptions::new().timeout(30 * SEC))
            .await
            .unwrap();
        assert!(lease.fence() > next.fence());
        assert!(fenced_write(&url, key, lease.fence()).await);

        // The old primary comes back as the new one's synchronous standby.
        ctl(&["standby", &old]);
    }
    lease.release().await.unwrap();
    holder.close().await;
    waiter.close().await;
}

/// A URL that names the standby alone is refused at connect, saying what it is and what to
/// name instead, rather than failing at the first grant with "cannot execute … in a read-only
/// transaction". Part of the failover test (the two would race on the pair otherwise).
async fn a_standby_alone_is_refused_at_connect(url: &str) {
    let dir = std::env::var("ACCORD_TEST_FAILOVER_DIR").expect("ACCORD_TEST_FAILOVER_DIR");
    // The schema exists (made on the primary, replicated): only the server's role is at stake.
    Client::connect(url, ClientOptions::new())
        .await
        .unwrap()
        .close()
        .await;
    let standby = if ctl(&["primary"]) == "a" { "b" } else { "a" };
    let port = std::fs::read_to_string(format!("{dir}/{standby}.port")).unwrap();
    let config: tokio_postgres::Config = url.parse().unwrap();
    let password = String::from_utf8(config.get_password().unwrap().to_vec()).unwrap();
    let standby_url = format!(
        "postgres://postgres:{password}@127.0.0.1:{}/postgres",
        port.trim()
    );
    let err = Client::connect(&standby_url, ClientOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), accord::ErrorKind::Connection, "{err}");
    assert!(
        err.message().contains("standby")
            && err.message().contains("target_session_attrs=read-write"),
        "{err}"
    );
}
