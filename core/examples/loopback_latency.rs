//! Uncontended try_acquire + release on one key, against the same two statements sent raw on
//! one tokio-postgres connection (the floor). A quick look, not the benchmark suite:
//! `ACCORD_URL=postgres://… cargo run --release --example loopback_latency [rounds]`.

use std::time::{Duration, Instant};

use accord::{AcquireOptions, Client, ClientOptions};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn report(name: &str, mut samples: Vec<Duration>, total: Duration) {
    samples.sort();
    println!(
        "{name:<28} {:>9.0} pairs/s   p50 {:>7.1} µs   p99 {:>7.1} µs",
        samples.len() as f64 / total.as_secs_f64(),
        percentile(&samples, 0.50).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("ACCORD_URL").map_err(|_| "set ACCORD_URL=postgres://…")?;
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5000);
    let schema = "accord_latency";
    let client = Client::connect(&url, ClientOptions::new().schema(schema).pool_size(1)).await?;

    let (raw, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let grant = raw
        .prepare(&format!(
            "INSERT INTO {schema}.leases AS l (namespace, key, owner, fence, expires_at, metadata, updated_at)
             VALUES ('raw', 'k', 'o', nextval('{schema}.fence_seq'), clock_timestamp() + interval '30 s', '{{}}', clock_timestamp())
             ON CONFLICT (namespace, key) DO UPDATE SET owner = excluded.owner, fence = excluded.fence,
               expires_at = excluded.expires_at, updated_at = excluded.updated_at
             WHERE l.expires_at IS NULL OR l.expires_at <= clock_timestamp()
             RETURNING fence"
        ))
        .await?;
    let free = raw
        .prepare(&format!(
            "UPDATE {schema}.leases SET owner = NULL, expires_at = NULL
              WHERE namespace = 'raw' AND key = 'k' AND fence = $1"
        ))
        .await?;

    for round in 0..3 {
        let mut samples = Vec::with_capacity(rounds);
        let started = Instant::now();
        for _ in 0..rounds {
            let t = Instant::now();
            let fence: i64 = raw.query_one(&grant, &[]).await?.get(0);
            raw.execute(&free, &[&fence]).await?;
            samples.push(t.elapsed());
        }
        if round > 0 {
            report("raw SQL (same statements)", samples, started.elapsed());
        }

        let mut samples = Vec::with_capacity(rounds);
        let started = Instant::now();
        for _ in 0..rounds {
            let t = Instant::now();
            let lease = client
                .try_acquire("k", AcquireOptions::new())
                .await?
                .ok_or("held")?;
            lease.release().await?;
            samples.push(t.elapsed());
        }
        if round > 0 {
            report("accord try_acquire+release", samples, started.elapsed());
        }
    }
    client.close().await;
    Ok(())
}
