//! Server listener filter chains against gRPC-Go's own cases: the table of Listeners
//! gRPC-Go accepts or NACKs (ported from `xdsresource/filter_chain_test.go`:
//! `TestNewFilterChainImpl_*` and `TestLookup_*`), run through our decoder and
//! `select_filter_chain`. Where we part from gRPC-Go on purpose, the case says so.

use std::net::SocketAddr;

use prost::Message;
use xds_proto_core::pb::envoy::config::core::v3 as core_pb;
use xds_proto_core::pb::envoy::config::listener::v3 as listener_pb;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm_pb;
use xds_proto_core::pb::google::protobuf as pbuf;
use xds_proto_core::resource::listener::{self, ListenerKind, ServerListener};
use xds_proto_core::server::{ConnectionAddrs, ServingMode, ServingState, select_filter_chain};
use xds_proto_core::{Lds, Rds, ResourceValue, WatchEvent};
use xds_proto_tests::fixtures::{
    self as kit, hcm_rds, hcm_with, server_filter_chain, server_listener_msg, server_routes,
};

type Match = listener_pb::FilterChainMatch;

const ANY: i32 = 0;
const SAME_IP_OR_LOOPBACK: i32 = 1;
const EXTERNAL: i32 = 2;

/// gRPC-Go's duplicate text, after our field path.
const OVERLAPPING: &str = "multiple filter chains with overlapping matching rules are defined";

/// A chain named `name` serving every RPC (inline routes), with this match.
fn chain(name: &str, m: Match) -> listener_pb::FilterChain {
    let inline = hcm_with(
        hcm_pb::http_connection_manager::RouteSpecifier::RouteConfig(server_routes("routes")),
        None,
    );
    listener_pb::FilterChain {
        filter_chain_match: Some(m),
        ..server_filter_chain(name, &inline)
    }
}

fn cidr(address: &str, len: u32) -> core_pb::CidrRange {
    core_pb::CidrRange {
        address_prefix: address.to_owned(),
        prefix_len: Some(pbuf::UInt32Value { value: len }),
    }
}

fn dst(ranges: &[(&str, u32)]) -> Match {
    Match {
        prefix_ranges: ranges.iter().map(|(a, l)| cidr(a, *l)).collect(),
        ..Default::default()
    }
}

fn src(ranges: &[(&str, u32)]) -> Match {
    Match {
        source_prefix_ranges: ranges.iter().map(|(a, l)| cidr(a, *l)).collect(),
        ..Default::default()
    }
}

fn ports(ports: &[u32]) -> Match {
    Match {
        source_ports: ports.to_vec(),
        ..Default::default()
    }
}

fn source_type(t: i32) -> Match {
    Match {
        source_type: t,
        ..Default::default()
    }
}

/// `m` with `transport_protocol`.
fn transport(protocol: &str, m: Match) -> Match {
    Match {
        transport_protocol: protocol.to_owned(),
        ..m
    }
}

fn server_names(names: &[&str], m: Match) -> Match {
    Match {
        server_names: names.iter().map(|s| s.to_string()).collect(),
        ..m
    }
}

fn alpn(protocols: &[&str], m: Match) -> Match {
    Match {
        application_protocols: protocols.iter().map(|s| s.to_string()).collect(),
        ..m
    }
}

fn destination_port(port: u32, m: Match) -> Match {
    Match {
        destination_port: Some(pbuf::UInt32Value { value: port }),
        ..m
    }
}

/// A listener with `matches` as its chains `c0`, `c1`, ... and a default chain when
/// `default` is set.
fn listener_of(matches: Vec<Match>, default: bool) -> listener_pb::Listener {
    let chains = matches
        .into_iter()
        .enumerate()
        .map(|(i, m)| chain(&format!("c{i}"), m))
        .collect();
    let mut l = server_listener_msg("lis", "0.0.0.0:8080".parse().unwrap(), chains);
    l.default_filter_chain = default.then(|| chain("default", Match::default()));
    l
}

fn decode(l: &listener_pb::Listener) -> Result<ServerListener, String> {
    let (_, value) = listener::decode(&l.encode_to_vec()).map_err(|e| e.message)?;
    match value.kind {
        ListenerKind::Server(server) => Ok(server),
        other => panic!("not a server listener: {other:?}"),
    }
}

fn overlap(chain: usize, owner: usize) -> String {
    let why = if chain == owner {
        "a normalized matcher repeats within the chain".to_owned()
    } else {
        format!("overlaps filter_chains[{owner}]")
    };
    format!("filter_chains[{chain}].filter_chain_match: {OVERLAPPING} ({why})")
}

const NONE_SUPPORTED: &str =
    "filter_chains: no supported filter chains and no default filter chain";

/// A table row: name, the chains' matches, whether there is a default chain, and the
/// outcome (`Ok` accepted, `Err` NACKed with this text).
type Case = (&'static str, Vec<Match>, bool, Result<(), String>);

/// Each Listener, and what gRPC-Go does with it: `Ok` accepted, `Err` NACKed with our
/// text (gRPC-Go's, with our field path).
#[test]
fn listeners_are_accepted_and_nacked_as_grpc_go_does() {
    let cases: Vec<Case> = vec![
        // ----- TestNewFilterChainImpl_Failure_OverlappingMatchingRules
        (
            "matching destination prefixes with no other matchers",
            vec![
                dst(&[("192.168.1.1", 16), ("10.0.0.0", 0)]),
                dst(&[("192.168.2.2", 16)]),
            ],
            false,
            Err(overlap(1, 0)),
        ),
        (
            "matching source type",
            vec![
                source_type(ANY),
                source_type(SAME_IP_OR_LOOPBACK),
                source_type(EXTERNAL),
                source_type(EXTERNAL),
            ],
            false,
            Err(overlap(3, 2)),
        ),
        (
            "matching source prefixes",
            vec![
                src(&[("192.168.1.1", 16), ("10.0.0.0", 0)]),
                src(&[("192.168.2.2", 16)]),
            ],
            false,
            Err(overlap(1, 0)),
        ),
        (
            "matching source ports",
            vec![ports(&[1, 2, 3, 4, 5]), Match::default(), ports(&[5, 6, 7])],
            false,
            Err(overlap(2, 0)),
        ),
        // ----- TestNewFilterChainImpl_Failure_BadMatchFields: the one chain is pruned,
        // nothing is left and there is no default chain.
        (
            "unsupported destination port field",
            vec![destination_port(666, Match::default())],
            false,
            Err(NONE_SUPPORTED.into()),
        ),
        (
            "unsupported server names field",
            vec![server_names(&["example-server"], Match::default())],
            false,
            Err(NONE_SUPPORTED.into()),
        ),
        (
            "unsupported transport protocol",
            vec![transport("tls", Match::default())],
            false,
            Err(NONE_SUPPORTED.into()),
        ),
        (
            "unsupported application protocol field",
            vec![alpn(&["h2"], Match::default())],
            false,
            Err(NONE_SUPPORTED.into()),
        ),
        (
            "bad dest address prefix",
            vec![dst(&[("a.b.c.d", 0)])],
            false,
            Err(
                "filter_chains[0].filter_chain_match.prefix_ranges[0].address_prefix: not an \
                 IP address: \"a.b.c.d\""
                    .into(),
            ),
        ),
        (
            "bad source address prefix",
            vec![src(&[("a.b.c.d", 0)])],
            false,
            Err(
                "filter_chains[0].filter_chain_match.source_prefix_ranges[0].address_prefix: \
                 not an IP address: \"a.b.c.d\""
                    .into(),
            ),
        ),
        // gRPC-Go NACKs a prefix length above the family's width (net.ParseCIDR); A36
        // says to clamp it, and so does C-core: we clamp.
        (
            "dest prefix length 50 is clamped (gRPC-Go NACKs)",
            vec![dst(&[("10.1.1.0", 50)])],
            false,
            Ok(()),
        ),
        // TestNewFilterChainImpl_Failure_BadSecurityConfig "no filter chains".
        (
            "no filter chains",
            vec![],
            false,
            Err(NONE_SUPPORTED.into()),
        ),
        ("only a default chain", vec![], true, Ok(())),
        // ----- TestNewFilterChainImpl_Success_UnsupportedMatchFields: the unsupported
        // chain is dropped and does not collide with the good one.
        (
            "unsupported destination port",
            vec![
                Match::default(),
                destination_port(666, dst(&[("192.168.1.1", 16)])),
            ],
            true,
            Ok(()),
        ),
        (
            "unsupported server names",
            vec![
                Match::default(),
                server_names(&["example-server"], dst(&[("192.168.1.1", 16)])),
            ],
            true,
            Ok(()),
        ),
        (
            "unsupported transport protocol",
            vec![
                Match::default(),
                transport("tls", dst(&[("192.168.1.1", 16)])),
            ],
            true,
            Ok(()),
        ),
        (
            "unsupported application protocol",
            vec![Match::default(), alpn(&["h2"], dst(&[("192.168.1.1", 16)]))],
            true,
            Ok(()),
        ),
        // ----- Pruned chains take no part in the duplicate check (A36's text says they
        // do; gRPC-Go and C-core prune first). Each of these was NACKed before.
        (
            "two chains with the same server names",
            vec![
                server_names(&["x", "y"], Match::default()),
                server_names(&["y"], Match::default()),
                Match::default(),
            ],
            false,
            Ok(()),
        ),
        (
            "two chains with the same unsupported transport protocol",
            vec![
                transport("tls", Match::default()),
                transport("tls", Match::default()),
                Match::default(),
            ],
            false,
            Ok(()),
        ),
        (
            "two chains with the same application protocols",
            vec![
                alpn(&["h2"], Match::default()),
                alpn(&["h2"], Match::default()),
                Match::default(),
            ],
            false,
            Ok(()),
        ),
        (
            "two chains with the same destination port",
            vec![
                destination_port(443, Match::default()),
                destination_port(443, Match::default()),
                Match::default(),
            ],
            false,
            Ok(()),
        ),
        // ----- transport_protocol: raw_buffer shadows unset under the same prefix.
        (
            "unset chains after a raw_buffer one are dropped, duplicates included",
            vec![
                transport("raw_buffer", dst(&[("10.0.0.0", 8)])),
                dst(&[("10.0.0.0", 8)]),
                dst(&[("10.0.0.0", 8)]),
            ],
            false,
            Ok(()),
        ),
        (
            "unset duplicates before the raw_buffer chain are NACKed (listener order)",
            vec![
                dst(&[("10.0.0.0", 8)]),
                dst(&[("10.0.0.0", 8)]),
                transport("raw_buffer", dst(&[("10.0.0.0", 8)])),
            ],
            false,
            Err(overlap(1, 0)),
        ),
        (
            "raw_buffer under another prefix shadows nothing here",
            vec![
                transport("raw_buffer", dst(&[("10.0.0.0", 16)])),
                dst(&[("10.0.0.0", 8)]),
                dst(&[("10.0.0.0", 8)]),
            ],
            false,
            Err(overlap(2, 1)),
        ),
        (
            "a raw_buffer chain with server names shadows nothing",
            vec![
                server_names(&["x"], transport("raw_buffer", Match::default())),
                Match::default(),
                Match::default(),
            ],
            false,
            Err(overlap(2, 1)),
        ),
        (
            "a raw_buffer chain with application protocols still shadows unset ones",
            vec![
                alpn(&["h2"], transport("raw_buffer", Match::default())),
                Match::default(),
                Match::default(),
            ],
            true,
            Ok(()),
        ),
        (
            "every chain shadowed and no default chain",
            vec![
                Match::default(),
                alpn(&["h2"], transport("raw_buffer", Match::default())),
            ],
            false,
            Err(NONE_SUPPORTED.into()),
        ),
        (
            "two raw_buffer chains with one matcher",
            vec![
                transport("raw_buffer", ports(&[80])),
                transport("raw_buffer", ports(&[80, 81])),
            ],
            false,
            Err(overlap(1, 0)),
        ),
        // ----- the other normalizations
        (
            "an unset prefix is not 0.0.0.0/0; source types differ",
            vec![
                Match::default(),
                dst(&[("0.0.0.0", 0)]),
                source_type(SAME_IP_OR_LOOPBACK),
            ],
            false,
            Ok(()),
        ),
        (
            "host bits are ignored: 10.1.2.3/8 is 10.0.0.0/8",
            vec![
                dst(&[("192.168.0.0", 16), ("10.0.0.0", 8)]),
                dst(&[("10.1.2.3", 8)]),
            ],
            false,
            Err(overlap(1, 0)),
        ),
        (
            "prefix lengths are clamped: 10.1.2.3/40 is 10.1.2.3/32",
            vec![dst(&[("10.1.2.3", 32)]), dst(&[("10.1.2.3", 40)])],
            false,
            Err(overlap(1, 0)),
        ),
        (
            "source port 0 is gRPC's key for any port",
            vec![Match::default(), ports(&[0])],
            false,
            Err(overlap(1, 0)),
        ),
        (
            "a source port listed twice in one chain",
            vec![ports(&[80, 80])],
            false,
            Err(overlap(0, 0)),
        ),
        (
            "a destination prefix listed twice in one chain (after normalization)",
            vec![dst(&[("10.0.0.0", 8), ("10.9.9.9", 8)])],
            false,
            Err(overlap(0, 0)),
        ),
        (
            "destination port 0 counts as unset",
            vec![Match::default(), destination_port(0, Match::default())],
            false,
            Err(overlap(1, 0)),
        ),
    ];
    let mut failures = Vec::new();
    for (name, matches, default, want) in cases {
        let got = decode(&listener_of(matches, default)).map(|_| ());
        if got != want {
            failures.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn conn(local: &str, peer: &str) -> ConnectionAddrs {
    ConnectionAddrs {
        local: local.parse::<SocketAddr>().unwrap(),
        peer: peer.parse::<SocketAddr>().unwrap(),
    }
}

/// The chain a connection gets, by name.
fn picked(l: &ServerListener, c: ConnectionAddrs) -> Option<String> {
    select_filter_chain(l, c).map(|c| c.name.clone())
}

/// gRPC-Go's `TestLookup_Successes` listener without a default chain, its chains
/// named as its test names their certificate instances.
fn lookup_listener() -> ServerListener {
    let both = |d: &[(&str, u32)], s: &[(&str, u32)], t: i32, p: &[u32]| Match {
        prefix_ranges: dst(d).prefix_ranges,
        source_prefix_ranges: src(s).source_prefix_ranges,
        source_type: t,
        source_ports: p.to_vec(),
        ..Default::default()
    };
    let chains = vec![
        ("unspecified-dest-and-source-prefix", Match::default()),
        (
            "wildcard-prefixes-v4",
            both(&[("0.0.0.0", 0)], &[("0.0.0.0", 0)], ANY, &[]),
        ),
        ("wildcard-source-prefix-v6", src(&[("::", 0)])),
        ("specific-destination-prefix", dst(&[("192.168.1.1", 16)])),
        (
            "specific-source-type",
            both(&[("192.168.1.1", 24)], &[], EXTERNAL, &[]),
        ),
        (
            "specific-source-prefix",
            both(
                &[("192.168.1.1", 24)],
                &[("192.168.92.1", 24)],
                EXTERNAL,
                &[],
            ),
        ),
        (
            "specific-source-port",
            both(
                &[("192.168.1.1", 24)],
                &[("192.168.92.1", 24)],
                EXTERNAL,
                &[80],
            ),
        ),
    ];
    let chains = chains.into_iter().map(|(n, m)| chain(n, m)).collect();
    decode(&server_listener_msg(
        "lis",
        "0.0.0.0:8080".parse().unwrap(),
        chains,
    ))
    .unwrap()
}

#[test]
fn chains_are_selected_as_grpc_go_looks_them_up() {
    let l = lookup_listener();
    let cases = [
        (
            "unspecified destination match",
            conn("[2001:68::db8]:8080", "10.1.1.1:1"),
            "unspecified-dest-and-source-prefix",
        ),
        (
            "wildcard destination match v4",
            conn("10.1.1.1:8080", "10.1.1.1:1"),
            "wildcard-prefixes-v4",
        ),
        (
            "wildcard source match v6",
            conn("[2001:68::1]:8080", "[2001:68::2]:1"),
            "wildcard-source-prefix-v6",
        ),
        (
            "specific destination and wildcard source type match",
            conn("192.168.100.1:8080", "192.168.100.1:80"),
            "specific-destination-prefix",
        ),
        (
            "specific destination and source type match",
            conn("192.168.1.1:8080", "10.1.1.1:80"),
            "specific-source-type",
        ),
        (
            "specific destination source type and source prefix",
            conn("192.168.1.1:8080", "192.168.92.100:70"),
            "specific-source-prefix",
        ),
        (
            "specific destination source type source prefix and source port",
            conn("192.168.1.1:8080", "192.168.92.100:80"),
            "specific-source-port",
        ),
    ];
    for (name, addrs, want) in cases {
        assert_eq!(picked(&l, addrs).as_deref(), Some(want), "{name}");
    }
}

/// Chains that can never match still win the destination stage, and the connection
/// then gets no chain (gRPC-Go's `TestLookup_Failures`, "most specific match dropped
/// for unsupported field"), and the other prunings in their stage.
#[test]
fn a_chain_that_cannot_match_still_takes_its_destination() {
    let decoded = |matches: Vec<Match>, default: bool| {
        decode(&listener_of(matches, default)).expect("gRPC-Go accepts it")
    };
    let c = conn("192.168.100.1:8080", "192.168.100.1:80");
    // Without a default chain the connection is closed; with one it gets it.
    for (unsupported, what) in [
        (server_names(&["foo"], Match::default()), "server names"),
        (transport("tls", Match::default()), "transport protocol"),
        (alpn(&["h2"], Match::default()), "application protocols"),
    ] {
        let on_32 = Match {
            prefix_ranges: vec![cidr("192.168.100.1", 32)],
            ..unsupported
        };
        let matches = vec![on_32, dst(&[("192.168.100.0", 16)])];
        assert_eq!(picked(&decoded(matches.clone(), false), c), None, "{what}");
        assert_eq!(
            picked(&decoded(matches, true), c).as_deref(),
            Some("default"),
            "{what}"
        );
    }
    // A destination port drops the chain before any stage: the /16 chain is next.
    let matches = vec![
        destination_port(8080, dst(&[("192.168.100.1", 32)])),
        dst(&[("192.168.100.0", 16)]),
    ];
    assert_eq!(picked(&decoded(matches, false), c).as_deref(), Some("c1"));
    // raw_buffer (even with application protocols, which then fail) beats unset.
    let matches = vec![
        Match::default(),
        alpn(&["h2"], transport("raw_buffer", Match::default())),
    ];
    assert_eq!(
        picked(&decoded(matches, true), c).as_deref(),
        Some("default")
    );
    let matches = vec![Match::default(), transport("raw_buffer", ports(&[80]))];
    let l = decoded(matches, false);
    assert_eq!(picked(&l, c).as_deref(), Some("c1"));
    assert_eq!(
        picked(&l, conn("192.168.100.1:8080", "192.168.100.1:81")),
        None,
        "no going back to the unset chain"
    );
    // Source port 0 takes any port; a listed port is more specific.
    let l = decoded(vec![ports(&[0]), ports(&[80])], false);
    assert_eq!(picked(&l, c).as_deref(), Some("c1"));
    assert_eq!(
        picked(&l, conn("192.168.100.1:8080", "192.168.100.1:81")).as_deref(),
        Some("c0")
    );
}

/// Only the chains a connection can select need their routes: a pruned or shadowed
/// chain's RDS name is not watched (so it cannot hold the server back from serving),
/// as gRPC-Go asks RDS only for the chains it keeps.
#[test]
fn pruned_chains_need_no_routes() {
    let rds = |name: &str, m: Match| listener_pb::FilterChain {
        filter_chain_match: Some(m),
        ..server_filter_chain(name, &hcm_rds(name))
    };
    let mut l = server_listener_msg(
        "lis",
        "0.0.0.0:8080".parse().unwrap(),
        vec![
            rds("kept", Match::default()),
            rds(
                "server-names",
                server_names(&["x"], dst(&[("10.0.0.0", 8)])),
            ),
            rds("shadowed", dst(&[("10.0.0.0", 16)])),
            rds("raw", transport("raw_buffer", dst(&[("10.0.0.0", 16)]))),
        ],
    );
    l.default_filter_chain = Some(rds("default", Match::default()));
    let server = decode(&l).unwrap();
    assert_eq!(server.rds_names(), ["default", "kept", "raw"]);
    let selectable: Vec<&str> = server
        .selectable_chains()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(selectable, ["kept", "raw", "default"]);

    // The server serves once the selectable chains' routes are in, and logs no error
    // for the others' routes, which it never asked for.
    let (_, value) = listener::decode(&l.encode_to_vec()).unwrap();
    let mut state = ServingState::new("0.0.0.0:8080".parse().unwrap());
    state.on_listener(&WatchEvent::Changed(Ok(ResourceValue::new::<Lds>(value))));
    let mut watched: Vec<&str> = state.watched_routes().collect();
    watched.sort_unstable();
    assert_eq!(watched, ["default", "kept", "raw"]);
    for name in ["default", "kept", "raw"] {
        let routes = kit::decode_rc(&server_routes(name)).unwrap();
        state.on_route_config(
            name,
            &WatchEvent::Changed(Ok(ResourceValue::new::<Rds>(routes))),
        );
    }
    assert_eq!(state.mode(), &ServingMode::Serving);
    let errors = state.config().unwrap().config_errors();
    assert!(errors.is_empty(), "{errors:?}");
}
