//! `accord top`: a live terminal view of a namespace's keys (ratatui), a plain table with
//! `--once`, and Prometheus text with `--prometheus ADDR` (see metrics.rs).
//!
//! Every refresh is one `list` page (its two statements are pipelined: one round trip) of up to
//! `MAX_LIST_LIMIT` rows under the prefix; the counts per state are those of the page, exact
//! unless the page was full (then they are lower bounds, and the view says so).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use accord::{Client, KeyState, ListQuery, Metadata};
use clap::ValueEnum;
use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row as TableRow, Table};
use ratatui::Terminal;

use crate::{exit, format_left, signals, Failure, Outcome};

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

/// Keys by state: a key held shared counts once, as held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub held: u64,
    pub free: u64,
    pub done: u64,
    /// Shared holders (rows), of the held keys.
    pub shared_holders: u64,
}

/// What one refresh read.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub rows: Vec<Row>,
    pub counts: Counts,
    /// The page was full: more rows follow, the counts are lower bounds.
    pub truncated: bool,
}

/// One `list` page under `prefix` (one round trip).
pub async fn read(client: &Client, prefix: &str) -> Result<Snapshot, accord::Error> {
    let mut query = ListQuery::new().limit(PAGE);
    if !prefix.is_empty() {
        query = query.prefix(prefix.to_string());
    }
    let page = client.list(query).await?;
    let now = chrono::Utc::now();
    let mut counts = Counts::default();
    let mut last_shared_key: Option<&str> = None;
    for i in &page.items {
        if i.shared {
            counts.shared_holders += 1;
            if last_shared_key == Some(i.key.as_str()) {
                continue;
            }
            last_shared_key = Some(i.key.as_str());
        }
        match i.state {
            KeyState::Held => counts.held += 1,
            KeyState::Free => counts.free += 1,
            KeyState::Done => counts.done += 1,
        }
    }
    let rows = page
        .items
        .iter()
        .map(|i| {
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
            Row {
                key: i.key.clone(),
                state: i.state,
                shared: i.shared,
                owner: i.owner.clone(),
                fence: i.fence,
                left,
                ttl,
                metadata: i.metadata.clone(),
            }
        })
        .collect();
    Ok(Snapshot {
        rows,
        counts,
        truncated: page.next_cursor.is_some(),
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

/// `k=v k2=v2`, strings unquoted, at most `width` characters (an ellipsis when cut); `-` when
/// empty.
pub fn metadata_summary(m: &Metadata, width: usize) -> String {
    if m.is_empty() {
        return "-".into();
    }
    let s = m
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
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
    let plus = if s.truncated { "+" } else { "" };
    let mut line = format!(
        "held {}{plus}  free {}{plus}  done {}{plus}  keys {}{plus}",
        c.held,
        c.free,
        c.done,
        c.held + c.free + c.done
    );
    if c.shared_holders > 0 {
        line.push_str(&format!("  shared holders {}{plus}", c.shared_holders));
    }
    line
}

// -------------------------------------------------------------------------------------- once

/// `--once`: the header line, then a table with a header row; no escape codes.
pub async fn once(client: &Client, prefix: &str, by: SortKey) -> Outcome {
    let mut snap = read(client, prefix).await?;
    sort(&mut snap.rows, by);
    let mut out = std::io::stdout().lock();
    let text = render_plain(client.namespace(), prefix, &snap);
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot write output: {e}")))?;
    Ok(exit::OK)
}

fn render_plain(namespace: &str, prefix: &str, snap: &Snapshot) -> String {
    let mut text = format!(
        "namespace {namespace}  prefix {}  {}\n",
        if prefix.is_empty() { "-" } else { prefix },
        counts_line(snap)
    );
    if snap.truncated {
        text.push_str(&format!(
            "(the first {PAGE} rows only: counts are lower bounds; narrow the prefix)\n"
        ));
    }
    let header = ["KEY", "STATE", "HOLDER", "FENCE", "LEFT", "TTL", "METADATA"];
    let rows: Vec<[String; 7]> = snap
        .rows
        .iter()
        .map(|r| {
            [
                r.key.clone(),
                r.state_name().to_string(),
                r.owner.clone().unwrap_or_else(|| "-".into()),
                r.fence.to_string(),
                r.left.map(format_left).unwrap_or_else(|| "-".into()),
                r.ttl.map(format_left).unwrap_or_else(|| "-".into()),
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
    let mut line = |cells: [&str; 7]| {
        let mut s = String::new();
        for (k, c) in cells.iter().enumerate() {
            s.push_str(&format!("{c:<w$}  ", w = widths[k]));
        }
        text.push_str(s.trim_end());
        text.push('\n');
    };
    line(header);
    for r in &rows {
        line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6]]);
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

    fn draw(&mut self, frame: &mut ratatui::Frame) {
        let [head, body, foot] = Layout::vertical([
            Constraint::Length(3),
            Constraint::Min(3),
            Constraint::Length(1),
        ])
        .areas(frame.area());

        // Header: where, counts, sort, refresh.
        let prefix = if self.prefix.is_empty() {
            "-"
        } else {
            &self.prefix
        };
        let mut first = vec![
            Span::styled("accord top", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!("  namespace {}  prefix {prefix}", self.namespace)),
        ];
        if let Some(t) = self.updated {
            first.push(Span::raw(format!("  at {}", t.format("%H:%M:%S"))));
        }
        let c = &self.snap.counts;
        let plus = if self.snap.truncated { "+" } else { "" };
        let mut second = vec![
            Span::styled(
                format!("held {}{plus}", c.held),
                Style::new().fg(Color::Green),
            ),
            Span::raw("  "),
            Span::raw(format!("free {}{plus}", c.free)),
            Span::raw("  "),
            Span::styled(
                format!("done {}{plus}", c.done),
                Style::new().fg(Color::Blue),
            ),
            Span::raw(format!(
                "  keys {}{plus}  sort {}  every {}",
                c.held + c.free + c.done,
                self.sort.name(),
                humantime::format_duration(self.interval)
            )),
        ];
        if c.shared_holders > 0 {
            second.push(Span::raw(format!("  shared holders {}", c.shared_holders)));
        }
        if let Some(e) = &self.error {
            second = vec![Span::styled(
                format!("refresh failed: {e}"),
                Style::new().fg(Color::Red),
            )];
        } else if self.snap.truncated {
            second.push(Span::styled(
                format!("  (first {PAGE} rows)"),
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
                    Cell::from(r.key.clone()),
                    Cell::from(r.state_name()).style(style),
                    Cell::from(r.owner.clone().unwrap_or_else(|| "-".into())),
                    Cell::from(r.fence.to_string()),
                    Cell::from(left),
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
        let key_width = widest(|r| r.key.chars().count(), 3, 48);
        let holder_width = widest(
            |r| r.owner.as_deref().map_or(1, |o| o.chars().count()),
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
                Constraint::Fill(1),
            ],
        )
        .header(
            TableRow::new(vec!["KEY", "STATE", "HOLDER", "FENCE", "LEFT", "METADATA"])
                .style(Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED)),
        );
        frame.render_widget(table, body);

        // Footer: keys, or the prefix being edited.
        let footer = match &self.editing {
            Some(text) => Line::from(vec![
                Span::styled("prefix: ", Style::new().add_modifier(Modifier::BOLD)),
                Span::raw(format!("{text}▏")),
                Span::raw("   Enter apply  Esc cancel"),
            ]),
            None => {
                let n = self.snap.rows.len();
                let shown = if n == 0 {
                    "no keys".to_string()
                } else {
                    format!(
                        "rows {}-{} of {n}",
                        self.scroll + 1,
                        (self.scroll + visible).min(n)
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
            std::io::stdout(),
            crossterm::terminal::EnterAlternateScreen,
            crossterm::cursor::Hide
        )?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::LeaveAlternateScreen,
            crossterm::cursor::Show
        );
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// The live view, until `q`, Ctrl-C or SIGTERM.
pub async fn live(client: &Client, prefix: String, by: SortKey, interval: Duration) -> Outcome {
    if !std::io::stdout().is_terminal() {
        return Err(Failure::new(
            exit::USAGE,
            "accord top needs a terminal; use --once for a table or --prometheus ADDR for metrics",
        ));
    }
    let (_int, mut term) = signals()?;
    let io = |e: std::io::Error| Failure::new(exit::ERROR, format!("terminal: {e}"));
    let guard = TerminalGuard::enter().map_err(io)?;
    let mut terminal = Terminal::new(CrosstermBackend::new(std::io::stdout())).map_err(io)?;
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
        };
        match action {
            Action::None => continue,
            Action::Quit => break Ok(exit::OK),
            Action::Redraw => {}
            Action::Refresh => {
                match read(client, &view.prefix).await {
                    Ok(mut snap) => {
                        sort(&mut snap.rows, view.sort);
                        view.snap = snap;
                        view.error = None;
                        view.updated = Some(chrono::Local::now());
                    }
                    Err(e) => view.error = Some(e.message().to_string()),
                }
                tick.reset();
            }
        }
        if let Err(e) = terminal.draw(|f| view.draw(f)) {
            break Err(io(e));
        }
    };
    drop(terminal);
    drop(guard);
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
    fn metadata_summaries_are_short() {
        let m: Metadata = serde_json::from_str(r#"{"who":"ann","n":3}"#).unwrap();
        let s = metadata_summary(&m, 80);
        assert!(s.contains("who=ann") && s.contains("n=3"), "{s}");
        assert_eq!(metadata_summary(&m, 5).chars().count(), 5);
        assert_eq!(metadata_summary(&Metadata::new(), 5), "-");
    }
}
