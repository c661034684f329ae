//! LDS: decoding and validating `envoy.config.listener.v3.Listener` into a compact
//! [`ListenerResource`].
//!
//! The module owns the listener types: a client-side listener is an `api_listener`
//! holding an `HttpConnectionManager` (gRFC A27), validated into
//! [`HttpConnectionManager`] with its route source (RDS name or inline route
//! configuration, A28/A31), HTTP filter chain (A39) and `max_stream_duration` (A31). A
//! listener with an address instead is a server-side listener (A36), kept minimal. The
//! module also owns the table of HTTP filter types gRPC supports
//! ([`SUPPORTED_HTTP_FILTERS`]), which the route decoder consults for per-route filter
//! overrides.

use std::collections::BTreeSet;
use std::time::Duration;

use prost::Message;

use super::DecodeError;
use super::route::{RouteConfigResource, TypedConfig, parse_route_configuration};
use super::validate::{
    FieldError, PortRange, decode_message, decode_resource, duration, socket_port, type_name,
    typed_config,
};
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

/// Whether `type_name` is a config type a supported filter accepts as a per-route
/// override (its override type or its top-level type).
pub(super) fn is_supported_filter_override(name: &str) -> bool {
    SUPPORTED_HTTP_FILTERS
        .iter()
        .any(|f| f.type_name() == name || f.override_type_urls.iter().any(|u| type_name(u) == name))
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
pub enum ListenerKind {
    /// A client-side listener: `api_listener` holding an `HttpConnectionManager`.
    Client(HttpConnectionManager),
    /// A server-side listener (gRFC A36), kept minimal: filter chains are not decoded.
    Server {
        /// `address.socket_address.address`.
        address: String,
        /// `address.socket_address.port_value` (at most 65535).
        port: u32,
        /// The number of `filter_chains`.
        filter_chain_count: usize,
        /// Whether `default_filter_chain` is set.
        has_default_filter_chain: bool,
    },
}

/// A validated `HttpConnectionManager` from a client listener.
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

/// Where an HCM's route configuration comes from.
#[derive(Clone, Debug, PartialEq)]
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
    /// The filter config; [`TypedConfig::type_url`] identifies the filter type.
    pub config: TypedConfig,
    /// `is_optional`.
    pub is_optional: bool,
}

/// Decodes and validates one serialized `Listener`.
pub fn decode(bytes: &[u8]) -> Result<(String, ListenerResource), DecodeError> {
    let listener: listener_pb::Listener = decode_resource(bytes, "Listener")?;
    let kind = parse_listener(&listener).map_err(|e| e.into_decode_error(&listener.name))?;
    let name = listener.name;
    Ok((name.clone(), ListenerResource { name, kind }))
}

fn parse_listener(listener: &listener_pb::Listener) -> Result<ListenerKind, FieldError> {
    if let Some(api_listener) = &listener.api_listener {
        let Some(any) = &api_listener.api_listener else {
            return Err(FieldError::new(
                "api_listener.api_listener",
                "field not present",
            ));
        };
        return parse_hcm_any(any)
            .map(ListenerKind::Client)
            .map_err(|e| e.at("api_listener.api_listener"));
    }
    if let Some(address) = &listener.address {
        let (address, port) = parse_server_address(address).map_err(|e| e.at("address"))?;
        return Ok(ListenerKind::Server {
            address,
            port,
            filter_chain_count: listener.filter_chains.len(),
            has_default_filter_chain: listener.default_filter_chain.is_some(),
        });
    }
    Err(FieldError::new(
        "",
        "neither api_listener (client listener) nor address (server listener) is set",
    ))
}

fn parse_server_address(address: &core_pb::Address) -> Result<(String, u32), FieldError> {
    use core_pb::address::Address;
    let Some(Address::SocketAddress(sa)) = &address.address else {
        return Err(FieldError::new("socket_address", "field not present"));
    };
    let port = socket_port(sa.port_specifier.as_ref().into(), PortRange::Any)
        .map_err(|e| e.at("socket_address"))?;
    Ok((sa.address.clone(), u32::from(port)))
}

fn parse_hcm_any(any: &pbuf::Any) -> Result<HttpConnectionManager, FieldError> {
    if any.type_url.is_empty() {
        return Err(FieldError::new("type_url", "field not present"));
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
    parse_hcm(&hcm)
}

fn parse_hcm(hcm: &hcm_pb::HttpConnectionManager) -> Result<HttpConnectionManager, FieldError> {
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
    let max_stream_duration = hcm
        .common_http_protocol_options
        .as_ref()
        .and_then(|o| o.max_stream_duration.as_ref())
        .map(duration)
        .transpose()
        .map_err(|e| e.at("common_http_protocol_options.max_stream_duration"))?;
    let http_filters = parse_http_filters(&hcm.http_filters).map_err(|e| e.at("http_filters"))?;
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
        None if source.is_none() => Err(FieldError::new("", "field not present")),
        None => Err(FieldError::new("", "ConfigSource must specify ads or self")),
    }
}

fn parse_http_filters(filters: &[hcm_pb::HttpFilter]) -> Result<Vec<HttpFilter>, FieldError> {
    use hcm_pb::http_filter::ConfigType;
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
        let any = match &filter.config_type {
            Some(ConfigType::TypedConfig(any)) => any,
            Some(ConfigType::ConfigDiscovery(_)) if filter.is_optional => continue,
            Some(ConfigType::ConfigDiscovery(_)) => {
                return Err(at(FieldError::new(
                    "config_discovery",
                    "filter config discovery (ECDS) is not supported",
                )));
            }
            None => return Err(at(FieldError::new("typed_config", "field not present"))),
        };
        let config = typed_config(any).map_err(|e| at(e.at("typed_config")))?;
        let Some(supported) = supported_http_filter(config.type_name()) else {
            if filter.is_optional {
                continue;
            }
            return Err(at(FieldError::new(
                "typed_config",
                format!("unsupported filter type {:?}", config.type_url),
            )));
        };
        if !supported.client {
            if filter.is_optional {
                continue;
            }
            return Err(at(FieldError::new(
                "typed_config",
                format!(
                    "filter type {:?} is not supported on clients",
                    config.type_url
                ),
            )));
        }
        kept.push((
            i,
            HttpFilter {
                name: filter.name.clone(),
                config,
                is_optional: filter.is_optional,
            },
            supported.terminal,
        ));
    }
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
                last.config.type_url
            ),
        ));
    }
    if let Some((index, _, _)) = rest.iter().find(|(_, _, terminal)| *terminal) {
        return Err(FieldError::new(
            format!("[{index}]"),
            "the router must be the last HTTP filter",
        ));
    }
    Ok(kept.into_iter().map(|(_, filter, _)| filter).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::route::v3 as route_pb;
    use crate::pb::envoy::extensions::filters::http::router::v3 as router_pb;
    use crate::resource::route::{ClusterSpecifier, RouteAction};
    use bytes::Bytes;

    fn any(type_url: &str, msg: &impl Message) -> pbuf::Any {
        pbuf::Any {
            type_url: type_url.to_owned(),
            value: msg.encode_to_vec().into(),
        }
    }

    fn filter(name: &str, type_url: &str) -> hcm_pb::HttpFilter {
        hcm_pb::HttpFilter {
            name: name.to_owned(),
            config_type: Some(hcm_pb::http_filter::ConfigType::TypedConfig(any(
                type_url,
                &pbuf::Empty {},
            ))),
            ..Default::default()
        }
    }

    fn router() -> hcm_pb::HttpFilter {
        hcm_pb::HttpFilter {
            name: "router".to_owned(),
            config_type: Some(hcm_pb::http_filter::ConfigType::TypedConfig(any(
                ROUTER_FILTER_TYPE_URL,
                &router_pb::Router::default(),
            ))),
            ..Default::default()
        }
    }

    fn ads() -> core_pb::ConfigSource {
        core_pb::ConfigSource {
            config_source_specifier: Some(core_pb::config_source::ConfigSourceSpecifier::Ads(
                core_pb::AggregatedConfigSource {},
            )),
            ..Default::default()
        }
    }

    fn rds_hcm(name: &str) -> hcm_pb::HttpConnectionManager {
        hcm_pb::HttpConnectionManager {
            http_filters: vec![router()],
            route_specifier: Some(hcm_pb::http_connection_manager::RouteSpecifier::Rds(
                hcm_pb::Rds {
                    config_source: Some(ads()),
                    route_config_name: name.to_owned(),
                },
            )),
            ..Default::default()
        }
    }

    fn client_listener(hcm: &hcm_pb::HttpConnectionManager) -> listener_pb::Listener {
        listener_pb::Listener {
            name: "lis".to_owned(),
            api_listener: Some(listener_pb::ApiListener {
                api_listener: Some(any(HTTP_CONNECTION_MANAGER_TYPE_URL, hcm)),
            }),
            ..Default::default()
        }
    }

    fn decode_listener(l: &listener_pb::Listener) -> Result<ListenerResource, DecodeError> {
        decode(&l.encode_to_vec()).map(|(name, value)| {
            assert_eq!(name, l.name);
            assert_eq!(value.name, l.name);
            value
        })
    }

    fn hcm_of(l: &listener_pb::Listener) -> HttpConnectionManager {
        match decode_listener(l).expect("valid").kind {
            ListenerKind::Client(hcm) => hcm,
            other => panic!("{other:?}"),
        }
    }

    fn err(l: &listener_pb::Listener) -> String {
        let e = decode_listener(l).expect_err("expected an error");
        assert_eq!(e.name.as_deref(), Some("lis"));
        e.message
    }

    fn hcm_err(hcm: &hcm_pb::HttpConnectionManager) -> String {
        err(&client_listener(hcm))
    }

    const P: &str = "api_listener.api_listener";

    #[test]
    fn client_listener_with_rds() {
        let mut hcm = rds_hcm("route-a");
        hcm.common_http_protocol_options = Some(core_pb::HttpProtocolOptions {
            max_stream_duration: Some(pbuf::Duration {
                seconds: 5,
                nanos: 0,
            }),
            ..Default::default()
        });
        let l = client_listener(&hcm);
        assert_eq!(
            decode_listener(&l).unwrap(),
            ListenerResource {
                name: "lis".to_owned(),
                kind: ListenerKind::Client(HttpConnectionManager {
                    route_config: RouteSource::Rds("route-a".to_owned()),
                    http_filters: vec![HttpFilter {
                        name: "router".to_owned(),
                        config: TypedConfig {
                            type_url: ROUTER_FILTER_TYPE_URL.to_owned(),
                            value: Bytes::new(),
                            typed_struct: false,
                        },
                        is_optional: false,
                    }],
                    max_stream_duration: Some(Duration::from_secs(5)),
                }),
            }
        );
        // `self` is accepted too.
        let mut hcm = rds_hcm("r");
        if let Some(hcm_pb::http_connection_manager::RouteSpecifier::Rds(rds)) =
            &mut hcm.route_specifier
        {
            rds.config_source = Some(core_pb::ConfigSource {
                config_source_specifier: Some(
                    core_pb::config_source::ConfigSourceSpecifier::Self_(Default::default()),
                ),
                ..Default::default()
            });
        }
        assert_eq!(
            hcm_of(&client_listener(&hcm)).route_config,
            RouteSource::Rds("r".to_owned())
        );
    }

    #[test]
    fn mutated_bytes_never_panic() {
        let mut hcm = rds_hcm("r");
        hcm.http_filters
            .insert(0, filter("fault", FAULT_FILTER_TYPE_URL));
        hcm.common_http_protocol_options = Some(core_pb::HttpProtocolOptions {
            max_stream_duration: Some(pbuf::Duration {
                seconds: 1,
                nanos: 2,
            }),
            ..Default::default()
        });
        crate::resource::validate::for_each_mutation(&client_listener(&hcm).encode_to_vec(), |b| {
            let _ = decode(b);
        });
    }

    #[test]
    fn garbage_and_truncated_bytes_are_unnamed_errors() {
        let e = decode(b"\x0a\xff\xff\xff\xff\x0f").unwrap_err();
        assert_eq!(e.name, None);
        assert!(e.message.starts_with("failed to decode Listener: "), "{e}");
        let full = client_listener(&rds_hcm("r")).encode_to_vec();
        for len in 0..full.len() {
            if let Err(e) = decode(&full[..len]) {
                assert!(matches!(e.name.as_deref(), None | Some("" | "lis")), "{e}");
            }
        }
        // Garbage inside the HCM's Any is a named error.
        let l = listener_pb::Listener {
            name: "lis".to_owned(),
            api_listener: Some(listener_pb::ApiListener {
                api_listener: Some(pbuf::Any {
                    type_url: HTTP_CONNECTION_MANAGER_TYPE_URL.to_owned(),
                    value: Bytes::from_static(&[0xff, 0xff]),
                }),
            }),
            ..Default::default()
        };
        let msg = err(&l);
        assert!(
            msg.starts_with(&format!("{P}.value: can't decode HttpConnectionManager: ")),
            "{msg}"
        );
    }

    #[test]
    fn inline_route_config() {
        let rc = route_pb::RouteConfiguration {
            name: "inline".to_owned(),
            virtual_hosts: vec![route_pb::VirtualHost {
                name: "vh".to_owned(),
                domains: vec!["*".to_owned()],
                routes: vec![route_pb::Route {
                    r#match: Some(route_pb::RouteMatch {
                        path_specifier: Some(route_pb::route_match::PathSpecifier::Prefix(
                            String::new(),
                        )),
                        ..Default::default()
                    }),
                    action: Some(route_pb::route::Action::Route(route_pb::RouteAction {
                        cluster_specifier: Some(route_pb::route_action::ClusterSpecifier::Cluster(
                            "c".to_owned(),
                        )),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let hcm = hcm_pb::HttpConnectionManager {
            route_specifier: Some(
                hcm_pb::http_connection_manager::RouteSpecifier::RouteConfig(rc.clone()),
            ),
            ..rds_hcm("unused")
        };
        let RouteSource::Inline(inline) = hcm_of(&client_listener(&hcm)).route_config else {
            panic!()
        };
        assert_eq!(inline.name, "inline");
        let RouteAction::Forward(f) = &inline.virtual_hosts[0].routes[0].action else {
            panic!()
        };
        assert_eq!(f.cluster, ClusterSpecifier::Cluster("c".to_owned()));

        // Errors inside carry the full path.
        let mut bad = rc;
        bad.virtual_hosts[0].domains = vec!["a*b".to_owned()];
        let hcm = hcm_pb::HttpConnectionManager {
            route_specifier: Some(
                hcm_pb::http_connection_manager::RouteSpecifier::RouteConfig(bad),
            ),
            ..rds_hcm("unused")
        };
        assert_eq!(
            hcm_err(&hcm),
            format!(
                "{P}.route_config.virtual_hosts[0].domains[0]: invalid domain pattern \"a*b\": \
                 at most one wildcard, at the start or the end"
            )
        );
    }

    #[test]
    fn route_specifier_errors() {
        use hcm_pb::http_connection_manager::RouteSpecifier;
        let rds =
            |source: Option<core_pb::ConfigSource>, name: &str| hcm_pb::HttpConnectionManager {
                route_specifier: Some(RouteSpecifier::Rds(hcm_pb::Rds {
                    config_source: source,
                    route_config_name: name.to_owned(),
                })),
                ..rds_hcm("")
            };
        let path_source = core_pb::ConfigSource {
            config_source_specifier: Some(
                core_pb::config_source::ConfigSourceSpecifier::PathConfigSource(Default::default()),
            ),
            ..Default::default()
        };
        for (hcm, msg) in [
            (
                rds(None, "r"),
                format!("{P}.rds.config_source: field not present"),
            ),
            (
                rds(Some(path_source), "r"),
                format!("{P}.rds.config_source: ConfigSource must specify ads or self"),
            ),
            (
                rds(Some(core_pb::ConfigSource::default()), "r"),
                format!("{P}.rds.config_source: ConfigSource must specify ads or self"),
            ),
            (
                rds(Some(ads()), ""),
                format!("{P}.rds.route_config_name: must be non-empty"),
            ),
            (
                hcm_pb::HttpConnectionManager {
                    route_specifier: Some(RouteSpecifier::ScopedRoutes(Default::default())),
                    ..rds_hcm("r")
                },
                format!("{P}.scoped_routes: not supported"),
            ),
            (
                hcm_pb::HttpConnectionManager {
                    route_specifier: None,
                    ..rds_hcm("r")
                },
                format!("{P}: neither rds nor route_config is set"),
            ),
        ] {
            assert_eq!(hcm_err(&hcm), msg);
        }
    }

    #[test]
    fn hcm_field_errors() {
        let mut hcm = rds_hcm("r");
        hcm.xff_num_trusted_hops = 1;
        assert_eq!(
            hcm_err(&hcm),
            format!("{P}.xff_num_trusted_hops: must be zero")
        );
        let mut hcm = rds_hcm("r");
        hcm.original_ip_detection_extensions = vec![Default::default()];
        assert_eq!(
            hcm_err(&hcm),
            format!("{P}.original_ip_detection_extensions: must be empty")
        );
        let mut hcm = rds_hcm("r");
        hcm.common_http_protocol_options = Some(core_pb::HttpProtocolOptions {
            max_stream_duration: Some(pbuf::Duration {
                seconds: -1,
                nanos: 0,
            }),
            ..Default::default()
        });
        assert_eq!(
            hcm_err(&hcm),
            format!(
                "{P}.common_http_protocol_options.max_stream_duration.seconds: value -1 must \
                 be in the range [0, 315576000000]"
            )
        );
    }

    #[test]
    fn api_listener_errors() {
        let l = listener_pb::Listener {
            name: "lis".to_owned(),
            api_listener: Some(listener_pb::ApiListener { api_listener: None }),
            ..Default::default()
        };
        assert_eq!(err(&l), format!("{P}: field not present"));
        let l = listener_pb::Listener {
            name: "lis".to_owned(),
            api_listener: Some(listener_pb::ApiListener {
                api_listener: Some(any(
                    "type.googleapis.com/udpa.type.v1.TypedStruct",
                    &pbuf::Empty {},
                )),
            }),
            ..Default::default()
        };
        assert_eq!(
            err(&l),
            format!(
                "{P}.type_url: unsupported type \"type.googleapis.com/udpa.type.v1.TypedStruct\" \
                 (expected {HTTP_CONNECTION_MANAGER_TYPE_URL})"
            )
        );
        let l = listener_pb::Listener {
            name: "lis".to_owned(),
            api_listener: Some(listener_pb::ApiListener {
                api_listener: Some(pbuf::Any::default()),
            }),
            ..Default::default()
        };
        assert_eq!(err(&l), format!("{P}.type_url: field not present"));
        let l = listener_pb::Listener {
            name: "lis".to_owned(),
            ..Default::default()
        };
        assert_eq!(
            err(&l),
            "neither api_listener (client listener) nor address (server listener) is set"
        );
    }

    #[test]
    fn http_filters_are_validated() {
        let mut hcm = rds_hcm("r");
        let mut fault = filter("fault", FAULT_FILTER_TYPE_URL);
        fault.is_optional = true;
        hcm.http_filters = vec![
            fault,
            {
                let mut f = filter("opt-unknown", "type.googleapis.com/example.Unknown");
                f.is_optional = true;
                f
            },
            {
                let mut f = filter("opt-rbac", RBAC_FILTER_TYPE_URL);
                f.is_optional = true;
                f
            },
            hcm_pb::HttpFilter {
                name: "opt-ecds".to_owned(),
                is_optional: true,
                config_type: Some(hcm_pb::http_filter::ConfigType::ConfigDiscovery(
                    Default::default(),
                )),
                ..Default::default()
            },
            filter("session", STATEFUL_SESSION_FILTER_TYPE_URL),
            filter("authn", GCP_AUTHN_FILTER_TYPE_URL),
            router(),
        ];
        let filters = hcm_of(&client_listener(&hcm)).http_filters;
        let summary: Vec<(&str, &str, bool)> = filters
            .iter()
            .map(|f| (f.name.as_str(), f.config.type_url.as_str(), f.is_optional))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("fault", FAULT_FILTER_TYPE_URL, true),
                ("session", STATEFUL_SESSION_FILTER_TYPE_URL, false),
                ("authn", GCP_AUTHN_FILTER_TYPE_URL, false),
                ("router", ROUTER_FILTER_TYPE_URL, false),
            ]
        );
    }

    #[test]
    fn http_filter_errors() {
        let p = format!("{P}.http_filters");
        let cases: Vec<(Vec<hcm_pb::HttpFilter>, String)> = vec![
            (
                vec![],
                format!("{p}: expected at least one HTTP filter (the router)"),
            ),
            (
                vec![filter("", FAULT_FILTER_TYPE_URL), router()],
                format!("{p}[0].name: must be non-empty"),
            ),
            (
                vec![
                    filter("a", FAULT_FILTER_TYPE_URL),
                    filter("a", ROUTER_FILTER_TYPE_URL),
                ],
                format!("{p}[1].name: duplicate HTTP filter name \"a\""),
            ),
            (
                vec![filter("x", "type.googleapis.com/example.Unknown"), router()],
                format!(
                    "{p}[0].typed_config: unsupported filter type \
                     \"type.googleapis.com/example.Unknown\""
                ),
            ),
            (
                vec![filter("rbac", RBAC_FILTER_TYPE_URL), router()],
                format!(
                    "{p}[0].typed_config: filter type \"{RBAC_FILTER_TYPE_URL}\" is not \
                     supported on clients"
                ),
            ),
            (
                vec![router(), filter("fault", FAULT_FILTER_TYPE_URL)],
                format!(
                    "{p}[1]: the last HTTP filter must be the router ({ROUTER_FILTER_TYPE_URL}), \
                     found \"{FAULT_FILTER_TYPE_URL}\""
                ),
            ),
            (
                vec![
                    filter("r1", ROUTER_FILTER_TYPE_URL),
                    filter("fault", FAULT_FILTER_TYPE_URL),
                    router(),
                ],
                format!("{p}[0]: the router must be the last HTTP filter"),
            ),
            (
                vec![
                    hcm_pb::HttpFilter {
                        name: "no-config".to_owned(),
                        ..Default::default()
                    },
                    router(),
                ],
                format!("{p}[0].typed_config: field not present"),
            ),
            (
                vec![
                    hcm_pb::HttpFilter {
                        name: "ecds".to_owned(),
                        config_type: Some(hcm_pb::http_filter::ConfigType::ConfigDiscovery(
                            Default::default(),
                        )),
                        ..Default::default()
                    },
                    router(),
                ],
                format!("{p}[0].config_discovery: filter config discovery (ECDS) is not supported"),
            ),
            (
                vec![{
                    let mut f = filter("only-optional", "type.googleapis.com/example.Unknown");
                    f.is_optional = true;
                    f
                }],
                format!("{p}: expected at least one HTTP filter (the router)"),
            ),
            (
                vec![filter("bad-url", "no-slash"), router()],
                format!("{p}[0].typed_config.type_url: invalid type URL \"no-slash\""),
            ),
        ];
        for (filters, msg) in cases {
            let mut hcm = rds_hcm("r");
            hcm.http_filters = filters;
            assert_eq!(hcm_err(&hcm), msg);
        }
    }

    #[test]
    fn server_listener() {
        use core_pb::socket_address::PortSpecifier;
        let listener = |port: Option<PortSpecifier>| listener_pb::Listener {
            name: "lis".to_owned(),
            address: Some(core_pb::Address {
                address: Some(core_pb::address::Address::SocketAddress(
                    core_pb::SocketAddress {
                        address: "0.0.0.0".to_owned(),
                        port_specifier: port,
                        ..Default::default()
                    },
                )),
            }),
            filter_chains: vec![Default::default(), Default::default()],
            ..Default::default()
        };
        assert_eq!(
            decode_listener(&listener(Some(PortSpecifier::PortValue(8080))))
                .unwrap()
                .kind,
            ListenerKind::Server {
                address: "0.0.0.0".to_owned(),
                port: 8080,
                filter_chain_count: 2,
                has_default_filter_chain: false,
            }
        );
        assert_eq!(
            err(&listener(Some(PortSpecifier::PortValue(70_000)))),
            "address.socket_address.port_value: invalid port 70000"
        );
        assert_eq!(
            err(&listener(None)),
            "address.socket_address.port_value: field not present"
        );
        assert_eq!(
            err(&listener(Some(PortSpecifier::NamedPort("http".to_owned())))),
            "address.socket_address.named_port: not supported (use port_value)"
        );
        let pipe = listener_pb::Listener {
            name: "lis".to_owned(),
            address: Some(core_pb::Address {
                address: Some(core_pb::address::Address::Pipe(Default::default())),
            }),
            ..Default::default()
        };
        assert_eq!(err(&pipe), "address.socket_address: field not present");
    }

    #[test]
    fn supported_filter_table() {
        assert_eq!(
            supported_http_filter("envoy.extensions.filters.http.router.v3.Router")
                .map(|f| f.terminal),
            Some(true)
        );
        assert!(is_supported_filter_override(
            "envoy.extensions.filters.http.rbac.v3.RBACPerRoute"
        ));
        assert!(!is_supported_filter_override("example.Unknown"));
    }
}
