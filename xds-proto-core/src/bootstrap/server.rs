//! The `xds_servers` entries: each server's URI (a gRPC target the transport can dial,
//! checked here so that a bad one fails the bootstrap instead of every connection
//! attempt), its channel credentials (the first supported `channel_creds` type; TLS
//! with its certificate files and refresh interval), its `server_features` and its
//! `api_type` (state of the world or delta).

use std::net::Ipv6Addr;
use std::time::Duration;

use serde_json::Value;

use super::json::{
    Object, as_array, as_object, as_string, child, index, opt_non_empty_string, opt_object,
    opt_string, quote, required_string,
};
use super::{
    ApiType, BootstrapError, BootstrapErrorKind, ChannelCredentials, ServerConfig, ServerFeatures,
    TlsCredentials,
};

/// The largest `google.protobuf.Duration`, in seconds (10,000 years).
const MAX_DURATION_SECS: u64 = 315_576_000_000;

/// A list of servers; the caller decides whether an empty list is acceptable.
pub(super) fn parse_server_list(
    value: &Value,
    path: &str,
) -> Result<Vec<ServerConfig>, BootstrapError> {
    as_array(value, path)?
        .iter()
        .enumerate()
        .map(|(i, v)| parse_server(v, &index(path, i)))
        .collect()
}

fn parse_server(value: &Value, path: &str) -> Result<ServerConfig, BootstrapError> {
    let obj = as_object(value, path)?;
    let server_uri = required_string(obj, path, "server_uri")?;
    ServerTarget::parse(&server_uri).map_err(|reason| {
        BootstrapError::new(
            child(path, "server_uri"),
            BootstrapErrorKind::Invalid(reason),
        )
    })?;
    let creds_path = child(path, "channel_creds");
    let channel_creds = match obj.get("channel_creds") {
        None => return Err(BootstrapError::new(creds_path, BootstrapErrorKind::Missing)),
        Some(v) => parse_channel_creds(v, &creds_path)?,
    };
    let server_features = match obj.get("server_features") {
        None => ServerFeatures::default(),
        Some(v) => parse_server_features(v, &child(path, "server_features"))?,
    };
    let api_type = match obj.get("api_type") {
        None => ApiType::default(),
        Some(v) => parse_api_type(v, &child(path, "api_type"))?,
    };
    Ok(ServerConfig {
        server_uri,
        channel_creds,
        server_features,
        api_type,
    })
}

/// `api_type`: one of the ADS variants, by Envoy's `ApiConfigSource.ApiType` name.
fn parse_api_type(value: &Value, path: &str) -> Result<ApiType, BootstrapError> {
    let name = as_string(value, path)?;
    ApiType::from_name(name).ok_or_else(|| {
        BootstrapError::new(
            path,
            BootstrapErrorKind::Invalid(format!(
                "unsupported API type {}: expected \"AGGREGATED_GRPC\" (state of the world) \
                 or \"AGGREGATED_DELTA_GRPC\" (delta)",
                quote(name)
            )),
        )
    })
}

/// A server URI split into the host and port to connect to.
///
/// gRPC's `server_uri` is a gRPC target; those the transport can dial are `host:port`,
/// `[v6]:port`, `dns:///host:port`, `dns:host:port` and a bare host (port 443). Other
/// schemes (`http://`, `unix:`) and DNS authorities (`dns://8.8.8.8/host`) are refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerTarget {
    /// The host name or IP literal (without brackets).
    pub host: String,
    /// The port, never 0.
    pub port: u16,
}

/// The schemes of gRPC targets that name no TCP host, written without `//`.
const OTHER_SCHEMES: &[&str] = &["unix", "unix-abstract", "vsock", "ipv4", "ipv6"];

impl ServerTarget {
    /// Parses a `server_uri`.
    ///
    /// # Errors
    /// Why the URI is no target the transport can dial, quoting it.
    pub fn parse(uri: &str) -> Result<ServerTarget, String> {
        let rest = match uri.strip_prefix("dns:") {
            Some(after) => match after.strip_prefix("//") {
                Some(authority_and_path) => {
                    let (authority, path) = authority_and_path
                        .split_once('/')
                        .unwrap_or((authority_and_path, ""));
                    if !authority.is_empty() {
                        return Err(format!(
                            "a DNS authority ({}) is not supported in {}",
                            quote(authority),
                            quote(uri)
                        ));
                    }
                    path
                }
                None => after,
            },
            None => uri,
        };
        let scheme = match rest.split_once("://") {
            Some((scheme, _)) => Some(scheme),
            None => OTHER_SCHEMES
                .iter()
                .copied()
                .find(|s| rest.strip_prefix(s).is_some_and(|r| r.starts_with(':'))),
        };
        if let Some(scheme) = scheme {
            return Err(format!(
                "unsupported scheme {} in {}: a server URI is a gRPC target such as \
                 host:port or dns:///host:port",
                quote(scheme),
                quote(uri)
            ));
        }
        let (host, port) = split_host_port(rest, uri)?;
        let port = match port {
            None => 443,
            Some(p) => p.parse().ok().filter(|&p| p != 0).ok_or_else(|| {
                format!(
                    "invalid port {} in {}: expected a number from 1 to 65535",
                    quote(p),
                    quote(uri)
                )
            })?,
        };
        Ok(ServerTarget {
            host: host.to_owned(),
            port,
        })
    }
}

/// Splits `rest` (the URI `uri` without its `dns:` prefix) into a checked host and the
/// port text, if any.
fn split_host_port<'a>(rest: &'a str, uri: &str) -> Result<(&'a str, Option<&'a str>), String> {
    if let Some(bracketed) = rest.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| format!("unclosed \"[\" in {}", quote(uri)))?;
        if host.parse::<Ipv6Addr>().is_err() {
            return Err(format!(
                "invalid IPv6 address {} in {}",
                quote(host),
                quote(uri)
            ));
        }
        return match after.strip_prefix(':') {
            Some(port) => Ok((host, Some(port))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(format!("expected \":port\" after \"]\" in {}", quote(uri))),
        };
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    };
    if host.is_empty() {
        return Err(format!("empty host in {}", quote(uri)));
    }
    let host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if !host.chars().all(host_char) {
        return Err(format!("invalid host {} in {}", quote(host), quote(uri)));
    }
    Ok((host, port))
}

/// Validates every entry's shape and picks the first supported type.
fn parse_channel_creds(value: &Value, path: &str) -> Result<ChannelCredentials, BootstrapError> {
    let entries = as_array(value, path)?;
    if entries.is_empty() {
        return Err(BootstrapError::new(path, BootstrapErrorKind::Empty));
    }
    let mut chosen = None;
    let mut seen = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let entry_path = index(path, i);
        let obj = as_object(entry, &entry_path)?;
        let ty = match obj.get("type") {
            None => {
                return Err(BootstrapError::new(
                    child(&entry_path, "type"),
                    BootstrapErrorKind::Missing,
                ));
            }
            Some(v) => as_string(v, &child(&entry_path, "type"))?,
        };
        let config = opt_object(obj, &entry_path, "config")?;
        if chosen.is_none() {
            chosen = match ty {
                "insecure" => Some(ChannelCredentials::Insecure),
                "google_default" => Some(ChannelCredentials::GoogleDefault),
                "tls" => Some(ChannelCredentials::Tls(parse_tls_config(
                    config,
                    &child(&entry_path, "config"),
                )?)),
                _ => None,
            };
        }
        seen.push(ty.to_owned());
    }
    chosen.ok_or_else(|| {
        BootstrapError::new(path, BootstrapErrorKind::NoSupportedChannelCreds { seen })
    })
}

fn parse_tls_config(config: Option<&Object>, path: &str) -> Result<TlsCredentials, BootstrapError> {
    let Some(obj) = config else {
        return Ok(TlsCredentials::default());
    };
    let ca_certificate_file = opt_non_empty_string(obj, path, "ca_certificate_file")?;
    let certificate_file = opt_non_empty_string(obj, path, "certificate_file")?;
    let private_key_file = opt_non_empty_string(obj, path, "private_key_file")?;
    match (&certificate_file, &private_key_file) {
        (Some(_), None) => {
            return Err(BootstrapError::new(
                child(path, "private_key_file"),
                BootstrapErrorKind::Invalid("must be set when certificate_file is set".into()),
            ));
        }
        (None, Some(_)) => {
            return Err(BootstrapError::new(
                child(path, "certificate_file"),
                BootstrapErrorKind::Invalid("must be set when private_key_file is set".into()),
            ));
        }
        _ => {}
    }
    let refresh_interval = match opt_string(obj, path, "refresh_interval")? {
        None => None,
        Some(s) => Some(parse_proto_duration(&s).map_err(|reason| {
            BootstrapError::new(
                child(path, "refresh_interval"),
                BootstrapErrorKind::Invalid(reason),
            )
        })?),
    };
    Ok(TlsCredentials {
        ca_certificate_file,
        certificate_file,
        private_key_file,
        refresh_interval,
    })
}

/// Parses the protobuf JSON form of a `google.protobuf.Duration` (`"600s"`, `"1.5s"`),
/// rejecting negative values, which make no sense for an interval.
pub(super) fn parse_proto_duration(text: &str) -> Result<Duration, String> {
    let invalid = || {
        format!(
            "invalid duration {}: expected a protobuf JSON duration such as \"600s\"",
            quote(text)
        )
    };
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let body = magnitude.strip_suffix('s').ok_or_else(invalid)?;
    let (whole, frac) = match body.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (body, None),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let secs: u64 = whole.parse().map_err(|_| invalid())?;
    if secs > MAX_DURATION_SECS {
        return Err(format!("invalid duration {}: too large", quote(text)));
    }
    let nanos = match frac {
        None => 0,
        Some(f) => {
            if f.is_empty() || f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            let digits: u32 = f.parse().map_err(|_| invalid())?;
            // Scale "5" (tenths) up to nanoseconds; at most 9 digits, so no overflow.
            (f.len()..9).fold(digits, |n, _| n * 10)
        }
    };
    if negative {
        return Err(format!(
            "invalid duration {}: must not be negative",
            quote(text)
        ));
    }
    Ok(Duration::new(secs, nanos))
}

fn parse_server_features(value: &Value, path: &str) -> Result<ServerFeatures, BootstrapError> {
    let mut features = ServerFeatures::default();
    for (i, v) in as_array(value, path)?.iter().enumerate() {
        match as_string(v, &index(path, i))? {
            "ignore_resource_deletion" => features.ignore_resource_deletion = true,
            "fail_on_data_errors" => features.fail_on_data_errors = true,
            "resource_timer_is_transient_error" => {
                features.resource_timer_is_transient_error = true;
            }
            "trusted_xds_server" => features.trusted_xds_server = true,
            _ => {}
        }
    }
    Ok(features)
}
