//! Option objects (created, set field by field, passed to calls, freed) and cancel tokens. Values
//! are checked by the call that uses them, with the same rules in every language.

use std::ffi::c_char;
use std::time::Duration;

use accord_core::{AcquireOptions, CancellationToken, ClientOptions, KeyState, ListQuery};

use crate::error::{accord_error, accord_status, run};
use crate::ffi::{free_box, metadata, opt_text, text};

/// Options of accord_client_connect(). Defaults: namespace "default", owner host-pid-random,
/// ttl 30 s, schema "accord", pool size 2, connect and statement timeouts 10 s, migrations on.
pub struct accord_client_options(pub(crate) ClientOptions);

/// Options of an acquire. Defaults: the client's ttl, no metadata, no timeout, no cancel token,
/// exclusive.
#[derive(Default)]
pub struct accord_acquire_options {
    ttl: Option<Duration>,
    timeout: Option<Duration>,
    metadata: Option<accord_core::Metadata>,
    cancel: Option<CancellationToken>,
    shared: bool,
}

impl accord_acquire_options {
    pub(crate) fn to_core(&self) -> AcquireOptions {
        let mut o = AcquireOptions::new();
        if let Some(ttl) = self.ttl {
            o = o.ttl(ttl);
        }
        if let Some(timeout) = self.timeout {
            o = o.timeout(timeout);
        }
        if let Some(m) = &self.metadata {
            o = o.metadata(m.clone());
        }
        if let Some(c) = &self.cancel {
            o = o.cancel(c.clone());
        }
        o.shared(self.shared)
    }
}

/// A list query. Defaults: every key, first page of 100.
pub struct accord_list_query {
    prefix: Option<String>,
    state: Option<KeyState>,
    metadata: Option<accord_core::Metadata>,
    limit: usize,
    cursor: Option<String>,
}

impl Default for accord_list_query {
    fn default() -> Self {
        accord_list_query {
            prefix: None,
            state: None,
            metadata: None,
            limit: 100,
            cursor: None,
        }
    }
}

impl accord_list_query {
    pub(crate) fn to_core(&self) -> ListQuery {
        let mut q = ListQuery::new().limit(self.limit);
        if let Some(p) = &self.prefix {
            q = q.prefix(p.clone());
        }
        if let Some(s) = self.state {
            q = q.state(s);
        }
        if let Some(m) = &self.metadata {
            q = q.metadata(m.clone());
        }
        if let Some(c) = &self.cursor {
            q = q.cursor(c.clone());
        }
        q
    }
}

/// A token that cancels the waiting acquires it was given to (through their options). Safe to
/// cancel from any thread while the acquire blocks in another.
pub struct accord_cancel_token(pub(crate) CancellationToken);

/// The state of a key.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accord_key_state {
    /// As a list filter: every state.
    ACCORD_KEY_ANY = 0,
    /// Granted to a live lease.
    ACCORD_KEY_HELD = 1,
    /// Released, expired, or not granted since a reset.
    ACCORD_KEY_FREE = 2,
    /// Done: not granted again until reset.
    ACCORD_KEY_DONE = 3,
}

impl From<KeyState> for accord_key_state {
    fn from(state: KeyState) -> Self {
        match state {
            KeyState::Held => accord_key_state::ACCORD_KEY_HELD,
            KeyState::Free => accord_key_state::ACCORD_KEY_FREE,
            KeyState::Done => accord_key_state::ACCORD_KEY_DONE,
        }
    }
}

/// A duration in milliseconds which has no "without limit": negative is refused, naming `field`
/// and the value given (the core's rule).
pub(crate) fn duration_ms(field: &str, ms: i64) -> Result<Duration, accord_core::Error> {
    accord_core::limits::duration_millis(field, ms)
}

/// Applies `change` to the options behind `options`, checking `options` is not NULL.
fn set<T>(
    options: *mut T,
    err: *mut *mut accord_error,
    change: impl FnOnce(&mut T) -> Result<(), accord_core::Error>,
) -> accord_status {
    run(err, || {
        // SAFETY: a non-NULL options pointer was created by accord and not freed, by contract.
        let options = unsafe { options.as_mut() }
            .ok_or_else(|| crate::error::invalid("options", "must not be NULL"))?;
        change(options)
    })
}

/// New client options with every default. Free with accord_client_options_free().
#[no_mangle]
pub extern "C" fn accord_client_options_new() -> *mut accord_client_options {
    Box::into_raw(Box::new(accord_client_options(ClientOptions::new())))
}

/// Frees client options. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_client_options_free(object: *mut accord_client_options) {
    free_box(object)
}

/// Keys live in a namespace; clients of different namespaces never contend.
#[no_mangle]
pub extern "C" fn accord_client_options_set_namespace(
    options: *mut accord_client_options,
    namespace: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 = o.0.clone().namespace(text("namespace", namespace)?);
        Ok(())
    })
}

/// The owner recorded on every lease of the client.
#[no_mangle]
pub extern "C" fn accord_client_options_set_owner(
    options: *mut accord_client_options,
    owner: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 = o.0.clone().owner(text("owner", owner)?);
        Ok(())
    })
}

/// The default lease ttl in milliseconds (100 ..= 86400000; refused here otherwise, with
/// ACCORD_INVALID_ARGUMENT naming ttl and the value given).
#[no_mangle]
pub extern "C" fn accord_client_options_set_ttl_ms(
    options: *mut accord_client_options,
    ttl_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 =
            o.0.clone()
                .ttl(accord_core::limits::ttl_millis("ttl", ttl_ms)?);
        Ok(())
    })
}

/// The database schema holding accord's tables.
#[no_mangle]
pub extern "C" fn accord_client_options_set_schema(
    options: *mut accord_client_options,
    schema: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 = o.0.clone().schema(text("schema", schema)?);
        Ok(())
    })
}

/// The number of pipelined command connections (1 ..= 64).
#[no_mangle]
pub extern "C" fn accord_client_options_set_pool_size(
    options: *mut accord_client_options,
    pool_size: u32,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 = o.0.clone().pool_size(pool_size as usize);
        Ok(())
    })
}

/// How long to wait for a connection, in milliseconds (default 10000; negative is refused).
#[no_mangle]
pub extern "C" fn accord_client_options_set_connect_timeout_ms(
    options: *mut accord_client_options,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 =
            o.0.clone()
                .connect_timeout(duration_ms("connect_timeout", timeout_ms)?);
        Ok(())
    })
}

/// How long one statement may take, in milliseconds, before its connection is considered
/// broken (default 10000; negative is refused). A call whose statement gets no answer in time
/// fails with ACCORD_CONNECTION (a statement that is safe to repeat is first tried once more on
/// a fresh connection). PostgreSQL only: the embedded store ignores it.
#[no_mangle]
pub extern "C" fn accord_client_options_set_statement_timeout_ms(
    options: *mut accord_client_options,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 =
            o.0.clone()
                .statement_timeout(duration_ms("statement_timeout", timeout_ms)?);
        Ok(())
    })
}

/// Whether connect applies pending schema migrations (default true).
#[no_mangle]
pub extern "C" fn accord_client_options_set_migrate(
    options: *mut accord_client_options,
    migrate: bool,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 = o.0.clone().migrate(migrate);
        Ok(())
    })
}

/// The application_name of the client's connections.
#[no_mangle]
pub extern "C" fn accord_client_options_set_application_name(
    options: *mut accord_client_options,
    name: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 =
            o.0.clone()
                .application_name(text("application_name", name)?);
        Ok(())
    })
}

/// Where the listening connection goes (PostgreSQL only; default: the client's URL): a direct
/// or session-pooled URL of the same database, when commands go through a PgBouncer in
/// transaction mode, where LISTEN cannot receive. Without it there, accord_client_listen()
/// fails with ACCORD_CONNECTION naming listen_url. Refused at connect (ACCORD_INVALID_ARGUMENT)
/// on the embedded store, or when it does not parse.
#[no_mangle]
pub extern "C" fn accord_client_options_set_listen_url(
    options: *mut accord_client_options,
    url: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 = o.0.clone().listen_url(text("listen_url", url)?);
        Ok(())
    })
}

/// Whether each command connection prepares accord's statements once (default true). false
/// sends each statement with its text instead (still one round trip, planned at every call):
/// needed behind a PgBouncer in transaction mode before 1.21 (or with max_prepared_statements
/// = 0), where a statement prepared on one server connection is missing on the next, and
/// another process's statement of the same name may be found there.
#[no_mangle]
pub extern "C" fn accord_client_options_set_prepare_statements(
    options: *mut accord_client_options,
    prepare: bool,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.0 = o.0.clone().prepare_statements(prepare);
        Ok(())
    })
}

/// New acquire options with the client's defaults. Free with accord_acquire_options_free().
#[no_mangle]
pub extern "C" fn accord_acquire_options_new() -> *mut accord_acquire_options {
    Box::into_raw(Box::default())
}

/// Frees acquire options. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_acquire_options_free(object: *mut accord_acquire_options) {
    free_box(object)
}

/// The lease ttl in milliseconds (100 ..= 86400000; refused here otherwise, with
/// ACCORD_INVALID_ARGUMENT naming ttl and the value given).
#[no_mangle]
pub extern "C" fn accord_acquire_options_set_ttl_ms(
    options: *mut accord_acquire_options,
    ttl_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.ttl = Some(accord_core::limits::ttl_millis("ttl", ttl_ms)?);
        Ok(())
    })
}

/// How long accord_client_acquire() waits, in milliseconds; negative waits without limit.
#[no_mangle]
pub extern "C" fn accord_acquire_options_set_timeout_ms(
    options: *mut accord_acquire_options,
    timeout_ms: i64,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.timeout = crate::runtime::timeout(timeout_ms);
        Ok(())
    })
}

/// Metadata merged into the key's metadata on grant: a JSON object, at most 64 KiB. NULL
/// clears it.
#[no_mangle]
pub extern "C" fn accord_acquire_options_set_metadata_json(
    options: *mut accord_acquire_options,
    metadata_json: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.metadata = metadata("metadata_json", metadata_json)?;
        Ok(())
    })
}

/// Lets `token` cancel the acquire (the options keep their own reference to it); NULL clears.
#[no_mangle]
pub extern "C" fn accord_acquire_options_set_cancel_token(
    options: *mut accord_acquire_options,
    token: *const accord_cancel_token,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        // SAFETY: NULL or a live token, by contract.
        o.cancel = unsafe { token.as_ref() }.map(|t| t.0.clone());
        Ok(())
    })
}

/// A shared grant (true): any number of shared holders of a key at once, or one exclusive
/// holder (false, the default). Once an exclusive acquire waits, new shared acquires wait behind
/// it. A shared lease renews, but cannot change the key's metadata or mark it done
/// (ACCORD_INVALID_ARGUMENT).
#[no_mangle]
pub extern "C" fn accord_acquire_options_set_shared(
    options: *mut accord_acquire_options,
    shared: bool,
    err: *mut *mut accord_error,
) -> accord_status {
    set(options, err, |o| {
        o.shared = shared;
        Ok(())
    })
}

/// A new, uncancelled token. Free with accord_cancel_token_free().
#[no_mangle]
pub extern "C" fn accord_cancel_token_new() -> *mut accord_cancel_token {
    Box::into_raw(Box::new(accord_cancel_token(CancellationToken::new())))
}

/// Cancels every acquire waiting with this token; they return ACCORD_CANCELLED once nothing
/// they may have been granted is held. Any thread; NULL is ignored.
#[no_mangle]
pub extern "C" fn accord_cancel_token_cancel(token: *const accord_cancel_token) {
    // SAFETY: NULL or a live token, by contract.
    if let Some(token) = unsafe { token.as_ref() } {
        token.0.cancel();
    }
}

/// Frees a token (acquires that were given it keep working). NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_cancel_token_free(object: *mut accord_cancel_token) {
    free_box(object)
}

/// A new list query: every key, first page of 100. Free with accord_list_query_free().
#[no_mangle]
pub extern "C" fn accord_list_query_new() -> *mut accord_list_query {
    Box::into_raw(Box::default())
}

/// Frees a list query. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_list_query_free(object: *mut accord_list_query) {
    free_box(object)
}

/// Only keys starting with `prefix` (literally: `%` and `_` are ordinary); NULL clears.
#[no_mangle]
pub extern "C" fn accord_list_query_set_prefix(
    query: *mut accord_list_query,
    prefix: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(query, err, |q| {
        q.prefix = opt_text("prefix", prefix)?.map(str::to_string);
        Ok(())
    })
}

/// Only keys in `state`, an accord_key_state (ACCORD_KEY_ANY for every state).
#[no_mangle]
pub extern "C" fn accord_list_query_set_state(
    query: *mut accord_list_query,
    state: i32,
    err: *mut *mut accord_error,
) -> accord_status {
    set(query, err, |q| {
        q.state = match state {
            0 => None,
            1 => Some(KeyState::Held),
            2 => Some(KeyState::Free),
            3 => Some(KeyState::Done),
            other => {
                return Err(crate::error::invalid(
                    "state",
                    &format!("{other} is not an accord_key_state"),
                ))
            }
        };
        Ok(())
    })
}

/// Only keys whose metadata contains this JSON object; NULL clears.
#[no_mangle]
pub extern "C" fn accord_list_query_set_metadata_json(
    query: *mut accord_list_query,
    metadata_json: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(query, err, |q| {
        q.metadata = metadata("metadata_json", metadata_json)?;
        Ok(())
    })
}

/// Page size (1 ..= 1000, default 100).
#[no_mangle]
pub extern "C" fn accord_list_query_set_limit(
    query: *mut accord_list_query,
    limit: u32,
    err: *mut *mut accord_error,
) -> accord_status {
    set(query, err, |q| {
        q.limit = limit as usize;
        Ok(())
    })
}

/// Continue after the page that returned this cursor; NULL starts at the first key.
#[no_mangle]
pub extern "C" fn accord_list_query_set_cursor(
    query: *mut accord_list_query,
    cursor: *const c_char,
    err: *mut *mut accord_error,
) -> accord_status {
    set(query, err, |q| {
        q.cursor = opt_text("cursor", cursor)?.map(str::to_string);
        Ok(())
    })
}
