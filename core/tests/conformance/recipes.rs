//! The keys recipes keep their state in (docs/semantics.md, "Keys reserved for recipes") on
//! every store: plain calls refuse the names of groups, fleets and elections, and semaphores
//! survive plain calls on their permits.

use std::time::Duration;

use accord::{
    AcquireOptions, CampaignOptions, ClaimOptions, ErrorKind, FleetOptions, JoinOptions, KeyState,
    ListQuery,
};

use crate::support::Harness;

const SEC: Duration = Duration::from_secs(1);

fn refused<T: std::fmt::Debug>(r: accord::Result<T>, field: &str, recipe: &str, call: &str) {
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let message = e.message();
    assert!(
        message.contains(&format!("invalid {field}")),
        "{e} names {field}"
    );
    assert!(
        message.contains(&format!("reserved for {recipe}; use {call}")),
        "{e} names the recipe"
    );
}

/// R1: acquire, try_acquire, reset, offer, claim and done refuse the keys of groups, fleets and
/// elections (naming the field and the recipe), and the recipes keep working; `list` and
/// `counts` still read them.
pub async fn r1_recipe_keys_are_refused_to_plain_calls(h: &Harness) {
    let c = h.client("o1").await;
    let member = c.join("g", JoinOptions::new().ttl(60 * SEC)).await.unwrap();
    let leadership = c
        .election("e")
        .unwrap()
        .campaign("v", CampaignOptions::new().ttl(60 * SEC))
        .await
        .unwrap();
    let fleet = c
        .fleet("f", FleetOptions::shards(2).ttl(60 * SEC))
        .await
        .unwrap();
    let cases = [
        (
            member.lease().key().to_string(),
            "groups",
            "client.join(...)",
        ),
        (
            "accord.group/other/o9".to_string(),
            "groups",
            "client.join(...)",
        ),
        (
            "accord.fleet/f/s/0".to_string(),
            "fleets",
            "client.fleet(...)",
        ),
        (
            "accord.election/e".to_string(),
            "elections",
            "client.election(...)",
        ),
    ];
    for (key, recipe, call) in &cases {
        let key = key.as_str();
        refused(
            c.acquire(key, AcquireOptions::new().timeout(SEC)).await,
            "key",
            recipe,
            call,
        );
        refused(
            c.try_acquire(key, AcquireOptions::new()).await,
            "key",
            recipe,
            call,
        );
        refused(c.reset(key).await, "key", recipe, call);
        refused(c.offer("accord.", [key], None).await, "key", recipe, call);
        let pool = &key[..=key.rfind('/').unwrap()];
        refused(c.offer(pool, [key], None).await, "prefix", recipe, call);
        refused(
            c.claim(pool, ClaimOptions::new()).await,
            "prefix",
            recipe,
            call,
        );
    }
    // A recipe's own lease cannot be marked done either; it stays held.
    refused(
        member.lease().done(None).await,
        "key",
        "groups",
        "client.join(...)",
    );
    refused(
        leadership.lease().done(None).await,
        "key",
        "elections",
        "client.election(...)",
    );
    assert!(!member.is_lost());
    assert_eq!(c.members("g").await.unwrap().len(), 1);
    let leader = c.election("e").unwrap().leader().await.unwrap().unwrap();
    assert_eq!(leader.fence, leadership.fence());
    // Reading stays allowed.
    let page = c
        .list(ListQuery::new().prefix("accord.group/g/"))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].state, KeyState::Held);
    c.counts("accord.fleet/f/s/").await.unwrap();
    fleet.close().await;
    member.leave().await.unwrap();
    c.close().await;
}

/// R2: a semaphore survives plain calls on its permits: a permit marked done or reset by a
/// plain call is back in the semaphore at the next acquire that finds no free permit, and the
/// semaphore never admits more than its limit.
pub async fn r2_semaphores_survive_plain_calls(h: &Harness) {
    let c = h.client("o1").await;
    let s = c.semaphore("s", 2).await.unwrap();
    let take = || async {
        s.try_acquire(AcquireOptions::new().ttl(60 * SEC))
            .await
            .unwrap()
    };
    let retired = take().await.expect("a free permit");
    let retired_key = retired.key().to_string();
    retired.done(None).await.unwrap();
    let first = take().await.expect("a free permit");
    let second = take().await.expect("the permit marked done is back");
    assert_eq!(second.key(), retired_key);
    assert!(take().await.is_none(), "two permits, both held");

    // A free permit reset by a plain call comes back too.
    let reset_key = second.key().to_string();
    second.release().await.unwrap();
    assert!(c.reset(&reset_key).await.unwrap());
    let again = s
        .acquire(AcquireOptions::new().ttl(60 * SEC).timeout(5 * SEC))
        .await
        .expect("the permit reset is back");
    assert_eq!(again.key(), reset_key);
    let held = c
        .list(ListQuery::new().prefix("s#").state(KeyState::Held))
        .await
        .unwrap();
    assert_eq!(held.items.len(), 2);
    assert!(take().await.is_none(), "never more than the limit");
    drop((first, again));
    c.close().await;
}

/// R3: a process that joined a group and went away (its client closed without leaving) leaves
/// no row behind for long: each join deletes the group's rows nobody holds. After 100 members
/// came and went, the group's rows are its live member and at most the last one gone.
pub async fn r3_departed_members_leave_no_rows(h: &Harness) {
    let stable = h.client("stable").await;
    let _member = stable
        .join("g", JoinOptions::new().ttl(60 * SEC))
        .await
        .unwrap();
    for i in 0..100 {
        // A new owner each time, as pods of a deployment get new names.
        let pod = h.client(&format!("pod-{i}")).await;
        let member = pod
            .join("g", JoinOptions::new().ttl(60 * SEC))
            .await
            .unwrap();
        pod.close().await;
        drop(member);
    }
    let rows = stable
        .list(ListQuery::new().prefix("accord.group/g/").limit(1000))
        .await
        .unwrap();
    let held = rows
        .items
        .iter()
        .filter(|i| i.state == KeyState::Held)
        .count();
    assert_eq!(held, 1, "{:?}", rows.items);
    assert!(
        rows.items.len() <= 2,
        "{} rows for one member: {:?}",
        rows.items.len(),
        rows.items.iter().map(|i| &i.key).collect::<Vec<_>>()
    );
    assert_eq!(stable.members("g").await.unwrap().len(), 1);
    stable.close().await;
}
