//! Tests of the RDS decoder: every validation rule, with the exact error it reports.

use std::collections::BTreeMap;
use std::time::Duration;

use prost::Message;

use super::action::FILTER_CONFIG_TYPE;
use super::*;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::route::v3 as route_pb;
use crate::pb::envoy::r#type::matcher::v3 as matcher_pb;
use crate::pb::envoy::r#type::v3 as type_pb;
use crate::pb::google::protobuf as pbuf;
use crate::resource::DecodeError;
use crate::resource::validate::for_each_mutation;
use route_pb::route_action::ClusterSpecifier as Spec;

fn any(type_name: &str, msg: &impl Message) -> pbuf::Any {
    pbuf::Any {
        type_url: format!("type.googleapis.com/{type_name}"),
        value: msg.encode_to_vec().into(),
    }
}

fn prefix_match(prefix: &str) -> route_pb::RouteMatch {
    route_pb::RouteMatch {
        path_specifier: Some(route_pb::route_match::PathSpecifier::Prefix(
            prefix.to_owned(),
        )),
        ..Default::default()
    }
}

fn cluster_action(cluster: &str) -> route_pb::RouteAction {
    route_pb::RouteAction {
        cluster_specifier: Some(Spec::Cluster(cluster.to_owned())),
        ..Default::default()
    }
}

fn route_to(cluster: &str) -> route_pb::Route {
    route_pb::Route {
        r#match: Some(prefix_match("")),
        action: Some(route_pb::route::Action::Route(Box::new(cluster_action(
            cluster,
        )))),
        ..Default::default()
    }
}

fn config_with(routes: Vec<route_pb::Route>) -> route_pb::RouteConfiguration {
    route_pb::RouteConfiguration {
        name: "rc".to_owned(),
        virtual_hosts: vec![route_pb::VirtualHost {
            name: "vh".to_owned(),
            domains: vec!["*".to_owned()],
            routes,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn decode_rc(rc: &route_pb::RouteConfiguration) -> Result<RouteConfigResource, DecodeError> {
    decode(&rc.encode_to_vec()).map(|(name, value)| {
        assert_eq!(name, rc.name);
        value
    })
}

fn err(rc: &route_pb::RouteConfiguration) -> String {
    let e = decode_rc(rc).expect_err("expected a decode error");
    assert_eq!(e.name.as_deref(), Some(rc.name.as_str()));
    e.message
}

/// Decodes a config with a single route and returns its (only) route, if kept.
fn single(route: route_pb::Route) -> Option<Route> {
    let rc = decode_rc(&config_with(vec![route])).expect("valid");
    let mut routes = rc.virtual_hosts.into_iter().next().expect("vh").routes;
    assert!(routes.len() <= 1);
    routes.pop()
}

fn forward(route: route_pb::Route) -> ForwardAction {
    match single(route).expect("route kept").action {
        RouteAction::Forward(f) => *f,
        other => panic!("unexpected action {other:?}"),
    }
}

fn with_action(ra: route_pb::RouteAction) -> route_pb::Route {
    route_pb::Route {
        r#match: Some(prefix_match("")),
        action: Some(route_pb::route::Action::Route(Box::new(ra))),
        ..Default::default()
    }
}

fn with_match(m: route_pb::RouteMatch) -> route_pb::Route {
    route_pb::Route {
        r#match: Some(m),
        ..route_to("c")
    }
}

fn with_retry(rp: route_pb::RetryPolicy) -> route_pb::Route {
    with_action(route_pb::RouteAction {
        retry_policy: Some(rp),
        ..cluster_action("c")
    })
}

fn dur(seconds: i64, nanos: i32) -> pbuf::Duration {
    pbuf::Duration { seconds, nanos }
}

fn header(
    name: &str,
    spec: route_pb::header_matcher::HeaderMatchSpecifier,
) -> route_pb::HeaderMatcher {
    route_pb::HeaderMatcher {
        name: name.to_owned(),
        header_match_specifier: Some(spec),
        ..Default::default()
    }
}

fn with_header(h: route_pb::HeaderMatcher) -> route_pb::Route {
    with_match(route_pb::RouteMatch {
        headers: vec![h],
        ..prefix_match("/")
    })
}

#[test]
fn minimal_config() {
    let rc = decode_rc(&config_with(vec![route_to("cluster-a")])).unwrap();
    assert_eq!(
        rc,
        RouteConfigResource {
            name: "rc".to_owned(),
            virtual_hosts: vec![VirtualHost {
                name: "vh".to_owned(),
                domains: vec![DomainPattern::Any],
                routes: vec![Route {
                    matcher: RouteMatch {
                        path: PathMatcher::Prefix(String::new()),
                        case_sensitive: true,
                        headers: vec![],
                        runtime_fraction_per_million: None,
                    },
                    action: RouteAction::Forward(Box::new(ForwardAction {
                        cluster: ClusterSpecifier::Cluster("cluster-a".to_owned()),
                        timeout: None,
                        max_stream_duration: None,
                        grpc_timeout_header_max: None,
                        retry_policy: None,
                        hash_policies: vec![],
                    })),
                    typed_per_filter_config: BTreeMap::new(),
                }],
                retry_policy: None,
                typed_per_filter_config: BTreeMap::new(),
            }],
            cluster_specifier_plugins: vec![],
        }
    );
}

#[test]
fn garbage_and_truncated_bytes_are_unnamed_errors() {
    let e = decode(&[0xff, 0xff, 0xff]).unwrap_err();
    assert_eq!(e.name, None);
    assert!(
        e.message
            .starts_with("failed to decode RouteConfiguration: "),
        "{e}"
    );
    let full = config_with(vec![route_to("c")]).encode_to_vec();
    for len in 0..full.len() {
        // Every prefix either decodes (possibly to something smaller) or fails cleanly.
        if let Err(e) = decode(&full[..len]) {
            assert!(matches!(e.name.as_deref(), None | Some("" | "rc")), "{e}");
        }
    }
}

#[test]
fn mutated_bytes_never_panic() {
    let mut rc = config_with(vec![
        with_retry(route_pb::RetryPolicy {
            retry_on: "unavailable".to_owned(),
            retry_back_off: Some(route_pb::retry_policy::RetryBackOff {
                base_interval: Some(dur(1, 0)),
                max_interval: Some(dur(2, 0)),
            }),
            ..Default::default()
        }),
        weighted(&[("a", Some(1)), ("b", Some(2))]),
        with_header(header(
            "h",
            route_pb::header_matcher::HeaderMatchSpecifier::RangeMatch(type_pb::Int64Range {
                start: 1,
                end: 2,
            }),
        )),
    ]);
    rc.cluster_specifier_plugins = vec![plugin("p", RLS_CLUSTER_SPECIFIER_PLUGIN, true)];
    for_each_mutation(&rc.encode_to_vec(), |bytes| {
        let _ = decode(bytes);
    });
}

#[test]
fn domains() {
    let mut rc = config_with(vec![]);
    rc.virtual_hosts[0].domains = vec![
        "Foo.com".to_owned(),
        "*.bar.com".to_owned(),
        "baz.*".to_owned(),
        "*".to_owned(),
    ];
    let vh = &decode_rc(&rc).unwrap().virtual_hosts[0];
    assert_eq!(
        vh.domains,
        vec![
            DomainPattern::Exact("foo.com".to_owned()),
            DomainPattern::Suffix(".bar.com".to_owned()),
            DomainPattern::Prefix("baz.".to_owned()),
            DomainPattern::Any,
        ]
    );
    assert!(vh.domains[0].matches("FOO.com"));
    assert!(vh.domains[1].matches("a.bar.com"));
    assert!(!vh.domains[1].matches(".bar.com"));
    assert!(vh.domains[2].matches("baz.io"));
    assert!(!vh.domains[2].matches("bar.io"));
    // An empty list is fine.
    rc.virtual_hosts[0].domains.clear();
    assert!(decode_rc(&rc).unwrap().virtual_hosts[0].domains.is_empty());
}

#[test]
fn invalid_domains() {
    for (domain, msg) in [
        (
            "a.*.com",
            "virtual_hosts[0].domains[1]: invalid domain pattern \"a.*.com\": at most one \
             wildcard, at the start or the end",
        ),
        (
            "*foo*",
            "virtual_hosts[0].domains[1]: invalid domain pattern \"*foo*\": at most one \
             wildcard, at the start or the end",
        ),
        ("", "virtual_hosts[0].domains[1]: must be non-empty"),
    ] {
        let mut rc = config_with(vec![]);
        rc.virtual_hosts[0].domains = vec!["ok".to_owned(), domain.to_owned()];
        assert_eq!(err(&rc), msg);
    }
}

#[test]
fn path_specifiers() {
    use route_pb::route_match::PathSpecifier as P;
    let r = single(with_match(route_pb::RouteMatch {
        path_specifier: Some(P::Path("/svc/Method".to_owned())),
        case_sensitive: Some(pbuf::BoolValue { value: false }),
        ..Default::default()
    }))
    .unwrap();
    assert_eq!(r.matcher.path, PathMatcher::Path("/svc/Method".to_owned()));
    assert!(!r.matcher.case_sensitive);

    let r = single(with_match(route_pb::RouteMatch {
        path_specifier: Some(P::SafeRegex(matcher_pb::RegexMatcher {
            regex: "/svc/.*".to_owned(),
            ..Default::default()
        })),
        ..Default::default()
    }))
    .unwrap();
    let PathMatcher::SafeRegex(re) = &r.matcher.path else {
        panic!("{:?}", r.matcher.path)
    };
    assert_eq!(re.pattern(), "/svc/.*");
    assert!(re.is_match("/svc/M"));
    assert!(!re.is_match("x/svc/M"), "regex must be anchored");
    // `a|ab` must match "ab" fully although leftmost-first would stop at "a".
    let alt = compile_regex("a|ab", true).unwrap();
    assert!(alt.is_match("ab"));
}

#[test]
fn invalid_path_specifiers() {
    use route_pb::route_match::PathSpecifier as P;
    let cases = [
        (
            route_pb::RouteMatch::default(),
            "virtual_hosts[0].routes[0].match: no path specifier (prefix, path or \
             safe_regex) is set",
        ),
        (
            route_pb::RouteMatch {
                path_specifier: Some(P::ConnectMatcher(Default::default())),
                ..Default::default()
            },
            "virtual_hosts[0].routes[0].match.connect_matcher: unsupported path specifier",
        ),
        (
            route_pb::RouteMatch {
                path_specifier: Some(P::PathSeparatedPrefix("/a".to_owned())),
                ..Default::default()
            },
            "virtual_hosts[0].routes[0].match.path_separated_prefix: unsupported path \
             specifier",
        ),
        (
            route_pb::RouteMatch {
                path_specifier: Some(P::PathMatchPolicy(Default::default())),
                ..Default::default()
            },
            "virtual_hosts[0].routes[0].match.path_match_policy: unsupported path specifier",
        ),
        (
            route_pb::RouteMatch {
                path_specifier: Some(P::SafeRegex(matcher_pb::RegexMatcher {
                    regex: "a(".to_owned(),
                    ..Default::default()
                })),
                ..Default::default()
            },
            "virtual_hosts[0].routes[0].match.safe_regex.regex: invalid regex \"a(\": \
             unclosed group",
        ),
    ];
    for (m, msg) in cases {
        assert_eq!(err(&config_with(vec![with_match(m)])), msg);
    }
    let no_match = route_pb::Route {
        r#match: None,
        ..route_to("c")
    };
    assert_eq!(
        err(&config_with(vec![no_match])),
        "virtual_hosts[0].routes[0].match: field not present"
    );
}

#[test]
fn regex_cannot_escape_anchoring() {
    let e = compile_regex("a)|(b", true).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("regex: invalid regex \"a)|(b\": "),
        "{e}"
    );
}

#[test]
fn huge_regex_is_rejected() {
    let e = compile_regex("(?:a{1000}){1000}", true).unwrap_err();
    assert_eq!(
        e.to_string(),
        "regex: invalid regex \"(?:a{1000}){1000}\": compiled regex exceeds the size \
         limit of 1048576 bytes"
    );
}

#[test]
#[allow(deprecated)]
fn header_matchers() {
    use route_pb::header_matcher::HeaderMatchSpecifier as H;
    let cases = [
        (
            H::ExactMatch("v".to_owned()),
            HeaderMatchKind::String(StringMatcher::Exact {
                value: "v".to_owned(),
                ignore_case: false,
            }),
        ),
        (
            H::PrefixMatch("p".to_owned()),
            HeaderMatchKind::String(StringMatcher::Prefix {
                value: "p".to_owned(),
                ignore_case: false,
            }),
        ),
        (
            H::SuffixMatch("s".to_owned()),
            HeaderMatchKind::String(StringMatcher::Suffix {
                value: "s".to_owned(),
                ignore_case: false,
            }),
        ),
        (
            H::ContainsMatch("c".to_owned()),
            HeaderMatchKind::String(StringMatcher::Contains {
                value: "c".to_owned(),
                ignore_case: false,
            }),
        ),
        (
            H::SafeRegexMatch(matcher_pb::RegexMatcher {
                regex: "v+".to_owned(),
                ..Default::default()
            }),
            HeaderMatchKind::String(StringMatcher::SafeRegex(compile_regex("v+", true).unwrap())),
        ),
        (
            H::RangeMatch(type_pb::Int64Range { start: -1, end: 10 }),
            HeaderMatchKind::Range { start: -1, end: 10 },
        ),
        (H::PresentMatch(false), HeaderMatchKind::Present(false)),
        (
            H::StringMatch(matcher_pb::StringMatcher {
                ignore_case: true,
                match_pattern: Some(matcher_pb::string_matcher::MatchPattern::Exact(
                    "E".to_owned(),
                )),
            }),
            HeaderMatchKind::String(StringMatcher::Exact {
                value: "E".to_owned(),
                ignore_case: true,
            }),
        ),
        (
            H::StringMatch(matcher_pb::StringMatcher {
                ignore_case: true,
                match_pattern: Some(matcher_pb::string_matcher::MatchPattern::Contains(
                    "C".to_owned(),
                )),
            }),
            HeaderMatchKind::String(StringMatcher::Contains {
                value: "C".to_owned(),
                ignore_case: true,
            }),
        ),
    ];
    for (spec, kind) in cases {
        let mut h = header("x-key-bin", spec);
        h.invert_match = true;
        let r = single(with_header(h)).unwrap();
        assert_eq!(
            r.matcher.headers,
            vec![HeaderMatcher {
                name: "x-key-bin".to_owned(),
                kind,
                invert_match: true,
            }]
        );
    }
}

#[test]
#[allow(deprecated)]
fn invalid_header_matchers() {
    use matcher_pb::string_matcher::MatchPattern as M;
    use route_pb::header_matcher::HeaderMatchSpecifier as H;
    let p = "virtual_hosts[0].routes[0].match.headers[0]";
    let cases = [
        (
            header("", H::PresentMatch(true)),
            format!("{p}.name: must be non-empty"),
        ),
        (
            route_pb::HeaderMatcher {
                name: "a".to_owned(),
                ..Default::default()
            },
            format!("{p}: no header match specifier is set"),
        ),
        (
            header("a", H::RangeMatch(type_pb::Int64Range { start: 5, end: 5 })),
            format!("{p}.range_match: start (5) must be less than end (5)"),
        ),
        (
            header(
                "a",
                H::SafeRegexMatch(matcher_pb::RegexMatcher {
                    regex: "[".to_owned(),
                    ..Default::default()
                }),
            ),
            format!("{p}.safe_regex_match.regex: invalid regex \"[\": unclosed character class"),
        ),
        (
            header("a", H::StringMatch(matcher_pb::StringMatcher::default())),
            format!("{p}.string_match: no match pattern is set"),
        ),
        (
            header(
                "a",
                H::StringMatch(matcher_pb::StringMatcher {
                    ignore_case: true,
                    match_pattern: Some(M::SafeRegex(matcher_pb::RegexMatcher {
                        regex: "x".to_owned(),
                        ..Default::default()
                    })),
                }),
            ),
            format!("{p}.string_match.ignore_case: not supported with safe_regex"),
        ),
        (
            header(
                "a",
                H::StringMatch(matcher_pb::StringMatcher {
                    ignore_case: false,
                    match_pattern: Some(M::Custom(Default::default())),
                }),
            ),
            format!("{p}.string_match.custom: unsupported match pattern"),
        ),
    ];
    for (h, msg) in cases {
        assert_eq!(err(&config_with(vec![with_header(h)])), msg);
    }
}

#[test]
fn runtime_fraction() {
    use type_pb::fractional_percent::DenominatorType as D;
    for (numerator, denominator, expected) in [
        (5, D::Hundred, 50_000),
        (250, D::Hundred, 1_000_000), // clamped to 100%
        (7, D::TenThousand, 700),
        (123, D::Million, 123),
        (u32::MAX, D::Million, 1_000_000),
    ] {
        let r = single(with_match(route_pb::RouteMatch {
            runtime_fraction: Some(core_pb::RuntimeFractionalPercent {
                default_value: Some(type_pb::FractionalPercent {
                    numerator,
                    denominator: denominator as i32,
                }),
                runtime_key: String::new(),
            }),
            ..prefix_match("/")
        }))
        .unwrap();
        assert_eq!(r.matcher.runtime_fraction_per_million, Some(expected));
    }
    let bad = with_match(route_pb::RouteMatch {
        runtime_fraction: Some(core_pb::RuntimeFractionalPercent {
            default_value: Some(type_pb::FractionalPercent {
                numerator: 1,
                denominator: 9,
            }),
            runtime_key: String::new(),
        }),
        ..prefix_match("/")
    });
    assert_eq!(
        err(&config_with(vec![bad])),
        "virtual_hosts[0].routes[0].match.runtime_fraction.default_value.denominator: \
         unknown denominator type 9"
    );
}

#[test]
fn routes_grpc_ignores_are_skipped() {
    // Query parameters (even with an otherwise invalid route), tls_context and
    // dynamic metadata matchers, unsupported cluster specifiers.
    let query = with_match(route_pb::RouteMatch {
        query_parameters: vec![route_pb::QueryParameterMatcher {
            name: "q".to_owned(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let tls = with_match(route_pb::RouteMatch {
        tls_context: Some(Default::default()),
        ..prefix_match("/")
    });
    let metadata = with_match(route_pb::RouteMatch {
        dynamic_metadata: vec![Default::default()],
        ..prefix_match("/")
    });
    let header_cluster = with_action(route_pb::RouteAction {
        cluster_specifier: Some(Spec::ClusterHeader("x-cluster".to_owned())),
        ..Default::default()
    });
    let inline_plugin = with_action(route_pb::RouteAction {
        cluster_specifier: Some(Spec::InlineClusterSpecifierPlugin(Default::default())),
        ..Default::default()
    });
    let no_cluster = with_action(route_pb::RouteAction::default());
    for r in [
        query,
        tls,
        metadata,
        header_cluster,
        inline_plugin,
        no_cluster,
    ] {
        assert_eq!(single(r), None);
    }
    // `grpc: {}` always holds for a gRPC client: the route is kept.
    let grpc = with_match(route_pb::RouteMatch {
        grpc: Some(Default::default()),
        ..prefix_match("/")
    });
    assert!(single(grpc).is_some());
}

#[test]
fn non_forwarding_and_unsupported_actions_are_kept() {
    let mut r = route_to("c");
    r.action = Some(route_pb::route::Action::NonForwardingAction(
        Default::default(),
    ));
    assert_eq!(single(r).unwrap().action, RouteAction::NonForwarding);
    for action in [
        Some(route_pb::route::Action::Redirect(Default::default())),
        Some(route_pb::route::Action::DirectResponse(Default::default())),
        Some(route_pb::route::Action::FilterAction(Default::default())),
        None,
    ] {
        let mut r = route_to("c");
        r.action = action;
        assert_eq!(single(r).unwrap().action, RouteAction::Unsupported);
    }
}

fn weighted(clusters: &[(&str, Option<u32>)]) -> route_pb::Route {
    with_action(route_pb::RouteAction {
        cluster_specifier: Some(Spec::WeightedClusters(route_pb::WeightedCluster {
            clusters: clusters
                .iter()
                .map(|(name, weight)| route_pb::weighted_cluster::ClusterWeight {
                    name: (*name).to_owned(),
                    weight: weight.map(|value| pbuf::UInt32Value { value }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })),
        ..Default::default()
    })
}

#[test]
fn weighted_clusters() {
    let f = forward(weighted(&[
        ("a", Some(1)),
        ("zero", Some(0)),
        ("b", Some(3)),
        ("none", None),
    ]));
    assert_eq!(
        f.cluster,
        ClusterSpecifier::WeightedClusters(vec![
            WeightedCluster {
                name: "a".to_owned(),
                weight: 1,
                typed_per_filter_config: BTreeMap::new(),
            },
            WeightedCluster {
                name: "b".to_owned(),
                weight: 3,
                typed_per_filter_config: BTreeMap::new(),
            },
        ])
    );
    let f = forward(weighted(&[("a", Some(u32::MAX - 1)), ("b", Some(1))]));
    assert!(matches!(f.cluster, ClusterSpecifier::WeightedClusters(v) if v.len() == 2));
}

#[test]
fn invalid_weighted_clusters() {
    let p = "virtual_hosts[0].routes[0].route.weighted_clusters";
    for (clusters, msg) in [
        (
            vec![("a", Some(0)), ("b", None)],
            format!("{p}: sum of weights is 0"),
        ),
        (vec![], format!("{p}: sum of weights is 0")),
        (
            vec![("a", Some(u32::MAX)), ("b", Some(1))],
            format!("{p}: sum of weights (4294967296) exceeds 4294967295"),
        ),
        (
            vec![("a", Some(1)), ("", Some(1))],
            format!("{p}.clusters[1].name: must be non-empty"),
        ),
    ] {
        assert_eq!(err(&config_with(vec![weighted(&clusters)])), msg);
    }
    assert_eq!(
        err(&config_with(vec![route_to("")])),
        "virtual_hosts[0].routes[0].route.cluster: must be non-empty"
    );
}

#[test]
fn timeouts() {
    let f = forward(with_action(route_pb::RouteAction {
        timeout: Some(dur(3, 0)),
        max_stream_duration: Some(route_pb::route_action::MaxStreamDuration {
            max_stream_duration: Some(dur(10, 500)),
            grpc_timeout_header_max: Some(dur(0, 0)),
            grpc_timeout_header_offset: Some(dur(1, 0)),
        }),
        ..cluster_action("c")
    }));
    assert_eq!(f.timeout, Some(Duration::from_secs(3)));
    assert_eq!(f.max_stream_duration, Some(Duration::new(10, 500)));
    assert_eq!(f.grpc_timeout_header_max, Some(Duration::ZERO));
    assert_eq!(f.effective_max_stream_duration(), Some(Duration::ZERO));

    let p = "virtual_hosts[0].routes[0].route";
    for (ra, msg) in [
        (
            route_pb::RouteAction {
                timeout: Some(dur(-1, 0)),
                ..cluster_action("c")
            },
            format!("{p}.timeout.seconds: value -1 must be in the range [0, 315576000000]"),
        ),
        (
            route_pb::RouteAction {
                max_stream_duration: Some(route_pb::route_action::MaxStreamDuration {
                    max_stream_duration: Some(dur(315_576_000_001, 0)),
                    ..Default::default()
                }),
                ..cluster_action("c")
            },
            format!(
                "{p}.max_stream_duration.max_stream_duration.seconds: value 315576000001 \
                 must be in the range [0, 315576000000]"
            ),
        ),
        (
            route_pb::RouteAction {
                max_stream_duration: Some(route_pb::route_action::MaxStreamDuration {
                    grpc_timeout_header_max: Some(dur(1, 1_000_000_000)),
                    ..Default::default()
                }),
                ..cluster_action("c")
            },
            format!(
                "{p}.max_stream_duration.grpc_timeout_header_max.nanos: value 1000000000 \
                 must be in the range [0, 999999999]"
            ),
        ),
        (
            route_pb::RouteAction {
                timeout: Some(dur(0, -5)),
                ..cluster_action("c")
            },
            format!("{p}.timeout.nanos: value -5 must be in the range [0, 999999999]"),
        ),
    ] {
        assert_eq!(err(&config_with(vec![with_action(ra)])), msg);
    }
}

#[test]
fn retry_policy_defaults_and_conditions() {
    let f = forward(with_retry(route_pb::RetryPolicy {
        retry_on: " unavailable, 5xx ,cancelled,bogus,,Deadline-Exceeded,internal,\
                   resource-exhausted,gateway-error,reset,connect-failure,retriable-4xx,\
                   refused-stream,retriable-status-codes,retriable-headers,unavailable"
            .to_owned(),
        retriable_status_codes: vec![503, 504],
        ..Default::default()
    }));
    assert_eq!(
        f.retry_policy,
        Some(RetryPolicy {
            retryable_codes: vec![
                RetryableCode::Cancelled,
                RetryableCode::DeadlineExceeded,
                RetryableCode::ResourceExhausted,
                RetryableCode::Internal,
                RetryableCode::Unavailable,
            ],
            http_conditions: vec![
                HttpRetryCondition::FiveXx,
                HttpRetryCondition::GatewayError,
                HttpRetryCondition::Reset,
                HttpRetryCondition::ConnectFailure,
                HttpRetryCondition::Retriable4xx,
                HttpRetryCondition::RefusedStream,
                HttpRetryCondition::RetriableStatusCodes,
                HttpRetryCondition::RetriableHeaders,
            ],
            retriable_status_codes: vec![503, 504],
            num_retries: 1,
            max_attempts: 2,
            per_try_timeout: None,
            base_interval: Duration::from_millis(25),
            max_interval: Duration::from_millis(250),
        })
    );
    assert_eq!(RetryableCode::Unavailable.code(), 14);
}

#[test]
fn retry_policy_counts_and_backoff() {
    let f = forward(with_retry(route_pb::RetryPolicy {
        retry_on: "unavailable".to_owned(),
        num_retries: Some(pbuf::UInt32Value { value: 10 }),
        per_try_timeout: Some(dur(2, 0)),
        retry_back_off: Some(route_pb::retry_policy::RetryBackOff {
            base_interval: Some(dur(0, 100_000_000)),
            max_interval: None,
        }),
        ..Default::default()
    }));
    let rp = f.retry_policy.unwrap();
    assert_eq!(rp.num_retries, 10);
    assert_eq!(rp.max_attempts, 5);
    assert_eq!(rp.per_try_timeout, Some(Duration::from_secs(2)));
    assert_eq!(rp.base_interval, Duration::from_millis(100));
    assert_eq!(rp.max_interval, Duration::from_secs(1));

    let f = forward(with_retry(route_pb::RetryPolicy {
        num_retries: Some(pbuf::UInt32Value { value: u32::MAX }),
        retry_back_off: Some(route_pb::retry_policy::RetryBackOff {
            base_interval: Some(dur(1, 0)),
            max_interval: Some(dur(1, 0)),
        }),
        ..Default::default()
    }));
    let rp = f.retry_policy.unwrap();
    assert_eq!(rp.max_attempts, 5);
    assert_eq!(rp.max_interval, Duration::from_secs(1));
    assert!(rp.retryable_codes.is_empty());
}

#[test]
fn invalid_retry_policies() {
    use route_pb::retry_policy::RetryBackOff;
    let p = "virtual_hosts[0].routes[0].route.retry_policy";
    let backoff =
        |base: Option<pbuf::Duration>, max: Option<pbuf::Duration>| route_pb::RetryPolicy {
            retry_back_off: Some(RetryBackOff {
                base_interval: base,
                max_interval: max,
            }),
            ..Default::default()
        };
    for (rp, msg) in [
        (
            route_pb::RetryPolicy {
                num_retries: Some(pbuf::UInt32Value { value: 0 }),
                ..Default::default()
            },
            format!("{p}.num_retries: must be greater than 0"),
        ),
        (
            backoff(None, Some(dur(1, 0))),
            format!("{p}.retry_back_off.base_interval: field not present"),
        ),
        (
            backoff(Some(dur(0, 0)), None),
            format!("{p}.retry_back_off.base_interval: must be greater than 0"),
        ),
        (
            backoff(Some(dur(-1, 0)), None),
            format!(
                "{p}.retry_back_off.base_interval.seconds: value -1 must be in the range \
                 [0, 315576000000]"
            ),
        ),
        (
            backoff(Some(dur(1, 0)), Some(dur(0, 0))),
            format!("{p}.retry_back_off.max_interval: must be greater than 0"),
        ),
        (
            backoff(Some(dur(1, 0)), Some(dur(0, 500_000_000))),
            format!(
                "{p}.retry_back_off.max_interval: must not be less than base_interval \
                 (500ms < 1s)"
            ),
        ),
        (
            route_pb::RetryPolicy {
                per_try_timeout: Some(dur(-3, 0)),
                ..Default::default()
            },
            format!(
                "{p}.per_try_timeout.seconds: value -3 must be in the range [0, \
                 315576000000]"
            ),
        ),
    ] {
        assert_eq!(err(&config_with(vec![with_retry(rp)])), msg);
    }
}

#[test]
fn virtual_host_retry_policy_is_kept_separately() {
    let mut rc = config_with(vec![route_to("c")]);
    rc.virtual_hosts[0].retry_policy = Some(route_pb::RetryPolicy {
        retry_on: "internal".to_owned(),
        num_retries: Some(pbuf::UInt32Value { value: 2 }),
        ..Default::default()
    });
    let vh = &decode_rc(&rc).unwrap().virtual_hosts[0];
    let rp = vh.retry_policy.as_ref().unwrap();
    assert_eq!(rp.retryable_codes, vec![RetryableCode::Internal]);
    assert_eq!(rp.max_attempts, 3);
    let RouteAction::Forward(f) = &vh.routes[0].action else {
        panic!()
    };
    assert_eq!(f.retry_policy, None);

    rc.virtual_hosts[0].retry_policy = Some(route_pb::RetryPolicy {
        num_retries: Some(pbuf::UInt32Value { value: 0 }),
        ..Default::default()
    });
    assert_eq!(
        err(&rc),
        "virtual_hosts[0].retry_policy.num_retries: must be greater than 0"
    );
}

#[test]
fn hash_policies() {
    use route_pb::route_action::HashPolicy as Hp;
    use route_pb::route_action::hash_policy::{self as hp, PolicySpecifier as P};
    let f = forward(with_action(route_pb::RouteAction {
        hash_policy: vec![
            Hp {
                terminal: true,
                policy_specifier: Some(P::Header(hp::Header {
                    header_name: "x-user".to_owned(),
                    regex_rewrite: Some(matcher_pb::RegexMatchAndSubstitute {
                        pattern: Some(matcher_pb::RegexMatcher {
                            regex: "^u-(.*)$".to_owned(),
                            ..Default::default()
                        }),
                        substitution: "\\1".to_owned(),
                    }),
                })),
            },
            Hp {
                terminal: false,
                policy_specifier: Some(P::FilterState(hp::FilterState {
                    key: "io.grpc.channel_id".to_owned(),
                })),
            },
            Hp {
                terminal: false,
                policy_specifier: Some(P::FilterState(hp::FilterState {
                    key: "other".to_owned(),
                })),
            },
            Hp {
                terminal: false,
                policy_specifier: Some(P::Cookie(Default::default())),
            },
        ],
        ..cluster_action("c")
    }));
    assert_eq!(
        f.hash_policies,
        vec![
            HashPolicy::Header {
                header_name: "x-user".to_owned(),
                regex_rewrite: Some(RegexRewrite {
                    pattern: compile_regex("^u-(.*)$", false).unwrap(),
                    substitution: "\\1".to_owned(),
                }),
                terminal: true,
            },
            HashPolicy::ChannelId { terminal: false },
        ]
    );

    let p = "virtual_hosts[0].routes[0].route.hash_policy[0].header";
    let header_policy = |header_name: &str, rr: Option<matcher_pb::RegexMatchAndSubstitute>| {
        with_action(route_pb::RouteAction {
            hash_policy: vec![Hp {
                terminal: false,
                policy_specifier: Some(P::Header(hp::Header {
                    header_name: header_name.to_owned(),
                    regex_rewrite: rr,
                })),
            }],
            ..cluster_action("c")
        })
    };
    for (route, msg) in [
        (
            header_policy("", None),
            format!("{p}.header_name: must be non-empty"),
        ),
        (
            header_policy("h", Some(Default::default())),
            format!("{p}.regex_rewrite.pattern: field not present"),
        ),
        (
            header_policy(
                "h",
                Some(matcher_pb::RegexMatchAndSubstitute {
                    pattern: Some(Default::default()),
                    substitution: String::new(),
                }),
            ),
            format!("{p}.regex_rewrite.pattern.regex: must be non-empty"),
        ),
        (
            header_policy(
                "h",
                Some(matcher_pb::RegexMatchAndSubstitute {
                    pattern: Some(matcher_pb::RegexMatcher {
                        regex: "(".to_owned(),
                        ..Default::default()
                    }),
                    substitution: String::new(),
                }),
            ),
            format!("{p}.regex_rewrite.pattern.regex: invalid regex \"(\": unclosed group"),
        ),
    ] {
        assert_eq!(err(&config_with(vec![route])), msg);
    }
}

fn plugin(name: &str, type_name: &str, is_optional: bool) -> route_pb::ClusterSpecifierPlugin {
    route_pb::ClusterSpecifierPlugin {
        extension: Some(core_pb::TypedExtensionConfig {
            name: name.to_owned(),
            typed_config: Some(any(type_name, &pbuf::Empty {})),
        }),
        is_optional,
    }
}

fn plugin_route(name: &str) -> route_pb::Route {
    with_action(route_pb::RouteAction {
        cluster_specifier: Some(Spec::ClusterSpecifierPlugin(name.to_owned())),
        ..Default::default()
    })
}

#[test]
fn cluster_specifier_plugins() {
    let mut rc = config_with(vec![
        plugin_route("rls"),
        plugin_route("opt"),
        route_to("c"),
    ]);
    rc.cluster_specifier_plugins = vec![
        plugin("rls", RLS_CLUSTER_SPECIFIER_PLUGIN, false),
        plugin("opt", "example.Unknown", true),
        plugin("unused", RLS_CLUSTER_SPECIFIER_PLUGIN, false),
    ];
    let out = decode_rc(&rc).unwrap();
    assert_eq!(
        out.cluster_specifier_plugins,
        vec![ClusterSpecifierPlugin {
            name: "rls".to_owned(),
            config: TypedConfig {
                type_url: format!("type.googleapis.com/{RLS_CLUSTER_SPECIFIER_PLUGIN}"),
                value: Bytes::new(),
                typed_struct: false,
            },
        }]
    );
    assert!(out.cluster_specifier_plugin("rls").is_some());
    let routes = &out.virtual_hosts[0].routes;
    assert_eq!(
        routes.len(),
        2,
        "the route to the optional plugin is ignored"
    );
    let RouteAction::Forward(f) = &routes[0].action else {
        panic!()
    };
    assert_eq!(
        f.cluster,
        ClusterSpecifier::ClusterSpecifierPlugin("rls".to_owned())
    );
}

#[test]
fn invalid_cluster_specifier_plugins() {
    let cases = [
        (
            vec![plugin("p", "example.Unknown", false)],
            "cluster_specifier_plugins[0].extension.typed_config: unsupported cluster \
             specifier plugin type \"type.googleapis.com/example.Unknown\"",
        ),
        (
            vec![
                plugin("p", RLS_CLUSTER_SPECIFIER_PLUGIN, false),
                plugin("p", RLS_CLUSTER_SPECIFIER_PLUGIN, false),
            ],
            "cluster_specifier_plugins[1].extension.name: duplicate cluster specifier \
             plugin name \"p\"",
        ),
        (
            vec![route_pb::ClusterSpecifierPlugin::default()],
            "cluster_specifier_plugins[0].extension: field not present",
        ),
        (
            vec![plugin("", RLS_CLUSTER_SPECIFIER_PLUGIN, false)],
            "cluster_specifier_plugins[0].extension.name: must be non-empty",
        ),
        (
            vec![route_pb::ClusterSpecifierPlugin {
                extension: Some(core_pb::TypedExtensionConfig {
                    name: "p".to_owned(),
                    typed_config: None,
                }),
                is_optional: false,
            }],
            "cluster_specifier_plugins[0].extension.typed_config: field not present",
        ),
    ];
    for (plugins, msg) in cases {
        let mut rc = config_with(vec![]);
        rc.cluster_specifier_plugins = plugins;
        assert_eq!(err(&rc), msg);
    }
    let rc = config_with(vec![plugin_route("missing")]);
    assert_eq!(
        err(&rc),
        "virtual_hosts[0].routes[0].route.cluster_specifier_plugin: unknown cluster \
         specifier plugin \"missing\" (not in cluster_specifier_plugins)"
    );
    assert_eq!(
        err(&config_with(vec![plugin_route("")])),
        "virtual_hosts[0].routes[0].route.cluster_specifier_plugin: must be non-empty"
    );
}

#[test]
fn filter_overrides() {
    let fault = "envoy.extensions.filters.http.fault.v3.HTTPFault";
    let mut r = route_to("c");
    r.typed_per_filter_config
        .insert("fault".to_owned(), any(fault, &pbuf::Empty {}));
    r.typed_per_filter_config.insert(
        "wrapped".to_owned(),
        any(
            FILTER_CONFIG_TYPE,
            &route_pb::FilterConfig {
                config: Some(any(fault, &pbuf::Empty {})),
                is_optional: true,
                disabled: false,
            },
        ),
    );
    r.typed_per_filter_config.insert(
        "optional-unknown".to_owned(),
        any(
            FILTER_CONFIG_TYPE,
            &route_pb::FilterConfig {
                config: Some(any("example.Unknown", &pbuf::Empty {})),
                is_optional: true,
                disabled: false,
            },
        ),
    );
    r.typed_per_filter_config.insert(
        "disabled".to_owned(),
        any(
            FILTER_CONFIG_TYPE,
            &route_pb::FilterConfig {
                config: None,
                is_optional: false,
                disabled: true,
            },
        ),
    );
    let out = single(r).unwrap().typed_per_filter_config;
    // The override is parsed by the fault filter (an empty HTTPFault injects nothing).
    let fault_config = crate::filter::FilterOverride::Fault(std::sync::Arc::new(
        crate::filter::fault::FaultConfig {
            delay: None,
            abort: None,
            max_active_faults: None,
        },
    ));
    let expected: BTreeMap<String, FilterConfigOverride> = [
        (
            "fault".to_owned(),
            FilterConfigOverride {
                config: Some(fault_config.clone()),
                is_optional: false,
                disabled: false,
            },
        ),
        (
            "wrapped".to_owned(),
            FilterConfigOverride {
                config: Some(fault_config),
                is_optional: true,
                disabled: false,
            },
        ),
        (
            "disabled".to_owned(),
            FilterConfigOverride {
                config: None,
                is_optional: false,
                disabled: true,
            },
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(out, expected);
}

#[test]
fn invalid_filter_overrides() {
    let mut rc = config_with(vec![]);
    rc.virtual_hosts[0]
        .typed_per_filter_config
        .insert("x".to_owned(), any("example.Unknown", &pbuf::Empty {}));
    assert_eq!(
        err(&rc),
        "virtual_hosts[0].typed_per_filter_config[\"x\"]: unsupported filter type \
         \"type.googleapis.com/example.Unknown\""
    );
    let mut rc = config_with(vec![]);
    rc.virtual_hosts[0].typed_per_filter_config.insert(
        "x".to_owned(),
        pbuf::Any {
            type_url: "no-slash".to_owned(),
            value: Bytes::new(),
        },
    );
    assert_eq!(
        err(&rc),
        "virtual_hosts[0].typed_per_filter_config[\"x\"].type_url: invalid type URL \
         \"no-slash\""
    );
    let mut r = route_to("c");
    r.typed_per_filter_config.insert(
        "x".to_owned(),
        any(FILTER_CONFIG_TYPE, &route_pb::FilterConfig::default()),
    );
    assert_eq!(
        err(&config_with(vec![r])),
        "virtual_hosts[0].routes[0].typed_per_filter_config[\"x\"].config: field not present"
    );
    let mut r = route_to("c");
    r.typed_per_filter_config
        .insert(String::new(), any("example.Unknown", &pbuf::Empty {}));
    assert_eq!(
        err(&config_with(vec![r])),
        "virtual_hosts[0].routes[0].typed_per_filter_config[\"\"]: filter name must be \
         non-empty"
    );
    let mut r = route_to("c");
    r.typed_per_filter_config.insert(
        "x".to_owned(),
        pbuf::Any {
            type_url: format!("type.googleapis.com/{FILTER_CONFIG_TYPE}"),
            value: Bytes::from_static(&[0xff]),
        },
    );
    let msg = err(&config_with(vec![r]));
    assert!(
        msg.starts_with(
            "virtual_hosts[0].routes[0].typed_per_filter_config[\"x\"].value: can't decode \
             FilterConfig: "
        ),
        "{msg}"
    );
    let wc = route_pb::weighted_cluster::ClusterWeight {
        name: "a".to_owned(),
        weight: Some(pbuf::UInt32Value { value: 1 }),
        typed_per_filter_config: [("y".to_owned(), any("example.Unknown", &pbuf::Empty {}))]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let r = with_action(route_pb::RouteAction {
        cluster_specifier: Some(Spec::WeightedClusters(route_pb::WeightedCluster {
            clusters: vec![wc],
            ..Default::default()
        })),
        ..Default::default()
    });
    assert_eq!(
        err(&config_with(vec![r])),
        "virtual_hosts[0].routes[0].route.weighted_clusters.clusters[0].\
         typed_per_filter_config[\"y\"]: unsupported filter type \
         \"type.googleapis.com/example.Unknown\""
    );
    // A39: the filter parses its override at decode time; a bad one NACKs with the
    // field inside it, wrapped in FilterConfig or not, optional or not.
    let bad_fault = || {
        use crate::pb::envoy::extensions::filters::http::fault::v3 as fault_pb;
        any(
            "envoy.extensions.filters.http.fault.v3.HTTPFault",
            &fault_pb::HttpFault {
                abort: Some(fault_pb::FaultAbort::default()),
                ..Default::default()
            },
        )
    };
    let mut r = route_to("c");
    r.typed_per_filter_config
        .insert("f".to_owned(), bad_fault());
    assert_eq!(
        err(&config_with(vec![r])),
        "virtual_hosts[0].routes[0].typed_per_filter_config[\"f\"].abort.error_type: field \
         not present"
    );
    let mut rc = config_with(vec![route_to("c")]);
    rc.virtual_hosts[0].typed_per_filter_config.insert(
        "f".to_owned(),
        any(
            FILTER_CONFIG_TYPE,
            &route_pb::FilterConfig {
                config: Some(bad_fault()),
                is_optional: true,
                disabled: false,
            },
        ),
    );
    assert_eq!(
        err(&rc),
        "virtual_hosts[0].typed_per_filter_config[\"f\"].config.abort.error_type: field not \
         present"
    );
}

#[test]
fn values_compare_by_content() {
    let a = decode_rc(&config_with(vec![with_match(route_pb::RouteMatch {
        path_specifier: Some(route_pb::route_match::PathSpecifier::SafeRegex(
            matcher_pb::RegexMatcher {
                regex: "/a.*".to_owned(),
                ..Default::default()
            },
        )),
        ..Default::default()
    })]))
    .unwrap();
    let b = a.clone();
    assert_eq!(a, b);
    assert_ne!(
        compile_regex("x", true).unwrap(),
        compile_regex("x", false).unwrap()
    );
}
