//! Which backend a URL names. Above the backends (it knows them all); the session calls it.

use std::sync::Arc;

use super::{DynBackend, EventSink};
use crate::error::{Error, Result};
use crate::options::ClientOptions;
use crate::stats::Recorder;

/// Opens the backend a URL names: `postgres://…`, `postgresql://…` or a libpq `key=value`
/// string for PostgreSQL; `sqlite:///path` or `memory:` (also `sqlite::memory:`) for the
/// embedded store; `etcd://host:port,…?prefix=/p` for etcd (built with the cargo feature `etcd`).
pub(crate) async fn open(
    url: &str,
    options: &ClientOptions,
    sink: Arc<dyn EventSink>,
    stats: Arc<Recorder>,
) -> Result<DynBackend> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") || is_libpq_keywords(url)
    {
        Ok(Arc::new(
            super::postgres::PgBackend::connect(url, options, sink, stats).await?,
        ))
    } else if url.starts_with("sqlite:") || url.starts_with("memory:") {
        if options.listen_url.is_some() {
            // One process's store needs no listening connection: refused, not ignored.
            return Err(Error::invalid(
                "listen_url",
                "is for PostgreSQL; the embedded store (sqlite:, memory:) has no listening connection",
            ));
        }
        Ok(Arc::new(
            super::sqlite::SqliteBackend::connect(url, sink, stats).await?,
        ))
    } else if url.starts_with("etcd://") || url.starts_with("etcds://") {
        open_etcd(url, options, sink, stats).await
    } else {
        Err(Error::invalid(
            "url",
            "expected postgres://…, postgresql://…, a libpq key=value string, sqlite:///path or memory:",
        ))
    }
}

#[cfg(feature = "etcd")]
async fn open_etcd(
    url: &str,
    options: &ClientOptions,
    sink: Arc<dyn EventSink>,
    stats: Arc<Recorder>,
) -> Result<DynBackend> {
    Ok(Arc::new(
        super::etcd::EtcdBackend::connect(url, options, sink, stats).await?,
    ))
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(
    _: &str,
    _: &ClientOptions,
    _: Arc<dyn EventSink>,
    _: Arc<Recorder>,
) -> Result<DynBackend> {
    Err(Error::new(
        crate::error::ErrorKind::Unsupported,
        "url: etcd:// needs accord built with the cargo feature `etcd`",
    ))
}

/// libpq's keyword/value form: `host=… dbname=…`.
fn is_libpq_keywords(url: &str) -> bool {
    !url.contains("://") && url.contains('=')
}
