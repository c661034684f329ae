//! Stateful session affinity (gRFC A55, A60), a client filter: the `StatefulSession`
//! config with its `CookieBasedSessionState` (name, path, ttl) and the per-route
//! `StatefulSessionPerRoute` (disabled, or another config), validated once; and the
//! per-RPC side: the RPC's session cookie, when its path matches the cookie's (RFC
//! 6265 §5.1.4), gives the host to pick (base64 `ip:port`) and, after A60, the cluster
//! (`ip:port;cluster:NAME`); the response sets the cookie when the RPC ended up
//! elsewhere.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::pb::envoy::extensions::filters::http::stateful_session::v3 as session_pb;
use crate::pb::envoy::extensions::http::stateful_session::cookie::v3 as cookie_pb;
use crate::resource::validate::{FieldError, decode_message, duration, type_name};
use crate::selector::Metadata;

/// The type of the only session state gRPC supports.
pub const COOKIE_SESSION_STATE_TYPE: &str =
    "envoy.extensions.http.stateful_session.cookie.v3.CookieBasedSessionState";

/// The prefix of the cluster in a cookie's value (A60), as in the config selector's
/// cluster manager child names.
const CLUSTER_PREFIX: &str = "cluster:";

/// A validated `StatefulSession`: its cookie, or `None` (no `session_state`: the
/// filter does nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatefulSessionConfig {
    /// The cookie.
    pub cookie: Option<Arc<SessionCookie>>,
}

/// The session cookie of a `CookieBasedSessionState`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionCookie {
    /// `name` (non-empty).
    pub name: String,
    /// `path`; `/` when empty (every RPC).
    pub path: String,
    /// `ttl`, set on the cookie (`Max-Age`), not enforced by gRPC; zero when unset.
    pub ttl: Duration,
}

/// A validated `StatefulSessionPerRoute`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatefulSessionOverride {
    /// `disabled`: no session affinity on this route.
    Disabled,
    /// `stateful_session`: this config instead of the HCM's.
    Config(Arc<StatefulSessionConfig>),
}

impl StatefulSessionConfig {
    /// Parses a serialized `StatefulSession`; errors name fields relative to it.
    pub fn parse(bytes: &[u8]) -> Result<StatefulSessionConfig, FieldError> {
        let config: session_pb::StatefulSession = decode_message(bytes, "", "StatefulSession")?;
        StatefulSessionConfig::of(&config)
    }

    fn of(config: &session_pb::StatefulSession) -> Result<StatefulSessionConfig, FieldError> {
        let Some(state) = &config.session_state else {
            return Ok(StatefulSessionConfig { cookie: None });
        };
        let any = state
            .typed_config
            .as_ref()
            .ok_or_else(|| FieldError::missing("session_state.typed_config"))?;
        if type_name(&any.type_url) != COOKIE_SESSION_STATE_TYPE {
            return Err(FieldError::new(
                "session_state.typed_config",
                format!(
                    "unsupported session state {:?} (expected {COOKIE_SESSION_STATE_TYPE})",
                    any.type_url
                ),
            ));
        }
        let cookie =
            parse_cookie_state(&any.value).map_err(|e| e.at("session_state.typed_config.value"))?;
        Ok(StatefulSessionConfig {
            cookie: Some(Arc::new(cookie)),
        })
    }
}

impl StatefulSessionOverride {
    /// Parses a serialized `StatefulSessionPerRoute`.
    pub fn parse(bytes: &[u8]) -> Result<StatefulSessionOverride, FieldError> {
        use session_pb::stateful_session_per_route::Override;
        let per_route: session_pb::StatefulSessionPerRoute =
            decode_message(bytes, "", "StatefulSessionPerRoute")?;
        match &per_route.r#override {
            Some(Override::Disabled(true)) => Ok(StatefulSessionOverride::Disabled),
            Some(Override::Disabled(false)) => {
                Err(FieldError::new("disabled", "must be true when set"))
            }
            Some(Override::StatefulSession(config)) => Ok(StatefulSessionOverride::Config(
                Arc::new(StatefulSessionConfig::of(config).map_err(|e| e.at("stateful_session"))?),
            )),
            None => Err(FieldError::missing("override")),
        }
    }
}

fn parse_cookie_state(bytes: &[u8]) -> Result<SessionCookie, FieldError> {
    let state: cookie_pb::CookieBasedSessionState =
        decode_message(bytes, "", "CookieBasedSessionState")?;
    let cookie = state
        .cookie
        .as_ref()
        .ok_or_else(|| FieldError::missing("cookie"))?;
    if cookie.name.is_empty() {
        return Err(FieldError::new("cookie.name", "must be non-empty"));
    }
    let ttl = match &cookie.ttl {
        Some(ttl) => duration(ttl).map_err(|e| e.at("cookie.ttl"))?,
        None => Duration::ZERO,
    };
    let path = if cookie.path.is_empty() {
        "/".to_owned()
    } else {
        cookie.path.clone()
    };
    Ok(SessionCookie {
        name: cookie.name.clone(),
        path,
        ttl,
    })
}

impl SessionCookie {
    /// Whether the cookie applies to an RPC on `path` (RFC 6265 §5.1.4 path-match).
    pub fn path_matches(&self, path: &str) -> bool {
        let cookie = self.path.as_str();
        path == cookie
            || (path.starts_with(cookie)
                && (cookie.ends_with('/') || path.as_bytes().get(cookie.len()) == Some(&b'/')))
    }

    /// The session of one RPC on `path`: `None` when the cookie's path does not match
    /// (the filter passes the RPC through, response included); otherwise the host and
    /// cluster its cookie names, if it carries a valid one (A55: an invalid value is
    /// ignored).
    pub fn session<M: Metadata + ?Sized>(
        self: &Arc<Self>,
        path: &str,
        metadata: &M,
    ) -> Option<SessionAffinity> {
        if !self.path_matches(path) {
            return None;
        }
        let mut value = None;
        metadata.for_each_value("cookie", &mut |header| {
            if value.is_none() {
                value = cookie_value(header, &self.name);
            }
        });
        let (override_host, cluster) = value.and_then(decode_value).unzip();
        Some(SessionAffinity {
            cookie: self.clone(),
            override_host,
            cluster: cluster.flatten(),
        })
    }
}

/// The value of the first cookie named `name` in a `cookie` header (`a=1; b=2`).
fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (key, value) = pair.trim().split_once('=')?;
        (key.trim() == name).then(|| {
            let value = value.trim();
            value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value)
        })
    })
}

/// A cookie's base64 `ip:port` or `ip:port;cluster:NAME`; `None` when invalid.
fn decode_value(value: &str) -> Option<(SocketAddr, Option<String>)> {
    let bytes = STANDARD.decode(value).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let (host, cluster) = match text.split_once(';') {
        Some((host, cluster)) => (host, Some(cluster)),
        None => (text, None),
    };
    let Ok(host) = host.parse::<SocketAddr>() else {
        tracing::warn!(
            cookie = text,
            "a session cookie that names no ip:port is ignored"
        );
        return None;
    };
    let cluster = cluster
        .map(|c| c.trim_matches('"'))
        .map(|c| c.strip_prefix(CLUSTER_PREFIX).unwrap_or(c))
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    Some((host, cluster))
}

/// One RPC's session (A55): the host its cookie asks for, and the cluster (A60).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionAffinity {
    cookie: Arc<SessionCookie>,
    /// The host to pick when it is usable (the LB pick's
    /// [`override_host`](crate::lb::PickArgs::override_host)).
    pub override_host: Option<SocketAddr>,
    /// The cluster the cookie names (A60): the RPC stays on it when its route has it.
    pub cluster: Option<String>,
}

impl SessionAffinity {
    /// The `set-cookie` value for the response of an RPC served by `host` in `cluster`:
    /// `None` when the cookie already named both (A55, A60).
    pub fn set_cookie(&self, host: SocketAddr, cluster: &str) -> Option<String> {
        if self.override_host == Some(host) && self.cluster.as_deref() == Some(cluster) {
            return None;
        }
        let value = STANDARD.encode(format!("{host};{CLUSTER_PREFIX}{cluster}"));
        let cookie = &self.cookie;
        let mut header = format!("{}={value}; Path={}", cookie.name, cookie.path);
        if !cookie.ttl.is_zero() {
            header.push_str(&format!("; Max-Age={}", cookie.ttl.as_secs()));
        }
        header.push_str("; HttpOnly");
        Some(header)
    }
}
