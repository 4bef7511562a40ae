//! Scenario 14: accord on etcd (the feature `etcd`), on the cluster of ACCORD_BENCH_ETCD_URL,
//! against etcd's own Go lock (`concurrency.Mutex`, bench/etcd-go: the floor of a lock on etcd)
//! and beside accord on PostgreSQL made durable (fsync and synchronous_commit on), each
//! workload run by the same code on both stores: try_acquire + release on one key, 64 tasks on
//! keys of their own, the hand-off from a release to a waiting acquire, and the keepalive of
//! 10,000 leases, whose keep-alive messages the members count themselves (their /metrics).

use std::time::{Duration, Instant};

use accord::{AcquireOptions, Client, ClientOptions};
use futures_util::{future::try_join_all, stream, StreamExt, TryStreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::keepalive::cpu_time;
use crate::record::Record;
use crate::{pool, raw, BenchResult, Config, NAMESPACE, SCHEMA};

const TASKS: usize = crate::concurrent::TASKS;
/// As scenario 5's: 15 ticks in the window (accord renews every ttl/3).
const KEEPALIVE_TTL: Duration = Duration::from_secs(6);

/// The two stores every workload runs on.
#[derive(Clone, Copy)]
enum Store {
    Etcd,
    Postgres,
}

impl Store {
    fn suffix(self) -> &'static str {
        match self {
            Store::Etcd => "",
            Store::Postgres => "-pg",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Store::Etcd => "etcd",
            Store::Postgres => "PostgreSQL, durable",
        }
    }

    fn id(self, base: &str) -> &'static str {
        Box::leak(format!("rust/etcd-{base}{}", self.suffix()).into_boxed_str())
    }

    async fn client(
        self,
        config: &Config,
        etcd_url: &str,
        ttl: Option<Duration>,
    ) -> BenchResult<Client> {
        let mut options = ClientOptions::new().namespace(NAMESPACE);
        if let Some(ttl) = ttl {
            options = options.ttl(ttl);
        }
        Ok(match self {
            Store::Etcd => Client::connect(etcd_url, options).await?,
            Store::Postgres => Client::connect(&config.url, options.schema(SCHEMA)).await?,
        })
    }
}

async fn pairs(client: &Client, key: &str, n: usize) -> BenchResult<(Vec<Duration>, Duration)> {
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        raw::accord_pair(client, key).await?;
        samples.push(t.elapsed());
    }
    Ok((samples, started.elapsed()))
}

/// The calls the client made to its store per measured pair (etcd: gRPC calls; PostgreSQL:
/// statements, which accord groups across tasks), since `before`.
fn calls_per_pair(record: &mut Record, client: &Client, before: u64) {
    let calls = client.stats().statements - before;
    record.metric("calls_per_pair", calls as f64 / record.ops.max(1) as f64);
}

async fn uncontended(store: Store, config: &Config, url: &str) -> BenchResult<Record> {
    let client = store.client(config, url, None).await?;
    let mut record = Record::new(
        store.id("accord"),
        format!("accord on {}, try_acquire + release", store.name()),
    );
    let key = format!("bench-{}", record.id);
    pairs(&client, &key, config.warmup).await?;
    let calls = client.stats().statements;
    for half in [config.pairs / 2, config.pairs - config.pairs / 2] {
        let (samples, elapsed) = pairs(&client, &key, half).await?;
        record.add(samples, elapsed);
    }
    calls_per_pair(&mut record, &client, calls);
    client.close().await;
    Ok(record)
}

/// Every task `per_task` pairs on a key of its own; every pair's latency and the wall time.
async fn tasks_round(
    client: &Client,
    id: &str,
    per_task: usize,
) -> BenchResult<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let tasks = (0..TASKS).map(|task| {
        let client = client.clone();
        let key = format!("bench-{id}/{task}");
        tokio::spawn(async move { pairs(&client, &key, per_task).await })
    });
    let mut samples = Vec::new();
    for task in try_join_all(tasks).await? {
        samples.extend(task?.0);
    }
    Ok((samples, started.elapsed()))
}

async fn concurrent(store: Store, config: &Config, url: &str) -> BenchResult<Record> {
    let client = store.client(config, url, None).await?;
    let mut record = Record::new(
        store.id("accord-64"),
        format!("accord on {}, {TASKS} tasks, one client", store.name()),
    );
    let id = record.id;
    tasks_round(&client, id, (config.warmup / 25).max(2)).await?;
    let per_task = (config.pairs / 25).max(8);
    let calls = client.stats().statements;
    for _half in 0..2 {
        let (samples, elapsed) = tasks_round(&client, id, per_task / 2).await?;
        record.add(samples, elapsed);
    }
    calls_per_pair(&mut record, &client, calls);
    record.metric("tasks", TASKS as u64);
    client.close().await;
    Ok(record)
}

async fn handoff(store: Store, config: &Config, url: &str) -> BenchResult<Record> {
    let holder = store.client(config, url, None).await?;
    let waiter = store.client(config, url, None).await?;
    let mut record = Record::new(
        store.id("handoff-accord"),
        format!(
            "accord on {}: waiting acquire woken by the release",
            store.name()
        ),
    );
    let key = format!("bench-{}", record.id);
    let n = (config.pairs / 25).max(10);
    let started = Instant::now();
    let mut samples = Vec::with_capacity(n);
    // The first hand-off also sets up the waiter's watch or listening connection: not measured.
    for i in 0..=n {
        let held = holder
            .try_acquire(&key, AcquireOptions::new())
            .await?
            .ok_or("handoff key is held")?;
        let waiting = {
            let (waiter, key) = (waiter.clone(), key.clone());
            tokio::spawn(async move {
                let options = AcquireOptions::new().timeout(Duration::from_secs(10));
                let lease = waiter.acquire(&key, options).await?;
                let holds_at = Instant::now();
                lease.release().await?;
                BenchResult::Ok(holds_at)
            })
        };
        // Long enough for the waiter to be in line; random, as scenario 3's.
        tokio::time::sleep(Duration::from_micros(rand::random_range(15_000..25_000))).await;
        let released_at = Instant::now();
        held.release().await?;
        let holds_at = waiting.await??;
        if i > 0 {
            samples.push(holds_at.saturating_duration_since(released_at));
        }
    }
    record.add(samples, started.elapsed());
    holder.close().await;
    waiter.close().await;
    Ok(record)
}

/// One member's counter `name` with `labels` (a substring of its label set), from /metrics.
async fn member_counter(member: &str, name: &str, labels: &str) -> BenchResult<f64> {
    let mut stream = tokio::net::TcpStream::connect(member).await?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {member}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    Ok(body
        .lines()
        .filter(|line| line.starts_with(name) && line.contains(labels))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// The keep-alive messages and transactions every member has received so far.
async fn etcd_counts(members: &[String]) -> BenchResult<(f64, f64)> {
    let (mut keepalives, mut txns) = (0.0, 0.0);
    for member in members {
        keepalives += member_counter(
            member,
            "grpc_server_msg_received_total",
            "grpc_method=\"LeaseKeepAlive\"",
        )
        .await?;
        txns += member_counter(member, "grpc_server_handled_total", "grpc_method=\"Txn\"").await?;
    }
    Ok((keepalives, txns))
}

async fn keepalive(
    store: Store,
    config: &Config,
    url: &str,
    members: &[String],
) -> BenchResult<Record> {
    let leases_wanted = config.etcd_keepalive_leases;
    let client = store.client(config, url, Some(KEEPALIVE_TTL)).await?;
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let leases: Vec<_> = stream::iter(0..leases_wanted)
        .map(|i| {
            let client = client.clone();
            async move {
                let key = format!("bench-etcd-keepalive/{}/{run}/{i}", std::process::id());
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
    tokio::time::sleep(KEEPALIVE_TTL / 2).await;
    let counts_before = match store {
        Store::Etcd => Some(etcd_counts(members).await?),
        Store::Postgres => None,
    };
    let ticks_before = client.keepalive_statements();
    let calls_before = client.stats().statements;
    let cpu_before = cpu_time();
    let started = Instant::now();
    tokio::time::sleep(config.keepalive_window).await;
    let cpu = cpu_time() - cpu_before;
    let elapsed = started.elapsed();
    let ticks = client.keepalive_statements() - ticks_before;
    let calls = client.stats().statements - calls_before;
    let lost = leases.iter().filter(|l| l.is_lost()).count();
    if lost > 0 {
        return Err(format!(
            "{lost} of {leases_wanted} leases on {} were lost while held",
            store.name()
        )
        .into());
    }
    let periods = elapsed.as_secs_f64() / (KEEPALIVE_TTL / 3).as_secs_f64();
    let mut record = Record::new(
        store.id("keepalive"),
        format!(
            "accord on {}: {leases_wanted} leases held by one client, ttl {} s",
            store.name(),
            KEEPALIVE_TTL.as_secs()
        ),
    );
    record.ops = ticks as usize;
    record.elapsed = elapsed;
    record.metric("leases", leases_wanted as u64);
    record.metric("ttl_s", KEEPALIVE_TTL.as_secs());
    record.metric("window_s", elapsed.as_secs_f64());
    record.metric("periods", periods);
    record.metric("keepalive_ticks", ticks);
    // Every call the client made to its store in the window (etcd: gRPC calls and keep-alive
    // messages; PostgreSQL: statements), per renewal period.
    record.metric("calls_per_period", calls as f64 / periods.max(1e-9));
    if let Some((keepalives_before, txns_before)) = counts_before {
        let (keepalives, txns) = etcd_counts(members).await?;
        // ttl classes: one etcd lease per class of whole seconds; all leases here are one class.
        record.metric("ttl_classes", 1);
        record.metric(
            "keepalive_messages_per_period",
            (keepalives - keepalives_before) / periods.max(1e-9),
        );
        record.metric("txns_per_period", (txns - txns_before) / periods.max(1e-9));
    }
    record.metric(
        "client_cpu_percent_of_core",
        100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64(),
    );
    client.close().await;
    Ok(record)
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let url = config
        .etcd_url
        .clone()
        .ok_or("scenario 14 needs ACCORD_BENCH_ETCD_URL (etcd://host:port,…)")?;
    let members: Vec<String> = url
        .trim_start_matches("etcd://")
        .split(['?', '/'])
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::to_owned)
        .collect();
    let db = raw::connect(&config.url).await?;
    let (fsync_before, modes) = pool::fsync_modes(&db).await?;
    let mut records = Vec::new();
    let mut stores = vec![Store::Etcd];
    if fsync_before == "on" || modes.contains(&true) {
        stores.push(Store::Postgres);
    } else {
        println!("  (PostgreSQL cannot be made durable here: no PostgreSQL rows)");
    }
    for store in stores {
        let switched = matches!(store, Store::Postgres) && fsync_before != "on";
        if switched {
            pool::durable(&db, &config.url, true).await?;
        }
        let measured = async {
            BenchResult::Ok(vec![
                uncontended(store, config, &url).await?,
                concurrent(store, config, &url).await?,
                handoff(store, config, &url).await?,
                keepalive(store, config, &url, &members).await?,
            ])
        }
        .await;
        if switched {
            pool::durable(&db, &config.url, false).await?;
        }
        records.extend(measured?);
    }
    Ok(records)
}
