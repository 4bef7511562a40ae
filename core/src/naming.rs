//! How recipes name what they store: keys of one path segment per name, and notification
//! channels short enough for PostgreSQL whatever the names' length. Membership, fleets and
//! elections share these, so that every language's clients agree on them.

/// `%` and `/` percent-encoded, so that a name is one path segment: the prefix of group `a`
/// (`…/a/`) never matches the keys of group `a/b` (`…/a%2Fb/…`).
pub(crate) fn escape(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2F")
}

/// The name `escape` encoded (a stored key's segment back to the name it stands for).
pub(crate) fn unescape(segment: &str) -> String {
    segment.replace("%2F", "/").replace("%25", "%")
}

/// A PostgreSQL channel for `parts` in this namespace: `<stem>_<16 hex>` (a stable FNV-1a hash,
/// so every client of every language agrees, whatever the length of the names). A collision
/// only wakes a reader that then finds nothing new: the table is the truth.
pub fn channel_for(stem: &str, namespace: &str, parts: &[&str]) -> String {
    let mut hash: u64 = 0xcbf29ce484222325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x100000001b3);
        }
    };
    eat(namespace.as_bytes());
    for part in parts {
        eat(&[0]);
        eat(part.as_bytes());
    }
    format!("{stem}_{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_short_and_stable() {
        let c = channel_for("accord_group", "ns", &["x".repeat(500).as_str()]);
        assert!(c.len() <= crate::validate::MAX_CHANNEL_BYTES);
        assert_eq!(
            c,
            channel_for("accord_group", "ns", &["x".repeat(500).as_str()])
        );
        assert_ne!(
            c,
            channel_for("accord_group", "ns2", &["x".repeat(500).as_str()])
        );
        assert_ne!(
            channel_for("s", "ns", &["a", "bc"]),
            channel_for("s", "ns", &["ab", "c"])
        );
    }
}
