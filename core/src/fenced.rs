//! Fenced writes: a lease checked, and finished, inside the application's own PostgreSQL
//! transaction, through the functions of schema version 10 (`backend/postgres/fenced.rs`;
//! docs/semantics.md, "Fenced writes"). The statements are also given as text and parameters
//! ([`SqlCall`]), for any driver.

use std::time::Instant;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::GenericClient;

use crate::backend::postgres::fenced::{FencedCalls, FENCE_REFUSED, SHARED_DONE};
use crate::error::{Error, ErrorKind, Result};
use crate::lease::Lease;
use crate::metadata::Metadata;
use crate::validate;

/// A statement to run in the application's transaction, with any driver: `text` takes its
/// parameters as `$1`, `$2`, … in the order of `params` (or as the [`Placeholders`] it was made
/// with say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlCall {
    /// The statement, with placeholders cast to their types (`$1::text`, …).
    pub text: String,
    /// The values of `$1`, `$2`, …, in order.
    pub params: Vec<SqlParam>,
}

/// One parameter of a [`SqlCall`], with the PostgreSQL type its placeholder is cast to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqlParam {
    /// `text`.
    Text(String),
    /// `bigint`.
    BigInt(i64),
    /// `text` or NULL (JSON text, cast to jsonb by the statement).
    NullableText(Option<String>),
}

/// How a statement writes its parameters: drivers differ, and the statement is made in the
/// driver's own style rather than rewritten for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placeholders {
    /// `$1`, `$2`, …: PostgreSQL's own (libpq, tokio-postgres, sqlx, pgx, node-postgres,
    /// psycopg 3's raw cursors, asyncpg).
    #[default]
    Numbered,
    /// `%s` for each parameter in order, and every other `%` written `%%`: Python DB-API's
    /// "format" paramstyle (psycopg2), which formats the statement's text.
    Format,
}

impl Placeholders {
    /// The style a binding names: `"$1"` or `"%s"`, as the placeholder itself reads;
    /// `InvalidArgument` naming `field` otherwise.
    pub fn named(field: &str, name: &str) -> Result<Placeholders> {
        match name {
            "$1" => Ok(Placeholders::Numbered),
            "%s" => Ok(Placeholders::Format),
            _ => Err(Error::invalid(
                field,
                format!("\"$1\" (PostgreSQL's $1, $2, …) or \"%s\" (DB-API's format style), not {name:?}"),
            )),
        }
    }

    /// The placeholder of the `n`th parameter (from 1).
    pub(crate) fn nth(self, n: usize) -> String {
        match self {
            Placeholders::Numbered => format!("${n}"),
            Placeholders::Format => "%s".to_string(),
        }
    }

    /// `text` (already quoted SQL) as it stands in a statement of this style.
    pub(crate) fn literal(self, text: &str) -> String {
        match self {
            Placeholders::Numbered => text.to_string(),
            Placeholders::Format => text.replace('%', "%%"),
        }
    }
}

impl SqlParam {
    /// The value in PostgreSQL's text form, as drivers that take every parameter as a string
    /// send it (libpq's `PQexecParams`; the bindings' helpers); `None` for NULL. The statement
    /// casts each placeholder to its type.
    pub fn to_text(&self) -> Option<String> {
        match self {
            SqlParam::Text(v) => Some(v.clone()),
            SqlParam::BigInt(v) => Some(v.to_string()),
            SqlParam::NullableText(v) => v.clone(),
        }
    }

    fn typed(&self) -> (&(dyn ToSql + Sync), Type) {
        match self {
            SqlParam::Text(v) => (v, Type::TEXT),
            SqlParam::BigInt(v) => (v, Type::INT8),
            SqlParam::NullableText(v) => (v, Type::TEXT),
        }
    }
}

impl Lease {
    fn fenced_calls(&self, placeholders: Placeholders) -> Result<FencedCalls> {
        self.session.check_usable()?;
        self.session
            .scope
            .backend
            .fenced_schema()
            .map(|schema| FencedCalls::new(schema, placeholders))
            .map_err(|why| Error::new(ErrorKind::Unsupported, why))
    }

    fn lease_params(&self) -> Vec<SqlParam> {
        vec![
            SqlParam::Text(self.namespace().to_string()),
            SqlParam::Text(self.key().to_string()),
            SqlParam::BigInt(self.fence()),
        ]
    }

    /// The statement that checks this lease in the application's transaction
    /// (`accord.check_fence(namespace, key, fence)`): it succeeds only while this grant is the
    /// key's live grant on the server's clock, and keeps it so until that transaction ends;
    /// otherwise it raises SQLSTATE `AC001`. `Unsupported` on a store outside PostgreSQL.
    pub fn fence_check_sql(&self) -> Result<SqlCall> {
        self.fence_check_sql_with(Placeholders::Numbered)
    }

    /// [`Lease::fence_check_sql`] with the placeholders a driver takes.
    pub fn fence_check_sql_with(&self, placeholders: Placeholders) -> Result<SqlCall> {
        Ok(SqlCall {
            text: self.fenced_calls(placeholders)?.check,
            params: self.lease_params(),
        })
    }

    /// The statement that marks this lease's key done in the application's transaction
    /// (`accord.done(namespace, key, fence, metadata)`), merging `metadata`; it answers the
    /// key's metadata as JSON text. Run it, then commit; the client learns the outcome on its
    /// own (see [`Lease::done_in`]).
    pub fn done_sql(&self, metadata: Option<&Metadata>) -> Result<SqlCall> {
        self.done_sql_with(metadata, Placeholders::Numbered)
    }

    /// [`Lease::done_sql`] with the placeholders a driver takes.
    pub fn done_sql_with(
        &self,
        metadata: Option<&Metadata>,
        placeholders: Placeholders,
    ) -> Result<SqlCall> {
        let text = self.check_done_in(metadata)?;
        let mut params = self.lease_params();
        params.push(SqlParam::NullableText(text));
        Ok(SqlCall {
            text: self.fenced_calls(placeholders)?.done,
            params,
        })
    }

    /// The statement that releases this lease in the application's transaction
    /// (`accord.release(namespace, key, fence)`): the key is free once that transaction
    /// commits. Releasing again what this grant released is harmless.
    pub fn release_sql(&self) -> Result<SqlCall> {
        Ok(SqlCall {
            text: self.fenced_calls(Placeholders::Numbered)?.release,
            params: self.lease_params(),
        })
    }

    /// Checks this lease in `tx` (a `tokio_postgres::Transaction`, or a client inside a
    /// transaction block): after `Ok`, every write `tx` makes commits before any later grant
    /// of the key, even if the lease expires before the commit. `LeaseLost` when the lease is
    /// not the key's live grant (the server's message names key, fence and why), or already
    /// lost here; then roll back.
    ///
    /// Until `tx` ends the key's row is held: the holder's own renewal waits for it (the
    /// keepalive passes over it and tries again shortly, within the lease's deadline), so keep
    /// such transactions well inside the ttl.
    pub async fn fenced<C: GenericClient + Sync>(&self, tx: &C) -> Result<()> {
        let call = self.fenced_call()?;
        run(tx, &call, "check_fence").await?;
        Ok(())
    }

    /// What [`Lease::fenced`] runs, for a driver of the caller's (the bindings' `fenced`
    /// helpers): [`Lease::fence_check_sql`], after this client's own refusal (`LeaseLost` when
    /// the lease is already not held here). A refusal by the server: [`fenced_refusal`].
    pub fn fenced_call(&self) -> Result<SqlCall> {
        self.fenced_call_with(Placeholders::Numbered)
    }

    /// [`Lease::fenced_call`] with the placeholders a driver takes.
    pub fn fenced_call_with(&self, placeholders: Placeholders) -> Result<SqlCall> {
        let call = self.fence_check_sql_with(placeholders)?;
        self.grant.require_held()?;
        Ok(call)
    }

    /// What [`Lease::done_in`] runs, for a driver of the caller's: [`Lease::done_sql`], after
    /// this client's own refusals. Once it ran in the application's transaction (answered or
    /// not), call [`Lease::done_in_sent`]; the answer is the key's metadata as JSON text.
    pub fn done_in_call(&self, metadata: Option<&Metadata>) -> Result<SqlCall> {
        self.done_in_call_with(metadata, Placeholders::Numbered)
    }

    /// [`Lease::done_in_call`] with the placeholders a driver takes.
    pub fn done_in_call_with(
        &self,
        metadata: Option<&Metadata>,
        placeholders: Placeholders,
    ) -> Result<SqlCall> {
        let call = self.done_sql_with(metadata, placeholders)?;
        self.grant.require_held()?;
        Ok(call)
    }

    /// Tells this client that [`Lease::done_in_call`]'s (or [`Lease::release_sql`]'s)
    /// statement ran in the application's transaction: whichever way that transaction ends,
    /// the keepalive looks at once, and while the transaction holds the key's row, again
    /// shortly: the lease settles as `Done` at the commit (not lost), and is renewed as before
    /// after a rollback. Without this call it settles all the same, at its next renewal.
    pub fn done_in_sent(&self) {
        self.session.keepalive.look_now(&self.grant);
    }

    /// Marks this lease's key done in `tx`, merging `metadata`; answers the key's metadata.
    /// The done commits with `tx`'s writes or not at all: after the commit the lease ends as
    /// `Done` (the keepalive finds the key done by this grant), after a rollback it is still
    /// held and renewed. Refusals as [`Lease::done`]'s, and `LeaseLost` as [`Lease::fenced`]'s.
    pub async fn done_in<C: GenericClient + Sync>(
        &self,
        tx: &C,
        metadata: Option<Metadata>,
    ) -> Result<Metadata> {
        let call = self.done_in_call(metadata.as_ref())?;
        let row = run(tx, &call, "done").await?;
        let merged: String = row.try_get(0).map_err(Error::internal)?;
        self.done_in_sent();
        serde_json::from_str(&merged)
            .map_err(|e| Error::internal(format!("stored metadata is not a JSON object: {e}")))
    }

    /// `done`'s own refusals, before anything is sent: the metadata as JSON text.
    fn check_done_in(&self, metadata: Option<&Metadata>) -> Result<Option<String>> {
        if self.grant.shared {
            return Err(Error::invalid(
                "done",
                "a shared lease cannot mark its key done; acquire the key exclusively",
            ));
        }
        validate::unreserved("key", self.key())?;
        metadata
            .map(|m| validate::metadata("metadata", m))
            .transpose()
    }
}

/// Runs `call` on the application's connection; a refusal in accord's words.
async fn run<C: GenericClient + Sync>(
    tx: &C,
    call: &SqlCall,
    what: &str,
) -> Result<tokio_postgres::Row> {
    let params: Vec<(&(dyn ToSql + Sync), Type)> =
        call.params.iter().map(SqlParam::typed).collect();
    let started = Instant::now();
    let answer = tx.query_typed_one(&call.text, &params).await;
    tracing::debug!(target: "accord", what, elapsed_ms = started.elapsed().as_millis() as u64, ok = answer.is_ok(), "fenced call");
    answer.map_err(|e| refusal(what, e))
}

fn refusal(what: &str, e: tokio_postgres::Error) -> Error {
    let Some(db) = e.as_db_error() else {
        let message = format!("{what} in the application's transaction: {e}");
        return Error::new(ErrorKind::Connection, message).with_source(e);
    };
    fenced_refusal(what, db.code().code(), db.message()).with_source(e)
}

/// accord's error for a statement of a fenced call (`what`: "check_fence", "done", "release")
/// that the server refused with SQLSTATE `sqlstate` and `message`, whichever driver ran it:
/// `LeaseLost` for a fence that is not the key's live grant (`AC001`, the server's message
/// naming key, fence and why), `InvalidArgument` for a refused argument, `Database` otherwise.
pub fn fenced_refusal(what: &str, sqlstate: &str, message: &str) -> Error {
    let kind = match sqlstate {
        FENCE_REFUSED => ErrorKind::LeaseLost,
        SHARED_DONE | "22023" => ErrorKind::InvalidArgument,
        _ => ErrorKind::Database,
    };
    let message = match kind {
        ErrorKind::Database => format!("{what}: PostgreSQL error {sqlstate}: {message}"),
        _ => message.to_string(),
    };
    Error::new(kind, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_style_writes_the_same_statement() {
        let numbered = FencedCalls::new("acc%ord", Placeholders::Numbered);
        let format = FencedCalls::new("acc%ord", Placeholders::Format);
        assert_eq!(
            numbered.check,
            "SELECT \"acc%ord\".check_fence($1::text, $2::text, $3::bigint)"
        );
        // A `%` of the text itself is doubled, so that the driver's formatting gives it back.
        assert_eq!(
            format.check,
            "SELECT \"acc%%ord\".check_fence(%s::text, %s::text, %s::bigint)"
        );
        assert_eq!(
            format.done,
            "SELECT \"acc%%ord\".done(%s::text, %s::text, %s::bigint, %s::text::jsonb)::text"
        );
        assert_eq!(
            numbered.release,
            "SELECT \"acc%ord\".release($1::text, $2::text, $3::bigint)"
        );
    }

    #[test]
    fn a_style_is_named_as_its_placeholder_reads() {
        assert_eq!(
            Placeholders::named("p", "$1").unwrap(),
            Placeholders::Numbered
        );
        assert_eq!(
            Placeholders::named("p", "%s").unwrap(),
            Placeholders::Format
        );
        let e = Placeholders::named("placeholders", "?").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("placeholders"), "{e}");
    }
}
