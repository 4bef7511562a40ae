//! Where accord's records live in etcd's key space, under the URL's prefix `P`:
//!
//! - `P/k/<ns>/<key>`: a key's row (no lease): metadata, done, the last owner and fence.
//! - `P/l/h/<ns>/<key>`: the exclusive holder, on its session's lease; the fence is its
//!   create_revision (scaled, see [`fence_of`]).
//! - `P/l/s/<ns>/<key>/<id>`: one shared holder, on its session's lease.
//! - `P/l/q/<ns>/<key>/<id>`: one waiter in line, on its session's lease; its ticket is its
//!   create_revision.
//! - `P/l/p/<ns>/<pool><key>`: a key offered to a pool (no lease, never changed); its
//!   create_revision and slot (in the value) are the offer's order. Under `P/l/` so that the
//!   one watch of lock records sees offers (a put wakes the pool's claimers).
//! - `P/c/<channel>/<id>`: notifications, one record each (`<channel>` length-prefixed), on a
//!   lease that is never kept alive: etcd deletes them within a minute.
//! - `P/x/<lease>`: when a session's lease expires at the earliest, on its client's clock (what
//!   `expires_at` shows), on the lease itself.
//! - Streams (no lease): `P/s/h/<ns>/<stream>` a stream's head (its newest seq and
//!   published_at), `P/s/r/<ns>/<stream>` its retention rule, `P/s/f/<ns>/<stream>` its first
//!   stored seq once trimmed, `P/s/e/<ns>/<stream>/<seq>` its events (seq as 20 digits, so that
//!   the range is in seq order) and `P/s/a/<ns>/<stream>/<consumer>` its consumers' positions
//!   (in the last two, `<stream>` is length-prefixed, since more follows it).
//!
//! `<ns>` is length-prefixed (`3:abc`) so that no namespace is a prefix of another's range;
//! in the `l/s` and `l/q` ranges the key is too, since an id follows it. Row keys keep the key's
//! own bytes last, so that a range of rows is in the key's code point order (UTF-8 byte order)
//! and a list prefix is a range (a pool's rows and holders too: its keys start with the pool).
//! The lock records (`P/l/`) are watched for deletes, and for puts of offers. `<pool>` is
//! length-prefixed too: no pool's entries are a range of another's.

/// Fences and tickets are a key's create_revision times this, plus its place in the
/// transaction that created it: the keys one transaction creates share a revision, and a
/// batched grant must still give each key its own fence.
pub(crate) const FENCE_SCALE: i64 = 1024;

/// The fence (or ticket) of a key created at `revision` as the `slot`-th of its transaction.
pub(crate) fn fence_of(revision: i64, slot: i64) -> i64 {
    revision.saturating_mul(FENCE_SCALE).saturating_add(slot)
}

/// The create_revision a fence (or ticket) was made from.
pub(crate) fn revision_of(fence: i64) -> i64 {
    fence / FENCE_SCALE
}

/// The place in its transaction a fence (or ticket) was made with.
pub(crate) fn slot_of(fence: i64) -> i64 {
    fence.rem_euclid(FENCE_SCALE)
}

/// A record's id among its siblings (waiters, shared holders, notifications).
pub(crate) fn random_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[derive(Clone)]
pub(crate) struct Layout {
    prefix: String,
}

fn counted(text: &str) -> String {
    format!("{}:{text}", text.len())
}

impl Layout {
    pub fn new(prefix: &str) -> Layout {
        Layout {
            prefix: prefix.to_string(),
        }
    }

    /// Where every row of `ns` starts; a row's key follows it.
    pub fn rows(&self, ns: &str) -> String {
        format!("{}/k/{}/", self.prefix, counted(ns))
    }

    pub fn row(&self, ns: &str, key: &str) -> String {
        format!("{}{key}", self.rows(ns))
    }

    /// Where every exclusive holder of `ns` starts; a holder's key follows it.
    pub fn holders(&self, ns: &str) -> String {
        format!("{}/l/h/{}/", self.prefix, counted(ns))
    }

    pub fn holder(&self, ns: &str, key: &str) -> String {
        format!("{}{key}", self.holders(ns))
    }

    /// Every shared holder of `ns`.
    pub fn all_shared(&self, ns: &str) -> String {
        format!("{}/l/s/{}/", self.prefix, counted(ns))
    }

    /// The shared holders of one key (an id follows).
    pub fn shared(&self, ns: &str, key: &str) -> String {
        format!("{}{}/", self.all_shared(ns), counted(key))
    }

    /// The waiters in line for one key (an id follows).
    pub fn line(&self, ns: &str, key: &str) -> String {
        format!("{}/l/q/{}/{}/", self.prefix, counted(ns), counted(key))
    }

    /// Where the entries of the keys offered to `pool` start; a key follows.
    pub fn pool(&self, ns: &str, pool: &str) -> String {
        format!("{}{}/{}", self.pools(), counted(ns), counted(pool))
    }

    pub fn pool_entry(&self, ns: &str, pool: &str, key: &str) -> String {
        format!("{}{key}", self.pool(ns, pool))
    }

    /// Every pool entry of every namespace.
    fn pools(&self) -> String {
        format!("{}/l/p/", self.prefix)
    }

    /// The namespace and pool a pool entry (under [`Layout::pool`]) is of.
    pub fn pool_of<'a>(&self, record: &'a [u8]) -> Option<(&'a str, &'a str)> {
        let rest = record.strip_prefix(self.pools().as_bytes())?;
        let (ns, rest) = split_counted(rest)?;
        let (pool, _) = split_counted(rest.strip_prefix(b"/")?)?;
        Some((ns, pool))
    }

    /// Every record a release, expiry or leave deletes (watched for deletes).
    pub fn locks(&self) -> String {
        format!("{}/l/", self.prefix)
    }

    /// Every lease's expiry record.
    pub fn expiries(&self) -> String {
        format!("{}/x/", self.prefix)
    }

    pub fn expiry(&self, lease: i64) -> String {
        format!("{}{lease:x}", self.expiries())
    }

    /// Where the waiters in line of every key of `ns` start (a length-prefixed key follows).
    pub fn all_lines(&self, ns: &str) -> String {
        format!("{}/l/q/{}/", self.prefix, counted(ns))
    }

    /// The key a waiter's record (under [`Layout::all_lines`]) waits for.
    pub fn line_key<'a>(&self, ns: &str, record: &'a str) -> Option<&'a str> {
        counted_head(record.strip_prefix(&self.all_lines(ns))?)
    }

    /// Where the streams' records of one kind (`h`ead, `r`ule, `f`irst seq, `e`vents,
    /// `a`cks) of `ns` start.
    pub fn streams(&self, kind: char, ns: &str) -> String {
        format!("{}/s/{kind}/{}/", self.prefix, counted(ns))
    }

    /// A stream's head, rule or first seq (kind `h`, `r`, `f`): the stream's name last.
    pub fn stream(&self, kind: char, ns: &str, stream: &str) -> String {
        format!("{}{stream}", self.streams(kind, ns))
    }

    /// Where a stream's events start; an event's key is this and its seq ([`Layout::event`]).
    pub fn events(&self, ns: &str, stream: &str) -> String {
        format!("{}{}/", self.streams('e', ns), counted(stream))
    }

    pub fn event(&self, ns: &str, stream: &str, seq: i64) -> String {
        format!("{}{seq:020}", self.events(ns, stream))
    }

    /// A stream's consumer's position.
    pub fn ack(&self, ns: &str, stream: &str, consumer: &str) -> String {
        format!("{}{}/{consumer}", self.streams('a', ns), counted(stream))
    }

    /// The stream and consumer of a position's record (under `streams('a', ns)`).
    pub fn ack_of<'a>(&self, ns: &str, record: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = record.strip_prefix(&self.streams('a', ns))?;
        let stream = counted_head(rest)?;
        let consumer = rest.get(rest.find(':')? + 1 + stream.len() + 1..)?;
        Some((stream, consumer))
    }

    pub fn channels(&self) -> String {
        format!("{}/c/", self.prefix)
    }

    /// A new notification's record on `channel` (`id` unique in its transaction).
    pub fn notification(&self, channel: &str, id: &str) -> String {
        format!("{}{}/{id}", self.channels(), counted(channel))
    }

    /// The channel a notification's record (under [`Layout::channels`]) is on.
    pub fn channel_of<'a>(&self, record: &'a [u8]) -> Option<&'a str> {
        let rest = record.strip_prefix(self.channels().as_bytes())?;
        let colon = rest.iter().position(|&b| b == b':')?;
        let len: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
        std::str::from_utf8(rest.get(colon + 1..colon + 1 + len)?).ok()
    }

    /// The key a shared holder's record (under [`Layout::all_shared`]) is of.
    pub fn shared_key<'a>(&self, ns: &str, record: &'a str) -> Option<&'a str> {
        counted_head(record.strip_prefix(&self.all_shared(ns))?)
    }
}

/// The length-prefixed text `rest` starts with (`3:abc/…` → `abc`).
fn counted_head(rest: &str) -> Option<&str> {
    split_counted(rest.as_bytes()).map(|(text, _)| text)
}

/// `<len>:<text>` at the start of `bytes`: the text, and what follows it.
fn split_counted(bytes: &[u8]) -> Option<(&str, &[u8])> {
    let colon = bytes.iter().position(|&b| b == b':')?;
    let len: usize = std::str::from_utf8(&bytes[..colon]).ok()?.parse().ok()?;
    let text = bytes.get(colon + 1..colon + 1 + len)?;
    Some((std::str::from_utf8(text).ok()?, &bytes[colon + 1 + len..]))
}

/// The end of the range of keys starting with `start` (etcd's `range_end`).
pub(crate) fn range_end(start: &str) -> Vec<u8> {
    let mut end = start.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Only 0xff bytes: every key from `start` on (etcd reads "\0" as "to the end").
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_and_keys_never_overlap() {
        let l = Layout::new("/p");
        assert_eq!(l.row("ab", "c"), "/p/k/2:ab/c");
        assert!(!l.rows("a").starts_with(&l.rows("ab")));
        assert!(!l.line("n", "a").starts_with(&l.line("n", "a/")));
        assert!(!l.line("n", "a/").starts_with(&l.line("n", "a")));
        let record = format!("{}x", l.shared("n", "a/1"));
        assert_eq!(l.shared_key("n", &record), Some("a/1"));
        let note = l.notification("c/1:x", "00");
        assert_eq!(l.channel_of(note.as_bytes()), Some("c/1:x"));
        assert_eq!(range_end("/p/k/"), b"/p/k0".to_vec());
        let waiter = format!("{}x", l.line("n", "a/1"));
        assert_eq!(l.line_key("n", &waiter), Some("a/1"));
        assert!(l.line("n", "a").starts_with(&l.all_lines("n")));
        // A stream's events and acks never reach into another stream's.
        assert!(!l.events("n", "s/1").starts_with(&l.events("n", "s")));
        assert!(l.event("n", "s", 2) < l.event("n", "s", 10));
        let ack = l.ack("n", "s/1:x", "c/2");
        assert_eq!(l.ack_of("n", &ack), Some(("s/1:x", "c/2")));
        assert!(!l.stream('h', "n", "s").starts_with(&l.streams('h', "n2")));
        let entry = l.pool_entry("n:1", "a/", "a/b");
        assert_eq!(l.pool_of(entry.as_bytes()), Some(("n:1", "a/")));
        assert!(!l.pool("n", "a/b/").starts_with(&l.pool("n", "a/")));
        assert!(entry.starts_with(&l.locks()));
        assert_eq!(fence_of(7, 3) / FENCE_SCALE, 7);
        assert_eq!(revision_of(fence_of(7, 3)), 7);
        assert_eq!(slot_of(fence_of(7, 3)), 3);
    }
}
