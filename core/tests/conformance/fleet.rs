//! Membership and fleets (M1, F1–F4 of docs/semantics.md) on every store, with several clients
//! in one process. Every fleet's events are read as they come and logged; the audit then checks
//! that no shard was ever held by two members at once (per shard, an `Assigned` only while no
//! other member holds it, fences strictly increasing).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accord::{
    Client, ErrorKind, Fleet, FleetEvent, FleetOptions, JoinOptions, KeyState, ListQuery,
    MemberEvent, Metadata, RevokeReason,
};

use crate::conformance::dropped::next_after_drops;
use crate::support::proxy::Mode;
use crate::support::Harness;

const TTL: Duration = Duration::from_secs(2);
const PERIOD: Duration = Duration::from_millis(250);

fn options(shards: usize) -> FleetOptions {
    FleetOptions::shards(shards)
        .ttl(TTL)
        .period(PERIOD)
        .handoff_timeout(TTL)
}

fn zone(z: &str) -> Metadata {
    let mut m = Metadata::new();
    m.insert("zone".into(), z.into());
    m
}

/// Waits for `check` with a generous bound; the bound is never a correctness condition.
async fn until(what: &str, bound: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < bound, "not within {bound:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

#[derive(Clone, Debug)]
struct Entry {
    at: Instant,
    member: usize,
    shard: String,
    /// `None` for Assigned.
    revoked: Option<RevokeReason>,
    fence: i64,
}

/// Every fleet's events, as they were read.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Entry>>>);

impl Log {
    fn read(&self, member: usize, fleet: Arc<Fleet>) {
        let log = self.clone();
        tokio::spawn(async move {
            // Asking for the next event acknowledges a hand-off: this loop is the handler.
            while let Some(event) = fleet.next_event().await {
                let (shard, revoked, fence) = match event {
                    FleetEvent::Assigned { shard, lease } => (shard, None, lease.fence()),
                    FleetEvent::Revoked {
                        shard,
                        reason,
                        fence,
                    } => (shard, Some(reason), fence),
                    _ => continue,
                };
                log.0.lock().unwrap().push(Entry {
                    at: Instant::now(),
                    member,
                    shard,
                    revoked,
                    fence,
                });
            }
        });
    }

    fn entries(&self) -> Vec<Entry> {
        self.0.lock().unwrap().clone()
    }

    /// The shards each member holds by its events.
    fn holdings(&self) -> BTreeMap<usize, BTreeSet<String>> {
        let mut held: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        for e in self.entries() {
            let mine = held.entry(e.member).or_default();
            if e.revoked.is_none() {
                mine.insert(e.shard);
            } else {
                mine.remove(&e.shard);
            }
        }
        held
    }

    fn counts(&self, members: &[usize]) -> Vec<usize> {
        let held = self.holdings();
        members
            .iter()
            .map(|m| held.get(m).map_or(0, BTreeSet::len))
            .collect()
    }

    /// No shard held by two members at once; fences strictly increasing per shard; every
    /// Revoked follows its own Assigned.
    fn audit(&self) {
        let mut holder: BTreeMap<String, (usize, i64)> = BTreeMap::new();
        let mut last_fence: BTreeMap<String, i64> = BTreeMap::new();
        for e in self.entries() {
            match e.revoked {
                None => {
                    assert!(
                        !holder.contains_key(&e.shard),
                        "shard {} assigned to member {} while {:?} held it",
                        e.shard,
                        e.member,
                        holder[&e.shard]
                    );
                    let last = last_fence.get(&e.shard).copied().unwrap_or(i64::MIN);
                    assert!(
                        e.fence > last,
                        "shard {}: fence {} after {last}",
                        e.shard,
                        e.fence
                    );
                    last_fence.insert(e.shard.clone(), e.fence);
                    holder.insert(e.shard, (e.member, e.fence));
                }
                Some(_) => {
                    assert_eq!(
                        holder.remove(&e.shard),
                        Some((e.member, e.fence)),
                        "revoked what it did not hold: {e:?}"
                    );
                }
            }
        }
    }
}

async fn start(h: &Harness, log: &Log, member: usize, shards: usize) -> (Client, Arc<Fleet>) {
    start_with(h, log, member, options(shards)).await
}

async fn start_with(
    h: &Harness,
    log: &Log,
    member: usize,
    options: FleetOptions,
) -> (Client, Arc<Fleet>) {
    let client = h.client(&format!("m{member}")).await;
    let fleet = Arc::new(client.fleet("f", options).await.unwrap());
    log.read(member, fleet.clone());
    (client, fleet)
}

/// M1: three members with metadata are listed; a watch yields them, then Joined for a
/// newcomer, Updated for a member that replaced its metadata (also in `members`), Left for one
/// that leaves and for one whose client closed (no notification: the watch finds it at the
/// member's expiry).
pub async fn m1_members_join_watch_and_leave(h: &Harness) {
    let ttl = JoinOptions::new().ttl(TTL);
    let mut clients = Vec::new();
    let mut members = Vec::new();
    for (i, z) in ["a", "a", "b"].iter().enumerate() {
        let c = h.client(&format!("w{i}")).await;
        members.push(c.join("g", ttl.clone().metadata(zone(z))).await.unwrap());
        clients.push(c);
    }
    let listed = clients[0].members("g").await.unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0].owner, clients[0].owner());
    assert_eq!(listed[2].metadata, zone("b"));
    assert!(listed.windows(2).all(|w| w[0].since <= w[1].since));
    assert!(members[0].lease().key().starts_with("accord.group/g/"));
    // Another group, and one whose name contains the separator, are other groups.
    assert!(clients[0].members("g/x").await.unwrap().is_empty());

    let mut watch = clients[0].watch("g").await.unwrap();
    match watch.next().await.unwrap() {
        MemberEvent::Members(now) => assert_eq!(now, listed),
        other => panic!("first event {other:?}"),
    }
    let newcomer = h.client("w3").await;
    let joined = newcomer.join("g", ttl.clone()).await.unwrap();
    match watch.next().await.unwrap() {
        MemberEvent::Joined(m) => assert_eq!(m.owner, newcomer.owner()),
        other => panic!("expected Joined, got {other:?}"),
    }
    members[1].update_metadata(zone("c")).await.unwrap();
    let listed = clients[0].members("g").await.unwrap();
    assert_eq!(listed[1].metadata, zone("c"));
    // An update is reported with the member as it is now (same fence: no leave and join).
    let updated = tokio::time::timeout(Duration::from_secs(30), watch.next())
        .await
        .expect("the watch reported no event for the metadata update");
    match updated.unwrap() {
        MemberEvent::Updated(m) => assert_eq!(
            (&m.owner, m.fence, &m.metadata),
            (&listed[1].owner, listed[1].fence, &zone("c"))
        ),
        other => panic!("expected Updated, got {other:?}"),
    }
    joined.leave().await.unwrap();
    match watch.next().await.unwrap() {
        MemberEvent::Left(m) => assert_eq!(m.owner, newcomer.owner()),
        other => panic!("expected Left, got {other:?}"),
    }
    // A client that goes away without leaving: found at the member's expiry.
    let gone = clients.remove(2);
    let gone_owner = gone.owner().to_string();
    std::mem::forget(members.remove(2));
    let started = Instant::now();
    gone.close().await;
    let left = tokio::time::timeout(TTL * 5, watch.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&left, MemberEvent::Left(m) if m.owner == gone_owner),
        "{left:?}"
    );
    assert!(started.elapsed() < TTL * 5);
    assert_eq!(clients[0].members("g").await.unwrap().len(), 2);
}

/// M2: a watch's `next` dropped after it took an announcement and before its read finished
/// (polled once, then dropped: what a timeout, an asyncio cancellation or a context deadline
/// does) loses nothing: the next call reads first and reports the change, well before the 30 s
/// safety re-read. A second watch on the same client says when the announcement has arrived
/// (the client delivers it to both at once).
pub async fn m2_a_dropped_next_loses_no_change(h: &Harness) {
    let watcher = h.client("watcher").await;
    let mut dropped = watcher.watch("g").await.unwrap();
    let mut awaited = watcher.watch("g").await.unwrap();
    for watch in [&mut dropped, &mut awaited] {
        assert_eq!(watch.next().await.unwrap(), MemberEvent::Members(vec![]));
    }
    let newcomer = h.client("newcomer").await;
    for _ in 0..3 {
        let member = newcomer
            .join("g", JoinOptions::new().ttl(60 * TTL))
            .await
            .unwrap();
        let joined = awaited.next().await.unwrap();
        assert!(matches!(&joined, MemberEvent::Joined(m) if m.owner == newcomer.owner()));
        assert_eq!(next_after_drops(&mut dropped).await, joined);
        member.leave().await.unwrap();
        let left = awaited.next().await.unwrap();
        assert!(matches!(&left, MemberEvent::Left(m) if m.owner == newcomer.owner()));
        assert_eq!(next_after_drops(&mut dropped).await, left);
    }
}

/// F1: four members split 16 shards 4 each; no shard held twice; then nothing moves for ten
/// periods.
pub async fn f1_shards_split_evenly_and_hold_still(h: &Harness) {
    let log = Log::default();
    let mut fleets = Vec::new();
    for m in 0..4 {
        fleets.push(start(h, &log, m, 16).await);
    }
    until("4 shards each", Duration::from_secs(20), || {
        log.counts(&[0, 1, 2, 3]) == vec![4, 4, 4, 4]
    })
    .await;
    let settled = log.entries().len();
    tokio::time::sleep(PERIOD * 10).await;
    assert_eq!(log.entries().len(), settled, "a shard moved while balanced");
    for (m, (_, fleet)) in fleets.iter().enumerate() {
        assert_eq!(fleet.shards().len(), 4, "member {m}");
    }
    assert_eq!(fleets[0].1.members().await.unwrap().len(), 4);
    log.audit();
}

/// F2: a fifth member joins four balanced ones: every member ends with 3 or 4, the moved
/// shards handed off (Revoked(handoff) on the old holder before Assigned on the new), each
/// move well under a ttl.
pub async fn f2_a_newcomer_is_handed_shards(h: &Harness) {
    // A long ttl tells a hand-off from an expiry whatever the machine's load: a shard left to
    // expire is free at the earliest two thirds of a ttl (6.7 s) after its last renewal.
    const LONG_TTL: Duration = Duration::from_secs(10);
    let options = FleetOptions::shards(16)
        .ttl(LONG_TTL)
        .period(PERIOD)
        .handoff_timeout(LONG_TTL);
    let log = Log::default();
    let mut fleets = Vec::new();
    for m in 0..4 {
        fleets.push(start_with(h, &log, m, options.clone()).await);
    }
    until("4 shards each", Duration::from_secs(20), || {
        log.counts(&[0, 1, 2, 3]) == vec![4, 4, 4, 4]
    })
    .await;
    let joined = Instant::now();
    fleets.push(start_with(h, &log, 4, options).await);
    until("3 or 4 shards each", Duration::from_secs(20), || {
        let counts = log.counts(&[0, 1, 2, 3, 4]);
        counts.iter().sum::<usize>() == 16 && counts.iter().all(|&c| c == 3 || c == 4)
    })
    .await;
    let entries = log.entries();
    let handoffs: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.revoked == Some(RevokeReason::Handoff) && e.at > joined)
        .collect();
    assert!(handoffs.len() >= 3, "{handoffs:?}");
    for revoked in handoffs {
        let taken = entries
            .iter()
            .find(|e| e.shard == revoked.shard && e.revoked.is_none() && e.at > revoked.at)
            .expect("a handed-off shard is assigned again");
        assert_eq!(taken.member, 4, "{revoked:?} then {taken:?}");
        assert!(
            taken.at - revoked.at < LONG_TTL / 2,
            "hand-off of {} took {:?}: a ttl was waited",
            revoked.shard,
            taken.at - revoked.at
        );
    }
    log.audit();
}

/// F3: a member whose connection is cut (as a killed or stopped one stops renewing) sees
/// Revoked(lost) for every shard, before any other member is assigned one of them; the others
/// retake them within ttl plus a period (and scheduling slack), and rebalance to ±1.
pub async fn f3_a_dead_members_shards_are_retaken(h: &Harness) {
    let log = Log::default();
    let (proxy, url) = h.proxy().await;
    let dying = Client::connect(&url, h.options("dying")).await.unwrap();
    let dying_fleet = Arc::new(dying.fleet("f", options(12)).await.unwrap());
    log.read(9, dying_fleet.clone());
    let mut fleets = Vec::new();
    for m in 0..2 {
        fleets.push(start(h, &log, m, 12).await);
    }
    until("4 shards each", Duration::from_secs(20), || {
        log.counts(&[0, 1, 9]) == vec![4, 4, 4]
    })
    .await;
    let cut = Instant::now();
    proxy.set(Mode::Cut);
    let took = until(
        "6 shards each for the survivors",
        Duration::from_secs(20),
        || log.counts(&[0, 1]) == vec![6, 6],
    )
    .await;
    assert!(
        took < TTL + PERIOD * 4 + Duration::from_secs(10),
        "retaken after {took:?}"
    );
    let entries = log.entries();
    let lost: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.member == 9 && e.revoked == Some(RevokeReason::Lost))
        .collect();
    assert_eq!(lost.len(), 4, "{entries:?}");
    assert!(lost.iter().all(|e| e.at > cut));
    log.audit();
    proxy.set(Mode::Pass);
}

/// F4: close() hands every shard back at once (Revoked(closed)); the others take them within a
/// period or so.
pub async fn f4_close_hands_everything_back(h: &Harness) {
    let log = Log::default();
    let mut fleets = Vec::new();
    for m in 0..3 {
        fleets.push(start(h, &log, m, 12).await);
    }
    until("4 shards each", Duration::from_secs(20), || {
        log.counts(&[0, 1, 2]) == vec![4, 4, 4]
    })
    .await;
    let (closing_client, closing) = fleets.remove(2);
    closing.close().await;
    assert!(closing.shards().is_empty());
    assert!(closing.is_closed());
    // Handed back, not left to expire: once close returns, the coordinator records none of its
    // shards as held by it (their ttl is still running). A check of what was stored, not of
    // how fast others react, so that a slow machine cannot fail it.
    let still_held: Vec<_> = fleets[0]
        .0
        .list(
            ListQuery::new()
                .prefix("accord.fleet/f/s/")
                .state(KeyState::Held),
        )
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|i| i.owner.as_deref() == Some(closing_client.owner()))
        .collect();
    assert!(
        still_held.is_empty(),
        "still held after close: {still_held:?}"
    );
    until("6 shards each", Duration::from_secs(20), || {
        log.counts(&[0, 1]) == vec![6, 6]
    })
    .await;
    let closed = log
        .entries()
        .iter()
        .filter(|e| e.member == 2 && e.revoked == Some(RevokeReason::Closed))
        .count();
    assert_eq!(closed, 4);
    log.audit();
}

/// Bad input is refused naming the field, before anything is held.
pub async fn fleet_bad_input_is_refused(h: &Harness) {
    let c = h.client("o1").await;
    let invalid = |r: accord::Result<Fleet>, field: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.message().contains(field), "{e} names {field}");
    };
    invalid(c.fleet("f", FleetOptions::shards(0)).await, "shards");
    invalid(c.fleet("f", FleetOptions::shards(10_001)).await, "shards");
    invalid(
        c.fleet("f", FleetOptions::keys(Vec::<String>::new())).await,
        "keys",
    );
    invalid(
        c.fleet("f", FleetOptions::keys(["a", "b", "a"])).await,
        "keys",
    );
    invalid(c.fleet("f", FleetOptions::keys(["a", ""])).await, "keys");
    invalid(c.fleet("", FleetOptions::shards(2)).await, "name");
    invalid(
        c.fleet(&"n".repeat(600), FleetOptions::shards(2)).await,
        "name",
    );
    invalid(
        c.fleet("f", FleetOptions::shards(2).ttl(Duration::from_millis(10)))
            .await,
        "ttl",
    );
    invalid(
        c.fleet("f", FleetOptions::shards(2).ttl(TTL).period(Duration::ZERO))
            .await,
        "period",
    );
    invalid(
        c.fleet("f", FleetOptions::shards(2).ttl(TTL).period(TTL * 2))
            .await,
        "period",
    );
    invalid(
        c.fleet("f", FleetOptions::shards(2).max_handoffs_per_period(0))
            .await,
        "max_handoffs_per_period",
    );
    invalid(
        c.fleet("f", FleetOptions::shards(2).handoff_timeout(Duration::ZERO))
            .await,
        "handoff_timeout",
    );
    // Durations and fields read in the caller's words: Rust's here, each binding's by the
    // style it declares (issue 32: the period was "0ns", whatever the caller's unit).
    let words = |r: accord::Result<Fleet>, style: Option<accord::Style>| {
        let e = r.unwrap_err();
        style.map_or_else(|| e.message().to_string(), |s| e.message_in(&s))
    };
    let period_zero = || {
        c.fleet(
            "f",
            FleetOptions::shards(2)
                .ttl(Duration::from_secs(5))
                .period(Duration::ZERO),
        )
    };
    assert_eq!(
        words(period_zero().await, None),
        "invalid period: 0s is outside 10ms..=ttl (5s)"
    );
    let python = accord::Style {
        durations: accord::Durations::Seconds,
        fields: accord::Fields::Snake,
    };
    assert_eq!(
        words(period_zero().await, Some(python)),
        "invalid period: 0 s is outside 0.01 s..=ttl (5 s)"
    );
    let node = accord::Style {
        durations: accord::Durations::Millis,
        fields: accord::Fields::Camel,
    };
    let handoff_zero = || c.fleet("f", FleetOptions::shards(2).handoff_timeout(Duration::ZERO));
    assert_eq!(
        words(handoff_zero().await, Some(node)),
        "invalid handoffTimeout: 0 ms is outside (0 ms, 86400000 ms]"
    );
    let go = accord::Style {
        durations: accord::Durations::Go,
        fields: accord::Fields::Go,
    };
    assert_eq!(
        words(handoff_zero().await, Some(go)),
        "invalid HandoffTimeout: 0s is outside (0s, 24h0m0s]"
    );
    let e = c.join("", JoinOptions::new()).await.unwrap_err();
    assert!(e.message().contains("group"), "{e}");
    let e = c.members("").await.unwrap_err();
    assert!(e.message().contains("group"), "{e}");
    let e = c.watch("").await.unwrap_err();
    assert!(e.message().contains("group"), "{e}");
    let e = c
        .join("g", JoinOptions::new().ttl(Duration::from_millis(1)))
        .await
        .unwrap_err();
    assert!(e.message().contains("ttl"), "{e}");
    assert_eq!(c.held_count(), 0);
    // 1,024 shards work: one member takes them all (claims of up to 1,000).
    let big = c
        .fleet("big", FleetOptions::shards(1024).ttl(TTL).period(PERIOD))
        .await
        .unwrap();
    until("1,024 shards held", Duration::from_secs(30), || {
        big.shards().len() == 1024
    })
    .await;
    big.close().await;
    assert_eq!(c.held_count(), 0);
}
