//! Scenario 11: durable streams.
//!
//! - `rust/stream-publish`: one task publishing one event at a time (each waits for its seq);
//! - `rust/stream-publish-batched`: 1,000 publishes started at once from one client, in rounds
//!   (the client's group commit carries them in a few statements);
//! - `rust/stream-e2e` against `rust/notify-e2e`: from the start of a publish (or a NOTIFY) to
//!   the subscriber (another client) holding the event, one at a time;
//! - `rust/stream-recovery`: a subscriber's connections are terminated (pg_terminate_backend)
//!   while a publisher publishes every 2 ms: the time from the termination until the subscriber
//!   holds the first event published after it. Every event must arrive once, in order.
//!
//! Each runs with the cluster's fsync setting and, where the bench may change it, again with
//! fsync and synchronous_commit on (the `-fsync` ids).

use std::sync::Arc;
use std::time::{Duration, Instant};

use accord::{Client, ClientOptions, Event, StreamStart, SubscribeOptions};
use futures_util::future::try_join_all;

use crate::pool::{durable, fsync_modes};
use crate::raw;
use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

const ROUND: usize = 1000;
const PAYLOAD: &str = r#"{"order": 12345, "state": "paid", "amount": "19.99"}"#;

fn options(app: &str) -> ClientOptions {
    ClientOptions::new()
        .schema(SCHEMA)
        .namespace(NAMESPACE)
        .application_name(app)
}

/// A stream name of its own per run, so that runs never read each other's events.
fn stream_name(what: &str) -> String {
    format!(
        "bench-{what}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    )
}

async fn publish_one_at_a_time(
    client: &Client,
    n: usize,
) -> BenchResult<(Vec<Duration>, Duration)> {
    let stream = stream_name("single");
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        client.publish(&stream, PAYLOAD).await?;
        samples.push(t.elapsed());
    }
    Ok((samples, started.elapsed()))
}

/// Rounds of [`ROUND`] concurrent publishes; each sample is one publish's wait.
async fn publish_batched(
    client: &Client,
    rounds: usize,
) -> BenchResult<(Vec<Duration>, Duration, u64)> {
    let stream = stream_name("batched");
    let mut samples = Vec::with_capacity(rounds * ROUND);
    let started = Instant::now();
    for _ in 0..rounds {
        let round = (0..ROUND).map(|_| {
            let stream = &stream;
            async move {
                let t = Instant::now();
                client.publish(stream, PAYLOAD).await?;
                BenchResult::Ok(t.elapsed())
            }
        });
        samples.extend(try_join_all(round).await?);
    }
    let elapsed = started.elapsed();
    let last = client.stream_info(&stream).await?.last_seq;
    if last != (rounds * ROUND) as i64 {
        return Err(format!("batched publishing stored {last} events").into());
    }
    Ok((samples, elapsed, last as u64))
}

async fn stream_end_to_end(
    publisher: &Client,
    reader: &Client,
    n: usize,
) -> BenchResult<(Vec<Duration>, Duration)> {
    let stream = stream_name("e2e");
    let sub = reader
        .subscribe(&stream, SubscribeOptions::new().start(StreamStart::Latest))
        .await?;
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 1..=n {
        let t = Instant::now();
        publisher.publish(&stream, PAYLOAD).await?;
        let event = sub.next().await?.ok_or("the subscription ended")?;
        samples.push(t.elapsed());
        if event.seq != i as i64 {
            return Err(format!("expected seq {i}, got {}", event.seq).into());
        }
    }
    let elapsed = started.elapsed();
    sub.close().await;
    Ok((samples, elapsed))
}

async fn notify_end_to_end(
    sender: &Client,
    listener: &Client,
    n: usize,
) -> BenchResult<(Vec<Duration>, Duration)> {
    let channel = format!("bench_e2e_{}", rand::random::<u32>());
    let sub = listener.listen([&channel]).await?;
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        sender.notify(&channel, PAYLOAD).await?;
        loop {
            match sub.recv().await? {
                Some(Event::Message(_)) => break,
                Some(Event::Reconnected) => continue,
                None => return Err("the subscription ended".into()),
            }
        }
        samples.push(t.elapsed());
    }
    let elapsed = started.elapsed();
    sub.close().await;
    Ok((samples, elapsed))
}

/// Terminates the reader's connections `n` times while events flow; each sample is the time
/// until the reader holds an event published after the termination.
async fn recovery(
    db: &tokio_postgres::Client,
    url: &str,
    publisher: &Client,
    n: usize,
) -> BenchResult<(Vec<Duration>, Duration, i64)> {
    let app = format!("bench-stream-reader-{}", rand::random::<u32>());
    let reader = Client::connect(url, options(&app)).await?;
    let stream = stream_name("recovery");
    let sub = Arc::new(
        reader
            .subscribe(
                &stream,
                SubscribeOptions::new().start(StreamStart::Earliest),
            )
            .await?,
    );
    let stop = accord::CancellationToken::new();
    let publishing = {
        let (publisher, stream, stop) = (publisher.clone(), stream.clone(), stop.clone());
        tokio::spawn(async move {
            let mut last = 0;
            while !stop.is_cancelled() {
                last = publisher.publish(&stream, PAYLOAD).await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            BenchResult::Ok(last)
        })
    };
    let mut expected = 1;
    let next = |sub: Arc<accord::StreamSubscription>| async move {
        let event = sub.next().await?.ok_or("the subscription ended")?;
        BenchResult::Ok(event.seq)
    };
    let mut samples = Vec::new();
    let started = Instant::now();
    for _ in 0..n {
        // Read a while, then cut.
        for _ in 0..50 {
            let seq = next(sub.clone()).await?;
            if seq != expected {
                return Err(format!("expected seq {expected}, got {seq}").into());
            }
            expected += 1;
        }
        let before = publisher.stream_info(&stream).await?.last_seq;
        let cut_at = Instant::now();
        let cut: i64 = db
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE application_name = $1",
                &[&app],
            )
            .await?
            .get(0);
        if cut == 0 {
            return Err("no reader connection to terminate".into());
        }
        loop {
            let seq = next(sub.clone()).await?;
            if seq != expected {
                return Err(format!("expected seq {expected}, got {seq}").into());
            }
            expected += 1;
            if seq > before {
                samples.push(cut_at.elapsed());
                break;
            }
        }
    }
    let elapsed = started.elapsed();
    stop.cancel();
    let last = publishing.await??;
    // Every event once, in order, up to the last one published.
    while expected <= last {
        let seq = next(sub.clone()).await?;
        if seq != expected {
            return Err(format!("expected seq {expected}, got {seq}").into());
        }
        expected += 1;
    }
    sub.close().await;
    reader.close().await;
    Ok((samples, elapsed, last))
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let db = raw::connect(&config.url).await?;
    let (fsync_before, modes) = fsync_modes(&db).await?;
    let singles = (config.pairs / 5).max(50);
    let rounds = (config.pairs / 500).max(2);
    let trips = (config.pairs / 10).max(30);
    let cuts = if config.pairs >= 1000 { 5 } else { 2 };
    let mut records = Vec::new();
    for &fsync in &modes {
        if fsync && fsync_before != "on" {
            durable(&db, &config.url, true).await?;
        }
        let outcome = async {
            let id =
                |plain: &'static str, durable: &'static str| if fsync { durable } else { plain };
            let publisher = Client::connect(&config.url, options("bench-stream-publisher")).await?;
            let reader = Client::connect(&config.url, options("bench-stream-e2e")).await?;
            // Prepares the stream statements on the connections: not measured.
            publish_one_at_a_time(&publisher, 5).await?;
            let mut found = Vec::new();

            let mut single = Record::new(
                id("rust/stream-publish", "rust/stream-publish-fsync"),
                "accord: one publish at a time",
            );
            let (samples, elapsed) = publish_one_at_a_time(&publisher, singles).await?;
            single.add(samples, elapsed);
            single.metric("fsync", u64::from(fsync));
            found.push(single);

            let mut batched = Record::new(
                id(
                    "rust/stream-publish-batched",
                    "rust/stream-publish-batched-fsync",
                ),
                format!("accord: {ROUND} publishes at once from one client"),
            );
            let (samples, elapsed, stored) = publish_batched(&publisher, rounds).await?;
            batched.add(samples, elapsed);
            batched.metric("events", stored);
            batched.metric("fsync", u64::from(fsync));
            found.push(batched);

            let mut e2e = Record::new(
                id("rust/stream-e2e", "rust/stream-e2e-fsync"),
                "accord: publish → the subscriber (another client) holds the event",
            );
            let (samples, elapsed) = stream_end_to_end(&publisher, &reader, trips).await?;
            e2e.add(samples, elapsed);
            e2e.metric("fsync", u64::from(fsync));
            found.push(e2e);

            let mut notify = Record::new(
                id("rust/notify-e2e", "rust/notify-e2e-fsync"),
                "NOTIFY alone: notify → the listener (another client) holds it (not durable)",
            );
            let (samples, elapsed) = notify_end_to_end(&publisher, &reader, trips).await?;
            notify.add(samples, elapsed);
            notify.metric("fsync", u64::from(fsync));
            found.push(notify);

            let mut recover = Record::new(
                id("rust/stream-recovery", "rust/stream-recovery-fsync"),
                "accord: the subscriber's connections terminated → it holds the next new event",
            );
            let (samples, elapsed, events) = recovery(&db, &config.url, &publisher, cuts).await?;
            recover.add(samples, elapsed);
            recover.metric("events_delivered_once_in_order", events);
            recover.metric("fsync", u64::from(fsync));
            found.push(recover);

            publisher.close().await;
            reader.close().await;
            BenchResult::Ok(found)
        }
        .await;
        if fsync && fsync_before != "on" {
            durable(&db, &config.url, false).await?;
        }
        records.extend(outcome?);
    }
    Ok(records)
}
