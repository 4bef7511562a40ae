//! What an `etcd://` URL names: the cluster's members and the key prefix accord writes under.

use crate::error::{Error, ErrorKind, Result};

/// The prefix accord's keys live under when the URL names none.
const DEFAULT_PREFIX: &str = "/accord";
/// etcd's client port.
const DEFAULT_PORT: u16 = 2379;

/// A parsed `etcd://host1:2379,host2:2379?prefix=/accord`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `http://host:port`, one per member, as the gRPC client dials them.
    pub endpoints: Vec<String>,
    /// Every key accord writes starts with this (no trailing `/`).
    pub prefix: String,
}

pub(crate) fn parse(url: &str) -> Result<EtcdUrl> {
    if url.starts_with("etcds://") {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "url: etcds:// (etcd with TLS) is not supported yet; use etcd:// on a trusted network",
        ));
    }
    let rest = url.strip_prefix("etcd://").ok_or_else(|| {
        Error::invalid("url", "expected etcd://host:port[,host:port…][?prefix=/p]")
    })?;
    let (hosts, query) = match rest.split_once('?') {
        Some((hosts, query)) => (hosts, Some(query)),
        None => (rest, None),
    };
    // `etcd://h:1,h:2/?prefix=…` and `etcd://h:1,h:2?prefix=…` are the same; no other path.
    let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
    if hosts.contains('/') {
        return Err(Error::invalid(
            "url",
            "an etcd:// URL names no path; give the key prefix as ?prefix=/p",
        ));
    }
    if hosts.contains('@') {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "url: etcd user/password authentication is not supported yet",
        ));
    }
    let endpoints = hosts.split(',').map(endpoint).collect::<Result<Vec<_>>>()?;
    let mut prefix = DEFAULT_PREFIX.to_string();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        match pair.split_once('=') {
            Some(("prefix", value)) => prefix = value.trim_end_matches('/').to_string(),
            _ => {
                return Err(Error::invalid(
                    "url",
                    format!("unknown parameter {pair:?}: an etcd:// URL takes only prefix="),
                ))
            }
        }
    }
    if prefix.is_empty() || !prefix.starts_with('/') {
        return Err(Error::invalid(
            "url",
            "prefix must start with / and name more than the root (say ?prefix=/accord)",
        ));
    }
    Ok(EtcdUrl { endpoints, prefix })
}

fn endpoint(host: &str) -> Result<String> {
    if host.is_empty() {
        return Err(Error::invalid(
            "url",
            "an empty host in the etcd:// member list",
        ));
    }
    // `[::1]:2379`, `host:2379`, or `host` (port 2379).
    let has_port = match host.rfind(':') {
        Some(i) => !host[i..].contains(']'),
        None => false,
    };
    if has_port {
        let (_, port) = host.rsplit_once(':').unwrap_or((host, ""));
        port.parse::<u16>().map_err(|_| {
            Error::invalid(
                "url",
                format!("{host:?}: the port must be a number from 1 to 65535"),
            )
        })?;
        Ok(format!("http://{host}"))
    } else {
        Ok(format!("http://{host}:{DEFAULT_PORT}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_prefix() {
        let u = parse("etcd://a:1,b,[::1]:3?prefix=/p/").unwrap();
        assert_eq!(
            u.endpoints,
            ["http://a:1", "http://b:2379", "http://[::1]:3"]
        );
        assert_eq!(u.prefix, "/p");
        assert_eq!(parse("etcd://a/").unwrap().prefix, "/accord");
    }

    #[test]
    fn refusals_name_the_field() {
        for bad in [
            "etcd://a:x",
            "etcd://a,,b",
            "etcd://a/db",
            "etcd://a?mode=x",
            "etcd://a?prefix=p",
            "etcd://a?prefix=/",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}");
            assert!(e.message().contains("url"), "{bad}: {e}");
        }
        let e = parse("etcds://a").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("not supported yet"));
    }
}
