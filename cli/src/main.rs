//! `accord`: accord's locks, leases, done-marking and notifications from a shell.
//!
//! Exit codes (also in `accord --help`): 0 ok, 1 error, 2 usage or invalid argument, 3 the key
//! is held / the wait timed out, 4 the key is done, 5 the lease was lost; `run` passes its
//! command's own exit code through (128 + N when the command died of signal N), also when only
//! the final release failed (with a warning on stderr); `work` exits with 123 when some command
//! failed.
//!
//! Output never panics: a closed stdout ends accord quietly, a closed stderr drops its messages;
//! names, values and payloads are escaped so that they cannot drive the reader's terminal (see
//! `output`).
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;
use std::time::Duration;

use accord::{AcquireOptions, Client, ClientOptions, ErrorKind, KeyState, ListQuery, Metadata};
use clap::{Parser, Subcommand, ValueEnum};
use tokio::signal::unix::{signal, Signal, SignalKind};

#[macro_use]
mod output;
mod metrics;
mod pool;
mod stream;
mod supervise;
mod top;

mod exit {
    pub const OK: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const HELD: u8 = 3;
    pub const DONE: u8 = 4;
    pub const LOST: u8 = 5;
    /// `subscribe`: the events asked for were trimmed by the stream's retention.
    pub const TRIMMED: u8 = 6;
    /// `work`: some command failed (as xargs says it).
    pub const SOME_FAILED: u8 = 123;
}

const EXAMPLES: &str = "\
Examples:
  export ACCORD_URL=postgres://user:pass@db/app
  accord migrate                                 # create or upgrade the schema
  accord migrate --print-sql --schema accord     # the SQL, for a DBA (no connection)
  accord ls --state held                         # who holds what, fence, time left
  accord ls --prefix reports/ --json             # JSON lines, for jq
  accord run nightly-report -- ./report.sh       # like flock(1), across machines
  accord run --timeout 0 --done import/2026-11-22 -- ./import.sh
  accord acquire maintenance --ttl 1m            # wait for it, hold until Ctrl-C, release
  accord acquire maintenance --timeout 10s       # give up (exit 3) if not held within 10 s
  accord reset import/2026-11-22                 # make a done key acquirable again
  accord listen jobs events                      # channel<TAB>payload lines (escaped); says
                                                 # \"listening on\" on stderr once listening
  accord notify jobs 'batch 7 finished'
  seq -f 'img/%04g' 1 500 | accord offer img/   # a work pool: keys on stdin, one a line
  accord work img/ -j 8 -- ./resize.sh {}        # like xargs -P, across machines
  accord counts img/ --watch                     # free/held/done until nothing is left
  accord publish orders 'order 7 paid'           # a durable event; prints its seq
  accord subscribe orders --from earliest --consumer billing   # JSON lines; a restart
                                                 # resumes after the last line printed
  accord stream orders --max-age 7d              # retention; prints first/last seq
  accord top jobs/                               # live view: q quits, s sorts, / filters
  accord top --once                              # the same as a plain table, once
  accord top --prometheus 127.0.0.1:9464         # GET /metrics: keys by state, counters

Exit codes:
  0  ok
  1  error (connection, database, ...)
  2  usage error or invalid argument
  3  could not acquire: the key is held (--timeout 0) or the wait timed out
  4  the key is done (reset it to acquire it again)
  5  the lease was lost (run, work: the command was stopped)
  6  subscribe: the events asked for were trimmed by the stream's retention
  run passes its command's exit code through (128+N if it died of signal N), also when
  only the final release failed (with a warning)
  123 work: some command failed (its key was released)
  A closed stdout (accord ls | head -1) ends accord quietly with 0; a closed stderr only drops
  its messages.

Environment: ACCORD_URL, ACCORD_NAMESPACE, ACCORD_SCHEMA, ACCORD_OWNER, ACCORD_LISTEN_URL,
ACCORD_PREPARE_STATEMENTS; ACCORD_LOG sets the log filter (default: warn).";

const RUN_HELP: &str = "\
The command gets ACCORD_KEY, ACCORD_FENCE, ACCORD_NAMESPACE and ACCORD_OWNER in its environment.
The lease is renewed in the background while the command runs and released when it exits. If the
lease is lost (say, this process was stalled past the ttl or the coordinator was unreachable), the
command is sent SIGTERM, then SIGKILL after --kill-after, and accord exits with 5. SIGINT and
SIGTERM received by accord are forwarded to the command.

The command runs in a process group of its own. When it exits, processes it left running in
that group are sent SIGTERM, then SIGKILL after --kill-after, before the lease is released. On
Linux, if accord is killed outright (kill -9), the command is killed and its group is ended the
same way. In a terminal's foreground the command stays in accord's job instead, so that it can
read the terminal and Ctrl-C/Ctrl-Z work as usual; there only the command itself is stopped. If
only the final release (or --done) fails, accord warns and still exits with the command's code;
the lease then lapses at its ttl.

Examples:
  accord run nightly-report -- ./report.sh
  accord run --ttl 10s --timeout 5m deploy/prod -- make deploy
  accord run --timeout 0 --done import/2026-11-22 -- sh -c './import \"$ACCORD_FENCE\"'";

/// Locks, leases with fencing tokens, done-marking and notifications, from a shell.
#[derive(Parser, Debug)]
#[command(name = "accord", version, after_help = EXAMPLES)]
struct Cli {
    /// Coordinator URL: postgres://user:pass@host/db (sqlite:///path and memory: when the
    /// embedded store is available).
    #[arg(long, env = "ACCORD_URL", global = true, hide_env_values = true)]
    url: Option<String>,
    /// Namespace of the keys.
    #[arg(
        long,
        env = "ACCORD_NAMESPACE",
        hide_env_values = true,
        global = true,
        default_value = "default"
    )]
    namespace: String,
    /// Database schema of accord's tables.
    #[arg(
        long,
        env = "ACCORD_SCHEMA",
        global = true,
        hide_env_values = true,
        default_value = "accord"
    )]
    schema: String,
    /// Owner recorded on leases (default: host-pid-random).
    #[arg(long, env = "ACCORD_OWNER", global = true, hide_env_values = true)]
    owner: Option<String>,
    /// Where LISTEN goes when --url is a PgBouncer in transaction mode (which cannot carry
    /// it): a direct or session-pooled URL of the same database.
    #[arg(long, env = "ACCORD_LISTEN_URL", global = true, hide_env_values = true)]
    listen_url: Option<String>,
    /// Prepare accord's statements on each connection (true); false behind a PgBouncer in
    /// transaction mode before 1.21, which cannot carry prepared statements.
    #[arg(
        long,
        env = "ACCORD_PREPARE_STATEMENTS",
        global = true,
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    prepare_statements: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create or upgrade accord's schema (or print its SQL).
    Migrate {
        /// Print the migration SQL instead of applying it (no connection needed).
        #[arg(long)]
        print_sql: bool,
    },
    /// List keys: state, holder, fence, time left, metadata.
    #[command(visible_alias = "list")]
    Ls {
        /// Only keys starting with this prefix.
        #[arg(long)]
        prefix: Option<String>,
        /// Only keys in this state.
        #[arg(long, value_enum, default_value = "all")]
        state: StateArg,
        /// Only keys whose metadata contains this JSON object.
        #[arg(long, value_parser = parse_metadata)]
        metadata: Option<Metadata>,
        /// At most this many keys (default: all).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        limit: Option<u64>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Keys fetched per request (for tests of paging).
        #[arg(long, hide = true, default_value_t = accord::MAX_LIST_LIMIT as u64,
              value_parser = clap::value_parser!(u64).range(1..=accord::MAX_LIST_LIMIT as u64))]
        page_size: u64,
    },
    /// Acquire KEY (waiting for it, as `run` does), print its fence, and hold it (renewed) until
    /// Ctrl-C or SIGTERM.
    Acquire {
        #[arg(value_parser = non_empty)]
        key: String,
        /// Lease ttl; renewed every ttl/3 while held.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        ttl: Duration,
        /// How long to wait for the key: 0 = try once (exit 3 if held); default: wait forever
        /// (Ctrl-C or SIGTERM ends the wait), as `accord run` and every library's acquire.
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// JSON object merged into the key's metadata.
        #[arg(long, value_parser = parse_metadata)]
        metadata: Option<Metadata>,
        /// Hold the key shared: any number of shared holders at once, or one exclusive holder.
        #[arg(long, conflicts_with = "metadata")]
        shared: bool,
    },
    /// Not supported: a lease is released by the process holding it (see `accord release --help`).
    #[command(
        long_about = "Not supported. accord releases a lease only through the handle of the process \
                      that holds it (releases are fenced so that they never free a newer grant), so a \
                      separate command cannot release it. Use `accord run KEY -- command` (released \
                      when the command exits), stop `accord acquire` with Ctrl-C or SIGTERM, or wait \
                      for the lease's ttl to pass."
    )]
    Release {
        #[arg(value_parser = non_empty)]
        key: String,
    },
    /// Make a done (or free) key unknown again, so that it can be acquired.
    Reset {
        #[arg(value_parser = non_empty)]
        key: String,
    },
    /// Send PAYLOAD on CHANNEL to every listener.
    Notify {
        #[arg(value_parser = non_empty)]
        channel: String,
        /// The message (may be empty).
        payload: String,
    },
    /// Append PAYLOAD (or each line of stdin) to the durable STREAM; prints each event's seq.
    Publish {
        #[arg(value_parser = non_empty)]
        stream: String,
        /// The event (any text up to 64 KiB); without it, one event per stdin line.
        payload: Option<String>,
    },
    /// Print the events of STREAM as JSON lines ({stream, seq, payload, published_at}), stored
    /// ones first, then live ones, until Ctrl-C.
    Subscribe {
        #[arg(value_parser = non_empty)]
        stream: String,
        /// Where to start: earliest, latest, or a seq to read after (0: from the first event).
        /// With --consumer, earliest and latest apply only while the consumer has no stored
        /// position (a restart resumes after it), while a seq is a seek that wins over it
        /// (--from 0 replays the stream on every run). Default: latest, or where --consumer
        /// stopped.
        #[arg(long = "from", value_parser = stream::parse_start)]
        start: Option<accord::StreamStart>,
        /// A named consumer: its position is stored after each printed line, and a later
        /// `accord subscribe` of the same consumer goes on from there.
        #[arg(long, value_parser = non_empty)]
        consumer: Option<String>,
        /// Stop after this many events.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// Print STREAM's first and last stored seq and its retention (JSON); with --max-len,
    /// --max-age or --keep-all, set its retention first (trimming at once).
    Stream {
        #[arg(value_parser = non_empty)]
        stream: String,
        /// Keep at most this many of the newest events.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        max_len: Option<u64>,
        /// Keep events at most this old (e.g. 7d, 12h, 30m).
        #[arg(long, value_parser = parse_duration)]
        max_age: Option<Duration>,
        /// Remove the retention rule: keep every event.
        #[arg(long, conflicts_with_all = ["max_len", "max_age"])]
        keep_all: bool,
    },
    /// Print notifications on the channels as they arrive (channel<TAB>payload), until Ctrl-C.
    #[command(
        long_about = "Print notifications on the channels as they arrive, one line each \
                      (channel<TAB>payload), until Ctrl-C or SIGTERM. Once it is listening it says \
                      `accord: listening on CHANNELS` on stderr: every notification sent after that \
                      line is printed, one sent before it may not be (wait for it before notifying). \
                      Backslashes, control and format characters (bidirectional overrides, zero-width \
                      ones) and U+2028/U+2029 in channels and payloads are escaped (\\\\, \\n, \\r, \\t, \
                      \\xHH, \\uHHHH, \\UHHHHHHHH; `printf '%b'` undoes it), so that each line is one \
                      notification and cannot drive a terminal; --json prints them exact, in JSON \
                      strings (those characters as \\u escapes). Channels are not namespaced: \
                      a notification reaches the listeners of its channel in every namespace."
    )]
    Listen {
        #[arg(required = true, value_parser = non_empty)]
        channels: Vec<String>,
        /// One JSON object per line: {"channel": …, "payload": …} (nothing escaped).
        #[arg(long)]
        json: bool,
    },
    /// Run a command while holding KEY (like flock(1), across machines).
    #[command(after_help = RUN_HELP)]
    Run {
        #[arg(value_parser = non_empty)]
        key: String,
        /// Lease ttl; renewed every ttl/3 while the command runs.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        ttl: Duration,
        /// How long to wait for the key: 0 = try once (exit 3 if held); default: wait forever.
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// After the lease is lost, how long the command has between SIGTERM and SIGKILL.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        kill_after: Duration,
        /// Mark the key done when the command exits with 0.
        #[arg(long)]
        done: bool,
        /// JSON object merged into the key's metadata.
        #[arg(long, value_parser = parse_metadata)]
        metadata: Option<Metadata>,
        /// Hold the key shared while the command runs (many readers, or one exclusive holder).
        #[arg(long, conflicts_with_all = ["done", "metadata"])]
        shared: bool,
        /// The command and its arguments (after --).
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Offer the keys read from stdin (one a line) to the work pool PREFIX; prints how many joined.
    #[command(
        long_about = "Offer the keys read from stdin (one a line, blank lines skipped) to the work pool \
                      PREFIX: each becomes claimable by `accord work`. Every key must start with PREFIX. \
                      Idempotent: keys already known (free, held or done) stay as they are. Prints how \
                      many keys joined."
    )]
    Offer {
        #[arg(value_parser = non_empty)]
        prefix: String,
        /// JSON object: the metadata of keys new to the coordinator.
        #[arg(long, value_parser = parse_metadata)]
        metadata: Option<Metadata>,
    },
    /// How many keys of the work pool PREFIX are free, held and done.
    Counts {
        #[arg(value_parser = non_empty)]
        prefix: String,
        /// One JSON object: {"free", "held", "done", "total"}.
        #[arg(long)]
        json: bool,
        /// Refresh every second until nothing is free or held (a progress bar on a terminal).
        #[arg(long)]
        watch: bool,
    },
    /// Run a command for every key of the work pool PREFIX, N at a time (xargs -P across machines).
    #[command(after_help = pool::WORK_HELP)]
    Work {
        #[arg(value_parser = non_empty)]
        prefix: String,
        /// Workers: commands run at once by this process.
        #[arg(short = 'j', long = "jobs", default_value_t = 1,
              value_parser = clap::value_parser!(u16).range(1..=1024))]
        jobs: u16,
        /// Lease ttl of each claimed key; renewed every ttl/3 while it is held.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        ttl: Duration,
        /// Keys each worker claims at once (it runs them one after another).
        #[arg(long, default_value = "1", value_parser = parse_claim_limit)]
        batch: usize,
        /// After a lease is lost, how long its command has between SIGTERM and SIGKILL.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        kill_after: Duration,
        /// The command and its arguments (after --); `{}` is replaced by the key.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// A live view of the namespace's keys: state, holder, fence, time left, metadata.
    #[command(after_help = TOP_HELP)]
    Top {
        /// Only keys starting with this prefix (`/` changes it in the view).
        prefix: Option<String>,
        /// How often to read the keys again (one list page, one round trip, each time).
        #[arg(long, default_value = "1s", value_parser = parse_interval)]
        interval: Duration,
        /// Print the keys and sections once as plain tables (no escape codes) and exit.
        #[arg(long)]
        once: bool,
        /// The rows' order (`s` cycles it in the view).
        #[arg(long, value_enum, default_value = "key")]
        sort: top::SortKey,
        /// Serve GET /metrics in Prometheus' text format on this address (e.g.
        /// 127.0.0.1:9464) instead of drawing, until Ctrl-C or SIGTERM.
        #[arg(long, value_name = "ADDR", conflicts_with = "once")]
        prometheus: Option<std::net::SocketAddr>,
        /// Listen on this notification channel and show its messages per second, total and
        /// last payload (repeatable). Only messages sent while top listens, on the channels
        /// named: PostgreSQL has no wildcard LISTEN and keeps no notifications. With --once,
        /// listens for one --interval first.
        #[arg(long = "channel", value_name = "NAME", conflicts_with = "prometheus")]
        channels: Vec<String>,
    },
}

const TOP_HELP: &str = "\
Each refresh (and each scrape with --prometheus) is one snapshot of the namespace (one round
trip on PostgreSQL, one transaction on SQLite): the first 1,000 keys under the prefix, the exact
counts by state of every key under it, and every group's members, fleet's members and shards
(and the unowned ones), election's leader, and stream's length and named readers' lag. The
prefix filters the keys and counts, not those sections. A table or section cut by a read limit
(1,000 keys; 10,000 rows of elections, fleets and groups; 1,000 of streams) says so on a line
starting with \"…\" before its titles; in the live view, sections taller than half the screen
end with \"… N more lines below\", and the footer says \"more below\" when keys are below it.

Names, metadata and payloads are escaped (control and format characters, U+2028/U+2029: \\n,
\\x1b, \\u202e, ...), so that a worker's key cannot drive this terminal; --once also writes
spaces in names as \\x20, so that its rows split on whitespace.

--channel NAME counts the notifications on NAME while top listens: messages per second over the
last interval, the total and the last payload (escaped). It sees nothing sent before it started
or on channels not named (PostgreSQL has no wildcard LISTEN and stores no notifications), nor
the channels accord uses inside (accord_*).

LEFT's bar is the time left of the lease's ttl (from its last grant or renewal), or of the
longest time left on screen when that is unknown.

Keys in the view: q (or Esc, Ctrl-C) quits, s cycles the sort (key, time left, fence), / edits
the prefix (Enter applies, Esc cancels), arrows, PgUp/PgDn, Home/End scroll.";

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(100) {
        return Err("must be at least 100ms".into());
    }
    Ok(d)
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StateArg {
    Held,
    Free,
    Done,
    All,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{e} (expected a duration such as 500ms, 30s, 2m, 1h)"))
}

fn parse_metadata(s: &str) -> Result<Metadata, String> {
    match serde_json::from_str::<serde_json::Value>(s) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err("expected a JSON object such as '{\"team\":\"billing\"}'".into()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

fn parse_claim_limit(s: &str) -> Result<usize, String> {
    let n: i64 = s
        .trim()
        .parse()
        .map_err(|e| format!("expected a whole number: {e}"))?;
    accord::limits::claim_limit(n).map_err(|e| output::said(&e))
}

fn non_empty(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(s.to_string())
    }
}

/// An error on its way out: a message for stderr (none: end quietly) and an exit code.
struct Failure {
    code: u8,
    message: Option<String>,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: Some(message.into()),
        }
    }

    /// The reader of stdout went away (a closed pipe: `accord ls | head -1`): it wants no more,
    /// so accord stops without a word and exits 0.
    fn reader_gone() -> Self {
        Failure {
            code: exit::OK,
            message: None,
        }
    }

    /// Whether this is [`Failure::reader_gone`]: a streaming command stops, quietly, with 0.
    fn is_reader_gone(&self) -> bool {
        self.code == exit::OK && self.message.is_none()
    }
}

impl From<accord::Error> for Failure {
    fn from(e: accord::Error) -> Self {
        Failure::new(code_of(e.kind()), output::said(&e))
    }
}

fn code_of(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::InvalidArgument => exit::USAGE,
        ErrorKind::Held | ErrorKind::Timeout => exit::HELD,
        ErrorKind::Done => exit::DONE,
        ErrorKind::LeaseLost => exit::LOST,
        ErrorKind::Trimmed => exit::TRIMMED,
        _ => exit::ERROR,
    }
}

type Outcome = Result<u8, Failure>;

fn main() -> ExitCode {
    // args_os: the command's arguments need not be UTF-8.
    if std::env::args_os().nth(1).as_deref() == Some(supervise::WATCHDOG_ARG.as_ref()) {
        let args: Vec<String> = std::env::args_os()
            .skip(2)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return supervise::watchdog_main(&args);
    }
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            note!("accord: error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::ERROR);
        }
    };
    let outcome = runtime.block_on(dispatch(cli));
    // Do not wait for background tasks (a listener reconnecting, say) once the answer is known.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if let Some(message) = f.message {
                note!("accord: error: {message}");
            }
            ExitCode::from(f.code)
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("ACCORD_LOG").unwrap_or_else(|_| "warn".into());
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| output::LogWriter)
        .with_target(false)
        // No colours: the writer escapes ESC, as it does any in a logged name.
        .with_ansi(false)
        .try_init();
}

async fn dispatch(cli: Cli) -> Outcome {
    if let Command::Migrate { print_sql: true } = cli.command {
        output::print(&mut output::stdout(), &accord::migration_sql(&cli.schema)?)?;
        return Ok(exit::OK);
    }
    if let Command::Release { key } = &cli.command {
        return Err(Failure::new(
            exit::ERROR,
            format!(
                "cannot release {key:?} from another process: accord releases a lease only through \
                 the handle of the process holding it. Use `accord run {key} -- COMMAND` (released \
                 when the command exits), stop `accord acquire {key}` with Ctrl-C or SIGTERM, or \
                 wait for its ttl to pass"
            ),
        ));
    }
    let Some(url) = cli.url.clone() else {
        return Err(Failure::new(
            exit::USAGE,
            "no coordinator URL: pass --url or set ACCORD_URL (e.g. postgres://user:pass@host/db)",
        ));
    };
    let mut options = ClientOptions::new()
        .namespace(cli.namespace.clone())
        .schema(cli.schema.clone())
        .application_name("accord-cli");
    if let Some(owner) = &cli.owner {
        options = options.owner(owner.clone());
    }
    if let Some(listen_url) = &cli.listen_url {
        options = options.listen_url(listen_url.clone());
    }
    options = options.prepare_statements(cli.prepare_statements);
    let client = Client::connect(&url, options).await?;
    let outcome = match cli.command {
        Command::Migrate { .. } => {
            note!("accord: schema {:?} is up to date", cli.schema);
            Ok(exit::OK)
        }
        Command::Ls {
            prefix,
            state,
            metadata,
            limit,
            json,
            page_size,
        } => {
            ls(
                &client,
                prefix,
                state,
                metadata,
                limit,
                json,
                page_size as usize,
            )
            .await
        }
        Command::Acquire {
            key,
            ttl,
            timeout,
            metadata,
            shared,
        } => acquire(&client, &key, lease_options(ttl, metadata, shared), timeout).await,
        Command::Release { .. } => unreachable!("handled before connecting"),
        Command::Reset { key } => match client.reset(&key).await? {
            true => {
                note!("accord: reset {key:?}");
                Ok(exit::OK)
            }
            false => {
                note!("accord: {key:?} was not known (nothing to reset)");
                Ok(exit::OK)
            }
        },
        Command::Notify { channel, payload } => {
            client.notify(&channel, &payload).await?;
            Ok(exit::OK)
        }
        Command::Listen { channels, json } => listen(&client, channels, json).await,
        Command::Publish { stream, payload } => stream::publish(&client, &stream, payload).await,
        Command::Subscribe {
            stream,
            start,
            consumer,
            count,
        } => {
            stream::subscribe(
                &client,
                stream::SubscribeArgs {
                    stream,
                    start,
                    consumer,
                    count,
                },
            )
            .await
        }
        Command::Stream {
            stream,
            max_len,
            max_age,
            keep_all,
        } => {
            stream::stream(
                &client,
                stream::StreamArgs {
                    stream,
                    max_len,
                    max_age,
                    keep_all,
                },
            )
            .await
        }
        Command::Offer { prefix, metadata } => pool::offer(&client, &prefix, metadata).await,
        Command::Counts {
            prefix,
            json,
            watch,
        } => pool::counts(&client, &prefix, json, watch).await,
        Command::Work {
            prefix,
            jobs,
            ttl,
            batch,
            kill_after,
            command,
        } => {
            pool::work(
                &client,
                pool::WorkArgs {
                    prefix,
                    jobs: jobs as usize,
                    ttl,
                    batch,
                    kill_after,
                    command,
                },
            )
            .await
        }
        Command::Top {
            prefix,
            interval,
            once,
            sort,
            prometheus,
            channels,
        } => {
            let prefix = prefix.unwrap_or_default();
            match (once, prometheus) {
                (true, _) => top::once(&client, &prefix, sort, &channels, interval).await,
                (false, Some(addr)) => metrics::serve(&client, prefix, addr).await,
                (false, None) => top::live(&client, prefix, sort, interval, &channels).await,
            }
        }
        Command::Run {
            key,
            ttl,
            timeout,
            kill_after,
            done,
            metadata,
            shared,
            command,
        } => {
            run(
                &client,
                RunArgs {
                    key,
                    ttl,
                    timeout,
                    kill_after,
                    done,
                    metadata,
                    shared,
                    command,
                },
            )
            .await
        }
    };
    client.close().await;
    outcome
}

fn signals() -> Result<(Signal, Signal), Failure> {
    let int = signal(SignalKind::interrupt())
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot handle SIGINT: {e}")))?;
    let term = signal(SignalKind::terminate())
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot handle SIGTERM: {e}")))?;
    Ok((int, term))
}

// ---------------------------------------------------------------------------------------- ls

async fn ls(
    client: &Client,
    prefix: Option<String>,
    state: StateArg,
    metadata: Option<Metadata>,
    limit: Option<u64>,
    json: bool,
    page_size: usize,
) -> Outcome {
    let mut remaining = limit.map(|l| l as usize);
    let mut cursor: Option<String> = None;
    let mut items = Vec::new();
    loop {
        let page_size = remaining.unwrap_or(usize::MAX).min(page_size);
        let mut query = ListQuery::new().limit(page_size);
        if let Some(p) = &prefix {
            query = query.prefix(p.clone());
        }
        query = match state {
            StateArg::Held => query.state(KeyState::Held),
            StateArg::Free => query.state(KeyState::Free),
            StateArg::Done => query.state(KeyState::Done),
            StateArg::All => query,
        };
        if let Some(m) = &metadata {
            query = query.metadata(m.clone());
        }
        if let Some(c) = cursor.take() {
            query = query.cursor(c);
        }
        let page = client.list(query).await?;
        let n = page.items.len();
        items.extend(page.items);
        if let Some(r) = remaining.as_mut() {
            *r = r.saturating_sub(n);
            if *r == 0 {
                break;
            }
        }
        match page.next_cursor {
            Some(c) if n > 0 => cursor = Some(c),
            _ => break,
        }
    }
    let now = chrono::Utc::now();
    let mut out = output::stdout().lock();
    if json {
        for i in &items {
            let left_ms = i
                .expires_at
                .filter(|_| i.state == KeyState::Held)
                .map(|t| (t - now).num_milliseconds().max(0));
            let line = serde_json::json!({
                "key": i.key,
                "state": i.state.as_str(),
                "owner": i.owner,
                "fence": i.fence,
                "expires_at": i.expires_at.filter(|_| i.state == KeyState::Held).map(|t| t.to_rfc3339()),
                "ttl_left_ms": left_ms,
                "done": i.state == KeyState::Done,
                "metadata": i.metadata,
                "updated_at": i.updated_at.to_rfc3339(),
                "shared": i.shared,
            });
            output::print(&mut out, &format!("{}\n", output::json(&line)))?;
        }
        return Ok(exit::OK);
    }
    let rows: Vec<[String; 6]> = items
        .iter()
        .map(|i| {
            let left = match (i.state, i.expires_at) {
                (KeyState::Held, Some(t)) => {
                    let ms = (t - now).num_milliseconds().max(0) as u64;
                    format_left(Duration::from_millis(ms))
                }
                _ => "-".into(),
            };
            let meta = if i.metadata.is_empty() {
                "-".to_string()
            } else {
                output::json(&serde_json::Value::Object(i.metadata.clone()))
            };
            [
                // Escaped as `listen` does: a key or owner holding a newline is one row.
                output::escape(&i.key).into_owned(),
                // A key held shared is listed once per holder.
                if i.shared {
                    "shared".to_string()
                } else {
                    i.state.as_str().to_string()
                },
                i.owner
                    .as_deref()
                    .map_or_else(|| "-".into(), |o| output::escape(o).into_owned()),
                i.fence.to_string(),
                left,
                meta,
            ]
        })
        .collect();
    let header = ["KEY", "STATE", "HOLDER", "FENCE", "LEFT", "METADATA"];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut s = String::new();
        for (k, c) in cells.iter().enumerate() {
            if k == 5 {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[k]));
            }
        }
        s.trim_end().to_string()
    };
    let mut table = format!("{}\n", line(header));
    for r in &rows {
        table.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
        table.push('\n');
    }
    output::print(&mut out, &table)?;
    Ok(exit::OK)
}

fn format_left(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        let s = d.as_secs();
        if s < 120 {
            format!("{s}s")
        } else if s < 7200 {
            format!("{}m{:02}s", s / 60, s % 60)
        } else {
            format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
        }
    }
}

// ----------------------------------------------------------------------------------- acquire

/// Acquires `key`: waits up to `timeout` (`None`: forever; zero: tries once). `Held` (exit 3)
/// if the key stayed held. The caller's signal streams, made before and kept after, so that no
/// Ctrl-C falls between two of them.
async fn take(
    client: &Client,
    key: &str,
    options: AcquireOptions,
    timeout: Option<Duration>,
    (int, term): &mut (Signal, Signal),
) -> Result<accord::Lease, Failure> {
    let cancel = accord::CancellationToken::new();
    let attempt = async {
        match timeout {
            Some(t) if t.is_zero() => match client.try_acquire(key, options).await? {
                Some(lease) => Ok(lease),
                None => Err(Failure::new(exit::HELD, accord::Error::held(key).message())),
            },
            Some(t) => Ok(client
                .acquire(key, options.timeout(t).cancel(cancel.clone()))
                .await?),
            None => Ok(client.acquire(key, options.cancel(cancel.clone())).await?),
        }
    };
    tokio::pin!(attempt);
    tokio::select! {
        r = &mut attempt => r,
        _ = int.recv() => { cancel.cancel(); let _ = attempt.await; Err(Failure::new(130, "interrupted while waiting for the key")) }
        _ = term.recv() => { cancel.cancel(); let _ = attempt.await; Err(Failure::new(143, "terminated while waiting for the key")) }
    }
}

/// What `acquire` and `run` ask for.
fn lease_options(ttl: Duration, metadata: Option<Metadata>, shared: bool) -> AcquireOptions {
    let options = AcquireOptions::new().ttl(ttl).shared(shared);
    match metadata {
        Some(m) => options.metadata(m),
        None => options,
    }
}

async fn acquire(
    client: &Client,
    key: &str,
    options: AcquireOptions,
    timeout: Option<Duration>,
) -> Outcome {
    let mut signals = signals()?;
    let lease = take(client, key, options, timeout, &mut signals).await?;
    let (int, term) = &mut signals;
    // The fence is for whoever reads stdout; if nobody does (a closed pipe), the lease is
    // still held, as asked, until Ctrl-C.
    let _ = output::print(&mut output::stdout(), &format!("{}\n", lease.fence()));
    note!(
        "accord: holding {key:?} (fence {}, owner {}); Ctrl-C or SIGTERM releases it",
        lease.fence(),
        lease.owner()
    );
    let lost = lease.lost();
    tokio::select! {
        _ = lost => {
            return Err(Failure::new(exit::LOST, format!("lost the lease on {key:?} (fence {})", lease.fence())));
        }
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    lease.release().await?;
    note!("accord: released {key:?}");
    Ok(exit::OK)
}

// ------------------------------------------------------------------------------------ listen

async fn listen(client: &Client, channels: Vec<String>, json: bool) -> Outcome {
    let (mut int, mut term) = signals()?;
    let sub = client.listen(&channels).await?;
    note!("accord: listening on {}", channels.join(", "));
    let mut out = output::stdout();
    loop {
        tokio::select! {
            event = sub.recv() => match event? {
                Some(accord::Event::Message(m)) => {
                    let line = if json {
                        output::json(&serde_json::json!({"channel": m.channel, "payload": m.payload}))
                    } else {
                        // Escaped: a payload holding a newline (or a tab, or a terminal escape)
                        // stays one line, and cannot forge another notification.
                        format!("{}\t{}", output::escape(&m.channel), output::escape(&m.payload))
                    };
                    if let Err(failure) = output::print(&mut out, &format!("{line}\n")) {
                        sub.close().await;
                        return Err(failure);
                    }
                }
                Some(accord::Event::Reconnected) => {
                    note!("accord: the listening connection was re-established; messages sent while it was down were missed");
                }
                None => return Err(Failure::new(exit::ERROR, "the subscription ended")),
            },
            _ = int.recv() => break,
            _ = term.recv() => break,
        }
    }
    sub.close().await;
    Ok(exit::OK)
}

// --------------------------------------------------------------------------------------- run

struct RunArgs {
    key: String,
    ttl: Duration,
    timeout: Option<Duration>,
    kill_after: Duration,
    done: bool,
    metadata: Option<Metadata>,
    shared: bool,
    command: Vec<String>,
}

fn exit_code_of(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(sig)) => (128 + sig).min(255) as u8,
        _ => exit::ERROR,
    }
}

fn send_signal(pid: Option<u32>, sig: libc::c_int) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child that
        // has not been reaped yet (tokio forgets it once reaped).
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

async fn run(client: &Client, args: RunArgs) -> Outcome {
    let key = args.key.as_str();
    let mut signals = signals()?;
    let lease = take(
        client,
        key,
        lease_options(args.ttl, args.metadata.clone(), args.shared),
        args.timeout,
        &mut signals,
    )
    .await?;
    let fence = lease.fence();
    let (int, term) = &mut signals;
    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("ACCORD_KEY", key)
        .env("ACCORD_FENCE", fence.to_string())
        .env("ACCORD_NAMESPACE", client.namespace())
        .env("ACCORD_OWNER", client.owner());
    // From here on every path ends the command's process group (`shutdown`) before the lease
    // is released, and accord being killed outright ends it too (see supervise.rs).
    let mut child = match supervise::spawn(command, args.kill_after).await {
        Ok(child) => child,
        Err(e) => {
            let _ = lease.release().await;
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Err(Failure::new(
                code,
                format!("cannot run {:?}: {e}", args.command[0]),
            ));
        }
    };
    let pid = child.id();
    let lost = lease.lost();
    tokio::pin!(lost);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = &mut lost => {
                note!(
                    "accord: lost the lease on {key:?} (fence {fence}); stopping the command (SIGTERM, SIGKILL after {})",
                    humantime::format_duration(args.kill_after)
                );
                child.shutdown(false).await;
                return Err(Failure::new(
                    exit::LOST,
                    format!("the lease on {key:?} (fence {fence}) was lost; the command was stopped"),
                ));
            }
            _ = int.recv() => send_signal(pid, libc::SIGINT),
            _ = term.recv() => send_signal(pid, libc::SIGTERM),
        }
    };
    // The command has exited: processes it left in its group are stopped while the lease is
    // still held.
    child.shutdown(status.is_ok()).await;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let _ = lease.release().await;
            return Err(Failure::new(
                exit::ERROR,
                format!("cannot wait for the command: {e}"),
            ));
        }
    };
    let code = exit_code_of(status);
    if lease.is_lost() {
        // It ended, but maybe after someone else could have been granted the key.
        return Err(Failure::new(
            exit::LOST,
            format!(
                "the lease on {key:?} (fence {fence}) was lost before the command ended (its exit code was {code})"
            ),
        ));
    }
    let mark_done = args.done && status.success();
    let finished = if mark_done {
        lease.done(None).await
    } else {
        lease.release().await
    };
    match finished {
        Ok(()) => Ok(code),
        Err(e) if e.kind() == ErrorKind::LeaseLost => Err(e.into()),
        Err(e) => {
            // The command's work is done and its code is the answer; the coordinator only
            // missed the release, and the lease lapses at its ttl.
            let what = if mark_done {
                format!("marking {key:?} done")
            } else {
                format!("releasing {key:?}")
            };
            note!(
                "accord: warning: the command exited with {code}, but {what} (fence {fence}) failed: {}; {}the lease lapses within its ttl ({})",
                output::said(&e),
                if mark_done { "the key may not be marked done, and " } else { "" },
                humantime::format_duration(args.ttl),
            );
            Ok(code)
        }
    }
}
