//! `accord-bench`: the Rust part of `make bench` (bench/README.md). Runs scenarios 1–5, 8 (a
//! work pool), 10 (waiting in line, elections), 11 (durable streams), 12 (a million keys) and 13
//! (the cost of stats), 15 (fenced writes) of the
//! benchmark, and with the feature `etcd` scenario 14 (accord on etcd, ACCORD_BENCH_ETCD_URL), against the database in ACCORD_BENCH_URL and writes their raw samples to
//! ACCORD_BENCH_OUT for bench/report.py.

mod concurrent;
#[cfg(feature = "etcd")]
mod etcd;
mod fenced;
mod handoff;
mod keepalive;
mod line;
mod million;
mod notify;
mod pool;
mod raw;
mod record;
mod stats_cost;
mod streams;
mod uncontended;

use record::Record;

use std::time::Duration;

use clap::Parser;
use serde_json::json;

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Every contender's rows live here, apart from the tests' schemas.
pub const SCHEMA: &str = "accord_bench";
pub const NAMESPACE: &str = "bench";

#[derive(Parser)]
#[command(
    about = "accord's Rust benchmarks (scenarios 1-5, 8, 10-13 and 15; 14 with the feature etcd); see bench/README.md"
)]
struct Args {
    /// Scenarios to run, e.g. `1,3`.
    #[arg(long, value_delimiter = ',', default_values_t = [1u8, 2, 3, 4, 5, 8, 10, 11, 12, 13, 15])]
    scenarios: Vec<u8>,
    /// The database (a throwaway one: the bench writes to schema accord_bench).
    #[arg(long, env = "ACCORD_BENCH_URL")]
    url: String,
    /// Where to write the results (JSON).
    #[arg(long, env = "ACCORD_BENCH_OUT")]
    out: std::path::PathBuf,
    /// Measured try_acquire+release pairs per contender in scenario 1 (the other scenarios
    /// scale from it).
    #[arg(long, env = "ACCORD_BENCH_PAIRS", default_value_t = 5000)]
    pairs: usize,
    /// Unmeasured pairs per contender first.
    #[arg(long, env = "ACCORD_BENCH_WARMUP", default_value_t = 500)]
    warmup: usize,
    /// Scenario 5's measured window, in seconds.
    #[arg(long, env = "ACCORD_BENCH_KEEPALIVE_SECONDS", default_value_t = 30)]
    keepalive_seconds: u64,
    /// The server's CA certificate (PEM): scenario 1 then also runs accord and raw SQL over
    /// TLS (sslmode=verify-full), apart from the TLS-less rows the targets are judged on.
    #[arg(long, env = "ACCORD_BENCH_TLS_ROOT_CERT")]
    tls_root_cert: Option<String>,
    /// Scenario 5's leases.
    #[arg(long, default_value_t = 100_000)]
    keepalive_leases: usize,
    /// Scenario 8's keys (the work pool drained).
    #[arg(long, default_value_t = 2000)]
    pool_keys: usize,
    /// Scenario 8's workers (tasks, each with a client of its own).
    #[arg(long, default_value_t = 8)]
    pool_workers: usize,
    /// Scenario 12's keys in one namespace.
    #[arg(long, default_value_t = 1_000_000)]
    million_keys: usize,
    /// Scenario 14's etcd cluster (`etcd://host:port,…`; the build needs the feature `etcd`).
    #[arg(long, env = "ACCORD_BENCH_ETCD_URL")]
    etcd_url: Option<String>,
    /// Scenario 14's leases kept alive (on etcd, and on PostgreSQL beside it).
    #[arg(long, default_value_t = 10_000)]
    etcd_keepalive_leases: usize,
}

pub struct Config {
    pub url: String,
    pub pairs: usize,
    pub warmup: usize,
    pub keepalive_window: Duration,
    pub keepalive_leases: usize,
    pub tls_root_cert: Option<String>,
    pub pool_keys: usize,
    pub pool_workers: usize,
    pub million_keys: usize,
    pub etcd_url: Option<String>,
    pub etcd_keepalive_leases: usize,
}

/// The scenarios measured in both fsync modes by this file (the others do it themselves).
const TWICE: [u8; 6] = [1, 2, 3, 4, 5, 15];

async fn run_scenario(scenario: u8, config: &Config) -> BenchResult<Vec<Record>> {
    Ok(match scenario {
        1 => uncontended::run(config).await?,
        2 => concurrent::run(config).await?,
        3 => handoff::run(config).await?,
        4 => notify::run(config).await?,
        5 => keepalive::run(config).await?,
        8 => pool::run(config).await?,
        10 => line::run(config).await?,
        11 => streams::run(config).await?,
        12 => million::run(config).await?,
        13 => stats_cost::run(config).await?,
        15 => fenced::run(config).await?,
        #[cfg(feature = "etcd")]
        14 => etcd::run(config).await?,
        #[cfg(not(feature = "etcd"))]
        14 => {
            return Err(
                "scenario 14 (etcd) needs accord-bench built with the feature `etcd`".into(),
            )
        }
        other => {
            return Err(
                format!("there is no scenario {other} (1-5, 8, 10, 11, 12, 13, 14, 15)").into(),
            )
        }
    })
}

#[tokio::main]
async fn main() -> BenchResult<()> {
    // Scenario 10's leader to be killed: this program started again.
    if std::env::var("ACCORD_BENCH_CHILD").as_deref() == Ok("campaign") {
        return line::campaign_child().await;
    }
    let args = Args::parse();
    if args.pairs < 2 {
        return Err("ACCORD_BENCH_PAIRS must be at least 2".into());
    }
    let config = Config {
        url: args.url,
        pairs: args.pairs,
        warmup: args.warmup,
        keepalive_window: Duration::from_secs(args.keepalive_seconds.max(1)),
        keepalive_leases: args.keepalive_leases.max(1),
        tls_root_cert: args.tls_root_cert.filter(|p| !p.is_empty()),
        pool_keys: args.pool_keys.max(1),
        pool_workers: args.pool_workers.max(1),
        million_keys: args.million_keys.max(10),
        etcd_url: args.etcd_url.filter(|u| !u.is_empty()),
        etcd_keepalive_leases: args.etcd_keepalive_leases.max(1),
    };
    let server_version: String = raw::connect(&config.url)
        .await?
        .query_one("SHOW server_version", &[])
        .await?
        .get(0);

    // For the other languages' "same statements by hand" contenders (bench/README.md).
    let sql = raw::AccordSql::new()?;
    let statements = args.out.with_file_name("statements.json");
    std::fs::write(&statements, serde_json::to_string_pretty(&sql.to_json())?)
        .map_err(|e| format!("cannot write {}: {e}", statements.display()))?;

    // Scenarios 1-5 run in the cluster's fsync mode and, when the bench may change it, again
    // on a durable server (the `-fsync` ids); the others switch modes themselves.
    let db = raw::connect(&config.url).await?;
    let (fsync_before, modes) = pool::fsync_modes(&db).await?;
    let already_durable = fsync_before == "on";
    let mut records = Vec::new();
    for scenario in &args.scenarios {
        println!("scenario {scenario}");
        let both = TWICE.contains(scenario);
        let mut found: Vec<Record> = run_scenario(*scenario, &config)
            .await?
            .into_iter()
            .map(|r| {
                if both && already_durable {
                    r.durable()
                } else {
                    r
                }
            })
            .collect();
        if both && !already_durable && modes.contains(&true) {
            println!("scenario {scenario}, fsync and synchronous_commit on");
            pool::durable(&db, &config.url, true).await?;
            let durable = run_scenario(*scenario, &config).await;
            pool::durable(&db, &config.url, false).await?;
            found.extend(durable?.into_iter().map(Record::durable));
        }
        for record in &found {
            println!("  {}", record.summary());
        }
        records.extend(found);
    }
    let out = json!({
        "source": "rust",
        "versions": {
            "accord": env!("CARGO_PKG_VERSION"),
            "postgresql": server_version,
        },
        "results": records.iter().map(record::Record::to_json).collect::<Vec<_>>(),
    });
    std::fs::write(&args.out, serde_json::to_string(&out)?)
        .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
    Ok(())
}
