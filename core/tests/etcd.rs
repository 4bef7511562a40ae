//! The conformance suite on etcd (`ACCORD_TEST_ETCD_URL`, an `etcd://` URL of a cluster; each
//! scenario skips, saying why, without it). Built with the cargo feature `etcd` only.
//!
//! This step of the etcd store has leases, locks, waiting and notify: scenarios needing pools,
//! streams or snapshots are ignored with that reason, as are those needing the faults this
//! harness cannot make yet (a proxy per member, terminated connections).
#![cfg(feature = "etcd")]

mod conformance;
mod support;

use support::Harness;

conformance_suite!(Harness::etcd, has []);
