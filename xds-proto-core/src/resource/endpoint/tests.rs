//! Tests of the EDS decoder: every validation rule, with the exact error it reports.

use prost::Message;

use super::*;
use crate::pb::envoy::r#type::v3 as type_pb;
use crate::pb::google::protobuf as pbuf;
use core_pb::socket_address::PortSpecifier;
use endpoint_pb::cluster_load_assignment::{Policy, policy::DropOverload as DropPb};

fn address(host: &str, port: Option<PortSpecifier>) -> core_pb::Address {
    core_pb::Address {
        address: Some(core_pb::address::Address::SocketAddress(
            core_pb::SocketAddress {
                address: host.to_owned(),
                port_specifier: port,
                ..Default::default()
            },
        )),
    }
}

fn lb_endpoint(host: &str, port: u32) -> endpoint_pb::LbEndpoint {
    endpoint_pb::LbEndpoint {
        host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(
            endpoint_pb::Endpoint {
                address: Some(address(host, Some(PortSpecifier::PortValue(port)))),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

fn locality(
    zone: &str,
    weight: Option<u32>,
    priority: u32,
    endpoints: Vec<endpoint_pb::LbEndpoint>,
) -> endpoint_pb::LocalityLbEndpoints {
    endpoint_pb::LocalityLbEndpoints {
        locality: Some(core_pb::Locality {
            region: "r".to_owned(),
            zone: zone.to_owned(),
            sub_zone: String::new(),
        }),
        lb_endpoints: endpoints,
        load_balancing_weight: weight.map(|value| pbuf::UInt32Value { value }),
        priority,
        ..Default::default()
    }
}

fn cla(endpoints: Vec<endpoint_pb::LocalityLbEndpoints>) -> endpoint_pb::ClusterLoadAssignment {
    endpoint_pb::ClusterLoadAssignment {
        cluster_name: "eds".to_owned(),
        endpoints,
        ..Default::default()
    }
}

fn decode_cla(c: &endpoint_pb::ClusterLoadAssignment) -> Result<EndpointsResource, DecodeError> {
    decode(&c.encode_to_vec()).map(|(name, value)| {
        assert_eq!(name, c.cluster_name);
        value
    })
}

fn err(c: &endpoint_pb::ClusterLoadAssignment) -> String {
    let e = decode_cla(c).expect_err("expected an error");
    assert_eq!(e.name.as_deref(), Some("eds"));
    e.message
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn full_assignment() {
    let mut ep = lb_endpoint("10.0.0.1", 80);
    ep.health_status = core_pb::HealthStatus::Draining as i32;
    ep.load_balancing_weight = Some(pbuf::UInt32Value { value: 7 });
    if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) = &mut ep.host_identifier {
        e.hostname = "host-1".to_owned();
        e.additional_addresses = vec![endpoint_pb::endpoint::AdditionalAddress {
            address: Some(address("::1", Some(PortSpecifier::PortValue(80)))),
        }];
    }
    let mut c = cla(vec![
        locality("z1", Some(2), 1, vec![lb_endpoint("10.0.0.2", 81)]),
        locality("z0", Some(3), 0, vec![ep]),
        locality("skipped", None, 0, vec![lb_endpoint("10.0.0.9", 1)]),
        locality("zero", Some(0), 5, vec![]),
    ]);
    c.policy = Some(Policy {
        drop_overloads: vec![DropPb {
            category: "lb".to_owned(),
            drop_percentage: Some(type_pb::FractionalPercent {
                numerator: 3,
                denominator: type_pb::fractional_percent::DenominatorType::Hundred as i32,
            }),
        }],
        ..Default::default()
    });
    let loc = |zone: &str| Locality {
        region: "r".to_owned(),
        zone: zone.to_owned(),
        sub_zone: String::new(),
    };
    assert_eq!(
        decode_cla(&c).unwrap(),
        EndpointsResource {
            cluster_name: "eds".to_owned(),
            priorities: vec![
                Priority {
                    localities: vec![LocalityEndpoints {
                        locality: loc("z0"),
                        weight: 3,
                        endpoints: vec![Endpoint {
                            address: addr("10.0.0.1:80"),
                            additional_addresses: vec![addr("[::1]:80")],
                            health_status: HealthStatus::Draining,
                            weight: 7,
                            hostname: "host-1".to_owned(),
                        }],
                    }],
                },
                Priority {
                    localities: vec![LocalityEndpoints {
                        locality: loc("z1"),
                        weight: 2,
                        endpoints: vec![Endpoint {
                            address: addr("10.0.0.2:81"),
                            additional_addresses: vec![],
                            health_status: HealthStatus::Unknown,
                            weight: 1,
                            hostname: String::new(),
                        }],
                    }],
                },
            ],
            drop_overloads: vec![DropOverload {
                category: "lb".to_owned(),
                drop_per_million: 30_000,
            }],
        }
    );
}

#[test]
fn mutated_bytes_never_panic() {
    let c = cla(vec![
        locality("a", Some(1), 0, vec![lb_endpoint("10.0.0.1", 80)]),
        locality("b", Some(2), 1, vec![lb_endpoint("::1", 443)]),
    ]);
    crate::resource::validate::for_each_mutation(&c.encode_to_vec(), |b| {
        let _ = decode(b);
    });
}

#[test]
fn garbage_and_truncated_bytes_are_unnamed_errors() {
    let e = decode(&[0x12, 0x05, 0x01]).unwrap_err();
    assert_eq!(e.name, None);
    assert!(
        e.message
            .starts_with("failed to decode ClusterLoadAssignment: "),
        "{e}"
    );
    let full = cla(vec![locality(
        "z",
        Some(1),
        0,
        vec![lb_endpoint("10.0.0.1", 80)],
    )])
    .encode_to_vec();
    for len in 0..full.len() {
        if let Err(e) = decode(&full[..len]) {
            assert!(matches!(e.name.as_deref(), None | Some("" | "eds")), "{e}");
        }
    }
}

#[test]
fn empty_assignment_is_valid() {
    let out = decode_cla(&cla(vec![])).unwrap();
    assert!(out.priorities.is_empty());
}

#[test]
fn health_statuses() {
    use core_pb::HealthStatus as H;
    for (proto, status) in [
        (H::Unknown, HealthStatus::Unknown),
        (H::Healthy, HealthStatus::Healthy),
        (H::Unhealthy, HealthStatus::Unhealthy),
        (H::Draining, HealthStatus::Draining),
        (H::Timeout, HealthStatus::Timeout),
        (H::Degraded, HealthStatus::Degraded),
    ] {
        let mut ep = lb_endpoint("10.0.0.1", 80);
        ep.health_status = proto as i32;
        let out = decode_cla(&cla(vec![locality("z", Some(1), 0, vec![ep])])).unwrap();
        assert_eq!(
            out.priorities[0].localities[0].endpoints[0].health_status,
            status
        );
    }
    assert!(HealthStatus::Healthy.is_usable());
    assert!(!HealthStatus::Draining.is_usable());
    // An unknown enum value: the endpoint is dropped.
    let mut ep = lb_endpoint("10.0.0.1", 80);
    ep.health_status = 42;
    let out = decode_cla(&cla(vec![locality("z", Some(1), 0, vec![ep])])).unwrap();
    assert!(out.priorities[0].localities[0].endpoints.is_empty());
}

#[test]
fn locality_errors() {
    let mut no_locality = locality("z", Some(1), 0, vec![]);
    no_locality.locality = None;
    assert_eq!(
        err(&cla(vec![no_locality])),
        "endpoints[0].locality: field not present"
    );
    assert_eq!(
        err(&cla(vec![
            locality("a", Some(1), 0, vec![]),
            locality("a", Some(1), 0, vec![]),
        ])),
        "endpoints[1].locality: duplicate locality {region=\"r\", zone=\"a\", sub_zone=\"\"} \
         in priority 0"
    );
    // The same locality in two priorities is fine.
    assert!(
        decode_cla(&cla(vec![
            locality("a", Some(1), 0, vec![]),
            locality("a", Some(1), 1, vec![]),
        ]))
        .is_ok()
    );
}

#[test]
fn priorities_must_be_contiguous() {
    assert_eq!(
        err(&cla(vec![
            locality("a", Some(1), 0, vec![]),
            locality("b", Some(1), 2, vec![]),
        ])),
        "endpoints: priorities are not contiguous: priority 1 is missing but priority 2 is \
         set"
    );
    assert_eq!(
        err(&cla(vec![locality("a", Some(1), u32::MAX, vec![])])),
        "endpoints: priorities are not contiguous: priority 0 is missing but priority \
         4294967295 is set"
    );
    // A gap left by a zero-weight locality counts as missing.
    assert_eq!(
        err(&cla(vec![
            locality("a", Some(0), 0, vec![]),
            locality("b", Some(1), 1, vec![]),
        ])),
        "endpoints: priorities are not contiguous: priority 0 is missing but priority 1 is \
         set"
    );
}

#[test]
fn locality_weight_sum_must_fit_u32() {
    assert_eq!(
        err(&cla(vec![
            locality("a", Some(u32::MAX), 0, vec![]),
            locality("b", Some(1), 0, vec![]),
        ])),
        "endpoints: sum of locality weights for priority 0 (4294967296) exceeds 4294967295"
    );
    assert!(
        decode_cla(&cla(vec![
            locality("a", Some(u32::MAX), 0, vec![]),
            locality("b", Some(1), 1, vec![]),
        ]))
        .is_ok()
    );
}

#[test]
fn endpoint_errors() {
    let p = "endpoints[0].lb_endpoints[0]";
    let with_addr = |a: Option<core_pb::Address>| endpoint_pb::LbEndpoint {
        host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(
            endpoint_pb::Endpoint {
                address: a,
                ..Default::default()
            },
        )),
        ..Default::default()
    };
    let mut zero_weight = lb_endpoint("10.0.0.1", 80);
    zero_weight.load_balancing_weight = Some(pbuf::UInt32Value { value: 0 });
    let cases = [
        (
            zero_weight,
            format!("{p}.load_balancing_weight: must be greater than 0"),
        ),
        (
            endpoint_pb::LbEndpoint::default(),
            format!("{p}.endpoint: field not present"),
        ),
        (
            endpoint_pb::LbEndpoint {
                host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::EndpointName(
                    "n".to_owned(),
                )),
                ..Default::default()
            },
            format!("{p}.endpoint_name: not supported"),
        ),
        (
            with_addr(None),
            format!("{p}.endpoint.address: field not present"),
        ),
        (
            with_addr(Some(core_pb::Address {
                address: Some(core_pb::address::Address::Pipe(Default::default())),
            })),
            format!("{p}.endpoint.address.socket_address: field not present"),
        ),
        (
            with_addr(Some(address("10.0.0.1", None))),
            format!("{p}.endpoint.address.socket_address.port_value: field not present"),
        ),
        (
            with_addr(Some(address(
                "10.0.0.1",
                Some(PortSpecifier::NamedPort("http".to_owned())),
            ))),
            format!(
                "{p}.endpoint.address.socket_address.named_port: not supported (use \
                 port_value)"
            ),
        ),
        (
            lb_endpoint("10.0.0.1", 65_536),
            format!("{p}.endpoint.address.socket_address.port_value: invalid port 65536"),
        ),
        (
            lb_endpoint("example.com", 80),
            format!(
                "{p}.endpoint.address.socket_address.address: \"example.com\" is not an IP \
                 address"
            ),
        ),
    ];
    for (ep, msg) in cases {
        assert_eq!(err(&cla(vec![locality("z", Some(1), 0, vec![ep])])), msg);
    }
    let mut bad_additional = lb_endpoint("10.0.0.1", 80);
    if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) =
        &mut bad_additional.host_identifier
    {
        e.additional_addresses = vec![endpoint_pb::endpoint::AdditionalAddress { address: None }];
    }
    assert_eq!(
        err(&cla(vec![locality("z", Some(1), 0, vec![bad_additional])])),
        format!("{p}.endpoint.additional_addresses[0].address: field not present")
    );
}

#[test]
fn duplicate_addresses_are_rejected() {
    assert_eq!(
        err(&cla(vec![
            locality("a", Some(1), 0, vec![lb_endpoint("10.0.0.1", 80)]),
            locality("b", Some(1), 1, vec![lb_endpoint("10.0.0.1", 80)]),
        ])),
        "endpoints[1].lb_endpoints[0]: duplicate endpoint address 10.0.0.1:80"
    );
    let mut ep = lb_endpoint("10.0.0.1", 80);
    if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) = &mut ep.host_identifier {
        e.additional_addresses = vec![endpoint_pb::endpoint::AdditionalAddress {
            address: Some(address("10.0.0.1", Some(PortSpecifier::PortValue(80)))),
        }];
    }
    assert_eq!(
        err(&cla(vec![locality("a", Some(1), 0, vec![ep])])),
        "endpoints[0].lb_endpoints[0]: duplicate endpoint address 10.0.0.1:80"
    );
}

#[test]
fn duplicates_are_found_at_every_size_of_the_address_set() {
    // A few endpoints are checked in a vector, many in hash sets, and a few endpoints
    // with many additional addresses move from one to the other midway.
    let port = |i: usize| Some(PortSpecifier::PortValue(1000 + i as u32));
    for (endpoints, extra) in [(1, 0), (2, 0), (16, 0), (17, 0), (1, 40), (3, 20), (40, 1)] {
        let eps = |duplicate: bool| -> Vec<endpoint_pb::LbEndpoint> {
            (0..endpoints)
                .map(|e| {
                    let mut ep = lb_endpoint(&format!("10.0.{e}.1"), 80);
                    if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(inner)) =
                        &mut ep.host_identifier
                    {
                        inner.additional_addresses = (0..extra)
                            .map(|i| endpoint_pb::endpoint::AdditionalAddress {
                                address: Some(address(&format!("10.1.{e}.1"), port(i))),
                            })
                            .collect();
                        if duplicate && e == endpoints - 1 {
                            // The last address repeats the first endpoint's.
                            inner.additional_addresses.push(
                                endpoint_pb::endpoint::AdditionalAddress {
                                    address: Some(address(
                                        "10.0.0.1",
                                        Some(PortSpecifier::PortValue(80)),
                                    )),
                                },
                            );
                        }
                    }
                    ep
                })
                .collect()
        };
        let total = endpoints * (1 + extra);
        let valid = decode_cla(&cla(vec![locality("a", Some(1), 0, eps(false))]));
        assert!(valid.is_ok(), "{endpoints} x {extra}: {valid:?}");
        assert_eq!(
            err(&cla(vec![locality("a", Some(1), 0, eps(true))])),
            format!(
                "endpoints[0].lb_endpoints[{}]: duplicate endpoint address 10.0.0.1:80",
                endpoints - 1
            ),
            "{endpoints} endpoints x {extra} extra ({total} addresses)"
        );
    }
}

#[test]
fn drop_overloads() {
    use type_pb::fractional_percent::DenominatorType as D;
    let with_drops = |drops: Vec<DropPb>| endpoint_pb::ClusterLoadAssignment {
        policy: Some(Policy {
            drop_overloads: drops,
            ..Default::default()
        }),
        ..cla(vec![])
    };
    let drop = |category: &str, numerator: u32, denominator: i32| DropPb {
        category: category.to_owned(),
        drop_percentage: Some(type_pb::FractionalPercent {
            numerator,
            denominator,
        }),
    };
    let out = decode_cla(&with_drops(vec![
        drop("a", 5, D::TenThousand as i32),
        drop("b", 2_000_000, D::Million as i32),
        drop("c", 150, D::Hundred as i32),
    ]))
    .unwrap();
    let rates: Vec<(&str, u32)> = out
        .drop_overloads
        .iter()
        .map(|d| (d.category.as_str(), d.drop_per_million))
        .collect();
    assert_eq!(rates, vec![("a", 500), ("b", 1_000_000), ("c", 1_000_000)]);

    assert_eq!(
        err(&with_drops(vec![drop("", 1, 0)])),
        "policy.drop_overloads[0].category: must be non-empty"
    );
    assert_eq!(
        err(&with_drops(vec![DropPb {
            category: "x".to_owned(),
            drop_percentage: None,
        }])),
        "policy.drop_overloads[0].drop_percentage: field not present"
    );
    assert_eq!(
        err(&with_drops(vec![drop("ok", 1, 0), drop("x", 1, 3)])),
        "policy.drop_overloads[1].drop_percentage.denominator: unknown denominator type 3"
    );
}

#[test]
fn unread_fields_do_not_change_the_result() {
    use endpoint_pb::lb_endpoint::HostIdentifier;
    let mut ep = lb_endpoint("10.0.0.1", 80);
    ep.metadata = Some(core_pb::Metadata {
        filter_metadata: [("istio".to_owned(), pbuf::Struct::default())]
            .into_iter()
            .collect(),
        ..Default::default()
    });
    if let Some(HostIdentifier::Endpoint(e)) = &mut ep.host_identifier {
        e.health_check_config = Some(endpoint_pb::endpoint::HealthCheckConfig {
            port_value: 9,
            hostname: "hc".to_owned(),
            ..Default::default()
        });
        e.observability_name = "obs".to_owned();
    }
    let mut rich = cla(vec![locality("z", Some(1), 0, vec![ep])]);
    rich.endpoints[0].metadata = Some(Default::default());
    rich.endpoints[0].proximity = Some(pbuf::UInt32Value { value: 3 });
    rich.named_endpoints
        .insert("n".to_owned(), endpoint_pb::Endpoint::default());
    rich.policy = Some(Policy {
        overprovisioning_factor: Some(pbuf::UInt32Value { value: 140 }),
        ..Default::default()
    });
    let plain = cla(vec![locality(
        "z",
        Some(1),
        0,
        vec![lb_endpoint("10.0.0.1", 80)],
    )]);
    assert_eq!(decode_cla(&rich).unwrap(), decode_cla(&plain).unwrap());
}

#[test]
fn endpoint_errors_keep_their_order_and_indices() {
    let a = || lb_endpoint("10.0.0.1", 80);
    let bad = || lb_endpoint("example.com", 80);
    let unknown = || {
        let mut ep = lb_endpoint("10.0.0.9", 80);
        ep.health_status = 42;
        ep
    };
    let one = |eps| cla(vec![locality("z", Some(1), 0, eps)]);
    // Skipped endpoints still count in the indices.
    assert_eq!(
        err(&one(vec![unknown(), a(), unknown(), a()])),
        "endpoints[0].lb_endpoints[3]: duplicate endpoint address 10.0.0.1:80"
    );
    // The first problem in order wins: a duplicate before an invalid endpoint, an
    // invalid endpoint before a duplicate.
    assert_eq!(
        err(&one(vec![a(), a(), bad()])),
        "endpoints[0].lb_endpoints[1]: duplicate endpoint address 10.0.0.1:80"
    );
    assert_eq!(
        err(&one(vec![a(), bad(), a()])),
        "endpoints[0].lb_endpoints[1].endpoint.address.socket_address.address: \
         \"example.com\" is not an IP address"
    );
    // A locality without weight is ignored, invalid endpoints included; its
    // addresses do not count as seen.
    let out = decode_cla(&cla(vec![
        locality("z", Some(0), 0, vec![bad(), a()]),
        locality("y", Some(1), 0, vec![a()]),
    ]))
    .unwrap();
    assert_eq!(out.endpoint_count(), 1);
    // The same address and port in IPv4 and IPv4-mapped IPv6 form are distinct.
    assert!(decode_cla(&one(vec![a(), lb_endpoint("::ffff:10.0.0.1", 80)])).is_ok());
}

#[test]
fn addresses_are_parsed_from_the_wire_bytes() {
    let out = decode_cla(&cla(vec![locality(
        "z",
        Some(1),
        0,
        vec![lb_endpoint("2001:db8::1", 443)],
    )]))
    .unwrap();
    assert_eq!(
        out.priorities[0].localities[0].endpoints[0].address,
        addr("[2001:db8::1]:443")
    );
    // A long value takes prost's own string decoding.
    let long = "h".repeat(300);
    assert_eq!(
        err(&cla(vec![locality(
            "z",
            Some(1),
            0,
            vec![lb_endpoint(&long, 80)]
        )])),
        format!(
            "endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address: \
             {long:?} is not an IP address"
        )
    );
    // Bytes that are not UTF-8 fail the decode, as in any string field, short or long.
    for host in [
        "10.0.0.1".to_owned(),
        format!("10.0.0.1{}", " ".repeat(200)),
    ] {
        let bytes = cla(vec![locality(
            "z",
            Some(1),
            0,
            vec![lb_endpoint(&host, 80)],
        )])
        .encode_to_vec();
        let at = bytes.windows(8).position(|w| w == b"10.0.0.1").unwrap();
        let mut bad = bytes.clone();
        bad[at] = 0xff;
        let e = decode(&bad).unwrap_err();
        assert_eq!(e.name, None);
        assert!(
            e.message
                .starts_with("failed to decode ClusterLoadAssignment: ")
                && e.message.contains("UTF-8"),
            "{e}"
        );
    }
}

#[test]
fn plain_ipv4_agrees_with_std() {
    for text in [
        "0.0.0.0",
        "10.0.0.1",
        "255.255.255.255",
        "1.2.3.4",
        "192.168.001.1",
        "01.2.3.4",
        "256.1.1.1",
        "1.2.3",
        "1.2.3.4.5",
        "1..3.4",
        "1.2.3.",
        ".1.2.3",
        "1.2.3.4 ",
        "+1.2.3.4",
        "1234.1.1.1",
        "",
        "::1",
        "::ffff:1.2.3.4",
    ] {
        let fast = lite::plain_ipv4(text.as_bytes());
        let std = text.parse::<std::net::Ipv4Addr>().ok();
        assert!(fast.is_none() || fast == std, "{text}: {fast:?} vs {std:?}");
        if text.split('.').all(|p| p.len() <= 3) {
            // Every plain literal std accepts is taken by the fast path too.
            assert_eq!(fast, std, "{text}");
        }
    }
}

/// A priority of many localities, and many priorities sent last first: both valid,
/// and each checked in linear time (a scan of the localities kept so far per locality
/// and an insertion at the front per priority made them quadratic: 40,000 of each took
/// 210 s in a debug build, 2.4 s now; 20,000 take about a quarter of that, or half).
#[test]
fn many_localities_and_priorities_decode_in_linear_time() {
    const N: u32 = 20_000;
    let one_priority = cla((0..N)
        .map(|i| locality(&i.to_string(), Some(1), 0, vec![]))
        .collect());
    let reversed = cla((0..N)
        .rev()
        .map(|i| locality(&i.to_string(), Some(1), i, vec![]))
        .collect());
    let started = std::time::Instant::now();
    let one = decode_cla(&one_priority).expect("valid");
    let many = decode_cla(&reversed).expect("valid");
    let took = started.elapsed();
    assert_eq!(one.priorities.len(), 1);
    assert_eq!(one.priorities[0].localities.len(), N as usize);
    assert_eq!(
        one.priorities[0].localities[7].locality.zone, "7",
        "order kept"
    );
    assert_eq!(many.priorities.len(), N as usize);
    assert_eq!(many.priorities[3].localities[0].locality.zone, "3");
    assert!(took < std::time::Duration::from_secs(15), "took {took:?}");
}
