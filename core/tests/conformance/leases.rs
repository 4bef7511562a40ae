//! The lease scenarios L1–L11 of docs/semantics.md (L12 needs worker processes: see
//! `fenced_writes.rs`).

use std::time::{Duration, Instant};

use accord::{AcquireOptions, CancellationToken, ErrorKind, KeyState, ListQuery};
use serde_json::json;

use crate::support::{eventually, meta, Harness, Mode};

const SEC: Duration = Duration::from_secs(1);

fn ttl(d: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(d)
}

/// Asserts two coordinator timestamps agree within a second.
fn assert_close(a: chrono::DateTime<chrono::Utc>, b: chrono::DateTime<chrono::Utc>) {
    let diff = (a - b).num_milliseconds().abs();
    assert!(diff <= 1000, "{a} and {b} differ by {diff} ms");
}

pub async fn l1_acquire_records_everything(h: &Harness) {
    let o1 = h.client("o1").await;
    let lease = o1
        .acquire("a", ttl(60 * SEC).metadata(meta(json!({"k": "v"}))))
        .await
        .unwrap();
    let now = h.now().await;
    assert_eq!(lease.key(), "a");
    assert_eq!(lease.owner(), "o1");
    assert!(lease.fence() > 0);
    assert_close(lease.expires_at(), now + chrono::Duration::seconds(60));
    assert_eq!(lease.metadata(), meta(json!({"k": "v"})));
    assert!(!lease.is_lost());

    let page = o1.list(ListQuery::new()).await.unwrap();
    assert_eq!(page.items.len(), 1, "{page:?}");
    let info = &page.items[0];
    assert_eq!(info.key, "a");
    assert_eq!(info.state, KeyState::Held);
    assert_eq!(info.owner.as_deref(), Some("o1"));
    assert_eq!(info.fence, lease.fence());
    assert_eq!(info.metadata, meta(json!({"k": "v"})));
    assert_close(info.expires_at.unwrap(), lease.expires_at());
}

pub async fn l2_not_reentrant(h: &Harness) {
    let o1 = h.client("o1").await;
    let o1_again = h.client("o1").await;
    let o2 = h.client("o2").await;
    let lease = o1.acquire("a", ttl(60 * SEC)).await.unwrap();
    assert!(o1.try_acquire("a", ttl(60 * SEC)).await.unwrap().is_none());
    assert!(o1_again
        .try_acquire("a", ttl(60 * SEC))
        .await
        .unwrap()
        .is_none());
    assert!(o2.try_acquire("a", ttl(60 * SEC)).await.unwrap().is_none());
    assert_eq!(o2.held_count(), 0);
    lease.release().await.unwrap();
    assert!(o2.try_acquire("a", ttl(60 * SEC)).await.unwrap().is_some());
}

pub async fn l3_expiry_hands_over_with_a_larger_fence(h: &Harness) {
    let (proxy, url) = h.proxy().await;
    let o1 = accord::Client::connect(&url, h.options("o1"))
        .await
        .unwrap();
    let o2 = h.client("o2").await;
    let stale = o1.acquire("a", ttl(SEC)).await.unwrap();
    // o1 can no longer reach the coordinator: its lease expires without renewal.
    proxy.set(Mode::Cut);
    tokio::time::timeout(5 * SEC, stale.lost())
        .await
        .expect("the lost signal fires");
    let taken = o2
        .acquire("a", ttl(60 * SEC).timeout(10 * SEC))
        .await
        .unwrap();
    assert!(taken.fence() > stale.fence());
    proxy.set(Mode::Pass);
    assert!(stale.is_lost());
    for result in [
        stale.renew().await,
        stale.release().await,
        stale.done(None).await,
    ] {
        assert_eq!(result.unwrap_err().kind(), ErrorKind::LeaseLost);
    }
    // o2 still holds.
    let info = &o2.list(ListQuery::new()).await.unwrap().items[0];
    assert_eq!(
        (info.state, info.owner.as_deref()),
        (KeyState::Held, Some("o2"))
    );
}

pub async fn l4_renew_extends_and_merges(h: &Harness) {
    let o1 = h.client("o1").await;
    let lease = o1
        .acquire("a", ttl(5 * SEC).metadata(meta(json!({"k": "v"}))))
        .await
        .unwrap();
    let first = lease.expires_at();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    lease
        .renew_with_metadata(meta(json!({"b": 2})))
        .await
        .unwrap();
    let moved = lease.expires_at() - first;
    assert!(
        moved >= chrono::Duration::milliseconds(1000),
        "expiry moved by {moved}"
    );
    assert_close(
        lease.expires_at(),
        h.now().await + chrono::Duration::seconds(5),
    );
    assert_eq!(lease.metadata(), meta(json!({"k": "v", "b": 2})));
    let info = &o1.list(ListQuery::new()).await.unwrap().items[0];
    assert_eq!(info.metadata, meta(json!({"k": "v", "b": 2})));
    lease.renew().await.unwrap();
}

pub async fn l5_done_is_final_until_reset(h: &Harness) {
    let o1 = h.client("o1").await;
    let o2 = h.client("o2").await;
    let lease = o1
        .acquire("a", ttl(60 * SEC).metadata(meta(json!({"k": "v"}))))
        .await
        .unwrap();
    lease.done(Some(meta(json!({"l": "w"})))).await.unwrap();
    assert_eq!(
        o2.try_acquire("a", ttl(SEC)).await.unwrap_err().kind(),
        ErrorKind::Done
    );
    assert_eq!(
        o1.acquire("a", ttl(SEC).timeout(SEC))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Done
    );
    let done = o1
        .list(ListQuery::new().state(KeyState::Done))
        .await
        .unwrap();
    assert_eq!(done.items.len(), 1);
    assert_eq!(done.items[0].metadata, meta(json!({"k": "v", "l": "w"})));
    assert_eq!(done.items[0].owner.as_deref(), Some("o1"));
    assert_eq!(
        lease.done(None).await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    assert_eq!(
        lease.renew().await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    lease
        .release()
        .await
        .expect("release after done is harmless");
    assert!(o2.reset("a").await.unwrap());
    assert!(!o2.reset("a").await.unwrap(), "nothing left to reset");
    let again = o2.try_acquire("a", ttl(60 * SEC)).await.unwrap().unwrap();
    assert!(again.fence() > lease.fence());
    // A live lease is never reset from under its holder.
    assert_eq!(o1.reset("a").await.unwrap_err().kind(), ErrorKind::Held);
}

pub async fn l6_release_is_idempotent_and_fenced(h: &Harness) {
    let (proxy, url) = h.proxy().await;
    let o1 = accord::Client::connect(&url, h.options("o1"))
        .await
        .unwrap();
    let o2 = h.client("o2").await;
    let lease = o1.acquire("a", ttl(60 * SEC)).await.unwrap();
    lease.release().await.unwrap();
    lease.release().await.expect("second release is harmless");

    // A stale handle of the same owner never frees the newer grant.
    let old = o1.acquire("b", ttl(SEC)).await.unwrap();
    proxy.set(Mode::Cut);
    tokio::time::timeout(5 * SEC, old.lost()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // past the coordinator's expiry
    proxy.set(Mode::Pass);
    let new = o1
        .acquire("b", ttl(60 * SEC).timeout(10 * SEC))
        .await
        .unwrap();
    assert!(new.fence() > old.fence());
    assert_eq!(
        old.release().await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    assert!(o2.try_acquire("b", ttl(SEC)).await.unwrap().is_none());

    // A foreign owner's handle never frees it either: o2's stale lease on "c".
    let foreign = {
        let (proxy2, url2) = h.proxy().await;
        let o2p = accord::Client::connect(&url2, h.options("o2"))
            .await
            .unwrap();
        let foreign = o2p.acquire("c", ttl(SEC)).await.unwrap();
        proxy2.set(Mode::Cut);
        tokio::time::timeout(5 * SEC, foreign.lost()).await.unwrap();
        foreign
    };
    let mine = o1
        .acquire("c", ttl(60 * SEC).timeout(10 * SEC))
        .await
        .unwrap();
    assert_eq!(
        foreign.release().await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    assert!(o2.try_acquire("c", ttl(SEC)).await.unwrap().is_none());
    drop(mine);
    assert!(
        eventually(5 * SEC, || async {
            o2.try_acquire("c", ttl(SEC)).await.unwrap().is_some()
        })
        .await,
        "dropping a lease releases it"
    );
}

pub async fn l7_list_filters_and_pages(h: &Harness) {
    let o1 = h.client("o1").await;
    let ab = o1.acquire("a/b", ttl(60 * SEC)).await.unwrap();
    for (key, m) in [("a/b/c", json!({"a": 1})), ("a/x", json!({"a": 1, "b": 2}))] {
        let lease = o1
            .acquire(key, ttl(60 * SEC).metadata(meta(m)))
            .await
            .unwrap();
        lease.done(None).await.unwrap();
    }
    let count = |q: ListQuery| {
        let o1 = o1.clone();
        async move { o1.list(q).await.unwrap().items.len() }
    };
    assert_eq!(count(ListQuery::new()).await, 3);
    assert_eq!(count(ListQuery::new().state(KeyState::Done)).await, 2);
    assert_eq!(count(ListQuery::new().state(KeyState::Held)).await, 1);
    assert_eq!(count(ListQuery::new().state(KeyState::Free)).await, 0);
    ab.release().await.unwrap();
    assert_eq!(count(ListQuery::new().state(KeyState::Free)).await, 1);
    assert_eq!(count(ListQuery::new().state(KeyState::Held)).await, 0);
    assert_eq!(count(ListQuery::new().prefix("a/b")).await, 2);
    assert_eq!(count(ListQuery::new().prefix("a/x/y")).await, 0);
    assert_eq!(
        count(ListQuery::new().metadata(meta(json!({"a": 1})))).await,
        2
    );
    assert_eq!(
        count(ListQuery::new().metadata(meta(json!({"b": 2})))).await,
        1
    );

    // LIKE wildcards in a prefix are literal.
    for key in ["p%q/1", "p_q/2", "pxq/3", "pq/4"] {
        o1.acquire(key, ttl(60 * SEC))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    assert_eq!(count(ListQuery::new().prefix("p%q")).await, 1);
    assert_eq!(count(ListQuery::new().prefix("p_q")).await, 1);
    assert_eq!(count(ListQuery::new().prefix("p")).await, 4);

    // Pages: key order (code points), no key twice, a cursor until the last page.
    let mut seen = Vec::new();
    let mut query = ListQuery::new().limit(3);
    let mut pages = 0;
    loop {
        let page = o1.list(query.clone()).await.unwrap();
        pages += 1;
        seen.extend(page.items.iter().map(|i| i.key.clone()));
        match page.next_cursor {
            Some(cursor) => query = ListQuery::new().limit(3).cursor(cursor),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(
        seen,
        ["a/b", "a/b/c", "a/x", "p%q/1", "p_q/2", "pq/4", "pxq/3"]
    );
    // A prefix is a range of keys: its end is found for the highest code points too, and
    // cursors carry any key (quotes, line breaks) back.
    for key in [
        "z\u{10FFFF}",
        "z\u{10FFFF}\"\n1",
        "z\u{10FFFF}\u{10FFFF}",
        "{",
        "z\u{D7FF}",
        "z\u{E000}",
    ] {
        o1.acquire(key, ttl(60 * SEC))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let keys = |q: ListQuery| {
        let o1 = o1.clone();
        async move {
            let mut keys = Vec::new();
            let mut q = q;
            loop {
                let page = o1.list(q.clone()).await.unwrap();
                keys.extend(page.items.into_iter().map(|i| i.key));
                match page.next_cursor {
                    Some(c) => q = q.cursor(c),
                    None => return keys,
                }
            }
        }
    };
    assert_eq!(
        keys(ListQuery::new().prefix("z\u{10FFFF}").limit(1)).await,
        ["z\u{10FFFF}", "z\u{10FFFF}\"\n1", "z\u{10FFFF}\u{10FFFF}"]
    );
    assert_eq!(
        keys(ListQuery::new().prefix("z\u{D7FF}")).await,
        ["z\u{D7FF}"]
    );
    assert_eq!(keys(ListQuery::new().prefix("z").limit(2)).await.len(), 5);
    let bad = o1
        .list(ListQuery::new().cursor("nonsense"))
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidArgument);
    let bad = o1.list(ListQuery::new().limit(0)).await.unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidArgument);
}

/// L7, metadata filters at any depth: a key matches when its metadata contains the filter as
/// PostgreSQL's jsonb `@>` defines it. Objects match when each of the filter's fields is
/// contained in the key's field of that name, recursively; an array contains another when each
/// of the other's elements is contained in one of its own (order and repeats do not matter);
/// scalars match by equal value (numbers by value: `1` and `1.0` are equal; `"1"` is a string);
/// an array never matches a scalar, nor a scalar an array; `null` matches only `null`, not a
/// missing field; the empty filter matches every key.
pub async fn l7_list_filters_nested_metadata(h: &Harness) {
    let o1 = h.client("o1").await;
    let keys = [
        ("nested", json!({"a": {"b": 1, "c": 2}})),
        ("deep", json!({"a": {"b": {"c": {"d": true, "e": null}}}})),
        ("null", json!({"a": null})),
        ("tags", json!({"tags": ["x", "y"]})),
        ("tag", json!({"tags": "y"})),
        ("one-tag", json!({"tags": ["x"]})),
        ("items", json!({"items": [{"id": 1, "n": "a"}, {"id": 2}]})),
        ("int", json!({"n": 1})),
        ("float", json!({"n": 1.0})),
        ("string", json!({"n": "1"})),
        ("empty", json!({})),
    ];
    for (key, m) in &keys {
        o1.acquire(key, ttl(60 * SEC).metadata(meta(m.clone())))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let all: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
    // (filter, the keys it matches). Each row was checked against PostgreSQL's `@>`.
    let cases: Vec<(serde_json::Value, Vec<&str>)> = vec![
        (json!({}), all.clone()),
        // Objects, recursively: a filter field is contained, not equal.
        (json!({"a": {"b": 1}}), vec!["nested"]),
        (json!({"a": {"b": 1, "c": 2}}), vec!["nested"]),
        (json!({"a": {"b": 2}}), vec![]),
        (json!({"a": {"b": 1, "c": 3}}), vec![]),
        (json!({"a": {}}), vec!["nested", "deep"]),
        (json!({"a": {"b": {"c": {"d": true}}}}), vec!["deep"]),
        // Arrays: each filter element is in the array, in any order, repeats allowed.
        (json!({"tags": ["y"]}), vec!["tags"]),
        (json!({"tags": ["x"]}), vec!["tags", "one-tag"]),
        (json!({"tags": ["y", "x", "y"]}), vec!["tags"]),
        (json!({"tags": ["x", "z"]}), vec![]),
        (json!({"tags": []}), vec!["tags", "one-tag"]),
        (json!({"tags": [["x"]]}), vec![]),
        // A scalar is not an array's element, nor an array a scalar.
        (json!({"tags": "y"}), vec!["tag"]),
        (json!({"tags": "x"}), vec![]),
        // Arrays of objects: an element is contained in one of the array's elements.
        (json!({"items": [{"id": 1}]}), vec!["items"]),
        (json!({"items": [{"id": 2}, {"n": "a"}]}), vec!["items"]),
        (json!({"items": [{"id": 3}]}), vec![]),
        (json!({"items": {"id": 1}}), vec![]),
        // Numbers by value, never as strings.
        (json!({"n": 1}), vec!["int", "float"]),
        (json!({"n": 1.0}), vec!["int", "float"]),
        (json!({"n": "1"}), vec!["string"]),
        // null is a value: a missing field does not match it.
        (json!({"a": null}), vec!["null"]),
    ];
    let mut wrong = Vec::new();
    for (filter, expected) in &cases {
        let page = o1
            .list(ListQuery::new().metadata(meta(filter.clone())))
            .await
            .unwrap();
        let mut got: Vec<&str> = page.items.iter().map(|i| i.key.as_str()).collect();
        got.sort_unstable();
        let mut expected = expected.clone();
        expected.sort_unstable();
        if got != expected {
            wrong.push(format!("{filter}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} metadata filters matched the wrong keys:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

pub async fn l8_waiting_is_woken(h: &Harness) {
    let o1 = h.client("o1").await;
    let o2 = h.client("o2").await;

    // Woken by the release: o1's lease would last a minute otherwise.
    let held = o1.acquire("a", ttl(60 * SEC)).await.unwrap();
    let held_fence = held.fence();
    let waiter = {
        let o2 = o2.clone();
        tokio::spawn(async move {
            let lease = o2
                .acquire("a", ttl(60 * SEC).timeout(20 * SEC))
                .await
                .unwrap();
            (Instant::now(), lease)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    held.release().await.unwrap();
    // Granted within the wait's 20 s timeout: only the release's wake-up does that (the
    // holder's ttl is 60 s, and a waiter re-checks unprompted only every 30 s). How soon is a
    // benchmark's business.
    let (acquired_at, lease) = waiter.await.unwrap();
    assert!(
        acquired_at >= released_at,
        "granted before the holder released"
    );
    assert!(lease.fence() > held_fence);
    lease.release().await.unwrap();

    // A timeout leaves nothing held.
    let _held = o1.acquire("c", ttl(60 * SEC)).await.unwrap();
    let started = Instant::now();
    let err = o2
        .acquire("c", ttl(SEC).timeout(Duration::from_millis(200)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(started.elapsed() < 5 * SEC);
    // The time waited reads without float noise: "200.4ms", never "200.412345ms".
    let waited = err
        .message()
        .strip_prefix("timed out after ")
        .and_then(|rest| rest.split_once(" waiting to acquire \"c\""))
        .map(|(waited, _)| waited)
        .unwrap_or_else(|| panic!("{err}"));
    assert!(waited.ends_with('s'), "{err}");
    let digits = waited.chars().filter(char::is_ascii_digit).count();
    assert!(digits <= 4, "{err}: more than four significant digits");
    assert_eq!(o2.held_count(), 0);
    let c = o1.list(ListQuery::new().prefix("c")).await.unwrap();
    assert_eq!(c.items[0].owner.as_deref(), Some("o1"));
}

/// L8, second part: woken at the holder's expiry (its network is cut, so it cannot renew).
pub async fn l8_woken_at_expiry(h: &Harness) {
    let o2 = h.client("o2").await;
    let (proxy, url) = h.proxy().await;
    let o1p = accord::Client::connect(&url, h.options("o1"))
        .await
        .unwrap();
    let stuck = o1p.acquire("b", ttl(SEC)).await.unwrap();
    proxy.set(Mode::Cut);
    // Granted within the wait's 20 s timeout: only waking at the holder's expiry (1 s away)
    // does that. No release can come (o1's network is cut), and a waiter re-checks unprompted
    // only every 30 s. How soon after the expiry is a benchmark's business.
    let next = o2
        .acquire("b", ttl(60 * SEC).timeout(20 * SEC))
        .await
        .unwrap();
    let granted_at = next.expires_at() - chrono::Duration::seconds(60);
    assert!(
        granted_at >= stuck.expires_at(),
        "granted at {granted_at}, before the holder's expiry {}",
        stuck.expires_at()
    );
    assert!(next.fence() > stuck.fence());
}

/// Whether the coordinator records `owner` as holding `key` right now.
pub(crate) async fn holds(h: &Harness, owner: &str, key: &str) -> bool {
    let client = h.client("inspector").await;
    let page = client.list(ListQuery::new().prefix(key)).await.unwrap();
    page.items
        .iter()
        .any(|i| i.key == key && i.state == KeyState::Held && i.owner.as_deref() == Some(owner))
}

pub async fn l9_cancellation_leaves_nothing_held(h: &Harness) {
    let o1 = h.client("o1").await;
    let o2 = h.client("o2").await;
    // Cancel at many points, including while the release that would grant it is in flight.
    for round in 0..24u64 {
        let key = format!("k{round}");
        let held = o1.acquire(&key, ttl(60 * SEC)).await.unwrap();
        let cancel = CancellationToken::new();
        let waiter = {
            let (o2, key, cancel) = (o2.clone(), key.clone(), cancel.clone());
            tokio::spawn(async move {
                o2.acquire(&key, ttl(60 * SEC).timeout(20 * SEC).cancel(cancel))
                    .await
            })
        };
        let delay = Duration::from_micros(round * 700);
        tokio::time::sleep(delay).await;
        let release = held.release();
        let (_, ()) = tokio::join!(release, async {
            tokio::time::sleep(Duration::from_micros((round % 4) * 300)).await;
            cancel.cancel();
        });
        match waiter.await.unwrap() {
            Ok(lease) => {
                // Granted before the cancel was seen: a proper lease.
                assert!(holds(h, "o2", &key).await);
                lease.release().await.unwrap();
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
                assert!(
                    !holds(h, "o2", &key).await,
                    "round {round}: a cancelled acquire left {key} held"
                );
            }
        }
    }
    // Dropping the future is cancellation too; the clean-up then finishes in the background.
    for round in 0..30u64 {
        let key = format!("d{round}");
        let held = o1.acquire(&key, ttl(60 * SEC)).await.unwrap();
        let attempt = o2.acquire(&key, ttl(60 * SEC));
        let releaser = async {
            tokio::time::sleep(Duration::from_micros((round % 10) * 400)).await;
            held.release().await.unwrap();
            tokio::time::sleep(Duration::from_micros((round / 10) * 300)).await;
        };
        tokio::select! {
            lease = attempt => drop(lease.unwrap()),
            _ = releaser => {}
        }
        assert!(
            eventually(5 * SEC, || async { !holds(h, "o2", &key).await }).await,
            "round {round}: a dropped acquire left {key} held"
        );
    }
    assert_eq!(o2.held_count(), 0);
}

pub async fn l10_keepalive_is_batched(h: &Harness) {
    // A schema of its own, so that the statement statistics count this client only.
    let schema = format!("accord_{}", h.tag);
    let owner = "o1";
    // A ttl long enough that no scheduling delay of a loaded machine loses a lease (one is
    // renewed every 2 s); the test waits for renewals, not for a span of time.
    let client = h
        .client_with(owner, h.options(owner).schema(schema.clone()).ttl(6 * SEC))
        .await;
    let stats = h.is_postgres()
        && h.admin()
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await
            .is_ok();
    // The cluster the tests start always loads it: there, the server-side count is required.
    assert!(
        stats || !h.is_postgres() || std::env::var("ACCORD_TEST_PGDATA").is_err(),
        "pg_stat_statements is missing from the test cluster"
    );
    let keys: Vec<String> = (0..1000).map(|i| format!("lease/{i:04}")).collect();
    let mut leases = Vec::new();
    for chunk in keys.chunks(100) {
        let acquired = futures_util::future::join_all(
            chunk
                .iter()
                .map(|k| client.try_acquire(k, AcquireOptions::new())),
        )
        .await;
        leases.extend(acquired.into_iter().map(|r| r.unwrap().expect("free key")));
    }
    let before = client.keepalive_statements();
    // Every lease renewed twice: each confirmed expiry moves past the one seen before. The
    // bound only catches a hang (two renewals take about 4 s).
    for round in 0..2 {
        let seen: Vec<_> = leases.iter().map(|l| l.expires_at()).collect();
        assert!(
            eventually(60 * SEC, || async {
                leases.iter().zip(&seen).all(|(l, s)| l.expires_at() > *s)
            })
            .await,
            "round {round}: not every lease was renewed within 60 s"
        );
    }
    let ticks = client.keepalive_statements() - before;
    assert!(leases.iter().all(|l| !l.is_lost()), "a lease was lost");
    let held = client
        .list(ListQuery::new().state(KeyState::Held).limit(1000))
        .await
        .unwrap();
    assert_eq!(held.items.len(), 1000);
    // 2,000 renewals in a handful of statements: leases acquired in ten chunks fall into step
    // after their first renewal, so even ten phases need at most 20. Renewed one by one, they
    // would take 2,000.
    assert!(
        (2..=20).contains(&ticks),
        "{ticks} keepalive statements renewed 1000 leases twice"
    );
    if stats {
        let row = h
            .admin()
            .query_one(
                "SELECT COALESCE(sum(calls), 0)::bigint
                   FROM pg_stat_statements
                  WHERE query LIKE '%AS b(key, fence, ttl_ms)%' AND query LIKE $1",
                &[&format!("%\"{schema}\".leases%")],
            )
            .await
            .unwrap();
        let calls: i64 = row.get(0);
        // Read after the server's count: every statement it counted was sent by then.
        let sent = client.keepalive_statements() - before;
        assert!(
            // The renew statements only (acquires are batched too, and also read unnest). The
            // last one may still be in flight when the client's count is read.
            calls as u64 + 1 >= ticks && calls as u64 <= sent,
            "the database saw {calls} renew statements (client sent {ticks})"
        );
        eprintln!(
            "L10: 1000 leases renewed twice: {ticks} keepalive statements sent, {calls} seen by the database"
        );
    }
    // Every lease renewed at least twice, in those few statements.
    let renewals = client.keepalive_renewals();
    assert!(renewals >= 2000, "{renewals} renewals confirmed");
    client.close().await;
}

pub async fn l11_connection_terminated(h: &Harness) {
    let owner = "o1";
    let o1 = h.terminable_client(owner).await;
    let o2 = h.client("o2").await;
    // A ttl no scheduling delay of a loaded machine outlasts (renewed every 3 s): the test
    // waits for renewals after each cut, not for a span of time.
    let leases: Vec<_> =
        futures_util::future::join_all(["a", "b", "c"].map(|k| o1.acquire(k, ttl(9 * SEC))))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    // Make sure the listening connection exists too.
    let _sub = o1.listen([h.channel("l11")]).await.unwrap();
    // PostgreSQL: two command connections and the listening one; etcd: one connection to the
    // member in use carries calls, keep-alives and the watch.
    let own = h.listens_on_its_own_connection();
    for round in 0..3 {
        // The first time: every connection. Command connections come back on demand, so later
        // rounds may find fewer.
        let seen: Vec<_> = leases.iter().map(|l| l.expires_at()).collect();
        let killed = h.terminate_connections(owner).await;
        assert!(
            killed >= if round == 0 && own { 3 } else { 1 },
            "terminated {killed} connections"
        );
        // Each lease renewed after the cut, so over a new connection; the bound catches a hang.
        assert!(
            eventually(30 * SEC, || async {
                leases.iter().zip(&seen).all(|(l, s)| l.expires_at() > *s)
            })
            .await,
            "round {round}: a lease was not renewed after its connections were cut"
        );
    }
    for lease in &leases {
        assert!(!lease.is_lost(), "{} was lost", lease.key());
        assert!(o2
            .try_acquire(lease.key(), ttl(SEC))
            .await
            .unwrap()
            .is_none());
    }
    // The command connection that renewed, and the listening one once it is back.
    let back = if own { 2 } else { 1 };
    assert!(
        eventually(30 * SEC, || async {
            h.connection_count(owner).await >= back
        })
        .await,
        "o1 did not reconnect"
    );

    // Out of reach for longer than the ttl: lost fires, and before anyone else holds the key.
    let (proxy, url) = h.proxy().await;
    let o3 = accord::Client::connect(&url, h.options("o3"))
        .await
        .unwrap();
    let lease = o3.acquire("d", ttl(SEC)).await.unwrap();
    let signal = lease.lost_signal();
    proxy.set(Mode::Cut);
    // The keepalive fires the signal by itself (nothing here calls `is_lost`, which would fire
    // it too); 5 s only bounds a hang.
    tokio::time::timeout(5 * SEC, signal.wait())
        .await
        .expect("the lost signal fires");
    let taken = o2
        .acquire("d", ttl(60 * SEC).timeout(10 * SEC))
        .await
        .unwrap();
    // And whenever a takeover returns, the lease reads as lost: `is_lost` compares with the
    // deadline itself, so no task's scheduling can make it late.
    assert!(lease.is_lost(), "the key was taken over before lost fired");
    assert!(taken.fence() > lease.fence());
}

/// G4 with a hung network: the renew statement never answers, yet lost fires in time.
pub async fn l11_stalled_connection(h: &Harness) {
    let (proxy, url) = h.proxy().await;
    let o1 = accord::Client::connect(&url, h.options("o1"))
        .await
        .unwrap();
    let o2 = h.client("o2").await;
    let lease = o1.acquire("a", ttl(SEC)).await.unwrap();
    let signal = lease.lost_signal();
    proxy.set(Mode::Stall);
    // The keepalive fires the signal though the renew statement never answers, and by itself
    // (nothing here calls `is_lost`, which would fire it too). 5 s is a hang bound; it is also
    // below the 10 s statement timeout, so a signal that waited for the hung renewal to fail
    // would miss it.
    tokio::time::timeout(5 * SEC, signal.wait())
        .await
        .expect("lost fires while the renewal hangs");
    // The coordinator's expiry hands the key to o2; the lease reads as lost.
    let taken = o2
        .acquire("a", ttl(60 * SEC).timeout(10 * SEC))
        .await
        .unwrap();
    assert!(
        lease.is_lost(),
        "another client holds the key, yet the stalled holder's lease is not lost"
    );
    assert!(taken.fence() > lease.fence());
    proxy.set(Mode::Pass);
}
