//! Everything accord writes to stdout and stderr goes through here: it never panics, and it
//! never lets a name, value or payload drive the reader's terminal or forge a line.
//!
//! `println!` and `eprintln!` panic when a write fails, so a closed pipe (`accord … 2>&1 | head
//! -1`) would end accord with a panic (exit 101) instead of its answer; they are denied in this
//! crate (clippy), and so are `std::io::stdout` and `std::io::stderr` outside this module
//! (`cli/clippy.toml`), in favour of [`print`], [`note!`] and [`terminal`].
//!
//! The one rule of what is escaped is [`must_escape`]: control characters (Unicode general
//! category Cc: C0, DEL, C1), format characters (Cf: bidirectional overrides such as U+202E,
//! zero-width characters, …) and the line and paragraph separators U+2028 and U+2029. Names and
//! values are escaped with [`escape`] (text) or [`json`] (JSON lines) where a command builds its
//! output; [`print`] and [`note!`] escape what still slips through (all but line ends and tabs),
//! so that a print site that forgot to escape cannot send escape sequences either.

use std::borrow::Cow;
use std::io::{ErrorKind, Write};

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

use crate::Failure;

/// How the CLI's messages write durations (humantime, as its flags take them: `--ttl 25h`
/// is refused as "25h", not "90000s") and fields (as its flags: `max-age`).
const STYLE: accord::Style = accord::Style {
    durations: accord::Durations::Humantime,
    fields: accord::Fields::Kebab,
};

/// An error's message in the CLI's words: every accord error it prints goes through here.
pub(crate) fn said(e: &accord::Error) -> String {
    e.message_in(&STYLE)
}

/// Whether `c` is never written as it is: it could move the cursor, retitle or clear a terminal,
/// reorder what is shown (bidirectional overrides), hide text (zero-width characters), or end a
/// line for some reader.
pub(crate) fn must_escape(c: char) -> bool {
    matches!(
        c.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// Appends `c` as `printf '%b'` reads it back: `\n`, `\r`, `\t`, `\xHH` for the other ASCII
/// ones, `\uHHHH`, or `\UHHHHHHHH` beyond U+FFFF.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c.is_ascii() => out.push_str(&format!("\\x{:02x}", c as u32)),
        c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push_str(&format!("\\U{:08x}", c as u32)),
    }
}

/// `text` with `escaped(c)` characters written as [`push_escaped`] does.
fn escape_where(text: &str, escaped: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\\' && escaped('\\') {
            out.push_str("\\\\");
        } else if escaped(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A name, value or payload as accord prints it in text: backslashes and [`must_escape`]
/// characters escaped (`\\`, `\n`, `\r`, `\t`, `\xHH`, `\uHHHH`, `\UHHHHHHHH`), so that it
/// prints as one line of visible characters and cannot forge another line, nor send escape
/// sequences to a terminal. `printf '%b'` undoes it.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c == '\\' || must_escape(c))
}

/// A whole text already composed (a message, a table, `listen`'s lines): [`must_escape`]
/// characters escaped but its line ends and tabs (columns: a name's own were escaped), and
/// backslashes kept (a name inside was escaped already, by [`escape`] or by `{:?}`).
fn guard(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c != '\n' && c != '\t' && must_escape(c))
}

/// `value` as one line of JSON whose strings keep every character (a reader's JSON parser gets
/// the value back as it was) but hold no [`must_escape`] one raw: serde_json writes C0 controls
/// as `\u00XX` but DEL, C1 controls, format characters and U+2028/U+2029 as they are, so those
/// are written as JSON escapes (`\uHHHH`, a surrogate pair beyond U+FFFF). Outside strings, JSON
/// text is ASCII, so this touches strings only.
pub(crate) fn json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if !text.chars().any(must_escape) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if must_escape(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A line for the user on stderr. Dropped when stderr cannot take it (a closed pipe, a full
/// disk): a diagnostic never changes what accord does or how it exits. Names in it are written
/// with `{:?}` (as the core's messages do), and whatever else it holds is guarded.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::output::note_line(&format!($($arg)*))
    };
}

/// [`note!`]'s writer.
#[allow(clippy::disallowed_methods)] // the one writer of stderr's lines
pub(crate) fn note_line(line: &str) {
    let mut text = guard(line).into_owned();
    text.push('\n');
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// Stderr for the log (`ACCORD_LOG`), dropping what it cannot take as [`note!`] does:
/// tracing-subscriber reports a failed write with `eprintln!`, which would panic in turn. Log
/// lines may hold names (keys, channels): they are guarded as notes are.
pub(crate) struct LogWriter;

impl Write for LogWriter {
    #[allow(clippy::disallowed_methods)] // the log's writer of stderr
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let _ = std::io::stderr().write_all(guard(&text).as_bytes());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Stdout, for [`print`].
#[allow(clippy::disallowed_methods)] // the one way to stdout
pub(crate) fn stdout() -> std::io::Stdout {
    std::io::stdout()
}

/// Stdout as `accord top`'s live view draws it (ratatui, crossterm): escape codes of its own,
/// around cells the view escaped (top.rs, `View::draw`).
#[allow(clippy::disallowed_methods)] // the live view's terminal
pub(crate) fn terminal() -> std::io::Stdout {
    std::io::stdout()
}

/// Writes `text` to `out` (stdout) and flushes it, guarded (all but line ends and tabs). A reader that
/// went away (EPIPE, as in `accord ls | head -1`) is not a failure of accord's: it ends accord
/// quietly with exit 0 ([`Failure::reader_gone`]). Any other failure (a full disk) is an error,
/// said on stderr.
pub(crate) fn print(out: &mut impl Write, text: &str) -> Result<(), Failure> {
    write_flushed(out, guard(text).as_bytes())
}

/// `text` drawn over the current line of a terminal (`\r`, then erase the line): a progress
/// bar. `text` is guarded as [`print`]'s is.
pub(crate) fn redraw_line(out: &mut impl Write, text: &str) -> Result<(), Failure> {
    let mut line = String::from("\r\x1b[2K");
    line.push_str(&guard(text));
    write_flushed(out, line.as_bytes())
}

fn write_flushed(out: &mut impl Write, bytes: &[u8]) -> Result<(), Failure> {
    out.write_all(bytes).and_then(|_| out.flush()).map_err(|e| {
        if e.kind() == ErrorKind::BrokenPipe {
            Failure::reader_gone()
        } else {
            Failure::new(crate::exit::ERROR, format!("cannot write output: {e}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{escape, guard, json, must_escape};

    #[test]
    fn escapes_what_could_forge_a_line_or_drive_a_terminal() {
        assert_eq!(
            escape("plain text, ünïcødé ✓ 🦀"),
            "plain text, ünïcødé ✓ 🦀"
        );
        assert_eq!(
            escape("a\nb\rc\td\x1b[31me\\f"),
            "a\\nb\\rc\\td\\x1b[31me\\\\f"
        );
        assert_eq!(escape("\x07\x7f\u{85}\u{9b}"), "\\x07\\x7f\\u0085\\u009b");
        assert_eq!(escape("x\u{2028}y\u{2029}"), "x\\u2028y\\u2029");
        // Format characters: bidirectional overrides and isolates, zero-width ones, a BOM, a
        // tag character beyond U+FFFF.
        assert_eq!(
            escape("a\u{202e}b\u{2066}c\u{200b}d\u{200d}e\u{feff}f\u{e0041}"),
            "a\\u202eb\\u2066c\\u200bd\\u200de\\ufefff\\U000e0041"
        );
        // Every escaped text is one line of printable characters.
        let all: String = (0u32..0xf0000).filter_map(char::from_u32).collect();
        assert!(!escape(&all).chars().any(must_escape));
    }

    #[test]
    fn guarded_lines_keep_their_line_ends_and_backslashes() {
        assert_eq!(guard("k \"a\\u{1b}\"\n"), "k \"a\\u{1b}\"\n");
        assert_eq!(
            guard("a\tb\x1b]0;T\x07\u{202e}\n"),
            "a\tb\\x1b]0;T\\x07\\u202e\n"
        );
    }

    #[test]
    fn json_lines_escape_what_serde_json_leaves_raw_and_parse_back() {
        let value = serde_json::json!({"k": "a\x1b\x7f\u{9b}\u{202e}\u{2028}\u{e0041}\n"});
        let line = json(&value);
        assert!(!line.chars().any(must_escape), "{line}");
        assert!(
            line.contains("\\u202e") && line.contains("\\udb40\\udc41"),
            "{line}"
        );
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, value);
    }
}
