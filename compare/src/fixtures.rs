//! The workload the loopback server serves: one client listener, `n` Istio-like
//! clusters and `n` endpoint sets, built from the core's prost types.
//!
//! - The listener (`LISTENER_NAME`) is an API listener whose HttpConnectionManager
//!   carries its route configuration inline: one virtual host per service (the shape
//!   of an Istio sidecar's port-8080 route table), each routing every path to that
//!   service's cluster, so the listener references every cluster.
//! - Each cluster is shaped like an Istio outbound cluster (about 700 bytes): EDS over
//!   ADS, an mTLS transport socket, circuit breakers, Istio metadata. It is the
//!   fixture of the core's `ads` benchmark (W1).
//! - Each `ClusterLoadAssignment` holds `ENDPOINTS_PER_SET` healthy endpoints in two
//!   zones.

use prost::Message;
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster;
use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint;
use xds_proto_core::pb::envoy::config::listener::v3 as listener;
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::extensions::filters::http::router::v3::Router;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_proto_core::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use xds_proto_core::pb::google::protobuf::{self as pbuf, Any};
use xds_proto_core::resource::type_url;
use xds_test_server::resources::{HCM_TYPE_URL, ROUTER_TYPE_URL, any};

/// The name of the one listener.
pub const LISTENER_NAME: &str = "mesh.example.com:8080";

/// Endpoints in each `ClusterLoadAssignment`.
pub const ENDPOINTS_PER_SET: usize = 4;

/// The name of cluster `i`, which is also the name of its endpoint set.
pub fn cluster_name(i: usize) -> String {
    format!("outbound|8080||{}", host_name(i))
}

fn host_name(i: usize) -> String {
    format!("svc-{i}.ns-{}.svc.cluster.local", i % 50)
}

fn ads() -> core::ConfigSource {
    core::ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
            core::AggregatedConfigSource {},
        )),
        resource_api_version: core::ApiVersion::V3 as i32,
        ..Default::default()
    }
}

fn string_value(s: &str) -> pbuf::Value {
    pbuf::Value {
        kind: Some(pbuf::value::Kind::StringValue(s.to_string())),
    }
}

/// The listener: an API listener with an inline route table of `n` virtual hosts,
/// host `i` routing to cluster `i`.
pub fn listener(n: usize) -> Any {
    let virtual_hosts = (0..n)
        .map(|i| {
            let host = host_name(i);
            route::VirtualHost {
                name: format!("{host}:8080"),
                domains: vec![host.clone(), format!("{host}:8080")],
                routes: vec![route::Route {
                    r#match: Some(route::RouteMatch {
                        path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
                        ..Default::default()
                    }),
                    action: Some(route::route::Action::Route(route::RouteAction {
                        cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(
                            cluster_name(i),
                        )),
                        timeout: Some(pbuf::Duration {
                            seconds: 0,
                            nanos: 0,
                        }),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    let manager = hcm::HttpConnectionManager {
        stat_prefix: "outbound_8080".into(),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::RouteConfig(
            route::RouteConfiguration {
                name: "8080".into(),
                virtual_hosts,
                ..Default::default()
            },
        )),
        http_filters: vec![hcm::HttpFilter {
            name: "envoy.filters.http.router".into(),
            config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(
                ROUTER_TYPE_URL,
                &Router::default(),
            ))),
            ..Default::default()
        }],
        ..Default::default()
    };
    any(
        type_url::LISTENER,
        &listener::Listener {
            name: LISTENER_NAME.into(),
            api_listener: Some(listener::ApiListener {
                api_listener: Some(any(HCM_TYPE_URL, &manager)),
            }),
            ..Default::default()
        },
    )
}

/// An Istio-like outbound cluster: EDS over ADS, mTLS transport socket, circuit
/// breakers and Istio metadata (the core's `ads` benchmark fixture).
pub fn cluster(i: usize) -> Any {
    let name = cluster_name(i);
    let host = host_name(i);
    let upstream_tls = tls::UpstreamTlsContext {
        common_tls_context: Some(tls::CommonTlsContext {
            alpn_protocols: vec!["istio-peer-exchange".into(), "istio".into()],
            tls_certificate_sds_secret_configs: vec![tls::SdsSecretConfig {
                name: "default".into(),
                sds_config: Some(ads()),
            }],
            ..Default::default()
        }),
        sni: format!("outbound_.8080_._.{host}"),
        ..Default::default()
    };
    let service = pbuf::Struct {
        fields: [
            ("host".to_string(), string_value(&host)),
            ("name".to_string(), string_value(&format!("svc-{i}"))),
            (
                "namespace".to_string(),
                string_value(&format!("ns-{}", i % 50)),
            ),
        ]
        .into_iter()
        .collect(),
    };
    let metadata_fields = [
        (
            "default_original_port".to_string(),
            pbuf::Value {
                kind: Some(pbuf::value::Kind::NumberValue(8080.0)),
            },
        ),
        (
            "services".to_string(),
            pbuf::Value {
                kind: Some(pbuf::value::Kind::ListValue(pbuf::ListValue {
                    values: vec![pbuf::Value {
                        kind: Some(pbuf::value::Kind::StructValue(service)),
                    }],
                })),
            },
        ),
    ]
    .into_iter()
    .collect();
    let c = cluster::Cluster {
        name: name.clone(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::cluster::EdsClusterConfig {
            eds_config: Some(ads()),
            service_name: name,
        }),
        connect_timeout: Some(pbuf::Duration {
            seconds: 10,
            nanos: 0,
        }),
        lb_policy: cluster::cluster::LbPolicy::RoundRobin as i32,
        circuit_breakers: Some(cluster::CircuitBreakers {
            thresholds: vec![cluster::circuit_breakers::Thresholds {
                max_connections: Some(pbuf::UInt32Value { value: u32::MAX }),
                max_pending_requests: Some(pbuf::UInt32Value { value: u32::MAX }),
                max_requests: Some(pbuf::UInt32Value { value: 1024 }),
                max_retries: Some(pbuf::UInt32Value { value: u32::MAX }),
                track_remaining: true,
                ..Default::default()
            }],
            ..Default::default()
        }),
        transport_socket: Some(core::TransportSocket {
            name: "envoy.transport_sockets.tls".into(),
            config_type: Some(core::transport_socket::ConfigType::TypedConfig(Any {
                type_url:
                    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
                        .into(),
                value: upstream_tls.encode_to_vec().into(),
            })),
        }),
        metadata: Some(core::Metadata {
            filter_metadata: [(
                "istio".to_string(),
                pbuf::Struct {
                    fields: metadata_fields,
                },
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        }),
        common_lb_config: Some(cluster::cluster::CommonLbConfig {
            healthy_panic_threshold: Some(xds_proto_core::pb::envoy::r#type::v3::Percent {
                value: 0.0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    any(type_url::CLUSTER, &c)
}

/// The endpoint set of cluster `i`: `ENDPOINTS_PER_SET` healthy endpoints (weight 1)
/// split over two zones of one region.
pub fn endpoints(i: usize) -> Any {
    let zones = 2;
    let per_zone = ENDPOINTS_PER_SET / zones;
    let cla = endpoint::ClusterLoadAssignment {
        cluster_name: cluster_name(i),
        endpoints: (0..zones)
            .map(|z| endpoint::LocalityLbEndpoints {
                locality: Some(core::Locality {
                    region: "us-central1".into(),
                    zone: format!("us-central1-{}", (b'a' + z as u8) as char),
                    sub_zone: String::new(),
                }),
                load_balancing_weight: Some(pbuf::UInt32Value { value: 1 }),
                lb_endpoints: (0..per_zone)
                    .map(|k| {
                        let j = i * ENDPOINTS_PER_SET + z * per_zone + k;
                        endpoint::LbEndpoint {
                            host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                                endpoint::Endpoint {
                                    address: Some(core::Address {
                                        address: Some(core::address::Address::SocketAddress(
                                            core::SocketAddress {
                                                address: format!(
                                                    "10.{}.{}.{}",
                                                    (j >> 16) & 255,
                                                    (j >> 8) & 255,
                                                    j & 255
                                                ),
                                                port_specifier: Some(
                                                    core::socket_address::PortSpecifier::PortValue(
                                                        8080,
                                                    ),
                                                ),
                                                ..Default::default()
                                            },
                                        )),
                                    }),
                                    ..Default::default()
                                },
                            )),
                            health_status: core::HealthStatus::Healthy as i32,
                            load_balancing_weight: Some(pbuf::UInt32Value { value: 1 }),
                            ..Default::default()
                        }
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    any(type_url::CLUSTER_LOAD_ASSIGNMENT, &cla)
}
