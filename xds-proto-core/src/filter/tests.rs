//! The A39 interface and fault injection (A33): configs parsed once with their NACK
//! paths, fractions with every denominator, the header-controlled variants,
//! `max_active_faults`, and overrides merged at every level.

use std::collections::BTreeMap;
use std::time::Duration;

use prost::Message;

use super::fault::*;
use super::*;
use crate::client::Code;
use crate::pb::envoy::extensions::filters::common::fault::v3 as common_fault_pb;
use crate::pb::envoy::extensions::filters::http::fault::v3 as fault_pb;
use crate::pb::envoy::r#type::v3 as type_pb;
use crate::pb::google::protobuf as pbuf;
use crate::selector::{RandomSource, Seeded};

/// A route on a path prefix to `action`, with these per-filter overrides (the client
/// chain tests here and in `session_tests`).
pub(super) fn prefix_route(
    prefix: &str,
    action: crate::pb::envoy::config::route::v3::route_action::ClusterSpecifier,
    overrides: impl IntoIterator<Item = (String, pbuf::Any)>,
) -> crate::pb::envoy::config::route::v3::Route {
    use crate::pb::envoy::config::route::v3 as route_pb;
    route_pb::Route {
        r#match: Some(route_pb::RouteMatch {
            path_specifier: Some(route_pb::route_match::PathSpecifier::Prefix(
                prefix.to_owned(),
            )),
            ..Default::default()
        }),
        action: Some(route_pb::route::Action::Route(Box::new(
            route_pb::RouteAction {
                cluster_specifier: Some(action),
                ..Default::default()
            },
        ))),
        typed_per_filter_config: overrides.into_iter().collect(),
        ..Default::default()
    }
}

type Denominator = type_pb::fractional_percent::DenominatorType;

fn percent(numerator: u32, denominator: Denominator) -> Option<type_pb::FractionalPercent> {
    Some(type_pb::FractionalPercent {
        numerator,
        denominator: denominator as i32,
    })
}

fn fixed_delay(ms: u64, pct: Option<type_pb::FractionalPercent>) -> common_fault_pb::FaultDelay {
    use common_fault_pb::fault_delay::FaultDelaySecifier as Spec;
    common_fault_pb::FaultDelay {
        fault_delay_secifier: Some(Spec::FixedDelay(pbuf::Duration {
            seconds: (ms / 1000) as i64,
            nanos: ((ms % 1000) * 1_000_000) as i32,
        })),
        percentage: pct,
    }
}

fn header_delay(pct: Option<type_pb::FractionalPercent>) -> common_fault_pb::FaultDelay {
    use common_fault_pb::fault_delay::FaultDelaySecifier as Spec;
    common_fault_pb::FaultDelay {
        fault_delay_secifier: Some(Spec::HeaderDelay(Default::default())),
        percentage: pct,
    }
}

fn abort(
    error: fault_pb::fault_abort::ErrorType,
    pct: Option<type_pb::FractionalPercent>,
) -> fault_pb::FaultAbort {
    fault_pb::FaultAbort {
        error_type: Some(error),
        percentage: pct,
        ..Default::default()
    }
}

fn parse(fault: &fault_pb::HttpFault) -> Result<FaultConfig, String> {
    FaultConfig::parse(&fault.encode_to_vec()).map_err(|e| e.to_string())
}

use fault_pb::fault_abort::ErrorType;

#[test]
fn a_fault_config_is_parsed_once_with_its_fields() {
    let config = parse(&fault_pb::HttpFault {
        delay: Some(fixed_delay(1500, percent(25, Denominator::TenThousand))),
        abort: Some(abort(
            ErrorType::HttpStatus(503),
            percent(7, Denominator::Million),
        )),
        max_active_faults: Some(pbuf::UInt32Value { value: 3 }),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        config,
        FaultConfig {
            delay: Some(FaultDelay {
                source: DelaySource::Fixed(Duration::from_millis(1500)),
                percentage: Fraction {
                    numerator: 25,
                    denominator: 10_000
                },
            }),
            abort: Some(FaultAbort {
                source: AbortSource::Code(Code::UNAVAILABLE),
                percentage: Fraction {
                    numerator: 7,
                    denominator: 1_000_000
                },
            }),
            max_active_faults: Some(3),
        }
    );
    // Header variants and a gRPC status; an absent percentage is never.
    let config = parse(&fault_pb::HttpFault {
        delay: Some(header_delay(None)),
        abort: Some(abort(ErrorType::GrpcStatus(5), None)),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(config.delay.unwrap().source, DelaySource::Header);
    assert_eq!(config.delay.unwrap().percentage.numerator, 0);
    assert_eq!(
        config.abort.unwrap().source,
        AbortSource::Code(Code::NOT_FOUND)
    );
    assert_eq!(config.max_active_faults, None);
}

#[test]
fn bad_fault_configs_nack_with_the_field() {
    let cases: Vec<(fault_pb::HttpFault, &str)> = vec![
        (
            fault_pb::HttpFault {
                abort: Some(abort(ErrorType::HttpStatus(600), None)),
                ..Default::default()
            },
            "abort.http_status: value 600 must be in the range [200, 600)",
        ),
        (
            fault_pb::HttpFault {
                abort: Some(abort(ErrorType::HttpStatus(199), None)),
                ..Default::default()
            },
            "abort.http_status: value 199 must be in the range [200, 600)",
        ),
        (
            fault_pb::HttpFault {
                abort: Some(fault_pb::FaultAbort::default()),
                ..Default::default()
            },
            "abort.error_type: field not present",
        ),
        (
            fault_pb::HttpFault {
                delay: Some(common_fault_pb::FaultDelay::default()),
                ..Default::default()
            },
            "delay.fixed_delay: field not present",
        ),
        (
            fault_pb::HttpFault {
                delay: Some(fixed_delay(
                    5,
                    Some(type_pb::FractionalPercent {
                        numerator: 1,
                        denominator: 7,
                    }),
                )),
                ..Default::default()
            },
            "delay.percentage.denominator: unknown denominator type 7",
        ),
        (
            fault_pb::HttpFault {
                delay: Some({
                    let mut d = fixed_delay(5, None);
                    d.fault_delay_secifier = Some(
                        common_fault_pb::fault_delay::FaultDelaySecifier::FixedDelay(
                            pbuf::Duration {
                                seconds: -1,
                                nanos: 0,
                            },
                        ),
                    );
                    d
                }),
                ..Default::default()
            },
            "delay.fixed_delay.seconds: value -1 must be in the range [0, 315576000000]",
        ),
    ];
    for (fault, expected) in cases {
        assert_eq!(parse(&fault).unwrap_err(), expected);
    }
}

#[test]
fn http_statuses_map_to_grpc_codes_as_grpc_does() {
    let table = [
        (200, Code::UNKNOWN),
        (400, Code::INTERNAL),
        (401, Code::UNAUTHENTICATED),
        (403, Code::PERMISSION_DENIED),
        (404, Code::UNIMPLEMENTED),
        (429, Code::UNAVAILABLE),
        (502, Code::UNAVAILABLE),
        (503, Code::UNAVAILABLE),
        (504, Code::UNAVAILABLE),
        (500, Code::UNKNOWN),
        (418, Code::UNKNOWN),
    ];
    for (http, code) in table {
        assert_eq!(code_of_http_status(http), code, "{http}");
    }
}

/// The largest draw under `numerator / denominator`, and the smallest one over it.
fn boundary(numerator: u32, denominator: u32) -> (u32, u32) {
    // point = draw * denominator >> 32 < numerator  <=>  draw < ceil(numerator * 2^32 / denominator)
    let first_over = ((u64::from(numerator) << 32).div_ceil(u64::from(denominator))) as u32;
    (first_over - 1, first_over)
}

#[test]
fn fractions_draw_one_number_against_every_denominator() {
    for (numerator, denominator) in [(1, 100), (50, 100), (3, 10_000), (999_999, 1_000_000)] {
        let fraction = Fraction {
            numerator,
            denominator,
        };
        let (under, over) = boundary(numerator, denominator);
        assert!(fraction.draw(&mut || under), "{numerator}/{denominator}");
        assert!(!fraction.draw(&mut || over), "{numerator}/{denominator}");
    }
    // Zero never fires; a numerator at or above the denominator always does.
    let never = Fraction {
        numerator: 0,
        denominator: 100,
    };
    assert!(!never.draw(&mut || 0));
    let always = Fraction {
        numerator: 150,
        denominator: 100,
    };
    assert!(always.draw(&mut || u32::MAX));
}

/// Counts how many of `n` RPCs a config faults with the seeded source, and the count
/// a replay of the same numbers gives by the rule (one draw per applicable fault).
fn seeded_counts(config: &FaultConfig, n: usize) -> (usize, usize) {
    let active = ActiveFaults::new();
    let mut rng = Seeded(7);
    let faulted = (0..n)
        .filter(|_| {
            let decided = config.decide(&[("x", "y")], &mut rng, &active);
            decided.is_some_and(|f| f.abort.is_some())
        })
        .count();
    let mut replay = Seeded(7);
    let (_, first_over) = boundary(
        config.abort.unwrap().percentage.numerator,
        config.abort.unwrap().percentage.denominator,
    );
    let expected = (0..n).filter(|_| replay.next_u32() < first_over).count();
    (faulted, expected)
}

#[test]
fn a_seeded_source_aborts_an_exact_count() {
    for (numerator, denominator) in [
        (50, Denominator::Hundred),
        (2_500, Denominator::TenThousand),
        (100_000, Denominator::Million),
    ] {
        let config = parse(&fault_pb::HttpFault {
            abort: Some(abort(
                ErrorType::GrpcStatus(14),
                percent(numerator, denominator),
            )),
            ..Default::default()
        })
        .unwrap();
        let (faulted, expected) = seeded_counts(&config, 10_000);
        assert_eq!(faulted, expected, "{numerator}/{denominator:?}");
        let p = config.abort.unwrap().percentage;
        let mean = 10_000.0 * f64::from(p.numerator) / f64::from(p.denominator);
        assert!(
            (faulted as f64 - mean).abs() < 5.0 * (mean * (1.0 - mean / 10_000.0)).sqrt(),
            "{faulted} far from {mean}"
        );
    }
}

/// A source that counts its draws and returns `value`.
struct Counting {
    value: u32,
    draws: usize,
}

impl RandomSource for Counting {
    fn next_u32(&mut self) -> u32 {
        self.draws += 1;
        self.value
    }
}

fn header_config(delay_pct: u32, abort_pct: u32) -> FaultConfig {
    parse(&fault_pb::HttpFault {
        delay: Some(header_delay(percent(delay_pct, Denominator::Hundred))),
        abort: Some(abort(
            ErrorType::HeaderAbort(Default::default()),
            percent(abort_pct, Denominator::Hundred),
        )),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn header_controlled_faults_read_the_rpcs_headers() {
    let config = header_config(100, 100);
    let active = ActiveFaults::new();
    let decide = |headers: &[(&str, &str)], value: u32| {
        let mut rng = Counting { value, draws: 0 };
        let fault = config.decide(headers, &mut rng, &active);
        (fault.map(|f| (f.delay, f.abort)), rng.draws)
    };
    // No header: no fault, and nothing drawn.
    assert_eq!(decide(&[], 0), (None, 0));
    // The delay header, in milliseconds.
    assert_eq!(
        decide(&[(DELAY_HEADER, "53")], 0),
        (Some((Some(Duration::from_millis(53)), None)), 1)
    );
    // The gRPC abort header, and the HTTP one mapped (503: UNAVAILABLE).
    assert_eq!(
        decide(&[(ABORT_GRPC_HEADER, "3")], 0),
        (Some((None, Some(Code::INVALID_ARGUMENT))), 1)
    );
    assert_eq!(
        decide(&[(ABORT_HTTP_HEADER, "503")], 0),
        (Some((None, Some(Code::UNAVAILABLE))), 1)
    );
    assert_eq!(
        decide(&[(ABORT_HTTP_HEADER, "200")], 0),
        (Some((None, Some(Code::UNKNOWN))), 1)
    );
    // Both: the gRPC one; both faults: two draws.
    assert_eq!(
        decide(
            &[
                (ABORT_HTTP_HEADER, "503"),
                (ABORT_GRPC_HEADER, "7"),
                (DELAY_HEADER, "5")
            ],
            0
        ),
        (
            Some((
                Some(Duration::from_millis(5)),
                Some(Code::PERMISSION_DENIED)
            )),
            2
        )
    );
    // Invalid values are ignored: a later valid one counts, none means no fault.
    assert_eq!(
        decide(&[(ABORT_GRPC_HEADER, "x"), (ABORT_GRPC_HEADER, "4")], 0),
        (Some((None, Some(Code::DEADLINE_EXCEEDED))), 1)
    );
    assert_eq!(decide(&[(ABORT_GRPC_HEADER, "17")], 0), (None, 0));
    assert_eq!(decide(&[(ABORT_HTTP_HEADER, "600")], 0), (None, 0));
    assert_eq!(decide(&[(DELAY_HEADER, "-5")], 0), (None, 0));
}

#[test]
fn percentage_headers_only_lower_the_configs_numerator() {
    // Config 50 %: a header of 20 % draws against 20, one of 90 % stays at 50.
    let config = header_config(50, 50);
    let active = ActiveFaults::new();
    let (_, over_20) = boundary(20, 100);
    let (under_50, over_50) = boundary(50, 100);
    let fires = |headers: &[(&str, &str)], value: u32| {
        let f = config.decide(headers, &mut || value, &active);
        f.map(|f| (f.delay.is_some(), f.abort.is_some()))
    };
    let delay_20 = [(DELAY_HEADER, "10"), (DELAY_PERCENTAGE_HEADER, "20")];
    assert_eq!(fires(&delay_20, over_20), None);
    assert_eq!(fires(&delay_20, over_20 - 1), Some((true, false)));
    let delay_90 = [(DELAY_HEADER, "10"), (DELAY_PERCENTAGE_HEADER, "90")];
    assert_eq!(fires(&delay_90, under_50), Some((true, false)));
    assert_eq!(fires(&delay_90, over_50), None);
    let abort_20 = [(ABORT_GRPC_HEADER, "1"), (ABORT_PERCENTAGE_HEADER, "20")];
    assert_eq!(fires(&abort_20, over_20), None);
    assert_eq!(fires(&abort_20, over_20 - 1), Some((false, true)));
    // An invalid percentage header is ignored: the config's 50 % applies.
    let abort_bad = [(ABORT_GRPC_HEADER, "1"), (ABORT_PERCENTAGE_HEADER, "half")];
    assert_eq!(fires(&abort_bad, under_50), Some((false, true)));
}

#[test]
fn max_active_faults_bounds_the_faulted_rpcs_and_draws_nothing_at_the_limit() {
    let config = parse(&fault_pb::HttpFault {
        delay: Some(fixed_delay(10, percent(100, Denominator::Hundred))),
        max_active_faults: Some(pbuf::UInt32Value { value: 2 }),
        ..Default::default()
    })
    .unwrap();
    let active = ActiveFaults::new();
    let first = config.decide(&[("a", "b")], &mut || 0, &active).unwrap();
    let second = config.decide(&[("a", "b")], &mut || 0, &active).unwrap();
    assert_eq!(active.count(), 2);
    let mut rng = Counting { value: 0, draws: 0 };
    assert!(config.decide(&[("a", "b")], &mut rng, &active).is_none());
    assert_eq!(rng.draws, 0, "no number is drawn at the limit");
    drop(first);
    assert_eq!(active.count(), 1);
    let third = config.decide(&[("a", "b")], &mut || 0, &active);
    assert!(third.is_some());
    drop((second, third));
    assert_eq!(active.count(), 0);
    // A limit of 0 faults nothing; no limit faults everything and still counts.
    let mut zero = config.clone();
    zero.max_active_faults = Some(0);
    assert!(zero.decide(&[("a", "b")], &mut || 0, &active).is_none());
    let mut unlimited = config;
    unlimited.max_active_faults = None;
    let held: Vec<_> = (0..5)
        .map(|_| unlimited.decide(&[("a", "b")], &mut || 0, &active).unwrap())
        .collect();
    assert_eq!(active.count(), 5);
    drop(held);
    assert_eq!(active.count(), 0);
}

// ---------------------------------------------------------------------------------------
// Overrides (A39)
// ---------------------------------------------------------------------------------------

fn fault_with_code(code: u32) -> Arc<FaultConfig> {
    Arc::new(
        parse(&fault_pb::HttpFault {
            abort: Some(abort(
                ErrorType::GrpcStatus(code),
                percent(100, Denominator::Hundred),
            )),
            ..Default::default()
        })
        .unwrap(),
    )
}

fn chain(top: &[(&str, HttpFilterConfig)]) -> Vec<HttpFilter> {
    top.iter()
        .map(|(name, config)| HttpFilter {
            name: (*name).to_owned(),
            config: config.clone(),
            is_optional: false,
        })
        .collect()
}

fn scope(entries: &[(&str, Option<u32>, bool)]) -> BTreeMap<String, FilterConfigOverride> {
    entries
        .iter()
        .map(|(name, code, disabled)| {
            (
                (*name).to_owned(),
                FilterConfigOverride {
                    config: code.map(|c| FilterOverride::Fault(fault_with_code(c))),
                    is_optional: false,
                    disabled: *disabled,
                },
            )
        })
        .collect()
}

/// The abort code each fault filter of the built chain injects, in order.
fn codes(filters: Option<Arc<ClientFilters>>) -> Vec<Code> {
    let Some(filters) = filters else {
        return Vec::new();
    };
    filters
        .filters()
        .iter()
        .map(|f| match f {
            ClientFilter::Fault(c) => match c.abort.unwrap().source {
                AbortSource::Code(code) => code,
                AbortSource::Header => Code(-1),
            },
            _ => Code(-2),
        })
        .collect()
}

#[test]
fn the_most_specific_override_wins() {
    let http = chain(&[
        ("f", HttpFilterConfig::Fault(fault_with_code(1))),
        ("g", HttpFilterConfig::Fault(fault_with_code(2))),
        ("router", HttpFilterConfig::Router),
    ]);
    let vh = scope(&[("f", Some(10), false)]);
    let route = scope(&[("f", Some(11), false), ("g", Some(21), false)]);
    let cluster = scope(&[("f", Some(12), false)]);
    let build = |c, r, v| codes(ClientFilters::build(&http, [c, r, v]));
    // No override: the HCM's configs.
    assert_eq!(build(None, None, None), [Code(1), Code(2)]);
    // Virtual host, then route, then weighted cluster.
    assert_eq!(build(None, None, Some(&vh)), [Code(10), Code(2)]);
    assert_eq!(build(None, Some(&route), Some(&vh)), [Code(11), Code(21)]);
    assert_eq!(
        build(Some(&cluster), Some(&route), Some(&vh)),
        [Code(12), Code(21)]
    );
    // A disabled override at any level leaves the filter out; a more specific
    // override with a config brings it back.
    let disabled = scope(&[("f", None, true)]);
    assert_eq!(build(None, Some(&disabled), Some(&vh)), [Code(2)]);
    assert_eq!(build(None, None, Some(&disabled)), [Code(2)]);
    assert_eq!(
        build(Some(&cluster), Some(&disabled), None),
        [Code(12), Code(2)]
    );
    // An override for a name not in the chain changes nothing.
    let stray = scope(&[("nope", Some(9), false)]);
    assert_eq!(build(Some(&stray), None, None), [Code(1), Code(2)]);
}

#[test]
fn a_chain_that_runs_nothing_costs_nothing() {
    let router_only = chain(&[("router", HttpFilterConfig::Router)]);
    assert!(ClientFilters::build(&router_only, [None, None, None]).is_none());
    let authn = chain(&[
        ("authn", HttpFilterConfig::GcpAuthn),
        ("router", HttpFilterConfig::Router),
    ]);
    assert!(ClientFilters::build(&authn, [None, None, None]).is_none());
    let fault = chain(&[
        ("f", HttpFilterConfig::Fault(fault_with_code(1))),
        ("router", HttpFilterConfig::Router),
    ]);
    let off = scope(&[("f", None, true)]);
    assert!(ClientFilters::build(&fault, [None, Some(&off), None]).is_none());
}

#[test]
fn two_fault_filters_add_their_delays_and_the_first_abort_wins() {
    let delay = |ms| {
        Arc::new(
            parse(&fault_pb::HttpFault {
                delay: Some(fixed_delay(ms, percent(100, Denominator::Hundred))),
                ..Default::default()
            })
            .unwrap(),
        )
    };
    let http = chain(&[
        ("d1", HttpFilterConfig::Fault(delay(10))),
        ("a1", HttpFilterConfig::Fault(fault_with_code(7))),
        ("d2", HttpFilterConfig::Fault(delay(5))),
        ("a2", HttpFilterConfig::Fault(fault_with_code(9))),
        ("router", HttpFilterConfig::Router),
    ]);
    let filters = ClientFilters::build(&http, [None, None, None]).unwrap();
    let active = ActiveFaults::new();
    let rpc = filters.on_rpc("/s/m", &[("a", "b")], &mut || 0, &active);
    let fault = rpc.fault.as_ref().unwrap();
    assert_eq!(fault.delay, Some(Duration::from_millis(15)));
    assert_eq!(fault.abort, Some(Code::PERMISSION_DENIED));
    assert_eq!(
        fault.abort_status().unwrap().message,
        "RPC terminated due to fault injection"
    );
    assert_eq!(active.count(), 1, "one RPC counts once");
    drop(rpc);
    assert_eq!(active.count(), 0);
}

// ---------------------------------------------------------------------------------------
// Through decoding and the config selector
// ---------------------------------------------------------------------------------------

mod through_the_selector {
    use super::*;
    use crate::pb::envoy::config::route::v3 as route_pb;
    use crate::selector::{ClusterRegistry, ConfigSelector};

    const FAULT_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault";

    fn fault_any(code: u32) -> pbuf::Any {
        let fault = fault_pb::HttpFault {
            abort: Some(abort(
                ErrorType::GrpcStatus(code),
                percent(100, Denominator::Hundred),
            )),
            ..Default::default()
        };
        pbuf::Any {
            type_url: FAULT_TYPE.to_owned(),
            value: fault.encode_to_vec().into(),
        }
    }

    fn overrides(code: Option<u32>) -> std::collections::HashMap<String, pbuf::Any> {
        code.map(|c| ("fault".to_owned(), fault_any(c)))
            .into_iter()
            .collect()
    }

    fn route(
        prefix: &str,
        action: route_pb::route_action::ClusterSpecifier,
        code: Option<u32>,
    ) -> route_pb::Route {
        super::prefix_route(prefix, action, overrides(code))
    }

    /// `/vh.` runs the virtual host's override (code 10), `/route.` its own (11),
    /// `/split.` picks weighted cluster `a` (override 12) or `b` (none: the route's 13).
    fn selector() -> ConfigSelector {
        use route_pb::route_action::ClusterSpecifier as Spec;
        let split = Spec::WeightedClusters(route_pb::WeightedCluster {
            clusters: vec![
                route_pb::weighted_cluster::ClusterWeight {
                    name: "a".to_owned(),
                    weight: Some(pbuf::UInt32Value { value: 1 }),
                    typed_per_filter_config: overrides(Some(12)),
                    ..Default::default()
                },
                route_pb::weighted_cluster::ClusterWeight {
                    name: "b".to_owned(),
                    weight: Some(pbuf::UInt32Value { value: 1 }),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let rc = route_pb::RouteConfiguration {
            name: "rc".to_owned(),
            virtual_hosts: vec![route_pb::VirtualHost {
                name: "vh".to_owned(),
                domains: vec!["*".to_owned()],
                routes: vec![
                    route("/vh.", Spec::Cluster("c".to_owned()), None),
                    route("/route.", Spec::Cluster("c".to_owned()), Some(11)),
                    route("/split.", split, Some(13)),
                ],
                typed_per_filter_config: overrides(Some(10)),
                ..Default::default()
            }],
            ..Default::default()
        };
        let (_, routes) = crate::resource::route::decode(&rc.encode_to_vec()).unwrap();
        let http = chain(&[
            ("fault", HttpFilterConfig::Fault(fault_with_code(1))),
            ("router", HttpFilterConfig::Router),
        ]);
        ConfigSelector::from_virtual_host_with_filters(
            &routes.virtual_hosts[0],
            &[],
            None,
            &http,
            &mut ClusterRegistry::new(),
        )
    }

    fn aborted_with(selector: &ConfigSelector, path: &str, draw: u32) -> Option<Code> {
        let active = ActiveFaults::new();
        let selection = selector.select(path, &[("a", "b")], &mut || draw).unwrap();
        let rpc = selection.run_filters("/s/m", &[("a", "b")], &mut || 0, &active);
        rpc.fault.and_then(|f| f.abort)
    }

    #[test]
    fn selections_carry_the_merged_filters_of_their_route_and_cluster() {
        let selector = selector();
        assert_eq!(aborted_with(&selector, "/vh.S/M", 0), Some(Code(10)));
        assert_eq!(aborted_with(&selector, "/route.S/M", 0), Some(Code(11)));
        assert_eq!(aborted_with(&selector, "/split.S/M", 0), Some(Code(12)));
        assert_eq!(
            aborted_with(&selector, "/split.S/M", u32::MAX),
            Some(Code(13))
        );
    }

    #[test]
    fn a_selector_without_filters_runs_nothing_and_draws_nothing() {
        use route_pb::route_action::ClusterSpecifier as Spec;
        let rc = route_pb::RouteConfiguration {
            name: "rc".to_owned(),
            virtual_hosts: vec![route_pb::VirtualHost {
                name: "vh".to_owned(),
                domains: vec!["*".to_owned()],
                routes: vec![route("", Spec::Cluster("c".to_owned()), Some(11))],
                ..Default::default()
            }],
            ..Default::default()
        };
        let (_, routes) = crate::resource::route::decode(&rc.encode_to_vec()).unwrap();
        let selector = ConfigSelector::from_virtual_host(
            &routes.virtual_hosts[0],
            &[],
            None,
            &mut ClusterRegistry::new(),
        );
        let selection = selector.select("/s/m", &[("a", "b")], &mut || 0).unwrap();
        assert!(selection.filters().is_none());
        let mut rng = Counting { value: 0, draws: 0 };
        let active = ActiveFaults::new();
        assert!(
            selection
                .run_filters("/s/m", &[("a", "b")], &mut rng, &active)
                .fault
                .is_none()
        );
        assert_eq!(rng.draws, 0);
    }
}
