//! `accord top`: a live terminal view of a namespace's keys (ratatui), a plain table with
//! `--once`, and Prometheus text with `--prometheus ADDR` (see metrics.rs).
//!
//! Every refresh is one `Client::snapshot` (one round trip on PostgreSQL: its statements are
//! pipelined; one transaction on SQLite): the first page of up to `MAX_LIST_LIMIT` rows under
//! the prefix, the exact counts by state under it, the acquires waiting in line for each key,
//! and the namespace's groups, fleets, elections and streams. What each section holds is the core's rule (`accord::snapshot`);
//! this file only renders. `--channel` listens on channels and counts what arrives.

use std::io::IsTerminal;
use std::time::Duration;

use accord::{Client, KeyCounts, KeyState, ListQuery, Metadata, NamespaceSnapshot};
use clap::ValueEnum;
use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row as TableRow, Table};
use ratatui::Terminal;

use crate::{exit, format_left, output, signals, Failure, Outcome};

/// Rows read per refresh: one page, the largest `list` allows.
pub const PAGE: usize = accord::MAX_LIST_LIMIT;

/// The order of the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// By key (a key's shared holders by fence).
    Key,
    /// Held keys by time left, soonest expiry first; then the others by key.
    Left,
    /// By fence, newest grant first.
    Fence,
}

impl SortKey {
    fn next(self) -> SortKey {
        match self {
            SortKey::Key => SortKey::Left,
            SortKey::Left => SortKey::Fence,
            SortKey::Fence => SortKey::Key,
        }
    }

    fn name(self) -> &'static str {
        match self {
            SortKey::Key => "key",
            SortKey::Left => "time left",
            SortKey::Fence => "fence",
        }
    }
}

/// One row: a key, or one shared holder of a key.
#[derive(Clone, Debug)]
pub struct Row {
    pub key: String,
    pub state: KeyState,
    pub shared: bool,
    pub owner: Option<String>,
    pub fence: i64,
    /// Held rows: time until the lease expires (by this machine's clock).
    pub left: Option<Duration>,
    /// Held rows: the ttl of the last grant or renewal (expiry minus the row's last change),
    /// when that is at least the time left.
    pub ttl: Option<Duration>,
    /// Acquires waiting in line for the key (exclusive and shared), on the key's first row in
    /// key order (its smallest fence) only: 0 on the others, and when none wait.
    pub waiting: u64,
    pub metadata: Metadata,
}

impl Row {
    pub fn state_name(&self) -> &'static str {
        if self.shared {
            "shared"
        } else {
            self.state.as_str()
        }
    }
}

/// What one refresh read.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub rows: Vec<Row>,
    /// Every key under the prefix by state (exact, however many).
    pub counts: KeyCounts,
    /// The page was full: more keys follow than the table shows.
    pub truncated: bool,
    /// The groups, fleets, elections and streams (their `keys` left empty: see `rows`).
    pub sections: NamespaceSnapshot,
}

/// One snapshot: the first page under `prefix` and the namespace's sections (one round trip).
pub async fn read(client: &Client, prefix: &str) -> Result<Snapshot, accord::Error> {
    let mut query = ListQuery::new().limit(PAGE);
    if !prefix.is_empty() {
        query = query.prefix(prefix.to_string());
    }
    let mut sections = client.snapshot(query).await?;
    let page = std::mem::take(&mut sections.keys);
    let now = chrono::Utc::now();
    let rows = page
        .items
        .iter()
        .enumerate()
        .map(|(n, i)| {
            let (left, ttl) = match (i.state, i.expires_at) {
                (KeyState::Held, Some(t)) => {
                    let left = (t - now).to_std().unwrap_or(Duration::ZERO);
                    // Expiry and change come from one statement's clock, microseconds
                    // apart: rounded to a tenth of a second, a 30 s lease reads 30s.
                    let ttl = (t - i.updated_at)
                        .to_std()
                        .ok()
                        .map(|d| Duration::from_millis((d.as_millis() as u64 + 50) / 100 * 100))
                        .filter(|ttl| !ttl.is_zero() && *ttl + Duration::from_millis(50) >= left);
                    (Some(left), ttl)
                }
                _ => (None, None),
            };
            // The page is in (key, fence) order: a key's first row follows another key's.
            let first_of_key = n == 0 || page.items.get(n - 1).is_none_or(|p| p.key != i.key);
            let waiting = match sections.waiters_on(&i.key) {
                Some(w) if first_of_key => w.total(),
                _ => 0,
            };
            Row {
                key: i.key.clone(),
                state: i.state,
                shared: i.shared,
                owner: i.owner.clone(),
                fence: i.fence,
                left,
                ttl,
                waiting,
                metadata: i.metadata.clone(),
            }
        })
        .collect();
    Ok(Snapshot {
        rows,
        counts: sections.counts,
        truncated: page.next_cursor.is_some(),
        sections,
    })
}

pub fn sort(rows: &mut [Row], by: SortKey) {
    match by {
        // The page's own order.
        SortKey::Key => rows.sort_by(|a, b| (&a.key, a.fence).cmp(&(&b.key, b.fence))),
        SortKey::Left => rows.sort_by(|a, b| {
            let la = a.left.unwrap_or(Duration::MAX);
            let lb = b.left.unwrap_or(Duration::MAX);
            (la, &a.key, a.fence).cmp(&(lb, &b.key, b.fence))
        }),
        SortKey::Fence => rows.sort_by(|a, b| (b.fence, &a.key).cmp(&(a.fence, &b.key))),
    }
}

/// `k=v k2=v2`, strings unquoted, names and values escaped (`output::escape`), at most `width`
/// characters (an ellipsis when cut); `-` when empty.
pub fn metadata_summary(m: &Metadata, width: usize) -> String {
    if m.is_empty() {
        return "-".into();
    }
    let s = m
        .iter()
        .map(|(k, v)| {
            let k = output::escape(k);
            match v {
                serde_json::Value::String(s) => format!("{k}={}", output::escape(s)),
                other => format!("{k}={}", output::json(other)),
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    truncate(&s, width)
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn counts_line(s: &Snapshot) -> String {
    let c = &s.counts;
    let mut line = format!(
        "held {}  free {}  done {}  keys {}",
        c.held,
        c.free,
        c.done,
        c.keys()
    );
    if c.shared_holders > 0 {
        line.push_str(&format!("  shared holders {}", c.shared_holders));
    }
    if c.waiting > 0 {
        line.push_str(&format!("  waiting {}", c.waiting));
    }
    line
}

/// The WAIT cell: how many acquires wait in line for the row's key, `-` for none.
fn wait_cell(r: &Row) -> String {
    if r.waiting == 0 {
        "-".into()
    } else {
        r.waiting.to_string()
    }
}

// ------------------------------------------------------------------------------- channels

/// What `--channel` saw on one channel since it started listening.
#[derive(Clone, Debug)]
pub struct ChannelCount {
    pub channel: String,
    pub total: u64,
    /// Messages per second over the last refresh interval.
    pub rate: f64,
    pub last_payload: Option<String>,
    total_at_last_refresh: u64,
}

/// The channels `--channel` listens on, and what arrived.
pub struct Channels {
    sub: accord::Subscription,
    pub counts: Vec<ChannelCount>,
    /// The listening connection was re-established at least once: messages may be missing.
    pub reconnected: bool,
    since: std::time::Instant,
}

impl Channels {
    /// Listens on `channels` (their LISTEN confirmed before this returns).
    pub async fn open(client: &Client, channels: &[String]) -> Result<Channels, accord::Error> {
        let sub = client.listen(channels).await?;
        let mut counts: Vec<ChannelCount> = Vec::new();
        for c in channels {
            if !counts.iter().any(|k| &k.channel == c) {
                counts.push(ChannelCount {
                    channel: c.clone(),
                    total: 0,
                    rate: 0.0,
                    last_payload: None,
                    total_at_last_refresh: 0,
                });
            }
        }
        Ok(Channels {
            sub,
            counts,
            reconnected: false,
            since: std::time::Instant::now(),
        })
    }

    /// The next event (cancel-safe): counts a message, notes a reconnect.
    async fn next(&mut self) -> Result<(), accord::Error> {
        match self.sub.recv().await? {
            Some(accord::Event::Message(m)) => {
                if let Some(c) = self.counts.iter_mut().find(|c| c.channel == m.channel) {
                    c.total += 1;
                    c.last_payload = Some(m.payload);
                }
                Ok(())
            }
            Some(_) => {
                self.reconnected = true;
                Ok(())
            }
            None => Err(accord::Error::new(
                accord::ErrorKind::Closed,
                "the subscription ended",
            )),
        }
    }

    /// Rates over the time since the previous call (or since listening began).
    fn tick(&mut self) {
        let secs = self.since.elapsed().as_secs_f64().max(1e-3);
        for c in &mut self.counts {
            c.rate = (c.total - c.total_at_last_refresh) as f64 / secs;
            c.total_at_last_refresh = c.total;
        }
        self.since = std::time::Instant::now();
    }
}

// ------------------------------------------------------------------------------- sections

/// Time left until `t` by this machine's clock, as `format_left` writes it; `-` without one.
fn left_until(
    t: Option<chrono::DateTime<chrono::Utc>>,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    t.map(|t| format_left((t - now).to_std().unwrap_or(Duration::ZERO)))
        .unwrap_or_else(|| "-".into())
}

/// Shard names, runs of consecutive numbers written `a-b`: `0-3,7,x`.
pub fn shard_list(shards: &[&str]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(u64, u64)> = None;
    let flush = |run: &mut Option<(u64, u64)>, parts: &mut Vec<String>| {
        if let Some((a, b)) = run.take() {
            parts.push(if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            });
        }
    };
    for s in shards {
        match s.parse::<u64>() {
            // Numbers only as written canonically ("07" stays a name).
            Ok(n) if n.to_string() == *s => match run {
                Some((a, b)) if n == b + 1 => run = Some((a, n)),
                _ => {
                    flush(&mut run, &mut parts);
                    run = Some((n, n));
                }
            },
            _ => {
                flush(&mut run, &mut parts);
                parts.push(output::escape(s).into_owned());
            }
        }
    }
    flush(&mut run, &mut parts);
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

/// A plain table: column titles, then rows, columns padded to the widest cell, two spaces
/// apart, no trailing spaces.
fn plain_table(titles: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = titles.iter().map(|t| t.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut text = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (k, c) in cells.iter().enumerate() {
            s.push_str(&format!("{c:<w$}  ", w = widths[k]));
        }
        text.push_str(s.trim_end());
        text.push('\n');
    };
    line(titles.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    text
}

/// The sections under the key table, as plain text: one table per non-empty section, each
/// after a blank line. Cells hold no spaces (names are escaped, lists comma-separated), so a
/// script can split on whitespace; the metadata summary, last, may hold spaces. A section that a
/// read limit cut short says so on a line starting with `…` between the blank line and its
/// titles (alone when the cut came before its first row).
pub fn render_sections(snap: &Snapshot, channels: Option<&Channels>) -> String {
    let now = chrono::Utc::now();
    let s = &snap.sections;
    let name = cell;
    let mut text = String::new();
    let recipes_cut = |cut: bool, what: &str| {
        cut.then(|| {
            format!(
                "… more {what} not shown (read limit {} rows of elections, fleets and groups)",
                thousands(accord::MAX_SNAPSHOT_RECIPE_ROWS)
            )
        })
    };

    let rows: Vec<Vec<String>> = s
        .groups
        .iter()
        .flat_map(|g| {
            g.members.iter().map(|m| {
                vec![
                    name(&g.group),
                    name(&m.owner),
                    m.fence.to_string(),
                    left_until(m.expires_at, now),
                    metadata_summary(&m.metadata, 60),
                ]
            })
        })
        .collect();
    push_section(
        &mut text,
        &["GROUP", "MEMBER", "FENCE", "LEFT", "METADATA"],
        &rows,
        recipes_cut(s.cut.groups, "group members"),
    );

    let mut rows: Vec<Vec<String>> = Vec::new();
    for f in &s.fleets {
        let mut owners: Vec<(String, Option<&accord::MemberInfo>)> = f
            .members
            .iter()
            .map(|m| (m.owner.clone(), Some(m)))
            .collect();
        // A holder of shards that is no live member (it left, its shards not yet expired).
        for shard in &f.shards {
            if let Some(o) = &shard.owner {
                if !owners.iter().any(|(n, _)| n == o) {
                    owners.push((o.clone(), None));
                }
            }
        }
        for (owner, member) in owners {
            let held = f.shards_of(&owner);
            rows.push(vec![
                name(&f.fleet),
                name(&owner),
                held.len().to_string(),
                shard_list(&held),
                left_until(member.and_then(|m| m.expires_at), now),
            ]);
        }
        let unowned = f.unowned();
        rows.push(vec![
            name(&f.fleet),
            "(unowned)".into(),
            unowned.len().to_string(),
            shard_list(&unowned),
            "-".into(),
        ]);
    }
    push_section(
        &mut text,
        &["FLEET", "MEMBER", "SHARDS", "OWNS", "LEFT"],
        &rows,
        recipes_cut(s.cut.fleets, "fleet members and shards"),
    );

    let rows: Vec<Vec<String>> = s
        .elections
        .iter()
        .map(|e| {
            vec![
                name(&e.election),
                // A vacant election (its leader resigned or expired): the alert's case.
                e.leader.as_deref().map_or_else(|| "(vacant)".into(), name),
                e.fence.to_string(),
                left_until(e.expires_at, now),
            ]
        })
        .collect();
    push_section(
        &mut text,
        &["ELECTION", "LEADER", "FENCE", "LEFT"],
        &rows,
        recipes_cut(s.cut.elections, "elections"),
    );

    let mut rows: Vec<Vec<String>> = Vec::new();
    for st in &s.streams {
        let base = |reader: String, acked: String, lag: String| {
            vec![
                name(&st.stream),
                st.length().to_string(),
                st.first_seq.to_string(),
                st.last_seq.to_string(),
                reader,
                acked,
                lag,
            ]
        };
        if st.readers.is_empty() {
            rows.push(base("-".into(), "-".into(), "-".into()));
        }
        for r in &st.readers {
            rows.push(base(
                name(&r.consumer),
                r.acked.to_string(),
                r.lag.to_string(),
            ));
        }
    }
    push_section(
        &mut text,
        &[
            "STREAM", "LENGTH", "FIRST", "LAST", "READER", "ACKED", "LAG",
        ],
        &rows,
        s.cut.streams.then(|| {
            format!(
                "… more streams and readers not shown (read limit {} rows of streams and readers)",
                thousands(accord::MAX_SNAPSHOT_STREAM_ROWS)
            )
        }),
    );

    if let Some(ch) = channels {
        let rows: Vec<Vec<String>> = ch
            .counts
            .iter()
            .map(|c| {
                vec![
                    name(&c.channel),
                    format!("{:.1}", c.rate),
                    c.total.to_string(),
                    c.last_payload
                        .as_deref()
                        .map(|p| truncate(&output::escape(p), 60))
                        .unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        push_section(
            &mut text,
            &["CHANNEL", "MSGS/S", "TOTAL", "LAST"],
            &rows,
            None,
        );
        if ch.reconnected {
            text.push_str("(the listening connection was re-established: messages sent while it was down are not counted)\n");
        }
    }
    text
}

/// One section of [`render_sections`]: nothing when it has no rows and was not cut.
fn push_section(text: &mut String, titles: &[&str], rows: &[Vec<String>], cut: Option<String>) {
    if rows.is_empty() && cut.is_none() {
        return;
    }
    text.push('\n');
    if let Some(note) = cut {
        text.push_str(&note);
        text.push('\n');
    }
    if !rows.is_empty() {
        text.push_str(&plain_table(titles, rows));
    }
}

// -------------------------------------------------------------------------------------- once

/// `--once`: the header line, then a table with a header row; no escape codes.
pub async fn once(
    client: &Client,
    prefix: &str,
    by: SortKey,
    channels: &[String],
    interval: Duration,
) -> Outcome {
    // With channels: listen for one interval first, then read and print what arrived.
    let mut listening = None;
    if !channels.is_empty() {
        let mut ch = Channels::open(client, channels).await?;
        note!(
            "accord: listening on {} for {}",
            channels.join(", "),
            humantime::format_duration(interval)
        );
        let until = tokio::time::sleep(interval);
        tokio::pin!(until);
        loop {
            tokio::select! {
                _ = &mut until => break,
                r = ch.next() => r?,
            }
        }
        ch.tick();
        listening = Some(ch);
    }
    let mut snap = read(client, prefix).await?;
    sort(&mut snap.rows, by);
    let mut text = render_plain(client.namespace(), prefix, &snap);
    text.push_str(&render_sections(&snap, listening.as_ref()));
    // A reader that went away (`accord top --once | head -1`) ends accord quietly with 0.
    output::print(&mut output::stdout().lock(), &text)?;
    Ok(exit::OK)
}

/// A cell of a plain table: escaped (`output::escape`), and spaces written `\x20`, so that a
/// script can split a row on whitespace.
fn cell(text: &str) -> String {
    output::escape(text).replace(' ', "\\x20")
}

/// `n` with thousands separated by commas: 10,000.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The keys under the prefix that the table does not show: the counts are of every key, the
/// table holds the first `PAGE` rows (a key held shared has a row per holder).
fn keys_not_shown(snap: &Snapshot) -> u64 {
    // Distinct keys: the rows may be sorted by time left or fence, a shared key's apart.
    let shown: std::collections::HashSet<&str> = snap.rows.iter().map(|r| r.key.as_str()).collect();
    snap.counts.keys().saturating_sub(shown.len() as u64)
}

/// The note under a table cut by the read limit: how many keys it leaves out.
fn keys_cut_note(snap: &Snapshot) -> Option<String> {
    if !snap.truncated {
        return None;
    }
    let n = keys_not_shown(snap);
    Some(format!(
        "… {n} more key{} not shown (read limit {} rows; the counts are of every key; narrow the prefix)",
        if n == 1 { "" } else { "s" },
        thousands(PAGE)
    ))
}

fn render_plain(namespace: &str, prefix: &str, snap: &Snapshot) -> String {
    let mut text = format!(
        "namespace {}  prefix {}  {}\n",
        cell(namespace),
        if prefix.is_empty() {
            "-".to_string()
        } else {
            cell(prefix)
        },
        counts_line(snap)
    );
    // Notes on cuts precede the titles, as the sections' do.
    if let Some(note) = keys_cut_note(snap) {
        text.push_str(&note);
        text.push('\n');
    }
    if snap.sections.cut.waiters {
        text.push_str(&format!(
            "… WAIT shown for the first {} keys with waiters only (read limit)\n",
            thousands(accord::MAX_SNAPSHOT_WAITER_KEYS)
        ));
    }
    let header = [
        "KEY", "STATE", "HOLDER", "FENCE", "LEFT", "TTL", "WAIT", "METADATA",
    ];
    let rows: Vec<[String; 8]> = snap
        .rows
        .iter()
        .map(|r| {
            [
                cell(&r.key),
                r.state_name().to_string(),
                r.owner.as_deref().map_or_else(|| "-".into(), cell),
                r.fence.to_string(),
                r.left.map(format_left).unwrap_or_else(|| "-".into()),
                r.ttl.map(format_left).unwrap_or_else(|| "-".into()),
                wait_cell(r),
                metadata_summary(&r.metadata, 60),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut line = |cells: [&str; 8]| {
        let mut s = String::new();
        for (k, c) in cells.iter().enumerate() {
            s.push_str(&format!("{c:<w$}  ", w = widths[k]));
        }
        text.push_str(s.trim_end());
        text.push('\n');
    };
    line(header);
    for r in &rows {
        line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6], &r[7]]);
    }
    text
}

// -------------------------------------------------------------------------------------- live

/// The interactive view's state.
struct View {
    namespace: String,
    prefix: String,
    /// `Some` while `/` edits the prefix.
    editing: Option<String>,
    sort: SortKey,
    interval: Duration,
    snap: Snapshot,
    error: Option<String>,
    scroll: usize,
    /// Table rows that fit, as last drawn (for PgUp/PgDn).
    page_rows: usize,
    updated: Option<chrono::DateTime<chrono::Local>>,
}

/// What a key press asks for.
enum Action {
    None,
    Redraw,
    Refresh,
    Quit,
}

impl View {
    fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if let Some(text) = self.editing.as_mut() {
            match key.code {
                KeyCode::Enter => {
                    self.prefix = self.editing.take().unwrap_or_default();
                    self.scroll = 0;
                    return Action::Refresh;
                }
                KeyCode::Esc => self.editing = None,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => text.clear(),
                KeyCode::Char(_) if key.modifiers.contains(KeyModifiers::CONTROL) => {
                    return Action::None
                }
                KeyCode::Char(c) => text.push(c),
                _ => return Action::None,
            }
            return Action::Redraw;
        }
        let rows = self.snap.rows.len();
        let page = self.page_rows.max(1);
        let max_scroll = rows.saturating_sub(page);
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Char('s') => {
                self.sort = self.sort.next();
                sort(&mut self.snap.rows, self.sort);
            }
            KeyCode::Char('/') => self.editing = Some(self.prefix.clone()),
            KeyCode::Down | KeyCode::Char('j') => self.scroll = (self.scroll + 1).min(max_scroll),
            KeyCode::Up | KeyCode::Char('k') => self.scroll = self.scroll.saturating_sub(1),
            KeyCode::PageDown | KeyCode::Char(' ') => {
                self.scroll = (self.scroll + page).min(max_scroll)
            }
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(page),
            KeyCode::Home => self.scroll = 0,
            KeyCode::End => self.scroll = max_scroll,
            _ => return Action::None,
        }
        Action::Redraw
    }

    fn draw(&mut self, frame: &mut ratatui::Frame, channels: Option<&Channels>) {
        // The groups, fleets, elections, streams and channels: the same text as --once's,
        // below the keys, in up to half of the screen.
        let sections = render_sections(&self.snap, channels);
        let section_lines: Vec<Line> = sections
            .lines()
            .skip_while(|l| l.is_empty())
            .map(|l| {
                if l.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    && l == l.to_ascii_uppercase()
                {
                    Line::styled(l.to_string(), Style::new().add_modifier(Modifier::BOLD))
                } else {
                    Line::from(l.to_string())
                }
            })
            .collect();
        let room = frame.area().height.saturating_sub(3 + 1) / 2;
        let mut section_lines = section_lines;
        let section_height = if section_lines.is_empty() {
            0
        } else {
            (section_lines.len() as u16 + 1).min(room)
        };
        // Cut by the terminal's height: the last line that fits says how many do not.
        let fits = section_height.saturating_sub(1) as usize;
        if fits > 0 && section_lines.len() > fits {
            let hidden = section_lines.len() - (fits - 1);
            section_lines.truncate(fits - 1);
            section_lines.push(Line::styled(
                format!(
                    "… {hidden} more lines below (a taller terminal shows them; --once prints all)"
                ),
                Style::new().fg(Color::Yellow),
            ));
        }
        let [head, body, below, foot] = Layout::vertical([
            Constraint::Length(3),
            Constraint::Min(3),
            Constraint::Length(section_height),
            Constraint::Length(1),
        ])
        .areas(frame.area());
        if section_height > 0 {
            frame.render_widget(
                Paragraph::new(section_lines).block(Block::new().borders(Borders::TOP)),
                below,
            );
        }

        // Header: where, counts, sort, refresh.
        let prefix = if self.prefix.is_empty() {
            "-".into()
        } else {
            output::escape(&self.prefix)
        };
        let mut first = vec![
            Span::styled("accord top", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!(
                "  namespace {}  prefix {prefix}",
                output::escape(&self.namespace)
            )),
        ];
        if let Some(t) = self.updated {
            first.push(Span::raw(format!("  at {}", t.format("%H:%M:%S"))));
        }
        let c = &self.snap.counts;
        let mut second = vec![
            Span::styled(format!("held {}", c.held), Style::new().fg(Color::Green)),
            Span::raw("  "),
            Span::raw(format!("free {}", c.free)),
            Span::raw("  "),
            Span::styled(format!("done {}", c.done), Style::new().fg(Color::Blue)),
            Span::raw(format!(
                "  keys {}  sort {}  every {}",
                c.keys(),
                self.sort.name(),
                humantime::format_duration(self.interval)
            )),
        ];
        if c.shared_holders > 0 {
            second.push(Span::raw(format!("  shared holders {}", c.shared_holders)));
        }
        if c.waiting > 0 {
            second.push(Span::styled(
                format!("  waiting {}", c.waiting),
                Style::new().fg(Color::Yellow),
            ));
        }
        if let Some(e) = &self.error {
            second = vec![Span::styled(
                format!("refresh failed: {}", output::escape(e)),
                Style::new().fg(Color::Red),
            )];
        } else if self.snap.truncated {
            second.push(Span::styled(
                format!(
                    "  ({} more keys not read: limit {})",
                    keys_not_shown(&self.snap),
                    thousands(PAGE)
                ),
                Style::new().fg(Color::Yellow),
            ));
        }
        frame.render_widget(
            Paragraph::new(vec![Line::from(first), Line::from(second)])
                .block(Block::new().borders(Borders::BOTTOM)),
            head,
        );

        // The keys.
        let visible = body.height.saturating_sub(1) as usize;
        self.page_rows = visible;
        self.scroll = self
            .scroll
            .min(self.snap.rows.len().saturating_sub(visible.max(1)));
        let bar_width = 12usize;
        let longest = self
            .snap
            .rows
            .iter()
            .filter_map(|r| r.left)
            .max()
            .unwrap_or(Duration::ZERO);
        let rows: Vec<TableRow> = self
            .snap
            .rows
            .iter()
            .skip(self.scroll)
            .take(visible)
            .map(|r| {
                let style = match (r.state, r.shared) {
                    (KeyState::Held, _) => Style::new().fg(Color::Green),
                    (KeyState::Done, _) => Style::new().fg(Color::Blue),
                    (KeyState::Free, _) => Style::new().fg(Color::DarkGray),
                };
                let left = match r.left {
                    Some(left) => {
                        let whole = r.ttl.unwrap_or(longest);
                        let frac = if whole.is_zero() {
                            0.0
                        } else {
                            (left.as_secs_f64() / whole.as_secs_f64()).clamp(0.0, 1.0)
                        };
                        let bar_style = if frac < 0.25 {
                            Style::new().fg(Color::Red)
                        } else if frac < 0.5 {
                            Style::new().fg(Color::Yellow)
                        } else {
                            Style::new().fg(Color::Green)
                        };
                        Line::from(vec![
                            Span::styled(bar(frac, bar_width), bar_style),
                            Span::raw(format!(" {}", format_left(left))),
                        ])
                    }
                    None => Line::from("-"),
                };
                TableRow::new(vec![
                    Cell::from(output::escape(&r.key).into_owned()),
                    Cell::from(r.state_name()).style(style),
                    Cell::from(
                        r.owner
                            .as_deref()
                            .map_or_else(|| "-".into(), |o| output::escape(o).into_owned()),
                    ),
                    Cell::from(r.fence.to_string()),
                    Cell::from(left),
                    Cell::from(wait_cell(r)).style(if r.waiting > 0 {
                        Style::new().fg(Color::Yellow)
                    } else {
                        Style::new()
                    }),
                    Cell::from(metadata_summary(&r.metadata, 80)),
                ])
            })
            .collect();
        // Keys and holders as wide as the longest (within bounds); metadata gets the rest.
        let widest = |f: fn(&Row) -> usize, floor: usize, cap: usize| {
            self.snap
                .rows
                .iter()
                .map(f)
                .max()
                .unwrap_or(0)
                .clamp(floor, cap) as u16
        };
        let key_width = widest(|r| output::escape(&r.key).chars().count(), 3, 48);
        let holder_width = widest(
            |r| {
                r.owner
                    .as_deref()
                    .map_or(1, |o| output::escape(o).chars().count())
            },
            6,
            32,
        );
        let table = Table::new(
            rows,
            [
                Constraint::Length(key_width),
                Constraint::Length(6),
                Constraint::Length(holder_width),
                Constraint::Length(8),
                Constraint::Length(bar_width as u16 + 8),
                Constraint::Length(5),
                Constraint::Fill(1),
            ],
        )
        .header(
            TableRow::new(vec![
                "KEY", "STATE", "HOLDER", "FENCE", "LEFT", "WAIT", "METADATA",
            ])
            .style(Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED)),
        );
        frame.render_widget(table, body);

        // Footer: keys, or the prefix being edited.
        let footer = match &self.editing {
            Some(text) => Line::from(vec![
                Span::styled("prefix: ", Style::new().add_modifier(Modifier::BOLD)),
                Span::raw(format!("{}▏", output::escape(text))),
                Span::raw("   Enter apply  Esc cancel"),
            ]),
            None => {
                let n = self.snap.rows.len();
                let shown = if n == 0 {
                    "no keys".to_string()
                } else {
                    // "of 1000+" when the read limit cut the table (the header says how many
                    // more); rows below the screen: "more below".
                    let last = (self.scroll + visible).min(n);
                    format!(
                        "rows {}-{last} of {n}{}{}",
                        self.scroll + 1,
                        if self.snap.truncated { "+" } else { "" },
                        if last < n { ", more below" } else { "" }
                    )
                };
                Line::from(format!(
                    "q quit  s sort  / prefix  ↑↓ PgUp PgDn scroll   {shown}"
                ))
            }
        };
        frame.render_widget(Paragraph::new(footer), foot);
    }
}

/// A bar of `width` cells, `frac` of it full (eighths of a cell).
fn bar(frac: f64, width: usize) -> String {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let eighths = (frac * (width * 8) as f64).round() as usize;
    let mut s = "█".repeat(eighths / 8);
    if eighths % 8 > 0 {
        s.push(PARTS[eighths % 8]);
    }
    while s.chars().count() < width {
        s.push('·');
    }
    s
}

/// Restores the terminal when dropped (also on an error or a panic's unwinding).
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> std::io::Result<TerminalGuard> {
        crossterm::terminal::enable_raw_mode()?;
        let guard = TerminalGuard;
        crossterm::execute!(
            output::terminal(),
            crossterm::terminal::EnterAlternateScreen,
            crossterm::cursor::Hide
        )?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = crossterm::execute!(
            output::terminal(),
            crossterm::terminal::LeaveAlternateScreen,
            crossterm::cursor::Show
        );
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// The live view, until `q`, Ctrl-C or SIGTERM.
pub async fn live(
    client: &Client,
    prefix: String,
    by: SortKey,
    interval: Duration,
    channels: &[String],
) -> Outcome {
    if !output::terminal().is_terminal() {
        return Err(Failure::new(
            exit::USAGE,
            "accord top needs a terminal; use --once for a table or --prometheus ADDR for metrics",
        ));
    }
    let (_int, mut term) = signals()?;
    // Listening before the first draw: a notification sent once the view shows is counted.
    let mut channels = if channels.is_empty() {
        None
    } else {
        Some(Channels::open(client, channels).await?)
    };
    let io = |e: std::io::Error| Failure::new(exit::ERROR, format!("terminal: {e}"));
    let guard = TerminalGuard::enter().map_err(io)?;
    let mut terminal = Terminal::new(CrosstermBackend::new(output::terminal())).map_err(io)?;
    terminal.clear().map_err(io)?;

    // Key presses come from a thread blocked in crossterm's read.
    let (tx, mut keys) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || loop {
        match crossterm::event::read() {
            Ok(event) => {
                if tx.send(event).is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    });

    let mut view = View {
        namespace: client.namespace().to_string(),
        prefix,
        editing: None,
        sort: by,
        interval,
        snap: Snapshot::default(),
        error: None,
        scroll: 0,
        page_rows: 1,
        updated: None,
    };
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome = loop {
        let action = tokio::select! {
            _ = tick.tick() => Action::Refresh,
            event = keys.recv() => match event {
                Some(Event::Key(key)) => view.on_key(key),
                Some(Event::Resize(..)) => Action::Redraw,
                Some(_) => Action::None,
                None => break Err(Failure::new(exit::ERROR, "the terminal's input ended")),
            },
            _ = term.recv() => Action::Quit,
            heard = async {
                match channels.as_mut() {
                    Some(c) => c.next().await,
                    None => std::future::pending().await,
                }
            } => match heard {
                // Counted; shown at the next refresh.
                Ok(()) => Action::None,
                Err(e) => break Err(e.into()),
            },
        };
        match action {
            Action::None => continue,
            Action::Quit => break Ok(exit::OK),
            Action::Redraw => {}
            Action::Refresh => {
                if let Some(c) = channels.as_mut() {
                    c.tick();
                }
                match read(client, &view.prefix).await {
                    Ok(mut snap) => {
                        sort(&mut snap.rows, view.sort);
                        view.snap = snap;
                        view.error = None;
                        view.updated = Some(chrono::Local::now());
                    }
                    Err(e) => view.error = Some(crate::output::said(&e)),
                }
                tick.reset();
            }
        }
        if let Err(e) = terminal.draw(|f| view.draw(f, channels.as_ref())) {
            break Err(io(e));
        }
    };
    drop(terminal);
    drop(guard);
    if let Some(c) = channels {
        c.sub.close().await;
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_fill_by_eighths() {
        assert_eq!(bar(0.0, 4), "····");
        assert_eq!(bar(1.0, 4), "████");
        assert_eq!(bar(0.5, 4), "██··");
        assert_eq!(bar(0.5 + 1.0 / 32.0, 4), "██▏·");
    }

    #[test]
    fn shard_lists_compress_runs() {
        assert_eq!(shard_list(&[]), "-");
        assert_eq!(shard_list(&["0", "1", "2", "3", "7"]), "0-3,7");
        assert_eq!(shard_list(&["0", "2", "x", "3"]), "0,2,x,3");
        assert_eq!(shard_list(&["07", "8"]), "07,8");
    }

    #[test]
    fn keys_not_shown_are_distinct_keys_in_any_order() {
        let row = |key: &str, fence| Row {
            key: key.into(),
            state: KeyState::Held,
            shared: true,
            owner: None,
            fence,
            left: None,
            ttl: None,
            waiting: 0,
            metadata: Metadata::new(),
        };
        // Sorted by fence: the shared key `a`'s two holders are apart.
        let mut snap = Snapshot {
            rows: vec![row("a", 3), row("b", 2), row("a", 1)],
            truncated: true,
            ..Default::default()
        };
        snap.counts.held = 5;
        assert_eq!(keys_not_shown(&snap), 3);
        assert_eq!(
            keys_cut_note(&snap).unwrap(),
            "… 3 more keys not shown (read limit 1,000 rows; the counts are of every key; narrow the prefix)"
        );
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn metadata_summaries_are_short() {
        let m: Metadata = serde_json::from_str(r#"{"who":"ann","n":3}"#).unwrap();
        let s = metadata_summary(&m, 80);
        assert!(s.contains("who=ann") && s.contains("n=3"), "{s}");
        assert_eq!(metadata_summary(&m, 5).chars().count(), 5);
        assert_eq!(metadata_summary(&Metadata::new(), 5), "-");
    }
}
