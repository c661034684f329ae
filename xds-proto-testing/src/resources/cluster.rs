//! Cluster builders: EDS clusters (with a circuit breaker that versions them, an
//! explicit service name, padding for message-size tests, a TLS context (A29), or
//! client-side weighted round robin), aggregate and LOGICAL_DNS clusters, and a cluster
//! that fails validation.

use xds_proto_core::pb::envoy::config::cluster::v3 as cluster;
use xds_proto_core::pb::envoy::config::core::v3::TypedExtensionConfig;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint;
use xds_proto_core::pb::envoy::extensions::clusters::aggregate::v3 as aggregate;
use xds_proto_core::pb::envoy::extensions::load_balancing_policies as lb;
use xds_proto_core::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use xds_proto_core::pb::google::protobuf::{Any, UInt32Value};
use xds_proto_core::resource::type_url;

use super::{
    AGGREGATE_CLUSTER_TYPE_URL, UPSTREAM_TLS_CONTEXT_TYPE_URL, ads_config_source, any,
    exact_matcher, provider_instance, self_config_source, socket_address, tls_transport_socket,
};

/// An EDS cluster fetching its endpoints over ADS, round robin, with a default-priority
/// circuit breaker of `max_requests` (different values give different versions of one
/// cluster, and the client reports the value). Its EDS service name is its own name
/// when the name is `xdstp:`, unset otherwise.
///
/// gRPC requires of an EDS cluster: `type` EDS, an `eds_cluster_config` whose
/// `eds_config` is `ads` or `self`, and a `service_name` when the cluster name starts
/// with `xdstp:`; an LB policy it supports (`ROUND_ROBIN`, `RING_HASH` with XX_HASH,
/// `LEAST_REQUEST`, or a `load_balancing_policy` list holding one); `lrs_server`, when
/// set, must be `self`; a `transport_socket`, when set, must hold an
/// `UpstreamTlsContext`.
pub fn cluster_msg(name: &str, max_requests: u32) -> cluster::Cluster {
    cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::cluster::EdsClusterConfig {
            eds_config: Some(ads_config_source()),
            service_name: if name.starts_with("xdstp:") {
                name.to_string()
            } else {
                String::new()
            },
        }),
        lb_policy: cluster::cluster::LbPolicy::RoundRobin as i32,
        circuit_breakers: Some(cluster::CircuitBreakers {
            thresholds: vec![cluster::circuit_breakers::Thresholds {
                max_requests: Some(UInt32Value {
                    value: max_requests,
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `cluster` reporting its load to the management server that sends it: `lrs_server`
/// set to `self` (the only LRS server gRPC accepts, A27).
pub fn reporting_load(mut cluster: cluster::Cluster) -> cluster::Cluster {
    cluster.lrs_server = Some(self_config_source());
    cluster
}

/// An EDS cluster ([`cluster_msg`], 1024 max requests, its EDS service name
/// `service_name` when given) that reports its load to its server (LRS).
pub fn load_reporting_cluster(name: &str, service_name: Option<&str>) -> Any {
    let mut c = cluster_msg(name, 1024);
    if let (Some(eds), Some(service)) = (&mut c.eds_cluster_config, service_name) {
        eds.service_name = service.to_string();
    }
    any(type_url::CLUSTER, &reporting_load(c))
}

/// [`cluster_msg`] with the given max requests, as an `Any`.
pub fn cluster_with(name: &str, max_requests: u32) -> Any {
    any(type_url::CLUSTER, &cluster_msg(name, max_requests))
}

/// [`cluster_msg`] with 1024 max requests, as an `Any`.
pub fn cluster(name: &str) -> Any {
    cluster_with(name, 1024)
}

/// An EDS cluster ([`cluster_msg`], 1024 max requests) with the EDS service name
/// `service_name` when given, and none otherwise (which gRPC rejects for an `xdstp:`
/// cluster name).
pub fn eds_cluster(name: &str, service_name: Option<&str>) -> Any {
    let mut c = cluster_msg(name, 1024);
    if let Some(eds) = &mut c.eds_cluster_config {
        eds.service_name = service_name.unwrap_or_default().to_string();
    }
    any(type_url::CLUSTER, &c)
}

/// [`cluster()`] padded to about `pad_bytes` more bytes with a long `alt_stat_name`,
/// which clients ignore, for message-size tests.
pub fn padded_cluster(name: &str, pad_bytes: usize) -> Any {
    let mut c = cluster_msg(name, 1024);
    c.alt_stat_name = "x".repeat(pad_bytes);
    any(type_url::CLUSTER, &c)
}

/// A cluster that fails validation: [`cluster_msg`] with discovery type STATIC, which
/// gRPC does not accept in CDS.
pub fn invalid_cluster(name: &str) -> Any {
    let mut c = cluster_msg(name, 1024);
    c.cluster_discovery_type = Some(cluster::cluster::ClusterDiscoveryType::Type(
        cluster::cluster::DiscoveryType::Static as i32,
    ));
    any(type_url::CLUSTER, &c)
}

/// The type URL of client-side weighted round robin's config (A58).
pub const CLIENT_SIDE_WRR_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin";
/// The type URL of `wrr_locality`'s config (A52).
pub const WRR_LOCALITY_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality";
/// The type URL of `round_robin`'s config (A52).
pub const ROUND_ROBIN_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin";

/// A `load_balancing_policy` list entry.
fn policy(
    name: &str,
    type_url: &str,
    config: &impl prost::Message,
) -> cluster::load_balancing_policy::Policy {
    cluster::load_balancing_policy::Policy {
        typed_extension_config: Some(TypedExtensionConfig {
            name: name.to_string(),
            typed_config: Some(any(type_url, config)),
        }),
    }
}

/// [`cluster_msg`] (1024 max requests) balanced by client-side weighted round robin
/// (A58) with `config`, as A58's example puts it: under `wrr_locality` (A52), with
/// `round_robin` listed after it for clients without weighted round robin.
///
/// gRPC takes the first policy of a list it supports; `wrr_locality` needs an
/// `endpoint_picking_policy`; weighted round robin's `error_utilization_penalty` must
/// not be negative, and its durations must be valid (`weight_update_period` below
/// 100 ms counts as 100 ms). Its weights come from the endpoints' ORCA reports (A51),
/// per call unless `enable_oob_load_report` is set.
pub fn wrr_cluster_msg(
    name: &str,
    config: lb::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin,
) -> cluster::Cluster {
    let endpoint_picking = cluster::LoadBalancingPolicy {
        policies: vec![
            policy("weighted_round_robin", CLIENT_SIDE_WRR_TYPE_URL, &config),
            policy(
                "round_robin",
                ROUND_ROBIN_TYPE_URL,
                &lb::round_robin::v3::RoundRobin::default(),
            ),
        ],
    };
    let locality = lb::wrr_locality::v3::WrrLocality {
        endpoint_picking_policy: Some(endpoint_picking),
    };
    cluster::Cluster {
        load_balancing_policy: Some(cluster::LoadBalancingPolicy {
            policies: vec![policy("wrr_locality", WRR_LOCALITY_TYPE_URL, &locality)],
        }),
        ..cluster_msg(name, 1024)
    }
}

/// [`wrr_cluster_msg`] as an `Any`.
pub fn wrr_cluster(
    name: &str,
    config: lb::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin,
) -> Any {
    any(type_url::CLUSTER, &wrr_cluster_msg(name, config))
}

/// An aggregate cluster (A37) over `children`, in priority order. gRPC requires a
/// `cluster_type` whose `typed_config` is an [`AGGREGATE_CLUSTER_TYPE_URL`] config with
/// a non-empty cluster list; the depth of nested aggregates is limited.
pub fn aggregate_cluster(name: &str, children: &[&str]) -> Any {
    let config = aggregate::ClusterConfig {
        clusters: children.iter().map(|c| c.to_string()).collect(),
    };
    let c = cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::ClusterType(
            cluster::cluster::CustomClusterType {
                name: "envoy.clusters.aggregate".to_string(),
                typed_config: Some(any(AGGREGATE_CLUSTER_TYPE_URL, &config)),
            },
        )),
        ..Default::default()
    };
    any(type_url::CLUSTER, &c)
}

/// A LOGICAL_DNS cluster for `host:port`. gRPC requires a `load_assignment` with
/// exactly one locality holding exactly one endpoint, whose socket address has a
/// non-empty host, no `resolver_name` and a `port_value` from 1 to 65535.
pub fn logical_dns_cluster(name: &str, host: &str, port: u32) -> Any {
    let c = cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::LogicalDns as i32,
        )),
        load_assignment: Some(endpoint::ClusterLoadAssignment {
            cluster_name: name.to_string(),
            endpoints: vec![endpoint::LocalityLbEndpoints {
                lb_endpoints: vec![endpoint::LbEndpoint {
                    host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                        endpoint::Endpoint {
                            address: Some(socket_address(host, port)),
                            ..Default::default()
                        },
                    )),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    any(type_url::CLUSTER, &c)
}

/// An `UpstreamTlsContext` as gRPC accepts it (A29): the roots from the certificate
/// provider instance `roots_instance`, the client certificate from `identity_instance`
/// when given (mTLS; plain TLS otherwise), and one `exact` SAN matcher per entry of
/// `exact_sans` (none: any SAN is accepted).
///
/// gRPC requires of an `UpstreamTlsContext`: a `common_tls_context` whose validation
/// context (`validation_context`, or `combined_validation_context`'s default) names a
/// `ca_certificate_provider_instance` (or sets `system_root_certs`); every instance named
/// must be in the client's bootstrap `certificate_providers`; identity only through
/// `tls_certificate_provider_instance`; none of `tls_params`, `custom_handshaker`, SDS,
/// `verify_certificate_spki`/`_hash`, `crl`, `custom_validator_config`, a true
/// `require_signed_certificate_timestamp`; an `sni` of at most 255 bytes.
pub fn upstream_tls_context(
    roots_instance: &str,
    identity_instance: Option<&str>,
    exact_sans: &[&str],
) -> tls::UpstreamTlsContext {
    #[allow(deprecated)] // match_subject_alt_names: the field gRPC reads
    let validation = tls::CertificateValidationContext {
        ca_certificate_provider_instance: Some(provider_instance(roots_instance)),
        match_subject_alt_names: exact_sans.iter().map(|s| exact_matcher(s)).collect(),
        ..Default::default()
    };
    tls::UpstreamTlsContext {
        common_tls_context: Some(tls::CommonTlsContext {
            tls_certificate_provider_instance: identity_instance.map(provider_instance),
            validation_context_type: Some(
                tls::common_tls_context::ValidationContextType::ValidationContext(validation),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An EDS cluster ([`cluster_msg`], 1024 max requests) whose `transport_socket` carries
/// `context` (see [`upstream_tls_context`] for what gRPC requires of it).
pub fn tls_cluster_msg(name: &str, context: &tls::UpstreamTlsContext) -> cluster::Cluster {
    cluster::Cluster {
        transport_socket: Some(tls_transport_socket(UPSTREAM_TLS_CONTEXT_TYPE_URL, context)),
        ..cluster_msg(name, 1024)
    }
}

/// [`tls_cluster_msg`] as an `Any`.
pub fn tls_cluster(name: &str, context: &tls::UpstreamTlsContext) -> Any {
    any(type_url::CLUSTER, &tls_cluster_msg(name, context))
}

/// In one line, an EDS cluster with mTLS: identity and roots both from the certificate
/// provider instance `instance` (a `file_watcher` with a certificate, a key and a CA
/// file), and the server's SANs checked against `exact_sans`.
pub fn mtls_cluster(name: &str, instance: &str, exact_sans: &[&str]) -> Any {
    tls_cluster(
        name,
        &upstream_tls_context(instance, Some(instance), exact_sans),
    )
}
