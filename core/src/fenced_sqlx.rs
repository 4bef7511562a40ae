//! Fenced writes on sqlx's PostgreSQL connections (feature `sqlx`): the statements of
//! `fenced.rs`, bound by their [`SqlParam`] kinds, and the server's refusal in accord's words
//! ([`fenced_refusal`]).

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::error::{Error, ErrorKind, Result};
use crate::fenced::{fenced_refusal, SqlCall, SqlParam};
use crate::lease::Lease;
use crate::metadata::Metadata;

impl Lease {
    /// [`Lease::fenced`] on sqlx: checks this lease in the transaction `conn` is in (pass
    /// `&mut *tx` for a `sqlx::Transaction<'_, Postgres>`). After `Ok`, every write of that
    /// transaction commits before any later grant of the key; `LeaseLost` otherwise (roll back).
    pub async fn fenced_sqlx(&self, conn: &mut PgConnection) -> Result<()> {
        let call = self.fenced_call()?;
        run(conn, &call, "check_fence").await?;
        Ok(())
    }

    /// [`Lease::done_in`] on sqlx: marks this lease's key done in the transaction `conn` is
    /// in, merging `metadata`; answers the key's metadata. After the commit the lease ends as
    /// `Done`; after a rollback it is still held and renewed.
    pub async fn done_in_sqlx(
        &self,
        conn: &mut PgConnection,
        metadata: Option<Metadata>,
    ) -> Result<Metadata> {
        let call = self.done_in_call(metadata.as_ref())?;
        let answer = run(conn, &call, "done").await;
        self.done_in_sent();
        let merged: String = answer?.try_get(0).map_err(Error::internal)?;
        serde_json::from_str(&merged)
            .map_err(|e| Error::internal(format!("stored metadata is not a JSON object: {e}")))
    }
}

/// Runs `call` on the application's connection, each parameter bound as its kind says; a
/// refusal in accord's words.
async fn run(conn: &mut PgConnection, call: &SqlCall, what: &str) -> Result<PgRow> {
    let mut query = sqlx::query(&call.text);
    for param in &call.params {
        query = match param {
            SqlParam::Text(v) => query.bind(v.as_str()),
            SqlParam::BigInt(v) => query.bind(*v),
            SqlParam::NullableText(v) => query.bind(v.as_deref()),
        };
    }
    query
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| refusal(what, e))
}

fn refusal(what: &str, e: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &e {
        if let Some(code) = db.code() {
            return fenced_refusal(what, &code, db.message()).with_source(e);
        }
    }
    let message = format!("{what} in the application's transaction: {e}");
    Error::new(ErrorKind::Connection, message).with_source(e)
}
