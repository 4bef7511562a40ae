//! `Client::snapshot` (what `accord top` shows): a page of keys with exact counts under its
//! prefix, groups with their members, fleets with their members and shards (owned and not),
//! elections with their leaders, and streams with each named consumer's position and lag,
//! made by the real recipes on every store; and the acquires waiting in line for each key.

use std::time::{Duration, Instant};

use accord::{
    AcquireOptions, CampaignOptions, CancellationToken, Client, ErrorKind, FleetOptions,
    JoinOptions, KeyWaiters, ListQuery, Metadata, NamespaceSnapshot, StreamStart, SubscribeOptions,
};

use crate::support::Harness;

fn zone(z: &str) -> Metadata {
    let mut m = Metadata::new();
    m.insert("zone".into(), z.into());
    m
}

pub async fn t1_snapshot_shows_every_section(h: &Harness) {
    let a = h.client("a").await;
    let b = h.client("b").await;

    // Keys: under jobs/, one held, one done, three free.
    let held = a
        .try_acquire("jobs/1", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    let done = a
        .try_acquire("jobs/2", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    done.done(None).await.unwrap();
    a.offer("jobs/", ["jobs/3", "jobs/4", "jobs/5"], None)
        .await
        .unwrap();

    // A group of two, a fleet of one member holding all 3 shards, an election, a stream.
    let ma = a
        .join("workers", JoinOptions::new().metadata(zone("a")))
        .await
        .unwrap();
    let mb = b.join("workers", JoinOptions::new()).await.unwrap();
    let fleet = a
        .fleet(
            "orders",
            FleetOptions::shards(3)
                .ttl(Duration::from_secs(5))
                .period(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    let started = Instant::now();
    while fleet.shards().len() < 3 {
        // A bound, never a correctness condition: the fleet takes its shards in one period.
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "shards not taken"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let leadership = b
        .election("chief")
        .unwrap()
        .campaign("b", CampaignOptions::new())
        .await
        .unwrap();
    a.publish_many("events", ["1", "2", "3", "4", "5"])
        .await
        .unwrap();
    b.publish("quiet", "x").await.unwrap();
    let reader = a
        .subscribe(
            "events",
            SubscribeOptions::new()
                .consumer("billing")
                .start(StreamStart::Earliest),
        )
        .await
        .unwrap();
    let first = reader.next().await.unwrap().unwrap();
    let second = reader.next().await.unwrap().unwrap();
    assert_eq!((first.seq, second.seq), (1, 2));
    reader.ack(2).await.unwrap();

    // A page of 2 under jobs/: the counts are of all five keys.
    let snap = a
        .snapshot(ListQuery::new().prefix("jobs/").limit(2))
        .await
        .unwrap();
    let keys: Vec<&str> = snap.keys.items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["jobs/1", "jobs/2"]);
    assert!(snap.keys.next_cursor.is_some());
    assert_eq!(
        (snap.counts.held, snap.counts.free, snap.counts.done),
        (1, 3, 1)
    );
    assert_eq!(snap.counts.keys(), 5);

    assert_eq!(snap.groups.len(), 1, "{:?}", snap.groups);
    let g = &snap.groups[0];
    assert_eq!(g.group, "workers");
    let owners: Vec<&str> = g.members.iter().map(|m| m.owner.as_str()).collect();
    assert_eq!(owners.len(), 2);
    assert!(owners.contains(&a.owner()) && owners.contains(&b.owner()));
    let member_a = g.members.iter().find(|m| m.owner == a.owner()).unwrap();
    assert_eq!(member_a.metadata, zone("a"));
    assert!(member_a.expires_at.is_some());

    assert_eq!(snap.fleets.len(), 1, "{:?}", snap.fleets);
    let f = &snap.fleets[0];
    assert_eq!(f.fleet, "orders");
    assert_eq!(f.members.len(), 1);
    assert_eq!(f.members[0].owner, a.owner());
    assert_eq!(f.shards_of(a.owner()), ["0", "1", "2"]);
    assert!(f.unowned().is_empty());

    assert_eq!(snap.elections.len(), 1, "{:?}", snap.elections);
    assert_eq!(snap.elections[0].election, "chief");
    assert_eq!(snap.elections[0].leader.as_deref(), Some(b.owner()));

    let streams: Vec<&str> = snap.streams.iter().map(|s| s.stream.as_str()).collect();
    assert_eq!(streams, ["events", "quiet"]);
    let ev = &snap.streams[0];
    assert_eq!((ev.first_seq, ev.last_seq, ev.length()), (1, 5, 5));
    assert_eq!(ev.readers.len(), 1);
    assert_eq!(ev.readers[0].consumer, "billing");
    assert_eq!((ev.readers[0].acked, ev.readers[0].lag), (2, 3));
    assert!(snap.streams[1].readers.is_empty());
    assert!(!snap.truncated);
    assert_eq!(snap.cut, accord::SnapshotCut::default());

    // The fleet closed: its shards stay as rows, unowned; its member is gone.
    fleet.close().await;
    let snap = a.snapshot(ListQuery::new().limit(1)).await.unwrap();
    let f = &snap.fleets[0];
    assert!(f.members.is_empty(), "{f:?}");
    assert_eq!(f.unowned(), ["0", "1", "2"]);

    // The leader resigned: the election stays, vacant (what an alert on leaderless elections
    // reads), with the last leadership's fence.
    let fence = leadership.fence();
    leadership.resign().await.unwrap();
    let snap = a.snapshot(ListQuery::new().limit(1)).await.unwrap();
    assert_eq!(snap.elections.len(), 1, "{:?}", snap.elections);
    let e = &snap.elections[0];
    assert_eq!(
        (
            e.election.as_str(),
            e.leader.as_deref(),
            e.fence,
            e.expires_at
        ),
        ("chief", None, fence, None)
    );

    reader.close().await;
    ma.leave().await.unwrap();
    mb.leave().await.unwrap();
    held.release().await.unwrap();
    a.close().await;
    b.close().await;
}

/// Generous bound for what should happen at once: catches hangs, never timing.
const BOUND: Duration = Duration::from_secs(20);

/// Snapshots under `prefix` until `until` holds of one (polling: a waiter's place in line is
/// taken by its own task), within [`BOUND`].
async fn snapshot_until(
    client: &Client,
    prefix: &str,
    what: &str,
    until: impl Fn(&NamespaceSnapshot) -> bool,
) -> NamespaceSnapshot {
    let started = Instant::now();
    loop {
        let query = match prefix {
            "" => ListQuery::new(),
            p => ListQuery::new().prefix(p),
        };
        let snap = client.snapshot(query).await.unwrap();
        if until(&snap) {
            return snap;
        }
        assert!(
            started.elapsed() < BOUND,
            "{what} within {BOUND:?}: {:?}",
            snap.waiters
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn waiters(key: &str, exclusive: u64, shared: u64) -> KeyWaiters {
    KeyWaiters {
        key: key.to_string(),
        exclusive,
        shared,
    }
}

/// T2: the snapshot counts the acquires waiting in line for each key under its prefix,
/// exclusive and shared; a granted waiter leaves the count, and so does a cancelled one.
pub async fn t2_snapshot_counts_waiters_per_key(h: &Harness) {
    let holder = h.client("holder").await;
    let writer = h.client("writer").await;
    let reader = h.client("reader").await;
    let ttl = AcquireOptions::new().ttl(Duration::from_secs(60));

    let held = holder
        .try_acquire("q/1", ttl.clone())
        .await
        .unwrap()
        .unwrap();
    let other = holder
        .try_acquire("q/0", ttl.clone())
        .await
        .unwrap()
        .unwrap();
    let outside = holder
        .try_acquire("z/1", ttl.clone())
        .await
        .unwrap()
        .unwrap();
    let snap = holder.snapshot(ListQuery::new()).await.unwrap();
    assert!(snap.waiters.is_empty(), "{:?}", snap.waiters);
    assert_eq!(snap.counts.waiting, 0);

    // An exclusive waiter, then (once it is in line) a shared one, on q/1.
    let spawn_wait = |client: &Client, key: &str, options: AcquireOptions| {
        let (client, key) = (client.clone(), key.to_string());
        tokio::spawn(async move { client.acquire(&key, options.timeout(BOUND)).await })
    };
    let w = spawn_wait(&writer, "q/1", ttl.clone());
    snapshot_until(&holder, "q/", "the writer in line", |s| {
        s.waiters_on("q/1").is_some()
    })
    .await;
    let r = spawn_wait(&reader, "q/1", ttl.clone().shared(true));
    let snap = snapshot_until(&holder, "q/", "the reader in line", |s| {
        s.waiters_on("q/1").is_some_and(|w| w.total() == 2)
    })
    .await;
    assert_eq!(snap.waiters, vec![waiters("q/1", 1, 1)]);
    assert_eq!(snap.counts.waiting, 2);
    assert!(snap.waiters_on("q/0").is_none());
    assert!(!snap.truncated);

    // A waiter under another prefix is not counted under q/, and a cancelled one leaves.
    let cancel = CancellationToken::new();
    let gone = spawn_wait(&reader, "z/1", ttl.clone().cancel(cancel.clone()));
    let snap = snapshot_until(&holder, "", "the waiter on z/1 in line", |s| {
        s.waiters_on("z/1").is_some()
    })
    .await;
    assert_eq!(
        snap.waiters,
        vec![waiters("q/1", 1, 1), waiters("z/1", 1, 0)]
    );
    assert_eq!(snap.counts.waiting, 3);
    let snap = holder
        .snapshot(ListQuery::new().prefix("q/"))
        .await
        .unwrap();
    assert_eq!(snap.waiters, vec![waiters("q/1", 1, 1)]);
    assert_eq!(snap.counts.waiting, 2);
    cancel.cancel();
    let err = gone.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled, "{err}");
    // The cancelled acquire left the line before it returned.
    let snap = holder.snapshot(ListQuery::new()).await.unwrap();
    assert_eq!(snap.waiters, vec![waiters("q/1", 1, 1)]);
    assert_eq!(snap.counts.waiting, 2);

    // The holder releases: the writer, first in line, is granted; the reader waits on.
    held.release().await.unwrap();
    let w = w.await.unwrap().unwrap();
    let snap = holder
        .snapshot(ListQuery::new().prefix("q/"))
        .await
        .unwrap();
    assert_eq!(snap.waiters, vec![waiters("q/1", 0, 1)]);
    assert_eq!(snap.counts.waiting, 1);

    // The writer releases: the reader is granted, a shared holder now, and nobody waits.
    w.release().await.unwrap();
    let r = r.await.unwrap().unwrap();
    assert!(r.is_shared());
    let snap = holder.snapshot(ListQuery::new()).await.unwrap();
    assert!(snap.waiters.is_empty(), "{:?}", snap.waiters);
    assert_eq!(snap.counts.waiting, 0);
    assert_eq!(snap.counts.shared_holders, 1);
    assert!(snap.waiters_on("q/1").is_none());

    r.release().await.unwrap();
    other.release().await.unwrap();
    outside.release().await.unwrap();
    holder.close().await;
    writer.close().await;
    reader.close().await;
}
