//! A page of `list` results as an array of C structs, with every string owned by the page.

use std::ffi::{c_char, CString};

use accord_core::ListPage;

use crate::error::run_or;
use crate::ffi::{c_string, json};
use crate::options::accord_key_state;

/// One key as the coordinator knows it. Strings are owned by the page.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct accord_lease_info {
    /// The key.
    pub key: *const c_char,
    /// Held, free or done (by the coordinator's clock at the time of the query).
    pub state: accord_key_state,
    /// The holder while held, who finished it when done; NULL when free.
    pub owner: *const c_char,
    /// The fence of the latest grant.
    pub fence: i64,
    /// Expiry of the current lease in ms since the Unix epoch; 0 unless held.
    pub expires_at_ms: i64,
    /// The key's metadata, a JSON object.
    pub metadata_json: *const c_char,
    /// When the key last changed, in ms since the Unix epoch.
    pub updated_at_ms: i64,
    /// One of the key's shared holders: a key held shared is listed once per holder, each with
    /// its own owner, fence and expiry.
    pub shared: bool,
}

/// A page of keys, in key order. Free with accord_list_page_free().
pub struct accord_list_page {
    items: Vec<accord_lease_info>,
    /// Owns what `items` points to (a CString's bytes never move).
    _strings: Vec<CString>,
    next_cursor: Option<CString>,
}

impl accord_list_page {
    pub(crate) fn create(page: ListPage) -> *mut accord_list_page {
        let mut strings = Vec::new();
        let mut keep = |s: CString| {
            let ptr = s.as_ptr();
            strings.push(s);
            ptr
        };
        let items = page
            .items
            .iter()
            .map(|i| accord_lease_info {
                key: keep(c_string(&i.key)),
                state: i.state.into(),
                owner: i
                    .owner
                    .as_deref()
                    .map_or(std::ptr::null(), |o| keep(c_string(o))),
                fence: i.fence,
                expires_at_ms: i.expires_at.map_or(0, |t| t.timestamp_millis()),
                metadata_json: keep(json(&i.metadata)),
                updated_at_ms: i.updated_at.timestamp_millis(),
                shared: i.shared,
            })
            .collect();
        Box::into_raw(Box::new(accord_list_page {
            items,
            _strings: strings,
            next_cursor: page.next_cursor.as_deref().map(c_string),
        }))
    }
}

/// The page's keys: returns the first of `*out_count` entries (NULL and 0 for a NULL page).
#[no_mangle]
pub extern "C" fn accord_list_page_items(
    page: *const accord_list_page,
    out_count: *mut usize,
) -> *const accord_lease_info {
    run_or(std::ptr::null(), || {
        // SAFETY: NULL or a live page / writable count, by contract.
        let (page, count) = unsafe { (page.as_ref(), out_count.as_mut()) };
        let items = page.map_or(&[][..], |p| p.items.as_slice());
        if let Some(count) = count {
            *count = items.len();
        }
        if items.is_empty() {
            std::ptr::null()
        } else {
            items.as_ptr()
        }
    })
}

/// The cursor for the next page (pass to accord_list_query_set_cursor()), or NULL on the last
/// page. Owned by the page.
#[no_mangle]
pub extern "C" fn accord_list_page_next_cursor(page: *const accord_list_page) -> *const c_char {
    run_or(std::ptr::null(), || {
        // SAFETY: NULL or a live page, by contract.
        unsafe { page.as_ref() }
            .and_then(|p| p.next_cursor.as_ref())
            .map_or(std::ptr::null(), |c| c.as_ptr())
    })
}

/// Frees a page and every string it holds. NULL is accepted.
#[no_mangle]
pub extern "C" fn accord_list_page_free(page: *mut accord_list_page) {
    crate::ffi::free_box(page);
}
