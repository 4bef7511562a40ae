//! One read of a namespace for `accord top` (and any dashboard): a page of keys, the exact
//! counts by state under the prefix, the groups' members, the fleets' members and shards, the
//! elections' leaders, and the streams with each named consumer's position and lag.
//!
//! The rule for what each section shows lives here, once: the recipes keep their state in
//! ordinary keys (`accord.group/…`, `accord.fleet/…`, `accord.election/…`, see their modules),
//! so the snapshot reads that range and sorts its rows into sections; streams come from their
//! own tables, and the waiters in line from the tickets under the prefix (`rules::waits_in_line`).
//! Both stores read everything at once: PostgreSQL pipelines its six statements on one
//! connection (one round trip), SQLite reads them in one transaction.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

// A store returns the waiters in its snapshot rows, so their record lives with the stores
// (below this module); the public path `accord_coord::KeyWaiters` names it from here.
pub use crate::backend::KeyWaiters;
use crate::backend::SnapshotRows;
use crate::error::Result;
use crate::membership::{member_info, MemberInfo};
use crate::naming::unescape;
use crate::options::{KeyCounts, KeyState, ListPage, ListQuery};
use crate::session::Session;
use crate::validate;

/// The rows of the recipes' range read at most (every group member, fleet shard and election).
pub const MAX_SNAPSHOT_RECIPE_ROWS: usize = 10_000;
/// The stream rows (a stream, or one consumer of a stream) read at most.
pub const MAX_SNAPSHOT_STREAM_ROWS: usize = 1_000;
/// The keys with acquires waiting in line listed at most (the first ones in key order);
/// [`KeyCounts::waiting`] counts every waiter regardless.
pub const MAX_SNAPSHOT_WAITER_KEYS: usize = 1_000;

/// Where the recipes keep their keys: groups, fleets and elections all start with it.
const RECIPES_PREFIX: &str = "accord.";

/// What [`crate::Client::snapshot`] reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamespaceSnapshot {
    /// The first page of keys under the prefix (up to the limit asked for), in key order.
    pub keys: ListPage,
    /// Every key under the prefix by state, exact however many there are.
    pub counts: KeyCounts,
    /// Each group with members, by name.
    pub groups: Vec<GroupSnapshot>,
    /// Each fleet with members or shards, by name.
    pub fleets: Vec<FleetSnapshot>,
    /// Each election that has had a leader, by name: its leader now, or none (vacant: the
    /// leader resigned or its lease expired, and no campaigner took over yet).
    pub elections: Vec<ElectionSnapshot>,
    /// Each stream, by name.
    pub streams: Vec<StreamSnapshot>,
    /// Each key under the prefix with acquires waiting in line for it, in key order (up to
    /// [`MAX_SNAPSHOT_WAITER_KEYS`]). A waiter in line is a waiting acquire
    /// ([`crate::Client::acquire`], exclusive or shared) that found the key held or others in
    /// line and took a place, live while it keeps trying. Not in line, so not shown: tries
    /// ([`crate::Client::try_acquire`]), claims of work pools and semaphores (they wait for any
    /// free key, not for one), and an acquire's first try, before it takes its place. An
    /// election's campaigners wait in line on its key (`accord.election/<name>`).
    pub waiters: Vec<KeyWaiters>,
    /// The recipes' rows went beyond [`MAX_SNAPSHOT_RECIPE_ROWS`], the streams' beyond
    /// [`MAX_SNAPSHOT_STREAM_ROWS`], or the keys with waiters beyond
    /// [`MAX_SNAPSHOT_WAITER_KEYS`]: the sections show the first ones only.
    pub truncated: bool,
    /// Which sections those bounds cut short (`truncated` is any of them).
    pub cut: SnapshotCut,
}

/// The sections of a [`NamespaceSnapshot`] that a read bound cut short: each shows its first
/// rows only, or none. The recipes' rows are read in key order (elections, then fleets, then
/// groups), so the section where [`MAX_SNAPSHOT_RECIPE_ROWS`] stopped the read is cut, and the
/// ones after it were not read at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotCut {
    /// Elections past [`MAX_SNAPSHOT_RECIPE_ROWS`].
    pub elections: bool,
    /// Fleets' members and shards past [`MAX_SNAPSHOT_RECIPE_ROWS`].
    pub fleets: bool,
    /// Groups' members past [`MAX_SNAPSHOT_RECIPE_ROWS`].
    pub groups: bool,
    /// Streams and consumers past [`MAX_SNAPSHOT_STREAM_ROWS`].
    pub streams: bool,
    /// Keys with waiters past [`MAX_SNAPSHOT_WAITER_KEYS`].
    pub waiters: bool,
}

impl NamespaceSnapshot {
    /// The acquires waiting in line for `key`, if any (and if `key` is among the first
    /// [`MAX_SNAPSHOT_WAITER_KEYS`] keys with waiters).
    pub fn waiters_on(&self, key: &str) -> Option<&KeyWaiters> {
        // In key order, compared by bytes as both stores compare keys (and as `str` does).
        self.waiters
            .binary_search_by(|w| w.key.as_str().cmp(key))
            .ok()
            .and_then(|i| self.waiters.get(i))
    }
}

/// A group's live members (see [`crate::Client::members`]), oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupSnapshot {
    /// The group's name.
    pub group: String,
    /// Its live members.
    pub members: Vec<MemberInfo>,
}

/// A fleet: its live members, oldest first, and every shard with its holder.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSnapshot {
    /// The fleet's name.
    pub fleet: String,
    /// Its live members.
    pub members: Vec<MemberInfo>,
    /// Every shard, by name; `owner` is `None` for an unowned one.
    pub shards: Vec<ShardSnapshot>,
}

impl FleetSnapshot {
    /// The shards `owner` holds, by name.
    pub fn shards_of(&self, owner: &str) -> Vec<&str> {
        self.shards
            .iter()
            .filter(|s| s.owner.as_deref() == Some(owner))
            .map(|s| s.shard.as_str())
            .collect()
    }

    /// The shards nobody holds, by name.
    pub fn unowned(&self) -> Vec<&str> {
        self.shards
            .iter()
            .filter(|s| s.owner.is_none())
            .map(|s| s.shard.as_str())
            .collect()
    }
}

/// One shard of a fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSnapshot {
    /// The shard's name (`0`..`n-1`, or a named shard).
    pub shard: String,
    /// Its holder while held.
    pub owner: Option<String>,
    /// The fence of its last grant.
    pub fence: i64,
    /// While held: when the holder's lease expires unless renewed.
    pub expires_at: Option<DateTime<Utc>>,
}

/// An election and its leader, if it has one now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionSnapshot {
    /// The election's name.
    pub election: String,
    /// The leader's owner; `None` while the election is vacant.
    pub leader: Option<String>,
    /// The fence of its leadership (while vacant: of the last one).
    pub fence: i64,
    /// While led: when the leadership expires unless renewed.
    pub expires_at: Option<DateTime<Utc>>,
}

/// A stream's bounds and its named consumers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSnapshot {
    /// The stream's name.
    pub stream: String,
    /// The oldest seq stored; `last_seq + 1` when none is.
    pub first_seq: i64,
    /// The newest seq published (0: never).
    pub last_seq: i64,
    /// Each named consumer that acknowledged, by name.
    pub readers: Vec<ReaderSnapshot>,
}

impl StreamSnapshot {
    /// Events stored now.
    pub fn length(&self) -> i64 {
        (self.last_seq - self.first_seq + 1).max(0)
    }
}

/// A named consumer's position in a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReaderSnapshot {
    /// The consumer's name.
    pub consumer: String,
    /// The last seq it acknowledged.
    pub acked: i64,
    /// Events published after it: `last_seq - acked` (never negative).
    pub lag: i64,
}

/// Reads the snapshot: `page` is the key table's query (its prefix is the counts' too).
pub(crate) async fn read(session: &Session, page: &ListQuery) -> Result<NamespaceSnapshot> {
    session.check_usable()?;
    page.validate()?;
    let recipes = ListQuery::new()
        .prefix(RECIPES_PREFIX)
        .limit(MAX_SNAPSHOT_RECIPE_ROWS);
    let scope = &session.scope;
    let rows = scope
        .backend
        .snapshot(
            &scope.namespace,
            page,
            &recipes,
            MAX_SNAPSHOT_STREAM_ROWS,
            MAX_SNAPSHOT_WAITER_KEYS,
        )
        .await?;
    Ok(assemble(rows))
}

/// Sorts the raw rows into sections (pure: the rule of what each section shows).
fn assemble(rows: SnapshotRows) -> NamespaceSnapshot {
    let mut groups: BTreeMap<String, Vec<MemberInfo>> = BTreeMap::new();
    let mut fleets: BTreeMap<String, FleetSnapshot> = BTreeMap::new();
    let mut elections = Vec::new();
    for row in rows.recipes.items.iter() {
        let held = row.state == KeyState::Held;
        let member = |owner: &str| {
            member_info(
                owner.to_string(),
                row.fence,
                row.expires_at,
                row.updated_at,
                &row.metadata,
            )
        };
        if let Some(rest) = row.key.strip_prefix("accord.group/") {
            // `<escaped group>/<owner>`: a member while its lease is live.
            if let (Some((group, owner)), true) = (rest.split_once('/'), held) {
                groups
                    .entry(unescape(group))
                    .or_default()
                    .push(member(owner));
            }
        } else if let Some(rest) = row.key.strip_prefix("accord.fleet/") {
            // `<escaped fleet>/m/<owner>` (members) or `<escaped fleet>/s/<shard>` (shards).
            let Some((name, rest)) = rest.split_once('/') else {
                continue;
            };
            let fleet = || FleetSnapshot {
                fleet: unescape(name),
                members: Vec::new(),
                shards: Vec::new(),
            };
            if let Some(owner) = rest.strip_prefix("m/") {
                if held {
                    let m = member(owner);
                    fleets
                        .entry(unescape(name))
                        .or_insert_with(fleet)
                        .members
                        .push(m);
                }
            } else if let Some(shard) = rest.strip_prefix("s/") {
                let shard = ShardSnapshot {
                    shard: shard.to_string(),
                    owner: if held { row.owner.clone() } else { None },
                    fence: row.fence,
                    expires_at: if held { row.expires_at } else { None },
                };
                fleets
                    .entry(unescape(name))
                    .or_insert_with(fleet)
                    .shards
                    .push(shard);
            }
        } else if let Some(name) = row.key.strip_prefix("accord.election/") {
            // The key outlives its leaders: free (released or expired) is a vacant election,
            // which is what an alert on leaderless elections needs to see.
            let leader = if held { row.owner.clone() } else { None };
            elections.push(ElectionSnapshot {
                election: unescape(name),
                expires_at: leader.as_ref().and(row.expires_at),
                leader,
                fence: row.fence,
            });
        }
    }
    let mut fleets: Vec<FleetSnapshot> = fleets.into_values().collect();
    for f in &mut fleets {
        f.members.sort_by_key(|m| (m.since, m.fence));
        // Shards named 0..n-1 sort as numbers; named shards by name.
        f.shards.sort_by(
            |a, b| match (a.shard.parse::<u64>(), b.shard.parse::<u64>()) {
                (Ok(x), Ok(y)) => x.cmp(&y),
                _ => a.shard.cmp(&b.shard),
            },
        );
    }
    let groups = groups
        .into_iter()
        .map(|(group, mut members)| {
            members.sort_by_key(|m| (m.since, m.fence));
            GroupSnapshot { group, members }
        })
        .collect();
    let mut streams: Vec<StreamSnapshot> = Vec::new();
    for row in rows.streams {
        if streams.last().map(|s| s.stream.as_str()) != Some(row.stream.as_str()) {
            streams.push(StreamSnapshot {
                stream: row.stream.clone(),
                first_seq: row.first_seq,
                last_seq: row.last_seq,
                readers: Vec::new(),
            });
        }
        if let (Some((consumer, acked)), Some(s)) = (row.consumer, streams.last_mut()) {
            s.readers.push(ReaderSnapshot {
                consumer,
                acked,
                lag: (row.last_seq - acked).max(0),
            });
        }
    }
    // A section is cut when the recipes' read stopped inside its range or before it.
    let stopped_at = rows
        .recipes
        .next_cursor
        .as_ref()
        .and_then(|_| rows.recipes.items.last())
        .map(|row| row.key.as_str());
    let recipes_cut =
        |section: &str| stopped_at.is_some_and(|last| last.starts_with(section) || last < section);
    let cut = SnapshotCut {
        elections: recipes_cut("accord.election/"),
        fleets: recipes_cut("accord.fleet/"),
        groups: recipes_cut("accord.group/"),
        streams: rows.streams_truncated,
        waiters: rows.waiters_truncated,
    };
    NamespaceSnapshot {
        keys: rows.page,
        counts: rows.counts,
        groups,
        fleets,
        elections,
        streams,
        waiters: rows.waiters,
        truncated: rows.recipes.next_cursor.is_some()
            || rows.streams_truncated
            || rows.waiters_truncated,
        cut,
    }
}

/// The largest page of keys a snapshot reads: the same bound as `list`.
pub const MAX_SNAPSHOT_KEYS: usize = validate::MAX_LIST_LIMIT;
