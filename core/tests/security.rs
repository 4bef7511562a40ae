//! What a role with no grant on accord's schema can do through notifications: any role that can
//! connect may LISTEN and NOTIFY on any channel. A notification may only ever mean "read again":
//! a forged one decides nothing (no hand-off, grant, member event, leader change or stream
//! event), and none that accord sends carries a name the role could not read from the tables.

mod support;

use std::sync::Arc;
use std::time::Duration;

use accord::{
    AcquireOptions, CampaignOptions, ClaimOptions, Client, Fleet, FleetEvent, FleetOptions,
    JoinOptions, KeyState, ListQuery, MemberEvent, StreamStart, SubscribeOptions,
};
use futures_util::StreamExt;
use support::{eventually, Harness};
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

/// How long a forged notification is given to do harm (it would take milliseconds).
const QUIET: Duration = Duration::from_secs(2);
const SETTLE: Duration = Duration::from_secs(30);

/// A connection of a role with LOGIN and no grant at all on accord's schema, and what it hears.
struct Outsider {
    client: tokio_postgres::Client,
    heard: mpsc::UnboundedReceiver<(String, String)>,
}

impl Outsider {
    async fn connect(h: &Harness) -> Outsider {
        let role = format!("outsider_{}", h.tag);
        h.admin()
            .batch_execute(&format!("CREATE ROLE \"{role}\" LOGIN PASSWORD 'outsider'"))
            .await
            .unwrap();
        let config: tokio_postgres::Config = h.url.parse().unwrap();
        let tokio_postgres::config::Host::Tcp(host) = &config.get_hosts()[0] else {
            panic!("TCP URL expected")
        };
        let url = format!(
            "postgres://{role}:outsider@{host}:{}/{}",
            config.get_ports()[0],
            config.get_dbname().unwrap_or("postgres")
        );
        let (client, mut connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let (tell, heard) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(n) = message {
                    let _ = tell.send((n.channel().to_string(), n.payload().to_string()));
                }
            }
        });
        // It really has no grant: it cannot read accord's tables.
        assert!(client
            .query("SELECT * FROM accord.leases", &[])
            .await
            .is_err());
        Outsider { client, heard }
    }

    async fn notify(&self, channel: &str, payload: &str) {
        self.client
            .query("SELECT pg_notify($1, $2)", &[&channel, &payload])
            .await
            .unwrap();
    }

    async fn listen(&self, channel: &str) {
        self.client
            .batch_execute(&format!("LISTEN \"{channel}\""))
            .await
            .unwrap();
    }

    /// Everything heard until a marker of its own comes back: notifications reach a listener
    /// in commit order, so everything committed before the marker was heard.
    async fn drain(&mut self) -> Vec<(String, String)> {
        let marker = format!("outsider_marker_{:08x}", rand::random::<u32>());
        self.listen(&marker).await;
        self.notify(&marker, "end").await;
        let mut heard = Vec::new();
        loop {
            let (channel, payload) = tokio::time::timeout(SETTLE, self.heard.recv())
                .await
                .expect("the marker comes back")
                .expect("the outsider's connection is up");
            if channel == marker {
                return heard;
            }
            heard.push((channel, payload));
        }
    }
}

// A channel as accord computes it: a role that knows or guesses the names can compute it too.
use accord::__channel_for as channel_for;

fn fleet_base(name: &str) -> String {
    format!("accord.fleet/{name}/")
}

fn handoff_channel(namespace: &str, fleet: &str, owner: &str) -> String {
    channel_for("accord_fleet", namespace, &[&fleet_base(fleet), owner])
}

fn group_channel(namespace: &str, group: &str) -> String {
    channel_for(
        "accord_group",
        namespace,
        &[&format!("accord.group/{group}/")],
    )
}

fn election_channel(namespace: &str, election: &str) -> String {
    channel_for(
        "accord_election",
        namespace,
        &[&format!("accord.election/{election}")],
    )
}

fn stream_channel(namespace: &str, stream: &str) -> String {
    channel_for("accord_stream", namespace, &[stream])
}

/// Reads a fleet's events in the background (acknowledging hand-offs as a user would).
fn drive(fleet: Arc<Fleet>) -> mpsc::UnboundedReceiver<FleetEvent> {
    let (tell, events) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = fleet.next_event().await {
            if tell.send(event).is_err() {
                break;
            }
        }
    });
    events
}

fn fleet_options(shards: &[String]) -> FleetOptions {
    FleetOptions::keys(shards.to_vec())
        .ttl(Duration::from_secs(10))
        .period(Duration::from_millis(200))
}

/// The shards' rows: (key, owner, fence), in key order.
async fn shard_rows(client: &Client, fleet: &str) -> Vec<(String, Option<String>, i64)> {
    let page = client
        .list(
            ListQuery::new()
                .prefix(format!("{}s/", fleet_base(fleet)))
                .state(KeyState::Held),
        )
        .await
        .unwrap();
    page.items
        .into_iter()
        .map(|i| (i.key, i.owner, i.fence))
        .collect()
}

/// (a) Forged notifications on every channel accord listens on decide nothing: no shard is
/// revoked or moves and the fleet stays fully owned, no waiter is granted, no member event,
/// no leader change, no stream event that is not in the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_notifications_decide_nothing() {
    let h = Harness::postgres("forged").await;
    let ns = h.tag.clone();
    let outsider = Outsider::connect(&h).await;
    let a = h.client("a").await;
    let b = h.client("b").await;

    // A fleet of two members, two shards each.
    let fleet = "forgedfleet";
    let shards: Vec<String> = (0..4).map(|i| i.to_string()).collect();
    let fa = Arc::new(a.fleet(fleet, fleet_options(&shards)).await.unwrap());
    let fb = Arc::new(b.fleet(fleet, fleet_options(&shards)).await.unwrap());
    let mut events_a = drive(fa.clone());
    let mut events_b = drive(fb.clone());
    assert!(
        eventually(SETTLE, || async {
            fa.shards().len() == 2
                && fb.shards().len() == 2
                && shard_rows(&a, fleet).await.len() == 4
        })
        .await,
        "the fleet settles at two shards each"
    );
    while events_a.try_recv().is_ok() {}
    while events_b.try_recv().is_ok() {}
    let rows = shard_rows(&a, fleet).await;

    // A waiter on a held key.
    let holder = a
        .try_acquire("held", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    let waiter = Arc::new(h.client("waiter").await);
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .acquire("held", AcquireOptions::new().timeout(SETTLE))
                .await
                .map(|l| l.fence())
        })
    };
    assert!(
        eventually(SETTLE, || async {
            a.snapshot(ListQuery::new().prefix("held"))
                .await
                .unwrap()
                .counts
                .waiting
                == 1
        })
        .await
    );

    // A group watched, an election observed, a stream subscribed, each caught up.
    let mut watch = a.watch("forgedgroup").await.unwrap();
    let _member = b.join("forgedgroup", JoinOptions::new()).await.unwrap();
    loop {
        match watch.next().await.unwrap() {
            MemberEvent::Joined(m) if m.owner == "b" => break,
            MemberEvent::Members(m) if m.iter().any(|m| m.owner == "b") => break,
            _ => {}
        }
    }
    let leadership = a
        .election("forgedelection")
        .unwrap()
        .campaign("v1", CampaignOptions::new())
        .await
        .unwrap();
    let mut observer = b
        .election("forgedelection")
        .unwrap()
        .observe()
        .await
        .unwrap();
    let current = observer.next().await.unwrap();
    assert_eq!(current.map(|l| l.value).as_deref(), Some("v1"));
    a.publish("forgedstream", "one").await.unwrap();
    let subscription = b
        .subscribe(
            "forgedstream",
            SubscribeOptions::new().start(StreamStart::Earliest),
        )
        .await
        .unwrap();
    assert_eq!(subscription.next().await.unwrap().unwrap().payload, "one");

    let wakeups = waiter.waiter_wakeups();

    // The forgeries: hand-off requests in today's and any shape, wake-ups naming the held key
    // and every ticket, members and leaders announced, stream positions ahead of the table.
    for (owner, fleet_handle) in [("a", &fa), ("b", &fb)] {
        let channel = handoff_channel(&ns, fleet, owner);
        for shard in fleet_handle.shards() {
            for has in [0, 0, 0] {
                let payload = serde_json::json!({ "shard": shard, "has": has }).to_string();
                outsider.notify(&channel, &payload).await;
            }
        }
        outsider.notify(&channel, "").await;
        outsider.notify(&channel, "garbage").await;
    }
    let wakeup = accord::wakeup_channel("accord").unwrap();
    for payload in [
        serde_json::json!([ns, "held"]),
        serde_json::json!([ns, "held", 0, null]),
        serde_json::json!([null, 0, null, null]),
        serde_json::json!(["0123456789abcdef0123456789abcdef", 0, null, null]),
    ] {
        outsider.notify(&wakeup, &payload.to_string()).await;
    }
    outsider
        .notify(&group_channel(&ns, "forgedgroup"), r#"{"left":"b"}"#)
        .await;
    outsider
        .notify(&group_channel(&ns, "forgedgroup"), "")
        .await;
    let fleet_members = channel_for("accord_group", &ns, &[&format!("{}m/", fleet_base(fleet))]);
    outsider.notify(&fleet_members, r#"{"left":"a"}"#).await;
    outsider
        .notify(
            &election_channel(&ns, "forgedelection"),
            r#"{"leader":"x"}"#,
        )
        .await;
    let stream = stream_channel(&ns, "forgedstream");
    outsider
        .notify(
            &stream,
            &serde_json::json!([ns, "forgedstream", 9]).to_string(),
        )
        .await;
    outsider.notify(&stream, "").await;

    // Nothing happens: no fleet event, no member event, no leader, no stream event.
    let quiet = tokio::time::timeout(QUIET, async {
        tokio::select! {
            e = events_a.recv() => format!("fleet a: {e:?}"),
            e = events_b.recv() => format!("fleet b: {e:?}"),
            e = watch.next() => format!("group: {e:?}"),
            e = observer.next() => format!("election: {e:?}"),
            e = subscription.next() => format!("stream: {e:?}"),
        }
    })
    .await;
    if let Ok(what) = quiet {
        panic!("a forged notification decided something: {what}");
    }
    assert_eq!(
        shard_rows(&a, fleet).await,
        rows,
        "no shard moved, every shard still owned"
    );
    assert_eq!(fa.shards().len() + fb.shards().len(), 4);
    assert!(!waiting.is_finished(), "the waiter was not granted");
    assert_eq!(
        waiter.waiter_wakeups(),
        wakeups,
        "a forged wake-up wakes nobody (it names no tag the waiter has)"
    );
    assert!(!holder.is_lost());
    assert_eq!(a.stream_info("forgedstream").await.unwrap().last_seq, 1);

    // And the real thing still works: the release grants the waiter.
    holder.release().await.unwrap();
    assert!(waiting.await.unwrap().is_ok());
    leadership.resign().await.unwrap();
    fa.close().await;
    fb.close().await;
}

/// (b) A role with no grant that LISTENs on every channel accord uses, while another
/// namespace's clients release keys with waiters, finish keys, offer and claim, join and leave
/// groups, hand off shards, campaign and publish, hears no name: no namespace, key, pool,
/// group, fleet, shard, election or stream name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_carry_no_names() {
    let h = Harness::postgres("names").await;
    let ns = h.tag.clone();
    let mut outsider = Outsider::connect(&h).await;
    let fleet = "zebrafleet";
    let shards: Vec<String> = (0..4).map(|i| format!("zebrashard{i}")).collect();
    let wakeup = accord::wakeup_channel("accord").unwrap();
    for channel in [
        wakeup.clone(),
        handoff_channel(&ns, fleet, "a"),
        handoff_channel(&ns, fleet, "b"),
        group_channel(&ns, "zebragroup"),
        channel_for("accord_group", &ns, &[&format!("{}m/", fleet_base(fleet))]),
        election_channel(&ns, "zebraelection"),
        stream_channel(&ns, "zebrastream"),
    ] {
        outsider.listen(&channel).await;
    }
    let a = h.client("a").await;
    let b = h.client("b").await;

    // A release with a waiter, a done with a waiter, a shared release.
    let lease = a
        .try_acquire("zebrakey", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    let waiter = {
        let b = h.client("w").await;
        tokio::spawn(async move {
            let lease = b
                .acquire("zebrakey", AcquireOptions::new().timeout(SETTLE))
                .await
                .unwrap();
            lease.done(None).await.unwrap();
            b.close().await;
        })
    };
    assert!(
        eventually(SETTLE, || async {
            a.snapshot(ListQuery::new().prefix("zebrakey"))
                .await
                .unwrap()
                .counts
                .waiting
                == 1
        })
        .await
    );
    lease.release().await.unwrap();
    waiter.await.unwrap();

    // A pool: a claimer waiting, an offer, a release of a claimed key.
    let claimer = {
        let b = h.client("c").await;
        tokio::spawn(async move {
            let got = b
                .claim("zebrapool/", ClaimOptions::new().timeout(SETTLE))
                .await
                .unwrap();
            for lease in got {
                lease.release().await.unwrap();
            }
            b.close().await;
        })
    };
    a.offer("zebrapool/", ["zebrapool/zebrajob"], None)
        .await
        .unwrap();
    claimer.await.unwrap();

    // A group joined and left.
    let member = b.join("zebragroup", JoinOptions::new()).await.unwrap();
    member.leave().await.unwrap();

    // An election won and resigned.
    let leadership = a
        .election("zebraelection")
        .unwrap()
        .campaign("zebravalue", CampaignOptions::new())
        .await
        .unwrap();
    leadership.resign().await.unwrap();

    // A stream published to.
    a.publish("zebrastream", "zebrapayload").await.unwrap();

    // A fleet: one member takes every shard, a second joins and gets half by hand-offs.
    let fa = Arc::new(a.fleet(fleet, fleet_options(&shards)).await.unwrap());
    let _events_a = drive(fa.clone());
    assert!(eventually(SETTLE, || async { fa.shards().len() == 4 }).await);
    let fb = Arc::new(b.fleet(fleet, fleet_options(&shards)).await.unwrap());
    let _events_b = drive(fb.clone());
    assert!(
        eventually(SETTLE, || async {
            fa.shards().len() == 2 && fb.shards().len() == 2
        })
        .await,
        "the second member gets its share by hand-offs"
    );
    fa.close().await;
    fb.close().await;

    let heard = outsider.drain().await;
    let on = |channel: &str| heard.iter().filter(|(c, _)| c == channel).count();
    assert!(on(&wakeup) > 0, "the wake-up channel was heard: {heard:?}");
    assert!(on(&stream_channel(&ns, "zebrastream")) > 0, "{heard:?}");
    assert!(on(&handoff_channel(&ns, fleet, "a")) > 0, "{heard:?}");
    for (channel, payload) in &heard {
        for name in [ns.as_str(), "zebra"] {
            assert!(
                !payload.contains(name),
                "{channel} carried {name:?}: {payload}"
            );
        }
    }
}

/// The clients that connect at once to a fresh schema race to make its wake-up secret: they all
/// end up with the one that was stored, so a release by any of them wakes a waiter of any other.
/// Each waiter's timeout (20 s) is shorter than the holder's ttl (60 s) and the waiters' 30 s
/// safety slice: only a wake-up it recognised can get it the key in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_raced_for_the_secret_wake_each_other() {
    let h = Harness::postgres("secret").await;
    let schema = format!("accord_{}", h.tag);
    let connects = (0..6).map(|i| {
        Client::connect(
            &h.url,
            h.options(&format!("c{i}"))
                .schema(schema.clone())
                .ttl(Duration::from_secs(60)),
        )
    });
    let clients: Vec<Arc<Client>> = futures_util::future::join_all(connects)
        .await
        .into_iter()
        .map(|c| Arc::new(c.expect("every concurrent connect succeeds")))
        .collect();
    for i in 1..clients.len() {
        let key = format!("k{i}");
        let holder = clients[i - 1]
            .try_acquire(&key, AcquireOptions::new())
            .await
            .unwrap()
            .unwrap();
        let waiter = {
            let (client, key) = (clients[i].clone(), key.clone());
            tokio::spawn(async move {
                client
                    .acquire(&key, AcquireOptions::new().timeout(Duration::from_secs(20)))
                    .await
            })
        };
        assert!(
            eventually(SETTLE, || async { clients[i].queued_count() == 1 }).await,
            "the waiter is in line"
        );
        holder.release().await.unwrap();
        let granted = waiter.await.unwrap();
        assert!(
            granted.is_ok(),
            "c{i} was woken by c{}'s release: {granted:?}",
            i - 1
        );
    }
}
