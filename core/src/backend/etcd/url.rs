//! What an `etcd://` or `etcds://` URL names: the cluster's members, the key prefix accord
//! writes under, and how the client proves who it is (TLS files, user and password).
//!
//! The parameters are etcdctl's flags, so that a URL reads like the command line an etcd user
//! already has: `--cacert`, `--cert`, `--key`, `--user name[:password]`, `--password`; plus
//! `server_name` (the name the members' certificates are checked against when the URL's
//! hosts are addresses the certificates do not list).

use std::fmt;

use crate::backend::postgres::percent_decode;
use crate::error::{Error, ErrorKind, Result};

/// The prefix accord's keys live under when the URL names none.
const DEFAULT_PREFIX: &str = "/accord";
/// etcd's client port.
const DEFAULT_PORT: u16 = 2379;
const FORMS: &str = "expected etcd://[user:password@]host:port[,host:port…][?prefix=/p] \
                     or etcds://… with cacert=, cert=, key=, server_name=";

/// A parsed `etcd://host1:2379,host2:2379?prefix=/accord` (or `etcds://`).
#[derive(PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `http://host:port` (`https://` for etcds://), one per member, as the gRPC client
    /// dials them.
    pub endpoints: Vec<String>,
    /// Every key accord writes starts with this (no trailing `/`).
    pub prefix: String,
    /// `Some` for etcds://.
    pub tls: Option<TlsFiles>,
    /// etcd's user and password (auth enabled on the cluster).
    pub user: Option<(String, String)>,
}

/// The TLS settings of an etcds:// URL, as paths (read at connect time).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    /// PEM CA bundle the members' certificates must chain to (`cacert=`); the system's roots
    /// without it.
    pub cacert: Option<String>,
    /// Client certificate and its key, PEM (`cert=`, `key=`): mutual TLS.
    pub identity: Option<(String, String)>,
    /// The name the members' certificates must carry (`server_name=`); each host's own name
    /// without it.
    pub server_name: Option<String>,
}

/// Never shows the password (a URL's Debug may reach a log).
impl fmt::Debug for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdUrl")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("tls", &self.tls)
            .field("user", &self.user.as_ref().map(|(name, _)| (name, "…")))
            .finish()
    }
}

pub(crate) fn parse(url: &str) -> Result<EtcdUrl> {
    let (rest, tls) = if let Some(rest) = url.strip_prefix("etcds://") {
        (rest, true)
    } else if let Some(rest) = url.strip_prefix("etcd://") {
        (rest, false)
    } else {
        return Err(Error::invalid("url", FORMS));
    };
    let (authority, query) = match rest.split_once('?') {
        Some((authority, query)) => (authority, Some(query)),
        None => (rest, None),
    };
    // `user:password@hosts`: the last `@` ends the credentials (a password may hold one).
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    // `etcd://h:1,h:2/?prefix=…` and `etcd://h:1,h:2?prefix=…` are the same; no other path.
    let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
    if hosts.contains('/') {
        return Err(Error::invalid(
            "url",
            "an etcd:// URL names no path; give the key prefix as ?prefix=/p",
        ));
    }
    let scheme = if tls { "https" } else { "http" };
    let endpoints = hosts
        .split(',')
        .map(|host| endpoint(scheme, host))
        .collect::<Result<Vec<_>>>()?;

    let mut prefix = DEFAULT_PREFIX.to_string();
    let mut files = TlsFiles::default();
    let (mut cert, mut key) = (None, None);
    let (mut name, mut password) = (None, None);
    if let Some(userinfo) = userinfo {
        let (n, p) = split_user(userinfo);
        name = Some(n);
        password = p;
    }
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        // Only the parameter's name is ever quoted: a value may be a password.
        let (param, raw) = pair.split_once('=').ok_or_else(|| {
            Error::invalid(
                "url",
                format!(
                    "parameter {:?} has no value (name=value)",
                    percent_decode(pair)
                ),
            )
        })?;
        let value = percent_decode(raw);
        let once = |slot: &mut Option<String>, value: String| {
            if slot.replace(value).is_some() {
                return Err(Error::invalid(
                    "url",
                    format!("{param}= is given twice (user and password may come before the @ or as user=, password=, not both)"),
                ));
            }
            Ok(())
        };
        match param {
            "prefix" => prefix = value.trim_end_matches('/').to_string(),
            "cacert" | "cert" | "key" | "server_name" if !tls => {
                return Err(Error::invalid(
                    "url",
                    format!("{param}= is a TLS setting: use etcds:// to connect with TLS"),
                ))
            }
            "cacert" => once(&mut files.cacert, value)?,
            "cert" => once(&mut cert, value)?,
            "key" => once(&mut key, value)?,
            "server_name" => once(&mut files.server_name, value)?,
            // etcdctl's --user takes name[:password].
            "user" => {
                let (n, p) = split_user(raw);
                once(&mut name, n)?;
                if let Some(p) = p {
                    once(&mut password, p)?;
                }
            }
            "password" => once(&mut password, value)?,
            _ => {
                return Err(Error::invalid(
                    "url",
                    format!(
                        "unknown parameter {:?}: an etcd URL takes prefix=, user=, password=, \
                         and with etcds:// cacert=, cert=, key=, server_name=",
                        percent_decode(param)
                    ),
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
    files.identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(Error::invalid(
                "url",
                "cert= needs key= (the client certificate's private key)",
            ))
        }
        (None, Some(_)) => {
            return Err(Error::invalid(
                "url",
                "key= needs cert= (the client certificate it is the key of)",
            ))
        }
    };
    for (param, value) in [
        ("cacert", &files.cacert),
        ("server_name", &files.server_name),
    ] {
        if value.as_deref() == Some("") {
            return Err(Error::invalid("url", format!("{param}= is empty")));
        }
    }
    let user = match (name, password) {
        (None, None) => None,
        (Some(name), _) if name.is_empty() => {
            return Err(Error::invalid("url", "the etcd user name is empty"))
        }
        (Some(name), Some(password)) => Some((name, password)),
        (Some(_), None) => {
            return Err(Error::invalid(
                "url",
                "the etcd user has no password: give it as user:password@ or password=",
            ))
        }
        (None, Some(_)) => {
            return Err(Error::invalid(
                "url",
                "password= needs a user: give it as user:password@ or user=",
            ))
        }
    };
    Ok(EtcdUrl {
        endpoints,
        prefix,
        tls: tls.then_some(files),
        user,
    })
}

/// `name[:password]`, each percent-decoded (the first `:` ends the name, as in a URL).
fn split_user(raw: &str) -> (String, Option<String>) {
    match raw.split_once(':') {
        Some((name, password)) => (percent_decode(name), Some(percent_decode(password))),
        None => (percent_decode(raw), None),
    }
}

fn endpoint(scheme: &str, host: &str) -> Result<String> {
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
        Ok(format!("{scheme}://{host}"))
    } else {
        Ok(format!("{scheme}://{host}:{DEFAULT_PORT}"))
    }
}

/// The error for a URL that cannot be used as given; never quotes the URL (it may hold a
/// password).
pub(crate) fn refused(param: &str, why: impl fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidArgument, format!("url: {param}: {why}"))
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
        assert_eq!(u.tls, None);
        assert_eq!(u.user, None);
        assert_eq!(parse("etcd://a/").unwrap().prefix, "/accord");
    }

    #[test]
    fn tls_files_and_credentials() {
        let u = parse(
            "etcds://me:p%40ss:w@a,b:3?cacert=/c%20a.pem&cert=/c.pem&key=/k.pem&server_name=etcd",
        )
        .unwrap();
        assert_eq!(u.endpoints, ["https://a:2379", "https://b:3"]);
        assert_eq!(
            u.tls,
            Some(TlsFiles {
                cacert: Some("/c a.pem".into()),
                identity: Some(("/c.pem".into(), "/k.pem".into())),
                server_name: Some("etcd".into()),
            })
        );
        assert_eq!(u.user, Some(("me".into(), "p@ss:w".into())));
        // etcdctl's --user name:password and --password, as parameters.
        let u = parse("etcd://a?user=me:pw").unwrap();
        assert_eq!(u.user, Some(("me".into(), "pw".into())));
        let u = parse("etcd://a?user=me&password=p%26w").unwrap();
        assert_eq!(u.user, Some(("me".into(), "p&w".into())));
        assert_eq!(parse("etcds://a").unwrap().tls, Some(TlsFiles::default()));
    }

    #[test]
    fn refusals_name_the_field() {
        for (bad, field) in [
            ("etcd://a:x", "port"),
            ("etcd://a,,b", "empty host"),
            ("etcd://a/db", "prefix"),
            ("etcd://a?mode=x", "\"mode\""),
            ("etcd://a?prefix=p", "prefix"),
            ("etcd://a?prefix=/", "prefix"),
            ("etcd://a?cacert=/c", "cacert= is a TLS setting"),
            ("etcds://a?cert=/c", "cert= needs key="),
            ("etcds://a?key=/k", "key= needs cert="),
            ("etcds://a?cacert=", "cacert= is empty"),
            ("etcd://me@a", "no password"),
            ("etcd://a?password=secret", "password= needs a user"),
            (
                "etcd://u:secret@a?password=secret",
                "password= is given twice",
            ),
            ("etcd://:secret@a", "user name is empty"),
            ("http://a", "expected etcd://"),
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}");
            assert!(e.message().contains("url"), "{bad}: {e}");
            assert!(e.message().contains(field), "{bad}: {e}");
            assert!(!e.message().contains("secret"), "{bad}: {e}");
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let u = parse("etcds://me:secret@a?password2=x").unwrap_err();
        assert!(!u.message().contains("secret"), "{u}");
        let u = parse("etcd://me:secret@a").unwrap();
        let shown = format!("{u:?}");
        assert!(shown.contains("me") && !shown.contains("secret"), "{shown}");
    }
}
