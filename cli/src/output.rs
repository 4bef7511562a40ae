//! Output that never panics. `println!` and `eprintln!` panic when a write fails, so a closed
//! pipe (`accord … 2>&1 | head -1`) would end accord with a panic (exit 101) instead of its
//! answer. They are denied in this crate (clippy) in favour of [`note!`] and [`print`].

use std::io::{ErrorKind, Write};

use crate::Failure;

/// A line for the user on stderr. Dropped when stderr cannot take it (a closed pipe, a full
/// disk): a diagnostic never changes what accord does or how it exits.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Stderr for the log (`ACCORD_LOG`), dropping what it cannot take as [`note!`] does:
/// tracing-subscriber reports a failed write with `eprintln!`, which would panic in turn.
pub(crate) struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `text` to `out` (stdout) and flushes it. A reader that went away (EPIPE, as in
/// `accord ls | head -1`) is not a failure of accord's: it ends accord quietly with exit 0
/// ([`Failure::reader_gone`]). Any other failure (a full disk) is an error, said on stderr.
pub(crate) fn print(out: &mut impl Write, text: &str) -> Result<(), Failure> {
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| {
            if e.kind() == ErrorKind::BrokenPipe {
                Failure::reader_gone()
            } else {
                Failure::new(crate::exit::ERROR, format!("cannot write output: {e}"))
            }
        })
}

/// `text` for a line of text output: backslashes and control characters escaped (`\\`, `\n`,
/// `\r`, `\t`, `\xHH` for the other ASCII ones, `\uHHHH` for the others and for U+2028 and
/// U+2029, which some readers take as line ends), so that a value prints as one line and cannot
/// forge another, nor send escape sequences to a terminal. `printf '%b'` undoes it.
pub(crate) fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    let needs = |c: char| c == '\\' || c.is_control() || c == '\u{2028}' || c == '\u{2029}';
    if !text.chars().any(needs) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            c if c.is_ascii() && needs(c) => escaped.push_str(&format!("\\x{:02x}", c as u32)),
            c if needs(c) => escaped.push_str(&format!("\\u{:04x}", c as u32)),
            c => escaped.push(c),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_what_could_forge_a_line_or_drive_a_terminal() {
        assert_eq!(escape("plain text, ünïcødé ✓"), "plain text, ünïcødé ✓");
        assert_eq!(
            escape("a\nb\rc\td\x1b[31me\\f"),
            "a\\nb\\rc\\td\\x1b[31me\\\\f"
        );
        assert_eq!(escape("\x7f\u{85}\u{9b}"), "\\x7f\\u0085\\u009b");
        assert_eq!(escape("x\u{2028}y\u{2029}"), "x\\u2028y\\u2029");
        // Every escaped text is one line of printable characters.
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        assert!(!escape(&all).chars().any(|c| c.is_control()));
    }
}
