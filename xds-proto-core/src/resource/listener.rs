//! LDS: decoding and validating `envoy.config.listener.v3.Listener` into a compact
//! [`ListenerResource`].
//!
//! The module owns the listener types: a client-side listener is an `api_listener`
//! holding an `HttpConnectionManager` (gRFC A27), validated into
//! [`HttpConnectionManager`] with its route source (RDS name or inline route
//! configuration, A28/A31), HTTP filter chain (A39) and `max_stream_duration` (A31). A
//! listener with an address instead is a server-side listener (A36), validated in
//! `listener/server.rs` into a [`ServerListener`]: its address and filter chains, each
//! with its normalized match, its `HttpConnectionManager` (server-side HTTP filters) and
//! its security config (A29). The
//! module also owns the table of HTTP filter types gRPC supports
//! ([`SUPPORTED_HTTP_FILTERS`]), which the route decoder consults for per-route filter
//! overrides.

use std::collections::BTreeSet;
use std::time::Duration;

use super::route::{RouteConfigResource, parse_route_configuration};
use super::validate::{
    FieldError, decode_message, decode_resource, duration, optional, required, type_name,
    typed_config,
};
use super::{DecodeContext, DecodeError};
use crate::filter::HttpFilterConfig;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::listener::v3 as listener_pb;
use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm_pb;
use crate::pb::google::protobuf as pbuf;

/// Type URL of `HttpConnectionManager`, the only `api_listener` gRPC accepts.
pub const HTTP_CONNECTION_MANAGER_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// Type URL of the router filter, which must end every HTTP filter chain.
pub const ROUTER_FILTER_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

/// Type URL of the fault injection filter (gRFC A33).
pub const FAULT_FILTER_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault";

/// Type URL of the RBAC filter (gRFC A41; servers only).
pub const RBAC_FILTER_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";

/// Type URL of the GCP authentication filter (gRFC A83).
pub const GCP_AUTHN_FILTER_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.gcp_authn.v3.GcpAuthnFilterConfig";

/// Type URL of the stateful session filter (gRFC A55).
pub const STATEFUL_SESSION_FILTER_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.stateful_session.v3.StatefulSession";

/// An HTTP filter type gRPC supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SupportedHttpFilter {
    /// Type URL of the filter's top-level config.
    pub type_url: &'static str,
    /// Type URLs accepted in `typed_per_filter_config` overrides for this filter.
    pub override_type_urls: &'static [&'static str],
    /// Whether clients (api_listener) support it.
    pub client: bool,
    /// Whether servers support it.
    pub server: bool,
    /// Whether it is terminal (must be last; the router).
    pub terminal: bool,
}

impl SupportedHttpFilter {
    /// The type name of the top-level config (the part of the type URL after the `/`).
    pub fn type_name(&self) -> &'static str {
        type_name(self.type_url)
    }
}

/// The HTTP filters gRPC supports.
pub const SUPPORTED_HTTP_FILTERS: &[SupportedHttpFilter] = &[
    SupportedHttpFilter {
        type_url: ROUTER_FILTER_TYPE_URL,
        override_type_urls: &[],
        client: true,
        server: true,
        terminal: true,
    },
    SupportedHttpFilter {
        type_url: FAULT_FILTER_TYPE_URL,
        override_type_urls: &[FAULT_FILTER_TYPE_URL],
        client: true,
        server: false,
        terminal: false,
    },
    SupportedHttpFilter {
        type_url: RBAC_FILTER_TYPE_URL,
        override_type_urls: &[
            "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute",
        ],
        client: false,
        server: true,
        terminal: false,
    },
    SupportedHttpFilter {
        type_url: GCP_AUTHN_FILTER_TYPE_URL,
        override_type_urls: &[],
        client: true,
        server: false,
        terminal: false,
    },
    SupportedHttpFilter {
        type_url: STATEFUL_SESSION_FILTER_TYPE_URL,
        override_type_urls: &[
            "type.googleapis.com/envoy.extensions.filters.http.stateful_session.v3.StatefulSessionPerRoute",
        ],
        client: true,
        server: false,
        terminal: false,
    },
];

/// The supported filter whose top-level config has type name `type_name`.
pub fn supported_http_filter(type_name: &str) -> Option<&'static SupportedHttpFilter> {
    SUPPORTED_HTTP_FILTERS
        .iter()
        .find(|f| f.type_name() == type_name)
}

/// A validated `Listener`.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenerResource {
    /// The resource name.
    pub name: String,
    /// Client (api_listener) or server listener.
    pub kind: ListenerKind,
}

/// What kind of listener a resource is.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ListenerKind {
    /// A client-side listener: `api_listener` holding an `HttpConnectionManager`.
    Client(HttpConnectionManager),
    /// A server-side listener (gRFC A36): its address and filter chains.
    Server(ServerListener),
}

pub use crate::security::DownstreamTls;
pub use server::{
    CidrRange, FilterChain, FilterChainMatch, MAX_NORMALIZED_MATCHERS, ServerListener, SourceType,
};

mod server;

/// A validated `HttpConnectionManager`: a client listener's, or a server filter chain's.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpConnectionManager {
    /// Where the routes come from.
    pub route_config: RouteSource,
    /// The HTTP filters gRPC runs, in order; ends with the router. Optional filters that
    /// gRPC does not support are left out.
    pub http_filters: Vec<HttpFilter>,
    /// `common_http_protocol_options.max_stream_duration` (A31), if set.
    pub max_stream_duration: Option<Duration>,
}

impl HttpConnectionManager {
    /// The RDS name its routes come from, when they are not inline.
    pub fn route_config_name(&self) -> Option<&str> {
        match &self.route_config {
            RouteSource::Rds(name) => Some(name),
            RouteSource::Inline(_) => None,
        }
    }
}

/// Which side runs an HTTP filter chain: clients run client filters, servers server
/// filters ([`SupportedHttpFilter::client`], [`SupportedHttpFilter::server`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HttpSide {
    /// An `api_listener`'s connection manager.
    Client,
    /// A server filter chain's connection manager.
    Server,
}

/// Where an HCM's route configuration comes from.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RouteSource {
    /// Fetched over RDS (config source `ads` or `self`) under this name.
    Rds(String),
    /// Inline in the HCM.
    Inline(Box<RouteConfigResource>),
}

/// One HTTP filter of an HCM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpFilter {
    /// The filter instance name (non-empty, unique in the chain).
    pub name: String,
    /// The filter config, parsed once by its filter (A39).
    pub config: HttpFilterConfig,
    /// `is_optional`.
    pub is_optional: bool,
}

/// Decodes and validates one serialized `Listener` without a bootstrap: certificate
/// provider instance names are not checked (see [`DecodeContext::default`]).
pub fn decode(bytes: &[u8]) -> Result<(String, ListenerResource), DecodeError> {
    decode_in(&DecodeContext::default(), bytes)
}

/// Decodes and validates one serialized `Listener` for a client with this context.
pub fn decode_in(
    context: &DecodeContext<'_>,
    bytes: &[u8],
) -> Result<(String, ListenerResource), DecodeError> {
    let listener: listener_pb::Listener = decode_resource(bytes, "Listener")?;
    let kind =
        parse_listener(context, &listener).map_err(|e| e.into_decode_error(&listener.name))?;
    let name = listener.name;
    Ok((name.clone(), ListenerResource { name, kind }))
}

fn parse_listener(
    context: &DecodeContext<'_>,
    listener: &listener_pb::Listener,
) -> Result<ListenerKind, FieldError> {
    if let Some(api_listener) = &listener.api_listener {
        let any = required(
            api_listener.api_listener.as_ref(),
            "api_listener.api_listener",
        )?;
        return parse_hcm_any(any, HttpSide::Client)
            .map(ListenerKind::Client)
            .map_err(|e| e.at("api_listener.api_listener"));
    }
    if listener.address.is_some() {
        return server::parse_server_listener(context, listener).map(ListenerKind::Server);
    }
    Err(FieldError::new(
        "",
        "neither api_listener (client listener) nor address (server listener) is set",
    ))
}

fn parse_hcm_any(any: &pbuf::Any, side: HttpSide) -> Result<HttpConnectionManager, FieldError> {
    if any.type_url.is_empty() {
        return Err(FieldError::missing("type_url"));
    }
    if type_name(&any.type_url) != type_name(HTTP_CONNECTION_MANAGER_TYPE_URL) {
        return Err(FieldError::new(
            "type_url",
            format!(
                "unsupported type {:?} (expected {HTTP_CONNECTION_MANAGER_TYPE_URL})",
                any.type_url
            ),
        ));
    }
    let hcm: hcm_pb::HttpConnectionManager =
        decode_message(&any.value, "value", "HttpConnectionManager")?;
    parse_hcm(&hcm, side)
}

fn parse_hcm(
    hcm: &hcm_pb::HttpConnectionManager,
    side: HttpSide,
) -> Result<HttpConnectionManager, FieldError> {
    use hcm_pb::http_connection_manager::RouteSpecifier;
    // A41: gRPC does not trust forwarding headers.
    if hcm.xff_num_trusted_hops != 0 {
        return Err(FieldError::new("xff_num_trusted_hops", "must be zero"));
    }
    if !hcm.original_ip_detection_extensions.is_empty() {
        return Err(FieldError::new(
            "original_ip_detection_extensions",
            "must be empty",
        ));
    }
    let max_stream_duration = optional(
        hcm.common_http_protocol_options
            .as_ref()
            .and_then(|o| o.max_stream_duration.as_ref()),
        "common_http_protocol_options.max_stream_duration",
        duration,
    )?;
    let http_filters =
        parse_http_filters(&hcm.http_filters, side).map_err(|e| e.at("http_filters"))?;
    let route_config = match &hcm.route_specifier {
        Some(RouteSpecifier::Rds(rds)) => {
            check_ads_or_self(rds.config_source.as_ref()).map_err(|e| e.at("rds.config_source"))?;
            if rds.route_config_name.is_empty() {
                return Err(FieldError::new(
                    "rds.route_config_name",
                    "must be non-empty",
                ));
            }
            RouteSource::Rds(rds.route_config_name.clone())
        }
        Some(RouteSpecifier::RouteConfig(rc)) => RouteSource::Inline(Box::new(
            parse_route_configuration(rc).map_err(|e| e.at("route_config"))?,
        )),
        Some(RouteSpecifier::ScopedRoutes(_)) => {
            return Err(FieldError::new("scoped_routes", "not supported"));
        }
        None => {
            return Err(FieldError::new("", "neither rds nor route_config is set"));
        }
    };
    Ok(HttpConnectionManager {
        route_config,
        http_filters,
        max_stream_duration,
    })
}

/// A config source must be `ads` or `self` (the only ones gRPC supports).
pub(super) fn check_ads_or_self(source: Option<&core_pb::ConfigSource>) -> Result<(), FieldError> {
    use core_pb::config_source::ConfigSourceSpecifier;
    match source.and_then(|s| s.config_source_specifier.as_ref()) {
        Some(ConfigSourceSpecifier::Ads(_) | ConfigSourceSpecifier::Self_(_)) => Ok(()),
        Some(_) => Err(FieldError::new("", "ConfigSource must specify ads or self")),
        None if source.is_none() => Err(FieldError::missing("")),
        None => Err(FieldError::new("", "ConfigSource must specify ads or self")),
    }
}

fn parse_http_filters(
    filters: &[hcm_pb::HttpFilter],
    side: HttpSide,
) -> Result<Vec<HttpFilter>, FieldError> {
    let mut seen = BTreeSet::new();
    // (index in the received list, filter, whether it is terminal)
    let mut kept: Vec<(usize, HttpFilter, bool)> = Vec::with_capacity(filters.len());
    for (i, filter) in filters.iter().enumerate() {
        let at = |e: FieldError| e.at(format_args!("[{i}]"));
        if filter.name.is_empty() {
            return Err(at(FieldError::new("name", "must be non-empty")));
        }
        if !seen.insert(filter.name.as_str()) {
            return Err(at(FieldError::new(
                "name",
                format!("duplicate HTTP filter name {:?}", filter.name),
            )));
        }
        if let Some((parsed, terminal)) = parse_http_filter(filter, side).map_err(at)? {
            kept.push((i, parsed, terminal));
        }
    }
    check_router_is_last(&kept)?;
    Ok(kept.into_iter().map(|(_, filter, _)| filter).collect())
}

/// One filter of the chain and whether it is terminal; `Ok(None)` for an optional filter
/// gRPC cannot run (skipped). Paths are relative to the filter.
fn parse_http_filter(
    filter: &hcm_pb::HttpFilter,
    side: HttpSide,
) -> Result<Option<(HttpFilter, bool)>, FieldError> {
    use hcm_pb::http_filter::ConfigType;
    let any = match &filter.config_type {
        Some(ConfigType::TypedConfig(any)) => any,
        Some(ConfigType::ConfigDiscovery(_)) if filter.is_optional => return Ok(None),
        Some(ConfigType::ConfigDiscovery(_)) => {
            return Err(FieldError::new(
                "config_discovery",
                "filter config discovery (ECDS) is not supported",
            ));
        }
        None => return Err(FieldError::missing("typed_config")),
    };
    let config = typed_config(any).map_err(|e| e.at("typed_config"))?;
    let Some(supported) = supported_http_filter(config.type_name()) else {
        if filter.is_optional {
            return Ok(None);
        }
        return Err(FieldError::new(
            "typed_config",
            format!("unsupported filter type {:?}", config.type_url),
        ));
    };
    let (supported_here, side_name) = match side {
        HttpSide::Client => (supported.client, "clients"),
        HttpSide::Server => (supported.server, "servers"),
    };
    if !supported_here {
        if filter.is_optional {
            return Ok(None);
        }
        return Err(FieldError::new(
            "typed_config",
            format!(
                "filter type {:?} is not supported on {side_name}",
                config.type_url
            ),
        ));
    }
    // The filter validates its config once, here (A39); a bad config NACKs even when
    // the filter is optional (only an unknown type is skipped).
    let Some(config) = HttpFilterConfig::parse(&config).map_err(|e| e.at("typed_config"))? else {
        return Err(FieldError::new(
            "typed_config",
            format!("unsupported filter type {:?}", config.type_url),
        ));
    };
    let parsed = HttpFilter {
        name: filter.name.clone(),
        config,
        is_optional: filter.is_optional,
    };
    Ok(Some((parsed, supported.terminal)))
}

/// The chain must end with the router and hold no other terminal filter.
fn check_router_is_last(kept: &[(usize, HttpFilter, bool)]) -> Result<(), FieldError> {
    let Some(((last_index, last, last_terminal), rest)) = kept.split_last() else {
        return Err(FieldError::new(
            "",
            "expected at least one HTTP filter (the router)",
        ));
    };
    if !last_terminal {
        return Err(FieldError::new(
            format!("[{last_index}]"),
            format!(
                "the last HTTP filter must be the router ({ROUTER_FILTER_TYPE_URL}), found {:?}",
                last.config.type_url()
            ),
        ));
    }
    if let Some((index, _, _)) = rest.iter().find(|(_, _, terminal)| *terminal) {
        return Err(FieldError::new(
            format!("[{index}]"),
            "the router must be the last HTTP filter",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
