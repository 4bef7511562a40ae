//! One error type for every operation, with a kind that each binding maps to its own idiom
//! (Python exception classes, Node `err.code`, C status codes, Go sentinel errors).

use std::fmt;

use crate::wording::{Part, Style, Why};

/// What went wrong: one of the error kinds of docs/semantics.md. Bindings map each kind one
/// to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument is malformed or out of range; the message names the field.
    InvalidArgument,
    /// The key is held by a live lease of someone else (or of another handle of this owner).
    Held,
    /// The key was marked done and is not granted again until `reset`.
    Done,
    /// A wait ran out of time; nothing was left held.
    Timeout,
    /// The caller cancelled a wait; nothing was left held.
    Cancelled,
    /// This lease is no longer held: it expired, was released, or was finished.
    LeaseLost,
    /// The coordinator could not be reached, or the connection broke mid-call.
    Connection,
    /// The coordinator refused a statement (permissions, schema, constraint).
    Database,
    /// The client was closed.
    Closed,
    /// The operation is not available here (backend, option, or process state).
    Unsupported,
    /// A bug in accord; please report it.
    Internal,
    /// A stream no longer holds the events asked for: retention removed them. The message
    /// names the seq the stream starts at now.
    Trimmed,
}

impl ErrorKind {
    /// Every kind, in the order of C's status codes (which start at 1): what each binding's
    /// tests walk to check that its mapping is one to one.
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::InvalidArgument,
        ErrorKind::Held,
        ErrorKind::Done,
        ErrorKind::Timeout,
        ErrorKind::Cancelled,
        ErrorKind::LeaseLost,
        ErrorKind::Connection,
        ErrorKind::Database,
        ErrorKind::Closed,
        ErrorKind::Unsupported,
        ErrorKind::Internal,
        ErrorKind::Trimmed,
    ];

    /// The stable name of the kind, as Node's `err.code` and C's status names use it.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "ACCORD_INVALID_ARGUMENT",
            ErrorKind::Held => "ACCORD_HELD",
            ErrorKind::Done => "ACCORD_DONE",
            ErrorKind::Timeout => "ACCORD_TIMEOUT",
            ErrorKind::Cancelled => "ACCORD_CANCELLED",
            ErrorKind::LeaseLost => "ACCORD_LEASE_LOST",
            ErrorKind::Connection => "ACCORD_CONNECTION",
            ErrorKind::Database => "ACCORD_DATABASE",
            ErrorKind::Closed => "ACCORD_CLOSED",
            ErrorKind::Unsupported => "ACCORD_UNSUPPORTED",
            ErrorKind::Internal => "ACCORD_INTERNAL",
            ErrorKind::Trimmed => "ACCORD_TRIMMED",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// An accord error: a [`ErrorKind`] and a message meant for humans.
///
/// Messages name the key or field concerned and never contain a password from the URL. A
/// message keeps its field names and durations apart from its text, so that each binding
/// writes them in its own words ([`Error::message_in`]); `Display` and [`Error::message`] use
/// Rust's.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    /// The message in Rust's style, rendered once from `parts`.
    message: String,
    parts: Vec<Part>,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// `Result` with accord's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error::worded(kind, Why::new().text(message))
    }

    /// A new error of `kind` whose message holds field names and durations (see [`Why`]).
    pub fn worded(kind: ErrorKind, why: Why) -> Self {
        Error {
            kind,
            message: Style::RUST.render(&why.0),
            parts: why.0,
            source: None,
        }
    }

    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The same kind and message, for one more caller of a statement that many callers
    /// shared (the source stays with the first).
    pub(crate) fn copy_for_another_caller(&self) -> Self {
        Error::worded(self.kind, Why(self.parts.clone()))
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable message (the same text `Display` prints), in Rust's words.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message in a caller's words: its field names and durations written as `style`
    /// writes them (each binding declares one).
    pub fn message_in(&self, style: &Style) -> String {
        style.render(&self.parts)
    }

    /// `InvalidArgument` naming `field`: how every binding reports an argument it cannot
    /// convert, so that the message reads the same as the core's own checks.
    pub fn invalid(field: &str, why: impl Into<Why>) -> Self {
        let mut parts = vec![Part::Text("invalid ".into()), Part::Field(field.into())];
        parts.push(Part::Text(": ".into()));
        parts.extend(why.into().0);
        Error::worded(ErrorKind::InvalidArgument, Why(parts))
    }

    /// `Held`: what callers report that treat a held key as an error (`Client::try_acquire`
    /// itself answers `None`), so that every binding says it the same way.
    pub fn held(key: &str) -> Self {
        Error::new(
            ErrorKind::Held,
            format!("key {key:?} is held by another lease"),
        )
    }

    pub(crate) fn done(key: &str) -> Self {
        Error::new(
            ErrorKind::Done,
            format!("key {key:?} is done; reset it to make it acquirable again"),
        )
    }

    pub(crate) fn lease_lost(key: &str, fence: i64, why: &str) -> Self {
        Error::new(
            ErrorKind::LeaseLost,
            format!("lease on {key:?} (fence {fence}) is no longer held: {why}"),
        )
    }

    /// `Closed`: the client (and so this call's lease or subscription) is closed.
    pub fn closed() -> Self {
        Error::new(ErrorKind::Closed, "the accord client is closed")
    }

    /// `Cancelled`: `what` (say, `acquire of "k"`) was cancelled by its caller.
    pub fn cancelled(what: &str) -> Self {
        Error::new(ErrorKind::Cancelled, format!("{what} was cancelled"))
    }

    /// `Trimmed`: the events of `stream` after `after` are gone; it starts at `first_seq`.
    pub(crate) fn trimmed(stream: &str, after: i64, first_seq: i64) -> Self {
        Error::new(
            ErrorKind::Trimmed,
            format!(
                "stream {stream:?}: the events after seq {after} were trimmed by its retention; \
                 the stream starts at seq {first_seq} now"
            ),
        )
    }

    /// A `Trimmed` error's message, completed with the way out of it.
    pub(crate) fn way_out(mut self, way: WayOut) -> Self {
        let hint = match way {
            WayOut::Seek => {
                "; seek to a stored seq, or start at \"earliest\" to read from the oldest stored event"
            }
            WayOut::StartEarliest => {
                "; the consumer's stored position is older than that: subscribe it with the start \
                 \"earliest\" to go on from the oldest stored event (the trimmed ones are gone; \
                 its next ack stores the new position), or seek to a stored seq"
            }
            WayOut::Resubscribe(true) => {
                "; subscribe the consumer again with the start \"earliest\" to go on from the \
                 oldest stored event (skipping the trimmed ones)"
            }
            WayOut::Resubscribe(false) => {
                "; subscribe again with the start \"earliest\" to go on from the oldest stored event"
            }
        };
        self.message.push_str(hint);
        self.parts.push(Part::Text(hint.into()));
        self
    }

    /// `Internal`: a bug in accord (or in a binding), described by `what`.
    pub fn internal(what: impl fmt::Display) -> Self {
        Error::new(
            ErrorKind::Internal,
            format!("internal error in accord: {what}"),
        )
    }
}

/// The way out of `Trimmed` that its message names (kept with the error, so that the error
/// type, which every layer returns, depends on nothing above it).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum WayOut {
    /// A seek (`After(seq)`) to a trimmed seq: seek to a stored one, or start at `Earliest`.
    Seek,
    /// A consumer's stored position was trimmed, and the start was not `Earliest`.
    StartEarliest,
    /// A live subscription fell behind a trim: subscribe again (a consumer: with `Earliest`).
    Resubscribe(bool),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_with_its_own_code() {
        let codes: std::collections::HashSet<_> = ErrorKind::ALL.iter().map(|k| k.code()).collect();
        assert_eq!(codes.len(), ErrorKind::ALL.len());
        // A kind added to the enum but not to ALL fails to compile here.
        for kind in ErrorKind::ALL {
            match kind {
                ErrorKind::InvalidArgument
                | ErrorKind::Held
                | ErrorKind::Done
                | ErrorKind::Timeout
                | ErrorKind::Cancelled
                | ErrorKind::LeaseLost
                | ErrorKind::Connection
                | ErrorKind::Database
                | ErrorKind::Closed
                | ErrorKind::Unsupported
                | ErrorKind::Internal
                | ErrorKind::Trimmed => {}
            }
        }
    }
}
