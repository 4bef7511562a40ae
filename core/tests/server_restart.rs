//! A PostgreSQL restart in the middle of a run: leases survive within their ttl, waiting
//! acquires and subscriptions carry on, fences keep increasing, and a stream's subscriber
//! receives every stored event once, in order, while publishing goes on across the restart
//! (G2, G8, L11, N5, D2). Its own test binary: it restarts the shared test server, which no
//! other test may see (`make test` runs it alone, after every other binary: TESTS_ALONE in the
//! Makefile).

mod support;

use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use accord::{AcquireOptions, ErrorKind, Event, StreamStart, SubscribeOptions};
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
    // A stream: a subscriber from the start, and a publisher that goes on through the restart
    // (a publish that fails on the connection is tried again: its event may be stored twice,
    // under two seqs, which is the publisher's at-least-once; the reader must still see every
    // stored seq once and in order).
    let reader = o2
        .subscribe(
            "restart",
            SubscribeOptions::new()
                .start(StreamStart::Earliest)
                .page_size(7),
        )
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let publishing = {
        let (o1, stop) = (o1.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                loop {
                    match o1.publish("restart", &format!("event {i}")).await {
                        Ok(seq) => {
                            acked.push((seq, format!("event {i}")));
                            break;
                        }
                        Err(e) if e.kind() == ErrorKind::Connection => {
                            tokio::time::sleep(Duration::from_millis(50)).await
                        }
                        Err(e) => panic!("publish: {e}"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            acked
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

    // Publishing went on after the restart; stop it and read everything stored.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let acked = publishing.await.unwrap();
    let last = o1.stream_info("restart").await.unwrap().last_seq;
    assert!(
        acked.len() > 20,
        "too few publishes around the restart: {}",
        acked.len()
    );
    let mut read = Vec::new();
    for want in 1..=last {
        let event = tokio::time::timeout(30 * SEC, reader.next())
            .await
            .expect("the reader receives every stored event")
            .unwrap()
            .unwrap();
        assert_eq!(event.seq, want);
        read.push(event.payload);
    }
    for (seq, payload) in acked {
        assert_eq!(&read[seq as usize - 1], &payload, "seq {seq}");
    }
}
