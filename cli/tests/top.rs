//! `accord top`: `--once`'s table, the prefix filter, `--prometheus`'s /metrics, and the live
//! view in a real terminal (tmux, when installed). Run against the PostgreSQL named by
//! `ACCORD_TEST_DATABASE_URL` (`scripts/with-postgres.sh cargo test -p accord-coord-cli`); each test
//! uses its own namespace.

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{http_get, sample, Env, Guard, BIN, BOUND};

/// A namespace with `jobs/held` (held by alice, ttl 30s, metadata who=test), `jobs/free`,
/// `jobs/done` and `other/x` (free). Returns the holder and the held key's fence.
fn three_states(env: &Env) -> (Guard, i64) {
    let (holder, line) = env.until_first_line(&[
        "--owner",
        "alice",
        "acquire",
        "jobs/held",
        "--ttl",
        "30s",
        "--metadata",
        r#"{"who":"test"}"#,
    ]);
    let fence: i64 = line.trim().parse().expect("acquire prints the fence");
    env.ok(&["run", "jobs/free", "--", "true"]);
    env.ok(&["--owner", "bob", "run", "--done", "jobs/done", "--", "true"]);
    env.ok(&["run", "other/x", "--", "true"]);
    (holder, fence)
}

/// `--once`'s table: the header line, then the column titles, then one row per line, as
/// (column title -> cell) maps.
fn table(text: &str) -> (String, Rows) {
    let mut lines = text.lines();
    let head = lines.next().expect("a header line").to_string();
    let titles: Vec<String> = lines
        .next()
        .expect("column titles")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(
        titles,
        ["KEY", "STATE", "HOLDER", "FENCE", "LEFT", "TTL", "WAIT", "METADATA"]
    );
    let rows = lines
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            assert!(cells.len() >= titles.len(), "a short row: {l:?}");
            let mut row: std::collections::HashMap<String, String> = titles
                .iter()
                .zip(cells.iter())
                .map(|(t, c)| (t.clone(), c.to_string()))
                .collect();
            // The metadata summary may hold spaces: the rest of the line.
            row.insert("METADATA".into(), cells[titles.len() - 1..].join(" "));
            row
        })
        .collect();
    (head, rows)
}

#[test]
fn once_prints_each_state_with_holder_and_fence() {
    let env = Env::new("once");
    let (_holder, fence) = three_states(&env);

    let text = env.ok(&["top", "--once", "jobs/"]);
    assert!(!text.contains('\x1b'), "escape codes in --once: {text:?}");
    let (head, rows) = table(&text);
    assert!(
        head.contains(&format!("namespace {}", env.namespace)),
        "{head}"
    );
    assert!(head.contains("prefix jobs/"), "{head}");
    assert!(head.contains("held 1  free 1  done 1  keys 3"), "{head}");
    let keys: Vec<&str> = rows.iter().map(|r| r["KEY"].as_str()).collect();
    assert_eq!(keys, ["jobs/done", "jobs/free", "jobs/held"], "{text}");

    let held = &rows[2];
    assert_eq!(held["STATE"], "held");
    assert_eq!(held["HOLDER"], "alice");
    assert_eq!(held["FENCE"], fence.to_string());
    assert_ne!(held["LEFT"], "-", "{text}");
    assert_eq!(held["TTL"], "30s", "{text}");
    assert_eq!(held["METADATA"], "who=test");

    let free = &rows[1];
    assert_eq!(free["STATE"], "free");
    assert_eq!(free["HOLDER"], "-");
    assert_eq!(free["LEFT"], "-");

    let done = &rows[0];
    assert_eq!(done["STATE"], "done");
    assert_eq!(done["HOLDER"], "bob", "the owner that marked it done");
    let done_fence: i64 = done["FENCE"].parse().unwrap();
    let free_fence: i64 = free["FENCE"].parse().unwrap();
    assert!(done_fence > 0 && free_fence > 0);

    // Sorted by fence: newest grant first (done was granted after free, free after held).
    let (_, by_fence) = table(&env.ok(&["top", "--once", "--sort", "fence", "jobs/"]));
    let keys: Vec<&str> = by_fence.iter().map(|r| r["KEY"].as_str()).collect();
    assert_eq!(keys, ["jobs/done", "jobs/free", "jobs/held"]);
    // By time left: the held key first.
    let (_, by_left) = table(&env.ok(&["top", "--once", "--sort", "left", "jobs/"]));
    assert_eq!(by_left[0]["KEY"], "jobs/held");
}

/// A waiting `accord acquire` of `key` as `owner` (`--shared` when asked), until dropped.
fn wait_on(env: &Env, owner: &str, key: &str, shared: bool) -> Guard {
    let mut args = vec!["--owner", owner, "acquire", key, "--timeout", "120s"];
    if shared {
        args.push("--shared");
    }
    Guard(
        env.cmd(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

type Rows = Vec<std::collections::HashMap<String, String>>;

/// `top --once PREFIX` again until its rows show `what` (`seen`); the bound catches hangs.
fn once_until(
    env: &Env,
    prefix: &str,
    what: &str,
    seen: impl Fn(&Rows) -> bool,
) -> (String, Rows, String) {
    let started = Instant::now();
    loop {
        let text = env.ok(&["top", "--once", prefix]);
        let (head, rows) = table(&text);
        if seen(&rows) {
            return (head, rows, text);
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no {what} within 60s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn once_shows_the_waiters_in_line_per_key() {
    let env = Env::new("wait");
    let (_holder, fence) = three_states(&env);
    let _writer = wait_on(&env, "bob", "jobs/held", false);
    let _reader = wait_on(&env, "carol", "jobs/held", true);

    // Polled: each waiter takes its place in line in its own process.
    let (head, rows, text) = once_until(&env, "jobs/", "2 waiters on jobs/held", |rows| {
        rows.iter()
            .any(|r| r["KEY"] == "jobs/held" && r["WAIT"] == "2")
    });
    assert!(head.contains("keys 3  waiting 2"), "{head}");
    for r in &rows {
        let (key, wait) = (r["KEY"].as_str(), r["WAIT"].as_str());
        match key {
            "jobs/held" => {
                assert_eq!(r["HOLDER"], "alice", "{text}");
                assert_eq!(r["FENCE"], fence.to_string(), "{text}");
                assert_eq!(r["METADATA"], "who=test", "{text}");
            }
            _ => assert_eq!(wait, "-", "{key} has no waiter: {text}"),
        }
    }
    // Another prefix counts none of them.
    let (head, rows) = table(&env.ok(&["top", "--once", "other/"]));
    assert!(!head.contains("waiting"), "{head}");
    assert!(rows.iter().all(|r| r["WAIT"] == "-"));

    // A key held shared shows a row per holder; its waiter is counted on the first row only.
    let _readers = [
        hold_shared(&env, "r1", "shared/k"),
        hold_shared(&env, "r2", "shared/k"),
    ];
    let _waiter = wait_on(&env, "w", "shared/k", false);
    let (head, rows, text) = once_until(&env, "shared/", "a waiter on shared/k", |rows| {
        rows.iter().any(|r| r["WAIT"] != "-")
    });
    assert!(head.contains("shared holders 2  waiting 1"), "{head}");
    let cells: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["STATE"].as_str(), r["WAIT"].as_str()))
        .collect();
    assert_eq!(cells, [("shared", "1"), ("shared", "-")], "{text}");
}

/// A shared holder of `key` as `owner`, running until dropped.
fn hold_shared(env: &Env, owner: &str, key: &str) -> Guard {
    env.until_first_line(&["--owner", owner, "acquire", key, "--ttl", "30s", "--shared"])
        .0
}

/// Holds `key` as `owner` with `metadata` (an `accord acquire` that stays up) until dropped.
fn hold(env: &Env, owner: &str, key: &str, metadata: &str) -> Guard {
    env.until_first_line(&[
        "--owner",
        owner,
        "acquire",
        key,
        "--ttl",
        "30s",
        "--metadata",
        metadata,
    ])
    .0
}

#[test]
fn once_filters_by_prefix() {
    let env = Env::new("prefix");
    let (_holder, _) = three_states(&env);

    let (head, rows) = table(&env.ok(&["top", "--once"]));
    assert!(head.contains("prefix -"), "{head}");
    assert!(head.contains("held 1  free 2  done 1  keys 4"), "{head}");
    assert_eq!(rows.len(), 4);

    let (head, rows) = table(&env.ok(&["top", "--once", "other/"]));
    assert!(head.contains("held 0  free 1  done 0  keys 1"), "{head}");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["KEY"], "other/x");

    let (head, rows) = table(&env.ok(&["top", "--once", "nothing/"]));
    assert!(head.contains("keys 0"), "{head}");
    assert!(rows.is_empty());

    // A too short interval is a usage error, before any connection.
    let out = env.run(&["top", "--interval", "1ms"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn counts_are_exact_beyond_a_page() {
    let env = Env::new("full");
    let keys: String = (0..1001).map(|i| format!("many/{i:05}\n")).collect();
    offer(&env, "many/", &keys);

    let text = env.ok(&["top", "--once", "many/"]);
    let mut lines = text.lines();
    let head = lines.next().unwrap();
    assert!(
        head.contains("held 0  free 1001  done 0  keys 1001"),
        "{head}"
    );
    let note = lines.next().unwrap();
    assert!(
        note.starts_with("… 1 more key not shown (read limit 1,000 rows"),
        "{note}"
    );
    // The note, the titles, 1,000 rows.
    assert_eq!(text.lines().count(), 1 + 1 + 1 + 1000);

    let text = env.ok(&["top", "--once", "many/01"]);
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains("free 1  done 0  keys 1"),
        "{text}"
    );
}

#[test]
fn live_view_needs_a_terminal() {
    let env = Env::new("noterm");
    let out = env.cmd(&["top"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--once"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn prometheus_serves_key_gauges_and_client_counters() {
    let env = Env::new("prom");
    let (mut holder, _) = three_states(&env);
    let (mut server, addr) = env.metrics_server("jobs/");

    let (status, body) = http_get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let labels = format!("namespace=\"{}\",prefix=\"jobs/\"", env.namespace);
    assert!(body.contains("# TYPE accord_keys gauge\n"), "{body}");
    assert_eq!(sample(&body, &format!("accord_up{{{labels}}}")), 1.0);
    for (state, n) in [("held", 1.0), ("free", 1.0), ("done", 1.0)] {
        assert_eq!(
            sample(&body, &format!("accord_keys{{{labels},state=\"{state}\"}}")),
            n,
            "{state}"
        );
    }
    assert_eq!(
        sample(&body, &format!("accord_keys_truncated{{{labels}}}")),
        0.0
    );
    assert!(body.contains("# TYPE accord_waiters gauge\n"), "{body}");
    assert_eq!(sample(&body, &format!("accord_waiters{{{labels}}}")), 0.0);
    // The exporter's own client, named so: its reads, not the namespace's activity (a holder
    // is granted and renews beside it, and no exporter counter says so).
    assert!(
        body.contains("# TYPE accord_exporter_statements_total counter\n"),
        "{body}"
    );
    let first = sample(&body, "accord_exporter_statements_total");
    assert!(first >= 1.0, "the scrape's own read is counted: {body}");
    assert_eq!(sample(&body, "accord_exporter_reconnects_total"), 0.0);
    assert!(sample(&body, "accord_exporter_statement_seconds_count") >= 1.0);
    for unprefixed in ["accord_grants_total", "accord_statements_total"] {
        assert!(
            !body.contains(&format!("\n{unprefixed} ")),
            "{unprefixed} would pass for the namespace's: {body}"
        );
    }
    // Every series has its HELP and TYPE, counters end in _total.
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap();
        let family = ["_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| body.contains(&format!("# TYPE {f} summary")))
            })
            .unwrap_or(name);
        assert!(
            body.contains(&format!("# HELP {family} ")),
            "{line}: {body}"
        );
        let kind = body
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# TYPE {family} ")))
            .unwrap_or_else(|| panic!("no TYPE for {line}"));
        assert_eq!(kind == "counter", family.ends_with("_total"), "{line}");
    }

    // Each scrape reads again: the released key shows up free, the statement count grows.
    holder.signal(libc::SIGINT); // `acquire` releases on SIGINT
    let _ = holder.0.wait();
    let (_, body) = http_get(&addr, "/metrics");
    assert_eq!(
        sample(&body, &format!("accord_keys{{{labels},state=\"held\"}}")),
        0.0,
        "{body}"
    );
    assert_eq!(
        sample(&body, &format!("accord_keys{{{labels},state=\"free\"}}")),
        2.0,
        "{body}"
    );
    assert!(
        sample(&body, "accord_exporter_statements_total") > first,
        "{body}"
    );

    // `/` points at the metrics (as the README says); anything else is not found.
    let (status, body) = http_get(&addr, "/");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("href=\"/metrics\""), "{body}");
    let (status, _) = http_get(&addr, "/nothing");
    assert_eq!(status, "HTTP/1.1 404 Not Found");

    server.signal(libc::SIGTERM);
    assert_eq!(server.exit_within(BOUND).code(), Some(0), "SIGTERM ends it");
}

/// What one alerts on, for a namespace set up here: members per group and fleet, a fleet's
/// unowned shards, an election with a leader and one without, a stream consumer's lag, each
/// with its name escaped as a label value; the waiters in line under the prefix.
#[test]
fn prometheus_gauges_read_the_recipes_and_streams() {
    let env = Env::new("promgauges");
    let recipes = recipes(&env);
    // Two elections: `chief` led by alice, `deputy` vacant (its leader resigned). A third,
    // with a quote, a backslash and a line feed in its name, is led.
    let leadership = recipes.runtime.block_on(async {
        let alice = &recipes.clients[0];
        let campaign = |name: &str| {
            let election = alice.election(name).unwrap();
            async move {
                election
                    .campaign("v", accord::CampaignOptions::new())
                    .await
                    .unwrap()
            }
        };
        let chief = campaign("chief").await;
        campaign("deputy").await.resign().await.unwrap();
        let odd = campaign("odd \"x\"\\\n").await;
        (chief, odd)
    });
    let (_holder, _) = three_states(&env);
    let _waiter = wait_on(&env, "bob", "jobs/held", false);
    let (_server, addr) = env.metrics_server("jobs/");

    let ns = format!("namespace=\"{}\"", env.namespace);
    // Polled: the waiter takes its place in line in its own process.
    let started = Instant::now();
    let body = loop {
        let (_, body) = http_get(&addr, "/metrics");
        let labels = format!("{ns},prefix=\"jobs/\"");
        if sample(&body, &format!("accord_waiters{{{labels}}}")) == 1.0 {
            break body;
        }
        assert!(
            started.elapsed() < BOUND,
            "no waiter within {BOUND:?}: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let gauge = |series: &str| sample(&body, series);
    assert_eq!(
        gauge(&format!("accord_group_members{{{ns},group=\"workers\"}}")),
        1.0
    );
    assert_eq!(
        gauge(&format!("accord_fleet_members{{{ns},fleet=\"orders\"}}")),
        1.0
    );
    for (state, n) in [("owned", 2.0), ("unowned", 2.0)] {
        assert_eq!(
            gauge(&format!(
                "accord_fleet_shards{{{ns},fleet=\"orders\",state=\"{state}\"}}"
            )),
            n,
            "{state}: {body}"
        );
    }
    assert_eq!(
        gauge(&format!(
            "accord_election_has_leader{{{ns},election=\"chief\"}}"
        )),
        1.0
    );
    assert_eq!(
        gauge(&format!(
            "accord_election_has_leader{{{ns},election=\"deputy\"}}"
        )),
        0.0,
        "{body}"
    );
    // The name as accord prints it (the line feed as \n), then the text format's escapes.
    assert_eq!(
        gauge(&format!(
            "accord_election_has_leader{{{ns},election=\"odd \\\"x\\\"\\\\\\\\\\\\n\"}}"
        )),
        1.0,
        "{body}"
    );
    assert_eq!(
        gauge(&format!("accord_stream_events{{{ns},stream=\"events\"}}")),
        3.0
    );
    assert_eq!(
        gauge(&format!(
            "accord_stream_consumer_lag_events{{{ns},stream=\"events\",consumer=\"billing\"}}"
        )),
        1.0
    );
    for section in ["elections", "fleets", "groups", "streams", "waiters"] {
        assert_eq!(
            gauge(&format!(
                "accord_snapshot_truncated{{{ns},section=\"{section}\"}}"
            )),
            0.0
        );
    }
    // The exporter's client has waited for nothing and been granted nothing: no such series.
    assert!(!body.contains("grants"), "{body}");
    // `--once` shows the vacancy too.
    let text = env.ok(&["top", "--once", "nothing/"]);
    let elections = section(&text, "ELECTION ");
    let deputy = elections.iter().find(|r| r[0] == "deputy").expect(&text);
    assert_eq!(deputy[1], "(vacant)", "{text}");
    drop(leadership);
    drop(recipes);
}

/// The recipes of [`recipes`], alive until dropped: the clients, the member and the fleet, on
/// a runtime of their own (the test itself is synchronous: it runs the CLI).
struct Recipes {
    runtime: tokio::runtime::Runtime,
    clients: Vec<accord::Client>,
    member: Option<accord::Member>,
    fleet: Option<accord::Fleet>,
}

impl Drop for Recipes {
    fn drop(&mut self) {
        let (clients, member, fleet) = (
            std::mem::take(&mut self.clients),
            self.member.take(),
            self.fleet.take(),
        );
        self.runtime.block_on(async move {
            if let Some(fleet) = fleet {
                fleet.close().await;
            }
            drop(member);
            for client in clients {
                client.close().await;
            }
        });
    }
}

/// A group member, a fleet (member w1 holding shards 0 and 1 of 0-3) and a stream of 3 events
/// whose consumer `billing` read and acknowledged 2. The CLI has no join or fleet command, and
/// the recipes' keys are refused to its plain calls, so the member and the fleet are the
/// core's: a fleet of 4 shards opened and closed (its shards stay offered, unowned; its member
/// row, left, goes at the next join), then w1's of 2 shards, which takes 0 and 1 only.
fn recipes(env: &Env) -> Recipes {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut recipes = Recipes {
        runtime,
        clients: Vec::new(),
        member: None,
        fleet: None,
    };
    let (url, namespace) = (env.url.clone(), env.namespace.clone());
    let (clients, member, fleet) = recipes.runtime.block_on(async move {
        let connect = |owner: &'static str| {
            let (url, namespace) = (url.clone(), namespace.clone());
            async move {
                accord::Client::connect(
                    &url,
                    accord::ClientOptions::new()
                        .namespace(namespace)
                        .owner(owner),
                )
                .await
                .unwrap()
            }
        };
        let ttl = Duration::from_secs(30);
        let alice = connect("alice").await;
        let mut zone = accord::Metadata::new();
        zone.insert("zone".into(), "a".into());
        let member = alice
            .join(
                "workers",
                accord::JoinOptions::new().ttl(ttl).metadata(zone),
            )
            .await
            .unwrap();
        let setup = connect("setup").await;
        let options = |shards| {
            accord::FleetOptions::shards(shards)
                .ttl(ttl)
                .period(Duration::from_millis(100))
        };
        setup
            .fleet("orders", options(4))
            .await
            .unwrap()
            .close()
            .await;
        setup.close().await;
        let w1 = connect("w1").await;
        let fleet = w1.fleet("orders", options(2)).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while fleet.shards().len() < 2 {
            assert!(Instant::now() < deadline, "w1 never took its shards");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (vec![alice, w1], member, fleet)
    });
    recipes.clients = clients;
    recipes.member = Some(member);
    recipes.fleet = Some(fleet);
    env.ok_with_stdin(&["publish", "events"], "a\nb\nc\n");
    env.ok(&[
        "subscribe",
        "events",
        "--from",
        "earliest",
        "--consumer",
        "billing",
        "--count",
        "2",
    ]);
    recipes
}

/// The plain-text section whose column titles start with `title`: its rows, split on
/// whitespace.
fn section(text: &str, title: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(title));
    assert!(lines.next().is_some(), "no {title} section in:\n{text}");
    lines
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

#[test]
fn once_shows_members_fleets_and_streams() {
    let env = Env::new("recipes");
    let _holders = recipes(&env);

    let text = env.ok(&["top", "--once", "nothing/"]);
    // The prefix narrows the keys, not the sections.
    assert!(text.lines().next().unwrap().contains("keys 0"), "{text}");
    let groups = section(&text, "GROUP ");
    assert_eq!(groups.len(), 1, "{text}");
    assert_eq!(groups[0][..2], ["workers", "alice"]);
    assert_eq!(groups[0][4], "zone=a", "{text}");

    let fleets = section(&text, "FLEET ");
    assert_eq!(fleets.len(), 2, "{text}");
    assert_eq!(fleets[0][..4], ["orders", "w1", "2", "0-1"], "{text}");
    assert_eq!(
        fleets[1][..4],
        ["orders", "(unowned)", "2", "2-3"],
        "{text}"
    );

    let streams = section(&text, "STREAM ");
    assert_eq!(streams.len(), 1, "{text}");
    // STREAM LENGTH FIRST LAST READER ACKED LAG
    assert_eq!(
        streams[0],
        ["events", "3", "1", "3", "billing", "2", "1"],
        "{text}"
    );
}

#[test]
fn once_on_sqlite_shows_the_same_sections() {
    let env = Env::sqlite("sqlite");
    let holders = recipes(&env);
    let text = env.ok(&["top", "--once", "accord.fleet/"]);
    // Exact counts under the prefix: 4 shards (2 held) and the member.
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains("held 3  free 2  done 0  keys 5"),
        "{text}"
    );
    assert_eq!(section(&text, "GROUP ")[0][..2], ["workers", "alice"]);
    let fleets = section(&text, "FLEET ");
    assert_eq!(fleets[0][..4], ["orders", "w1", "2", "0-1"], "{text}");
    assert_eq!(
        fleets[1][..4],
        ["orders", "(unowned)", "2", "2-3"],
        "{text}"
    );
    assert_eq!(
        section(&text, "STREAM ")[0],
        ["events", "3", "1", "3", "billing", "2", "1"],
        "{text}"
    );
    drop(holders);
    let _ = std::fs::remove_file(env.url.trim_start_matches("sqlite://"));
}

#[test]
fn once_counts_notifications_on_the_channels_named() {
    let env = Env::new("channels");
    // Listening from this line on: what is sent now is counted.
    let mut top = env.until_noted(
        &[
            "top",
            "--once",
            "--channel",
            "jobs-done",
            "--channel",
            "quiet",
            "--interval",
            "5s",
        ],
        "listening on jobs-done, quiet",
    );
    for i in 0..3 {
        env.ok(&["notify", "jobs-done", &format!("job {i}\tdone")]);
    }
    let status = top.child.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let text: String = top.stdout.iter().map(|l| l + "\n").collect();
    let channels = section(&text, "CHANNEL ");
    assert_eq!(channels.len(), 2, "{text}");
    assert_eq!(channels[0][0], "jobs-done");
    assert_eq!(channels[0][2], "3", "{text}");
    // The last payload, escaped: its tab shows as \t.
    assert_eq!(channels[0][3..].join(" "), "job 2\\tdone", "{text}");
    assert_eq!(channels[1][..3], ["quiet", "0.0", "0"], "{text}");
}

// ------------------------------------------------------------------------------------- tmux

/// A tmux server of this test's own (`-L`), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn pane(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Polls the pane (every 100 ms, up to `within`) until `f` holds; the last capture.
    fn wait_for(&self, what: &str, within: Duration, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let pane = self.pane();
            if f(&pane) {
                return pane;
            }
            if Instant::now() > deadline {
                panic!("the pane did not show {what} within {within:?}:\n{pane}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[test]
fn live_view_in_a_terminal_shows_keys_filters_and_quits_on_q() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("skipped: tmux is not installed (apt-get install tmux)");
        return;
    }
    let env = Env::new("tmux");
    let (_holder, fence) = three_states(&env);
    let tmux = Tmux {
        socket: format!("accord-top-{}", std::process::id()),
    };
    let script = format!(
        "ACCORD_URL={} ACCORD_NAMESPACE={} {} top --interval 200ms; echo \"accord-exited-$?\"; sleep 600",
        shell_quote(&env.url),
        shell_quote(&env.namespace),
        shell_quote(BIN)
    );
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "120",
        "-y",
        "30",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        out.status.success(),
        "tmux new-session: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let pane = tmux.wait_for("the held key", Duration::from_secs(60), |p| {
        p.contains("jobs/held") && p.contains("alice")
    });
    assert!(pane.contains("accord top"), "{pane}");
    assert!(pane.contains("held 1"), "{pane}");
    assert!(pane.contains("WAIT"), "the waiters' column: {pane}");
    assert!(pane.contains(&fence.to_string()), "{pane}");
    assert!(pane.contains("other/x"), "{pane}");

    // `/` edits the prefix: only other/ keys remain.
    tmux.cmd(&["send-keys", "-t", "top", "/"]);
    tmux.wait_for("the prefix editor", Duration::from_secs(30), |p| {
        p.contains("prefix:")
    });
    tmux.cmd(&["send-keys", "-t", "top", "C-u"]);
    tmux.cmd(&["send-keys", "-t", "top", "-l", "other/"]);
    tmux.cmd(&["send-keys", "-t", "top", "Enter"]);
    tmux.wait_for("only other/x", Duration::from_secs(30), |p| {
        p.contains("prefix other/") && p.contains("other/x") && !p.contains("jobs/held")
    });

    // `s` cycles the sort.
    tmux.cmd(&["send-keys", "-t", "top", "s"]);
    tmux.wait_for("the sort by time left", Duration::from_secs(30), |p| {
        p.contains("sort time left")
    });

    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let pane = tmux.wait_for("the exit", Duration::from_secs(30), |p| {
        p.contains("accord-exited-")
    });
    assert!(pane.contains("accord-exited-0"), "{pane}");
}

#[test]
fn live_view_shows_sections_and_the_notification_rate() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("skipped: tmux is not installed (apt-get install tmux)");
        return;
    }
    let env = Env::new("tmux-sections");
    let _holders = recipes(&env);
    let tmux = Tmux {
        socket: format!("accord-top-sections-{}", std::process::id()),
    };
    let script = format!(
        "ACCORD_URL={} ACCORD_NAMESPACE={} {} top --interval 200ms --channel pings; echo \"accord-exited-$?\"; sleep 600",
        shell_quote(&env.url),
        shell_quote(&env.namespace),
        shell_quote(BIN)
    );
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "120",
        "-y",
        "40",
        "sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success());
    // top listens before its first draw: once the channel's row shows, a notification counts.
    let pane = tmux.wait_for("the sections", Duration::from_secs(60), |p| {
        p.contains("CHANNEL") && p.contains("pings")
    });
    assert!(pane.contains("workers") && pane.contains("alice"), "{pane}");
    assert!(
        pane.contains("orders") && pane.contains("(unowned)"),
        "{pane}"
    );
    assert!(pane.contains("billing"), "{pane}");
    for i in 0..4 {
        env.ok(&["notify", "pings", &format!("ping {i}")]);
    }
    tmux.wait_for("4 pings counted", Duration::from_secs(30), |p| {
        p.lines()
            .any(|l| l.starts_with("pings ") && l.split_whitespace().nth(2) == Some("4"))
    });
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let pane = tmux.wait_for("the exit", Duration::from_secs(30), |p| {
        p.contains("accord-exited-")
    });
    assert!(pane.contains("accord-exited-0"), "{pane}");
}

/// Offers `keys` (one a line) to the pool `prefix`.
fn offer(env: &Env, prefix: &str, keys: &str) {
    env.ok_with_stdin(&["offer", prefix], keys);
}

/// A fleet of 10,001 shards is more than the snapshot reads of the recipes' rows
/// (`MAX_SNAPSHOT_RECIPE_ROWS`, 10,000): `--once` says the fleet section is cut, and that the
/// groups, read after the fleets, were not read; the key table says how many keys it leaves out.
/// The shards are written by SQL as the fleet's offer writes them (a plain `accord offer` of a
/// fleet's keys is refused, and a fleet has at most 10,000 shards).
#[tokio::test]
async fn once_says_which_sections_the_read_limits_cut() {
    let env = Env::new("cut");
    env.ok(&["migrate"]);
    let (db, connection) = tokio_postgres::connect(&env.url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    db.execute(
        "INSERT INTO accord.leases (namespace, key, fence, done, metadata, updated_at, pool, offered) \
         SELECT $1, 'accord.fleet/big/s/' || g, n, false, '{}', now(), 'accord.fleet/big/s/', n \
           FROM (SELECT g, nextval('accord.fence_seq') AS n FROM generate_series(0, 10000) g) s",
        &[&env.namespace],
    )
    .await
    .unwrap();

    let text = env.ok(&["top", "--once"]);
    let mut lines = text.lines();
    assert!(lines.next().unwrap().contains("keys 10001"), "{text}");
    assert_eq!(
        lines.next().unwrap(),
        "… 9001 more keys not shown (read limit 1,000 rows; the counts are of every key; narrow the prefix)"
    );
    let fleets = text
        .split("\n\n")
        .find(|s| s.contains("FLEET "))
        .unwrap_or_else(|| panic!("no fleet section in {text}"));
    assert!(
        fleets.starts_with(
            "… more fleet members and shards not shown (read limit 10,000 rows of elections, fleets and groups)\nFLEET "
        ),
        "{fleets}"
    );
    // Read, then cut: 10,000 of the 10,001 shards.
    assert!(
        section(&text, "FLEET ")
            .iter()
            .any(|r| r[..3] == ["big", "(unowned)", "10000"]),
        "{text}"
    );
    // Groups come after fleets in the read: none read, and it says so.
    assert!(
        text.contains(
            "\n\n… more group members not shown (read limit 10,000 rows of elections, fleets and groups)\n"
        ),
        "{text}"
    );
    assert!(!text.contains("more elections"), "{text}");
    assert!(!text.contains("GROUP "), "{text}");
}

/// The live view at a terminal too small for its sections and keys says what is below: the
/// sections' last line counts the lines cut, the footer says more rows are below.
#[test]
fn live_view_says_what_the_terminal_cuts() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("skipped: tmux is not installed (apt-get install tmux)");
        return;
    }
    let env = Env::new("tmux-small");
    let _holders = recipes(&env);
    let jobs: String = (0..10).map(|i| format!("jobs/{i:02}\n")).collect();
    offer(&env, "jobs/", &jobs);
    let tmux = Tmux {
        socket: format!("accord-top-small-{}", std::process::id()),
    };
    let script = format!(
        "ACCORD_URL={} ACCORD_NAMESPACE={} {} top --interval 200ms --channel pings; echo \"accord-exited-$?\"; sleep 600",
        shell_quote(&env.url),
        shell_quote(&env.namespace),
        shell_quote(BIN)
    );
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "100",
        "-y",
        "20",
        "sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success());
    // 16 keys, 7 rows of them shown; the sections' 12 lines in 7.
    let pane = tmux.wait_for("the cuts", Duration::from_secs(60), |p| {
        p.contains("rows 1-7 of 16, more below") && p.contains("more lines below")
    });
    assert!(
        pane.contains("… 6 more lines below (a taller terminal shows them; --once prints all)"),
        "{pane}"
    );
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let pane = tmux.wait_for("the exit", Duration::from_secs(30), |p| {
        p.contains("accord-exited-")
    });
    assert!(pane.contains("accord-exited-0"), "{pane}");
}

/// The live view escapes keys, holders and metadata as `--once` does: a key that would retitle
/// the terminal, ring its bell and wipe the view shows escaped, the title stays, and none of
/// the raw sequences reaches the terminal (its output captured by `tmux pipe-pane`).
#[test]
fn live_view_escapes_names_and_keeps_the_terminal_title() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("skipped: tmux is not installed (apt-get install tmux)");
        return;
    }
    let env = Env::new("tmux-hostile");
    let _holder = hold(
        &env,
        "o\x1b[31m\u{202e}\x07",
        "k\x1b]0;T\x07\x1b[2J",
        r#"{"m":"v\u001b[2J\u202e\u200b"}"#,
    );
    env.ok(&["run", "line\nbreak", "--", "true"]);
    let tmux = Tmux {
        socket: format!("accord-top-hostile-{}", std::process::id()),
    };
    let dir = std::env::temp_dir().join(format!("accord-top-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let go = dir.join("go");
    let raw = dir.join("raw");
    // top starts once the pane's output is being captured.
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; ACCORD_URL={} ACCORD_NAMESPACE={} {} top --interval 200ms; echo \"accord-exited-$?\"; sleep 600",
        shell_quote(&env.url),
        shell_quote(&env.namespace),
        shell_quote(BIN),
        go = shell_quote(go.to_str().unwrap()),
    );
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "120",
        "-y",
        "30",
        "sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success());
    let title_before = tmux.cmd(&["display-message", "-p", "-t", "top", "#{pane_title}"]);
    let out = tmux.cmd(&[
        "pipe-pane",
        "-t",
        "top",
        "-o",
        &format!("cat >> {}", shell_quote(raw.to_str().unwrap())),
    ]);
    assert!(out.status.success());
    std::fs::write(&go, "").unwrap();

    let pane = tmux.wait_for("the escaped names", Duration::from_secs(60), |p| {
        p.contains("k\\x1b]0;T\\x07\\x1b[2J") && p.contains("line\\nbreak")
    });
    assert!(pane.contains("o\\x1b[31m\\u202e\\x07"), "{pane}");
    assert!(pane.contains("m=v\\x1b[2J\\u202e\\u200b"), "{pane}");
    assert!(pane.contains("KEY"), "the view was not wiped: {pane}");
    let title_after = tmux.cmd(&["display-message", "-p", "-t", "top", "#{pane_title}"]);
    assert_eq!(
        String::from_utf8_lossy(&title_after.stdout),
        String::from_utf8_lossy(&title_before.stdout),
        "the pane's title changed"
    );

    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    tmux.wait_for("the exit", Duration::from_secs(30), |p| {
        p.contains("accord-exited-")
    });
    tmux.cmd(&["pipe-pane", "-t", "top"]);
    let bytes = std::fs::read(&raw).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("KEY"), "the capture holds the view");
    for hazard in ["\x07", "\x1b]0;", "\u{202e}", "\u{200b}", "\u{9b}"] {
        assert!(
            !text.contains(hazard),
            "{hazard:?} reached the terminal raw"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// More streams than the snapshot reads (`MAX_SNAPSHOT_STREAM_ROWS`, 1,000) and more keys with
/// waiters (`MAX_SNAPSHOT_WAITER_KEYS`, 1,000): `--once` says both cuts. The 1,001 streams and
/// 1,001 waiting tickets are written by SQL (the tables of docs/semantics.md), as publishing to
/// and waiting on 1,001 keys from processes would take minutes.
#[tokio::test]
async fn once_says_when_streams_and_waiters_are_cut() {
    let env = Env::new("cut-streams");
    env.ok(&["migrate"]);
    let (db, connection) = tokio_postgres::connect(&env.url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    db.execute(
        "INSERT INTO accord.streams (namespace, stream, last_seq) \
         SELECT $1, 's' || lpad(g::text, 5, '0'), 0 FROM generate_series(1, 1001) g",
        &[&env.namespace],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO accord.tickets \
           (namespace, key, ticket, owner, shared, attempt, granted, expires_at, updated_at) \
         SELECT $1, 'w/' || lpad(g::text, 5, '0'), 1, 'waiter', false, 1, false, \
                now() + interval '10 minutes', now() \
         FROM generate_series(1, 1001) g",
        &[&env.namespace],
    )
    .await
    .unwrap();

    let text = env.ok(&["top", "--once", "w/"]);
    assert!(
        text.lines().next().unwrap().contains("waiting 1001"),
        "{text}"
    );
    assert!(
        text.contains(
            "\n… WAIT shown for the first 1,000 keys with waiters only (read limit)\nKEY "
        ),
        "{text}"
    );
    let streams = text
        .split("\n\n")
        .find(|s| s.contains("STREAM "))
        .unwrap_or_else(|| panic!("no stream section in {text}"));
    assert!(
        streams.starts_with(
            "… more streams and readers not shown (read limit 1,000 rows of streams and readers)\nSTREAM "
        ),
        "{streams}"
    );
    assert_eq!(section(&text, "STREAM ").len(), 1000, "{text}");
}
