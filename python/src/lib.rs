//! `accord._accord`: the Python binding of the accord core, re-exported by the `accord`
//! package. A thin layer: every rule (exclusion, fencing, keepalive, waiting, limits) is the
//! core's; this crate converts values, releases the GIL while the core works, and maps error
//! kinds to exception classes.

mod client;
mod completion;
mod convert;
mod election;
mod errors;
mod fleet;
mod lease;
mod membership;
mod pool;
mod runtime;
mod sigterm;
mod stats;
mod stream;
mod subscription;
mod types;
mod watching;

use pyo3::prelude::*;

/// The SQL that creates or upgrades accord's schema, for DBAs who apply it by hand (connect
/// with `migrate=False` afterwards).
#[pyfunction]
#[pyo3(signature = (schema=String::from("accord")), text_signature = "(schema='accord')")]
fn migration_sql(#[pyo3(from_py_with = convert::schema)] schema: String) -> PyResult<String> {
    errors::IntoPyResult::py(accord::migration_sql(&schema))
}

#[pymodule]
fn _accord(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<client::Client>()?;
    m.add_class::<client::AsyncClient>()?;
    m.add_class::<lease::Lease>()?;
    m.add_class::<lease::AsyncLease>()?;
    m.add_class::<lease::LostSignal>()?;
    m.add_function(wrap_pyfunction!(lease::_fenced_refusal, m)?)?;
    m.add_class::<subscription::Subscription>()?;
    m.add_class::<subscription::AsyncSubscription>()?;
    m.add_class::<pool::PoolCounts>()?;
    m.add_class::<pool::Semaphore>()?;
    m.add_class::<pool::AsyncSemaphore>()?;
    m.add_class::<types::Message>()?;
    m.add_class::<types::Reconnected>()?;
    m.add_class::<types::LeaseInfo>()?;
    m.add_class::<types::ListPage>()?;
    m.add_class::<completion::Completer>()?;
    m.add_class::<membership::Member>()?;
    m.add_class::<membership::AsyncMember>()?;
    m.add_class::<membership::MemberInfo>()?;
    m.add_class::<membership::MemberWatch>()?;
    m.add_class::<membership::AsyncMemberWatch>()?;
    m.add_class::<membership::Members>()?;
    m.add_class::<membership::Joined>()?;
    m.add_class::<membership::Left>()?;
    m.add_class::<membership::Updated>()?;
    m.add_class::<fleet::Fleet>()?;
    m.add_class::<fleet::AsyncFleet>()?;
    m.add_class::<fleet::ShardLease>()?;
    m.add_class::<fleet::Assigned>()?;
    m.add_class::<fleet::Revoked>()?;
    m.add_class::<election::Election>()?;
    m.add_class::<election::AsyncElection>()?;
    m.add_class::<election::Leader>()?;
    m.add_class::<election::Leadership>()?;
    m.add_class::<election::AsyncLeadership>()?;
    m.add_class::<election::Observer>()?;
    m.add_class::<election::AsyncObserver>()?;
    m.add_class::<stats::Stats>()?;
    m.add_class::<stats::Histogram>()?;
    m.add_class::<stream::StreamEvent>()?;
    m.add_class::<stream::StreamInfo>()?;
    m.add_class::<stream::StreamSubscription>()?;
    m.add_class::<stream::AsyncStreamSubscription>()?;
    m.add_function(wrap_pyfunction!(migration_sql, m)?)?;
    m.add_function(wrap_pyfunction!(client::close_all, m)?)?;
    m.add_function(wrap_pyfunction!(sigterm::_close_on_sigterm, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_error_for_code, m)?)?;
    m.add("ERROR_CODES", errors::codes(m.py())?)?;
    let at_exit = wrap_pyfunction!(runtime::_at_exit, m)?;
    m.py()
        .import("atexit")?
        .call_method1("register", (at_exit,))?;
    let after_fork = wrap_pyfunction!(runtime::_after_fork_in_child, m)?;
    let kwargs = pyo3::types::PyDict::new(m.py());
    kwargs.set_item("after_in_child", after_fork)?;
    m.py()
        .import("os")?
        .call_method("register_at_fork", (), Some(&kwargs))?;
    m.add("MAX_NAME_BYTES", accord::MAX_NAME_BYTES)?;
    m.add("MAX_CHANNEL_BYTES", accord::MAX_CHANNEL_BYTES)?;
    m.add("MAX_METADATA_BYTES", accord::MAX_METADATA_BYTES)?;
    m.add("MIN_TTL", accord::MIN_TTL.as_secs_f64())?;
    m.add("MAX_TTL", accord::MAX_TTL.as_secs_f64())?;
    m.add("MAX_POOL_SIZE", accord::limits::MAX_POOL_SIZE)?;
    m.add("MAX_LIST_LIMIT", accord::limits::MAX_LIST_LIMIT)?;
    m.add("MAX_OFFER_KEYS", accord::limits::MAX_OFFER_KEYS)?;
    m.add("MAX_CLAIM_LIMIT", accord::limits::MAX_CLAIM_LIMIT)?;
    m.add("MAX_PERMITS", accord::limits::MAX_PERMITS)?;
    m.add("MAX_SHARDS", accord::MAX_SHARDS)?;
    m.add("MAX_HANDOFFS_PER_PERIOD", accord::MAX_HANDOFFS_PER_PERIOD)?;
    m.add("MIN_PERIOD", accord::MIN_PERIOD.as_secs_f64())?;
    m.add("MAX_EVENT_BYTES", accord::limits::MAX_EVENT_BYTES)?;
    m.add("MAX_PUBLISH_EVENTS", accord::limits::MAX_PUBLISH_EVENTS)?;
    m.add("MAX_PAGE_SIZE", accord::limits::MAX_PAGE_SIZE)?;
    Ok(())
}
