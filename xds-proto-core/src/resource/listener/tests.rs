//! Tests of the LDS decoder: every validation rule, with the exact error it reports.

use prost::Message;

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

/// A fault filter aborting with HTTP status 700 (out of range).
fn bad_fault_filter(is_optional: bool) -> hcm_pb::HttpFilter {
    use crate::pb::envoy::extensions::filters::http::fault::v3 as fault_pb;
    let fault = fault_pb::HttpFault {
        abort: Some(fault_pb::FaultAbort {
            error_type: Some(fault_pb::fault_abort::ErrorType::HttpStatus(700)),
            ..Default::default()
        }),
        ..Default::default()
    };
    hcm_pb::HttpFilter {
        name: "fault".to_owned(),
        config_type: Some(hcm_pb::http_filter::ConfigType::TypedConfig(any(
            FAULT_FILTER_TYPE_URL,
            &fault,
        ))),
        is_optional,
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
                    config: HttpFilterConfig::Router,
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
            config_source_specifier: Some(core_pb::config_source::ConfigSourceSpecifier::Self_(
                Default::default(),
            )),
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
                action: Some(route_pb::route::Action::Route(Box::new(
                    route_pb::RouteAction {
                        cluster_specifier: Some(route_pb::route_action::ClusterSpecifier::Cluster(
                            "c".to_owned(),
                        )),
                        ..Default::default()
                    },
                ))),
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
        route_specifier: Some(hcm_pb::http_connection_manager::RouteSpecifier::RouteConfig(bad)),
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
    let rds = |source: Option<core_pb::ConfigSource>, name: &str| hcm_pb::HttpConnectionManager {
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
        .map(|f| (f.name.as_str(), f.config.type_url(), f.is_optional))
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
        // The filter parses its config at decode time (A39): a bad one NACKs, even
        // when the filter is optional.
        (
            vec![bad_fault_filter(false), router()],
            format!(
                "{p}[0].typed_config.abort.http_status: value 700 must be in the range \
                 [200, 600)"
            ),
        ),
        (
            vec![bad_fault_filter(true), router()],
            format!(
                "{p}[0].typed_config.abort.http_status: value 700 must be in the range \
                 [200, 600)"
            ),
        ),
    ];
    for (filters, msg) in cases {
        let mut hcm = rds_hcm("r");
        hcm.http_filters = filters;
        assert_eq!(hcm_err(&hcm), msg);
    }
}

/// A server filter chain with no match and one HttpConnectionManager (routes over RDS).
fn server_chain() -> listener_pb::FilterChain {
    listener_pb::FilterChain {
        filters: vec![listener_pb::Filter {
            name: "hcm".to_owned(),
            config_type: Some(listener_pb::filter::ConfigType::TypedConfig(any(
                HTTP_CONNECTION_MANAGER_TYPE_URL,
                &rds_hcm("r"),
            ))),
        }],
        ..Default::default()
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
        filter_chains: vec![server_chain()],
        ..Default::default()
    };
    let chain = FilterChain {
        name: String::new(),
        filter_chain_match: FilterChainMatch::default(),
        http_connection_manager: hcm_of(&client_listener(&rds_hcm("r"))),
        tls: None,
    };
    assert_eq!(
        decode_listener(&listener(Some(PortSpecifier::PortValue(8080))))
            .unwrap()
            .kind,
        ListenerKind::Server(ServerListener {
            address: "0.0.0.0".to_owned(),
            port: 8080,
            filter_chains: vec![chain],
            default_filter_chain: None,
        })
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
        supported_http_filter("envoy.extensions.filters.http.router.v3.Router").map(|f| f.terminal),
        Some(true)
    );
}
