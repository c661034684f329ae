//! xDS-enabled servers (gRFC A36) in the core: each server listener rule accepted or
//! NACKed with its field path, the listener name from the bootstrap's template (A47),
//! filter chain selection (explicit cases and a quickcheck property against a reference
//! written here, over A36's normalized matchers), RPC routing, and the serving-mode
//! transitions a runtime observes.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use prost::Message;
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use xds_proto_core::pb::envoy::config::core::v3 as core_pb;
use xds_proto_core::pb::envoy::config::listener::v3 as listener_pb;
use xds_proto_core::pb::envoy::config::route::v3 as route_pb;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm_pb;
use xds_proto_core::pb::google::protobuf as pbuf;
use xds_proto_core::resource::listener::{
    self, CidrRange, FilterChain, FilterChainMatch, HttpConnectionManager, ListenerKind,
    RouteSource, ServerListener, SourceType,
};
use xds_proto_core::resource::route::RouteAction;
use xds_proto_core::server::{
    ConnectionAddrs, ListenerNameError, RpcRefusal, ServingEvent, ServingMode, ServingState,
    listener_name_from_template, route_rpc, select_filter_chain, server_listener_name,
};
use xds_proto_core::{
    Bootstrap, Code, ErrorKind, Lds, Rds, ResourceValue, Status, WatchEvent, XdsError,
};
use xds_proto_tests::fixtures::{
    self as kit, HCM_TYPE_URL, any, hcm_rds, hcm_with, non_forwarding, prefix, route_config_of,
    router_filter, routes_config, server_filter_chain, server_listener_msg, server_routes,
    to_cluster, vhost,
};

const ADDR: &str = "127.0.0.1:8080";

fn addr() -> SocketAddr {
    ADDR.parse().unwrap()
}

fn inline_hcm(routes: route_pb::RouteConfiguration) -> hcm_pb::HttpConnectionManager {
    hcm_with(
        hcm_pb::http_connection_manager::RouteSpecifier::RouteConfig(routes),
        None,
    )
}

/// A chain serving every RPC (inline routes) with this match.
fn chain(name: &str, m: Option<listener_pb::FilterChainMatch>) -> listener_pb::FilterChain {
    listener_pb::FilterChain {
        filter_chain_match: m,
        ..server_filter_chain(name, &inline_hcm(server_routes("routes")))
    }
}

fn listener_with(chains: Vec<listener_pb::FilterChain>) -> listener_pb::Listener {
    server_listener_msg("lis", addr(), chains)
}

fn decode(l: &listener_pb::Listener) -> Result<ServerListener, String> {
    let (_, value) = listener::decode(&l.encode_to_vec()).map_err(|e| e.message)?;
    match value.kind {
        ListenerKind::Server(server) => Ok(server),
        other => panic!("not a server listener: {other:?}"),
    }
}

fn nack(l: &listener_pb::Listener) -> String {
    decode(l).expect_err("expected a NACK")
}

fn cidr(address: &str, len: u32) -> core_pb::CidrRange {
    core_pb::CidrRange {
        address_prefix: address.to_owned(),
        prefix_len: Some(pbuf::UInt32Value { value: len }),
    }
}

fn hcm_filter(name: &str, hcm: &hcm_pb::HttpConnectionManager) -> listener_pb::Filter {
    listener_pb::Filter {
        name: name.to_owned(),
        config_type: Some(listener_pb::filter::ConfigType::TypedConfig(any(
            HCM_TYPE_URL,
            hcm,
        ))),
    }
}

fn http_filter(name: &str, type_url: &str, optional: bool) -> hcm_pb::HttpFilter {
    hcm_pb::HttpFilter {
        name: name.to_owned(),
        config_type: Some(hcm_pb::http_filter::ConfigType::TypedConfig(any(
            type_url,
            &pbuf::Empty {},
        ))),
        is_optional: optional,
        ..Default::default()
    }
}

// ----- validation --------------------------------------------------------------------

#[test]
fn a_server_listener_keeps_its_address_chains_and_non_forwarding_routes() {
    let mut rds = chain("rds", None);
    rds.filters = vec![hcm_filter("hcm", &hcm_rds("routes-a"))];
    rds.filter_chain_match = Some(listener_pb::FilterChainMatch {
        prefix_ranges: vec![cidr("10.1.2.3", 8)],
        source_type: 2,
        source_ports: vec![4000],
        ..Default::default()
    });
    let mut l = listener_with(vec![chain("inline", None), rds]);
    l.default_filter_chain = Some(chain("default", None));
    let server = decode(&l).unwrap();
    assert_eq!((server.address.as_str(), server.port), ("127.0.0.1", 8080));
    assert!(server.listens_on(addr()));
    assert!(!server.listens_on("127.0.0.1:8081".parse().unwrap()));
    assert_eq!(server.rds_names(), vec!["routes-a"]);
    let names: Vec<&str> = server.chains().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["inline", "rds", "default"]);
    let RouteSource::Inline(routes) = &server.filter_chains[0].http_connection_manager.route_config
    else {
        panic!("inline routes")
    };
    assert_eq!(
        routes.virtual_hosts[0].routes[0].action,
        RouteAction::NonForwarding
    );
    // The match is normalized: host bits cleared.
    assert_eq!(
        server.filter_chains[1].filter_chain_match,
        FilterChainMatch {
            prefix_ranges: vec![CidrRange::new("10.0.0.0".parse().unwrap(), 8)],
            source_type: SourceType::External,
            source_ports: vec![4000],
            ..Default::default()
        }
    );
    // A default chain alone is enough.
    let mut only_default = listener_with(vec![]);
    only_default.default_filter_chain = Some(chain("default", None));
    assert!(decode(&only_default).is_ok());
}

#[test]
fn listener_level_rules_are_nacked_with_their_field() {
    let mut l = listener_with(vec![chain("a", None)]);
    l.listener_filters = vec![Default::default()];
    assert_eq!(nack(&l), "listener_filters: must be empty");

    let mut l = listener_with(vec![chain("a", None)]);
    l.use_original_dst = Some(pbuf::BoolValue { value: true });
    assert_eq!(nack(&l), "use_original_dst: must not be true");
    l.use_original_dst = Some(pbuf::BoolValue { value: false });
    assert!(decode(&l).is_ok());

    assert_eq!(
        nack(&listener_with(vec![])),
        "filter_chains: no supported filter chains and no default filter chain"
    );

    let mut udp = listener_with(vec![chain("a", None)]);
    if let Some(core_pb::address::Address::SocketAddress(sa)) =
        udp.address.as_mut().and_then(|a| a.address.as_mut())
    {
        sa.protocol = core_pb::socket_address::Protocol::Udp as i32;
    }
    assert_eq!(nack(&udp), "address.socket_address.protocol: must be TCP");
}

#[test]
fn each_chain_needs_exactly_one_http_connection_manager() {
    let with_filters = |filters: Vec<listener_pb::Filter>| {
        let mut c = chain("c", None);
        c.filters = filters;
        listener_with(vec![c])
    };
    let hcm = inline_hcm(server_routes("r"));
    assert_eq!(
        nack(&with_filters(vec![])),
        "filter_chains[0].filters: expected exactly one network filter, the HttpConnectionManager"
    );
    assert_eq!(
        nack(&with_filters(vec![
            hcm_filter("a", &hcm),
            hcm_filter("b", &hcm)
        ])),
        "filter_chains[0].filters[1]: more than one HttpConnectionManager in the chain"
    );
    assert_eq!(
        nack(&with_filters(vec![
            hcm_filter("a", &hcm),
            hcm_filter("a", &hcm)
        ])),
        "filter_chains[0].filters[1].name: duplicate network filter name \"a\""
    );
    assert_eq!(
        nack(&with_filters(vec![hcm_filter("", &hcm)])),
        "filter_chains[0].filters[0].name: must be non-empty"
    );
    let other = listener_pb::Filter {
        name: "tcp".to_owned(),
        config_type: Some(listener_pb::filter::ConfigType::TypedConfig(any(
            "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            &pbuf::Empty {},
        ))),
    };
    assert_eq!(
        nack(&with_filters(vec![other, hcm_filter("a", &hcm)])),
        "filter_chains[0].filters[0].typed_config: unsupported network filter type \
         \"type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy\""
    );
    // The HCM's own rules, with the path through the chain.
    let mut no_router = hcm.clone();
    no_router.http_filters.clear();
    assert_eq!(
        nack(&with_filters(vec![hcm_filter("a", &no_router)])),
        "filter_chains[0].filters[0].typed_config.http_filters: expected at least one HTTP \
         filter (the router)"
    );
    let mut no_routes = hcm.clone();
    no_routes.route_specifier = None;
    assert_eq!(
        nack(&with_filters(vec![hcm_filter("a", &no_routes)])),
        "filter_chains[0].filters[0].typed_config: neither rds nor route_config is set"
    );
}

#[test]
fn a_server_runs_server_http_filters_and_refuses_client_ones() {
    let rbac = listener::RBAC_FILTER_TYPE_URL;
    let fault = listener::FAULT_FILTER_TYPE_URL;
    let server_with = |filters: Vec<hcm_pb::HttpFilter>| {
        let mut hcm = inline_hcm(server_routes("r"));
        hcm.http_filters = filters;
        let mut c = chain("c", None);
        c.filters = vec![hcm_filter("hcm", &hcm)];
        listener_with(vec![c])
    };
    let server = decode(&server_with(vec![
        http_filter("authz", rbac, false),
        router_filter(),
    ]))
    .unwrap();
    let kept: Vec<&str> = server.filter_chains[0]
        .http_connection_manager
        .http_filters
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(kept, ["authz", "envoy.filters.http.router"]);
    assert_eq!(
        nack(&server_with(vec![
            http_filter("fault", fault, false),
            router_filter()
        ])),
        format!(
            "filter_chains[0].filters[0].typed_config.http_filters[0].typed_config: filter \
             type {fault:?} is not supported on servers"
        )
    );
    // An optional client filter is skipped on servers.
    let server = decode(&server_with(vec![
        http_filter("fault", fault, true),
        router_filter(),
    ]))
    .unwrap();
    assert_eq!(
        server.filter_chains[0]
            .http_connection_manager
            .http_filters
            .len(),
        1
    );
    // Clients still refuse the server filter.
    let mut client = hcm_rds("r");
    client
        .http_filters
        .insert(0, http_filter("authz", rbac, false));
    let e = listener::decode(&kit::client_listener_msg("c", &client).encode_to_vec()).unwrap_err();
    assert_eq!(
        e.message,
        format!(
            "api_listener.api_listener.http_filters[0].typed_config: filter type {rbac:?} is \
             not supported on clients"
        )
    );
}

#[test]
fn routes_without_non_forwarding_action_are_accepted_and_fail_rpcs_later() {
    let routes = routes_config("r", vec![to_cluster(prefix("/"), "cluster")]);
    let mut c = chain("c", None);
    c.filters = vec![hcm_filter("hcm", &inline_hcm(routes))];
    let server = decode(&listener_with(vec![c])).expect("RDS validation is the client's");
    let RouteSource::Inline(routes) = &server.filter_chains[0].http_connection_manager.route_config
    else {
        panic!("inline")
    };
    let routed = route_rpc(
        routes,
        "any.example",
        "/svc/M",
        &Vec::<(String, String)>::new(),
        &mut || 0,
    )
    .unwrap();
    assert_eq!(routed.finish(), Err(RpcRefusal::NotNonForwarding));
}

#[test]
fn filter_chain_match_fields_are_validated() {
    let with_match = |m: listener_pb::FilterChainMatch| listener_with(vec![chain("c", Some(m))]);
    assert_eq!(
        nack(&with_match(listener_pb::FilterChainMatch {
            prefix_ranges: vec![cidr("10.0.0.0", 8), cidr("ten", 8)],
            ..Default::default()
        })),
        "filter_chains[0].filter_chain_match.prefix_ranges[1].address_prefix: not an IP \
         address: \"ten\""
    );
    assert_eq!(
        nack(&with_match(listener_pb::FilterChainMatch {
            source_prefix_ranges: vec![cidr("", 0)],
            ..Default::default()
        })),
        "filter_chains[0].filter_chain_match.source_prefix_ranges[0].address_prefix: not an \
         IP address: \"\""
    );
    assert_eq!(
        nack(&with_match(listener_pb::FilterChainMatch {
            source_type: 7,
            ..Default::default()
        })),
        "filter_chains[0].filter_chain_match.source_type: unknown source type 7"
    );
    // prefix_len is clamped to the family's width; absent means 0.
    let server = decode(&with_match(listener_pb::FilterChainMatch {
        prefix_ranges: vec![
            cidr("10.1.2.3", 40),
            cidr("fd00::1", 200),
            core_pb::CidrRange {
                address_prefix: "192.168.1.1".to_owned(),
                prefix_len: None,
            },
        ],
        ..Default::default()
    }))
    .unwrap();
    let lens: Vec<(IpAddr, u8)> = server.filter_chains[0]
        .filter_chain_match
        .prefix_ranges
        .iter()
        .map(|r| (r.address(), r.prefix_len()))
        .collect();
    assert_eq!(
        lens,
        [
            ("10.1.2.3".parse().unwrap(), 32),
            ("fd00::1".parse().unwrap(), 128),
            ("0.0.0.0".parse().unwrap(), 0),
        ]
    );
}

#[test]
fn duplicate_matchers_after_normalization_are_nacked() {
    let m = |prefixes: Vec<core_pb::CidrRange>| listener_pb::FilterChainMatch {
        prefix_ranges: prefixes,
        ..Default::default()
    };
    let dup = "filter_chains[1].filter_chain_match: multiple filter chains with overlapping \
               matching rules are defined (overlaps filter_chains[0])";
    // Two chains without a match.
    assert_eq!(
        nack(&listener_with(vec![chain("a", None), chain("b", None)])),
        dup
    );
    // One normalized matcher in common: 10.1.2.3/8 is 10.0.0.0/8.
    assert_eq!(
        nack(&listener_with(vec![
            chain(
                "a",
                Some(m(vec![cidr("192.168.0.0", 16), cidr("10.0.0.0", 8)]))
            ),
            chain("b", Some(m(vec![cidr("10.1.2.3", 8)]))),
        ])),
        dup
    );
    // An unset prefix is not 0.0.0.0/0, and different source types are different.
    assert!(
        decode(&listener_with(vec![
            chain("a", None),
            chain("b", Some(m(vec![cidr("0.0.0.0", 0)]))),
            chain(
                "c",
                Some(listener_pb::FilterChainMatch {
                    source_type: 1,
                    ..Default::default()
                })
            ),
        ]))
        .is_ok()
    );
    // Matchers that can never match are pruned first, as gRPC-Go and C-core do (more
    // cases, ported from gRPC-Go, in server_filter_chains.rs).
    let server_names = |names: &[&str]| listener_pb::FilterChainMatch {
        server_names: names.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    assert!(
        decode(&listener_with(vec![
            chain("a", Some(server_names(&["x", "y"]))),
            chain("b", Some(server_names(&["y"]))),
            chain("c", None),
        ]))
        .is_ok()
    );
    // The product is bounded before it is enumerated.
    let huge = listener_pb::FilterChainMatch {
        source_ports: (1..=300).collect(),
        prefix_ranges: (0..=255)
            .map(|i| cidr(&format!("10.0.{i}.0"), 24))
            .collect(),
        ..Default::default()
    };
    assert_eq!(
        nack(&listener_with(vec![chain("a", Some(huge))])),
        format!(
            "filter_chains: the filter chain matchers expand to 76800 normalized matchers (at \
             most {})",
            listener::MAX_NORMALIZED_MATCHERS
        )
    );
}

// ----- the listener name ---------------------------------------------------------------

#[test]
fn the_listener_name_comes_from_the_template() {
    let v6: SocketAddr = "[::]:8080".parse().unwrap();
    let v4: SocketAddr = "0.0.0.0:8080".parse().unwrap();
    let t = kit::SERVER_LISTENER_TEMPLATE;
    assert_eq!(
        listener_name_from_template(t, v6),
        "grpc/server?xds.resource.listening_address=[::]:8080"
    );
    assert_eq!(listener_name_from_template("fixed", v4), "fixed");
    let xdstp = "xdstp://xds.authority.com/envoy.config.listener.v3.Listener/grpc/server/%s";
    assert_eq!(
        listener_name_from_template(xdstp, v4),
        "xdstp://xds.authority.com/envoy.config.listener.v3.Listener/grpc/server/0.0.0.0:8080"
    );
    assert_eq!(
        listener_name_from_template(xdstp, v6),
        "xdstp://xds.authority.com/envoy.config.listener.v3.Listener/grpc/server/%5B::%5D:8080"
    );

    let bootstrap = |extra: &str| {
        Bootstrap::from_json_str(&format!(
            r#"{{"xds_servers": [{{"server_uri": "xds.example:443", "channel_creds": [{{"type": "insecure"}}]}}]{extra}}}"#
        ))
        .unwrap()
    };
    let missing = server_listener_name(&bootstrap(""), v4).unwrap_err();
    assert_eq!(missing, ListenerNameError::MissingTemplate);
    assert_eq!(
        missing.to_string(),
        "server_listener_resource_name_template: not set in the bootstrap; an xDS-enabled \
         server needs it"
    );
    let with = |template: &str, authorities: &str| {
        bootstrap(&format!(
            r#", "server_listener_resource_name_template": "{template}"{authorities}"#
        ))
    };
    assert_eq!(
        server_listener_name(&with(t, ""), v4).unwrap(),
        "grpc/server?xds.resource.listening_address=0.0.0.0:8080"
    );
    assert_eq!(
        server_listener_name(&with(xdstp, ""), v4),
        Err(ListenerNameError::UnknownAuthority(
            "xds.authority.com".into()
        ))
    );
    assert!(
        server_listener_name(
            &with(xdstp, r#", "authorities": {"xds.authority.com": {}}"#),
            v4
        )
        .is_ok()
    );
}

// ----- filter chain selection ------------------------------------------------------------

fn manager() -> HttpConnectionManager {
    HttpConnectionManager {
        route_config: RouteSource::Rds("r".into()),
        http_filters: Vec::new(),
        max_stream_duration: None,
    }
}

fn fc(name: &str, m: FilterChainMatch) -> FilterChain {
    FilterChain {
        name: name.into(),
        filter_chain_match: m,
        http_connection_manager: manager(),
        tls: None,
    }
}

fn range(s: &str) -> CidrRange {
    let (a, l) = s.split_once('/').unwrap();
    CidrRange::new(a.parse().unwrap(), l.parse().unwrap())
}

fn conn(local: &str, peer: &str) -> ConnectionAddrs {
    ConnectionAddrs {
        local: local.parse().unwrap(),
        peer: peer.parse().unwrap(),
    }
}

fn picked(l: &ServerListener, c: ConnectionAddrs) -> Option<&str> {
    select_filter_chain(l, c).map(|c| c.name.as_str())
}

#[test]
fn the_most_specific_chain_wins_stage_by_stage_without_going_back() {
    let l = ServerListener {
        address: "0.0.0.0".into(),
        port: 8080,
        filter_chains: vec![
            fc("any", FilterChainMatch::default()),
            fc(
                "dst/8",
                FilterChainMatch {
                    prefix_ranges: vec![range("10.0.0.0/8")],
                    ..Default::default()
                },
            ),
            fc(
                "dst/16 port 1000",
                FilterChainMatch {
                    prefix_ranges: vec![range("10.1.0.0/16")],
                    source_ports: vec![1000],
                    ..Default::default()
                },
            ),
            fc(
                "loopback",
                FilterChainMatch {
                    prefix_ranges: vec![range("127.0.0.0/8")],
                    source_type: SourceType::SameIpOrLoopback,
                    ..Default::default()
                },
            ),
            fc(
                "never (server_names)",
                FilterChainMatch {
                    prefix_ranges: vec![range("10.2.0.0/16")],
                    server_names: vec!["x".into()],
                    ..Default::default()
                },
            ),
        ],
        default_filter_chain: Some(Box::new(fc("default", FilterChainMatch::default()))),
    };
    assert_eq!(
        picked(&l, conn("10.1.2.3:8080", "10.9.9.9:1000")),
        Some("dst/16 port 1000")
    );
    // /16 is the most specific destination; its source port does not match and there is
    // no going back to /8: the default chain.
    assert_eq!(
        picked(&l, conn("10.1.2.3:8080", "10.9.9.9:2000")),
        Some("default")
    );
    assert_eq!(
        picked(&l, conn("10.5.0.1:8080", "10.9.9.9:2000")),
        Some("dst/8")
    );
    // A chain that can never match still takes its destination, then fails (gRPC-Go,
    // C-core, Envoy): the default chain.
    assert_eq!(
        picked(&l, conn("10.2.0.1:8080", "10.9.9.9:2000")),
        Some("default")
    );
    assert_eq!(
        picked(&l, conn("127.0.0.1:8080", "127.0.0.1:5555")),
        Some("loopback")
    );
    assert_eq!(
        picked(&l, conn("[fd00::1]:8080", "[fd00::2]:1")),
        Some("any")
    );
    // An IPv4-mapped address matches IPv4 ranges.
    assert_eq!(
        picked(&l, conn("[::ffff:10.1.2.3]:8080", "[::ffff:10.9.9.9]:1000")),
        Some("dst/16 port 1000")
    );
    let no_default = ServerListener {
        default_filter_chain: None,
        ..l.clone()
    };
    assert_eq!(
        picked(&no_default, conn("10.1.2.3:8080", "10.9.9.9:2000")),
        None
    );
}

#[test]
fn source_type_prefers_the_connections_own_type_over_any() {
    let l = ServerListener {
        address: "0.0.0.0".into(),
        port: 8080,
        filter_chains: vec![
            fc("any", FilterChainMatch::default()),
            fc(
                "external",
                FilterChainMatch {
                    source_type: SourceType::External,
                    ..Default::default()
                },
            ),
        ],
        default_filter_chain: None,
    };
    assert_eq!(
        picked(&l, conn("10.0.0.1:1", "10.0.0.2:1")),
        Some("external")
    );
    assert_eq!(
        picked(&l, conn("10.0.0.1:1", "10.0.0.1:2")),
        Some("any"),
        "same IP"
    );
    assert_eq!(
        picked(&l, conn("10.0.0.1:1", "127.0.0.5:2")),
        Some("any"),
        "loopback"
    );
}

/// A small random listener and connection, for the property below.
#[derive(Clone, Debug)]
struct Case {
    chains: Vec<RefChain>,
    has_default: bool,
    local: SocketAddr,
    peer: SocketAddr,
}

#[derive(Clone, Debug)]
struct RefChain {
    dst: Vec<(IpAddr, u8)>,
    transport: &'static str,
    source_type: u8,
    src: Vec<(IpAddr, u8)>,
    ports: Vec<u16>,
    server_name: bool,
    alpn: bool,
}

const RANGES: &[(&str, u8)] = &[
    ("0.0.0.0", 0),
    ("10.0.0.0", 8),
    ("10.1.0.0", 16),
    ("10.1.2.0", 24),
    ("10.1.2.3", 32),
    ("127.0.0.0", 8),
    ("::", 0),
    ("fd00::", 8),
    ("fd00::1", 128),
];
const IPS: &[&str] = &[
    "10.1.2.3",
    "10.1.9.9",
    "10.7.7.7",
    "127.0.0.1",
    "192.168.1.1",
    "fd00::1",
    "fd00::2",
    "::1",
    "::ffff:10.1.2.3",
];

fn pick<T: Copy>(g: &mut Gen, items: &[T]) -> T {
    *g.choose(items).unwrap()
}

fn ranges(g: &mut Gen) -> Vec<(IpAddr, u8)> {
    let n = pick(g, &[0usize, 0, 1, 1, 2]);
    (0..n)
        .map(|_| {
            let (a, l) = pick(g, RANGES);
            (a.parse().unwrap(), l)
        })
        .collect()
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Case {
        let n = pick(g, &[1usize, 2, 3, 4, 5, 6]);
        let chains = (0..n)
            .map(|_| RefChain {
                dst: ranges(g),
                transport: pick(g, &["", "", "raw_buffer", "tls"]),
                source_type: pick(g, &[0u8, 0, 1, 2]),
                src: ranges(g),
                ports: (0..pick(g, &[0usize, 0, 1, 2]))
                    .map(|_| pick(g, &[1000u16, 2000, 1000, 0]))
                    .collect(),
                server_name: pick(g, &[false, false, false, true]),
                alpn: pick(g, &[false, false, false, true]),
            })
            .collect();
        let ip = |g: &mut Gen| -> IpAddr { pick(g, IPS).parse().unwrap() };
        Case {
            chains,
            has_default: bool::arbitrary(g),
            local: SocketAddr::new(ip(g), 8080),
            peer: SocketAddr::new(ip(g), pick(g, &[1000u16, 2000, 3000])),
        }
    }
}

/// One normalized matcher: (chain, destination, transport, source type, source, port).
type Tuple = (
    usize,
    Option<(IpAddr, u8)>,
    &'static str,
    u8,
    Option<(IpAddr, u8)>,
    Option<u16>,
);

fn in_range(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    let bits = |ip: IpAddr| -> (bool, u128) {
        match ip.to_canonical() {
            IpAddr::V4(v4) => (true, u128::from(u32::from(v4)) << 96),
            IpAddr::V6(v6) => (false, u128::from(v6)),
        }
    };
    let ((v4, a), (net_v4, b)) = (bits(ip), bits(net));
    let len = if net_v4 {
        u32::from(len.min(32))
    } else {
        u32::from(len)
    };
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    v4 == net_v4 && a & mask == b & mask
}

fn tuples(case: &Case) -> Vec<Tuple> {
    let opt = |v: &[(IpAddr, u8)]| -> Vec<Option<(IpAddr, u8)>> {
        if v.is_empty() {
            vec![None]
        } else {
            v.iter().map(|r| Some(normalize(*r))).collect()
        }
    };
    let mut out = Vec::new();
    for (i, c) in case.chains.iter().enumerate() {
        let ports: Vec<Option<u16>> = if c.ports.is_empty() {
            vec![None]
        } else {
            c.ports.iter().map(|p| Some(*p)).collect()
        };
        for d in opt(&c.dst) {
            for s in opt(&c.src) {
                for &p in &ports {
                    out.push((i, d, c.transport, c.source_type, s, p));
                }
            }
        }
    }
    out
}

fn normalize((ip, len): (IpAddr, u8)) -> (IpAddr, u8) {
    // Both pools hold network addresses already; normalization only matters for the
    // duplicate check, which compares (address, length).
    (ip, len)
}

/// Whether two chains share a normalized matcher among those gRPC keeps: not of a chain
/// with server names, application protocols or `tls`, nor unset under a destination
/// where a `raw_buffer` chain (without server names) is. Port 0 is "any port".
fn has_duplicates(case: &Case) -> bool {
    let all = tuples(case);
    let raw_buffer_at = |d: Option<(IpAddr, u8)>| {
        all.iter()
            .any(|u| u.1 == d && u.2 == "raw_buffer" && !case.chains[u.0].server_name)
    };
    let kept: Vec<&Tuple> = all
        .iter()
        .filter(|t| {
            let c = &case.chains[t.0];
            let shadowed = t.2.is_empty() && raw_buffer_at(t.1);
            !(c.server_name || c.alpn || t.2 == "tls" || shadowed)
        })
        .collect();
    let key = |t: &Tuple| (t.1, t.3, t.4, t.5.filter(|&p| p != 0));
    kept.iter()
        .any(|a| kept.iter().any(|b| a.0 != b.0 && key(a) == key(b)))
}

/// The reference: narrow the normalized matchers field by field.
fn reference(case: &Case) -> Option<String> {
    let rank = |r: Option<(IpAddr, u8)>, ip: IpAddr| match r {
        None => Some(-1),
        Some(r) => in_range(ip, r).then_some(i32::from(r.1)),
    };
    let keep_max = |ts: Vec<Tuple>, f: &dyn Fn(&Tuple) -> Option<i32>| -> Vec<Tuple> {
        let best = ts.iter().filter_map(f).max();
        ts.into_iter()
            .filter(|t| best.is_some() && f(t) == best)
            .collect()
    };
    let (local, peer) = (case.local.ip(), case.peer.ip());
    // Every chain takes part in the destination stage, then the fields a connection
    // cannot match (no SNI, transport `raw_buffer`, no ALPN) narrow the survivors.
    let ts = keep_max(tuples(case), &|t| rank(t.1, local));
    let ts: Vec<Tuple> = ts
        .into_iter()
        .filter(|t| !case.chains[t.0].server_name)
        .collect();
    let ts = keep_max(ts, &|t| match t.2 {
        "raw_buffer" => Some(1),
        "" => Some(0),
        _ => None,
    });
    let ts: Vec<Tuple> = ts.into_iter().filter(|t| !case.chains[t.0].alpn).collect();
    let peer_c = peer.to_canonical();
    let own = if peer_c.is_loopback() || peer_c == local.to_canonical() {
        1
    } else {
        2
    };
    let ts: Vec<Tuple> = if ts.iter().any(|t| t.3 == own) {
        ts.into_iter().filter(|t| t.3 == own).collect()
    } else {
        ts.into_iter().filter(|t| t.3 == 0).collect()
    };
    let ts = keep_max(ts, &|t| rank(t.4, peer));
    let port = case.peer.port();
    let ts: Vec<Tuple> = if ts.iter().any(|t| t.5 == Some(port)) {
        ts.into_iter().filter(|t| t.5 == Some(port)).collect()
    } else {
        ts.into_iter()
            .filter(|t| t.5.is_none() || t.5 == Some(0))
            .collect()
    };
    match ts.first() {
        Some(t) => Some(format!("c{}", t.0)),
        None => case.has_default.then(|| "default".to_owned()),
    }
}

fn to_listener(case: &Case) -> ServerListener {
    let cidrs = |v: &[(IpAddr, u8)]| {
        v.iter()
            .map(|(a, l)| CidrRange::new(*a, u32::from(*l)))
            .collect()
    };
    ServerListener {
        address: "0.0.0.0".into(),
        port: 8080,
        filter_chains: case
            .chains
            .iter()
            .enumerate()
            .map(|(i, c)| {
                fc(
                    &format!("c{i}"),
                    FilterChainMatch {
                        prefix_ranges: cidrs(&c.dst),
                        transport_protocol: c.transport.into(),
                        source_type: [
                            SourceType::Any,
                            SourceType::SameIpOrLoopback,
                            SourceType::External,
                        ][usize::from(c.source_type)],
                        source_prefix_ranges: cidrs(&c.src),
                        source_ports: c.ports.iter().map(|p| u32::from(*p)).collect(),
                        server_names: if c.server_name {
                            vec!["s".into()]
                        } else {
                            vec![]
                        },
                        application_protocols: if c.alpn { vec!["h2".into()] } else { vec![] },
                        ..Default::default()
                    },
                )
            })
            .collect(),
        default_filter_chain: case
            .has_default
            .then(|| Box::new(fc("default", FilterChainMatch::default()))),
    }
}

/// Whether `listener` picks, for the case's connection, the chain the reference picks.
fn selects_as_reference(listener: &ServerListener, case: &Case) -> TestResult {
    let addrs = ConnectionAddrs {
        local: case.local,
        peer: case.peer,
    };
    let got = select_filter_chain(listener, addrs).map(|c| c.name.clone());
    TestResult::from_bool(got == reference(case))
}

#[test]
fn selection_agrees_with_the_normalized_reference() {
    fn prop(case: Case) -> TestResult {
        if has_duplicates(&case) {
            return TestResult::discard();
        }
        selects_as_reference(&to_listener(&case), &case)
    }
    QuickCheck::new()
        .tests(3000)
        .min_tests_passed(1000)
        .max_tests(30_000)
        .quickcheck(prop as fn(Case) -> TestResult);
}

/// The Listener message of a case, to go through validation.
fn to_proto(case: &Case) -> listener_pb::Listener {
    let cidrs = |v: &[(IpAddr, u8)]| {
        v.iter()
            .map(|(a, l)| cidr(&a.to_string(), u32::from(*l)))
            .collect()
    };
    let strings = |on: bool, s: &str| if on { vec![s.to_owned()] } else { vec![] };
    let chains = case
        .chains
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let m = listener_pb::FilterChainMatch {
                prefix_ranges: cidrs(&c.dst),
                transport_protocol: c.transport.into(),
                source_type: i32::from(c.source_type),
                source_prefix_ranges: cidrs(&c.src),
                source_ports: c.ports.iter().map(|p| u32::from(*p)).collect(),
                server_names: strings(c.server_name, "s"),
                application_protocols: strings(c.alpn, "h2"),
                ..Default::default()
            };
            chain(&format!("c{i}"), Some(m))
        })
        .collect();
    let mut l = listener_with(chains);
    l.default_filter_chain = case.has_default.then(|| chain("default", None));
    l
}

/// What validation accepts has one most specific chain for every connection: no two
/// chains share a normalized matcher that gRPC keeps, and selection agrees with the
/// reference.
#[test]
fn accepted_listeners_select_one_chain() {
    fn prop(case: Case) -> TestResult {
        let Ok(listener) = decode(&to_proto(&case)) else {
            return TestResult::discard();
        };
        if has_duplicates(&case) {
            return TestResult::error(format!("accepted with duplicates: {case:?}"));
        }
        selects_as_reference(&listener, &case)
    }
    QuickCheck::new()
        .tests(1000)
        .min_tests_passed(300)
        .max_tests(30_000)
        .quickcheck(prop as fn(Case) -> TestResult);
}

// ----- routing ---------------------------------------------------------------------------

#[test]
fn rpcs_route_by_authority_and_path() {
    let rc = route_config_of(
        "r",
        vec![
            vhost(
                "api",
                &["api.example"],
                vec![
                    non_forwarding(prefix("/svc.A/")),
                    to_cluster(prefix("/svc.B/"), "c"),
                ],
            ),
            vhost(
                "other",
                &["other.example"],
                vec![non_forwarding(prefix("/"))],
            ),
        ],
    );
    let rc = kit::decode_rc(&rc).unwrap();
    let md: Vec<(String, String)> = Vec::new();
    let rng = &mut || 0u32;
    let routed = route_rpc(&rc, "api.example", "/svc.A/M", &md, rng).unwrap();
    assert_eq!(routed.virtual_host.name, "api");
    assert_eq!(routed.finish(), Ok(()));
    let routed = route_rpc(&rc, "api.example", "/svc.B/M", &md, rng).unwrap();
    assert_eq!(routed.finish(), Err(RpcRefusal::NotNonForwarding));
    assert_eq!(
        route_rpc(&rc, "api.example", "/svc.C/M", &md, rng).unwrap_err(),
        RpcRefusal::NoRoute
    );
    assert_eq!(
        route_rpc(&rc, "nobody.example", "/svc.A/M", &md, rng).unwrap_err(),
        RpcRefusal::NoVirtualHost
    );
}

// ----- serving modes ---------------------------------------------------------------------

fn listener_event(l: &listener_pb::Listener) -> WatchEvent {
    let (_, value) = listener::decode(&l.encode_to_vec()).unwrap();
    WatchEvent::Changed(Ok(ResourceValue::new::<Lds>(value)))
}

fn routes_event(rc: &route_pb::RouteConfiguration) -> WatchEvent {
    WatchEvent::Changed(Ok(ResourceValue::new::<Rds>(kit::decode_rc(rc).unwrap())))
}

fn error(kind: ErrorKind, code: Code, message: &str) -> XdsError {
    XdsError {
        kind,
        status: Status::new(code, message),
    }
}

fn does_not_exist(name: &str) -> WatchEvent {
    WatchEvent::Changed(Err(error(
        ErrorKind::DoesNotExist,
        Code::NOT_FOUND,
        &format!("{name} does not exist"),
    )))
}

fn events(s: &mut ServingState) -> Vec<ServingEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn rds_listener(route_name: &str) -> listener_pb::Listener {
    let mut c = chain("c", None);
    c.filters = vec![hcm_filter("hcm", &hcm_rds(route_name))];
    listener_with(vec![c])
}

fn serving() -> ServingEvent {
    ServingEvent::ModeChanged(ServingMode::Serving)
}

fn not_serving(s: &ServingState) -> String {
    match s.mode() {
        ServingMode::NotServing(reason) => reason.clone(),
        ServingMode::Serving => panic!("serving"),
    }
}

#[test]
fn an_inline_listener_serves_at_once_and_stops_when_deleted() {
    let mut s = ServingState::new(addr());
    assert_eq!(not_serving(&s), "waiting for the listener resource");
    s.on_listener(&listener_event(&listener_with(vec![chain("c", None)])));
    assert_eq!(
        events(&mut s),
        [ServingEvent::ListenerApplied { generation: 1 }, serving()]
    );
    let config = Arc::clone(s.config().unwrap());
    let chain = config
        .select_filter_chain(conn("127.0.0.1:8080", "127.0.0.1:5000"))
        .unwrap();
    assert!(config.routes_for(chain).is_ok());
    // Ambient errors keep the last good listener (A88).
    s.on_listener(&WatchEvent::AmbientError(error(
        ErrorKind::Connectivity,
        Code::UNAVAILABLE,
        "xDS server unreachable",
    )));
    assert_eq!(events(&mut s), []);
    assert_eq!(s.mode(), &ServingMode::Serving);
    // Deletion (does-not-exist) stops serving.
    s.on_listener(&does_not_exist("lis"));
    assert_eq!(
        events(&mut s),
        [ServingEvent::ModeChanged(ServingMode::NotServing(
            "listener: NOT_FOUND: lis does not exist".into()
        ))]
    );
    assert!(s.config().is_none());
}

#[test]
fn rds_listeners_wait_for_their_routes() {
    let mut s = ServingState::new(addr());
    s.on_listener(&listener_event(&rds_listener("routes-a")));
    assert_eq!(
        events(&mut s),
        [ServingEvent::WatchRoutes("routes-a".into())]
    );
    assert!(matches!(s.mode(), ServingMode::NotServing(_)));
    // Another name's event is ignored.
    s.on_route_config("routes-x", &routes_event(&server_routes("routes-x")));
    assert_eq!(events(&mut s), []);
    s.on_route_config("routes-a", &routes_event(&server_routes("routes-a")));
    assert_eq!(
        events(&mut s),
        [ServingEvent::ListenerApplied { generation: 1 }, serving()]
    );
    let config = Arc::clone(s.config().unwrap());
    let c = &config.listener.filter_chains[0];
    assert_eq!(config.routes_for(c).unwrap().name, "routes-a");

    // An RDS update applies in place: same generation.
    let updated = routes_config("routes-a", vec![to_cluster(prefix("/"), "cl")]);
    s.on_route_config("routes-a", &routes_event(&updated));
    assert_eq!(events(&mut s), []);
    let config = Arc::clone(s.config().unwrap());
    assert_eq!(config.generation, 1);
    let c = &config.listener.filter_chains[0];
    assert!(matches!(
        config.routes_for(c).unwrap().virtual_hosts[0].routes[0].action,
        RouteAction::Forward(_)
    ));
    assert_eq!(
        config.config_errors().len(),
        1,
        "{:?}",
        config.config_errors()
    );

    // A listener update naming another RDS waits for it, still serving the old one.
    s.on_listener(&listener_event(&rds_listener("routes-b")));
    assert_eq!(
        events(&mut s),
        [ServingEvent::WatchRoutes("routes-b".into())]
    );
    assert_eq!(s.config().unwrap().generation, 1);
    let mut names: Vec<&str> = s.watched_routes().collect();
    names.sort_unstable();
    assert_eq!(names, ["routes-a", "routes-b"]);
    s.on_route_config("routes-b", &does_not_exist("routes-b"));
    assert_eq!(
        events(&mut s),
        [
            ServingEvent::UnwatchRoutes("routes-a".into()),
            ServingEvent::ListenerApplied { generation: 2 },
        ]
    );
    // Serving, and the chain whose RDS does not exist fails RPCs UNAVAILABLE.
    assert_eq!(s.mode(), &ServingMode::Serving);
    let config = Arc::clone(s.config().unwrap());
    let c = &config.listener.filter_chains[0];
    assert_eq!(
        config.routes_for(c).unwrap_err(),
        RpcRefusal::NoRouteConfiguration("NOT_FOUND: routes-b does not exist".into())
    );
    // The route configuration arrives later: RPCs are served.
    s.on_route_config("routes-b", &routes_event(&server_routes("routes-b")));
    let config = Arc::clone(s.config().unwrap());
    assert!(config.routes_for(&config.listener.filter_chains[0]).is_ok());
}

#[test]
fn the_wrong_address_or_a_client_listener_means_not_serving() {
    let mut s = ServingState::new("127.0.0.1:9090".parse().unwrap());
    s.on_listener(&listener_event(&listener_with(vec![chain("c", None)])));
    assert_eq!(
        not_serving(&s),
        "the listener's address 127.0.0.1:8080 does not match the listening address \
         127.0.0.1:9090"
    );
    let mut s = ServingState::new(addr());
    s.on_listener(&listener_event(&listener_with(vec![chain("c", None)])));
    events(&mut s);
    s.on_listener(&listener_event(&kit::client_listener_msg(
        "lis",
        &hcm_rds("r"),
    )));
    assert_eq!(
        not_serving(&s),
        "listener \"lis\" is not a server listener (it has no address)"
    );
    // An error before any listener keeps NOT_SERVING with that reason.
    let mut s = ServingState::new(addr());
    s.on_listener(&WatchEvent::AmbientError(error(
        ErrorKind::Connectivity,
        Code::UNAVAILABLE,
        "unreachable",
    )));
    assert_eq!(not_serving(&s), "listener: UNAVAILABLE: unreachable");
}

// ----- server HTTP filters (RBAC) per route ----------------------------------------------

/// The server filters of each route of the one chain of the state's configuration,
/// as the names of the RBAC filters they run (by routing an RPC to each path).
fn rbac_names(s: &ServingState, paths: &[&str]) -> Vec<Vec<String>> {
    use xds_proto_core::filter::server::ServerFilter;
    let config = s.config().unwrap();
    let chain = config.listener.chains().next().unwrap();
    let index = config.chain_index(chain).unwrap();
    let routes = config.routes_for(chain).unwrap();
    let rng = &mut xds_proto_core::selector::Seeded(1);
    paths
        .iter()
        .map(|path| {
            let md: [(&str, &str); 0] = [];
            let routed = route_rpc(routes, "any.example", path, &md[..], rng).unwrap();
            config
                .server_filters(index, &routed)
                .map(|f| {
                    f.filters()
                        .iter()
                        .filter_map(|f| match f {
                            ServerFilter::Rbac(r) => Some(r.name().to_owned()),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn rbac_filters_are_merged_per_route_when_the_routes_are_applied() {
    let rules = kit::rbac_rules(
        kit::RbacAction::Allow,
        vec![(
            "p",
            kit::rbac_policy(vec![kit::any_permission()], vec![kit::any_principal()]),
        )],
    );
    let mut manager = hcm_rds("routes-a");
    manager.http_filters = vec![kit::rbac_filter("authz", rules), router_filter()];
    let mut c = chain("c", None);
    c.filters = vec![hcm_filter("hcm", &manager)];
    let mut s = ServingState::new(addr());
    s.on_listener(&listener_event(&listener_with(vec![c])));
    let mut open = non_forwarding(prefix("/open"));
    open.typed_per_filter_config
        .insert("authz".into(), kit::rbac_per_route(None));
    let rc = routes_config("routes-a", vec![open, non_forwarding(prefix("/"))]);
    s.on_route_config("routes-a", &routes_event(&rc));
    let authz = vec!["authz".to_owned()];
    // The route whose RBACPerRoute has no rbac runs nothing.
    assert_eq!(
        rbac_names(&s, &["/open/M", "/svc/M"]),
        [vec![], authz.clone()]
    );
    // An RDS update re-merges: the override is gone, both routes run the filter.
    let rc = routes_config(
        "routes-a",
        vec![non_forwarding(prefix("/open")), non_forwarding(prefix("/"))],
    );
    s.on_route_config("routes-a", &routes_event(&rc));
    assert_eq!(
        rbac_names(&s, &["/open/M", "/svc/M"]),
        [authz.clone(), authz]
    );
}
