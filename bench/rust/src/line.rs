//! Scenario 10: waiting in line and elections. Hand-off latency from the holder starting its
//! release to the next waiter holding the key, with 1 waiter and with 32 waiters in line (each
//! released as soon as granted, so every hand-off of a round goes through a full line), against
//! 32 waiters retrying the same acquire statement every 10 ms; how many waiters each release
//! woke (target 1: the head of the line); and an election's failover time, after the leader
//! resigns and after its process is killed with SIGKILL (a child process of this program,
//! leading with a 1 s ttl: the failover is bounded by the ttl).
//!
//! Run with the cluster's fsync setting and, where the bench may change it, again with fsync
//! and synchronous_commit on (the `-fsync` ids), as scenario 8 does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use accord::{AcquireOptions, CampaignOptions, Client, ClientOptions};

use crate::pool::{durable, fsync_modes};
use crate::raw::{self, AccordSql, Prepared};
use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

const LINE: usize = 32;
/// Clients the 32 waiters are spread over (4 waiters each): wake-ups are counted per client.
const CLIENTS: usize = 8;
const POLL_EVERY: Duration = Duration::from_millis(10);
/// The killed leader's ttl: its failover should take about this long.
const KILLED_TTL: Duration = Duration::from_secs(1);

fn options() -> ClientOptions {
    ClientOptions::new()
        .schema(SCHEMA)
        .namespace(NAMESPACE)
        .pool_size(2)
}

/// Waits until `clients` together hold `n` places in line.
async fn until_queued(clients: &[Client], n: usize) -> BenchResult<()> {
    let started = Instant::now();
    while clients.iter().map(Client::queued_count).sum::<usize>() < n {
        if started.elapsed() > Duration::from_secs(30) {
            return Err("waiters never stood in line".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Rounds of `waiters` accord waiters behind one holder; each granted waiter records when it
/// holds and releases at once. Returns the hand-off samples and the wake-ups per release.
async fn accord_line(
    url: &str,
    key: &str,
    waiters: usize,
    rounds: usize,
) -> BenchResult<(Vec<Duration>, f64)> {
    let holder = Client::connect(url, options()).await?;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS.min(waiters) {
        clients.push(Client::connect(url, options()).await?);
    }
    let mut samples = Vec::new();
    let woken_before: u64 = clients.iter().map(Client::waiter_wakeups).sum();
    // The first round also sets up the listening connections: not measured.
    for round in 0..=rounds {
        let held = holder
            .try_acquire(key, AcquireOptions::new())
            .await?
            .ok_or("the line's key is held")?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for i in 0..waiters {
            let client = clients[i % clients.len()].clone();
            let (tx, key) = (tx.clone(), key.to_string());
            tasks.push(tokio::spawn(async move {
                let lease = client
                    .acquire(&key, AcquireOptions::new().timeout(Duration::from_secs(30)))
                    .await?;
                let holds_at = Instant::now();
                // The next hand-off starts with this release.
                let _ = tx.send((holds_at, Instant::now()));
                lease.release().await?;
                BenchResult::Ok(())
            }));
            until_queued(&clients, i + 1).await?;
        }
        let mut released_at = Instant::now();
        held.release().await?;
        for _ in 0..waiters {
            let (holds_at, next_release) = rx.recv().await.ok_or("a waiter vanished")?;
            if round > 0 {
                samples.push(holds_at.saturating_duration_since(released_at));
            }
            released_at = next_release;
        }
        for task in tasks {
            task.await??;
        }
    }
    let woken: u64 = clients.iter().map(Client::waiter_wakeups).sum::<u64>() - woken_before;
    // The unmeasured first round's wake-ups count too: one per release there as well.
    let per_release = woken as f64 / ((rounds + 1) * waiters) as f64;
    holder.close().await;
    for c in clients {
        c.close().await;
    }
    Ok((samples, per_release))
}

/// The same line with waiters that retry the acquire statement every 10 ms (any order).
async fn polling_line(url: &str, key: &str, rounds: usize) -> BenchResult<Vec<Duration>> {
    let sql = Arc::new(AccordSql::new()?);
    let holder = raw::connect(url).await?;
    let holder_stmts = Prepared::on(&holder, &sql).await?;
    let mut conns = Vec::new();
    for _ in 0..LINE {
        let conn = Arc::new(raw::connect(url).await?);
        let stmts = Arc::new(Prepared::on(&conn, &sql).await?);
        conns.push((conn, stmts));
    }
    let mut samples = Vec::new();
    for round in 0..=rounds {
        let fence = holder_stmts
            .try_acquire(&holder, key)
            .await?
            .ok_or("the line's key is held")?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (conn, stmts) in &conns {
            let (conn, stmts, tx) = (conn.clone(), stmts.clone(), tx.clone());
            let key = key.to_string();
            tasks.push(tokio::spawn(async move {
                loop {
                    if let Some(fence) = stmts.try_acquire(&conn, &key).await? {
                        let holds_at = Instant::now();
                        let _ = tx.send((holds_at, Instant::now()));
                        stmts.release(&conn, &key, fence).await?;
                        return BenchResult::Ok(());
                    }
                    tokio::time::sleep(POLL_EVERY).await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut released_at = Instant::now();
        holder_stmts.release(&holder, key, fence).await?;
        for _ in 0..LINE {
            let (holds_at, next_release) = rx.recv().await.ok_or("a poller vanished")?;
            if round > 0 {
                samples.push(holds_at.saturating_duration_since(released_at));
            }
            released_at = next_release;
        }
        for task in tasks {
            task.await??;
        }
    }
    Ok(samples)
}

/// Failover after a resignation: the leader resigns, the campaigner waiting in line leads.
async fn resign_failovers(url: &str, n: usize) -> BenchResult<Vec<Duration>> {
    let a = Client::connect(url, options()).await?;
    let b = Client::connect(url, options()).await?;
    let mut samples = Vec::new();
    for i in 0..=n {
        let (leader, heir) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let leadership = leader
            .election("bench-resign")?
            .campaign("leader", CampaignOptions::new())
            .await?;
        let election = heir.election("bench-resign")?;
        let waiting = tokio::spawn(async move {
            let l = election
                .campaign(
                    "heir",
                    CampaignOptions::new().timeout(Duration::from_secs(30)),
                )
                .await?;
            BenchResult::Ok((Instant::now(), l))
        });
        until_queued(std::slice::from_ref(heir), 1).await?;
        let resigned_at = Instant::now();
        leadership.resign().await?;
        let (leads_at, next) = waiting.await??;
        if i > 0 {
            samples.push(leads_at.saturating_duration_since(resigned_at));
        }
        next.resign().await?;
    }
    a.close().await;
    b.close().await;
    Ok(samples)
}

/// Failover after SIGKILL: a child process of this program leads with a 1 s ttl and is
/// killed; the campaigner waiting in line leads once the lease expired.
async fn kill_failovers(url: &str, n: usize) -> BenchResult<Vec<Duration>> {
    let heir = Client::connect(url, options()).await?;
    let mut samples = Vec::new();
    for _ in 0..n {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .env("ACCORD_BENCH_CHILD", "campaign")
            .env("ACCORD_BENCH_URL", url)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no child stdout")?;
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        match lines.next_line().await? {
            Some(line) if line == "LEADER" => {}
            other => return Err(format!("the child leader said {other:?}").into()),
        }
        let election = heir.election("bench-kill")?;
        let waiting = tokio::spawn(async move {
            let l = election
                .campaign(
                    "heir",
                    CampaignOptions::new().timeout(Duration::from_secs(30)),
                )
                .await?;
            BenchResult::Ok((Instant::now(), l))
        });
        until_queued(std::slice::from_ref(&heir), 1).await?;
        let killed_at = Instant::now();
        child.start_kill()?;
        child.wait().await?;
        let (leads_at, next) = waiting.await??;
        samples.push(leads_at.saturating_duration_since(killed_at));
        next.resign().await?;
    }
    heir.close().await;
    Ok(samples)
}

/// The child process of [`kill_failovers`]: leads `bench-kill` with a 1 s ttl, says LEADER,
/// and waits to be killed.
pub async fn campaign_child() -> BenchResult<()> {
    let url = std::env::var("ACCORD_BENCH_URL")?;
    let client = Client::connect(&url, options()).await?;
    let _leadership = client
        .election("bench-kill")?
        .campaign("child", CampaignOptions::new().ttl(KILLED_TTL))
        .await?;
    println!("LEADER");
    std::future::pending::<()>().await;
    Ok(())
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let db = raw::connect(&config.url).await?;
    let (fsync_before, modes) = fsync_modes(&db).await?;
    let handoffs = (config.pairs / 25).max(10);
    let rounds = (config.pairs / 1000).max(1);
    let failovers = (config.pairs / 250).max(3);
    let kills = if config.pairs >= 1000 { 3 } else { 1 };
    let mut records = Vec::new();
    for &fsync in &modes {
        if fsync && fsync_before != "on" {
            durable(&db, &config.url, true).await?;
        }
        let id = |plain: &'static str, durable: &'static str| if fsync { durable } else { plain };
        let mut one = Record::new(
            id("rust/line-handoff-1", "rust/line-handoff-1-fsync"),
            "accord: 1 waiter in line, woken by the release",
        );
        let started = Instant::now();
        let (samples, per_release) =
            accord_line(&config.url, "bench-rust/line-1", 1, handoffs).await?;
        one.add(samples, started.elapsed());
        one.metric("wakeups_per_release", per_release);
        one.metric("fsync", u64::from(fsync));
        let mut line = Record::new(
            id("rust/line-handoff-32", "rust/line-handoff-32-fsync"),
            "accord: 32 waiters in line (8 clients), each release wakes the head",
        );
        let started = Instant::now();
        let (samples, per_release) =
            accord_line(&config.url, "bench-rust/line-32", LINE, rounds).await?;
        line.add(samples, started.elapsed());
        line.metric("wakeups_per_release", per_release);
        line.metric("fsync", u64::from(fsync));
        let mut poll = Record::new(
            id(
                "rust/line-handoff-32-poll-10ms",
                "rust/line-handoff-32-poll-10ms-fsync",
            ),
            "raw SQL: 32 waiters retrying the acquire statement every 10 ms",
        );
        let started = Instant::now();
        let samples = polling_line(&config.url, "bench-rust/line-32-poll", rounds).await?;
        poll.add(samples, started.elapsed());
        poll.metric("fsync", u64::from(fsync));
        let mut resign = Record::new(
            id("rust/election-resign", "rust/election-resign-fsync"),
            "accord: the leader resigns → the next campaigner leads",
        );
        let started = Instant::now();
        resign.add(
            resign_failovers(&config.url, failovers).await?,
            started.elapsed(),
        );
        resign.metric("fsync", u64::from(fsync));
        let mut kill = Record::new(
            id("rust/election-kill", "rust/election-kill-fsync"),
            "accord: the leader's process is killed (SIGKILL, 1 s ttl) → the next leads",
        );
        let started = Instant::now();
        kill.add(kill_failovers(&config.url, kills).await?, started.elapsed());
        kill.metric("ttl_ms", KILLED_TTL.as_millis() as u64);
        kill.metric("fsync", u64::from(fsync));
        records.extend([one, line, poll, resign, kill]);
        if fsync && fsync_before != "on" {
            durable(&db, &config.url, false).await?;
        }
    }
    Ok(records)
}
