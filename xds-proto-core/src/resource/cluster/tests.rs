//! Tests of the CDS decoder: every validation rule, with the exact error it reports.

use prost::Message;

use super::lb_policy::*;
use super::*;
use crate::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, CustomClusterType, DiscoveryType, EdsClusterConfig, LbConfig,
};
use crate::pb::envoy::extensions::load_balancing_policies as lb_pb;
use crate::pb::envoy::extensions::transport_sockets::tls::v3 as tls_pb;
use crate::pb::google::protobuf as pbuf;

fn any(type_name: &str, msg: &impl Message) -> pbuf::Any {
    pbuf::Any {
        type_url: format!("type.googleapis.com/{type_name}"),
        value: msg.encode_to_vec().into(),
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

fn self_source() -> core_pb::ConfigSource {
    core_pb::ConfigSource {
        config_source_specifier: Some(core_pb::config_source::ConfigSourceSpecifier::Self_(
            Default::default(),
        )),
        ..Default::default()
    }
}

fn eds_cluster(name: &str) -> cluster_pb::Cluster {
    cluster_pb::Cluster {
        name: name.to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: Some(ads()),
            service_name: String::new(),
        }),
        ..Default::default()
    }
}

fn decode_cluster(c: &cluster_pb::Cluster) -> Result<ClusterResource, DecodeError> {
    decode(&c.encode_to_vec()).map(|(name, value)| {
        assert_eq!(name, c.name);
        value
    })
}

fn err(c: &cluster_pb::Cluster) -> String {
    let e = decode_cluster(c).expect_err("expected an error");
    assert_eq!(e.name.as_deref(), Some(c.name.as_str()));
    e.message
}

fn policy_list(policies: Vec<pbuf::Any>) -> cluster_pb::LoadBalancingPolicy {
    cluster_pb::LoadBalancingPolicy {
        policies: policies
            .into_iter()
            .map(|a| cluster_pb::load_balancing_policy::Policy {
                typed_extension_config: Some(core_pb::TypedExtensionConfig {
                    name: "p".to_owned(),
                    typed_config: Some(a),
                }),
            })
            .collect(),
    }
}

fn with_policies(policies: Vec<pbuf::Any>) -> cluster_pb::Cluster {
    cluster_pb::Cluster {
        load_balancing_policy: Some(policy_list(policies)),
        ..eds_cluster("c")
    }
}

fn lb_of(c: &cluster_pb::Cluster) -> LbPolicy {
    decode_cluster(c).expect("valid").lb_policy
}

/// The smallest valid `UpstreamTlsContext` (roots from the provider instance "roots";
/// A29 refuses a client without roots), with this SNI.
fn minimal_tls(sni: &str) -> tls_pb::UpstreamTlsContext {
    tls_pb::UpstreamTlsContext {
        common_tls_context: Some(tls_pb::CommonTlsContext {
            validation_context_type: Some(
                tls_pb::common_tls_context::ValidationContextType::ValidationContext(
                    tls_pb::CertificateValidationContext {
                        ca_certificate_provider_instance: Some(
                            tls_pb::CertificateProviderPluginInstance {
                                instance_name: "roots".to_owned(),
                                certificate_name: String::new(),
                            },
                        ),
                        ..Default::default()
                    },
                ),
            ),
            ..Default::default()
        }),
        sni: sni.to_owned(),
        ..Default::default()
    }
}

/// What [`minimal_tls`] decodes to.
fn minimal_tls_decoded(sni: &str) -> UpstreamTls {
    UpstreamTls {
        identity: None,
        roots: crate::security::RootCertificates::Provider(
            crate::security::CertificateProviderInstance {
                instance_name: "roots".into(),
                certificate_name: "".into(),
            },
        ),
        match_subject_alt_names: Box::default(),
        sni: (!sni.is_empty()).then(|| sni.into()),
        auto_host_sni: false,
        auto_sni_san_validation: false,
    }
}

#[test]
fn eds_cluster_defaults() {
    assert_eq!(
        decode_cluster(&eds_cluster("c")).unwrap(),
        ClusterResource {
            name: "c".to_owned(),
            cluster_type: ClusterType::Eds { service_name: None },
            lb_policy: LbPolicy::RoundRobin,
            lrs_server: false,
            max_requests: 1024,
            tls: None,
            outlier_detection: None,
            override_host_status: Default::default(),
        }
    );
    let mut c = eds_cluster("xdstp://auth/envoy.config.cluster.v3.Cluster/c");
    c.eds_cluster_config = Some(EdsClusterConfig {
        eds_config: Some(self_source()),
        service_name: "svc".to_owned(),
    });
    assert_eq!(
        decode_cluster(&c).unwrap().cluster_type,
        ClusterType::Eds {
            service_name: Some("svc".to_owned())
        }
    );
}

#[test]
fn mutated_bytes_never_panic() {
    use lb_pb::ring_hash::v3::RingHash;
    use lb_pb::wrr_locality::v3::WrrLocality;
    let c = with_policies(vec![any(
        WRR_LOCALITY_TYPE,
        &WrrLocality {
            endpoint_picking_policy: Some(policy_list(vec![any(
                RING_HASH_TYPE,
                &RingHash::default(),
            )])),
        },
    )]);
    crate::resource::validate::for_each_mutation(&c.encode_to_vec(), |b| {
        let _ = decode(b);
    });
}

#[test]
fn garbage_and_truncated_bytes_are_unnamed_errors() {
    let e = decode(&[0x0a, 0x10, 0x41]).unwrap_err();
    assert_eq!(e.name, None);
    assert!(e.message.starts_with("failed to decode Cluster: "), "{e}");
    let full = eds_cluster("c").encode_to_vec();
    for len in 0..full.len() {
        if let Err(e) = decode(&full[..len]) {
            assert!(matches!(e.name.as_deref(), None | Some("" | "c")), "{e}");
        }
    }
}

#[test]
fn eds_errors() {
    let mut c = eds_cluster("c");
    c.eds_cluster_config = None;
    assert_eq!(err(&c), "eds_cluster_config: field not present");
    let mut c = eds_cluster("c");
    c.eds_cluster_config = Some(EdsClusterConfig::default());
    assert_eq!(err(&c), "eds_cluster_config.eds_config: field not present");
    let mut c = eds_cluster("c");
    c.eds_cluster_config = Some(EdsClusterConfig {
        eds_config: Some(core_pb::ConfigSource {
            config_source_specifier: Some(
                core_pb::config_source::ConfigSourceSpecifier::ApiConfigSource(Default::default()),
            ),
            ..Default::default()
        }),
        service_name: String::new(),
    });
    assert_eq!(
        err(&c),
        "eds_cluster_config.eds_config: ConfigSource must specify ads or self"
    );
    let c = eds_cluster("xdstp://auth/envoy.config.cluster.v3.Cluster/c");
    assert_eq!(
        err(&c),
        "eds_cluster_config.service_name: must be set for a cluster with an xdstp: name"
    );
}

#[test]
fn unsupported_discovery_types() {
    let mut c = eds_cluster("c");
    c.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32));
    assert_eq!(err(&c), "type: unsupported discovery type STATIC");
    c.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::StrictDns as i32));
    assert_eq!(err(&c), "type: unsupported discovery type STRICT_DNS");
    c.cluster_discovery_type = Some(ClusterDiscoveryType::Type(99));
    assert_eq!(err(&c), "type: unsupported discovery type 99");
    c.cluster_discovery_type = None;
    assert_eq!(err(&c), "type: unsupported discovery type STATIC");
}

fn dns_assignment(
    localities: Vec<Vec<endpoint_pb::LbEndpoint>>,
) -> endpoint_pb::ClusterLoadAssignment {
    endpoint_pb::ClusterLoadAssignment {
        cluster_name: "dns".to_owned(),
        endpoints: localities
            .into_iter()
            .map(|lb_endpoints| endpoint_pb::LocalityLbEndpoints {
                lb_endpoints,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn dns_endpoint(
    host: &str,
    port: Option<core_pb::socket_address::PortSpecifier>,
) -> endpoint_pb::LbEndpoint {
    endpoint_pb::LbEndpoint {
        host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(
            endpoint_pb::Endpoint {
                address: Some(core_pb::Address {
                    address: Some(core_pb::address::Address::SocketAddress(
                        core_pb::SocketAddress {
                            address: host.to_owned(),
                            port_specifier: port,
                            ..Default::default()
                        },
                    )),
                }),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

fn dns_cluster(load_assignment: Option<endpoint_pb::ClusterLoadAssignment>) -> cluster_pb::Cluster {
    cluster_pb::Cluster {
        name: "dns".to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::LogicalDns as i32)),
        load_assignment,
        ..Default::default()
    }
}

#[test]
fn logical_dns() {
    use core_pb::socket_address::PortSpecifier::{NamedPort, PortValue};
    let c = dns_cluster(Some(dns_assignment(vec![vec![dns_endpoint(
        "dns.example.com",
        Some(PortValue(443)),
    )]])));
    assert_eq!(
        decode_cluster(&c).unwrap().cluster_type,
        ClusterType::LogicalDns {
            host: "dns.example.com".to_owned(),
            port: 443,
        }
    );
    let p = "load_assignment.endpoints[0].lb_endpoints[0].endpoint";
    let one = |ep: endpoint_pb::LbEndpoint| dns_cluster(Some(dns_assignment(vec![vec![ep]])));
    let mut with_resolver = dns_endpoint("h", Some(PortValue(1)));
    if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) =
        &mut with_resolver.host_identifier
        && let Some(core_pb::Address {
            address: Some(core_pb::address::Address::SocketAddress(sa)),
        }) = &mut e.address
    {
        sa.resolver_name = "custom".to_owned();
    }
    let cases = [
        (
            dns_cluster(None),
            "load_assignment: field not present for a LOGICAL_DNS cluster".to_owned(),
        ),
        (
            dns_cluster(Some(dns_assignment(vec![]))),
            "load_assignment.endpoints: must contain exactly one locality for a \
             LOGICAL_DNS cluster, found 0"
                .to_owned(),
        ),
        (
            dns_cluster(Some(dns_assignment(vec![vec![], vec![]]))),
            "load_assignment.endpoints: must contain exactly one locality for a \
             LOGICAL_DNS cluster, found 2"
                .to_owned(),
        ),
        (
            dns_cluster(Some(dns_assignment(vec![vec![
                dns_endpoint("a", Some(PortValue(1))),
                dns_endpoint("b", Some(PortValue(1))),
            ]]))),
            "load_assignment.endpoints[0].lb_endpoints: must contain exactly one endpoint \
             for a LOGICAL_DNS cluster, found 2"
                .to_owned(),
        ),
        (
            one(endpoint_pb::LbEndpoint::default()),
            format!("{p}: field not present"),
        ),
        (
            one(endpoint_pb::LbEndpoint {
                host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(
                    Default::default(),
                )),
                ..Default::default()
            }),
            format!("{p}.address: field not present"),
        ),
        (
            one(endpoint_pb::LbEndpoint {
                host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(
                    endpoint_pb::Endpoint {
                        address: Some(core_pb::Address {
                            address: Some(core_pb::address::Address::Pipe(Default::default())),
                        }),
                        ..Default::default()
                    },
                )),
                ..Default::default()
            }),
            format!("{p}.address.socket_address: field not present"),
        ),
        (
            one(dns_endpoint("", Some(PortValue(1)))),
            format!("{p}.address.socket_address.address: must be non-empty"),
        ),
        (
            one(dns_endpoint("h", None)),
            format!("{p}.address.socket_address.port_value: field not present"),
        ),
        (
            one(dns_endpoint("h", Some(NamedPort("https".to_owned())))),
            format!("{p}.address.socket_address.named_port: not supported (use port_value)"),
        ),
        (
            one(dns_endpoint("h", Some(PortValue(0)))),
            format!(
                "{p}.address.socket_address.port_value: invalid port 0 (must be in [1, \
                 65535])"
            ),
        ),
        (
            one(dns_endpoint("h", Some(PortValue(65_536)))),
            format!(
                "{p}.address.socket_address.port_value: invalid port 65536 (must be in [1, \
                 65535])"
            ),
        ),
        (
            one(with_resolver),
            format!(
                "{p}.address.socket_address.resolver_name: must not be set for a \
                 LOGICAL_DNS cluster"
            ),
        ),
    ];
    for (c, msg) in cases {
        assert_eq!(err(&c), msg);
    }
}

fn aggregate_cluster(typed_config: Option<pbuf::Any>) -> cluster_pb::Cluster {
    cluster_pb::Cluster {
        name: "agg".to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::ClusterType(CustomClusterType {
            name: "envoy.clusters.aggregate".to_owned(),
            typed_config,
        })),
        ..Default::default()
    }
}

#[test]
fn aggregate() {
    let c = aggregate_cluster(Some(any(
        AGGREGATE_CLUSTER_TYPE,
        &aggregate_pb::ClusterConfig {
            clusters: vec!["b".to_owned(), "a".to_owned()],
        },
    )));
    assert_eq!(
        decode_cluster(&c).unwrap().cluster_type,
        ClusterType::Aggregate {
            clusters: vec!["b".to_owned(), "a".to_owned()]
        }
    );
    assert_eq!(
        err(&aggregate_cluster(Some(any(
            AGGREGATE_CLUSTER_TYPE,
            &aggregate_pb::ClusterConfig { clusters: vec![] },
        )))),
        "cluster_type.typed_config.value.clusters: must be non-empty"
    );
    assert_eq!(
        err(&aggregate_cluster(None)),
        "cluster_type.typed_config: field not present"
    );
    assert_eq!(
        err(&aggregate_cluster(Some(any(
            "example.Custom",
            &pbuf::Empty {}
        )))),
        "cluster_type.typed_config.type_url: unsupported custom cluster type \
         \"type.googleapis.com/example.Custom\""
    );
    let garbage = aggregate_cluster(Some(pbuf::Any {
        type_url: format!("type.googleapis.com/{AGGREGATE_CLUSTER_TYPE}"),
        value: bytes::Bytes::from_static(&[0x0a, 0x05]),
    }));
    let msg = err(&garbage);
    assert!(
        msg.starts_with("cluster_type.typed_config.value: can't decode ClusterConfig: "),
        "{msg}"
    );
}

#[test]
fn legacy_lb_policies() {
    use cluster_pb::cluster::{
        LbPolicy as Legacy, LeastRequestLbConfig, RingHashLbConfig,
        ring_hash_lb_config::HashFunction,
    };
    let legacy = |policy: Legacy, config: Option<LbConfig>| cluster_pb::Cluster {
        lb_policy: policy as i32,
        lb_config: config,
        ..eds_cluster("c")
    };
    let ring = |min: Option<u64>, max: Option<u64>, hash: HashFunction| {
        Some(LbConfig::RingHashLbConfig(RingHashLbConfig {
            minimum_ring_size: min.map(|value| pbuf::UInt64Value { value }),
            maximum_ring_size: max.map(|value| pbuf::UInt64Value { value }),
            hash_function: hash as i32,
        }))
    };
    assert_eq!(
        lb_of(&legacy(Legacy::RingHash, None)),
        LbPolicy::RingHash {
            min_ring_size: 1024,
            max_ring_size: 8_388_608
        }
    );
    assert_eq!(
        lb_of(&legacy(
            Legacy::RingHash,
            ring(Some(10), Some(100), HashFunction::XxHash)
        )),
        LbPolicy::RingHash {
            min_ring_size: 10,
            max_ring_size: 100
        }
    );
    assert_eq!(
        lb_of(&legacy(Legacy::LeastRequest, None)),
        LbPolicy::LeastRequest { choice_count: 2 }
    );
    assert_eq!(
        lb_of(&legacy(
            Legacy::LeastRequest,
            Some(LbConfig::LeastRequestLbConfig(LeastRequestLbConfig {
                choice_count: Some(pbuf::UInt32Value { value: 5 }),
                ..Default::default()
            }))
        )),
        LbPolicy::LeastRequest { choice_count: 5 }
    );
    for (c, msg) in [
        (
            legacy(
                Legacy::RingHash,
                ring(Some(200), Some(100), HashFunction::XxHash),
            ),
            "ring_hash_lb_config.minimum_ring_size: value 200 must not be greater than \
             maximum_ring_size (100)",
        ),
        (
            legacy(
                Legacy::RingHash,
                ring(None, Some(8_388_609), HashFunction::XxHash),
            ),
            "ring_hash_lb_config.maximum_ring_size: value 8388609 must be in the range [1, \
             8388608]",
        ),
        (
            legacy(Legacy::RingHash, ring(Some(0), None, HashFunction::XxHash)),
            "ring_hash_lb_config.minimum_ring_size: value 0 must be in the range [1, \
             8388608]",
        ),
        (
            legacy(
                Legacy::RingHash,
                ring(None, None, HashFunction::MurmurHash2),
            ),
            "ring_hash_lb_config.hash_function: unsupported hash function (must be XX_HASH)",
        ),
        (
            legacy(
                Legacy::LeastRequest,
                Some(LbConfig::LeastRequestLbConfig(LeastRequestLbConfig {
                    choice_count: Some(pbuf::UInt32Value { value: 1 }),
                    ..Default::default()
                })),
            ),
            "least_request_lb_config.choice_count: value 1 must be at least 2",
        ),
        (
            legacy(Legacy::Maglev, None),
            "lb_policy: unsupported LB policy MAGLEV",
        ),
        (
            legacy(Legacy::Random, None),
            "lb_policy: unsupported LB policy RANDOM",
        ),
        (
            cluster_pb::Cluster {
                lb_policy: 42,
                ..eds_cluster("c")
            },
            "lb_policy: unsupported LB policy 42",
        ),
    ] {
        assert_eq!(err(&c), msg);
    }
}

#[test]
fn load_balancing_policy_list() {
    use lb_pb::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin;
    use lb_pb::least_request::v3::LeastRequest;
    use lb_pb::pick_first::v3::PickFirst;
    use lb_pb::ring_hash::v3::RingHash;
    use lb_pb::round_robin::v3::RoundRobin;
    use lb_pb::wrr_locality::v3::WrrLocality;
    // The first supported entry wins; unknown ones and TypedStructs are skipped.
    let typed_struct = pbuf::Any {
        type_url: "type.googleapis.com/xds.type.v3.TypedStruct".to_owned(),
        value: pbuf::Any {
            type_url: "type.googleapis.com/my.Policy".to_owned(),
            value: Default::default(),
        }
        .encode_to_vec()
        .into(),
    };
    let c = with_policies(vec![
        any("example.Unknown", &pbuf::Empty {}),
        typed_struct,
        any(
            WRR_LOCALITY_TYPE,
            &WrrLocality {
                endpoint_picking_policy: Some(policy_list(vec![any(
                    CSWRR_TYPE,
                    &ClientSideWeightedRoundRobin {
                        enable_oob_load_report: Some(pbuf::BoolValue { value: true }),
                        blackout_period: Some(pbuf::Duration {
                            seconds: 2,
                            nanos: 0,
                        }),
                        error_utilization_penalty: Some(pbuf::FloatValue { value: 0.5 }),
                        ..Default::default()
                    },
                )])),
            },
        ),
        any(ROUND_ROBIN_TYPE, &RoundRobin::default()),
    ]);
    assert_eq!(
        lb_of(&c),
        LbPolicy::WrrLocality(Box::new(LbPolicy::WeightedRoundRobin(
            WeightedRoundRobinConfig {
                enable_oob_load_report: true,
                blackout_period: Duration::from_secs(2),
                error_utilization_penalty: 0.5,
                ..WeightedRoundRobinConfig::default()
            }
        )))
    );
    assert_eq!(
        lb_of(&with_policies(vec![any(
            ROUND_ROBIN_TYPE,
            &RoundRobin::default()
        )])),
        LbPolicy::RoundRobin
    );
    assert_eq!(
        lb_of(&with_policies(vec![any(
            RING_HASH_TYPE,
            &RingHash {
                minimum_ring_size: Some(pbuf::UInt64Value { value: 64 }),
                ..Default::default()
            }
        )])),
        LbPolicy::RingHash {
            min_ring_size: 64,
            max_ring_size: MAX_RING_SIZE
        }
    );
    assert_eq!(
        lb_of(&with_policies(vec![any(
            LEAST_REQUEST_TYPE,
            &LeastRequest::default()
        )])),
        LbPolicy::LeastRequest { choice_count: 2 }
    );
    assert_eq!(
        lb_of(&with_policies(vec![any(
            PICK_FIRST_TYPE,
            &PickFirst {
                shuffle_address_list: true
            }
        )])),
        LbPolicy::PickFirst {
            shuffle_address_list: true
        }
    );
    // The newer field wins over the legacy enum.
    let mut c = with_policies(vec![any(ROUND_ROBIN_TYPE, &RoundRobin::default())]);
    c.lb_policy = cluster_pb::cluster::LbPolicy::Maglev as i32;
    assert_eq!(lb_of(&c), LbPolicy::RoundRobin);
}

#[test]
fn load_balancing_policy_errors() {
    use lb_pb::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin;
    use lb_pb::least_request::v3::LeastRequest;
    use lb_pb::ring_hash::v3::{RingHash, ring_hash::HashFunction};
    use lb_pb::wrr_locality::v3::WrrLocality;
    let p = "load_balancing_policy.policies[0].typed_extension_config.typed_config";
    let cases = [
        (
            with_policies(vec![any("example.Unknown", &pbuf::Empty {})]),
            "load_balancing_policy: no supported load balancing policy found".to_owned(),
        ),
        (
            with_policies(vec![]),
            "load_balancing_policy: no supported load balancing policy found".to_owned(),
        ),
        (
            with_policies(vec![any(
                RING_HASH_TYPE,
                &RingHash {
                    hash_function: HashFunction::MurmurHash2 as i32,
                    ..Default::default()
                },
            )]),
            format!("{p}.value.hash_function: unsupported hash function (must be XX_HASH)"),
        ),
        (
            with_policies(vec![any(
                RING_HASH_TYPE,
                &RingHash {
                    minimum_ring_size: Some(pbuf::UInt64Value { value: 2_000_000 }),
                    maximum_ring_size: Some(pbuf::UInt64Value { value: 1_000_000 }),
                    ..Default::default()
                },
            )]),
            format!(
                "{p}.value.minimum_ring_size: value 2000000 must not be greater than \
                 maximum_ring_size (1000000)"
            ),
        ),
        (
            with_policies(vec![any(
                LEAST_REQUEST_TYPE,
                &LeastRequest {
                    choice_count: Some(pbuf::UInt32Value { value: 0 }),
                    ..Default::default()
                },
            )]),
            format!("{p}.choice_count: value 0 must be at least 2"),
        ),
        (
            with_policies(vec![any(WRR_LOCALITY_TYPE, &WrrLocality::default())]),
            format!("{p}.value.endpoint_picking_policy: field not present"),
        ),
        (
            with_policies(vec![any(
                WRR_LOCALITY_TYPE,
                &WrrLocality {
                    endpoint_picking_policy: Some(policy_list(vec![])),
                },
            )]),
            format!("{p}.value.endpoint_picking_policy: no supported load balancing policy found"),
        ),
        (
            with_policies(vec![any(
                CSWRR_TYPE,
                &ClientSideWeightedRoundRobin {
                    error_utilization_penalty: Some(pbuf::FloatValue { value: -1.0 }),
                    ..Default::default()
                },
            )]),
            format!(
                "{p}.value.error_utilization_penalty: value -1 must be finite and non-negative"
            ),
        ),
        (
            with_policies(vec![any(
                CSWRR_TYPE,
                &ClientSideWeightedRoundRobin {
                    weight_update_period: Some(pbuf::Duration {
                        seconds: -1,
                        nanos: 0,
                    }),
                    ..Default::default()
                },
            )]),
            format!(
                "{p}.value.weight_update_period.seconds: value -1 must be in the range [0, \
                 315576000000]"
            ),
        ),
        (
            with_policies(vec![pbuf::Any {
                type_url: format!("type.googleapis.com/{RING_HASH_TYPE}"),
                value: bytes::Bytes::from_static(&[0xff]),
            }]),
            format!("{p}.value: can't decode RingHash: "),
        ),
        (
            cluster_pb::Cluster {
                load_balancing_policy: Some(cluster_pb::LoadBalancingPolicy {
                    policies: vec![Default::default()],
                }),
                ..eds_cluster("c")
            },
            "load_balancing_policy.policies[0].typed_extension_config: field not present"
                .to_owned(),
        ),
    ];
    for (c, msg) in cases {
        let actual = err(&c);
        assert!(actual.starts_with(&msg), "{actual} != {msg}");
    }
}

#[test]
fn load_balancing_policy_depth_is_limited() {
    use lb_pb::wrr_locality::v3::WrrLocality;
    let mut list = policy_list(vec![any(ROUND_ROBIN_TYPE, &pbuf::Empty {})]);
    for _ in 0..MAX_LB_POLICY_DEPTH {
        list = policy_list(vec![any(
            WRR_LOCALITY_TYPE,
            &WrrLocality {
                endpoint_picking_policy: Some(list),
            },
        )]);
    }
    let c = cluster_pb::Cluster {
        load_balancing_policy: Some(list),
        ..eds_cluster("c")
    };
    let msg = err(&c);
    assert!(
        msg.ends_with(".endpoint_picking_policy: exceeds the maximum nesting depth of 16"),
        "{msg}"
    );
    // One level less is fine.
    let mut list = policy_list(vec![any(ROUND_ROBIN_TYPE, &pbuf::Empty {})]);
    for _ in 0..MAX_LB_POLICY_DEPTH - 1 {
        list = policy_list(vec![any(
            WRR_LOCALITY_TYPE,
            &WrrLocality {
                endpoint_picking_policy: Some(list),
            },
        )]);
    }
    let c = cluster_pb::Cluster {
        load_balancing_policy: Some(list),
        ..eds_cluster("c")
    };
    assert!(matches!(lb_of(&c), LbPolicy::WrrLocality(_)));
}

#[test]
fn lrs_circuit_breakers_and_tls() {
    use cluster_pb::circuit_breakers::Thresholds;
    let mut c = eds_cluster("c");
    c.lrs_server = Some(self_source());
    c.circuit_breakers = Some(cluster_pb::CircuitBreakers {
        thresholds: vec![
            Thresholds {
                priority: core_pb::RoutingPriority::High as i32,
                max_requests: Some(pbuf::UInt32Value { value: 1 }),
                ..Default::default()
            },
            Thresholds {
                priority: core_pb::RoutingPriority::Default as i32,
                max_requests: Some(pbuf::UInt32Value { value: 77 }),
                ..Default::default()
            },
        ],
        ..Default::default()
    });
    c.transport_socket = Some(core_pb::TransportSocket {
        name: "envoy.transport_sockets.tls".to_owned(),
        config_type: Some(core_pb::transport_socket::ConfigType::TypedConfig(any(
            UPSTREAM_TLS_CONTEXT_TYPE,
            &minimal_tls("backend.example.com"),
        ))),
    });
    let out = decode_cluster(&c).unwrap();
    assert!(out.lrs_server);
    assert_eq!(out.max_requests, 77);
    assert_eq!(out.tls, Some(minimal_tls_decoded("backend.example.com")));
    // A DEFAULT threshold without max_requests keeps the default.
    c.circuit_breakers = Some(cluster_pb::CircuitBreakers {
        thresholds: vec![Thresholds::default()],
        ..Default::default()
    });
    assert_eq!(decode_cluster(&c).unwrap().max_requests, 1024);
}

#[test]
fn lrs_and_transport_socket_errors() {
    let mut c = eds_cluster("c");
    c.lrs_server = Some(ads());
    assert_eq!(err(&c), "lrs_server: ConfigSource must specify self");
    let ts = |config: Option<pbuf::Any>| core_pb::TransportSocket {
        name: "envoy.transport_sockets.tls".to_owned(),
        config_type: config.map(core_pb::transport_socket::ConfigType::TypedConfig),
    };
    let mut c = eds_cluster("c");
    c.transport_socket = Some(ts(None));
    assert_eq!(err(&c), "transport_socket.typed_config: field not present");
    c.transport_socket = Some(ts(Some(any(
        "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer",
        &pbuf::Empty {},
    ))));
    assert_eq!(
        err(&c),
        "transport_socket.typed_config.type_url: unsupported transport socket type \
         \"type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer\""
    );
    c.transport_socket = Some(ts(Some(pbuf::Any {
        type_url: format!("type.googleapis.com/{UPSTREAM_TLS_CONTEXT_TYPE}"),
        value: bytes::Bytes::from_static(&[0xff]),
    })));
    let msg = err(&c);
    assert!(
        msg.starts_with("transport_socket.typed_config.value: can't decode UpstreamTlsContext: "),
        "{msg}"
    );
}

#[test]
fn istio_like_cluster() {
    use cluster_pb::circuit_breakers::Thresholds;
    let name = "outbound|8080||svc-1.ns-1.svc.cluster.local";
    let mut c = eds_cluster(name);
    c.eds_cluster_config = Some(EdsClusterConfig {
        eds_config: Some(ads()),
        service_name: name.to_owned(),
    });
    c.connect_timeout = Some(pbuf::Duration {
        seconds: 10,
        nanos: 0,
    });
    c.metadata = Some(core_pb::Metadata {
        filter_metadata: [("istio".to_owned(), pbuf::Struct::default())]
            .into_iter()
            .collect(),
        ..Default::default()
    });
    c.common_lb_config = Some(Default::default());
    c.circuit_breakers = Some(cluster_pb::CircuitBreakers {
        thresholds: vec![Thresholds {
            max_connections: Some(pbuf::UInt32Value { value: u32::MAX }),
            max_requests: Some(pbuf::UInt32Value { value: 2048 }),
            track_remaining: true,
            ..Default::default()
        }],
        ..Default::default()
    });
    c.transport_socket = Some(core_pb::TransportSocket {
        name: "envoy.transport_sockets.tls".to_owned(),
        config_type: Some(core_pb::transport_socket::ConfigType::TypedConfig(any(
            UPSTREAM_TLS_CONTEXT_TYPE,
            &tls_pb::UpstreamTlsContext {
                common_tls_context: Some(tls_pb::CommonTlsContext {
                    alpn_protocols: vec!["istio".to_owned()],
                    ..minimal_tls("").common_tls_context.unwrap()
                }),
                sni: "outbound_.8080_._.svc-1".to_owned(),
                ..Default::default()
            },
        ))),
    });
    assert_eq!(
        decode_cluster(&c).unwrap(),
        ClusterResource {
            name: name.to_owned(),
            cluster_type: ClusterType::Eds {
                service_name: Some(name.to_owned())
            },
            lb_policy: LbPolicy::RoundRobin,
            lrs_server: false,
            max_requests: 2048,
            tls: Some(minimal_tls_decoded("outbound_.8080_._.svc-1")),
            outlier_detection: None,
            override_host_status: Default::default(),
        }
    );
}

#[test]
fn transport_socket_type_urls() {
    let tls = minimal_tls("s");
    let with = |type_url: String, value: bytes::Bytes| cluster_pb::Cluster {
        transport_socket: Some(core_pb::TransportSocket {
            name: "tls".to_owned(),
            config_type: Some(core_pb::transport_socket::ConfigType::TypedConfig(
                pbuf::Any { type_url, value },
            )),
        }),
        ..eds_cluster("c")
    };
    // Any prefix before the last '/' is accepted.
    let c = with(
        format!("example.com/x/{UPSTREAM_TLS_CONTEXT_TYPE}"),
        tls.encode_to_vec().into(),
    );
    assert_eq!(
        decode_cluster(&c).unwrap().tls,
        Some(minimal_tls_decoded("s"))
    );
    let c = with(
        UPSTREAM_TLS_CONTEXT_TYPE.to_owned(),
        tls.encode_to_vec().into(),
    );
    assert_eq!(
        err(&c),
        format!(
            "transport_socket.typed_config.type_url: invalid type URL \
             {UPSTREAM_TLS_CONTEXT_TYPE:?}"
        )
    );
    // A TypedStruct is not accepted, even around the right type.
    let wrapped = pbuf::Any {
        type_url: format!("type.googleapis.com/{UPSTREAM_TLS_CONTEXT_TYPE}"),
        value: Default::default(),
    };
    let c = with(
        "type.googleapis.com/xds.type.v3.TypedStruct".to_owned(),
        wrapped.encode_to_vec().into(),
    );
    assert_eq!(
        err(&c),
        format!(
            "transport_socket.typed_config.type_url: unsupported transport socket type \
             \"type.googleapis.com/{UPSTREAM_TLS_CONTEXT_TYPE}\""
        )
    );
}

fn with_outlier_detection(od: cluster_pb::OutlierDetection) -> cluster_pb::Cluster {
    cluster_pb::Cluster {
        outlier_detection: Some(od),
        ..eds_cluster("c")
    }
}

fn u32v(value: u32) -> Option<pbuf::UInt32Value> {
    Some(pbuf::UInt32Value { value })
}

#[test]
fn outlier_detection_defaults_are_grpcs() {
    let c = with_outlier_detection(cluster_pb::OutlierDetection::default());
    let od = decode_cluster(&c)
        .unwrap()
        .outlier_detection
        .expect("present");
    assert_eq!(
        od,
        OutlierDetection {
            interval: Duration::from_secs(10),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_percent: 10,
            success_rate_ejection: Some(SuccessRateEjection {
                stdev_factor: 1900,
                enforcement_percentage: 100,
                minimum_hosts: 5,
                request_volume: 100,
            }),
            // enforcing_failure_percentage defaults to 0: the algorithm is off.
            failure_percentage_ejection: None,
        }
    );
    assert_eq!(
        decode_cluster(&eds_cluster("c")).unwrap().outlier_detection,
        None
    );
}

#[test]
fn outlier_detection_fields_map_as_in_grpc() {
    let c = with_outlier_detection(cluster_pb::OutlierDetection {
        interval: Some(pbuf::Duration {
            seconds: 1,
            nanos: 500_000_000,
        }),
        base_ejection_time: Some(pbuf::Duration {
            seconds: 5,
            nanos: 0,
        }),
        max_ejection_time: Some(pbuf::Duration {
            seconds: 60,
            nanos: 0,
        }),
        max_ejection_percent: u32v(40),
        enforcing_success_rate: u32v(0),
        enforcing_failure_percentage: u32v(70),
        failure_percentage_threshold: u32v(90),
        failure_percentage_minimum_hosts: u32v(3),
        failure_percentage_request_volume: u32v(20),
        // gRPC ignores the consecutive-error algorithms.
        consecutive_5xx: u32v(7),
        ..Default::default()
    });
    let od = decode_cluster(&c).unwrap().outlier_detection.unwrap();
    assert_eq!(od.interval, Duration::from_millis(1500));
    assert_eq!(od.base_ejection_time, Duration::from_secs(5));
    assert_eq!(od.max_ejection_time, Duration::from_secs(60));
    assert_eq!(od.max_ejection_percent, 40);
    assert_eq!(
        od.success_rate_ejection, None,
        "enforcing_success_rate 0 turns it off"
    );
    assert_eq!(
        od.failure_percentage_ejection,
        Some(FailurePercentageEjection {
            threshold: 90,
            enforcement_percentage: 70,
            minimum_hosts: 3,
            request_volume: 20,
        })
    );
}

#[test]
fn outlier_detection_rejects_percentages_over_100_and_bad_durations() {
    let percent = |field: &str, od: cluster_pb::OutlierDetection| {
        assert_eq!(
            err(&with_outlier_detection(od)),
            format!("outlier_detection.{field}: value 101 must be in the range [0, 100]")
        );
    };
    percent(
        "max_ejection_percent",
        cluster_pb::OutlierDetection {
            max_ejection_percent: u32v(101),
            ..Default::default()
        },
    );
    percent(
        "enforcing_success_rate",
        cluster_pb::OutlierDetection {
            enforcing_success_rate: u32v(101),
            ..Default::default()
        },
    );
    percent(
        "failure_percentage_threshold",
        cluster_pb::OutlierDetection {
            failure_percentage_threshold: u32v(101),
            ..Default::default()
        },
    );
    percent(
        "enforcing_failure_percentage",
        cluster_pb::OutlierDetection {
            enforcing_failure_percentage: u32v(101),
            ..Default::default()
        },
    );
    let c = with_outlier_detection(cluster_pb::OutlierDetection {
        base_ejection_time: Some(pbuf::Duration {
            seconds: -1,
            nanos: 0,
        }),
        ..Default::default()
    });
    assert_eq!(
        err(&c),
        "outlier_detection.base_ejection_time.seconds: value -1 must be in the range \
         [0, 315576000000]"
    );
    let c = with_outlier_detection(cluster_pb::OutlierDetection {
        interval: Some(pbuf::Duration {
            seconds: 0,
            nanos: 1_000_000_000,
        }),
        ..Default::default()
    });
    assert_eq!(
        err(&c),
        "outlier_detection.interval.nanos: value 1000000000 must be in the range [0, 999999999]"
    );
}

/// A55: `common_lb_config.override_host_status` keeps UNKNOWN, HEALTHY and DRAINING,
/// ignores the rest; unset is UNKNOWN and HEALTHY, an empty set none.
#[test]
fn override_host_status_is_read_from_common_lb_config() {
    use crate::resource::cluster::OverrideHostStatus;
    use crate::resource::endpoint::HealthStatus as H;
    let with = |statuses: Option<Vec<core_pb::HealthStatus>>| {
        let mut c = eds_cluster("c");
        c.common_lb_config = Some(cluster_pb::cluster::CommonLbConfig {
            override_host_status: statuses.map(|s| core_pb::HealthStatusSet {
                statuses: s.into_iter().map(|s| s as i32).collect(),
            }),
            ..Default::default()
        });
        decode_cluster(&c).unwrap().override_host_status
    };
    assert_eq!(
        decode_cluster(&eds_cluster("c"))
            .unwrap()
            .override_host_status,
        OverrideHostStatus::DEFAULT
    );
    assert_eq!(with(None), OverrideHostStatus::DEFAULT);
    assert_eq!(with(Some(vec![])), OverrideHostStatus::NONE);
    let set = with(Some(vec![
        core_pb::HealthStatus::Draining,
        core_pb::HealthStatus::Degraded,
        core_pb::HealthStatus::Unhealthy,
    ]));
    assert!(set.contains(H::Draining));
    for status in [
        H::Unknown,
        H::Healthy,
        H::Degraded,
        H::Unhealthy,
        H::Timeout,
    ] {
        assert!(!set.contains(status), "{status:?}");
    }
}
