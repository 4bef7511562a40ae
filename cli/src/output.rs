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
