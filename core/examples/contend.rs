//! A Rust worker for cross-language checks: the other languages' tests start it beside their
//! own workers, on the same coordinator.
//!
//! ```text
//! contend URL NAMESPACE contend KEY ROUNDS TABLE   # acquire, enter TABLE's critical section, leave, release
//! contend URL NAMESPACE hold KEY MILLIS            # acquire, print "HELD <fence>", hold, release
//! contend URL NAMESPACE hold KEY -                 # the same, held until standard input ends
//! contend URL NAMESPACE notify CHANNEL PAYLOAD     # send one notification
//! contend URL NAMESPACE hammer KEY GRANTS          # try_acquire + release until granted GRANTS times
//! contend URL NAMESPACE drain PREFIX BATCH         # claim BATCH → 1 ms of work → done, until the pool is empty
//! contend URL NAMESPACE fleet FLEET SHARDS TTL_MS PERIOD_MS  # a member of a fleet until SIGTERM or EOF
//! contend URL NAMESPACE wait KEY TTL_MS [shared]   # wait in KEY's line, hold until a stdin line
//! contend URL NAMESPACE campaign NAME VALUE TTL_MS # campaign, lead until a stdin line, resign
//! contend URL NAMESPACE publish STREAM COUNT TAG   # publish COUNT events, 10 at once
//! contend URL NAMESPACE subscribe STREAM CONSUMER COUNT  # read COUNT events from the earliest
//! contend URL NAMESPACE fenced KEYS TTL_MS TABLE   # acquire one of KEYS, insert into TABLE when told
//! ```
//!
//! `contend` proves exclusion without trusting any client: TABLE (created by the caller as
//! `CREATE TABLE t (id int PRIMARY KEY, holder text); INSERT INTO t VALUES (1, NULL)`) has one
//! row whose `holder` a worker sets on entry only if it is empty, and clears on exit only if
//! it is still its own. Either update touching no row means two holders at once: the program
//! prints `VIOLATION` and exits with status 3. Otherwise it prints `OK <rounds>`.
//!
//! `hammer` prints `HAMMER <grants>` at the end (tests/polyglot's grant audit runs it beside
//! Python and Node workers doing the same).
//!
//! `drain` prints `CLAIMED <n>` after its first claim and waits for a line on its standard input
//! before it works, then `DONE <key> <fence>` for every key it finished, and at the end `STATS
//! <claims> <their calls> <all calls>` (claim calls, the store calls made during them, and the
//! client's calls in all: its stats' `statements`) and `DRAINED <n>` (tests/polyglot's pool run,
//! beside Python and Node workers doing the same).
//!
//! `fleet` prints `READY <owner>` once the fleet is open, then a line per event (`ASSIGNED <shard>
//! <fence>`, `REVOKED <shard> <reason> <fence>`); for each assignment it writes the shard's row
//! of the table `fleet_resource` (created by the caller, which sets `ACCORD_FLEET_WRITES=1`)
//! only if its fence is newer than the row's, printing `WROTE <shard> <fence> <1|0>` (accepted or refused). On SIGTERM or the end of
//! its standard input it closes the fleet (printing the `closed` revocations) and prints
//! `CLOSED` (tests/polyglot's fleet run, beside Python and Node members doing the same).
//!
//! `wait` prints `READY <owner>`, then `GRANTED <fence>` once its turn came, `LOST` if the lease
//! is lost while held, and `RELEASED <wake-ups>` (how many times a release woke it) after the
//! line that tells it to release. `campaign` prints `READY <owner>`, `LEADER <fence>`, `LOST` if
//! the leadership is lost, and `RESIGNED` after the line that tells it to resign
//! (tests/polyglot's waiting run, beside Python and Node workers doing the same).
//!
//! `publish` sends `TAG:i:` + one of four suffixes (empty, a NUL, non-ASCII, quotes) for i in
//! 1..=COUNT, ten concurrent publishes at a time (one client: they share statements), printing
//! `PUBLISHED <i> <seq>` for each and `DONE` at the end. `subscribe` reads the stream from the
//! earliest event (as the named CONSUMER unless it is `-`, acking each event), printing
//! `EVENT <seq> <sha256 of the payload>` for each of COUNT events (tests/polyglot's stream run,
//! beside Python and Node workers doing the same).
//!
//! `fenced` loops: acquire one of the comma-separated KEYS (ttl TTL_MS, waiting up to 10 s),
//! print `HELD <key> <fence>`, wait for a line on standard input, insert `(key, fence, writer)`
//! into TABLE (guarded by accord's trigger `fenced_write`) on a connection of its own, print
//! `WROTE <key> <fence> <1|0>` (accepted, or refused by the trigger with `AC001`), release (a
//! lost lease is no error here). It ends at the end of its standard input (tests/polyglot's
//! fenced run, beside Python and Node workers doing the same; the caller SIGSTOPs some holders
//! before it lets them write).
//!
//! `hold` prints `RELEASED` once it released the key. With `-` for MILLIS it keeps the key until
//! its standard input ends (a line or EOF): the caller decides when, no timer does, as with the
//! C test binary's `hold` mode.

use std::time::Duration;

use accord::{
    AcquireOptions, CampaignOptions, ClaimOptions, Client, ClientOptions, FleetEvent, FleetOptions,
    LostSignal, StreamStart, SubscribeOptions,
};

/// Waits for a line (or EOF) on standard input, printing `LOST` if `lost` fires first (and
/// still waiting for the line: the caller decides when the worker ends).
async fn until_told_or_lost(lost: LostSignal) {
    let told = tokio::task::spawn_blocking(|| {
        let _ = std::io::stdin().read_line(&mut String::new());
    });
    tokio::pin!(told);
    tokio::select! {
        _ = &mut told => return,
        _ = lost.wait() => println!("LOST"),
    }
    let _ = told.await;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: contend URL NAMESPACE (contend KEY ROUNDS TABLE | hold KEY (MILLIS | -) | notify CHANNEL PAYLOAD | hammer KEY GRANTS | drain PREFIX BATCH | fleet FLEET SHARDS TTL_MS PERIOD_MS | wait KEY TTL_MS [shared] | campaign NAME VALUE TTL_MS | publish STREAM COUNT TAG | subscribe STREAM CONSUMER COUNT | fenced KEYS TTL_MS TABLE)";
    let [url, namespace, command, a, b, rest @ ..] = args.as_slice() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let owner = format!("rust-{}", std::process::id());
    let client =
        match Client::connect(url, ClientOptions::new().namespace(namespace).owner(&owner)).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("connect: {e}");
                std::process::exit(1);
            }
        };
    let status = match command.as_str() {
        "contend" => {
            let rounds: usize = b.parse().expect("ROUNDS is a number");
            let table = rest.first().expect(usage);
            contend(&client, url, &owner, a, rounds, table).await
        }
        "hold" => {
            let until_stdin_ends = b == "-";
            let millis: u64 = if until_stdin_ends {
                0
            } else {
                b.parse().expect("MILLIS is a number or -")
            };
            let lease = client
                .acquire(a, AcquireOptions::new())
                .await
                .expect("acquire");
            println!("HELD {}", lease.fence());
            if until_stdin_ends {
                // A line or EOF: the caller is done with the key. The keepalive renews it
                // meanwhile.
                tokio::task::spawn_blocking(|| {
                    let _ = std::io::stdin().read_line(&mut String::new());
                })
                .await
                .expect("read standard input");
            } else {
                tokio::time::sleep(Duration::from_millis(millis)).await;
            }
            lease.release().await.expect("release");
            println!("RELEASED");
            0
        }
        "notify" => {
            client.notify(a, b).await.expect("notify");
            0
        }
        "wait" => {
            let ttl = Duration::from_millis(b.parse().expect("TTL_MS is a number"));
            let shared = rest.first().is_some_and(|s| s == "shared");
            println!("READY {owner}");
            let lease = client
                .acquire(a, AcquireOptions::new().ttl(ttl).shared(shared))
                .await
                .expect("acquire");
            println!("GRANTED {}", lease.fence());
            until_told_or_lost(lease.lost_signal()).await;
            let _ = lease.release().await;
            println!("RELEASED {}", client.waiter_wakeups());
            0
        }
        "campaign" => {
            let ttl: u64 = rest
                .first()
                .expect(usage)
                .parse()
                .expect("TTL_MS is a number");
            println!("READY {owner}");
            let leadership = client
                .election(a)
                .expect("election")
                .campaign(b, CampaignOptions::new().ttl(Duration::from_millis(ttl)))
                .await
                .expect("campaign");
            println!("LEADER {}", leadership.fence());
            until_told_or_lost(leadership.lost_signal()).await;
            let _ = leadership.resign().await;
            println!("RESIGNED");
            0
        }
        "publish" => {
            let (count, tag) = (
                b.parse::<usize>().expect("COUNT is a number"),
                rest.first().expect(usage),
            );
            const EXTRA: [&str; 4] = ["", "nul\0byte", "é中🦀", "quote'\"\\$accord$"];
            for round in (1..=count).step_by(10) {
                let batch = (round..=(round + 9).min(count)).map(|i| {
                    let client = client.clone();
                    async move {
                        let payload = format!("{tag}:{i}:{}", EXTRA[i % 4]);
                        (i, client.publish(a, &payload).await.expect("publish"))
                    }
                });
                for (i, seq) in futures_util::future::join_all(batch).await {
                    println!("PUBLISHED {i} {seq}");
                }
            }
            println!("DONE");
            0
        }
        "subscribe" => {
            use sha2::Digest;
            let count: usize = rest
                .first()
                .expect(usage)
                .parse()
                .expect("COUNT is a number");
            let mut options = SubscribeOptions::new().start(StreamStart::Earliest);
            if b != "-" {
                options = options.consumer(b.as_str());
            }
            let sub = client.subscribe(a, options).await.expect("subscribe");
            for _ in 0..count {
                let event = sub.next().await.expect("next").expect("an event");
                let digest = sha2::Sha256::digest(event.payload.as_bytes());
                let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
                println!("EVENT {} {hex}", event.seq);
                if b != "-" {
                    sub.ack(event.seq).await.expect("ack");
                }
            }
            0
        }
        "hammer" => {
            let grants: usize = b.parse().expect("GRANTS is a number");
            let mut granted = 0;
            while granted < grants {
                if let Some(lease) = client
                    .try_acquire(a, AcquireOptions::new())
                    .await
                    .expect("try_acquire")
                {
                    granted += 1;
                    lease.release().await.expect("release");
                }
            }
            println!("HAMMER {granted}");
            0
        }
        "drain" => {
            let batch: usize = b.parse().expect("BATCH is a number");
            let mut finished = 0;
            let mut first = true;
            // The claims' share of the client's calls to the store (`STATS`).
            let (mut claims, mut claim_calls) = (0u64, 0u64);
            loop {
                let claim = ClaimOptions::new()
                    .limit(batch)
                    .ttl(Duration::from_secs(30))
                    .timeout(Duration::from_millis(200));
                let before = client.stats().statements;
                let leases = client.claim(a, claim).await.expect("claim");
                claims += 1;
                claim_calls += client.stats().statements - before;
                if first {
                    // The caller starts the work once every worker holds its first batch.
                    first = false;
                    println!("CLAIMED {}", leases.len());
                    tokio::task::spawn_blocking(|| {
                        let _ = std::io::stdin().read_line(&mut String::new());
                    })
                    .await
                    .expect("read standard input");
                }
                if leases.is_empty() {
                    let counts = client.counts(a).await.expect("counts");
                    if counts.free + counts.held == 0 {
                        break;
                    }
                    continue;
                }
                for lease in leases {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    println!("DONE {} {}", lease.key(), lease.fence());
                    lease.done(None).await.expect("done");
                    finished += 1;
                }
            }
            println!("STATS {claims} {claim_calls} {}", client.stats().statements);
            println!("DRAINED {finished}");
            0
        }
        "fleet" => {
            let shards: usize = b.parse().expect("SHARDS is a number");
            let [ttl, period, ..] = rest else {
                eprintln!("{usage}");
                std::process::exit(2);
            };
            let ms = |v: &str| Duration::from_millis(v.parse().expect("a number of milliseconds"));
            let options = FleetOptions::shards(shards).ttl(ms(ttl)).period(ms(period));
            fleet_member(&client, url, &owner, a, options).await
        }
        "fenced" => {
            let ttl = Duration::from_millis(b.parse().expect("TTL_MS is a number"));
            let table = rest.first().expect(usage);
            fenced_writer(&client, url, &owner, a, ttl, table).await
        }
        _ => {
            eprintln!("{usage}");
            2
        }
    };
    client.close().await;
    std::process::exit(status);
}

async fn contend(
    client: &Client,
    url: &str,
    owner: &str,
    key: &str,
    rounds: usize,
    table: &str,
) -> i32 {
    let (db, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect for the critical-section table");
    tokio::spawn(connection);
    let table = format!("\"{}\"", table.replace('"', "\"\""));
    let enter = format!("UPDATE {table} SET holder = $1 WHERE id = 1 AND holder IS NULL");
    let leave = format!("UPDATE {table} SET holder = NULL WHERE id = 1 AND holder = $1");
    for _ in 0..rounds {
        let lease = client
            .acquire(key, AcquireOptions::new().timeout(Duration::from_secs(60)))
            .await
            .expect("acquire");
        if db.execute(&enter, &[&owner]).await.expect("enter") != 1 {
            println!("VIOLATION entering with fence {}", lease.fence());
            return 3;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        if db.execute(&leave, &[&owner]).await.expect("leave") != 1 {
            println!("VIOLATION leaving with fence {}", lease.fence());
            return 3;
        }
        lease.release().await.expect("release");
    }
    println!("OK {rounds}");
    0
}

/// A line of standard input, or None at its end.
async fn told() -> Option<String> {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    })
    .await
    .expect("read standard input")
}

async fn fenced_writer(
    client: &Client,
    url: &str,
    owner: &str,
    keys: &str,
    ttl: Duration,
    table: &str,
) -> i32 {
    let (db, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect for the fenced table");
    tokio::spawn(connection);
    let table = format!("\"{}\"", table.replace('"', "\"\""));
    let insert = format!("INSERT INTO {table} (key, fence, writer) VALUES ($1, $2, $3)");
    let keys: Vec<&str> = keys.split(',').collect();
    loop {
        let key = keys[rand::random_range(0..keys.len())];
        let options = AcquireOptions::new()
            .ttl(ttl)
            .timeout(Duration::from_secs(10));
        let lease = match client.acquire(key, options).await {
            Ok(lease) => lease,
            Err(e) if e.kind() == accord::ErrorKind::Timeout => continue,
            Err(e) => panic!("acquire: {e}"),
        };
        println!("HELD {key} {}", lease.fence());
        if told().await.is_none() {
            return 0;
        }
        let accepted = match db.execute(&insert, &[&key, &lease.fence(), &owner]).await {
            Ok(_) => 1,
            Err(e) if e.code().map(|c| c.code()) == Some("AC001") => 0,
            Err(e) => panic!("insert: {e}"),
        };
        println!("WROTE {key} {} {accepted}", lease.fence());
        let _ = lease.release().await;
    }
}

async fn fleet_member(
    client: &Client,
    url: &str,
    owner: &str,
    name: &str,
    options: FleetOptions,
) -> i32 {
    // The fenced resource is a PostgreSQL table the test run creates (ACCORD_FLEET_WRITES=1);
    // the demo has none.
    let db = if std::env::var("ACCORD_FLEET_WRITES").as_deref() == Ok("1") {
        let (db, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect for the resource table");
        tokio::spawn(connection);
        Some(db)
    } else {
        None
    };
    let db = db.as_ref();
    let write = "INSERT INTO fleet_resource (shard, fence, owner) VALUES ($1, $2, $3)
                 ON CONFLICT (shard) DO UPDATE SET fence = EXCLUDED.fence, owner = EXCLUDED.owner
                  WHERE fleet_resource.fence < EXCLUDED.fence";
    // The handler is in place before READY: a caller may send SIGTERM as soon as it reads it.
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let fleet = client.fleet(name, options).await.expect("fleet");
    println!("READY {owner}");
    let stdin_ends = tokio::task::spawn_blocking(|| {
        let _ = std::io::stdin().read_line(&mut String::new());
    });
    tokio::pin!(stdin_ends);
    loop {
        tokio::select! {
            event = fleet.next_event() => match event {
                Some(event) => report(db, write, owner, event).await,
                None => break,
            },
            _ = sigterm.recv() => break,
            _ = &mut stdin_ends => break,
        }
    }
    // Closing yields a `closed` revocation for every shard still held; they are printed too.
    let (_, ()) = tokio::join!(fleet.close(), async {
        while let Some(event) = fleet.next_event().await {
            report(db, write, owner, event).await;
        }
    });
    println!("CLOSED");
    0
}

async fn report(db: Option<&tokio_postgres::Client>, write: &str, owner: &str, event: FleetEvent) {
    match event {
        FleetEvent::Assigned { shard, lease } => {
            println!("ASSIGNED {shard} {}", lease.fence());
            if let Some(db) = db {
                let accepted = db
                    .execute(write, &[&shard, &lease.fence(), &owner])
                    .await
                    .expect("fenced write");
                println!("WROTE {shard} {} {accepted}", lease.fence());
            }
        }
        FleetEvent::Revoked {
            shard,
            reason,
            fence,
        } => println!("REVOKED {shard} {reason} {fence}"),
        _ => {}
    }
}
