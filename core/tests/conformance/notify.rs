//! The notify/listen scenarios N1–N6 (docs/semantics.md).

use std::time::Duration;

use accord::{AcquireOptions, ErrorKind, Event, Message, Subscription};

use crate::support::{eventually, Harness};

const SEC: Duration = Duration::from_secs(1);

async fn next_message(sub: &Subscription) -> Message {
    loop {
        match tokio::time::timeout(10 * SEC, sub.recv()).await {
            Ok(Ok(Some(Event::Message(m)))) => return m,
            Ok(Ok(Some(Event::Reconnected))) => continue,
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

/// The next event, which must be a message (no `Reconnected`).
async fn next_only_message(sub: &Subscription) -> Message {
    match tokio::time::timeout(10 * SEC, sub.recv()).await {
        Ok(Ok(Some(Event::Message(m)))) => m,
        other => panic!("expected a message and nothing else, got {other:?}"),
    }
}

fn message(channel: &str, payload: &str) -> Message {
    Message {
        channel: channel.into(),
        payload: payload.into(),
    }
}

pub async fn n1_any_source_is_heard(h: &Harness) {
    let jobs = h.channel("jobs");
    let listener = h.client("o1").await;
    let sender = h.client("o2").await;
    let sub = listener.listen([&jobs]).await.unwrap();
    sender.notify(&jobs, "p1").await.unwrap();
    assert_eq!(next_message(&sub).await, message(&jobs, "p1"));
    if !h.is_postgres() {
        return; // plain SQL and triggers are PostgreSQL's
    }
    // Plain SQL, as psql would send it.
    h.admin()
        .execute("SELECT pg_notify($1, 'p2')", &[&jobs])
        .await
        .unwrap();
    assert_eq!(next_message(&sub).await, message(&jobs, "p2"));
    // A trigger.
    let table = format!("\"n1_{}\"", h.tag);
    h.admin()
        .batch_execute(&format!(
            "CREATE TABLE {table} (v text);
             CREATE FUNCTION {table}() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN PERFORM pg_notify('{jobs}', NEW.v); RETURN NEW; END $$;
             CREATE TRIGGER announce AFTER INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {table}();
             INSERT INTO {table} VALUES ('p3');
             DROP TABLE {table}; DROP FUNCTION {table}();"
        ))
        .await
        .unwrap();
    assert_eq!(next_message(&sub).await, message(&jobs, "p3"));
}

pub async fn n2_nothing_sent_after_listen_is_missed(h: &Harness) {
    let listener = h.client("o1").await;
    let sender = h.client("o2").await;
    for round in 0..30 {
        let (a, b) = (
            h.channel(&format!("a{round}")),
            h.channel(&format!("b{round}")),
        );
        let sub = listener.listen([&a, &b]).await.unwrap();
        sender.notify(&b, "first").await.unwrap();
        sender.notify(&a, "second").await.unwrap();
        assert_eq!(next_message(&sub).await, message(&b, "first"));
        assert_eq!(next_message(&sub).await, message(&a, "second"));
        sub.close().await;
    }
}

pub async fn n3_bursts_keep_order(h: &Harness) {
    let burst = h.channel("burst");
    let listener = h.client("o1").await;
    let sender = h.client("o2").await;
    let sub = listener.listen([&burst]).await.unwrap();
    // While the burst arrives, the client keeps working (the listening side never blocks it).
    let lease = listener
        .acquire("busy", AcquireOptions::new())
        .await
        .unwrap();
    for i in 0..10_000 {
        sender.notify(&burst, &i.to_string()).await.unwrap();
    }
    lease.release().await.unwrap();
    for i in 0..10_000 {
        assert_eq!(next_message(&sub).await.payload, i.to_string());
    }
    if !h.is_postgres() {
        return;
    }
    // One transaction delivering 10,000 at once.
    h.admin()
        .execute(
            "SELECT count(pg_notify($1, i::text)) FROM generate_series(0, 9999) i",
            &[&burst],
        )
        .await
        .unwrap();
    for i in 0..10_000 {
        assert_eq!(next_message(&sub).await.payload, i.to_string());
    }
}

pub async fn n4_limits_and_quoting(h: &Harness) {
    let c = h.client("o1").await;
    let ch = h.channel("big");
    let sub = c.listen([&ch]).await.unwrap();
    let err = c.notify(&ch, &"x".repeat(8000)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("payload"), "{err}");
    c.notify(&ch, &"y".repeat(7999)).await.unwrap();
    assert_eq!(next_message(&sub).await.payload.len(), 7999);

    let tail = &h.tag[h.tag.len() - 8..];
    let canary = format!("\"canary_{tail}\"");
    if h.is_postgres() {
        h.admin()
            .batch_execute(&format!("CREATE TABLE {canary} (x int)"))
            .await
            .unwrap();
    }
    let names = [
        format!("with \"quotes\" {tail}"),
        format!("spaces and; semicolons {tail}"),
        format!("ünïcødé ✓ {tail}"),
        format!("x\"; DROP TABLE {canary}; -- {tail}"),
        format!("MixedCase{tail}"),
    ];
    for name in &names {
        let sub = c.listen([name]).await.unwrap();
        c.notify(name, "hi").await.unwrap();
        assert_eq!(next_message(&sub).await, message(name, "hi"));
        sub.close().await;
    }
    if h.is_postgres() {
        h.admin()
            .batch_execute(&format!("DROP TABLE {canary}"))
            .await
            .expect("the canary table survived");
    }
    let err = c.listen([&"c".repeat(64)]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("channel"));
}

/// accord's own channels (the wake-ups of waiting acquires, the announcements of streams,
/// groups, fleets and elections, the listener's probe) all start with `accord_`: `notify` and
/// `listen` refuse them, naming the channel, and leave nothing listened. Names that only
/// contain "accord" are ordinary channels.
pub async fn n4_own_channels_are_reserved(h: &Harness) {
    let c = h.client("o1").await;
    let ok = h.channel("ok");
    let wakeup = accord::wakeup_channel("accord").unwrap();
    let reserved = [
        wakeup.as_str(),
        "accord_wakeup",
        "accord_stream_0123456789abcdef",
        "accord_probe_0123456789abcdef",
        "accord_",
    ];
    for channel in reserved {
        let err = c.listen([channel]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{channel}");
        assert!(err.message().contains("channel"), "{err}");
        assert!(err.message().contains(&format!("{channel:?}")), "{err}");
        // With an ordinary channel before it: refused as a whole, nothing listened.
        let err = c.listen([ok.as_str(), channel]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{channel}");
        let err = c
            .notify(channel, &format!("[\"{}\", \"k\", null, null]", h.tag))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{channel}");
        assert!(err.message().contains(&format!("{channel:?}")), "{err}");
    }
    assert!(!c.listening_channels().await.unwrap().contains(&ok));

    let tail = &h.tag[h.tag.len() - 8..];
    for name in [
        format!("accord{tail}"),
        format!("Accord_{tail}"),
        format!("jobs_accord_{tail}"),
    ] {
        let sub = c.listen([&name]).await.unwrap();
        c.notify(&name, "hi").await.unwrap();
        assert_eq!(next_message(&sub).await, message(&name, "hi"));
        sub.close().await;
    }
}

/// A listener whose connections are ended goes on hearing. Where a reconnect may lose
/// notifications (PostgreSQL's LISTEN), it is told `Reconnected` first; where it loses none
/// (etcd's watch resumes after the last revision it saw), every notification arrives, those
/// sent while it reconnects too, and nothing else.
pub async fn n5_listener_reconnects(h: &Harness) {
    let owner = "o1";
    let ch = h.channel("n5");
    let listener = h.terminable_client(owner).await;
    let sender = h.client("o2").await;
    let sub = listener.listen([&ch]).await.unwrap();
    sender.notify(&ch, "before").await.unwrap();
    assert_eq!(next_message(&sub).await.payload, "before");
    assert!(h.terminate_connections(owner).await >= 1);
    if h.reconnect_loses_notifications() {
        match tokio::time::timeout(10 * SEC, sub.recv()).await {
            Ok(Ok(Some(Event::Reconnected))) => {}
            other => panic!("expected Reconnected, got {other:?}"),
        }
    } else {
        sender.notify(&ch, "during").await.unwrap();
        assert_eq!(next_only_message(&sub).await.payload, "during");
    }
    sender.notify(&ch, "after").await.unwrap();
    assert_eq!(next_only_message(&sub).await.payload, "after");

    // Closing stops delivery and gives the LISTEN back.
    let other = h.channel("n5b");
    let keep = listener.listen([&other]).await.unwrap();
    sub.close().await;
    assert!(matches!(sub.recv().await, Ok(None)));
    sender.notify(&ch, "unheard").await.unwrap();
    sender.notify(&other, "heard").await.unwrap();
    assert_eq!(next_message(&keep).await.payload, "heard");
    assert!(matches!(sub.recv().await, Ok(None)));
    let listening = listener.listening_channels().await.unwrap();
    assert!(listening.contains(&other), "{listening:?}");
    assert!(
        !listening.contains(&ch),
        "closing did not UNLISTEN: {listening:?}"
    );
    drop(keep);
    assert!(
        eventually(5 * SEC, || async {
            !listener
                .listening_channels()
                .await
                .unwrap()
                .contains(&other)
        })
        .await,
        "dropping a subscription UNLISTENs"
    );
}

/// A listener whose connection dropped is told `Reconnected` before any message its new
/// connection heard, so every gap in a numbered sequence is announced before the next message
/// (the chaos run caught messages heard while the new connection proved it hears overtaking
/// `Reconnected`). The sender numbers its notifications back to back, so some are always in
/// flight while the listener reconnects.
///
/// Where a reconnect loses nothing (etcd), no `Reconnected` comes at all: the 50 messages after
/// the termination follow on from the last one before it.
pub async fn n5_reconnected_comes_first(h: &Harness) {
    let owner = "o1";
    let ch = h.channel("n5c");
    let loses = h.reconnect_loses_notifications();
    let listener = h.terminable_client(owner).await;
    let sender = h.client("o2").await;
    let sub = listener.listen([&ch]).await.unwrap();
    let sending = {
        let ch = ch.clone();
        tokio::spawn(async move {
            for i in 1u64.. {
                sender.notify(&ch, &i.to_string()).await.unwrap();
            }
        })
    };
    let mut last = next_message(&sub).await.payload.parse::<u64>().unwrap();
    assert!(h.terminate_connections(owner).await >= 1);
    // Told since the last message; and how many messages came since the first Reconnected
    // (where a reconnect loses nothing: since the termination).
    let mut told = false;
    let mut after: Option<u32> = None;
    while after.is_none_or(|n| n < 50) {
        match tokio::time::timeout(10 * SEC, sub.recv()).await {
            Ok(Ok(Some(Event::Reconnected))) => {
                assert!(
                    loses,
                    "Reconnected after message {last}, from a store whose reconnect loses nothing"
                );
                told = true;
                after.get_or_insert(0);
            }
            Ok(Ok(Some(Event::Message(m)))) => {
                let n = m.payload.parse::<u64>().unwrap();
                assert!(n > last, "message {n} after {last}");
                assert!(
                    n == last + 1 || told,
                    "messages {}..{} missed with no Reconnected before message {n}",
                    last + 1,
                    n - 1
                );
                match after.as_mut() {
                    Some(count) => *count += 1,
                    None if !loses => after = Some(1),
                    None => {}
                }
                told = false;
                last = n;
            }
            other => panic!("expected a message or Reconnected, got {other:?}"),
        }
    }
    sending.abort();
}

pub async fn n6_close_ends_waits(h: &Harness) {
    let o1 = h.client("o1").await;
    let o2 = h.client("o2").await;
    let _held = o1.acquire("a", AcquireOptions::new()).await.unwrap();
    let sub = o2.listen([h.channel("n6")]).await.unwrap();
    let waiting = {
        let o2 = o2.clone();
        tokio::spawn(async move { o2.acquire("a", AcquireOptions::new()).await })
    };
    let reading = tokio::spawn(async move { sub.recv().await });
    let mine = o2.acquire("b", AcquireOptions::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    o2.close().await;
    let acquired = tokio::time::timeout(5 * SEC, waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(acquired.unwrap_err().kind(), ErrorKind::Closed);
    let read = tokio::time::timeout(5 * SEC, reading)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.unwrap_err().kind(), ErrorKind::Closed);
    // Leases held at close are released, and their holders are told.
    assert!(mine.is_lost());
    assert!(
        eventually(5 * SEC, || async {
            o1.try_acquire("b", AcquireOptions::new())
                .await
                .unwrap()
                .is_some()
        })
        .await
    );
    let err = o2
        .try_acquire("c", AcquireOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert_eq!(
        o2.notify("x", "y").await.unwrap_err().kind(),
        ErrorKind::Closed
    );
}

/// Notifications that many tasks of one client send at once share statements (group commit),
/// yet each arrives once, identical ones included (PostgreSQL would fold identical ones of one
/// transaction into one), and one task's notifications keep their order.
pub async fn n7_notifications_sent_together_each_arrive(h: &Harness) {
    let jobs = h.channel("together");
    let listener = h.client("o1").await;
    let sender = h.client("o2").await;
    let sub = listener.listen([&jobs]).await.unwrap();
    let mut payloads: Vec<String> = (0..30).map(|i| format!("p{i:02}")).collect();
    payloads.extend(["same".to_string(), "same".to_string(), "same".to_string()]);
    let sends = payloads.iter().map(|p| sender.notify(&jobs, p));
    for result in futures_util::future::join_all(sends).await {
        result.unwrap();
    }
    // One task's notifications, sent one after another while others share rounds: in order.
    let others: Vec<String> = (0..10).map(|i| format!("x{i}")).collect();
    let (_, sent) = tokio::join!(
        async {
            for i in 0..5 {
                sender.notify(&jobs, &format!("seq{i}")).await.unwrap();
            }
        },
        futures_util::future::join_all(others.iter().map(|p| sender.notify(&jobs, p))),
    );
    for result in sent {
        result.unwrap();
    }
    let mut heard = Vec::new();
    for _ in 0..payloads.len() + 15 {
        heard.push(next_message(&sub).await.payload);
    }
    let mut expected = payloads.clone();
    expected.extend((0..5).map(|i| format!("seq{i}")));
    expected.extend((0..10).map(|i| format!("x{i}")));
    let (mut sorted_heard, mut sorted_expected) = (heard.clone(), expected);
    sorted_heard.sort();
    sorted_expected.sort();
    assert_eq!(sorted_heard, sorted_expected, "each notification once");
    let seq: Vec<String> = heard.into_iter().filter(|p| p.starts_with("seq")).collect();
    let in_order: Vec<String> = (0..5).map(|i| format!("seq{i}")).collect();
    assert_eq!(seq, in_order, "one task's notifications in order");
    // Nothing more (a fourth "same", say).
    sender.notify(&jobs, "end").await.unwrap();
    assert_eq!(next_message(&sub).await.payload, "end");
}
