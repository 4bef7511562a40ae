//! How an error's message reads in the caller's language. A message is kept as parts: text,
//! the names of fields (as the core spells them, snake_case) and durations. Each binding
//! declares its [`Style`] once (the unit its durations are given in, how it spells a field)
//! and renders every error with it, so that the rule and the words stay in the core and a
//! binding never re-words a message: `period=0` reads "0 s" in Python, "0 ms" in Node, "0s"
//! in Go, "period" in Python and "handoffTimeout" in Node.

use std::fmt::Write;
use std::time::Duration;

/// One piece of a message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Part {
    Text(String),
    /// A field's name as the core spells it (snake_case), written in the caller's case.
    Field(String),
    /// A duration, written in the caller's unit; `negative` when it was given below zero
    /// (as a binding's signed number can be).
    Duration {
        d: Duration,
        negative: bool,
    },
}

/// The words of a message, built part by part: `Why::new().duration(d).text(" is negative")`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Why(pub(crate) Vec<Part>);

impl Why {
    /// An empty message.
    pub fn new() -> Self {
        Why::default()
    }
    /// Plain text.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.0.push(Part::Text(text.into()));
        self
    }
    /// The name of a field (snake_case, as the core spells it).
    pub fn field(mut self, name: impl Into<String>) -> Self {
        self.0.push(Part::Field(name.into()));
        self
    }
    /// A duration.
    pub fn duration(mut self, d: Duration) -> Self {
        self.0.push(Part::Duration { d, negative: false });
        self
    }
    /// A duration given as a signed number of milliseconds (C's and Go's), negative ones
    /// included.
    pub fn millis(mut self, ms: i64) -> Self {
        self.0.push(Part::Duration {
            d: Duration::from_millis(ms.unsigned_abs()),
            negative: ms < 0,
        });
        self
    }
}

impl<T: std::fmt::Display> From<T> for Why {
    fn from(text: T) -> Self {
        Why::new().text(text.to_string())
    }
}

/// How a caller's language writes durations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durations {
    /// Rust's `Duration` as read by a person: `300.8ms`, `5s`, `90000s`.
    Rust,
    /// humantime's form, as the CLI's flags take it: `25h`, `1h 30m`, `1s 500ms`.
    Humantime,
    /// Go's `time.Duration`: `25h0m0s`, `1m30s`, `300.8ms`.
    Go,
    /// A number of seconds (Python): `0.3008 s`.
    Seconds,
    /// A number of milliseconds (Node, C): `300.8 ms`.
    Millis,
}

/// How a caller's language spells a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fields {
    /// `page_size` (Rust, Python, C).
    Snake,
    /// `pageSize` (Node).
    Camel,
    /// `PageSize`, `TTL`, `ListenURL`: the Go options' exported names, initialisms in
    /// capitals; a one-word name stays as it is (`key`, `limit`: a parameter's name too).
    Go,
    /// `page-size` (the CLI's flags).
    Kebab,
}

/// How one binding writes the messages of errors: declared once per binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// The unit of durations.
    pub durations: Durations,
    /// The case of field names.
    pub fields: Fields,
}

impl Style {
    /// The core's own (Rust callers; `Error::message` and `Display`).
    pub const RUST: Style = Style {
        durations: Durations::Rust,
        fields: Fields::Snake,
    };

    /// A message's parts in this style.
    pub(crate) fn render(&self, parts: &[Part]) -> String {
        let mut out = String::new();
        for part in parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Field(f) => out.push_str(&field(self.fields, f)),
                Part::Duration { d, negative } => {
                    if *negative {
                        out.push('-');
                    }
                    out.push_str(&duration(self.durations, *d));
                }
            }
        }
        out
    }
}

/// Words Go writes in capitals inside a name (`TTL`, `ListenURL`).
const GO_INITIALISMS: &[&str] = &["ttl", "url", "id", "json", "sql"];

fn field(case: Fields, name: &str) -> String {
    // Each run of letters, digits and '_' is one name; '.', '[', ' ' and the like stay.
    let mut out = String::new();
    let mut run = String::new();
    for c in name.chars().chain(std::iter::once('\0')) {
        if c == '_' || c.is_alphanumeric() {
            run.push(c);
            continue;
        }
        out.push_str(&identifier(case, &run));
        run.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

fn identifier(case: Fields, name: &str) -> String {
    let words: Vec<&str> = name.split('_').filter(|w| !w.is_empty()).collect();
    let capitalized = |w: &str| {
        let mut chars = w.chars();
        chars.next().map_or_else(String::new, |c| {
            c.to_uppercase().chain(chars).collect::<String>()
        })
    };
    match case {
        Fields::Snake => name.to_string(),
        Fields::Kebab => name.replace('_', "-"),
        Fields::Camel => match words.split_first() {
            Some((first, rest)) => {
                let mut out = first.to_string();
                out.extend(rest.iter().map(|w| capitalized(w)));
                out
            }
            None => name.to_string(),
        },
        // A one-word name reads the same as a parameter (`key`, `limit`) and as an option's
        // field; a longer one or an initialism is only ever an option's field (`PageSize`,
        // `TTL`).
        Fields::Go => {
            let initialism = |w: &str| GO_INITIALISMS.contains(&w.to_ascii_lowercase().as_str());
            if words.len() == 1 && !initialism(words[0]) {
                return name.to_string();
            }
            words
                .iter()
                .map(|w| {
                    if initialism(w) {
                        w.to_ascii_uppercase()
                    } else {
                        capitalized(w)
                    }
                })
                .collect()
        }
    }
}

/// `x` with at most four significant digits (all of its integer digits), trailing zeros
/// dropped: 300.804233 → "300.8", 0.300804 → "0.3008", 90000.4 → "90000".
pub(crate) fn short(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (3 - magnitude).clamp(0, 9) as usize;
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

fn duration(style: Durations, d: Duration) -> String {
    match style {
        Durations::Seconds => format!("{} s", whole_or_short(d, 1_000_000_000)),
        Durations::Millis => format!("{} ms", whole_or_short(d, 1_000_000)),
        Durations::Rust => small_or(d, |d| format!("{}s", whole_or_short(d, 1_000_000_000))),
        Durations::Go => small_or(d, go_duration),
        Durations::Humantime => small_or(d, humantime),
    }
}

/// `d` in units of `unit_nanos`: exact when it is a whole number of them (a ttl of i64::MAX ms
/// reads as given, not rounded through a float), else [`short`].
fn whole_or_short(d: Duration, unit_nanos: u128) -> String {
    let nanos = d.as_nanos();
    if nanos % unit_nanos == 0 {
        (nanos / unit_nanos).to_string()
    } else {
        short(nanos as f64 / unit_nanos as f64)
    }
}

/// Durations under a second in the unit that reads best (`300.8ms`, `12µs`, `0s`); longer
/// ones by `long`.
fn small_or(d: Duration, long: impl FnOnce(Duration) -> String) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        "0s".into()
    } else if nanos < 1_000 {
        format!("{nanos}ns")
    } else if nanos < 1_000_000 {
        format!("{}µs", short(nanos as f64 / 1e3))
    } else if nanos < 1_000_000_000 {
        format!("{}ms", short(nanos as f64 / 1e6))
    } else {
        long(d)
    }
}

/// Whole milliseconds, rounded: what longer durations are written to.
fn rounded_millis(d: Duration) -> u128 {
    (d.as_nanos() + 500_000) / 1_000_000
}

/// Go's `time.Duration.String` of `d` rounded to the millisecond: `25h0m0s`, `1m5.25s`.
fn go_duration(d: Duration) -> String {
    let ms = rounded_millis(d);
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let mut out = String::new();
    if h > 0 {
        let _ = write!(out, "{h}h");
    }
    if h > 0 || m > 0 {
        let _ = write!(out, "{m}m");
    }
    let _ = write!(out, "{s}");
    if frac > 0 {
        let _ = write!(out, ".{}", format!("{frac:03}").trim_end_matches('0'));
    }
    out.push('s');
    out
}

/// humantime's form (which the CLI's flags parse) of `d` rounded to the millisecond, hours
/// at most (`25h`, as one writes a day and an hour): `1h 30m`, `1s 500ms`.
fn humantime(d: Duration) -> String {
    let ms = rounded_millis(d);
    let units = [
        (ms / 3_600_000, "h"),
        (ms / 60_000 % 60, "m"),
        (ms / 1000 % 60, "s"),
        (ms % 1000, "ms"),
    ];
    units
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn style(durations: Durations, fields: Fields) -> Style {
        Style { durations, fields }
    }

    #[test]
    fn durations_read_in_each_unit_without_float_noise() {
        let noisy = Duration::from_nanos(300_804_233);
        let day_and_hour = Duration::from_secs(25 * 3600);
        let cases: &[(Durations, Duration, &str)] = &[
            (Durations::Rust, noisy, "300.8ms"),
            (Durations::Rust, Duration::ZERO, "0s"),
            (Durations::Rust, Duration::from_millis(10), "10ms"),
            (Durations::Rust, Duration::from_secs(5), "5s"),
            (Durations::Rust, day_and_hour, "90000s"),
            (
                Durations::Rust,
                Duration::from_nanos(1_234_567_891),
                "1.235s",
            ),
            (Durations::Humantime, day_and_hour, "25h"),
            (Durations::Humantime, Duration::from_secs(5400), "1h 30m"),
            (
                Durations::Humantime,
                Duration::from_millis(1500),
                "1s 500ms",
            ),
            (Durations::Humantime, noisy, "300.8ms"),
            (Durations::Humantime, Duration::ZERO, "0s"),
            (Durations::Go, day_and_hour, "25h0m0s"),
            (Durations::Go, Duration::from_millis(65_250), "1m5.25s"),
            (Durations::Go, Duration::from_millis(300), "300ms"),
            (Durations::Go, noisy, "300.8ms"),
            (Durations::Go, Duration::from_micros(12), "12µs"),
            (Durations::Go, Duration::ZERO, "0s"),
            (Durations::Seconds, noisy, "0.3008 s"),
            (Durations::Seconds, Duration::ZERO, "0 s"),
            (Durations::Seconds, Duration::from_millis(10), "0.01 s"),
            (Durations::Seconds, day_and_hour, "90000 s"),
            (Durations::Millis, noisy, "300.8 ms"),
            (Durations::Millis, Duration::from_secs(5), "5000 ms"),
            (
                Durations::Millis,
                Duration::from_secs(86_400),
                "86400000 ms",
            ),
            (Durations::Millis, Duration::from_nanos(1), "0.000001 ms"),
        ];
        for (unit, d, expected) in cases {
            assert_eq!(duration(*unit, *d), *expected, "{unit:?} {d:?}");
        }
    }

    #[test]
    fn fields_read_in_each_case() {
        let cases: &[(Fields, &str, &str)] = &[
            (
                Fields::Snake,
                "max_handoffs_per_period",
                "max_handoffs_per_period",
            ),
            (
                Fields::Camel,
                "max_handoffs_per_period",
                "maxHandoffsPerPeriod",
            ),
            (Fields::Camel, "page_size", "pageSize"),
            (Fields::Camel, "ttl", "ttl"),
            (Fields::Camel, "options.page_size", "options.pageSize"),
            (Fields::Camel, "keys[3]", "keys[3]"),
            (Fields::Camel, "metadata filter", "metadata filter"),
            (Fields::Go, "page_size", "PageSize"),
            (Fields::Go, "ttl", "TTL"),
            (Fields::Go, "listen_url", "ListenURL"),
            (Fields::Go, "handoff_timeout", "HandoffTimeout"),
            (Fields::Go, "key", "key"),
            (Fields::Go, "limit", "limit"),
            (Fields::Kebab, "handoff_timeout", "handoff-timeout"),
        ];
        for (case, name, expected) in cases {
            assert_eq!(field(*case, name), *expected, "{case:?} {name}");
        }
    }

    #[test]
    fn a_message_renders_each_part_in_the_style() {
        let why = Why::new()
            .duration(Duration::ZERO)
            .text(" is outside ")
            .duration(Duration::from_millis(10))
            .text("..=")
            .field("ttl")
            .text(" (")
            .duration(Duration::from_secs(5))
            .text(")");
        let python = style(Durations::Seconds, Fields::Snake);
        assert_eq!(python.render(&why.0), "0 s is outside 0.01 s..=ttl (5 s)");
        let go = style(Durations::Go, Fields::Go);
        assert_eq!(go.render(&why.0), "0s is outside 10ms..=TTL (5s)");
        let node = style(Durations::Millis, Fields::Camel);
        assert_eq!(node.render(&why.0), "0 ms is outside 10 ms..=ttl (5000 ms)");
        let negative = Why::new().millis(-1500).text(" is negative");
        assert_eq!(go.render(&negative.0), "-1.5s is negative");
        assert_eq!(node.render(&negative.0), "-1500 ms is negative");
        assert_eq!(short(-2.5), "-2.5");
    }
}
