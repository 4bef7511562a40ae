//! Work pools from a shell: `accord offer`, `accord counts` and `accord work` (xargs -P across
//! machines).

use std::collections::HashSet;
use std::io::{BufRead, IsTerminal};
use std::sync::Mutex;
use std::time::Duration;

use accord::{CancellationToken, ClaimOptions, Client, ErrorKind, Lease, Metadata, PoolCounts};
use futures_util::future::join_all;

use crate::{exit, exit_code_of, send_signal, signals, supervise, Failure, Outcome};

/// How long an idle worker's claim waits for a release, an offer or an expiry before it asks
/// the pool's counts whether anything is left.
const CLAIM_WAIT: Duration = Duration::from_secs(1);
/// How often an idle worker looks again when the only free keys are ones whose command failed
/// here (a claim would return them at once, so it cannot wait).
const FAILED_POLL: Duration = Duration::from_millis(500);
/// `accord counts --watch`'s refresh.
const WATCH_EVERY: Duration = Duration::from_secs(1);

pub const WORK_HELP: &str = "\
Each worker claims up to --batch free keys of the pool PREFIX at once and runs the command for
each in turn, `{}` in its arguments replaced by the key (wherever it appears; the key is not
appended when there is none), with ACCORD_KEY, ACCORD_FENCE, ACCORD_NAMESPACE and ACCORD_OWNER in
its environment and its stdin empty. The workers are tasks of this process sharing one client.
Exit 0 marks the key done; any other exit releases it (free again). A key whose command failed is
not taken again by this process (another `accord work` may take it; the next run retries it).
While a command runs its lease is renewed; if the lease is lost, the command is stopped (SIGTERM,
then SIGKILL after --kill-after), the key is reported lost and the worker goes on. The command
is supervised as `accord run`'s is (see `accord run --help`).

accord work stops when a claim finds nothing and the pool's counts say no key is free or held
(keys whose command failed here aside). SIGINT and SIGTERM are forwarded to the running commands;
no new key is claimed, keys claimed but not started are released, and accord exits with 130/143.

Exit status: 0 when every command succeeded; 123 if some command failed (like xargs); 5 if a
lease was lost; 127/126 if the command could not be started (then no further key is started).

Examples:
  seq -f 'img/%04g' 1 500 | accord offer img/
  accord work img/ -j 8 -- ./resize.sh {}
  accord work crawl/ -j 4 --batch 10 --ttl 2m -- sh -c 'fetch \"$ACCORD_KEY\" > \"out/$ACCORD_FENCE\"'";

// ------------------------------------------------------------------------------------- offer

/// Offers the keys on stdin (one a line; blank lines skipped) in calls of at most
/// MAX_OFFER_KEYS; prints how many joined.
pub async fn offer(client: &Client, prefix: &str, metadata: Option<Metadata>) -> Outcome {
    let stdin = std::io::stdin();
    let mut batch: Vec<String> = Vec::new();
    let (mut read, mut joined) = (0u64, 0u64);
    let mut lines = stdin.lock().lines();
    loop {
        let line = lines
            .next()
            .transpose()
            .map_err(|e| Failure::new(exit::ERROR, format!("cannot read keys from stdin: {e}")))?;
        let end = line.is_none();
        if let Some(line) = line {
            let key = line.strip_suffix('\r').unwrap_or(&line);
            if !key.is_empty() {
                batch.push(key.to_string());
                read += 1;
            }
        }
        if batch.len() == accord::limits::MAX_OFFER_KEYS || (end && !batch.is_empty()) {
            let keys = std::mem::take(&mut batch);
            joined += client.offer(prefix, keys, metadata.clone()).await?;
        }
        if end {
            break;
        }
    }
    crate::output::print(&mut crate::output::stdout(), &format!("{joined}\n"))?;
    note!(
        "accord: offered {read} key{} to {prefix:?}: {joined} joined, {} already known",
        if read == 1 { "" } else { "s" },
        read - joined
    );
    Ok(exit::OK)
}

// ------------------------------------------------------------------------------------ counts

fn counts_json(c: &PoolCounts) -> String {
    serde_json::json!({"free": c.free, "held": c.held, "done": c.done, "total": c.total()})
        .to_string()
}

fn counts_line(c: &PoolCounts) -> String {
    format!(
        "free {}  held {}  done {}  total {}",
        c.free,
        c.held,
        c.done,
        c.total()
    )
}

fn progress_bar(c: &PoolCounts, width: usize) -> String {
    let total = c.total().max(1);
    let done = (c.done as u128 * width as u128 / total as u128) as usize;
    let held = ((c.done + c.held) as u128 * width as u128 / total as u128) as usize - done;
    format!(
        "[{}{}{}] {:>3}%  {}",
        "#".repeat(done),
        ">".repeat(held),
        ".".repeat(width - done - held),
        c.done * 100 / total,
        counts_line(c)
    )
}

/// Prints the pool's counts; with `watch`, every second until nothing is free or held (a
/// progress bar redrawn in place on a terminal, a line each time otherwise).
pub async fn counts(client: &Client, prefix: &str, json: bool, watch: bool) -> Outcome {
    let mut out = crate::output::stdout();
    let write = |out: &mut std::io::Stdout, s: &str| crate::output::print(out, s);
    if !watch {
        let c = client.counts(prefix).await?;
        let line = if json {
            counts_json(&c)
        } else {
            counts_line(&c)
        };
        write(&mut out, &format!("{line}\n"))?;
        return Ok(exit::OK);
    }
    let bar = !json && out.is_terminal();
    let (mut int, mut term) = signals()?;
    let mut tick = tokio::time::interval(WATCH_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = int.recv() => { if bar { write(&mut out, "\n")?; } return Ok(130); }
            _ = term.recv() => { if bar { write(&mut out, "\n")?; } return Ok(143); }
        }
        let c = client.counts(prefix).await?;
        let finished = c.free == 0 && c.held == 0;
        if bar {
            let end = if finished { "\n" } else { "" };
            crate::output::redraw_line(&mut out, &format!("{}{end}", progress_bar(&c, 40)))?;
        } else {
            let line = if json {
                counts_json(&c)
            } else {
                counts_line(&c)
            };
            write(&mut out, &format!("{line}\n"))?;
        }
        if finished {
            return Ok(exit::OK);
        }
    }
}

// -------------------------------------------------------------------------------------- work

pub struct WorkArgs {
    pub prefix: String,
    pub jobs: usize,
    pub ttl: Duration,
    pub batch: usize,
    pub kill_after: Duration,
    pub command: Vec<String>,
}

/// What the workers share: the stop signal and the tallies.
struct Shared {
    /// Cancelled on SIGINT/SIGTERM, when the command cannot be started, or on a coordinator error.
    stop: CancellationToken,
    /// The signal to forward to running commands once `stop` is cancelled (0: none).
    forward: Mutex<libc::c_int>,
    /// Keys whose command failed here: released, and not taken again by this process.
    failed: Mutex<HashSet<String>>,
    tally: Mutex<Tally>,
}

#[derive(Default)]
struct Tally {
    done: u64,
    failed: u64,
    lost: u64,
    /// The command could not be started: 127 (not found) or 126.
    unstartable: Option<u8>,
    /// Done-marking or release that failed for another reason than a lost lease.
    unrecorded: u64,
}

pub async fn work(client: &Client, args: WorkArgs) -> Outcome {
    let (mut int, mut term) = signals()?;
    let shared = Shared {
        stop: CancellationToken::new(),
        forward: Mutex::new(0),
        failed: Mutex::new(HashSet::new()),
        tally: Mutex::new(Tally::default()),
    };
    // Every worker is polled by this task, on the main thread (supervise::spawn needs it).
    let mut workers = Box::pin(join_all((0..args.jobs).map(|_| async {
        let result = worker(client, &args, &shared).await;
        if result.is_err() {
            // A coordinator error ends the run: the other workers finish their command and stop.
            shared.stop.cancel();
        }
        result
    })));
    let mut interrupted: Option<u8> = None;
    let results = loop {
        tokio::select! {
            results = &mut workers => break results,
            _ = int.recv(), if interrupted.is_none() => {
                interrupted = Some(130);
                *shared.forward.lock().unwrap() = libc::SIGINT;
                shared.stop.cancel();
            }
            _ = term.recv(), if interrupted.is_none() => {
                interrupted = Some(143);
                *shared.forward.lock().unwrap() = libc::SIGTERM;
                shared.stop.cancel();
            }
        }
    };
    drop(workers);
    let tally = shared.tally.into_inner().unwrap();
    note!(
        "accord: work {:?}: {} done, {} failed, {} lost{}",
        args.prefix,
        tally.done,
        tally.failed,
        tally.lost,
        if interrupted.is_some() {
            " (interrupted)"
        } else {
            ""
        }
    );
    // The first coordinator error is the answer.
    for r in results {
        r?;
    }
    if let Some(code) = interrupted {
        return Ok(code);
    }
    if let Some(code) = tally.unstartable {
        return Ok(code);
    }
    if tally.lost > 0 {
        return Ok(exit::LOST);
    }
    if tally.failed > 0 || tally.unrecorded > 0 {
        return Ok(exit::SOME_FAILED);
    }
    Ok(exit::OK)
}

/// One worker: claim, run, done or release, until the pool is empty or the run stops.
async fn worker(client: &Client, args: &WorkArgs, shared: &Shared) -> Result<(), Failure> {
    let stop = &shared.stop;
    let claim = |limit: usize, wait: bool| {
        let mut options = ClaimOptions::new()
            .limit(limit.min(accord::limits::MAX_CLAIM_LIMIT))
            .ttl(args.ttl)
            .cancel(stop.clone());
        if wait {
            options = options.timeout(CLAIM_WAIT);
        }
        client.claim(&args.prefix, options)
    };
    loop {
        if stop.is_cancelled() {
            return Ok(());
        }
        // Ask for as many more as there are keys that failed here, which come back first (the
        // oldest offers): they are given back at once.
        let failed_here = shared.failed.lock().unwrap().len();
        let claimed = match claim(args.batch + failed_here, failed_here == 0).await {
            Ok(leases) => leases,
            Err(e) if e.kind() == ErrorKind::Cancelled => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let fresh = give_back_failed(claimed, shared).await?;
        if !fresh.is_empty() {
            run_batch(client, args, shared, fresh).await?;
            continue;
        }
        let c = client.counts(&args.prefix).await?;
        if c.held == 0 && c.free <= failed_here as u64 {
            if failed_here == 0 {
                return Ok(());
            }
            // Counts first, then one more claim: whatever was free then and not failed here
            // comes back now.
            let claimed = match claim(args.batch + failed_here, false).await {
                Ok(leases) => leases,
                Err(e) if e.kind() == ErrorKind::Cancelled => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            let fresh = give_back_failed(claimed, shared).await?;
            if fresh.is_empty() {
                return Ok(());
            }
            run_batch(client, args, shared, fresh).await?;
            continue;
        }
        if failed_here > 0 {
            tokio::select! {
                _ = tokio::time::sleep(FAILED_POLL) => {}
                _ = stop.cancelled() => return Ok(()),
            }
        }
    }
}

/// Releases the claimed keys whose command already failed here; returns the others.
async fn give_back_failed(claimed: Vec<Lease>, shared: &Shared) -> Result<Vec<Lease>, Failure> {
    let mut fresh = Vec::with_capacity(claimed.len());
    for lease in claimed {
        let known = shared.failed.lock().unwrap().contains(lease.key());
        if known {
            release_quietly(&lease).await;
        } else {
            fresh.push(lease);
        }
    }
    Ok(fresh)
}

async fn release_quietly(lease: &Lease) {
    if let Err(e) = lease.release().await {
        if e.kind() != ErrorKind::LeaseLost {
            note!(
                "accord: warning: releasing {:?} failed: {}; it lapses within its ttl",
                lease.key(),
                crate::output::said(&e)
            );
        }
    }
}

/// Runs the command for each claimed key in turn; the keys left when the run stops are
/// released.
async fn run_batch(
    client: &Client,
    args: &WorkArgs,
    shared: &Shared,
    leases: Vec<Lease>,
) -> Result<(), Failure> {
    let mut leases = leases.into_iter();
    for lease in leases.by_ref() {
        if shared.stop.is_cancelled() {
            release_quietly(&lease).await;
            break;
        }
        if lease.is_lost() {
            note!(
                "accord: lost the lease on {:?} (fence {}) before its command started",
                lease.key(),
                lease.fence()
            );
            shared.tally.lock().unwrap().lost += 1;
            continue;
        }
        run_one(client, args, shared, &lease).await;
    }
    for lease in leases {
        release_quietly(&lease).await;
    }
    Ok(())
}

async fn run_one(client: &Client, args: &WorkArgs, shared: &Shared, lease: &Lease) {
    let key = lease.key();
    let fence = lease.fence();
    let argv: Vec<String> = args.command.iter().map(|a| a.replace("{}", key)).collect();
    let mut command = tokio::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .env("ACCORD_KEY", key)
        .env("ACCORD_FENCE", fence.to_string())
        .env("ACCORD_NAMESPACE", client.namespace())
        .env("ACCORD_OWNER", client.owner());
    let mut child = match supervise::spawn(command, args.kill_after).await {
        Ok(child) => child,
        Err(e) => {
            release_quietly(lease).await;
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            note!("accord: error: cannot run {:?}: {e}", argv[0]);
            shared.tally.lock().unwrap().unstartable.get_or_insert(code);
            shared.stop.cancel();
            return;
        }
    };
    let pid = child.id();
    let lost = lease.lost();
    tokio::pin!(lost);
    let mut forwarded = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = &mut lost => {
                note!(
                    "accord: lost the lease on {key:?} (fence {fence}); stopping its command (SIGTERM, SIGKILL after {})",
                    humantime::format_duration(args.kill_after)
                );
                child.shutdown(false).await;
                shared.tally.lock().unwrap().lost += 1;
                return;
            }
            _ = shared.stop.cancelled(), if !forwarded => {
                forwarded = true;
                let sig = *shared.forward.lock().unwrap();
                if sig != 0 {
                    send_signal(pid, sig);
                }
            }
        }
    };
    child.shutdown(status.is_ok()).await;
    let code = match status {
        Ok(status) => exit_code_of(status),
        Err(e) => {
            note!("accord: error: cannot wait for the command of {key:?}: {e}");
            exit::ERROR
        }
    };
    if lease.is_lost() {
        note!(
            "accord: the lease on {key:?} (fence {fence}) was lost before its command ended (exit code {code})"
        );
        shared.tally.lock().unwrap().lost += 1;
        return;
    }
    let finished = if code == 0 {
        lease.done(None).await
    } else {
        note!("accord: the command for {key:?} exited with {code}; releasing it");
        shared.failed.lock().unwrap().insert(key.to_string());
        lease.release().await
    };
    let mut tally = shared.tally.lock().unwrap();
    match finished {
        Ok(()) if code == 0 => tally.done += 1,
        Ok(()) => tally.failed += 1,
        Err(e) if e.kind() == ErrorKind::LeaseLost => {
            note!("accord: the lease on {key:?} (fence {fence}) was lost as its command ended");
            tally.lost += 1;
        }
        Err(e) => {
            note!(
                "accord: warning: {} {key:?} (fence {fence}) failed: {}; the lease lapses within its ttl",
                if code == 0 { "marking done" } else { "releasing" },
                crate::output::said(&e)
            );
            if code == 0 {
                tally.unrecorded += 1;
            } else {
                tally.failed += 1;
            }
        }
    }
}
