//! The rows this client last read or wrote, with their mod_revisions: what a grant or an
//! ending assumes instead of reading first. The transaction that acts on such a guess compares
//! every record it rests on (the row's mod_revision, no holder, no shared holder, nobody in
//! line; or the holder's create_revision) and reads the key in its failure branch, so a wrong
//! guess costs nothing but that transaction, whose answer is the read a look would have made:
//! an uncontended try_acquire and release are one round trip each, and a batch of them one
//! transaction (as `stream`'s known heads make a lone publish one).

use std::collections::HashMap;
use std::sync::Mutex;

use super::records::{Look, Row};

/// How many keys a client remembers; past that it forgets them all and learns again (a
/// forgotten key costs its next grant or ending one read, as before it was known).
const ROWS_REMEMBERED: usize = 4096;

/// What this client last knew of a key.
#[derive(Clone)]
pub(crate) struct Known {
    /// Its row (`None`: absent), with the mod_revision it had then.
    pub row: Option<Row>,
    /// Whether nothing held it or waited for it then (a grant reads first when something did).
    pub free: bool,
}

/// The keys this client last read or wrote, by row record.
#[derive(Default)]
pub(crate) struct KnownRows(Mutex<HashMap<String, Known>>);

impl KnownRows {
    pub fn get(&self, record: &str) -> Option<Known> {
        let rows = self.0.lock().unwrap_or_else(|e| e.into_inner());
        rows.get(record).cloned()
    }

    pub fn set(&self, record: &str, known: Known) {
        let mut rows = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if rows.len() >= ROWS_REMEMBERED && !rows.contains_key(record) {
            rows.clear();
        }
        rows.insert(record.to_string(), known);
    }

    /// Remembers what a read found (an assumed look teaches nothing).
    pub fn saw(&self, record: &str, look: &Look) {
        if !look.assumed {
            self.set(
                record,
                Known {
                    row: look.row.clone(),
                    free: look.free(),
                },
            );
        }
    }

    /// Remembers the row this client's transaction wrote (`value`) at `revision`.
    pub fn wrote(&self, record: &str, value: &str, revision: i64, free: bool) {
        // A row accord just wrote always reads back; were it not to, the key is forgotten.
        match Row::written(value, revision) {
            Ok(row) => self.set(
                record,
                Known {
                    row: Some(row),
                    free,
                },
            ),
            Err(_) => {
                self.0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(record);
            }
        }
    }
}
