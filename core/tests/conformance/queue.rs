//! Shared locks, fair waiting and elections (X1–X3, E1–E3 of docs/semantics.md) on every store,
//! with several clients in one process. Order is established without sleeps: a waiter's place
//! in line is taken when `queued_count` says so, and wake-ups are counted by each client.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accord::{
    AcquireOptions, CampaignOptions, CancellationToken, Client, ErrorKind, Leader, Lease,
    ListQuery, Observer,
};
use serde_json::json;

use crate::conformance::dropped::next_after_drops;
use crate::support::{meta, Harness, Mode};

const SEC: Duration = Duration::from_secs(1);
/// Generous bound for anything that should happen at once: catches hangs, never timing.
const BOUND: Duration = Duration::from_secs(20);

fn shared() -> AcquireOptions {
    AcquireOptions::new().ttl(60 * SEC).shared(true)
}

fn exclusive() -> AcquireOptions {
    AcquireOptions::new().ttl(60 * SEC)
}

/// Waits until `client` has `n` acquires waiting in line (their place is committed).
async fn until_queued(client: &Client, n: usize) {
    let started = Instant::now();
    while client.queued_count() < n {
        assert!(
            started.elapsed() < BOUND,
            "no place in line within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Spawns a waiting acquire that logs `name` when granted and returns the lease.
fn wait_for(
    client: &Client,
    key: &str,
    options: AcquireOptions,
    name: &'static str,
    log: &Arc<Mutex<Vec<&'static str>>>,
) -> tokio::task::JoinHandle<Lease> {
    let (client, key, log) = (client.clone(), key.to_string(), log.clone());
    tokio::spawn(async move {
        let lease = client
            .acquire(&key, options.timeout(BOUND))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        log.lock().unwrap().push(name);
        lease
    })
}

/// X1: three shared holders at once; an exclusive acquire waits for them, and once it waits a
/// new shared acquire waits behind it; the exclusive is granted when the three release, the
/// shared one after it. Each grant is fenced; `list` shows every holder.
pub async fn x1_shared_holders_and_a_waiting_writer(h: &Harness) {
    let readers = [
        h.client("r1").await,
        h.client("r2").await,
        h.client("r3").await,
    ];
    let writer = h.client("w").await;
    let late = h.client("r4").await;
    let log = Arc::new(Mutex::new(Vec::new()));

    let mut held = Vec::new();
    for r in &readers {
        let lease = r.acquire("k", shared()).await.unwrap();
        assert!(lease.is_shared());
        held.push(lease);
    }
    let fences: Vec<i64> = held.iter().map(Lease::fence).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    let page = writer.list(ListQuery::new().prefix("k")).await.unwrap();
    let mut owners: Vec<_> = page
        .items
        .iter()
        .map(|i| (i.owner.clone().unwrap(), i.shared))
        .collect();
    owners.sort();
    assert_eq!(
        owners,
        vec![
            ("r1".to_string(), true),
            ("r2".to_string(), true),
            ("r3".to_string(), true)
        ],
        "{page:?}"
    );
    // A shared holder renews (the keepalive does too) but cannot change the key or finish it.
    held[0].renew().await.unwrap();
    let err = held[0]
        .renew_with_metadata(meta(json!({"x": 1})))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = held[0].done(None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    // No exclusive grant while they hold it.
    assert!(writer
        .try_acquire("k", exclusive())
        .await
        .unwrap()
        .is_none());

    let w = wait_for(&writer, "k", exclusive(), "writer", &log);
    until_queued(&writer, 1).await;
    // Once the writer waits, a new shared acquire does not get in ahead of it.
    assert!(late.try_acquire("k", shared()).await.unwrap().is_none());
    let r4 = wait_for(&late, "k", shared(), "late reader", &log);
    until_queued(&late, 1).await;

    for lease in held.drain(..2) {
        lease.release().await.unwrap();
    }
    assert!(log.lock().unwrap().is_empty(), "granted with a reader left");
    held.pop().unwrap().release().await.unwrap();
    let w = w.await.unwrap();
    assert!(w.fence() > fences[2]);
    assert!(!w.is_shared());
    assert_eq!(*log.lock().unwrap(), vec!["writer"]);
    w.release().await.unwrap();
    let r4 = r4.await.unwrap();
    assert!(r4.fence() > w.fence());
    assert_eq!(*log.lock().unwrap(), vec!["writer", "late reader"]);
    // A shared key with one holder left is free for an exclusive acquire once it leaves.
    r4.release().await.unwrap();
    let again = writer.try_acquire("k", exclusive()).await.unwrap().unwrap();
    again.release().await.unwrap();
}

/// X2: five clients queue on a held key in a known order and are granted in that order; each
/// release wakes the head of the line only (wake-ups counted per client).
pub async fn x2_fair_order_one_wakeup_per_release(h: &Harness) {
    let holder = h.client("h").await;
    let mut clients = Vec::new();
    for i in 0..5 {
        clients.push(h.client(&format!("c{i}")).await);
    }
    let names = ["c0", "c1", "c2", "c3", "c4"];
    let log = Arc::new(Mutex::new(Vec::new()));
    let lease = holder.acquire("q", exclusive()).await.unwrap();
    let mut waiting = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        waiting.push(wait_for(c, "q", exclusive(), names[i], &log));
        until_queued(c, 1).await;
    }
    // Nobody jumps the line, not even a try.
    assert!(holder
        .try_acquire("q", exclusive())
        .await
        .unwrap()
        .is_none());
    lease.release().await.unwrap();
    let mut fence = 0;
    for (i, task) in waiting.into_iter().enumerate() {
        let lease = task.await.unwrap();
        assert!(lease.fence() > fence);
        fence = lease.fence();
        assert_eq!(log.lock().unwrap().len(), i + 1, "granted out of turn");
        // Only the head was woken, once; those behind it saw nothing.
        for (j, c) in clients.iter().enumerate() {
            let expected = u64::from(j <= i);
            assert_eq!(
                c.waiter_wakeups(),
                expected,
                "after release {i}: {} woken {} times",
                names[j],
                c.waiter_wakeups()
            );
        }
        lease.release().await.unwrap();
    }
    assert_eq!(*log.lock().unwrap(), names.to_vec());
}

/// X3: a waiter that times out or is cancelled leaves the line at once; the next one is
/// granted on the release as if it had never been there (not at the leaver's expiry, a minute
/// away).
pub async fn x3_leaving_the_line_stalls_nobody(h: &Harness) {
    let holder = h.client("h").await;
    let quitter = h.client("quitter").await;
    let cancelled = h.client("cancelled").await;
    let next = h.client("next").await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let lease = holder.acquire("t", exclusive()).await.unwrap();

    // The quitter leaves by its timeout, which must not end before `until_queued` has seen its
    // place: with 300 ms, a loaded machine (load ~28 on 2 cores) let it time out unseen, and the
    // test then waited for a place that was already given up. 3 s is longer than any place
    // takes to commit here, so the order below is the test's, not the scheduler's.
    let q = {
        let quitter = quitter.clone();
        tokio::spawn(async move { quitter.acquire("t", exclusive().timeout(3 * SEC)).await })
    };
    until_queued(&quitter, 1).await;
    let token = CancellationToken::new();
    let c = {
        let (cancelled, token) = (cancelled.clone(), token.clone());
        tokio::spawn(async move { cancelled.acquire("t", exclusive().cancel(token)).await })
    };
    until_queued(&cancelled, 1).await;
    let n = wait_for(&next, "t", exclusive(), "next", &log);
    until_queued(&next, 1).await;

    assert_eq!(q.await.unwrap().unwrap_err().kind(), ErrorKind::Timeout);
    token.cancel();
    assert_eq!(c.await.unwrap().unwrap_err().kind(), ErrorKind::Cancelled);
    assert_eq!(quitter.held_count() + cancelled.held_count(), 0);
    let released_at = Instant::now();
    lease.release().await.unwrap();
    // Granted within the wait's bound: only the release's wake-up does that (the leavers'
    // places would otherwise stand for their 60 s ttl).
    let granted = n.await.unwrap();
    assert!(released_at.elapsed() < BOUND);
    // Woken by the release, or (a release that named a leaver while it was leaving) by the
    // leaver passing its turn on; both at most, never a herd.
    assert!(
        (1..=2).contains(&next.waiter_wakeups()),
        "{}",
        next.waiter_wakeups()
    );
    granted.release().await.unwrap();
    // The leavers' places were gone when their calls returned: nothing stands in line, so a
    // try_acquire (which never jumps a line) is granted at once.
    let again = quitter.try_acquire("t", exclusive()).await.unwrap();
    assert!(again.is_some(), "a place given up still stands in line");
}

/// X3, second part: a waiter whose process stops (its network cut) costs the next in line at
/// most its ttl; the release named it, and the next one goes ahead when its place expires.
pub async fn x3_a_dead_waiter_costs_at_most_its_ttl(h: &Harness) {
    let holder = h.client("h").await;
    let next = h.client("next").await;
    let (proxy, url) = h.proxy().await;
    let dead = Client::connect(&url, h.options("dead")).await.unwrap();
    let lease = holder.acquire("d", exclusive()).await.unwrap();
    let d = {
        let dead = dead.clone();
        tokio::spawn(async move {
            dead.acquire("d", AcquireOptions::new().ttl(SEC).timeout(BOUND))
                .await
        })
    };
    until_queued(&dead, 1).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let n = wait_for(&next, "d", exclusive(), "next", &log);
    until_queued(&next, 1).await;
    proxy.set(Mode::Cut);
    lease.release().await.unwrap();
    // Granted within the bound: the dead waiter's place (1 s ttl) expired; `next` renews
    // its own only every 20 s, so it woke at the dead one's expiry.
    let granted = n.await.unwrap();
    granted.release().await.unwrap();
    d.abort();
}

/// The next leader `observer` reports, past at most one vacancy: a resignation (or expiry)
/// frees the key before the next campaigner in line, woken, takes it, and a read in between
/// finds nobody leading.
async fn next_leader(observer: &mut Observer) -> Leader {
    match observer.next().await.unwrap() {
        Some(leader) => leader,
        None => observer
            .next()
            .await
            .unwrap()
            .expect("a vacancy is reported once, then the next leader"),
    }
}

/// E1: three campaigners, one leader; `leader()` agrees from every client and an observer
/// yields it. E2: the leader resigns, the next campaigner leads; every observer sees each
/// leader once, in order, fences increasing. E3: `proclaim` changes the value observers see,
/// with the same fence.
pub async fn e1_e3_one_leader_handed_on_in_order(h: &Harness) {
    let clients = [
        h.client("a").await,
        h.client("b").await,
        h.client("c").await,
    ];
    let watcher = h.client("watcher").await;
    let election = watcher.election("primary").unwrap();
    assert!(election.leader().await.unwrap().is_none());
    let mut observer = election.observe().await.unwrap();
    // The current state first: nobody leads.
    assert_eq!(observer.next().await.unwrap(), None);

    let first = clients[0]
        .election("primary")
        .unwrap()
        .campaign("a-value", CampaignOptions::new().ttl(60 * SEC))
        .await
        .unwrap();
    let mut waiting = Vec::new();
    for (i, c) in clients.iter().enumerate().skip(1) {
        let e = c.election("primary").unwrap();
        let value = format!("{}-value", ["a", "b", "c"][i]);
        waiting.push(tokio::spawn(async move {
            e.campaign(&value, CampaignOptions::new().ttl(60 * SEC).timeout(BOUND))
                .await
                .unwrap()
        }));
        until_queued(c, 1).await;
    }
    for c in clients.iter().chain([&watcher]) {
        let leader = c
            .election("primary")
            .unwrap()
            .leader()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(leader.owner, "a");
        assert_eq!(leader.value, "a-value");
        assert_eq!(leader.fence, first.fence());
    }
    let seen = observer.next().await.unwrap().unwrap();
    assert_eq!((seen.owner.as_str(), seen.fence), ("a", first.fence()));

    first.proclaim("a-new").await.unwrap();
    let seen = observer.next().await.unwrap().unwrap();
    assert_eq!(
        (seen.owner.as_str(), seen.value.as_str(), seen.fence),
        ("a", "a-new", first.fence())
    );

    let mut fence = first.fence();
    first.resign().await.unwrap();
    for (task, owner) in waiting.into_iter().zip(["b", "c"]) {
        let leadership = task.await.unwrap();
        let seen = next_leader(&mut observer).await;
        assert_eq!(seen.owner, owner);
        assert!(seen.fence > fence);
        assert_eq!(seen.fence, leadership.fence());
        assert_eq!(seen.value, format!("{owner}-value"));
        fence = seen.fence;
        leadership.resign().await.unwrap();
    }
    assert!(election.leader().await.unwrap().is_none());
    // The last resignation leaves nobody in line: a vacancy.
    assert_eq!(observer.next().await.unwrap(), None);
    // Bad input is refused, naming what is wrong.
    let err = watcher.election("").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("election"), "{err}");
}

/// E2, second part: a leader whose network is cut is replaced within its ttl; an observer
/// sees the new leader with a larger fence.
pub async fn e2_a_dead_leader_is_replaced(h: &Harness) {
    let (proxy, url) = h.proxy().await;
    let doomed = Client::connect(&url, h.options("doomed")).await.unwrap();
    let heir = h.client("heir").await;
    let watcher = h.client("watcher").await;
    let election = watcher.election("e2").unwrap();
    let mut observer = election.observe().await.unwrap();
    assert_eq!(observer.next().await.unwrap(), None);
    let leading = doomed
        .election("e2")
        .unwrap()
        .campaign("doomed", CampaignOptions::new().ttl(SEC))
        .await
        .unwrap();
    assert_eq!(observer.next().await.unwrap().unwrap().owner, "doomed");
    let campaign = {
        let e = heir.election("e2").unwrap();
        tokio::spawn(async move {
            e.campaign("heir", CampaignOptions::new().ttl(60 * SEC).timeout(BOUND))
                .await
                .unwrap()
        })
    };
    until_queued(&heir, 1).await;
    proxy.set(Mode::Cut);
    let leadership = campaign.await.unwrap();
    assert!(leadership.fence() > leading.fence());
    let seen = next_leader(&mut observer).await;
    assert_eq!(
        (seen.owner.as_str(), seen.fence),
        ("heir", leadership.fence())
    );
    leadership.resign().await.unwrap();
}

/// E4: an observer reports the current state first (nobody leads: `None`), then every change,
/// vacancies included: a resignation with nobody in line, a leadership dropped, each reported
/// as `None` once; a new leader after a vacancy with a larger fence.
pub async fn e4_vacancies_are_reported(h: &Harness) {
    let leader = h.client("leader").await;
    let watcher = h.client("watcher").await;
    let mut observer = watcher.election("e4").unwrap().observe().await.unwrap();
    assert_eq!(observer.next().await.unwrap(), None);
    let election = leader.election("e4").unwrap();
    let mut fence = 0;
    for round in 0..2 {
        let leading = election
            .campaign("v", CampaignOptions::new().ttl(60 * SEC))
            .await
            .unwrap();
        let seen = observer.next().await.unwrap().unwrap();
        assert_eq!(
            (seen.owner.as_str(), seen.fence),
            ("leader", leading.fence())
        );
        assert!(seen.fence > fence);
        fence = seen.fence;
        if round == 0 {
            leading.resign().await.unwrap();
        } else {
            drop(leading); // resigns in the background
        }
        let vacancy = tokio::time::timeout(BOUND, observer.next()).await;
        assert_eq!(vacancy.unwrap().unwrap(), None, "round {round}");
    }
}

/// E4, dead leader: a leader whose connection is cut, with nobody in line, is reported gone
/// (`None`) once its lease expires: within its ttl and a read, not at the next leader.
pub async fn e4_a_dead_leaders_vacancy_is_reported(h: &Harness) {
    let (proxy, url) = h.proxy().await;
    let doomed = Client::connect(&url, h.options("doomed")).await.unwrap();
    let watcher = h.client("watcher").await;
    let election = watcher.election("e4d").unwrap();
    let mut observer = election.observe().await.unwrap();
    assert_eq!(observer.next().await.unwrap(), None);
    let leading = doomed
        .election("e4d")
        .unwrap()
        .campaign("doomed", CampaignOptions::new().ttl(SEC))
        .await
        .unwrap();
    assert_eq!(observer.next().await.unwrap().unwrap().owner, "doomed");
    proxy.set(Mode::Cut);
    let vacancy = tokio::time::timeout(BOUND, observer.next()).await;
    assert_eq!(vacancy.unwrap().unwrap(), None);
    assert!(election.leader().await.unwrap().is_none());
    drop(leading);
}

/// E5: an observer's `next` dropped after it took an announcement and before its read finished
/// (polled once, then dropped: what a timeout, an asyncio cancellation or a context deadline
/// does) loses nothing: the next call reads first and reports the leader, the new value and
/// the vacancy, well before the 30 s safety re-read. A second observer on the same client
/// says when the announcement has arrived (the client delivers it to both at once).
pub async fn e5_a_dropped_next_loses_no_change(h: &Harness) {
    let watcher = h.client("watcher").await;
    let election = watcher.election("e5").unwrap();
    let mut dropped = election.observe().await.unwrap();
    let mut awaited = election.observe().await.unwrap();
    for observer in [&mut dropped, &mut awaited] {
        assert_eq!(observer.next().await.unwrap(), None);
    }
    let leader = h.client("leader").await;
    let theirs = leader.election("e5").unwrap();
    for _ in 0..3 {
        let leading = theirs
            .campaign("v", CampaignOptions::new().ttl(60 * SEC))
            .await
            .unwrap();
        let seen = awaited.next().await.unwrap();
        assert_eq!(seen.as_ref().map(|l| l.fence), Some(leading.fence()));
        assert_eq!(next_after_drops(&mut dropped).await, seen);
        leading.proclaim("w").await.unwrap();
        let seen = awaited.next().await.unwrap();
        assert_eq!(seen.as_ref().map(|l| l.value.as_str()), Some("w"));
        assert_eq!(next_after_drops(&mut dropped).await, seen);
        leading.resign().await.unwrap();
        assert_eq!(awaited.next().await.unwrap(), None);
        assert_eq!(next_after_drops(&mut dropped).await, None);
    }
}
