//! The type of lease metadata, at the bottom of the layers so that every module names it
//! from here.

/// Lease metadata: a JSON object of at most 64 KiB.
pub type Metadata = serde_json::Map<String, serde_json::Value>;
