//! Plain records: notifications and the rows `list` returns.

use accord::{ListQuery, StateFilter};
use chrono::{DateTime, Utc};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::convert;
use crate::errors::IntoPyResult;

/// A notification: what was sent on `channel`.
#[pyclass(module = "accord", frozen, eq, hash, from_py_object)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Message {
    #[pyo3(get)]
    channel: String,
    #[pyo3(get)]
    payload: String,
}

#[pymethods]
impl Message {
    #[new]
    fn new(channel: String, payload: String) -> Self {
        Message { channel, payload }
    }

    #[classattr]
    fn __match_args__() -> (&'static str, &'static str) {
        ("channel", "payload")
    }

    fn __repr__(&self) -> String {
        format!(
            "Message(channel={}, payload={})",
            py_str_repr(&self.channel),
            py_str_repr(&self.payload)
        )
    }
}

/// The listening connection was re-established: notifications sent while it was down were
/// missed. Re-read whatever state the notifications were about.
#[pyclass(module = "accord", frozen, eq, hash, from_py_object)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Reconnected {}

#[pymethods]
impl Reconnected {
    #[new]
    fn new() -> Self {
        Reconnected {}
    }

    fn __repr__(&self) -> &'static str {
        "Reconnected()"
    }
}

/// What a subscription yields, on its way to Python.
#[derive(IntoPyObject)]
pub enum Event {
    Message(Message),
    Reconnected(Reconnected),
}

impl From<accord::Event> for Event {
    fn from(e: accord::Event) -> Self {
        match e {
            accord::Event::Message(m) => Event::Message(Message {
                channel: m.channel,
                payload: m.payload,
            }),
            accord::Event::Reconnected => Event::Reconnected(Reconnected {}),
        }
    }
}

/// One key as the coordinator knows it.
#[pyclass(module = "accord", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct LeaseInfo(accord::LeaseInfo);

#[pymethods]
impl LeaseInfo {
    #[getter]
    fn key(&self) -> &str {
        &self.0.key
    }
    /// "held", "free" or "done", judged by the coordinator's clock when listed.
    #[getter]
    fn state(&self) -> &'static str {
        self.0.state.as_str()
    }
    #[getter]
    fn owner(&self) -> Option<&str> {
        self.0.owner.as_deref()
    }
    #[getter]
    fn fence(&self) -> i64 {
        self.0.fence
    }
    #[getter]
    fn expires_at(&self) -> Option<DateTime<Utc>> {
        self.0.expires_at
    }
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        convert::metadata_to_py(py, &self.0.metadata)
    }
    #[getter]
    fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
    /// True for one of the key's shared holders: a key held shared is listed once per holder,
    /// each with its own owner, fence and expiry.
    #[getter]
    fn shared(&self) -> bool {
        self.0.shared
    }

    fn __repr__(&self) -> String {
        format!(
            "LeaseInfo(key={}, state='{}', owner={}, fence={}{})",
            py_str_repr(&self.0.key),
            self.0.state.as_str(),
            self.0
                .owner
                .as_deref()
                .map(py_str_repr)
                .unwrap_or_else(|| "None".into()),
            self.0.fence,
            if self.0.shared { ", shared=True" } else { "" }
        )
    }
}

/// One page of `list`, in key order. Iterable; `next_cursor` continues it.
#[pyclass(module = "accord", frozen)]
pub struct ListPage {
    items: Vec<LeaseInfo>,
    next_cursor: Option<String>,
}

impl From<accord::ListPage> for ListPage {
    fn from(page: accord::ListPage) -> Self {
        ListPage {
            items: page.items.into_iter().map(LeaseInfo).collect(),
            next_cursor: page.next_cursor,
        }
    }
}

#[pymethods]
impl ListPage {
    #[getter]
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.items.iter().cloned())
    }
    /// Pass to `list(cursor=…)` for the next page; None on the last page.
    #[getter]
    fn next_cursor(&self) -> Option<&str> {
        self.next_cursor.as_deref()
    }
    fn __len__(&self) -> usize {
        self.items.len()
    }
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.items(py)?.try_iter()?.into_any())
    }
    fn __getitem__<'py>(&self, py: Python<'py>, index: isize) -> PyResult<Bound<'py, PyAny>> {
        self.items(py)?.as_any().get_item(index)
    }
    /// Every item, as a list's repr shows them (a record's repr is its fields).
    fn __repr__(&self) -> String {
        let items: Vec<String> = self.items.iter().map(LeaseInfo::__repr__).collect();
        format!(
            "ListPage(items=[{}], next_cursor={})",
            items.join(", "),
            self.next_cursor
                .as_deref()
                .map(py_str_repr)
                .unwrap_or_else(|| "None".into())
        )
    }
}

/// The arguments of `list`, checked.
pub fn list_query(
    prefix: Option<String>,
    state: Option<&str>,
    metadata: Option<&Bound<'_, PyAny>>,
    limit: i64,
    cursor: Option<String>,
) -> PyResult<ListQuery> {
    let mut query = ListQuery::new();
    if let Some(prefix) = prefix {
        query = query.prefix(prefix);
    }
    if let Some(state) = state {
        query = query.states(StateFilter::parse("state", state).py()?);
    }
    if let Some(m) = convert::metadata("metadata", metadata)? {
        query = query.metadata(m);
    }
    query = query.limit(accord::limits::list_limit(limit).py()?);
    if let Some(cursor) = cursor {
        query = query.cursor(cursor);
    }
    Ok(query)
}

/// Python's repr of a str, near enough for reprs: single quotes, escapes.
pub fn py_str_repr(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `*channels`: str arguments.
pub fn channels(args: &Bound<'_, PyTuple>) -> PyResult<Vec<String>> {
    args.iter()
        .map(|c| convert::text_arg("channels", &c))
        .collect()
}
