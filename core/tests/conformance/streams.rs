//! The durable stream scenarios D1–D6 (docs/semantics.md).

use std::sync::Arc;
use std::time::Duration;

use accord::{
    ErrorKind, StreamEvent, StreamRetention, StreamStart, StreamSubscription, SubscribeOptions,
};

use crate::support::Harness;

const SEC: Duration = Duration::from_secs(1);

async fn next_event(sub: &StreamSubscription) -> StreamEvent {
    match tokio::time::timeout(20 * SEC, sub.next()).await {
        Ok(Ok(Some(event))) => event,
        other => panic!("expected an event of {}, got {other:?}", sub.stream()),
    }
}

/// Reads events until `last`, checking that they are exactly `from..=last`, in order.
async fn expect_run(sub: &StreamSubscription, from: i64, last: i64) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    for seq in from..=last {
        let event = next_event(sub).await;
        assert_eq!(event.seq, seq, "expected seq {seq}, got {event:?}");
        out.push(event);
    }
    out
}

fn from(start: StreamStart) -> SubscribeOptions {
    SubscribeOptions::new().start(start)
}

pub async fn d1_earliest_replays_in_order_then_live(h: &Harness) {
    let publisher = h.client("o1").await;
    let reader = h.client("o2").await;
    let payloads: Vec<String> = (1..=1000).map(|i| format!("event {i}")).collect();
    let seqs = publisher
        .publish_many("jobs", payloads.clone())
        .await
        .unwrap();
    assert_eq!(seqs, (1..=1000).collect::<Vec<i64>>());
    let info = reader.stream_info("jobs").await.unwrap();
    assert_eq!((info.first_seq, info.last_seq), (1, 1000));

    let sub = reader
        .subscribe("jobs", from(StreamStart::Earliest).page_size(64))
        .await
        .unwrap();
    let events = expect_run(&sub, 1, 1000).await;
    for (event, payload) in events.iter().zip(&payloads) {
        assert_eq!(&event.payload, payload);
        assert_eq!(event.stream, "jobs");
    }
    assert!(events
        .windows(2)
        .all(|w| w[0].published_at <= w[1].published_at));
    // Live: one publish wakes the caught-up reader.
    assert_eq!(publisher.publish("jobs", "live").await.unwrap(), 1001);
    assert_eq!(next_event(&sub).await.payload, "live");
    assert_eq!(sub.position(), 1001);

    // Latest skips what is stored; the default is Latest.
    let tail = reader
        .subscribe("jobs", SubscribeOptions::new())
        .await
        .unwrap();
    publisher.publish("jobs", "tail").await.unwrap();
    let event = next_event(&tail).await;
    assert_eq!((event.seq, event.payload.as_str()), (1002, "tail"));
    assert_eq!(next_event(&sub).await.seq, 1002);

    // Concurrent publishes of one client to two streams share statements; each stream counts
    // on its own, in the order the publishes were started.
    let mixed = (0..40).map(|i| {
        let publisher = publisher.clone();
        async move {
            let stream = if i % 2 == 0 { "even" } else { "odd" };
            (i, publisher.publish(stream, &i.to_string()).await.unwrap())
        }
    });
    for (i, seq) in futures_util::future::join_all(mixed).await {
        assert_eq!(seq, i / 2 + 1, "publish {i}");
    }
    for (stream, first) in [("even", 0), ("odd", 1)] {
        let sub = reader
            .subscribe(stream, from(StreamStart::Earliest))
            .await
            .unwrap();
        for (k, event) in expect_run(&sub, 1, 20).await.into_iter().enumerate() {
            assert_eq!(event.payload, (first + 2 * k).to_string(), "{stream}");
        }
    }

    // Another stream counts on its own; a stream never published is empty.
    assert_eq!(publisher.publish("other", "x").await.unwrap(), 1);
    let empty = reader.stream_info("never").await.unwrap();
    assert_eq!((empty.first_seq, empty.last_seq), (1, 0));

    // Closing ends a waiting read.
    let waiting = {
        let sub = Arc::new(sub);
        let reader = sub.clone();
        let task = tokio::spawn(async move { reader.next().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        sub.close().await;
        task
    };
    assert!(matches!(
        tokio::time::timeout(10 * SEC, waiting).await,
        Ok(Ok(Ok(None)))
    ));
}

/// Publishers in several clients at once: every reader sees 1..=n with no gap (a seq seen
/// before a smaller one committed would be a gap, reported as `Trimmed`), and each publisher's
/// own events in the order it published them.
pub async fn d1_concurrent_publishers_commit_in_order(h: &Harness) {
    const PUBLISHERS: usize = 3;
    const EACH: usize = 120;
    let reader = h.client("reader").await;
    let sub = reader
        .subscribe("c", from(StreamStart::Earliest).page_size(7))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for p in 0..PUBLISHERS {
        let client = h.client(&format!("p{p}")).await;
        tasks.push(tokio::spawn(async move {
            // Concurrent publishes of one client (shared statements) and sequential ones.
            let mut seqs = Vec::new();
            for round in 0..EACH / 10 {
                let batch = (0..10).map(|i| {
                    let client = client.clone();
                    async move {
                        client
                            .publish("c", &format!("{p}:{}", round * 10 + i))
                            .await
                            .unwrap()
                    }
                });
                seqs.extend(futures_util::future::join_all(batch).await);
            }
            seqs
        }));
    }
    let total = (PUBLISHERS * EACH) as i64;
    let events = expect_run(&sub, 1, total).await;
    let mut published = Vec::new();
    for task in tasks {
        published.extend(task.await.unwrap());
    }
    published.sort_unstable();
    assert_eq!(published, (1..=total).collect::<Vec<_>>());
    for p in 0..PUBLISHERS {
        let mine: Vec<usize> = events
            .iter()
            .filter_map(|e| e.payload.strip_prefix(&format!("{p}:")))
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(mine.len(), EACH);
        // Rounds are sequential: every event of a round comes after the previous round's.
        for w in mine.windows(2) {
            assert!(
                w[1] / 10 >= w[0] / 10,
                "publisher {p}'s rounds out of order: {mine:?}"
            );
        }
    }
}

/// The reading connections are terminated while publishing goes on: every event arrives once.
pub async fn d2_no_gap_across_reconnects(h: &Harness) {
    const TOTAL: i64 = 300;
    let reader = h.terminable_client("o1").await;
    let publisher = h.client("o2").await;
    let sub = reader
        .subscribe("d2", from(StreamStart::Earliest).page_size(10))
        .await
        .unwrap();
    let publishing = tokio::spawn(async move {
        for i in 1..=TOTAL {
            publisher.publish("d2", &i.to_string()).await.unwrap();
            if i % 20 == 0 {
                tokio::task::yield_now().await;
            }
        }
    });
    let mut received = expect_run(&sub, 1, 50).await;
    assert!(h.terminate_connections("o1").await >= 1);
    received.extend(expect_run(&sub, 51, 150).await);
    assert!(h.terminate_connections("o1").await >= 1);
    received.extend(expect_run(&sub, 151, TOTAL).await);
    publishing.await.unwrap();
    for (i, event) in received.iter().enumerate() {
        assert_eq!(event.payload, (i + 1).to_string());
    }
    // Nothing more: a duplicate would show up here.
    reader.publish("d2", "end").await.unwrap();
    assert_eq!(next_event(&sub).await.payload, "end");
}

pub async fn d3_a_consumer_resumes_after_its_ack(h: &Harness) {
    let publisher = h.client("o1").await;
    publisher
        .publish_many("d3", (1..=1000).map(|i| i.to_string()))
        .await
        .unwrap();
    let first = h.client("o2").await;
    let sub = first
        .subscribe(
            "d3",
            from(StreamStart::Earliest)
                .consumer("billing")
                .page_size(100),
        )
        .await
        .unwrap();
    expect_run(&sub, 1, 500).await;
    sub.ack(500).await.unwrap();
    // Acks only move forward; an undelivered seq is refused.
    sub.ack(200).await.unwrap();
    let err = sub.ack(501).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("seq"), "{err}");
    first.close().await;

    // A restart (another client, the same consumer): Earliest only applies without a position.
    let again = h.client("o3").await;
    let sub = again
        .subscribe("d3", from(StreamStart::Earliest).consumer("billing"))
        .await
        .unwrap();
    assert_eq!(sub.position(), 500);
    expect_run(&sub, 501, 520).await;
    // Another consumer starts where it asks; an explicit seq wins over a stored position.
    let other = again
        .subscribe("d3", from(StreamStart::Earliest).consumer("audit"))
        .await
        .unwrap();
    assert_eq!(next_event(&other).await.seq, 1);
    let seek = again
        .subscribe("d3", from(StreamStart::After(900)).consumer("billing"))
        .await
        .unwrap();
    assert_eq!(next_event(&seek).await.seq, 901);
    // Without a consumer there is nothing to ack.
    let anonymous = again
        .subscribe("d3", from(StreamStart::Earliest))
        .await
        .unwrap();
    next_event(&anonymous).await;
    let err = anonymous.ack(1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("consumer"), "{err}");
}

pub async fn d4_retention_trims_and_says_where_the_stream_starts(h: &Harness) {
    let client = h.client("o1").await;
    let reader = h.client("o2").await;
    // A reader one event in, with a page of one: it has read nothing beyond seq 1.
    client.publish("d4", "1").await.unwrap();
    let behind = reader
        .subscribe("d4", from(StreamStart::Earliest).page_size(1))
        .await
        .unwrap();
    assert_eq!(next_event(&behind).await.seq, 1);
    client
        .publish_many("d4", (2..=100).map(|i| i.to_string()))
        .await
        .unwrap();

    // By length: setting the rule trims at once.
    let gone = client
        .set_stream_retention("d4", StreamRetention::new().max_len(10))
        .await
        .unwrap();
    assert_eq!(gone, 90);
    let info = client.stream_info("d4").await.unwrap();
    assert_eq!((info.first_seq, info.last_seq), (91, 100));
    assert_eq!(info.retention.max_len, Some(10));
    let err = reader
        .subscribe("d4", from(StreamStart::After(5)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Trimmed);
    assert!(err.message().contains("91"), "{err}");
    let earliest = reader
        .subscribe("d4", from(StreamStart::Earliest))
        .await
        .unwrap();
    assert_eq!(next_event(&earliest).await.seq, 91);
    // The reader that fell behind is told, and ends.
    let err = behind.next().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Trimmed);
    assert!(err.message().contains("91"), "{err}");
    assert!(matches!(behind.next().await, Ok(None)));
    assert!(behind.is_closed());
    // Publishing trims in the background of the publisher's client.
    client
        .publish_many("d4", (101..=150).map(|i| i.to_string()))
        .await
        .unwrap();
    assert!(
        crate::support::eventually(10 * SEC, || async {
            client.stream_info("d4").await.unwrap().first_seq == 141
        })
        .await,
        "publishing did not trim to the last 10"
    );

    // By age: the old events go, the ones younger than the age stay.
    let age = Duration::from_millis(1500);
    client
        .publish_many("d4a", (1..=5).map(|i| format!("old {i}")))
        .await
        .unwrap();
    tokio::time::sleep(age + Duration::from_millis(300)).await;
    client
        .publish_many("d4a", (6..=10).map(|i| format!("new {i}")))
        .await
        .unwrap();
    client
        .set_stream_retention("d4a", StreamRetention::new().max_age(age))
        .await
        .unwrap();
    let now = h.now().await;
    let kept = reader
        .subscribe("d4a", from(StreamStart::Earliest))
        .await
        .unwrap();
    let first = next_event(&kept).await;
    assert!(
        first.seq >= 6,
        "an event older than the age was kept: {first:?}"
    );
    // Each of the new ones is kept unless it too grew older than the age meanwhile.
    if (now - first.published_at).to_std().unwrap_or_default() < age {
        assert_eq!(first.seq, 6);
    }
    // No rule: nothing goes.
    client
        .set_stream_retention("d4a", StreamRetention::new())
        .await
        .unwrap();
    assert_eq!(
        client.stream_info("d4a").await.unwrap().retention,
        StreamRetention::new()
    );
}

/// A named consumer whose stored position retention trimmed past: without a start, or with
/// `Latest`, it is told so, with the way out; `Earliest` goes on from the oldest stored event;
/// then the consumer resumes after its acks again. A seek to a trimmed seq stays `Trimmed`.
pub async fn d6_a_consumer_behind_retention_is_told_the_way_out(h: &Harness) {
    let client = h.client("o1").await;
    client
        .publish_many("d6", (1..=10).map(|i| i.to_string()))
        .await
        .unwrap();
    let first = client
        .subscribe("d6", from(StreamStart::Earliest).consumer("billing"))
        .await
        .unwrap();
    expect_run(&first, 1, 3).await;
    first.ack(3).await.unwrap();
    first.close().await;
    client
        .publish_many("d6", (11..=20).map(|i| i.to_string()))
        .await
        .unwrap();
    client
        .set_stream_retention("d6", StreamRetention::new().max_len(5))
        .await
        .unwrap();

    // The stored position (3) is older than the stream's first event (16).
    let err = client
        .subscribe("d6", SubscribeOptions::new().consumer("billing"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Trimmed);
    assert!(
        err.message().contains("starts at seq 16") && err.message().contains("\"earliest\""),
        "{err}"
    );
    // `Latest` (every binding's default) would skip stored events the consumer never read.
    let err = client
        .subscribe("d6", from(StreamStart::Latest).consumer("billing"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Trimmed);
    assert!(err.message().contains("\"earliest\""), "{err}");
    let resumed = client
        .subscribe("d6", from(StreamStart::Earliest).consumer("billing"))
        .await
        .unwrap();
    expect_run(&resumed, 16, 17).await;
    resumed.ack(17).await.unwrap();
    resumed.close().await;
    // A usable position wins again over the start, and without one.
    for options in [
        from(StreamStart::Earliest).consumer("billing"),
        SubscribeOptions::new().consumer("billing"),
    ] {
        let again = client.subscribe("d6", options).await.unwrap();
        assert_eq!(again.position(), 17);
        assert_eq!(next_event(&again).await.seq, 18);
    }
    // A seek to a trimmed seq is refused, naming the way out.
    let err = client
        .subscribe("d6", from(StreamStart::After(2)).consumer("billing"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Trimmed);
    assert!(err.message().contains("\"earliest\""), "{err}");
}

pub async fn d5_payloads_are_any_utf8_and_names_any_text(h: &Harness) {
    let client = h.client("o1").await;
    let max = "é".repeat(accord::limits::MAX_EVENT_BYTES / 2);
    let payloads = vec![
        String::new(),
        "nul \0 inside".to_string(),
        "emoji 🦀 and 中文".to_string(),
        "quote ' \" \\ $accord$ ; DROP TABLE x; --".to_string(),
        max.clone(),
    ];
    for stream in [
        "plain",
        "it's \"quoted\"",
        "$accord$",
        "'; DROP TABLE streams; --",
        "ünïcödé/🦀",
    ] {
        let seqs = client.publish_many(stream, payloads.clone()).await.unwrap();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5], "{stream}");
        let sub = client
            .subscribe(stream, from(StreamStart::Earliest))
            .await
            .unwrap();
        for payload in &payloads {
            assert_eq!(&next_event(&sub).await.payload, payload, "{stream}");
        }
    }
    let too_big = "x".repeat(accord::limits::MAX_EVENT_BYTES + 1);
    let err = client.publish("plain", &too_big).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("payload"), "{err}");
    for (stream, field) in [
        ("", "stream"),
        ("a\0b", "stream"),
        (&"s".repeat(513)[..], "stream"),
    ] {
        let err = client.publish(stream, "x").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{stream:?}");
        assert!(err.message().contains(field), "{err}");
    }
    let bad = [
        (from(StreamStart::After(-1)), "after"),
        (SubscribeOptions::new().page_size(0), "page_size"),
        (SubscribeOptions::new().page_size(1001), "page_size"),
        (SubscribeOptions::new().consumer(""), "consumer"),
    ];
    for (options, field) in bad {
        let err = client.subscribe("plain", options).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{field}");
        assert!(err.message().contains(field), "{err}");
    }
    // A seek past the last seq published names an event that never existed: refused, rather
    // than a subscription that waits, silently, for the stream to grow that far. The last seq
    // itself is where "latest" starts; on a stream never published to, only 0 is.
    for (stream, after, last) in [
        ("plain", 6, 5),
        ("plain", 1_000_000_000_000, 5),
        ("never", 1, 0),
    ] {
        let err = client
            .subscribe(stream, from(StreamStart::After(after)))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{stream} {after}");
        assert!(err.message().contains("after"), "{err}");
        assert!(
            err.message().contains(&format!("last seq is {last}")),
            "{err}"
        );
    }
    for (stream, after) in [("plain", 5), ("never", 0)] {
        let sub = client
            .subscribe(stream, from(StreamStart::After(after)))
            .await;
        assert_eq!(sub.unwrap().position(), after, "{stream}");
    }
    let err = client
        .set_stream_retention("plain", StreamRetention::new().max_len(0))
        .await
        .unwrap_err();
    assert!(err.message().contains("max_len"), "{err}");
    let err = client
        .publish_many(
            "plain",
            vec![String::new(); accord::limits::MAX_PUBLISH_EVENTS + 1],
        )
        .await
        .unwrap_err();
    assert!(err.message().contains("payloads"), "{err}");
    // Refusals published nothing.
    assert_eq!(client.stream_info("plain").await.unwrap().last_seq, 5);
}
