//! The balancing decision of a fleet member, as a pure function of one read of the fleet and
//! of what this member has in flight: which free shards to take, and which shards to ask
//! other members to hand off. Every member runs it on its own read once per period.
//!
//! The rules (each against a pitfall of KCL 2.x's lease stealing):
//! - the target is ceil(shards / members), members counting this one even before its member
//!   row shows, and newcomers that hold nothing yet;
//! - take free shards only up to the target (a survivor never grabs every dead member's
//!   shards, only to have them stolen back);
//! - below the target after that, ask the most loaded members, one shard at a time, each only
//!   while it would still hold at least two more than this member (so nothing moves when every
//!   member is within ±1 of the others: no churn when balanced), at most `max_handoffs` a period
//!   (by default a quarter of the target share, so convergence does not slow with fleet size);
//! - each member decides for itself in parallel, so many hand-offs happen in one period.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One member's view of the fleet: what its period read found, plus what it asked for and
/// has not heard back about.
#[derive(Clone, Debug)]
pub(crate) struct View<'a> {
    /// This member's owner.
    pub me: &'a str,
    /// The owners of the live members of the fleet (this one may be missing: it counts anyway).
    pub members: &'a [String],
    /// The fleet's shards, in their order.
    pub shards: &'a [String],
    /// The holder of each held shard (shards of this fleet only).
    pub holders: &'a HashMap<String, String>,
    /// Shards this member asked for, whose hand-off it is still waiting for.
    pub in_flight: &'a BTreeSet<String>,
    /// Free shards that the previous read saw held by a member that is still live: a hand-off
    /// in transit to its asker, which is woken by the release; not taken this period (if
    /// still free at the next read, they are).
    pub settling: &'a BTreeSet<String>,
    /// The most hand-offs this member asks for in one period.
    pub max_handoffs: Option<usize>,
}

/// The hand-offs one member asks for in a period: the configured number, or by default a
/// quarter of the target share (at least 4), so that a newcomer is handed its share within
/// about four periods however large the fleet (with a fixed small limit, a newcomer to a fleet
/// of 1,024 shards and 4 members took 64 periods).
pub(crate) fn handoff_limit(configured: Option<usize>, target: usize) -> usize {
    configured.unwrap_or_else(|| (target / 4).max(4))
}

/// What to do this period.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// ceil(shards / members).
    pub target: usize,
    /// Free shards to take now.
    pub take: Vec<String>,
    /// Shards to ask their holders for: (holder, shard).
    pub ask: Vec<(String, String)>,
}

/// A stable per-member offset, so that members taking or asking at the same moment start at
/// different shards instead of all racing for the first.
fn offset(me: &str, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in me.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    (hash % len as u64) as usize
}

fn rotated<T: Clone>(items: &[T], me: &str) -> Vec<T> {
    let start = offset(me, items.len());
    items[start..]
        .iter()
        .chain(&items[..start])
        .cloned()
        .collect()
}

/// The decision of one member for this period.
pub(crate) fn plan(view: &View<'_>) -> Plan {
    let mut members: BTreeSet<&str> = view.members.iter().map(String::as_str).collect();
    members.insert(view.me);
    let shards = view.shards.len();
    let target = shards.div_ceil(members.len());

    // Load per holder, and each holder's shards in fleet order.
    let mut held_by: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for shard in view.shards {
        if let Some(owner) = view.holders.get(shard) {
            held_by.entry(owner.as_str()).or_default().push(shard);
        }
    }
    let mine_held = held_by.get(view.me).map_or(0, Vec::len);
    let mut mine = mine_held + view.in_flight.len();
    let mut plan = Plan {
        target,
        ..Plan::default()
    };
    if mine >= target {
        return plan;
    }

    let free: Vec<&String> = view
        .shards
        .iter()
        .filter(|s| {
            !view.holders.contains_key(*s)
                && !view.in_flight.contains(*s)
                && !view.settling.contains(*s)
        })
        .collect();
    for shard in rotated(&free, view.me).into_iter().take(target - mine) {
        plan.take.push(shard.clone());
    }
    mine += plan.take.len();

    let mut load: BTreeMap<&str, usize> = held_by
        .iter()
        .filter(|(owner, _)| **owner != view.me)
        .map(|(owner, shards)| (*owner, shards.len()))
        .collect();
    let mut asked_of: BTreeMap<&str, usize> = BTreeMap::new();
    let limit = handoff_limit(view.max_handoffs, target);
    while mine < target && plan.ask.len() < limit {
        // The most loaded other holder; ties go to the smallest owner, so that every member
        // reading the same table picks the same donor.
        let Some((&donor, &donor_load)) = load
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        else {
            break;
        };
        if donor_load < mine + 2 {
            break; // within ±1 of everyone: nothing moves
        }
        let candidates: Vec<&String> = held_by[donor]
            .iter()
            .copied()
            .filter(|s| !view.in_flight.contains(*s))
            .collect();
        let nth = asked_of.entry(donor).or_default();
        let Some(shard) = rotated(&candidates, view.me).get(*nth).copied() else {
            load.remove(donor);
            continue;
        };
        *nth += 1;
        plan.ask.push((donor.to_string(), shard.clone()));
        *load.get_mut(donor).expect("a donor has a load") -= 1;
        mine += 1;
    }
    plan
}

/// The holder's side of a hand-off request: give a shard away only while holding at least two
/// more than the asker says it has (the same ±1 rule, so two members never pass a shard back
/// and forth).
pub(crate) fn should_hand_off(held: usize, asker_has: usize) -> bool {
    held >= asker_has + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    /// Holders from per-member loads: member i holds the next `loads[i]` shards.
    fn layout(members: &[String], shards: &[String], loads: &[usize]) -> HashMap<String, String> {
        let mut holders = HashMap::new();
        let mut next = shards.iter();
        for (member, &n) in members.iter().zip(loads) {
            for _ in 0..n {
                holders.insert(next.next().unwrap().clone(), member.clone());
            }
        }
        holders
    }

    fn plan_for(
        me: usize,
        members: &[String],
        shards: &[String],
        holders: &HashMap<String, String>,
        max: usize,
    ) -> Plan {
        plan(&View {
            me: &members[me],
            members,
            shards,
            holders,
            in_flight: &BTreeSet::new(),
            settling: &BTreeSet::new(),
            max_handoffs: Some(max),
        })
    }

    #[test]
    fn target_counts_members_and_me() {
        let shards = names("s", 64);
        let members = names("m", 4);
        let p = plan_for(0, &members, &shards, &HashMap::new(), 1);
        assert_eq!(p.target, 16);
        assert_eq!(p.take.len(), 16, "takes only up to the target");
        // Not yet in the member list: still counts itself.
        let others = names("m", 4)[1..].to_vec();
        let p = plan(&View {
            me: "m0",
            members: &others,
            shards: &shards,
            holders: &HashMap::new(),
            in_flight: &BTreeSet::new(),
            settling: &BTreeSet::new(),
            max_handoffs: Some(1),
        });
        assert_eq!(p.target, 16);
    }

    #[test]
    fn a_survivor_takes_only_up_to_its_target() {
        // 3 members left of 4; the dead one's 16 shards are free; each survivor takes 5 or 6.
        let shards = names("s", 64);
        let members = names("m", 4);
        let holders: HashMap<_, _> = layout(&members, &shards, &[16, 16, 16, 0]);
        let alive = &members[..3];
        for me in 0..3 {
            let p = plan_for(me, alive, &shards, &holders, 4);
            assert_eq!(p.target, 22);
            assert_eq!(p.take.len(), 6);
            assert!(p.take.iter().all(|s| !holders.contains_key(s)));
            assert!(p.ask.is_empty(), "free shards suffice: {p:?}");
        }
    }

    /// Every combination of loads of up to 5 members over up to 12 shards: the invariants hold.
    #[test]
    fn exhaustive_invariants() {
        fn loads_of(members: usize, shards: usize) -> Vec<Vec<usize>> {
            if members == 0 {
                return vec![vec![]];
            }
            let mut out = Vec::new();
            for first in 0..=shards {
                for mut rest in loads_of(members - 1, shards - first) {
                    rest.insert(0, first);
                    out.push(rest);
                }
            }
            out
        }
        let mut cases = 0;
        for n_shards in 1..=12 {
            let shards = names("s", n_shards);
            for n_members in 1..=5 {
                let members = names("m", n_members);
                for loads in loads_of(n_members, n_shards) {
                    let holders = layout(&members, &shards, &loads);
                    for me in 0..n_members {
                        for max in [1, 2, 8] {
                            cases += 1;
                            let p = plan_for(me, &members, &shards, &holders, max);
                            let target = n_shards.div_ceil(n_members);
                            assert_eq!(p.target, target);
                            let mine = loads[me];
                            let after = mine + p.take.len() + p.ask.len();
                            // Never beyond the target; never both idle and below it with free shards.
                            assert!(after <= target.max(mine), "{loads:?} me={me}: {p:?}");
                            let free = n_shards - loads.iter().sum::<usize>();
                            assert_eq!(p.take.len(), free.min(target.saturating_sub(mine)));
                            assert!(p.take.iter().all(|s| !holders.contains_key(s)));
                            assert!(p.ask.len() <= max);
                            // No ask when within ±1 of every other member.
                            let others_max = loads
                                .iter()
                                .enumerate()
                                .filter(|(i, _)| *i != me)
                                .map(|(_, l)| *l)
                                .max()
                                .unwrap_or(0);
                            if others_max < mine + p.take.len() + 2 {
                                assert!(p.ask.is_empty(), "{loads:?} me={me}: {p:?}");
                            }
                            // Every ask names the shard's holder, each shard once; the first
                            // goes to the most loaded.
                            let mut seen = BTreeSet::new();
                            for (donor, shard) in &p.ask {
                                assert_eq!(holders.get(shard), Some(donor));
                                assert_ne!(donor, &members[me]);
                                assert!(seen.insert(shard.clone()));
                            }
                            if let Some((first, _)) = p.ask.first() {
                                let i = members.iter().position(|m| m == first).unwrap();
                                assert_eq!(loads[i], others_max);
                            }
                        }
                    }
                }
            }
        }
        assert!(cases > 10_000);
    }

    /// Members planning in turn (each hand-off granted if the holder agrees) end within ±1,
    /// with nothing free, and then nothing moves.
    #[test]
    fn rounds_converge_and_then_hold_still() {
        // Hand-offs are bounded (4 asked per member per period), so the rounds a newcomer
        // needs grow with what it must be handed: 147 shards take 37.
        for (n_shards, loads, most_rounds) in [
            (64, vec![16, 16, 16, 16, 0], 4),
            (64, vec![64, 0, 0, 0], 7),
            (16, vec![0, 0, 0], 3),
            (10, vec![7, 0, 0], 4),
            (1024, vec![300, 300, 0, 0, 0, 0, 0], 40),
        ] {
            let shards = names("s", n_shards);
            let members = names("m", loads.len());
            let mut holders = layout(&members, &shards, &loads);
            let mut rounds = 0;
            loop {
                rounds += 1;
                assert!(rounds < 100, "no convergence for {loads:?}");
                let mut moved = false;
                for me in 0..members.len() {
                    let p = plan_for(me, &members, &shards, &holders, 4);
                    for s in p.take {
                        holders.insert(s, members[me].clone());
                        moved = true;
                    }
                    let mine = holders.values().filter(|o| **o == members[me]).count();
                    for (i, (donor, s)) in p.ask.into_iter().enumerate() {
                        let held = holders.values().filter(|o| **o == donor).count();
                        if should_hand_off(held, mine + i) {
                            holders.insert(s, members[me].clone());
                            moved = true;
                        }
                    }
                }
                if !moved {
                    break;
                }
            }
            let counts: Vec<usize> = members
                .iter()
                .map(|m| holders.values().filter(|o| *o == m).count())
                .collect();
            assert_eq!(counts.iter().sum::<usize>(), n_shards, "{counts:?}");
            let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(hi - lo <= 1, "{loads:?} ended at {counts:?}");
            assert!(
                rounds <= most_rounds,
                "{loads:?} took (the last round moves nothing) {rounds} rounds"
            );
        }
    }

    #[test]
    fn shards_in_transit_are_left_to_their_asker() {
        let shards = names("s", 8);
        let members = names("m", 2);
        let holders = layout(&members, &shards, &[3, 4]);
        let settling: BTreeSet<String> = [shards[7].clone()].into();
        let p = plan(&View {
            me: "m0",
            members: &members,
            shards: &shards,
            holders: &holders,
            in_flight: &BTreeSet::new(),
            settling: &settling,
            max_handoffs: Some(1),
        });
        assert!(p.take.is_empty() && p.ask.is_empty(), "{p:?}");
    }

    #[test]
    fn holders_refuse_within_one() {
        assert!(should_hand_off(5, 3));
        assert!(!should_hand_off(4, 3));
        assert!(!should_hand_off(4, 4));
    }

    #[test]
    fn the_default_handoff_limit_scales_with_the_share() {
        assert_eq!(handoff_limit(None, 13), 4, "small fleets: 4");
        assert_eq!(
            handoff_limit(None, 205),
            51,
            "a quarter of the target share"
        );
        assert_eq!(handoff_limit(Some(1), 205), 1, "a configured limit is kept");
        // A newcomer to 1,024 shards held by 4 members asks for a quarter of its share at once.
        let members = names("m", 5);
        let shards = names("s", 1024);
        let holders = layout(&members, &shards, &[256, 256, 256, 256, 0]);
        let view = View {
            me: &members[4],
            members: &members,
            shards: &shards,
            holders: &holders,
            in_flight: &BTreeSet::new(),
            settling: &BTreeSet::new(),
            max_handoffs: None,
        };
        let plan = plan(&view);
        assert_eq!(plan.target, 205);
        assert_eq!(plan.ask.len(), 51);
        let donors: BTreeSet<&String> = plan.ask.iter().map(|(donor, _)| donor).collect();
        assert_eq!(donors.len(), 4, "asked of every loaded member");
    }
}
