//! The conformance suite: every scenario of docs/semantics.md as a function of a [`Harness`],
//! listed once, in [`conformance_suite!`], with the capabilities it needs beyond accord's API.
//!
//! A backend's test file instantiates the suite with its harness and the capabilities that
//! harness has; every scenario becomes a test of that harness. A scenario that needs a
//! capability the harness lacks is generated `#[ignore]`d with the reason, so `cargo test`
//! prints e.g. `memory::l3_expiry_hands_over_with_a_larger_fence ... ignored, lacks network
//! faults: …` and counts it among the ignored. Run anyway (`--include-ignored`), it prints the
//! same reason and returns.
//!
//! The capabilities (what a harness offers beyond a store accord can connect to):
//! - `network_faults`: a TCP proxy between a client and the coordinator cuts or stalls the
//!   client's connections (`support/proxy.rs`); needs a server reached over TCP.
//! - `connection_termination`: a client's connections are ended from outside and counted
//!   (PostgreSQL: `pg_terminate_backend`, `pg_stat_activity`; etcd: a reset of the proxy its
//!   `Harness::terminable_client` goes through); the client then reconnects. What a reconnect
//!   may lose is the store's (`Harness::reconnect_loses_notifications`).
//! - `member_failure`: the coordinator is a cluster whose members a test kills (-9) and
//!   restarts, or stops (SIGSTOP) and continues, one at a time (`support/etcd.rs`; etcd only).
//!
//! And what a store offers beyond leases, locks, waiting and notify (every store but etcd has
//! them all; etcd gains them in steps):
//! - `pools`: work pools (offer, claim, counts), and what is built on them: semaphores, fleets.
//! - `streams`: durable streams.
//! - `snapshot`: `Client::snapshot` (what `accord top` shows).
//!
//! [`Harness`]: crate::support::Harness

pub mod dropped;
pub mod ending;
pub mod fleet;
pub mod input;
pub mod leases;
pub mod members;
pub mod notify;
pub mod pool;
pub mod queue;
pub mod recipes;
pub mod snapshot;
pub mod streams;

/// Expands to one `#[tokio::test]` per scenario, each with a fresh harness from `$harness`:
/// `conformance_suite!(Harness::sqlite, has []);`. This is the one list of scenarios: add a new
/// one here, with what it needs.
#[macro_export]
macro_rules! conformance_suite {
    ($harness:path, has [$($has:ident),* $(,)?]) => {
        $( $crate::__conformance_capability!(@known $has); )*
        $crate::__conformance_scenarios!($harness, [$($has)*],
            leases::l1_acquire_records_everything: [],
            leases::l2_not_reentrant: [],
            leases::l3_expiry_hands_over_with_a_larger_fence: [network_faults],
            leases::l4_renew_extends_and_merges: [],
            leases::l5_done_is_final_until_reset: [],
            leases::l6_release_is_idempotent_and_fenced: [network_faults],
            leases::l7_list_filters_and_pages: [],
            leases::l7_list_filters_nested_metadata: [],
            leases::l8_waiting_is_woken: [],
            leases::l8_woken_at_expiry: [network_faults],
            leases::l9_cancellation_leaves_nothing_held: [],
            leases::l10_keepalive_is_batched: [],
            leases::l11_connection_terminated: [connection_termination, network_faults],
            leases::l11_stalled_connection: [network_faults],
            notify::n1_any_source_is_heard: [],
            notify::n2_nothing_sent_after_listen_is_missed: [],
            notify::n3_bursts_keep_order: [],
            notify::n4_limits_and_quoting: [],
            notify::n4_own_channels_are_reserved: [],
            notify::n5_listener_reconnects: [connection_termination],
            notify::n5_reconnected_comes_first: [connection_termination],
            notify::n6_close_ends_waits: [],
            notify::n7_notifications_sent_together_each_arrive: [],
            input::g11_bad_input_is_refused: [],
            ending::g4_lost_fires_with_a_release_in_flight: [network_faults],
            ending::g4_lost_fires_with_done_in_flight: [network_faults],
            ending::close_ends_every_lease: [],
            ending::concurrent_endings_each_get_their_own_answer: [],
            ending::concurrent_tries_each_get_their_own_answer: [],
            ending::stats_count_what_the_client_did: [],
            pool::p1_offer_is_idempotent_and_counted: [pools],
            pool::p3_claims_are_batched_and_never_shared: [pools],
            pool::p3_claims_of_one_client_share_out_the_keys: [pools],
            pool::p3_concurrent_claimers_get_disjoint_keys: [pools],
            pool::p4_waiting_claims_are_woken: [pools],
            pool::p4_a_dead_claimers_keys_return: [pools, network_faults],
            pool::p6_semaphore_admits_its_limit: [pools],
            fleet::m1_members_join_watch_and_leave: [],
            fleet::m2_a_dropped_next_loses_no_change: [],
            fleet::f1_shards_split_evenly_and_hold_still: [pools],
            fleet::f2_a_newcomer_is_handed_shards: [pools],
            fleet::f3_a_dead_members_shards_are_retaken: [pools, network_faults],
            fleet::f4_close_hands_everything_back: [pools],
            fleet::fleet_bad_input_is_refused: [pools],
            queue::x1_shared_holders_and_a_waiting_writer: [],
            queue::x2_fair_order_one_wakeup_per_release: [],
            queue::x3_leaving_the_line_stalls_nobody: [],
            queue::x3_a_dead_waiter_costs_at_most_its_ttl: [network_faults],
            queue::e1_e3_one_leader_handed_on_in_order: [],
            queue::e2_a_dead_leader_is_replaced: [network_faults],
            queue::e4_vacancies_are_reported: [],
            queue::e4_a_dead_leaders_vacancy_is_reported: [network_faults],
            queue::e5_a_dropped_next_loses_no_change: [],
            streams::d1_earliest_replays_in_order_then_live: [streams],
            streams::d1_concurrent_publishers_commit_in_order: [streams],
            streams::d2_no_gap_across_reconnects: [streams, connection_termination],
            streams::d3_a_consumer_resumes_after_its_ack: [streams],
            streams::d4_retention_trims_and_says_where_the_stream_starts: [streams],
            streams::d5_payloads_are_any_utf8_and_names_any_text: [streams],
            streams::d6_a_consumer_behind_retention_is_told_the_way_out: [streams],
            snapshot::t1_snapshot_shows_every_section: [snapshot, pools],
            snapshot::t2_snapshot_counts_waiters_per_key: [snapshot],
            recipes::r1_recipe_keys_are_refused_to_plain_calls: [pools],
            recipes::r2_semaphores_survive_plain_calls: [pools],
            recipes::r3_departed_members_leave_no_rows: [],
            members::k1_a_killed_leader_loses_no_lease: [member_failure],
            members::k2_a_killed_follower_loses_no_lease: [member_failure],
            members::k3_restarted_members_are_used_again: [member_failure],
            members::k4_a_hung_leader_loses_no_lease: [member_failure, network_faults],
            members::k5_a_hung_follower_loses_no_lease: [member_failure, network_faults],
            members::k6_a_frozen_path_loses_no_lease: [member_failure, network_faults],
            members::k7_a_killed_leader_loses_no_event: [member_failure, streams],
            members::k8_a_leaderless_member_ends_its_watch: [member_failure],
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_scenarios {
    ($harness:path, $has:tt, $($module:ident::$scenario:ident: [$($need:ident),*]),* $(,)?) => {
        $(
            $crate::__conformance_scenario!(@check [$harness, $has, $module::$scenario],
                [$($need)*], []);
        )*
    };
}

/// Checks a scenario's needs one by one against the harness's capabilities (through
/// `__conformance_capability!`), collecting the reasons of those it lacks, then generates the
/// test: run, or ignored with the first reason (`#[ignore]` takes a literal only).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_scenario {
    (@check [$harness:path, $has:tt, $module:ident::$scenario:ident], [], []) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $scenario() {
            // A harness whose server is not configured says why and skips.
            let Some(harness) =
                $crate::support::Available::available($harness(stringify!($scenario)).await)
            else {
                return;
            };
            $crate::conformance::$module::$scenario(&harness).await;
        }
    };
    (@check [$harness:path, $has:tt, $module:ident::$scenario:ident], [],
        [$why:literal $($more:literal)*]) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = $why]
        async fn $scenario() {
            // Named, not run: the scenario belongs to this harness's suite all the same.
            let _ = $crate::conformance::$module::$scenario;
            eprintln!(
                "skipped: {}: {}",
                stringify!($harness),
                [$why $(, $more)*].join("; ")
            );
        }
    };
    (@check [$harness:path, [$($has:ident)*], $module:ident::$scenario:ident],
        [$need:ident $($needs:ident)*], $missing:tt) => {
        $crate::__conformance_capability!($need in [$($has)*],
            [$harness, [$($has)*], $module::$scenario], [$($needs)*], $missing);
    };
    (@has $test:tt, $needs:tt, $missing:tt) => {
        $crate::__conformance_scenario!(@check $test, $needs, $missing);
    };
    (@lacks $why:literal, $test:tt, $needs:tt, [$($missing:literal)*]) => {
        $crate::__conformance_scenario!(@check $test, $needs, [$($missing)* $why]);
    };
}

/// `$need in [$has…]`: continues the scenario's check with the need met, or with the reason it
/// is not. Each capability has a rule for each case; an unknown name does not compile.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_capability {
    (@known network_faults) => {};
    (@known connection_termination) => {};
    (@known pools) => {};
    (@known streams) => {};
    (@known snapshot) => {};
    (@known member_failure) => {};
    (@known $other:ident) => {
        compile_error!(concat!("unknown capability: ", stringify!($other)));
    };

    (network_faults in [network_faults $($rest:ident)*], $($k:tt)*) => {
        $crate::__conformance_scenario!(@has $($k)*);
    };
    (connection_termination in [connection_termination $($rest:ident)*], $($k:tt)*) => {
        $crate::__conformance_scenario!(@has $($k)*);
    };
    (pools in [pools $($rest:ident)*], $($k:tt)*) => {
        $crate::__conformance_scenario!(@has $($k)*);
    };
    (streams in [streams $($rest:ident)*], $($k:tt)*) => {
        $crate::__conformance_scenario!(@has $($k)*);
    };
    (snapshot in [snapshot $($rest:ident)*], $($k:tt)*) => {
        $crate::__conformance_scenario!(@has $($k)*);
    };
    (member_failure in [member_failure $($rest:ident)*], $($k:tt)*) => {
        $crate::__conformance_scenario!(@has $($k)*);
    };
    ($need:ident in [$other:ident $($rest:ident)*], $($k:tt)*) => {
        $crate::__conformance_capability!($need in [$($rest)*], $($k)*);
    };
    (network_faults in [], $($k:tt)*) => {
        $crate::__conformance_scenario!(@lacks
            "lacks network faults: a proxy that cuts or stalls a client's connections to a server",
            $($k)*);
    };
    (connection_termination in [], $($k:tt)*) => {
        $crate::__conformance_scenario!(@lacks
            "lacks connection termination: a client's connections ended from outside",
            $($k)*);
    };
    (pools in [], $($k:tt)*) => {
        $crate::__conformance_scenario!(@lacks
            "lacks pools: work pools (offer, claim), semaphores and fleets",
            $($k)*);
    };
    (streams in [], $($k:tt)*) => {
        $crate::__conformance_scenario!(@lacks "lacks streams: durable streams", $($k)*);
    };
    (snapshot in [], $($k:tt)*) => {
        $crate::__conformance_scenario!(@lacks "lacks snapshot: Client::snapshot", $($k)*);
    };
    (member_failure in [], $($k:tt)*) => {
        $crate::__conformance_scenario!(@lacks
            "lacks member failure: a cluster whose members are killed and restarted (etcd)",
            $($k)*);
    };
    ($need:ident in [], $($k:tt)*) => {
        compile_error!(concat!("unknown capability: ", stringify!($need)));
    };
}
