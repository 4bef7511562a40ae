//! Scenario 4: notify → listener receive. Latency one message at a time (sent, then awaited),
//! then a sustained stream: many publishing tasks on one client, one listening client,
//! messages/s from the first send to the last receipt.

use std::time::{Duration, Instant};

use accord::{Client, ClientOptions, Event};
use futures_util::future::try_join_all;

use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

const CHANNEL: &str = "bench";
const PUBLISHERS: usize = 64;

async fn next_message(subscription: &accord::Subscription) -> BenchResult<String> {
    match tokio::time::timeout(Duration::from_secs(30), subscription.recv()).await? {
        Ok(Some(Event::Message(m))) => Ok(m.payload),
        Ok(Some(Event::Reconnected)) => {
            Err("the listener reconnected: messages were missed".into())
        }
        Ok(None) => Err("the subscription ended".into()),
        Err(e) => Err(e.into()),
    }
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let options = || ClientOptions::new().schema(SCHEMA).namespace(NAMESPACE);
    let publisher = Client::connect(&config.url, options()).await?;
    let listener = Client::connect(&config.url, options()).await?;
    let subscription = listener.listen([CHANNEL]).await?;
    let mut record = Record::new(
        "rust/notify",
        "accord notify → listen, one message at a time",
    );

    let n = (config.pairs / 2).max(20);
    for _ in 0..config.warmup.min(200) {
        publisher.notify(CHANNEL, "warmup").await?;
        next_message(&subscription).await?;
    }
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let payload = i.to_string();
        publisher.notify(CHANNEL, &payload).await?;
        if next_message(&subscription).await? != payload {
            return Err("messages arrived out of order".into());
        }
        samples.push(t.elapsed());
    }
    record.add(samples, started.elapsed());

    // Sustained: PUBLISHERS tasks send `total` messages; the listener counts them all.
    let total = config.pairs * 4;
    let base = Instant::now();
    let receiving = async {
        let mut under_load = Vec::with_capacity(total);
        for _ in 0..total {
            let payload = next_message(&subscription).await?;
            let sent: u64 = payload.parse()?;
            under_load.push(base.elapsed().saturating_sub(Duration::from_nanos(sent)));
        }
        BenchResult::Ok((under_load, base.elapsed()))
    };
    let sending = try_join_all((0..PUBLISHERS).map(|p| {
        let publisher = publisher.clone();
        let share = total / PUBLISHERS + usize::from(p < total % PUBLISHERS);
        tokio::spawn(async move {
            for _ in 0..share {
                let sent = base.elapsed().as_nanos().to_string();
                publisher.notify(CHANNEL, &sent).await?;
            }
            BenchResult::Ok(())
        })
    }));
    let (received, sent) = tokio::join!(receiving, sending);
    for task in sent? {
        task?;
    }
    let (mut under_load, elapsed) = received?;
    under_load.sort();
    record.metric("sustained_messages", total as u64);
    record.metric("sustained_publishers", PUBLISHERS as u64);
    record.metric(
        "sustained_msgs_per_s",
        (total as f64 / elapsed.as_secs_f64()).round(),
    );
    record.metric(
        "sustained_p50_us",
        under_load[under_load.len() / 2].as_secs_f64() * 1e6,
    );
    record.metric(
        "sustained_p99_us",
        under_load[under_load.len() * 99 / 100].as_secs_f64() * 1e6,
    );
    publisher.close().await;
    listener.close().await;
    Ok(vec![record])
}
