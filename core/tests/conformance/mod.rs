//! The conformance suite: every scenario of docs/semantics.md as a function of a [`Harness`], so
//! that each backend runs the same code. A backend's test file lists the scenarios it runs
//! with `conformance_suite!`.
#![allow(dead_code)]

pub mod ending;
pub mod input;
pub mod leases;
pub mod notify;

/// Expands to one `#[tokio::test]` per scenario, each with a fresh harness from `$harness`.
#[macro_export]
macro_rules! conformance_suite {
    ($harness:path; $($module:ident :: $scenario:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let harness = $harness(stringify!($scenario)).await;
                $crate::conformance::$module::$scenario(&harness).await;
            }
        )*
    };
}
