//! A PostgreSQL restart in the middle of a run: leases survive within their ttl, waiting
//! acquires and subscriptions carry on, and fences keep increasing (G2, G8, L11, N5).

mod support;

use std::time::Duration;

use accord::{AcquireOptions, Event};
use support::Harness;

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_mid_run() {
    let h = Harness::postgres("restart").await;
    let ch = h.channel("restart");
    let o1 = h.client("o1").await;
    let o2 = h.client("o2").await;
    let lease = o1
        .acquire("a", AcquireOptions::new().ttl(30 * SEC))
        .await
        .unwrap();
    let sub = o2.listen([&ch]).await.unwrap();
    let waiter = {
        let o2 = o2.clone();
        tokio::spawn(async move {
            o2.acquire("a", AcquireOptions::new().timeout(60 * SEC))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    if !support::restart_server() {
        eprintln!("server_restart_mid_run: skipped, the test server was not started by the tests");
        return;
    }

    // The subscription learns that it may have missed something, then keeps receiving.
    match tokio::time::timeout(30 * SEC, sub.recv()).await {
        Ok(Ok(Some(Event::Reconnected))) => {}
        other => panic!("expected Reconnected, got {other:?}"),
    }
    o1.notify(&ch, "after restart").await.unwrap();
    match tokio::time::timeout(10 * SEC, sub.recv()).await {
        Ok(Ok(Some(Event::Message(m)))) => assert_eq!(m.payload, "after restart"),
        other => panic!("expected the message, got {other:?}"),
    }

    // The lease was within its ttl throughout: still held, renewable.
    lease.renew().await.unwrap();
    assert!(!lease.is_lost());
    assert!(!waiter.is_finished(), "the waiter got a held key");

    // The waiter is woken by the release, over the new connections, with a larger fence.
    let fence_before = lease.fence();
    lease.release().await.unwrap();
    let next = tokio::time::timeout(10 * SEC, waiter)
        .await
        .expect("the waiter is woken")
        .unwrap()
        .unwrap();
    assert!(next.fence() > fence_before);
    let fresh = o1
        .try_acquire("b", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    assert!(fresh.fence() > next.fence());
}
