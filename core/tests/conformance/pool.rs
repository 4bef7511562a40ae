//! Work pools and semaphores (P1, P3, P4, P6 of docs/semantics.md) on every store.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use accord::{AcquireOptions, ClaimOptions, ErrorKind, PoolCounts};

use crate::support::proxy::Mode;
use crate::support::Harness;

const SEC: Duration = Duration::from_secs(1);

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:05}")).collect()
}

fn counts(free: u64, held: u64, done: u64) -> PoolCounts {
    PoolCounts { free, held, done }
}

/// P1: an offer registers keys as free and counts them; offering again changes nothing (a held
/// or done key stays so); bad input is refused naming the field, with nothing held or offered.
pub async fn p1_offer_is_idempotent_and_counted(h: &Harness) {
    let c = h.client("o1").await;
    let files = keys("files/", 2000);
    assert_eq!(c.offer("files/", files.clone(), None).await.unwrap(), 2000);
    assert_eq!(c.counts("files/").await.unwrap(), counts(2000, 0, 0));
    let claimed = c
        .claim("files/", ClaimOptions::new().limit(2).ttl(60 * SEC))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    claimed[0].done(None).await.unwrap();
    // Offered again, with a key acquired before without an offer: that one joins, as it is.
    let plain = c
        .acquire("files/zz-plain", AcquireOptions::new())
        .await
        .unwrap();
    let mut again = files.clone();
    again.push("files/zz-plain".to_string());
    assert_eq!(c.offer("files/", again, None).await.unwrap(), 1);
    assert_eq!(c.counts("files/").await.unwrap(), counts(1998, 2, 1));
    assert_eq!(claimed[1].status(), accord::LeaseStatus::Held);
    plain.release().await.unwrap();
    assert_eq!(c.counts("files/").await.unwrap(), counts(1999, 1, 1));
    // Another prefix is another pool.
    assert_eq!(c.counts("other/").await.unwrap(), counts(0, 0, 0));

    let held_before = c.held_count();
    let invalid = |r: accord::Result<u64>, field: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.message().contains(field), "{e} names {field}");
    };
    invalid(c.offer("", ["x"], None).await, "prefix");
    invalid(c.offer("files/", ["elsewhere/1"], None).await, "key");
    invalid(c.offer("files/", ["files/"], None).await, "key");
    invalid(
        c.offer("files/", keys("files/big-", 10_000), None).await,
        "keys",
    );
    for limit in [0, 1001] {
        let e = c
            .claim("files/", ClaimOptions::new().limit(limit))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("limit"), "{e}");
    }
    let e = c.claim("", ClaimOptions::new()).await.unwrap_err();
    assert!(e.message().contains("prefix"), "{e}");
    assert_eq!(c.held_count(), held_before);
    assert_eq!(c.counts("files/").await.unwrap(), counts(1999, 1, 1));
}

/// P3: a claim of 50 returns 50 distinct leases with distinct fences, oldest offer first;
/// concurrent claimers never wait for each other and never share a key: 8 claimers on a pool
/// of 8 keys each get one at once.
pub async fn p3_claims_are_batched_and_never_shared(h: &Harness) {
    let c = h.client("o1").await;
    let pool = keys("batch/", 60);
    c.offer("batch/", pool[..30].to_vec(), None).await.unwrap();
    c.offer("batch/", pool[30..].to_vec(), None).await.unwrap();
    let claimed = c
        .claim("batch/", ClaimOptions::new().limit(50).ttl(60 * SEC))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 50);
    let got: HashSet<&str> = claimed.iter().map(|l| l.key()).collect();
    assert_eq!(got.len(), 50);
    let fences: HashSet<i64> = claimed.iter().map(|l| l.fence()).collect();
    assert_eq!(fences.len(), 50);
    // Oldest offer first: the first 30 offered are all among them.
    assert!(pool[..30].iter().all(|k| got.contains(k.as_str())));
    assert_eq!(c.held_count(), 50);
    assert_eq!(c.counts("batch/").await.unwrap(), counts(10, 50, 0));

    let eight = keys("eight/", 8);
    c.offer("eight/", eight, None).await.unwrap();
    let mut claimers = Vec::new();
    for i in 0..8 {
        claimers.push(h.client(&format!("w{i}")).await);
    }
    let claims = claimers
        .iter()
        .map(|w| w.claim("eight/", ClaimOptions::new().ttl(60 * SEC)));
    let results = futures_util::future::join_all(claims).await;
    let mut seen = HashSet::new();
    for result in results {
        let leases = result.unwrap();
        assert_eq!(leases.len(), 1, "every claimer gets one key at once");
        assert!(
            seen.insert(leases[0].key().to_string()),
            "a key was granted twice"
        );
        std::mem::forget(leases); // held until the clients close
    }
    assert_eq!(c.counts("eight/").await.unwrap(), counts(0, 8, 0));
    assert!(c
        .claim("eight/", ClaimOptions::new())
        .await
        .unwrap()
        .is_empty());
    for w in &claimers {
        w.close().await;
    }
}

/// P3: many claimers of one pool at once, each in its own client, claiming until the pool is
/// empty: together they get every key, and no key twice (an optimistic store's claimers that
/// collide must each still end with keys of their own, not lose them or share them).
pub async fn p3_concurrent_claimers_get_disjoint_keys(h: &Harness) {
    let c = h.client("o1").await;
    let all = keys("race/", 240);
    assert_eq!(c.offer("race/", all.clone(), None).await.unwrap(), 240);
    let mut claimers = Vec::new();
    for i in 0..8 {
        claimers.push(h.client(&format!("w{i}")).await);
    }
    let drains = claimers.iter().map(|w| async move {
        let mut got = Vec::new();
        loop {
            let leases = w
                .claim("race/", ClaimOptions::new().limit(7).ttl(60 * SEC))
                .await
                .unwrap();
            if leases.is_empty() {
                return got;
            }
            got.extend(leases);
        }
    });
    let drained = futures_util::future::join_all(drains).await;
    let mut seen = HashSet::new();
    let mut fences = HashSet::new();
    for lease in drained.iter().flatten() {
        assert!(seen.insert(lease.key()), "{} granted twice", lease.key());
        assert!(
            fences.insert(lease.fence()),
            "fence {} twice",
            lease.fence()
        );
    }
    assert_eq!(seen.len(), all.len(), "every key claimed");
    assert_eq!(c.counts("race/").await.unwrap(), counts(0, 240, 0));
    for w in &claimers {
        w.close().await;
    }
}

/// P4: a claim with a timeout on an exhausted pool is woken by a release and by an offer (well
/// before its timeout, which a missed wake-up would wait out); it comes back empty, not failed,
/// when its timeout passes.
pub async fn p4_waiting_claims_are_woken(h: &Harness) {
    let c = h.client("o1").await;
    let w = h.client("w").await;
    c.offer("jobs/", ["jobs/a"], None).await.unwrap();
    let held = c
        .claim("jobs/", ClaimOptions::new().ttl(60 * SEC))
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    let started = Instant::now();
    let empty = w
        .claim("jobs/", ClaimOptions::new().timeout(SEC / 2))
        .await
        .unwrap();
    assert!(empty.is_empty());
    assert!(started.elapsed() >= SEC / 2);

    let wait = ClaimOptions::new().timeout(20 * SEC).ttl(60 * SEC);
    let waiting = tokio::spawn({
        let (w, wait) = (w.clone(), wait.clone());
        async move { w.claim("jobs/", wait).await }
    });
    held[0].release().await.unwrap();
    let started = Instant::now();
    let woken = waiting.await.unwrap().unwrap();
    assert_eq!(woken.len(), 1);
    assert_eq!(woken[0].key(), "jobs/a");
    assert!(woken[0].fence() > held[0].fence());
    assert!(
        started.elapsed() < 15 * SEC,
        "woken by the release, not the timeout"
    );

    let waiting = tokio::spawn({
        let w = w.clone();
        async move { w.claim("jobs/", wait).await }
    });
    c.offer("jobs/", ["jobs/b"], None).await.unwrap();
    let woken = waiting.await.unwrap().unwrap();
    assert_eq!(woken.len(), 1);
    assert_eq!(woken[0].key(), "jobs/b");
}

/// P4: a claimer that stops renewing (its connection cut, as a killed one stops) loses its
/// keys at their ttl; they are claimable again, with larger fences.
pub async fn p4_a_dead_claimers_keys_return(h: &Harness) {
    let (proxy, url) = h.proxy().await;
    let dying = accord::Client::connect(&url, h.options("dying"))
        .await
        .unwrap();
    let c = h.client("o1").await;
    c.offer("tasks/", keys("tasks/", 3), None).await.unwrap();
    let taken = dying
        .claim("tasks/", ClaimOptions::new().limit(3).ttl(SEC))
        .await
        .unwrap();
    assert_eq!(taken.len(), 3);
    proxy.set(Mode::Cut);
    // Each wait ends at the first expiry it sees; the three keys expire together.
    let mut retaken = Vec::new();
    for _ in 0..3 {
        if retaken.len() == 3 {
            break;
        }
        let wait = ClaimOptions::new().limit(3).ttl(60 * SEC).timeout(10 * SEC);
        retaken.extend(c.claim("tasks/", wait).await.unwrap());
    }
    let retaken_keys: HashSet<&str> = retaken.iter().map(|l| l.key()).collect();
    assert_eq!(retaken_keys.len(), 3);
    let max_dead = taken.iter().map(|l| l.fence()).max().unwrap();
    assert!(retaken.iter().all(|l| l.fence() > max_dead));
    assert!(taken.iter().all(|l| l.is_lost()));
    proxy.set(Mode::Pass);
}

/// P6: semaphore("s", 3) with 5 contenders: exactly 3 hold; a released permit goes to a
/// waiter; a lower limit in a handle never takes a permit above it.
pub async fn p6_semaphore_admits_its_limit(h: &Harness) {
    let mut contenders = Vec::new();
    for i in 0..5 {
        let c = h.client(&format!("c{i}")).await;
        contenders.push(c.semaphore("s", 3).await.unwrap());
    }
    let mut holders = Vec::new();
    for s in &contenders {
        if let Some(lease) = s
            .try_acquire(AcquireOptions::new().ttl(60 * SEC))
            .await
            .unwrap()
        {
            holders.push(lease);
        }
    }
    assert_eq!(holders.len(), 3);
    let permits: HashSet<&str> = holders.iter().map(|l| l.key()).collect();
    assert_eq!(permits.len(), 3);
    let waiter = tokio::spawn({
        let s = contenders[4].clone();
        async move { s.acquire(AcquireOptions::new().timeout(20 * SEC)).await }
    });
    let freed = holders.remove(0);
    let freed_key = freed.key().to_string();
    freed.release().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.key(), freed_key);
    let e = contenders[3]
        .acquire(AcquireOptions::new().timeout(SEC / 2))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
    // A handle with a smaller limit takes only permits below it.
    let c = h.client("low").await;
    let low = c.semaphore("s", 1).await.unwrap();
    assert_eq!(low.limit(), 1);
    if let Some(lease) = low.try_acquire(AcquireOptions::new()).await.unwrap() {
        assert_eq!(lease.key(), "s#00000");
    }
    let e = c.semaphore("s", 0).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    drop(got);
}

/// Claims that many tasks of one client start together share statements (group commit): the
/// keys are dealt out so that each caller gets at most its limit, no key twice, and together
/// they get every claimable key; a caller that asks alike gets nothing only when nothing is
/// left. Claims of different pools in the same round each get their own pool's keys.
pub async fn p3_claims_of_one_client_share_out_the_keys(h: &Harness) {
    let c = h.client("o1").await;
    c.offer("deal/", keys("deal/", 25), None).await.unwrap();
    c.offer("other/", keys("other/", 3), None).await.unwrap();
    let limits = [10usize, 1, 7, 5, 4];
    let claims = limits
        .iter()
        .map(|&n| c.claim("deal/", ClaimOptions::new().limit(n).ttl(60 * SEC)))
        .chain(std::iter::once(
            c.claim("other/", ClaimOptions::new().limit(5).ttl(60 * SEC)),
        ));
    let results: Vec<Vec<accord::Lease>> = futures_util::future::join_all(claims)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let mut seen = HashSet::new();
    for (leases, limit) in results.iter().zip(limits) {
        assert!(
            leases.len() <= limit,
            "{} keys for a limit of {limit}",
            leases.len()
        );
        for lease in leases {
            assert!(lease.key().starts_with("deal/"), "{}", lease.key());
            assert!(
                seen.insert(lease.key().to_string()),
                "{} twice",
                lease.key()
            );
        }
    }
    // 27 asked for, 25 claimable: every key is out, and at most one caller went short.
    assert_eq!(seen.len(), 25);
    let other = &results[limits.len()];
    assert_eq!(other.len(), 3);
    assert!(other.iter().all(|l| l.key().starts_with("other/")));
    assert_eq!(c.counts("deal/").await.unwrap(), counts(0, 25, 0));
    for lease in results.iter().flatten() {
        lease.done(None).await.unwrap();
    }
    assert_eq!(c.counts("deal/").await.unwrap(), counts(0, 0, 25));
    c.close().await;
}
