//! `accord::close_all`, what the Python and Node bindings run on SIGTERM: it closes every open
//! client of the process but those connected with `close_on_sigterm(false)`. A test binary of
//! its own, since it closes every client of its process.

mod support;

use std::time::Duration;

use accord::{AcquireOptions, ErrorKind, KeyState, ListQuery};
use support::Harness;

const SEC: Duration = Duration::from_secs(1);

fn ttl() -> AcquireOptions {
    AcquireOptions::new().ttl(120 * SEC)
}

/// One test: `close_all` closes every client of the process, so the parts must not run beside
/// each other (the test harness runs tests of one binary in parallel threads).
#[tokio::test]
async fn close_all_closes_every_client_but_those_opted_out() {
    closes_every_client_but_those_opted_out().await;
    waits_for_a_close_under_way().await;
}

async fn closes_every_client_but_those_opted_out() {
    let h = Harness::postgres("close_all").await;
    let closed = h.client("closed").await;
    let kept = h
        .client_with("kept", h.options("kept").close_on_sigterm(false))
        .await;
    // A client dropped before: its entry is gone with it, and nothing fails.
    drop(h.client("dropped").await);
    let held = closed.acquire("a", ttl()).await.unwrap();
    let member = closed.join("g", Default::default()).await.unwrap();
    let still = kept.acquire("b", ttl()).await.unwrap();

    assert_eq!(accord::close_all().await, 1);
    assert!(closed.is_closed());
    assert!(held.is_lost() && member.lost_signal().fired());
    assert_eq!(held.release().await.unwrap_err().kind(), ErrorKind::Closed);
    assert!(!kept.is_closed() && !still.is_lost());

    // The lease was given back, not left to its 120 s ttl; the opted-out client still holds.
    let other = h.client("other").await;
    assert!(other.try_acquire("a", ttl()).await.unwrap().is_some());
    assert!(other.try_acquire("b", ttl()).await.unwrap().is_none());
    assert!(other.members("g").await.unwrap().is_empty());

    // Each client is closed once: a second call finds only those opened since.
    assert_eq!(accord::close_all().await, 1, "`other` was opened since");
    assert_eq!(accord::close_all().await, 0);
    still.release().await.unwrap();
    kept.close().await;
}

/// A close under way (the application's own, say) and `close_all` (SIGTERM's) at once: the
/// one that finds the client already closing waits until its releases are done, so a process
/// that exits after it leaves nothing to expire. The releases are held up by a transaction
/// that locks the keys' rows, so that they are still under way when `close_all` looks; a
/// plain read (which no row lock blocks) then tells whether they were done when it returned.
async fn waits_for_a_close_under_way() {
    const KEYS: usize = 20;
    let h = Harness::postgres("close_all_waits").await;
    let closing = h.client("closing").await;
    let mut leases = Vec::new();
    for i in 0..KEYS {
        leases.push(closing.acquire(&format!("k{i}"), ttl()).await.unwrap());
    }
    let other = h
        .client_with("other", h.options("other").close_on_sigterm(false))
        .await;
    h.admin()
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM accord.leases WHERE namespace = '{}' FOR UPDATE",
            h.tag
        ))
        .await
        .unwrap();
    // join! polls the close first: it marks the client closed and sends its releases, which
    // wait for the lock; close_all then finds the client closing, and must wait for them.
    let held_after = async {
        let closed = accord::close_all().await;
        let held = other
            .list(ListQuery::new().state(KeyState::Held))
            .await
            .unwrap();
        (closed, held.items.len())
    };
    let unlock = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        h.admin().batch_execute("COMMIT").await.unwrap();
    };
    let ((), (closed, held), ()) = tokio::join!(closing.close(), held_after, unlock);
    assert_eq!(closed, 0, "the client was already closing");
    assert_eq!(
        held, 0,
        "close_all returned before the close under way had released"
    );
    other.close().await;
}
