//! Config selector tests (issue 6): A31's timeout table row by row, route matching for
//! every matcher kind (and `invert_match`), virtual-host specificity, weighted-cluster
//! draws, retry policies (every `retry_on` condition, the Contour example, invalid
//! input), cluster lifetime and the cluster manager LB config, dependency-manager
//! scenarios on the scripted harness (RDS swap, clusters added and removed while RPCs
//! hold handles, aggregate cycles and depth, missing EDS), and a property test that the
//! indexed route table agrees with a linear first-match scan.

// The header matchers A28 specifies (exact_match, prefix_match, ...) are deprecated in
// the Envoy API in favour of string_match; both are tested.
#![allow(deprecated)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use xds_proto_core::Cds;

use quickcheck::QuickCheck;
use xds_proto_core::dependency::{ClusterResolution, MAX_AGGREGATE_CLUSTER_DEPTH, XdsConfig};
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use xds_proto_core::pb::google::protobuf::UInt32Value;
use xds_proto_core::resource::route::{HttpRetryCondition as H, RetryPolicy, RetryableCode as G};
use xds_proto_core::selector::{
    ClusterRegistry, ConfigSelector, INAPPROPRIATE_ACTION, NO_MATCHING_ROUTE, RandomSource,
    RouteTable, Selection, effective_timeout, route_matches, select_virtual_host,
};
use xds_proto_core::{Code, ErrorKind, Status, WatchEvent};
use xds_proto_tests::fixtures::endpoints;
use xds_proto_tests::fixtures_routes::*;
use xds_proto_tests::{CDS, EDS, LDS, RDS};

use route::header_matcher::HeaderMatchSpecifier as Spec;

const SEC: Duration = Duration::from_secs(1);
const NO_MD: [(&str, &str); 0] = [];

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A selector over the first virtual host of `rc`.
fn selector(
    rc: &route::RouteConfiguration,
    hcm_msd: Option<Duration>,
) -> (ConfigSelector, ClusterRegistry) {
    let decoded = decode_rc(rc).expect("valid route configuration");
    let mut registry = ClusterRegistry::new();
    let s = ConfigSelector::from_virtual_host(
        &decoded.virtual_hosts[0],
        &decoded.cluster_specifier_plugins,
        hcm_msd,
        &mut registry,
    );
    (s, registry)
}

/// The child name an RPC is routed to.
fn pick(s: &ConfigSelector, path: &str, md: &[(&str, &str)]) -> Result<String, Status> {
    s.select(path, md, &mut SplitMix(1))
        .map(|sel| sel.cluster().child_name().to_string())
}

fn hit(name: &str) -> Result<String, Status> {
    Ok(format!("cluster:{name}"))
}

fn unavailable(message: &str) -> Result<String, Status> {
    Err(Status::new(Code::UNAVAILABLE, message))
}

// ---------------------------------------------------------------------------------------
// A31 timeouts
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Setting {
    Unset,
    Zero,
    Ten,
    /// The table's "any": expanded to every other setting and 30 s.
    Any,
}

impl Setting {
    fn expand(self) -> Vec<Option<Duration>> {
        match self {
            Setting::Unset => vec![None],
            Setting::Zero => vec![Some(Duration::ZERO)],
            Setting::Ten => vec![Some(secs(10))],
            Setting::Any => vec![None, Some(Duration::ZERO), Some(secs(10)), Some(secs(30))],
        }
    }
}

/// A31's table: application deadline, grpc_timeout_header_max, max_stream_duration,
/// effective timeout (`None` = infinite).
const A31_TABLE: [(Option<u64>, Setting, Setting, Option<u64>); 10] = [
    (None, Setting::Unset, Setting::Unset, None),
    (None, Setting::Unset, Setting::Zero, None),
    (None, Setting::Unset, Setting::Ten, Some(10)),
    (None, Setting::Zero, Setting::Any, None),
    (None, Setting::Ten, Setting::Any, Some(10)),
    (Some(20), Setting::Unset, Setting::Unset, Some(20)),
    (Some(20), Setting::Unset, Setting::Zero, Some(20)),
    (Some(20), Setting::Unset, Setting::Ten, Some(10)),
    (Some(20), Setting::Zero, Setting::Any, Some(20)),
    (Some(20), Setting::Ten, Setting::Any, Some(10)),
];

#[test]
fn a31_table_every_row_as_a_function() {
    for (row, (app, header_max, msd, expected)) in A31_TABLE.iter().enumerate() {
        for h in header_max.expand() {
            for m in msd.expand() {
                assert_eq!(
                    effective_timeout(app.map(secs), h, m),
                    expected.map(secs),
                    "row {row}: app {app:?}, grpc_timeout_header_max {h:?}, max_stream_duration {m:?}"
                );
            }
        }
    }
}

fn timeout_route(
    header_max: Option<Duration>,
    route_msd: Option<Duration>,
) -> route::RouteConfiguration {
    let action = if header_max.is_none() && route_msd.is_none() {
        cluster_action("c")
    } else {
        with_stream_duration(cluster_action("c"), route_msd, header_max)
    };
    routes_config("rc", vec![forward(prefix(""), action)])
}

#[test]
fn a31_table_every_row_through_the_selector_with_route_and_hcm_durations() {
    for (row, (app, header_max, msd, expected)) in A31_TABLE.iter().enumerate() {
        for h in header_max.expand() {
            for m in msd.expand() {
                // The max_stream_duration column is the effective setting: put it on the
                // route, or leave the route unset and put it on the HCM.
                for (route_msd, hcm_msd) in [(m, None), (None, m)] {
                    let (s, _registry) = selector(&timeout_route(h, route_msd), hcm_msd);
                    let sel = s.select("/svc/M", &NO_MD, &mut SplitMix(1)).unwrap();
                    assert_eq!(
                        sel.effective_timeout(app.map(secs)),
                        expected.map(secs),
                        "row {row}: app {app:?}, header max {h:?}, route msd {route_msd:?}, HCM msd {hcm_msd:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn route_max_stream_duration_overrides_the_hcm_even_when_zero() {
    let cases = [
        (Some(secs(5)), Some(secs(10)), Some(secs(5))),
        (Some(secs(15)), Some(secs(10)), Some(secs(15))),
        (None, Some(secs(10)), Some(secs(10))),
        // Explicitly zero on the route: no cap, no fallback to the HCM (as gRPC does).
        (Some(Duration::ZERO), Some(secs(10)), None),
    ];
    for (route_msd, hcm_msd, cap) in cases {
        let (s, _r) = selector(&timeout_route(None, route_msd), hcm_msd);
        let sel = s.select("/svc/M", &NO_MD, &mut SplitMix(1)).unwrap();
        assert_eq!(
            sel.timeout_cap(),
            cap,
            "route {route_msd:?} HCM {hcm_msd:?}"
        );
    }
    // grpc_timeout_header_max wins over both.
    let (s, _r) = selector(&timeout_route(Some(secs(3)), Some(secs(5))), Some(secs(10)));
    let sel = s.select("/svc/M", &NO_MD, &mut SplitMix(1)).unwrap();
    assert_eq!(sel.timeout_cap(), Some(secs(3)));
    assert_eq!(sel.effective_timeout(Some(SEC)), Some(SEC));
}

// ---------------------------------------------------------------------------------------
// Route matching
// ---------------------------------------------------------------------------------------

#[test]
fn path_matchers_prefix_path_and_regex() {
    let rc = routes_config(
        "rc",
        vec![
            to_cluster(path("/a.S/M"), "path"),
            to_cluster(prefix("/a.S/"), "service"),
            to_cluster(regex("/b\\.S/M[0-9]+"), "regex"),
            to_cluster(prefix("/c.S/Me"), "method-prefix"),
            to_cluster(prefix(""), "default"),
        ],
    );
    let (s, _r) = selector(&rc, None);
    for (p, expected) in [
        ("/a.S/M", "path"),
        ("/a.S/N", "service"),
        ("/a.S/", "service"),
        ("/b.S/M12", "regex"),
        ("/b.S/M12x", "default"),
        ("/b.S/Mx", "default"),
        ("/c.S/Method", "method-prefix"),
        ("/c.S/M", "default"),
        ("/A.S/M", "default"),
        ("", "default"),
    ] {
        assert_eq!(pick(&s, p, &NO_MD), hit(expected), "{p}");
    }
}

#[test]
fn case_insensitive_paths_and_prefixes_but_not_regexes() {
    let rc = routes_config(
        "rc",
        vec![
            to_cluster(case_sensitive(path("/a.s/m"), false), "path"),
            to_cluster(case_sensitive(prefix("/B.S/"), false), "prefix"),
            to_cluster(case_sensitive(regex("/c\\.s/.*"), false), "regex"),
            to_cluster(case_sensitive(path("/d.S/M"), true), "sensitive"),
            to_cluster(prefix(""), "default"),
        ],
    );
    let (s, _r) = selector(&rc, None);
    for (p, expected) in [
        ("/A.S/M", "path"),
        ("/a.s/m", "path"),
        ("/b.s/x", "prefix"),
        ("/B.S/X", "prefix"),
        ("/c.s/x", "regex"),
        ("/C.S/x", "default"),
        ("/d.S/M", "sensitive"),
        ("/d.s/m", "default"),
    ] {
        assert_eq!(pick(&s, p, &NO_MD), hit(expected), "{p}");
    }
}

#[test]
fn the_first_matching_route_wins_even_over_a_later_exact_path() {
    // A28's example: the prefix route comes first, so it takes the exact path too.
    let rc = routes_config(
        "rc",
        vec![
            to_cluster(prefix("/MyService"), "child-1"),
            to_cluster(path("/MyService/MyMethod"), "child-2"),
        ],
    );
    let (s, _r) = selector(&rc, None);
    assert_eq!(pick(&s, "/MyService/MyMethod", &NO_MD), hit("child-1"));
    // Same with an indexed service prefix after an indexed exact path in the other order.
    let rc = routes_config(
        "rc",
        vec![
            to_cluster(prefix("/pkg.S/"), "service"),
            to_cluster(path("/pkg.S/M"), "exact"),
            to_cluster(path("/pkg.T/M"), "exact-t"),
            to_cluster(prefix("/pkg.T/"), "service-t"),
        ],
    );
    let (s, _r) = selector(&rc, None);
    assert_eq!(pick(&s, "/pkg.S/M", &NO_MD), hit("service"));
    assert_eq!(pick(&s, "/pkg.T/M", &NO_MD), hit("exact-t"));
    assert_eq!(pick(&s, "/pkg.T/N", &NO_MD), hit("service-t"));
    let stats = s.route_table().stats();
    assert_eq!((stats.exact, stats.service, stats.scanned), (2, 2, 0));
}

/// A header matching case: what it checks, the matcher, the metadata, the outcome.
type HeaderCase = (
    &'static str,
    route::HeaderMatcher,
    Vec<(&'static str, &'static str)>,
    bool,
);

/// Whether an RPC with `md` matches a route whose only condition is `h`.
fn header_case(h: route::HeaderMatcher, md: &[(&str, &str)]) -> bool {
    let rc = routes_config(
        "rc",
        vec![
            to_cluster(with_header(prefix(""), h), "hit"),
            to_cluster(prefix(""), "miss"),
        ],
    );
    let (s, _r) = selector(&rc, None);
    match pick(&s, "/svc/M", md).expect("routed").as_str() {
        "cluster:hit" => true,
        "cluster:miss" => false,
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn header_matchers_of_every_kind_with_and_without_invert() {
    let h = |spec: Spec, invert: bool| header("x-h", spec, invert);
    let v = |value: &'static str| vec![("x-h", value)];
    let absent: Vec<(&str, &str)> = vec![("other", "v")];
    let cases: Vec<HeaderCase> = vec![
        (
            "exact",
            h(Spec::ExactMatch("v".into()), false),
            v("v"),
            true,
        ),
        (
            "exact other",
            h(Spec::ExactMatch("v".into()), false),
            v("w"),
            false,
        ),
        (
            "exact absent",
            h(Spec::ExactMatch("v".into()), false),
            absent.clone(),
            false,
        ),
        (
            "exact is case-sensitive",
            h(Spec::ExactMatch("v".into()), false),
            v("V"),
            false,
        ),
        (
            "exact inverted",
            h(Spec::ExactMatch("v".into()), true),
            v("w"),
            true,
        ),
        (
            "exact inverted on equal",
            h(Spec::ExactMatch("v".into()), true),
            v("v"),
            false,
        ),
        // gRPC: an absent header fails every non-present matcher, inverted or not.
        (
            "exact inverted absent",
            h(Spec::ExactMatch("v".into()), true),
            absent.clone(),
            false,
        ),
        (
            "regex",
            h(Spec::SafeRegexMatch(regex_matcher("v[0-9]+")), false),
            v("v12"),
            true,
        ),
        (
            "regex is a full match",
            h(Spec::SafeRegexMatch(regex_matcher("v[0-9]+")), false),
            v("v12x"),
            false,
        ),
        (
            "regex inverted",
            h(Spec::SafeRegexMatch(regex_matcher("v[0-9]+")), true),
            v("x"),
            true,
        ),
        (
            "range start",
            h(Spec::RangeMatch(range(10, 20)), false),
            v("10"),
            true,
        ),
        (
            "range inside",
            h(Spec::RangeMatch(range(10, 20)), false),
            v("19"),
            true,
        ),
        (
            "range end excluded",
            h(Spec::RangeMatch(range(10, 20)), false),
            v("20"),
            false,
        ),
        (
            "range negative",
            h(Spec::RangeMatch(range(-10, 0)), false),
            v("-5"),
            true,
        ),
        (
            "range whitespace",
            h(Spec::RangeMatch(range(10, 20)), false),
            v(" 15 "),
            true,
        ),
        (
            "range not a number",
            h(Spec::RangeMatch(range(10, 20)), false),
            v("abc"),
            false,
        ),
        (
            "range inverted",
            h(Spec::RangeMatch(range(10, 20)), true),
            v("25"),
            true,
        ),
        (
            "range inverted inside",
            h(Spec::RangeMatch(range(10, 20)), true),
            v("15"),
            false,
        ),
        (
            "range inverted not a number",
            h(Spec::RangeMatch(range(10, 20)), true),
            v("abc"),
            true,
        ),
        (
            "range absent",
            h(Spec::RangeMatch(range(10, 20)), true),
            absent.clone(),
            false,
        ),
        ("present", h(Spec::PresentMatch(true), false), v(""), true),
        (
            "present absent",
            h(Spec::PresentMatch(true), false),
            absent.clone(),
            false,
        ),
        (
            "present inverted",
            h(Spec::PresentMatch(true), true),
            v("x"),
            false,
        ),
        (
            "present inverted absent",
            h(Spec::PresentMatch(true), true),
            absent.clone(),
            true,
        ),
        (
            "not present",
            h(Spec::PresentMatch(false), false),
            absent.clone(),
            true,
        ),
        (
            "not present but is",
            h(Spec::PresentMatch(false), false),
            v("x"),
            false,
        ),
        (
            "not present inverted",
            h(Spec::PresentMatch(false), true),
            absent.clone(),
            false,
        ),
        (
            "prefix",
            h(Spec::PrefixMatch("ab".into()), false),
            v("abc"),
            true,
        ),
        (
            "prefix other",
            h(Spec::PrefixMatch("ab".into()), false),
            v("xab"),
            false,
        ),
        (
            "prefix inverted",
            h(Spec::PrefixMatch("ab".into()), true),
            v("xab"),
            true,
        ),
        (
            "suffix",
            h(Spec::SuffixMatch("yz".into()), false),
            v("xyz"),
            true,
        ),
        (
            "suffix other",
            h(Spec::SuffixMatch("yz".into()), false),
            v("yzx"),
            false,
        ),
        (
            "suffix inverted",
            h(Spec::SuffixMatch("yz".into()), true),
            v("xyz"),
            false,
        ),
        (
            "contains",
            h(Spec::ContainsMatch("mid".into()), false),
            v("amidb"),
            true,
        ),
        (
            "contains other",
            h(Spec::ContainsMatch("mid".into()), false),
            v("mi d"),
            false,
        ),
        (
            "contains inverted",
            h(Spec::ContainsMatch("mid".into()), true),
            v("none"),
            true,
        ),
        (
            "string exact ignore_case",
            h(
                string_match(MatchPattern::Exact("hello".into()), true),
                false,
            ),
            v("HeLLo"),
            true,
        ),
        (
            "string exact",
            h(
                string_match(MatchPattern::Exact("hello".into()), false),
                false,
            ),
            v("HeLLo"),
            false,
        ),
        (
            "string prefix ignore_case",
            h(string_match(MatchPattern::Prefix("ab".into()), true), false),
            v("ABc"),
            true,
        ),
        (
            "string prefix",
            h(
                string_match(MatchPattern::Prefix("ab".into()), false),
                false,
            ),
            v("ABc"),
            false,
        ),
        (
            "string suffix ignore_case",
            h(string_match(MatchPattern::Suffix("yz".into()), true), false),
            v("xYZ"),
            true,
        ),
        (
            "string contains ignore_case",
            h(
                string_match(MatchPattern::Contains("mid".into()), true),
                false,
            ),
            v("aMIDb"),
            true,
        ),
        (
            "string contains inverted",
            h(
                string_match(MatchPattern::Contains("mid".into()), false),
                true,
            ),
            v("aMIDb"),
            true,
        ),
        (
            "string regex",
            h(
                string_match(MatchPattern::SafeRegex(regex_matcher("[a-c]+")), false),
                false,
            ),
            v("abcab"),
            true,
        ),
        (
            "string regex full match",
            h(
                string_match(MatchPattern::SafeRegex(regex_matcher("[a-c]+")), false),
                false,
            ),
            v("abcd"),
            false,
        ),
    ];
    for (what, matcher, md, expected) in cases {
        assert_eq!(header_case(matcher, &md), expected, "{what}");
    }
}

#[test]
fn header_values_are_joined_and_reserved_headers_are_hidden() {
    let exact = |name: &str, value: &str, invert: bool| {
        header(name, Spec::ExactMatch(value.into()), invert)
    };
    let present = |name: &str| header(name, Spec::PresentMatch(true), false);
    // Several values of one header are joined with ',' (no space), in order.
    let md = [("x-h", "a"), ("other", "z"), ("x-h", "b"), ("x-h", "c")];
    assert!(header_case(exact("x-h", "a,b,c", false), &md));
    assert!(!header_case(exact("x-h", "a", false), &md));
    assert!(!header_case(exact("x-h", "a, b, c", false), &md));
    // Names compare ASCII case-insensitively.
    assert!(header_case(exact("x-h", "v", false), &[("X-H", "v")]));
    // Binary headers are never visible to matchers.
    let bin = [("x-token-bin", "AAEC")];
    assert!(!header_case(present("x-token-bin"), &bin));
    assert!(header_case(
        header("x-token-bin", Spec::PresentMatch(false), false),
        &bin
    ));
    assert!(!header_case(exact("x-token-bin", "AAEC", false), &bin));
    // grpc- headers are reserved for gRPC and not matched.
    let reserved = [("grpc-timeout", "1S"), ("grpc-previous-rpc-attempts", "1")];
    assert!(!header_case(present("grpc-timeout"), &reserved));
    assert!(!header_case(
        exact("grpc-previous-rpc-attempts", "1", false),
        &reserved
    ));
    // content-type is always application/grpc, whatever the metadata says.
    assert!(header_case(
        exact("content-type", "application/grpc", false),
        &NO_MD
    ));
    assert!(header_case(
        exact("content-type", "application/grpc", false),
        &[("content-type", "application/grpc+proto")]
    ));
    // Every header matcher of a route must hold.
    let rc = routes_config(
        "rc",
        vec![
            to_cluster(
                with_header(
                    with_header(prefix(""), exact("a", "1", false)),
                    exact("b", "2", false),
                ),
                "both",
            ),
            to_cluster(prefix(""), "miss"),
        ],
    );
    let (s, _r) = selector(&rc, None);
    assert_eq!(pick(&s, "/x/y", &[("a", "1"), ("b", "2")]), hit("both"));
    assert_eq!(pick(&s, "/x/y", &[("a", "1"), ("b", "3")]), hit("miss"));
}

/// gRFC A28, "Picking": "Note that only custom metadata is considered during header
/// matching, unlike in Envoy, where all headers (including HTTP/2 pseudo-headers) are
/// included. This is because pick happens above gRPC's transport (HTTP/2) layer, so
/// transport headers are not accessible." In PROTOCOL-HTTP2.md, Request-Headers are
/// Call-Definition (`:method`, `:scheme`, `:path`, `:authority`, `te`, `grpc-timeout`,
/// `content-type`, `grpc-message-type`, `grpc-encoding`, `grpc-accept-encoding`,
/// `user-agent`) then Custom-Metadata, whose `grpc-` names are reserved for gRPC. gRPC
/// implementations also leave binary (`-bin`) metadata out of matching and show
/// `content-type` as `application/grpc` (C-core's `GetHeaderValue`).
#[test]
fn a28_only_custom_metadata_is_visible_to_header_matchers() {
    let present = |name: &str| header(name, Spec::PresentMatch(true), false);
    let absent = |name: &str| header(name, Spec::PresentMatch(false), false);
    let exact = |name: &str, value: &str| header(name, Spec::ExactMatch(value.into()), false);
    // Call-Definition headers are never visible, even when the metadata holds them.
    let transport = [
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/svc/M"),
        (":authority", "example.com"),
        ("te", "trailers"),
        ("grpc-timeout", "1S"),
        ("grpc-message-type", "pkg.Request"),
        ("grpc-encoding", "gzip"),
        ("grpc-accept-encoding", "gzip"),
        ("user-agent", "grpc-rust/1.0"),
        ("grpc-previous-rpc-attempts", "1"),
        ("Grpc-Future-Reserved", "x"),
        ("x-trace-bin", "AAEC"),
    ];
    for (name, value) in transport {
        assert!(!header_case(present(name), &transport), "{name} is hidden");
        assert!(header_case(absent(name), &transport), "{name} is hidden");
        assert!(!header_case(exact(name, value), &transport), "{name}");
    }
    // content-type is the one Call-Definition header matchers see, as application/grpc.
    assert!(header_case(
        exact("content-type", "application/grpc"),
        &[("content-type", "application/grpc+json")]
    ));
    // Custom metadata is visible, including names that merely contain the reserved
    // parts.
    let custom = [
        ("x-grpc-tenant", "a"),
        ("grpc", "b"),
        ("grpcx-k", "c"),
        ("x-bin-id", "d"),
        ("x-user-agent", "e"),
        ("tenant", "f"),
    ];
    for (name, value) in custom {
        assert!(
            header_case(exact(name, value), &custom),
            "{name} is custom metadata"
        );
    }
}

#[test]
fn runtime_fraction_draws_from_the_callers_random_source() {
    let rc = routes_config(
        "rc",
        vec![
            to_cluster(with_fraction(prefix("/svc/"), 250_000), "quarter"),
            to_cluster(with_fraction(prefix("/svc/"), 0), "never"),
            to_cluster(with_fraction(prefix("/svc/"), 1_000_000), "always"),
            to_cluster(prefix(""), "rest"),
        ],
    );
    let (s, _r) = selector(&rc, None);
    let route_with = |values: &[u32]| {
        let mut rng = Scripted::new(values);
        let got = s
            .select("/svc/M", &NO_MD, &mut rng)
            .unwrap()
            .cluster()
            .child_name()
            .to_string();
        (got, rng.drawn)
    };
    let below = Scripted::fraction_value(249_999);
    let at = Scripted::fraction_value(250_000);
    assert_eq!(route_with(&[below]), ("cluster:quarter".to_string(), 1));
    // At the threshold the first route fails; the 0% route never matches, the 100% does.
    assert_eq!(
        route_with(&[at, 0, u32::MAX]),
        ("cluster:always".to_string(), 3)
    );
    assert_eq!(
        route_with(&[u32::MAX, 0, 0]),
        ("cluster:always".to_string(), 3)
    );
    // No draw at all for routes whose path does not match.
    let mut rng = Scripted::new(&[]);
    assert_eq!(
        s.select("/other/M", &NO_MD, &mut rng)
            .unwrap()
            .cluster()
            .child_name(),
        "cluster:rest"
    );
    assert_eq!(rng.drawn, 0);
    // Over many seeded draws, the 25% route takes about a quarter.
    let mut rng = SplitMix(3);
    let n = 40_000;
    let quarter = (0..n)
        .filter(|_| {
            s.select("/svc/M", &NO_MD, &mut rng)
                .unwrap()
                .cluster()
                .child_name()
                == "cluster:quarter"
        })
        .count();
    let share = quarter as f64 / n as f64;
    assert!((share - 0.25).abs() < 0.01, "{share}");
}

#[test]
fn non_forwarding_unsupported_and_unmatched_rpcs_fail_as_grpc_does() {
    let rc = routes_config(
        "rc",
        vec![
            non_forwarding(prefix("/nf/")),
            redirect(prefix("/redirect/")),
            to_cluster(prefix("/ok/"), "ok"),
        ],
    );
    let (s, _r) = selector(&rc, None);
    assert_eq!(pick(&s, "/nf/M", &NO_MD), unavailable(INAPPROPRIATE_ACTION));
    assert_eq!(
        pick(&s, "/redirect/M", &NO_MD),
        unavailable(INAPPROPRIATE_ACTION)
    );
    assert_eq!(pick(&s, "/ok/M", &NO_MD), hit("ok"));
    assert_eq!(pick(&s, "/none/M", &NO_MD), unavailable(NO_MATCHING_ROUTE));
    assert_eq!(
        INAPPROPRIATE_ACTION,
        "Matching route has inappropriate action"
    );
    assert_eq!(
        NO_MATCHING_ROUTE,
        "No matching route found in xDS route config"
    );
}

#[test]
fn cluster_specifier_plugins_route_to_a_plugin_child() {
    let mut rc = routes_config(
        "rc",
        vec![
            forward(prefix("/rls/"), plugin_action("rls")),
            to_cluster(prefix(""), "c"),
        ],
    );
    rc.cluster_specifier_plugins = vec![rls_plugin("rls")];
    let (s, mut registry) = selector(&rc, None);
    let sel = s.select("/rls/M", &NO_MD, &mut SplitMix(1)).unwrap();
    assert_eq!(sel.cluster().child_name(), "cluster_specifier_plugin:rls");
    assert_eq!(sel.cluster().plugin(), Some("rls"));
    assert_eq!(sel.cluster().cluster(), None);
    assert_eq!(
        registry.children(),
        vec!["cluster:c", "cluster_specifier_plugin:rls"]
    );
    assert_eq!(
        registry.plugin_children(),
        vec!["cluster_specifier_plugin:rls"]
    );
    let config = registry.lb_config();
    let plugin =
        &config[0]["xds_cluster_manager_experimental"]["children"]["cluster_specifier_plugin:rls"];
    let policy = &plugin["childPolicy"][0]["cluster_specifier_plugin_experimental"];
    assert_eq!(policy["name"], "rls");
    assert_eq!(
        policy["typeUrl"],
        "type.googleapis.com/grpc.lookup.v1.RouteLookupClusterSpecifier"
    );
    assert_eq!(policy["valueBase64"], "CgA=");
    let custom = registry.lb_config_with(|p| serde_like_rls(&p.name));
    assert_eq!(
        custom[0]["xds_cluster_manager_experimental"]["children"]["cluster_specifier_plugin:rls"]["childPolicy"],
        serde_like_rls("rls")
    );
}

fn serde_like_rls(name: &str) -> xds_proto_core::selector::LbConfigJson {
    let mut v = xds_proto_core::selector::LbConfigJson::default();
    v["rls_experimental"]["name"] = name.into();
    v
}

// ---------------------------------------------------------------------------------------
// Virtual hosts
// ---------------------------------------------------------------------------------------

#[test]
fn virtual_host_selection_most_specific_wins() {
    let hosts = [
        ("any", vec!["*"]),
        ("prefix-short", vec!["foo.*"]),
        ("prefix-long", vec!["foo.bar.*"]),
        ("suffix-short", vec!["*.com"]),
        ("suffix-long", vec!["*.bar.com"]),
        ("exact", vec!["foo.bar.com"]),
        ("upper", vec!["FOO.BAZ.COM", "other.example"]),
        ("suffix-long-dup", vec!["*.bar.com"]),
        ("prefix-beats", vec!["foo.bar.baz.*"]),
    ];
    let rc = route_config_of(
        "rc",
        hosts
            .iter()
            .map(|(name, domains)| vhost(name, domains, vec![to_cluster(prefix(""), name)]))
            .collect(),
    );
    let decoded = decode_rc(&rc).unwrap();
    let chosen = |authority: &str| {
        select_virtual_host(&decoded.virtual_hosts, authority)
            .map(|i| decoded.virtual_hosts[i].name.clone())
    };
    for (authority, expected) in [
        ("foo.bar.com", "exact"),
        ("x.bar.com", "suffix-long"),
        ("x.com", "suffix-short"),
        ("bar.com", "suffix-short"),
        ("foo.bar.org", "prefix-long"),
        ("foo.org", "prefix-short"),
        ("elsewhere", "any"),
        ("Foo.Baz.com", "upper"),
        ("OTHER.example", "upper"),
        // A suffix wildcard beats a longer prefix wildcard.
        ("foo.bar.baz.com", "suffix-short"),
        ("foo.bar.baz.org", "prefix-beats"),
        ("svc:8443", "any"),
    ] {
        assert_eq!(chosen(authority).as_deref(), Some(expected), "{authority}");
    }
    // Without `*`, an authority nothing matches has no virtual host.
    let rc = route_config_of(
        "rc",
        vec![vhost(
            "one",
            &["a.example"],
            vec![to_cluster(prefix(""), "c")],
        )],
    );
    let decoded = decode_rc(&rc).unwrap();
    assert_eq!(
        select_virtual_host(&decoded.virtual_hosts, "b.example"),
        None
    );
    assert_eq!(
        select_virtual_host(&decoded.virtual_hosts, "a.example"),
        Some(0)
    );
    assert_eq!(select_virtual_host(&[], "a.example"), None);
}

// ---------------------------------------------------------------------------------------
// Weighted clusters
// ---------------------------------------------------------------------------------------

#[test]
fn weighted_clusters_follow_their_weights_over_a_fixed_seed() {
    let rc = routes_config(
        "rc",
        vec![forward(
            prefix(""),
            weighted_action(&[("a", 10), ("b", 20), ("c", 70)]),
        )],
    );
    let (s, _registry) = selector(&rc, None);
    let n = 200_000;
    let mut counts = [0usize; 3];
    let mut rng = SplitMix(42);
    for _ in 0..n {
        match s
            .select("/svc/M", &NO_MD, &mut rng)
            .unwrap()
            .cluster()
            .cluster()
        {
            Some("a") => counts[0] += 1,
            Some("b") => counts[1] += 1,
            Some("c") => counts[2] += 1,
            other => panic!("{other:?}"),
        }
    }
    for (count, expected) in counts.iter().zip([0.10, 0.20, 0.70]) {
        let share = *count as f64 / n as f64;
        assert!((share - expected).abs() < 0.005, "{counts:?}");
    }
    // The same seed replays the same picks.
    let draw = |seed: u64| -> Vec<String> {
        let mut rng = SplitMix(seed);
        (0..50)
            .map(|_| {
                s.select("/svc/M", &NO_MD, &mut rng)
                    .unwrap()
                    .cluster()
                    .child_name()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
}

#[test]
fn weighted_cluster_boundaries() {
    let rc = routes_config(
        "rc",
        vec![forward(
            prefix(""),
            weighted_action(&[("a", 10), ("b", 20), ("c", 70)]),
        )],
    );
    let (s, _r) = selector(&rc, None);
    // The selector maps x to x * total >> 32; this is the x that lands on `key`.
    let value_for = |key: u64| u32::try_from((key << 32).div_ceil(100)).unwrap();
    for (key, expected) in [
        (0, "a"),
        (9, "a"),
        (10, "b"),
        (29, "b"),
        (30, "c"),
        (99, "c"),
    ] {
        let got = s
            .select("/svc/M", &NO_MD, &mut Scripted::new(&[value_for(key)]))
            .unwrap();
        assert_eq!(got.cluster().cluster(), Some(expected), "key {key}");
    }
    let got = s
        .select("/svc/M", &NO_MD, &mut Scripted::new(&[u32::MAX]))
        .unwrap();
    assert_eq!(got.cluster().cluster(), Some("c"));
    // Clusters without weight are left out by the decoder and never picked.
    let rc = routes_config(
        "rc",
        vec![forward(
            prefix(""),
            weighted_action(&[("zero", 0), ("one", 1)]),
        )],
    );
    let (s, mut registry) = selector(&rc, None);
    let got = s
        .select("/svc/M", &NO_MD, &mut Scripted::new(&[0]))
        .unwrap();
    assert_eq!(got.cluster().cluster(), Some("one"));
    assert_eq!(registry.children(), vec!["cluster:one"]);
}

// ---------------------------------------------------------------------------------------
// Retry policy
// ---------------------------------------------------------------------------------------

fn retry_policy(policy: route::RetryPolicy) -> Result<RetryPolicy, String> {
    let rc = routes_config(
        "rc",
        vec![forward(prefix(""), with_retry(cluster_action("c"), policy))],
    );
    let decoded = decode_rc(&rc)?;
    let mut registry = ClusterRegistry::new();
    let s = ConfigSelector::from_virtual_host(&decoded.virtual_hosts[0], &[], None, &mut registry);
    let sel = s.select("/svc/M", &NO_MD, &mut SplitMix(1)).unwrap();
    Ok(sel.retry_policy().cloned().expect("a retry policy"))
}

fn retry_on(conditions: &str) -> route::RetryPolicy {
    route::RetryPolicy {
        retry_on: conditions.to_string(),
        ..Default::default()
    }
}

#[test]
fn every_retry_on_condition() {
    for (name, code) in [
        ("cancelled", G::Cancelled),
        ("deadline-exceeded", G::DeadlineExceeded),
        ("internal", G::Internal),
        ("resource-exhausted", G::ResourceExhausted),
        ("unavailable", G::Unavailable),
    ] {
        let p = retry_policy(retry_on(name)).unwrap();
        assert_eq!(p.retryable_codes, vec![code], "{name}");
        assert!(p.http_conditions.is_empty(), "{name}");
    }
    assert_eq!(
        [
            G::Cancelled,
            G::DeadlineExceeded,
            G::ResourceExhausted,
            G::Internal,
            G::Unavailable
        ]
        .map(G::code),
        [1, 4, 8, 13, 14]
    );
    for (name, condition) in [
        ("5xx", H::FiveXx),
        ("gateway-error", H::GatewayError),
        ("reset", H::Reset),
        ("connect-failure", H::ConnectFailure),
        ("retriable-4xx", H::Retriable4xx),
        ("refused-stream", H::RefusedStream),
        ("retriable-status-codes", H::RetriableStatusCodes),
        ("retriable-headers", H::RetriableHeaders),
    ] {
        let p = retry_policy(retry_on(name)).unwrap();
        assert_eq!(p.http_conditions, vec![condition], "{name}");
        assert!(
            p.retryable_codes.is_empty(),
            "{name}: gRPC does not retry on HTTP conditions"
        );
    }
    // A list: trimmed, duplicates merged, unknown conditions ignored, sorted.
    let p = retry_policy(retry_on(
        "unavailable, 5xx,cancelled ,bogus,,unavailable,retriable-status-codes,x-envoy-other",
    ))
    .unwrap();
    assert_eq!(p.retryable_codes, vec![G::Cancelled, G::Unavailable]);
    assert_eq!(p.http_conditions, vec![H::FiveXx, H::RetriableStatusCodes]);
    // Only unknown conditions: a policy that retries nothing.
    let p = retry_policy(retry_on("bogus")).unwrap();
    assert!(p.retryable_codes.is_empty() && p.http_conditions.is_empty());
}

#[test]
fn retry_counts_and_backoff_defaults() {
    let p = retry_policy(retry_on("unavailable")).unwrap();
    assert_eq!((p.num_retries, p.max_attempts), (1, 2));
    assert_eq!(p.base_interval, Duration::from_millis(25));
    assert_eq!(p.max_interval, Duration::from_millis(250));
    assert_eq!(p.per_try_timeout, None);
    for (retries, attempts) in [(1, 2), (3, 4), (4, 5), (5, 5), (100, 5)] {
        let p = retry_policy(route::RetryPolicy {
            num_retries: Some(UInt32Value { value: retries }),
            ..retry_on("unavailable")
        })
        .unwrap();
        assert_eq!((p.num_retries, p.max_attempts), (retries, attempts));
    }
    let backoff = |base: Option<Duration>, max: Option<Duration>| route::RetryPolicy {
        retry_back_off: Some(route::retry_policy::RetryBackOff {
            base_interval: base.map(pb_duration),
            max_interval: max.map(pb_duration),
        }),
        ..retry_on("unavailable")
    };
    let p = retry_policy(backoff(Some(Duration::from_millis(100)), None)).unwrap();
    assert_eq!(
        (p.base_interval, p.max_interval),
        (Duration::from_millis(100), SEC)
    );
    let p = retry_policy(backoff(
        Some(Duration::from_millis(100)),
        Some(Duration::from_millis(300)),
    ))
    .unwrap();
    assert_eq!(
        (p.base_interval, p.max_interval),
        (Duration::from_millis(100), Duration::from_millis(300))
    );
}

#[test]
fn contour_retry_on_example() {
    // retryPolicy: {count: 3, perTryTimeout: 150ms, retryOn: [connect-failure],
    // retriableStatusCodes: [503, 504]} becomes this Envoy RetryPolicy.
    let envoy = route::RetryPolicy {
        retry_on: "connect-failure".to_string(),
        retriable_status_codes: vec![503, 504],
        num_retries: Some(UInt32Value { value: 3 }),
        per_try_timeout: Some(pb_duration(Duration::from_millis(150))),
        ..Default::default()
    };
    let p = retry_policy(envoy).unwrap();
    assert_eq!(
        p,
        RetryPolicy {
            retryable_codes: vec![],
            http_conditions: vec![H::ConnectFailure],
            retriable_status_codes: vec![503, 504],
            num_retries: 3,
            max_attempts: 4,
            per_try_timeout: Some(Duration::from_millis(150)),
            base_interval: Duration::from_millis(25),
            max_interval: Duration::from_millis(250),
        }
    );
}

#[test]
fn invalid_retry_policies_are_nacked() {
    let p = "virtual_hosts[0].routes[0].route.retry_policy";
    let backoff =
        |base: Option<xds_proto_core::pb::google::protobuf::Duration>,
         max: Option<xds_proto_core::pb::google::protobuf::Duration>| route::RetryPolicy {
            retry_back_off: Some(route::retry_policy::RetryBackOff {
                base_interval: base,
                max_interval: max,
            }),
            ..retry_on("unavailable")
        };
    let ms = |n: u64| Some(pb_duration(Duration::from_millis(n)));
    let cases = [
        (
            route::RetryPolicy {
                num_retries: Some(UInt32Value { value: 0 }),
                ..retry_on("unavailable")
            },
            format!("{p}.num_retries: must be greater than 0"),
        ),
        (
            backoff(None, None),
            format!("{p}.retry_back_off.base_interval: field not present"),
        ),
        (
            backoff(ms(0), None),
            format!("{p}.retry_back_off.base_interval: must be greater than 0"),
        ),
        (
            backoff(Some(raw_duration(-1, 0)), None),
            format!(
                "{p}.retry_back_off.base_interval.seconds: value -1 must be in the range [0, 315576000000]"
            ),
        ),
        (
            backoff(Some(raw_duration(0, -5)), None),
            format!(
                "{p}.retry_back_off.base_interval.nanos: value -5 must be in the range [0, 999999999]"
            ),
        ),
        (
            backoff(ms(10), ms(0)),
            format!("{p}.retry_back_off.max_interval: must be greater than 0"),
        ),
        (
            backoff(ms(10), Some(raw_duration(-2, 0))),
            format!(
                "{p}.retry_back_off.max_interval.seconds: value -2 must be in the range [0, 315576000000]"
            ),
        ),
        (
            backoff(ms(10), ms(5)),
            format!(
                "{p}.retry_back_off.max_interval: must not be less than base_interval (5ms < 10ms)"
            ),
        ),
        (
            route::RetryPolicy {
                per_try_timeout: Some(raw_duration(-1, 0)),
                ..retry_on("unavailable")
            },
            format!("{p}.per_try_timeout.seconds: value -1 must be in the range [0, 315576000000]"),
        ),
    ];
    for (policy, message) in cases {
        assert_eq!(retry_policy(policy).unwrap_err(), message);
    }
}

#[test]
fn the_route_retry_policy_overrides_the_virtual_host_one() {
    let mut vh = vhost(
        "vh",
        &["*"],
        vec![
            forward(
                path("/svc/Own"),
                with_retry(
                    cluster_action("c"),
                    route::RetryPolicy {
                        retry_on: "cancelled".into(),
                        ..Default::default()
                    },
                ),
            ),
            to_cluster(prefix(""), "c"),
        ],
    );
    vh.retry_policy = Some(route::RetryPolicy {
        retry_on: "unavailable".into(),
        num_retries: Some(UInt32Value { value: 2 }),
        ..Default::default()
    });
    let rc = route_config_of("rc", vec![vh]);
    let (s, _r) = selector(&rc, None);
    let policy = |p: &str| {
        s.select(p, &NO_MD, &mut SplitMix(1))
            .unwrap()
            .retry_policy()
            .cloned()
            .unwrap()
    };
    let own = policy("/svc/Own");
    assert_eq!(
        (own.retryable_codes, own.max_attempts),
        (vec![G::Cancelled], 2)
    );
    let inherited = policy("/svc/Other");
    assert_eq!(
        (inherited.retryable_codes, inherited.max_attempts),
        (vec![G::Unavailable], 3)
    );
    // Without either, no policy.
    let (s, _r) = selector(
        &routes_config("rc", vec![to_cluster(prefix(""), "c")]),
        None,
    );
    assert!(
        s.select("/x/y", &NO_MD, &mut SplitMix(1))
            .unwrap()
            .retry_policy()
            .is_none()
    );
}

// ---------------------------------------------------------------------------------------
// Cluster lifetime
// ---------------------------------------------------------------------------------------

fn child_list(registry: &mut ClusterRegistry) -> Vec<String> {
    registry.children()
}

#[test]
fn a_removed_cluster_stays_in_the_lb_config_until_its_last_handle_is_dropped() {
    let released = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = released.clone();
    let mut registry = ClusterRegistry::with_release_callback(move |child| {
        log.lock().unwrap().push(child.to_string())
    });
    let first = decode_rc(&routes_config("r", vec![to_cluster(prefix(""), "a")])).unwrap();
    let second = decode_rc(&routes_config("r", vec![to_cluster(prefix(""), "b")])).unwrap();
    let s1 = ConfigSelector::from_virtual_host(&first.virtual_hosts[0], &[], None, &mut registry);
    let rpc: Selection = s1.select("/svc/M", &NO_MD, &mut SplitMix(1)).unwrap();
    assert_eq!(rpc.cluster().cluster(), Some("a"));
    // The routes move to b: the new selector cannot pick a, the LB config keeps it.
    let s2 = ConfigSelector::from_virtual_host(&second.virtual_hosts[0], &[], None, &mut registry);
    assert_eq!(s2.children(), vec!["cluster:b"]);
    assert_eq!(child_list(&mut registry), vec!["cluster:a", "cluster:b"]);
    drop(s1);
    assert!(!registry.take_released(), "the RPC still holds a");
    assert_eq!(child_list(&mut registry), vec!["cluster:a", "cluster:b"]);
    let handle = rpc.clone().into_cluster();
    drop(rpc);
    assert!(!registry.take_released());
    drop(handle);
    assert!(registry.take_released());
    assert!(!registry.take_released(), "the flag is cleared");
    assert_eq!(*released.lock().unwrap(), vec!["cluster:a".to_string()]);
    assert_eq!(child_list(&mut registry), vec!["cluster:b"]);
    assert_eq!(
        registry.lb_config().to_string(),
        r#"[{"xds_cluster_manager_experimental":{"children":{"cluster:b":{"childPolicy":[{"cds_experimental":{"cluster":"b"}}]}}}}]"#
    );
    // Selectors built for the same cluster share its entry.
    let s3 = ConfigSelector::from_virtual_host(&second.virtual_hosts[0], &[], None, &mut registry);
    let x = s2.select("/svc/M", &NO_MD, &mut SplitMix(1)).unwrap();
    let y = s3.select("/svc/M", &NO_MD, &mut SplitMix(1)).unwrap();
    assert!(xds_proto_core::selector::ClusterHandle::ptr_eq(
        x.cluster(),
        y.cluster()
    ));
    drop((s2, s3, x, y));
    assert!(registry.take_released());
    assert!(child_list(&mut registry).is_empty());
    // A cluster released and then referenced again comes back as a new entry.
    let s4 = ConfigSelector::from_virtual_host(&first.virtual_hosts[0], &[], None, &mut registry);
    assert!(registry.contains("cluster:a"));
    drop(s4);
    assert!(!registry.contains("cluster:a"));
}

#[test]
fn selections_can_be_sent_to_other_threads_and_dropped_there() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let counter = dropped.clone();
    let mut registry = ClusterRegistry::with_release_callback(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let rc = decode_rc(&routes_config("r", vec![to_cluster(prefix(""), "a")])).unwrap();
    let s = Arc::new(ConfigSelector::from_virtual_host(
        &rc.virtual_hosts[0],
        &[],
        None,
        &mut registry,
    ));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut rng = SplitMix(t);
                for _ in 0..1_000 {
                    let sel = s.select("/svc/M", &NO_MD, &mut rng).unwrap();
                    assert_eq!(sel.cluster().cluster(), Some("a"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    drop(s);
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------
// Dependency manager scenarios
// ---------------------------------------------------------------------------------------

const LISTENER: &str = "lis";
const AUTHORITY: &str = "svc.example.com";

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn cluster_names(config: &XdsConfig) -> Vec<String> {
    config.clusters.keys().cloned().collect()
}

/// Brings a driver to a first config: listener → `rc` over RDS → EDS clusters with one
/// endpoint each.
fn resolved(rc: route::RouteConfiguration, clusters: &[&str]) -> (DmDriver, Arc<XdsConfig>) {
    let mut d = DmDriver::new(LISTENER, AUTHORITY);
    d.respond(LDS, "1", vec![listener_rds(LISTENER, &rc.name, None)]);
    d.respond(RDS, "1", vec![rc_any(&rc)]);
    assert_eq!(d.names(CDS), names(clusters));
    d.respond(
        CDS,
        "1",
        clusters.iter().map(|c| eds_cluster(c, None)).collect(),
    );
    assert_eq!(d.names(EDS), names(clusters));
    d.respond(
        EDS,
        "1",
        clusters.iter().map(|c| endpoints(c, &[80])).collect(),
    );
    let config = d.expect_config();
    (d, config)
}

#[test]
fn dm_resolves_listener_routes_clusters_and_endpoints_in_order() {
    let mut d = DmDriver::new(LISTENER, AUTHORITY);
    assert_eq!(d.names(LDS), names(&[LISTENER]));
    d.expect_no_update();
    d.respond(LDS, "1", vec![listener_rds(LISTENER, "r1", Some(secs(7)))]);
    assert_eq!(d.names(RDS), names(&["r1"]));
    d.expect_no_update();
    let rc = route_config_of(
        "r1",
        vec![
            vhost(
                "other",
                &["other.example.com"],
                vec![to_cluster(prefix(""), "unused")],
            ),
            vhost(
                "mine",
                &["*.example.com"],
                vec![
                    to_cluster(path("/svc.A/Call"), "a"),
                    to_cluster(prefix(""), "b"),
                ],
            ),
        ],
    );
    d.respond(RDS, "1", vec![rc_any(&rc)]);
    // Only the chosen virtual host's clusters are watched.
    assert_eq!(d.names(CDS), names(&["a", "b"]));
    d.expect_no_update();
    d.respond(
        CDS,
        "1",
        vec![eds_cluster("a", None), eds_cluster("b", Some("b-eds"))],
    );
    assert_eq!(d.names(EDS), names(&["a", "b-eds"]));
    d.respond(EDS, "1", vec![endpoints("a", &[80])]);
    d.expect_no_update();
    d.respond(EDS, "2", vec![endpoints("b-eds", &[81])]);
    let config = d.expect_config();
    assert_eq!(config.virtual_host().name, "mine");
    assert_eq!(config.max_stream_duration, Some(secs(7)));
    assert_eq!(cluster_names(&config), names(&["a", "b"]));
    match &config.clusters["b"].as_ref().unwrap().children {
        ClusterResolution::Endpoints {
            service_name,
            endpoints,
            resolution_note,
        } => {
            assert_eq!(service_name, "b-eds");
            assert_eq!(
                endpoints.as_ref().unwrap().priorities[0].localities[0]
                    .endpoints
                    .len(),
                1
            );
            assert_eq!(resolution_note, &None);
        }
        other => panic!("{other:?}"),
    }
    assert!(d.others.is_empty());
    let mut watched = d.dm.watched();
    watched.sort();
    assert_eq!(watched.len(), 6, "{watched:?}");
    // The config feeds a selector: the HCM duration caps timeouts.
    let mut registry = ClusterRegistry::new();
    let s = ConfigSelector::new(&config, &mut registry);
    let sel = s.select("/svc.A/Call", &NO_MD, &mut SplitMix(1)).unwrap();
    assert_eq!(sel.cluster().cluster(), Some("a"));
    assert_eq!(sel.effective_timeout(Some(secs(20))), Some(secs(7)));
    assert_eq!(pick(&s, "/svc.B/Call", &NO_MD), hit("b"));
    // Nothing changes: no new update.
    d.respond(
        CDS,
        "2",
        vec![eds_cluster("a", None), eds_cluster("b", Some("b-eds"))],
    );
    d.expect_no_update();
}

#[test]
fn dm_rds_swap_waits_for_the_new_routes_and_drops_the_old_watches() {
    let (mut d, config) = resolved(
        routes_config("r1", vec![to_cluster(prefix(""), "c1")]),
        &["c1"],
    );
    assert_eq!(config.route_config.name, "r1");
    let mut registry = ClusterRegistry::new();
    let s1 = ConfigSelector::new(&config, &mut registry);
    // The listener now names r2.
    d.respond(LDS, "2", vec![listener_rds(LISTENER, "r2", None)]);
    assert_eq!(d.names(RDS), names(&["r2"]));
    // Until r2 arrives the old config stands and its cluster stays watched.
    d.expect_no_update();
    assert_eq!(d.names(CDS), names(&["c1"]));
    d.respond(
        RDS,
        "2",
        vec![rc_any(&routes_config(
            "r2",
            vec![to_cluster(prefix(""), "c2")],
        ))],
    );
    assert_eq!(d.names(CDS), names(&["c2"]));
    assert_eq!(d.names(EDS), Vec::<String>::new());
    d.expect_no_update();
    d.respond(CDS, "2", vec![eds_cluster("c2", None)]);
    assert_eq!(d.names(EDS), names(&["c2"]));
    d.respond(EDS, "2", vec![endpoints("c2", &[81])]);
    let config2 = d.expect_config();
    assert_eq!(config2.route_config.name, "r2");
    assert_eq!(cluster_names(&config2), names(&["c2"]));
    let s2 = ConfigSelector::new(&config2, &mut registry);
    assert_eq!(pick(&s2, "/any/Call", &NO_MD), hit("c2"));
    assert_eq!(registry.children(), vec!["cluster:c1", "cluster:c2"]);
    drop(s1);
    assert_eq!(registry.children(), vec!["cluster:c2"]);
    // An invalid update of the cached r2 is an ambient error: the config stands.
    let mut bad = routes_config("r2", vec![to_cluster(prefix(""), "c3")]);
    bad.virtual_hosts[0].domains = vec!["a*b".to_string()];
    d.respond(RDS, "3", vec![rc_any(&bad)]);
    d.expect_no_update();
    assert_eq!(d.names(CDS), names(&["c2"]));
}

#[test]
fn dm_clusters_added_and_removed_while_rpcs_hold_handles() {
    let r1 = |routes| routes_config("r1", routes);
    let (mut d, config1) = resolved(
        r1(vec![
            to_cluster(path("/svc.A/Call"), "a"),
            to_cluster(prefix(""), "a"),
        ]),
        &["a"],
    );
    let released = Arc::new(AtomicUsize::new(0));
    let counter = released.clone();
    let mut registry = ClusterRegistry::with_release_callback(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let s1 = ConfigSelector::new(&config1, &mut registry);
    let rpc_a = s1.select("/svc.A/Call", &NO_MD, &mut SplitMix(1)).unwrap();
    assert_eq!(registry.children(), vec!["cluster:a"]);

    // Cluster b is added: no update until b is resolved.
    d.respond(
        RDS,
        "2",
        vec![rc_any(&r1(vec![
            to_cluster(path("/svc.B/Call"), "b"),
            to_cluster(prefix(""), "a"),
        ]))],
    );
    assert_eq!(d.names(CDS), names(&["a", "b"]));
    d.expect_no_update();
    d.respond(
        CDS,
        "2",
        vec![eds_cluster("a", None), eds_cluster("b", None)],
    );
    assert_eq!(d.names(EDS), names(&["a", "b"]));
    d.expect_no_update();
    d.respond(EDS, "2", vec![endpoints("b", &[81])]);
    let config2 = d.expect_config();
    assert_eq!(cluster_names(&config2), names(&["a", "b"]));
    let s2 = ConfigSelector::new(&config2, &mut registry);
    let rpc_b = s2.select("/svc.B/Call", &NO_MD, &mut SplitMix(1)).unwrap();
    assert_eq!(rpc_b.cluster().cluster(), Some("b"));
    assert_eq!(registry.children(), vec!["cluster:a", "cluster:b"]);

    // Cluster a is removed from the routes: its watches go at once, the config follows.
    d.respond(
        RDS,
        "3",
        vec![rc_any(&r1(vec![to_cluster(prefix(""), "b")]))],
    );
    assert_eq!(d.names(CDS), names(&["b"]));
    assert_eq!(d.names(EDS), names(&["b"]));
    let config3 = d.expect_config();
    assert_eq!(cluster_names(&config3), names(&["b"]));
    let s3 = ConfigSelector::new(&config3, &mut registry);
    assert_eq!(pick(&s3, "/svc.A/Call", &NO_MD), hit("b"));
    // a stays in the LB config while the old selectors or the RPC hold it.
    assert_eq!(registry.children(), vec!["cluster:a", "cluster:b"]);
    drop(s1);
    drop(s2);
    assert_eq!(registry.children(), vec!["cluster:a", "cluster:b"]);
    assert_eq!(released.load(Ordering::SeqCst), 0);
    assert!(!registry.take_released());
    drop(rpc_a);
    assert_eq!(released.load(Ordering::SeqCst), 1);
    assert!(registry.take_released());
    assert_eq!(registry.children(), vec!["cluster:b"]);
    let lb = registry.lb_config();
    assert_eq!(
        lb[0]["xds_cluster_manager_experimental"]["children"]["cluster:b"]["childPolicy"][0]["cds_experimental"]
            ["cluster"],
        "b"
    );
    assert!(
        lb[0]["xds_cluster_manager_experimental"]["children"]
            .get("cluster:a")
            .is_none()
    );
    // b is still held by s3 and the RPC.
    drop(rpc_b);
    assert_eq!(registry.children(), vec!["cluster:b"]);
}

#[test]
fn dm_a_cluster_that_does_not_exist_fails_its_rpcs_with_unavailable() {
    let mut d = DmDriver::new(LISTENER, AUTHORITY);
    d.respond(LDS, "1", vec![listener_rds(LISTENER, "r1", None)]);
    d.respond(
        RDS,
        "1",
        vec![rc_any(&routes_config(
            "r1",
            vec![
                to_cluster(path("/svc/Ghost"), "ghost"),
                to_cluster(prefix(""), "c"),
            ],
        ))],
    );
    d.respond(CDS, "1", vec![eds_cluster("c", None)]);
    d.respond(EDS, "1", vec![endpoints("c", &[80])]);
    d.expect_no_update();
    d.advance(Duration::from_secs(15));
    let config = d.expect_config();
    let ghost = config.clusters["ghost"].as_ref().unwrap_err();
    assert_eq!(ghost.kind, ErrorKind::DoesNotExist);
    let mut registry = ClusterRegistry::new();
    let s = ConfigSelector::new(&config, &mut registry);
    let err = s
        .select("/svc/Ghost", &NO_MD, &mut SplitMix(1))
        .unwrap_err();
    assert_eq!(err.code, Code::UNAVAILABLE);
    assert!(err.message.starts_with("cluster \"ghost\": "), "{err}");
    assert!(err.message.contains("does not exist"), "{err}");
    assert_eq!(pick(&s, "/svc/Other", &NO_MD), hit("c"));
}

fn resolve_all_cds(d: &mut DmDriver, clusters: &[xds_proto_core::pb::google::protobuf::Any]) {
    // The manager subscribes level by level; answer with everything until it stops asking.
    let mut version = 0;
    loop {
        let before = d.names(CDS);
        version += 1;
        d.respond(CDS, &version.to_string(), clusters.to_vec());
        if d.names(CDS) == before {
            break;
        }
    }
}

#[test]
fn dm_aggregate_clusters_cycles_are_errors_naming_the_cycle() {
    let mut d = DmDriver::new(LISTENER, AUTHORITY);
    d.respond(LDS, "1", vec![listener_rds(LISTENER, "r1", None)]);
    d.respond(
        RDS,
        "1",
        vec![rc_any(&routes_config(
            "r1",
            vec![
                to_cluster(path("/svc/Cycle"), "agg-a"),
                to_cluster(prefix(""), "agg-x"),
            ],
        ))],
    );
    resolve_all_cds(
        &mut d,
        &[
            aggregate_cluster("agg-a", &["agg-b"]),
            aggregate_cluster("agg-b", &["agg-a"]),
            // A cycle next to a usable leaf: the leaf is used.
            aggregate_cluster("agg-x", &["agg-y", "leaf"]),
            aggregate_cluster("agg-y", &["agg-x", "leaf"]),
            eds_cluster("leaf", None),
        ],
    );
    assert_eq!(
        d.names(CDS),
        names(&["agg-a", "agg-b", "agg-x", "agg-y", "leaf"])
    );
    assert_eq!(d.names(EDS), names(&["leaf"]));
    d.respond(EDS, "1", vec![endpoints("leaf", &[80])]);
    let config = d.expect_config();
    let a = config.clusters["agg-a"].as_ref().unwrap_err();
    assert_eq!(a.status.code, Code::UNAVAILABLE);
    assert!(
        a.status
            .message
            .contains("cycle \"agg-a\" -> \"agg-b\" -> \"agg-a\""),
        "{a}"
    );
    assert!(config.clusters["agg-b"].is_err());
    match &config.clusters["agg-x"].as_ref().unwrap().children {
        ClusterResolution::Aggregate { leaf_clusters } => {
            assert_eq!(leaf_clusters, &names(&["leaf"]))
        }
        other => panic!("{other:?}"),
    }
    let mut registry = ClusterRegistry::new();
    let s = ConfigSelector::new(&config, &mut registry);
    let err = s
        .select("/svc/Cycle", &NO_MD, &mut SplitMix(1))
        .unwrap_err();
    assert_eq!(err.code, Code::UNAVAILABLE);
    assert!(err.message.contains("cycle"), "{err}");
    assert_eq!(pick(&s, "/svc/Other", &NO_MD), hit("agg-x"));
}

#[test]
fn dm_aggregate_depth_is_limited_to_sixteen_levels() {
    // agg0 -> agg1 -> ... -> aggN -> leaf: the leaf sits at depth N + 1.
    let chain = |n: usize, leaf: &str| -> Vec<xds_proto_core::pb::google::protobuf::Any> {
        let mut out: Vec<_> = (0..n)
            .map(|i| aggregate_cluster(&format!("agg{i}"), &[&format!("agg{}", i + 1)]))
            .collect();
        out.push(aggregate_cluster(&format!("agg{n}"), &[leaf]));
        out.push(eds_cluster(leaf, None));
        out
    };
    for (last, ok) in [
        (MAX_AGGREGATE_CLUSTER_DEPTH - 1, true),
        (MAX_AGGREGATE_CLUSTER_DEPTH, false),
    ] {
        let mut d = DmDriver::new(LISTENER, AUTHORITY);
        d.respond(LDS, "1", vec![listener_rds(LISTENER, "r1", None)]);
        d.respond(
            RDS,
            "1",
            vec![rc_any(&routes_config(
                "r1",
                vec![to_cluster(prefix(""), "agg0")],
            ))],
        );
        resolve_all_cds(&mut d, &chain(last, "leaf"));
        if ok {
            // The leaf at depth 16 is within the limit.
            assert_eq!(d.names(EDS), names(&["leaf"]));
            d.respond(EDS, "1", vec![endpoints("leaf", &[80])]);
            let config = d.expect_config();
            match &config.clusters["agg0"].as_ref().unwrap().children {
                ClusterResolution::Aggregate { leaf_clusters } => {
                    assert_eq!(leaf_clusters, &names(&["leaf"]))
                }
                other => panic!("{other:?}"),
            }
        } else {
            // The leaf would sit at depth 17: it is not even watched.
            assert!(!d.names(CDS).contains(&"leaf".to_string()));
            assert_eq!(d.names(EDS), Vec::<String>::new());
            let config = d.expect_config();
            let e = config.clusters["agg0"].as_ref().unwrap_err();
            assert!(
                e.status.message.contains("exceeds the maximum depth of 16"),
                "{e}"
            );
        }
    }
}

#[test]
fn dm_missing_eds_resolves_with_a_note_after_the_does_not_exist_timer() {
    let mut d = DmDriver::new(LISTENER, AUTHORITY);
    d.respond(LDS, "1", vec![listener_rds(LISTENER, "r1", None)]);
    d.respond(
        RDS,
        "1",
        vec![rc_any(&routes_config(
            "r1",
            vec![to_cluster(prefix(""), "c")],
        ))],
    );
    d.respond(CDS, "1", vec![eds_cluster("c", Some("c-eds"))]);
    assert_eq!(d.names(EDS), names(&["c-eds"]));
    d.advance(Duration::from_secs(14));
    d.expect_no_update();
    d.advance(SEC);
    let config = d.expect_config();
    match &config.clusters["c"].as_ref().unwrap().children {
        ClusterResolution::Endpoints {
            service_name,
            endpoints,
            resolution_note,
        } => {
            assert_eq!(service_name, "c-eds");
            assert!(endpoints.is_none());
            let note = resolution_note.as_deref().unwrap();
            assert!(
                note.contains("\"c-eds\"") && note.contains("does not exist"),
                "{note}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The cluster itself is fine: RPCs are routed to it (its LB policy has no endpoints).
    let mut registry = ClusterRegistry::new();
    let s = ConfigSelector::new(&config, &mut registry);
    assert_eq!(pick(&s, "/svc/M", &NO_MD), hit("c"));
    // When the endpoints arrive, the config is updated.
    d.respond(EDS, "1", vec![endpoints("c-eds", &[80])]);
    let config = d.expect_config();
    assert!(matches!(
        &config.clusters["c"].as_ref().unwrap().children,
        ClusterResolution::Endpoints {
            endpoints: Some(_),
            resolution_note: None,
            ..
        }
    ));
}

#[test]
fn dm_listener_and_route_errors_are_emitted_as_errors() {
    // The listener does not exist.
    let mut d = DmDriver::new(LISTENER, AUTHORITY);
    d.advance(Duration::from_secs(15));
    let e = d.expect_error();
    assert_eq!(e.kind, ErrorKind::DoesNotExist);
    assert_eq!(e.status.code, Code::UNAVAILABLE);
    assert!(e.status.message.contains("\"lis\""), "{e}");
    // It appears: the config follows.
    d.respond(
        LDS,
        "1",
        vec![listener_inline(
            LISTENER,
            routes_config("inline", vec![to_cluster(prefix(""), "c")]),
            None,
        )],
    );
    // Inline routes: no RDS watch.
    assert_eq!(d.names(RDS), Vec::<String>::new());
    d.respond(
        CDS,
        "1",
        vec![logical_dns_cluster("c", "backend.example", 443)],
    );
    let config = d.expect_config();
    assert_eq!(config.route_config.name, "inline");
    assert_eq!(
        config.clusters["c"].as_ref().unwrap().children,
        ClusterResolution::LogicalDns {
            host: "backend.example".to_string(),
            port: 443
        }
    );
    // A server listener cannot route RPCs.
    d.respond(LDS, "2", vec![server_listener(LISTENER)]);
    let e = d.expect_error();
    assert!(e.status.message.contains("not an API listener"), "{e}");
    assert_eq!(
        d.names(CDS),
        Vec::<String>::new(),
        "clusters are no longer watched"
    );
}

#[test]
fn dm_no_virtual_host_for_the_authority_is_an_error() {
    let mut d = DmDriver::new(LISTENER, "nowhere.example.org");
    d.respond(LDS, "1", vec![listener_rds(LISTENER, "r1", None)]);
    let rc = route_config_of(
        "r1",
        vec![vhost(
            "vh",
            &["*.example.com"],
            vec![to_cluster(prefix(""), "c")],
        )],
    );
    d.respond(RDS, "1", vec![rc_any(&rc)]);
    let e = d.expect_error();
    assert_eq!(
        e.status,
        Status::new(
            Code::UNAVAILABLE,
            "could not find VirtualHost for \"nowhere.example.org\" in RouteConfiguration \"r1\""
        )
    );
    assert_eq!(d.names(CDS), Vec::<String>::new());
    // A new version of the route configuration matches the authority.
    let rc = route_config_of(
        "r1",
        vec![vhost(
            "vh",
            &["*.example.org"],
            vec![to_cluster(prefix(""), "c")],
        )],
    );
    d.respond(RDS, "2", vec![rc_any(&rc)]);
    d.respond(CDS, "1", vec![eds_cluster("c", None)]);
    d.respond(EDS, "1", vec![endpoints("c", &[80])]);
    d.expect_config();
}

#[test]
fn dm_leaves_other_watchers_notifications_alone_and_dynamic_subscriptions_work() {
    let (mut d, _config) = resolved(
        routes_config("r1", vec![to_cluster(prefix(""), "c1")]),
        &["c1"],
    );
    // Another watcher of the same cluster, on the same client.
    let other = d.h.client.watch::<Cds>("c1").unwrap();
    d.pump();
    assert_eq!(d.others.len(), 1);
    assert_eq!(d.others[0].watcher, other);
    assert!(matches!(d.others[0].event, WatchEvent::Changed(Ok(_))));
    assert!(!d.dm.owns(other));
    // A dynamic subscription (what an RLS plugin would ask for).
    d.dm.subscribe_cluster(&mut d.h.client, "extra");
    d.pump();
    assert_eq!(d.names(CDS), names(&["c1", "extra"]));
    d.respond(
        CDS,
        "2",
        vec![eds_cluster("c1", None), eds_cluster("extra", None)],
    );
    d.respond(EDS, "2", vec![endpoints("extra", &[82])]);
    let config = d.expect_config();
    assert_eq!(cluster_names(&config), names(&["c1", "extra"]));
    // Both watchers of c1 get the change.
    d.others.clear();
    d.respond(
        CDS,
        "3",
        vec![
            xds_proto_tests::fixtures::cluster_v("c1", 9),
            eds_cluster("extra", None),
        ],
    );
    assert_eq!(d.others.len(), 1);
    let config = d.expect_config();
    assert_eq!(
        config.clusters["c1"].as_ref().unwrap().cluster.max_requests,
        9
    );
    d.dm.unsubscribe_cluster(&mut d.h.client, "extra");
    d.pump();
    assert_eq!(d.names(CDS), names(&["c1"]));
    let config = d.expect_config();
    assert_eq!(cluster_names(&config), names(&["c1"]));
    // Stopping cancels everything the manager watched; the other watcher keeps c1.
    d.dm.stop(&mut d.h.client);
    d.pump();
    assert!(d.dm.watched().is_empty());
    assert_eq!(d.names(CDS), names(&["c1"]));
    assert_eq!(d.names(LDS), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------------
// The indexed table agrees with a linear first-match scan
// ---------------------------------------------------------------------------------------

const SERVICES: [&str; 4] = ["/a.S/", "/b.S/", "/A.s/", "/c.T/"];
const METHODS: [&str; 4] = ["M", "N", "m", "Mx"];

fn pick_from<'a>(rng: &mut SplitMix, items: &[&'a str]) -> &'a str {
    items[(rng.next_u32() as usize) % items.len()]
}

/// Path regexes for generated routes: with a literal service (indexed), without one
/// (scanned, compiled into multi-pattern DFAs read backwards), and ones a DFA cannot
/// take (Unicode word boundaries: run on their own).
const REGEXES: [&str; 24] = [
    ".*M",
    "/a\\.S/.*",
    "/[ab]\\.S/[MN]",
    "/a\\.S/Mx?",
    "/A\\.s/m+",
    "/b\\.S/(M|N)",
    "/c\\.T/M.*",
    "/a\\.S/M|/b\\.S/N",
    ".*N",
    ".*/Mx?",
    ".*\\.S/M",
    "",
    ".*",
    "(?i)/a\\.s/m",
    "/a\\.S/M\\b",
    "\\b.*\\b",
    "(?-u:\\b)/.*",
    "[^M]*",
    "/\\w\\.[ST]/\\w+",
    ".+M|/c\\.T/.*",
    "/ü\\.S/M",
    "/..S/.x",
    ".*[Mm]$",
    "^/c.*",
];

/// One route; `regex_heavy` makes most of them scanned regexes (to fill several DFA
/// groups) mixed with prefixes, exact paths and conditional routes in random order.
fn generated_route(rng: &mut SplitMix, i: usize, regex_heavy: bool) -> route::Route {
    let svc = pick_from(rng, &SERVICES);
    let method = pick_from(rng, &METHODS);
    let kind = if regex_heavy && !rng.next_u32().is_multiple_of(3) {
        6
    } else {
        rng.next_u32() % 11
    };
    let m = match kind {
        0 | 1 => path(&format!("{svc}{method}")),
        2 | 3 => prefix(svc),
        4 => prefix(&format!("{svc}{}", &method[..1])),
        5 => prefix(pick_from(rng, &["", "/", "/a", "/b.S"])),
        6 => {
            let r = regex(pick_from(rng, &REGEXES));
            match rng.next_u32() % 8 {
                0 => with_header(r, header("x-k", Spec::PresentMatch(true), false)),
                1 => with_fraction(r, rng.next_u32() % 1_000_001),
                _ => r,
            }
        }
        7 => case_sensitive(
            if rng.next_u32().is_multiple_of(2) {
                path(&format!("{svc}{method}"))
            } else {
                prefix(svc)
            },
            false,
        ),
        8 => with_header(
            path(&format!("{svc}{method}")),
            header(
                "x-k",
                Spec::ExactMatch(pick_from(rng, &["1", "2"]).into()),
                false,
            ),
        ),
        9 => with_fraction(prefix(svc), rng.next_u32() % 1_000_001),
        _ => with_header(prefix(svc), header("x-k", Spec::PresentMatch(true), true)),
    };
    to_cluster(m, &format!("c{i}"))
}

/// Whether the indexed table of `n` generated routes picks what a linear first-match
/// scan picks, with the same random draws, for 32 generated RPCs.
fn indexed_matches_linear_with(seed: u64, n: usize, regex_heavy: bool) -> bool {
    let mut rng = SplitMix(seed);
    let rc = routes_config(
        "prop",
        (0..n)
            .map(|i| generated_route(&mut rng, i, regex_heavy))
            .collect(),
    );
    let decoded = decode_rc(&rc).expect("generated routes are valid");
    let matchers: Vec<_> = decoded.virtual_hosts[0]
        .routes
        .iter()
        .map(|r| r.matcher.clone())
        .collect();
    let table = RouteTable::new(matchers.iter());
    let stats = table.stats();
    assert_eq!(stats.exact + stats.service + stats.scanned, n);
    let metadata: [&[(&str, &str)]; 3] = [&[], &[("x-k", "1")], &[("x-k", "2"), ("x-k", "3")]];
    for _ in 0..32 {
        let p = match rng.next_u32() % 6 {
            0 => pick_from(
                &mut rng,
                &[
                    "",
                    "/",
                    "/a.S",
                    "noslash",
                    "//x",
                    "/a.S/M/extra",
                    "/ü.S/M",
                    "/a.S/\nM",
                    "/c.T/",
                    "/a.S/Mxx",
                ],
            )
            .to_string(),
            _ => format!(
                "{}{}",
                pick_from(&mut rng, &SERVICES),
                pick_from(&mut rng, &METHODS)
            ),
        };
        let md = metadata[(rng.next_u32() % 3) as usize];
        let draw_seed = rng.next_u64();
        let (mut r1, mut r2) = (SplitMix(draw_seed), SplitMix(draw_seed));
        let indexed = table.first_match(&p, md, &mut r1);
        let linear = matchers
            .iter()
            .position(|m| route_matches(m, &p, md, &mut r2));
        if indexed != linear || r1.0 != r2.0 {
            eprintln!(
                "seed {seed} n {n} regex-heavy {regex_heavy}: path {p:?} md {md:?}: indexed {indexed:?} linear {linear:?} ({stats:?})"
            );
            return false;
        }
    }
    true
}

fn indexed_matches_linear(seed: u64, size: u8) -> bool {
    indexed_matches_linear_with(seed, usize::from(size % 64), false)
}

/// Up to 200 routes, two thirds of them regexes: several DFA groups, regexes left out
/// of groups (a DFA cannot take them, they are too costly, or past the grouped ones), and
/// exact paths with more conditional candidates than a precomputed list holds.
fn indexed_matches_linear_regex_heavy(seed: u64, size: u16) -> bool {
    indexed_matches_linear_with(seed, usize::from(size % 201), true)
}

/// The lookup structures of a table with unindexed regexes and a crowded exact path, and
/// picks through each of them.
#[test]
fn route_table_groups_scanned_regexes_and_precomputes_exact_paths() {
    let present = || header("x-k", Spec::PresentMatch(true), false);
    let mut routes = Vec::new();
    // 40 regexes without a literal service, interleaved with exact paths and prefixes:
    // the first 40 scanned regexes go into DFA groups of 16.
    for i in 0..40 {
        routes.push(to_cluster(
            regex(&format!(".*/Debug{i}")),
            &format!("debug{i}"),
        ));
        routes.push(to_cluster(
            path(&format!("/s{i}.S/M")),
            &format!("exact{i}"),
        ));
        routes.push(to_cluster(
            prefix(&format!("/p{i}.S/")),
            &format!("prefix{i}"),
        ));
    }
    // A regex no DFA group takes (Unicode word boundary), and one with a large Unicode
    // class: both run on their own.
    routes.push(to_cluster(regex("\\bx.*"), "word"));
    routes.push(to_cluster(regex(".*/\\w+Z"), "letters"));
    // Ten conditional routes ahead of one exact path: too many to precompute.
    for i in 0..10 {
        routes.push(to_cluster(
            with_header(prefix("/crowd.S/"), present()),
            &format!("crowd{i}"),
        ));
    }
    routes.push(to_cluster(path("/crowd.S/M"), "crowd-exact"));
    routes.push(to_cluster(prefix(""), "default"));
    let rc = routes_config("rc", routes);
    let decoded = decode_rc(&rc).expect("valid");
    let matchers: Vec<_> = decoded.virtual_hosts[0]
        .routes
        .iter()
        .map(|r| r.matcher.clone())
        .collect();
    let stats = RouteTable::new(matchers.iter()).stats();
    assert_eq!((stats.exact, stats.service, stats.scanned), (41, 50, 43));
    assert_eq!(stats.grouped_regexes, 40);
    assert_eq!(
        stats.memoized_paths, 40,
        "all exact paths but the crowded one"
    );
    let (s, _r) = selector(&rc, None);
    assert_eq!(pick(&s, "/x.Y/Debug7", &NO_MD), hit("debug7"));
    assert_eq!(pick(&s, "/s3.S/Debug39", &NO_MD), hit("debug39"));
    assert_eq!(pick(&s, "/s3.S/M", &NO_MD), hit("exact3"));
    assert_eq!(pick(&s, "/p39.S/Debug40", &NO_MD), hit("prefix39"));
    assert_eq!(pick(&s, "/p39.S/Debug2", &NO_MD), hit("debug2"));
    assert_eq!(pick(&s, "xyz", &NO_MD), hit("word"));
    assert_eq!(pick(&s, "/a/émeZ", &NO_MD), hit("letters"));
    assert_eq!(pick(&s, "/crowd.S/M", &NO_MD), hit("crowd-exact"));
    assert_eq!(pick(&s, "/crowd.S/M", &[("x-k", "1")]), hit("crowd0"));
    assert_eq!(pick(&s, "/crowd.S/N", &NO_MD), hit("default"));
}

#[test]
fn indexed_route_table_agrees_with_a_linear_first_match_scan() {
    QuickCheck::new()
        .tests(500)
        .quickcheck(indexed_matches_linear as fn(u64, u8) -> bool);
}

#[test]
fn indexed_route_table_with_many_regexes_agrees_with_a_linear_scan() {
    QuickCheck::new()
        .tests(20)
        .quickcheck(indexed_matches_linear_regex_heavy as fn(u64, u16) -> bool);
}
