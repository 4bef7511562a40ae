//! Scenario 3: hand-off latency, from the holder starting its release to the waiter holding the
//! key. accord's waiting acquire (woken by the release's notification) against a waiter that
//! retries the same acquire statement every 10 ms, as most lock libraries do.

use std::time::{Duration, Instant};

use accord::{AcquireOptions, Client, ClientOptions};

use crate::raw::{self, AccordSql, Prepared};
use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

const POLL_EVERY: Duration = Duration::from_millis(10);

/// Long enough for the waiter to have tried once and be waiting, and random so that the
/// release falls anywhere in the poller's 10 ms period.
fn settle() -> Duration {
    Duration::from_micros(rand::random_range(15_000..25_000))
}

async fn accord_handoffs(url: &str, n: usize) -> BenchResult<Vec<Duration>> {
    let options = || ClientOptions::new().schema(SCHEMA).namespace(NAMESPACE);
    let holder = Client::connect(url, options()).await?;
    let waiter = Client::connect(url, options()).await?;
    let key = "bench-rust/handoff-accord";
    let mut samples = Vec::with_capacity(n);
    // The first hand-off also sets up the waiter's listening connection: not measured.
    for i in 0..=n {
        let held = holder
            .try_acquire(key, AcquireOptions::new())
            .await?
            .ok_or("handoff key is held")?;
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                let options = AcquireOptions::new().timeout(Duration::from_secs(10));
                let lease = waiter.acquire(key, options).await?;
                let holds_at = Instant::now();
                lease.release().await?;
                BenchResult::Ok(holds_at)
            })
        };
        tokio::time::sleep(settle()).await;
        let released_at = Instant::now();
        held.release().await?;
        let holds_at = waiting.await??;
        if i > 0 {
            samples.push(holds_at.saturating_duration_since(released_at));
        }
    }
    holder.close().await;
    waiter.close().await;
    Ok(samples)
}

async fn polling_handoffs(url: &str, n: usize) -> BenchResult<Vec<Duration>> {
    let sql = AccordSql::new()?;
    let holder = raw::connect(url).await?;
    let holder_stmts = Prepared::on(&holder, &sql).await?;
    let waiter = std::sync::Arc::new(raw::connect(url).await?);
    let waiter_stmts = std::sync::Arc::new(Prepared::on(&waiter, &sql).await?);
    let key = "bench-rust/handoff-poll";
    let mut samples = Vec::with_capacity(n);
    for i in 0..=n {
        let fence = holder_stmts
            .try_acquire(&holder, key)
            .await?
            .ok_or("handoff key is held")?;
        let waiting = {
            let (waiter, stmts) = (waiter.clone(), waiter_stmts.clone());
            tokio::spawn(async move {
                loop {
                    if let Some(fence) = stmts.try_acquire(&waiter, key).await? {
                        let holds_at = Instant::now();
                        stmts.release(&waiter, key, fence).await?;
                        return BenchResult::Ok(holds_at);
                    }
                    tokio::time::sleep(POLL_EVERY).await;
                }
            })
        };
        tokio::time::sleep(settle()).await;
        let released_at = Instant::now();
        holder_stmts.release(&holder, key, fence).await?;
        let holds_at = waiting.await??;
        if i > 0 {
            samples.push(holds_at.saturating_duration_since(released_at));
        }
    }
    Ok(samples)
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let n = (config.pairs / 25).max(10);
    let mut accord = Record::new(
        "rust/handoff-accord",
        "accord: waiting acquire, woken by NOTIFY",
    );
    let mut polling = Record::new(
        "rust/handoff-poll-10ms",
        "raw SQL: the same acquire retried every 10 ms",
    );
    for _half in 0..2 {
        let started = Instant::now();
        let samples = accord_handoffs(&config.url, n / 2).await?;
        accord.add(samples, started.elapsed());
        let started = Instant::now();
        let samples = polling_handoffs(&config.url, n / 2).await?;
        polling.add(samples, started.elapsed());
    }
    Ok(vec![accord, polling])
}
