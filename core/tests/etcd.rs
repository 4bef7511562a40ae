//! The conformance suite on etcd (`ACCORD_TEST_ETCD_URL`, an `etcd://` URL of a cluster; each
//! scenario skips, saying why, without it), built with the cargo feature `etcd`; and how an
//! `etcd://` URL is refused without that feature.
//!
//! The etcd store has every recipe (leases, locks, waiting, notify, pools, streams and
//! snapshots), and the harness every fault: network faults go through a proxy in front of every
//! member (`Harness::proxy`), switched together; connections are ended from outside by resetting
//! the proxy a `Harness::terminable_client` reaches the cluster through.

#[cfg(feature = "etcd")]
mod conformance;
mod support;

use accord::{Client, ClientOptions, ErrorKind};

#[cfg(feature = "etcd")]
mod suite {
    use super::support::Harness;
    crate::conformance_suite!(
        Harness::etcd,
        has[
            connection_termination,
            member_failure,
            network_faults,
            pools,
            streams,
            snapshot
        ]
    );
}

/// Without the feature, an etcd URL is refused as unsupported, naming the feature.
#[cfg(not(feature = "etcd"))]
#[tokio::test]
async fn etcd_urls_need_the_feature() {
    let err = Client::connect("etcd://127.0.0.1:2379", ClientOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.message().contains("`etcd`"), "{err}");
}

/// An etcd URL's refusals name the parameter, before any connection, and never quote a
/// password (TLS and user/password themselves: core/tests/etcd_secure.rs).
#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_url_refusals_name_the_parameter() {
    for (url, says) in [
        ("etcd://127.0.0.1:2379?mode=x", "\"mode\""),
        ("etcd://127.0.0.1:2379?cacert=/ca.pem", "use etcds://"),
        ("etcd://u@127.0.0.1:2379", "no password"),
        ("etcds://127.0.0.1:2379?cert=/c.pem", "cert= needs key="),
    ] {
        let err = Client::connect(url, ClientOptions::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{url}");
        assert!(err.message().contains(says), "{url}: {err}");
    }
    let err = Client::connect(
        "etcd://u:secret@127.0.0.1:2379?pasword=secret2",
        ClientOptions::new(),
    )
    .await
    .unwrap_err();
    assert!(err.message().contains("pasword"), "{err}");
    assert!(!format!("{err} {err:?}").contains("secret"), "{err:?}");
}

/// The calls a client sent its store so far (etcd: gRPC calls and keep-alive messages).
#[cfg(feature = "etcd")]
fn calls(client: &Client) -> u64 {
    client.stats().statements
}

/// An uncontended try_acquire and release are one transaction each on etcd: the grant
/// compares what the client last knew of the key (the row it wrote, nothing holding it or in
/// line) and reads the key only if that changed; the release compares the row it wrote with the
/// grant. (Bounded, not exact: a grant keeps its session's lease alive first when the last
/// keep-alive is older than about a second, one call more, which a slow machine may need.)
#[cfg(feature = "etcd")]
#[tokio::test]
async fn an_uncontended_pair_is_two_transactions() {
    use accord::AcquireOptions;
    let Some(h) = support::Harness::etcd("etcd_pair").await else {
        return;
    };
    let client = h.client("o1").await;
    let ttl = || AcquireOptions::new().ttl(std::time::Duration::from_secs(60));
    // The session's lease of this ttl class exists before counting.
    let first = client.try_acquire("warm", ttl()).await.unwrap().unwrap();
    first.release().await.unwrap();
    const PAIRS: u64 = 20;
    let before = calls(&client);
    for i in 0..PAIRS {
        // Half on one key again and again, half on keys the client never saw.
        let key = if i % 2 == 0 {
            "again".to_string()
        } else {
            format!("new{i}")
        };
        let lease = client.try_acquire(&key, ttl()).await.unwrap().unwrap();
        lease.release().await.unwrap();
    }
    let sent = calls(&client) - before;
    assert!(
        sent < 3 * PAIRS,
        "{PAIRS} uncontended pairs took {sent} calls (2 a pair, and the odd keep-alive)"
    );
    // Another client's grant in between: the first client's knowledge is stale, and its
    // try reads the key in the same transaction that fails, then refuses.
    let theirs = h.client("o2").await;
    let held = theirs.try_acquire("again", ttl()).await.unwrap().unwrap();
    assert!(client.try_acquire("again", ttl()).await.unwrap().is_none());
    held.release().await.unwrap();
    let mine = client.try_acquire("again", ttl()).await.unwrap().unwrap();
    assert!(mine.fence() > held.fence(), "fences grow across clients");
    mine.release().await.unwrap();
    client.close().await;
    theirs.close().await;
}

/// A claimed key ends in one transaction, as a try_acquired one does: the claim's transaction
/// wrote the key's row, so the done compares with it instead of reading the key first.
#[cfg(feature = "etcd")]
#[tokio::test]
async fn a_claimed_key_is_done_in_one_transaction() {
    use accord::ClaimOptions;
    let Some(h) = support::Harness::etcd("etcd_claim_done").await else {
        return;
    };
    let client = h.client("o1").await;
    const KEYS: u64 = 10;
    client
        .offer("jobs/", (0..KEYS).map(|i| format!("jobs/{i}")), None)
        .await
        .unwrap();
    let options = ClaimOptions::new()
        .limit(KEYS as usize)
        .ttl(std::time::Duration::from_secs(60));
    let claimed = client.claim("jobs/", options).await.unwrap();
    assert_eq!(claimed.len() as u64, KEYS);
    let before = calls(&client);
    for lease in &claimed {
        lease.done(None).await.unwrap();
    }
    let sent = calls(&client) - before;
    assert!(
        sent < 3 * KEYS / 2,
        "{KEYS} dones of claimed keys took {sent} calls (one each, and the odd keep-alive)"
    );
    let counts = client.counts("jobs/").await.unwrap();
    assert_eq!(counts.done, KEYS);
    client.close().await;
}

/// Client-side group commit on etcd: the tries, releases and dones that many tasks of one
/// client start at once go out as one transaction per round (each key a nested transaction
/// that succeeds or fails on its own), not a transaction or two each; a key another client
/// holds is refused while the others in its transaction are granted, and the fences of one
/// transaction are distinct and above every earlier one.
#[cfg(feature = "etcd")]
#[tokio::test]
async fn concurrent_calls_of_a_client_share_transactions() {
    use accord::{AcquireOptions, KeyState, ListQuery};
    let Some(h) = support::Harness::etcd("etcd_group").await else {
        return;
    };
    const KEYS: usize = 40;
    let ttl = || AcquireOptions::new().ttl(std::time::Duration::from_secs(60));
    let (client, other) = (h.client("o1").await, h.client("o2").await);
    let taken = other.try_acquire("taken", ttl()).await.unwrap().unwrap();
    let warm = client.try_acquire("warm", ttl()).await.unwrap().unwrap();
    warm.release().await.unwrap();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("k{i:02}")).collect();
    let mut fences = vec![taken.fence()];
    let mut leases = Vec::new();
    for round in 0..2 {
        let before = calls(&client);
        let tries = keys
            .iter()
            .map(String::as_str)
            .chain(["taken"])
            .map(|key| client.try_acquire(key, ttl()));
        let mut results = futures_util::future::join_all(tries).await;
        let sent = calls(&client) - before;
        // One round when every try joined the first, two when the first went out alone; a
        // round is one transaction, and perhaps a keep-alive of the session's lease first.
        assert!(
            sent <= 4,
            "round {round}: {} tries took {sent} calls",
            KEYS + 1
        );
        let refused = results.pop().unwrap().unwrap();
        assert!(refused.is_none(), "a key another client holds is refused");
        let granted: Vec<_> = results
            .into_iter()
            .map(|r| r.unwrap().expect("a free key is granted"))
            .collect();
        let newest = *fences.iter().max().unwrap();
        for lease in &granted {
            assert!(
                lease.fence() > newest,
                "{} below an earlier fence",
                lease.key()
            );
            fences.push(lease.fence());
        }
        let page = client.list(ListQuery::new().limit(100)).await.unwrap();
        for lease in &granted {
            let info = page.items.iter().find(|i| i.key == lease.key()).unwrap();
            assert_eq!(
                (info.state, info.fence),
                (KeyState::Held, lease.fence()),
                "{}",
                info.key
            );
        }
        // Even keys done in the second round, the rest released, all at once.
        let before = calls(&client);
        let endings = granted.iter().enumerate().map(|(i, lease)| async move {
            if round == 1 && i % 2 == 0 {
                lease.done(None).await
            } else {
                lease.release().await
            }
        });
        for ended in futures_util::future::join_all(endings).await {
            ended.unwrap();
        }
        let sent = calls(&client) - before;
        assert!(sent <= 4, "round {round}: {KEYS} endings took {sent} calls");
        leases.extend(granted);
    }
    let count = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), count, "no fence was granted twice");
    let page = other.list(ListQuery::new().limit(100)).await.unwrap();
    for (i, key) in keys.iter().enumerate() {
        let info = page.items.iter().find(|info| &info.key == key).unwrap();
        let state = if i % 2 == 0 {
            KeyState::Done
        } else {
            KeyState::Free
        };
        assert_eq!(info.state, state, "{key}");
    }
    // Released keys are free for another client.
    let free = other.try_acquire("k01", ttl()).await.unwrap().unwrap();
    assert!(free.fence() > *fences.last().unwrap());
    free.release().await.unwrap();
    taken.release().await.unwrap();
    client.close().await;
    other.close().await;
}

/// A lease's `expires_at` counts the ttl etcd gave the session's lease, not the one asked for:
/// etcd raises a ttl below its minimum (about 1.5 election timeouts; the test cluster's is
/// several seconds), and the key then lives that long after the last keep-alive.
#[cfg(feature = "etcd")]
#[tokio::test]
async fn expires_at_counts_the_ttl_etcd_granted() {
    use accord::AcquireOptions;
    let Some(h) = support::Harness::etcd("etcd_min_ttl").await else {
        return;
    };
    let client = h.client("o1").await;
    // In whole milliseconds, as the store's records count this client's clock.
    let before = chrono::Utc::now().timestamp_millis();
    let lease = client
        .try_acquire(
            "short",
            AcquireOptions::new().ttl(std::time::Duration::from_secs(1)),
        )
        .await
        .unwrap()
        .unwrap();
    // The holder's record is on the session's lease: ask etcd what ttl it has.
    let mut etcd = support::etcd::Cluster::from_env().members[0].client().await;
    let prefix = format!("/accord-test/{}", h.tag);
    let rows = etcd
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let lease_id = rows
        .kvs()
        .iter()
        .map(|kv| kv.lease())
        .find(|&id| id != 0)
        .expect("the holder's record is on a lease");
    let granted = etcd
        .lease_time_to_live(lease_id, None)
        .await
        .unwrap()
        .granted_ttl();
    assert!(granted >= 1, "the lease is alive: {granted}");
    let lives = lease.expires_at().timestamp_millis() - before;
    assert!(
        lives >= granted * 1000,
        "etcd keeps the key {granted} s after the grant, expires_at says {lives} ms"
    );
    lease.release().await.unwrap();
    client.close().await;
}

/// A listener whose channels stay quiet still follows the cluster's revision (the watch's
/// progress notifications): when its connections end after etcd compacted everything up to
/// the cluster's latest write, long after the last notification it heard, its watch resumes
/// past the compaction, with nothing missed and no `Reconnected`. (A watch that kept the
/// revision of the last event it heard would resume from before the compaction, and tell every
/// listener and waiter of the client that it may have missed something.)
#[cfg(feature = "etcd")]
#[tokio::test]
async fn a_quiet_listener_resumes_past_a_compaction() {
    use accord::Event;
    use etcd_client::CompactionOptions;
    use std::time::Duration;
    const SEC: Duration = Duration::from_secs(1);
    let Some(h) = support::Harness::etcd("etcd_quiet").await else {
        return;
    };
    // The compaction cuts every watch's history short: nothing else of this binary runs
    // meanwhile (the member faults' lock).
    let cluster = support::etcd::Cluster::from_env();
    h.allow_member_faults();
    let _alone = cluster.faults().await;
    let listener = h.terminable_client("o1").await;
    let sender = h.client("o2").await;
    let channel = h.channel("quiet");
    let sub = listener.listen([&channel]).await.unwrap();
    let next = || async {
        match tokio::time::timeout(30 * SEC, sub.recv()).await {
            Ok(Ok(Some(Event::Message(m)))) => m.payload,
            other => panic!(
                "expected a message and nothing else (the watch saw everything through \
                 revision {:?}), got {other:?}",
                listener.watched_revision()
            ),
        }
    };
    sender.notify(&channel, "first").await.unwrap();
    assert_eq!(next().await, "first");

    // Writes outside every key the listener watches.
    let mut raw = cluster.members[0].client().await;
    let elsewhere = format!("/accord-test/{}-elsewhere/", h.tag);
    let mut written = 0;
    for i in 0..200 {
        let put = raw.put(format!("{elsewhere}{i}"), "x", None).await.unwrap();
        written = put.header().expect("a header").revision();
    }
    // The watch learns that it missed nothing through them from a progress notification, asked
    // for after a silence; 60 s bounds a hang.
    support::eventually(60 * SEC, || async {
        listener
            .watched_revision()
            .is_some_and(|seen| seen >= written)
    })
    .await;
    raw.compact(written, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    assert!(h.terminate_connections("o1").await >= 1);
    sender.notify(&channel, "after").await.unwrap();
    assert_eq!(next().await, "after");
    listener.close().await;
    sender.close().await;
}
