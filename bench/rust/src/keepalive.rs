//! Scenario 5: the keepalive's cost. One client holds 100,000 leases (by default); over the
//! measured window we count the statements the database ran (pg_stat_statements, every
//! statement of this database), the server's time in the renewal statements, and the CPU time
//! of this whole process (getrusage: every runtime thread).

use std::time::{Duration, Instant};

use accord::{AcquireOptions, Client, ClientOptions};
use futures_util::{stream, StreamExt, TryStreamExt};

use crate::raw;
use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

/// Short enough for 15 ticks in the window (accord renews every ttl/3); the default 30 s would
/// tick three times.
const TTL: Duration = Duration::from_secs(6);

pub(crate) fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The server's time in renewal statements so far (ms), by pg_stat_statements.
async fn renew_time_ms(db: &tokio_postgres::Client) -> BenchResult<f64> {
    let row = db
        .query_one(
            "SELECT coalesce(sum(total_exec_time), 0)::float8 FROM pg_stat_statements
              WHERE query LIKE '%AS b(key, fence, ttl_ms)%'",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Statements this database has run so far.
async fn statements(db: &tokio_postgres::Client) -> BenchResult<i64> {
    let row = db
        .query_one(
            "SELECT coalesce(sum(calls), 0)::bigint
               FROM pg_stat_statements
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let (window, leases_wanted) = (config.keepalive_window, config.keepalive_leases);
    let db = raw::connect(&config.url).await?;
    db.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", &[])
        .await
        .map_err(|e| format!("pg_stat_statements is needed (shared_preload_libraries): {e}"))?;
    let client = Client::connect(
        &config.url,
        ClientOptions::new()
            .schema(SCHEMA)
            .namespace(NAMESPACE)
            .ttl(TTL),
    )
    .await?;
    // Keys of this run only: the previous run's client gave its leases back for at most the
    // 5 s its close waits, and 100,000 may take longer (the rest expire by themselves).
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let leases: Vec<_> = stream::iter(0..leases_wanted)
        .map(|i| {
            let client = client.clone();
            async move {
                let key = format!("bench-keepalive/{run}/{i}");
                match client.try_acquire(&key, AcquireOptions::new()).await {
                    Ok(Some(lease)) => Ok(lease),
                    Ok(None) => Err(format!("{key} is held")),
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .buffer_unordered(64)
        .try_collect()
        .await?;
    // One renewal round first, so that leases acquired over a second or two fall into step.
    tokio::time::sleep(TTL / 2).await;

    let renew_ms_before = renew_time_ms(&db).await?;
    let calls_before = statements(&db).await?;
    let ticks_before = client.keepalive_statements();
    let renewals_before = client.keepalive_renewals();
    let cpu_before = cpu_time();
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let cpu = cpu_time() - cpu_before;
    let elapsed = started.elapsed();
    let ticks = client.keepalive_statements() - ticks_before;
    let renewals = client.keepalive_renewals() - renewals_before;
    let calls_after = statements(&db).await?;
    let renew_ms = renew_time_ms(&db).await? - renew_ms_before;
    // The counting query itself ran once in between (the first call is counted after it ends).
    let calls = calls_after - calls_before - 1;

    let lost = leases.iter().filter(|l| l.is_lost()).count();
    if lost > 0 {
        // Why, by the core's reasons: not renewed in time, or no longer recorded.
        let mut reasons = std::collections::BTreeMap::new();
        for lease in &leases {
            if let Some(why) = lease.status().lost_reason() {
                *reasons.entry(why.as_str()).or_insert(0usize) += 1;
            }
        }
        return Err(format!(
            "{lost} of {leases_wanted} leases were lost while held ({reasons:?}; {} keepalive \
             statements sent)",
            client.keepalive_statements()
        )
        .into());
    }
    let expected_ticks = elapsed.as_secs_f64() / (TTL / 3).as_secs_f64();
    let mut record = Record::new(
        "rust/keepalive",
        format!(
            "accord: {leases_wanted} leases held by one client, ttl {} s",
            TTL.as_secs()
        ),
    );
    record.ops = ticks as usize;
    record.elapsed = elapsed;
    record.metric("leases", leases_wanted as u64);
    record.metric("ttl_s", TTL.as_secs());
    record.metric("window_s", elapsed.as_secs_f64());
    record.metric("statements", calls);
    record.metric("statements_per_s", calls as f64 / elapsed.as_secs_f64());
    record.metric("keepalive_ticks", ticks);
    record.metric("expected_ticks", expected_ticks);
    // Every statement the database ran, per renewal statement the keepalive sent: above 1, something
    // else talked to the database while the client only held leases.
    record.metric("statements_per_tick", calls as f64 / ticks.max(1) as f64);
    // Leases renewed: the leases times the periods when each is renewed once per period.
    record.metric("rows_renewed", renewals);
    record.metric(
        "renewals_per_lease_and_period",
        renewals as f64 / leases_wanted as f64 / expected_ticks.max(1e-9),
    );
    // Statements per renewal period: one per RENEW_CHUNK (10,000) leases.
    record.metric(
        "statements_per_period",
        leases_wanted.div_ceil(10_000) as u64,
    );
    record.metric("server_ms_per_statement", renew_ms / ticks.max(1) as f64);
    record.metric("client_cpu_s", cpu.as_secs_f64());
    record.metric(
        "client_cpu_percent_of_core",
        100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64(),
    );
    client.close().await;
    Ok(vec![record])
}
