//! How a lease ends: G4 holds while a release or done is in flight, and closing the client
//! ends every lease it holds (lost fires; every later call on them fails with `Closed`).

use std::time::Duration;

use accord::{AcquireOptions, ErrorKind};

use crate::conformance::leases::holds;
use crate::support::{eventually, Harness, Mode};

const SEC: Duration = Duration::from_secs(1);

fn ttl(d: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(d)
}

/// Stalls every connection of the client behind `proxy` until its lease's deadline has passed
/// with a release (or done) in flight: lost fires at the deadline all the same, and the call
/// answers `LeaseLost` (the coordinator's expiry has passed when it runs) or a connection
/// error, never success.
async fn lost_fires_in_flight(h: &Harness, done: bool) {
    let (proxy, url) = h.proxy().await;
    // No statement timeout cuts the stalled call short: the network alone decides.
    let options = h.options("o1").statement_timeout(120 * SEC);
    let client = accord::Client::connect(&url, options).await.unwrap();
    let lease = client.acquire("a", ttl(SEC)).await.unwrap();
    let signal = lease.lost_signal();
    proxy.set(Mode::Stall);
    // Read once nothing can renew it any more.
    let expires_at = lease.expires_at();
    let ending = tokio::spawn(async move {
        let result = if done {
            lease.done(None).await
        } else {
            lease.release().await
        };
        (result, lease)
    });
    // The ttl is 1 s; 10 s only bounds a hang.
    tokio::time::timeout(10 * SEC, signal.wait())
        .await
        .expect("lost fires at the deadline while the call is in flight");
    assert!(!ending.is_finished(), "the call was still in flight");
    // Wait past the coordinator's expiry, then let the statement through.
    while h.now().await <= expires_at + chrono::Duration::milliseconds(100) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And until the coordinator no longer records the grant: etcd frees it at its own lease's
    // expiry (its ttl raised to etcd's minimum, 1.5 election timeouts, then its revoke loop's
    // pass), later than the `expires_at` this client shows.
    assert!(
        eventually(30 * SEC, || async { !holds(h, "o1", "a").await }).await,
        "the coordinator still records the grant 30 s after its expiry"
    );
    proxy.set(Mode::Pass);
    let (result, lease) = tokio::time::timeout(30 * SEC, ending)
        .await
        .expect("the call returns once the network is back")
        .unwrap();
    assert!(lease.is_lost(), "lost fired with the call in flight");
    let kind = result.unwrap_err().kind();
    assert!(
        matches!(kind, ErrorKind::LeaseLost | ErrorKind::Connection),
        "{kind:?}"
    );
    client.close().await;
}

pub async fn g4_lost_fires_with_a_release_in_flight(h: &Harness) {
    lost_fires_in_flight(h, false).await;
}

pub async fn g4_lost_fires_with_done_in_flight(h: &Harness) {
    lost_fires_in_flight(h, true).await;
}

/// Closing a client ends its leases: each held one is given back and its lost signal fires
/// (its holder must stop); afterwards renew, release and done fail with `Closed` on every
/// lease of the client, held at the close or not.
pub async fn close_ends_every_lease(h: &Harness) {
    let o1 = h.client("o1").await;
    let held = o1.acquire("held", ttl(60 * SEC)).await.unwrap();
    let released = o1.acquire("released", ttl(60 * SEC)).await.unwrap();
    released.release().await.unwrap();
    let lost = held.lost();
    o1.close().await;
    tokio::time::timeout(5 * SEC, lost)
        .await
        .expect("lost fires for a lease held at the close");
    assert!(held.is_lost());
    assert!(
        !released.is_lost(),
        "a lease released before the close was not lost"
    );
    for lease in [&held, &released] {
        for result in [
            lease.renew().await,
            lease.release().await,
            lease.done(None).await,
        ] {
            assert_eq!(result.unwrap_err().kind(), ErrorKind::Closed);
        }
    }
    // The close gave the key back.
    let o2 = h.client("o2").await;
    assert!(o2
        .try_acquire("held", ttl(60 * SEC))
        .await
        .unwrap()
        .is_some());
    o2.close().await;
}

/// Group commit: endings that many tasks of one client start at once share statements, and
/// each still gets its own answer. Half the leases are done, each merging metadata of its
/// own; the other half released; then every key is in the state its own call chose, with its
/// own metadata, and each lease reports the status its own call gave it.
pub async fn concurrent_endings_each_get_their_own_answer(h: &Harness) {
    const LEASES: usize = 30;
    let o1 = h.client("o1").await;
    let mut leases = Vec::new();
    for i in 0..LEASES {
        leases.push(
            o1.acquire(&format!("k{i:02}"), ttl(60 * SEC))
                .await
                .unwrap(),
        );
    }
    let endings = leases.iter().enumerate().map(|(i, lease)| async move {
        if i % 2 == 0 {
            lease
                .done(Some(crate::support::meta(serde_json::json!({ "i": i }))))
                .await
        } else {
            lease.release().await
        }
    });
    for result in futures_util::future::join_all(endings).await {
        result.unwrap();
    }
    let page = o1
        .list(accord::ListQuery::new().prefix("k").limit(100))
        .await
        .unwrap();
    assert_eq!(page.items.len(), LEASES);
    for info in page.items {
        let i: usize = info.key[1..].parse().unwrap();
        if i % 2 == 0 {
            assert_eq!(info.state, accord::KeyState::Done, "{}", info.key);
            assert_eq!(
                info.metadata.get("i"),
                Some(&serde_json::json!(i)),
                "{}",
                info.key
            );
        } else {
            assert_eq!(info.state, accord::KeyState::Free, "{}", info.key);
        }
    }
    for (i, lease) in leases.iter().enumerate() {
        let want = if i % 2 == 0 {
            accord::LeaseStatus::Done
        } else {
            accord::LeaseStatus::Released
        };
        assert_eq!(lease.status(), want, "{}", lease.key());
    }
    // A second done of a done lease, and a release after it, answer as one lease would.
    assert_eq!(
        leases[0].done(None).await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    leases[0].release().await.unwrap();
    o1.close().await;
}

/// Group commit of tries: many tasks of two clients try keys at once (fresh keys, free ones,
/// keys the other client holds, done keys, and each key by several tasks). Each caller gets
/// its own answer, as if it had tried alone: a key is granted to one caller at most, a held
/// key is refused, a done key fails with `Done`, and fences are never reused.
pub async fn concurrent_tries_each_get_their_own_answer(h: &Harness) {
    let (o1, o2) = (h.client("o1").await, h.client("o2").await);
    // f*: free after a release; d*: done; h*: held by o2 throughout; n*: never seen.
    for i in 0..4 {
        let free = o2.acquire(&format!("f{i}"), ttl(60 * SEC)).await.unwrap();
        free.release().await.unwrap();
        let done = o2.acquire(&format!("d{i}"), ttl(60 * SEC)).await.unwrap();
        done.done(None).await.unwrap();
    }
    let mut held = Vec::new();
    for i in 0..4 {
        held.push(o2.acquire(&format!("h{i}"), ttl(60 * SEC)).await.unwrap());
    }
    let keys: Vec<String> = ["f", "d", "h", "n"]
        .iter()
        .flat_map(|p| (0..4).map(move |i| format!("{p}{i}")))
        .collect();
    // Every key tried three times by o1's tasks and once by o2's, all started together.
    let (c1, c2) = (&o1, &o2);
    let tries = keys.iter().flat_map(|k| {
        let by_o1 = (0..3).map(move |_| (c1, k.as_str()));
        std::iter::once((c2, k.as_str())).chain(by_o1)
    });
    let results = futures_util::future::join_all(tries.map(|(client, key)| async move {
        let result = client.try_acquire(key, ttl(60 * SEC)).await;
        (key, result)
    }))
    .await;
    let mut granted: std::collections::HashMap<&str, Vec<i64>> = Default::default();
    for (key, result) in &results {
        match key.as_bytes()[0] {
            b'd' => assert_eq!(
                result.as_ref().unwrap_err().kind(),
                ErrorKind::Done,
                "{key}"
            ),
            b'h' => assert!(result.as_ref().unwrap().is_none(), "{key} is held by o2"),
            _ => {
                if let Some(lease) = result.as_ref().unwrap() {
                    granted.entry(key).or_default().push(lease.fence());
                }
            }
        }
    }
    for key in keys
        .iter()
        .filter(|k| k.starts_with('f') || k.starts_with('n'))
    {
        let fences = granted.get(key.as_str()).cloned().unwrap_or_default();
        assert_eq!(fences.len(), 1, "{key} granted to exactly one of its tries");
    }
    let mut fences: Vec<i64> = granted.values().flatten().copied().collect();
    fences.extend(held.iter().map(|l| l.fence()));
    let count = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), count, "no fence was granted twice");
    // What the coordinator records agrees: each granted key is held, by whoever got it.
    let page = o1.list(accord::ListQuery::new().limit(100)).await.unwrap();
    for info in page
        .items
        .iter()
        .filter(|i| granted.contains_key(i.key.as_str()))
    {
        assert_eq!(info.state, accord::KeyState::Held, "{}", info.key);
        assert_eq!(info.fence, granted[info.key.as_str()][0], "{}", info.key);
    }
    o1.close().await;
    o2.close().await;
}

/// `Client::stats` counts what the client did: calls, grants, refusals, timeouts, endings,
/// notifications and statements, with a latency histogram for each kind of wait.
pub async fn stats_count_what_the_client_did(h: &Harness) {
    let (o1, o2) = (h.client("o1").await, h.client("o2").await);
    assert_eq!(o1.stats().grants, 0);
    let a = o1.try_acquire("a", ttl(60 * SEC)).await.unwrap().unwrap();
    let b = o1.acquire("b", ttl(60 * SEC)).await.unwrap();
    assert!(o2.try_acquire("a", ttl(60 * SEC)).await.unwrap().is_none());
    let timed_out = o2
        .acquire("a", ttl(60 * SEC).timeout(Duration::from_millis(50)))
        .await
        .unwrap_err();
    assert_eq!(timed_out.kind(), ErrorKind::Timeout);
    let ch = h.channel("stats");
    let sub = o1.listen([&ch]).await.unwrap();
    o2.notify(&ch, "one").await.unwrap();
    assert!(sub.recv().await.unwrap().is_some());
    a.release().await.unwrap();
    b.done(None).await.unwrap();
    let s1 = o1.stats();
    assert_eq!(
        (s1.acquires, s1.grants, s1.refusals, s1.timeouts),
        (2, 2, 0, 0)
    );
    assert_eq!((s1.releases, s1.done, s1.lost), (1, 1, 0));
    assert_eq!(s1.notifications, 1);
    assert_eq!(s1.acquire_wait.count, 2);
    assert_eq!(s1.hold_time.count, 2);
    assert!(s1.hold_time.p50 <= s1.hold_time.max && s1.hold_time.max > Duration::ZERO);
    assert!(s1.statements >= 4, "{} statements", s1.statements);
    assert_eq!(s1.statement_time.count, s1.statements);
    let s2 = o2.stats();
    assert_eq!(
        (s2.acquires, s2.grants, s2.refusals, s2.timeouts),
        (2, 0, 1, 1)
    );
    o1.close().await;
    o2.close().await;
}
