//! A large mesh shaped like an Istio sidecar's view, for benchmarks and load tests:
//! service `i` is `svc-{i}.ns-{i % 50}.svc.cluster.local:8080`, its cluster and its
//! endpoint set are both named [`cluster_name`]`(i)`.
//!
//! - [`istio_cluster`] is an outbound cluster as istiod sends it (about 700 bytes):
//!   EDS over ADS with a service name, an mTLS transport socket (istiod's proxyless
//!   form: certificate provider instances, a SPIFFE ID SAN), circuit breakers,
//!   outlier detection, TCP keepalive, a stat name and Istio metadata — the fixture of
//!   the core's `ads` benchmark. [`istio_cluster_lean`] is the same cluster without
//!   outlier detection, keepalive, stat name and the `config` metadata, the one the
//!   `compare/` harness serves ([`service_cluster`]).
//! - [`istio_endpoints`] spreads `count` endpoints over localities of at least 25
//!   (benchmark sizes); [`service_endpoints`] holds [`ENDPOINTS_PER_SET`] endpoints in
//!   two zones (the `compare/` harness).
//! - [`listener`] is the API listener [`LISTENER_NAME`] whose inline route table has one
//!   virtual host per service, so it references every cluster.
//!
//! All of it is valid for gRPC: the requirements are those of the
//! [builders](super) it is made of. The clusters' TLS names the certificate provider
//! instance [`CERTIFICATE_PROVIDER`], which a client's bootstrap must define
//! ([`certificate_providers_json`]).

use std::collections::HashMap;

use prost::Message;
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster;
use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint;
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_proto_core::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use xds_proto_core::pb::envoy::r#type::v3::Percent;
use xds_proto_core::pb::google::protobuf::{self as pbuf, Any};
use xds_proto_core::resource::type_url;

use super::{
    Host, Locality, UPSTREAM_TLS_CONTEXT_TYPE_URL, any, cluster_action, cluster_msg, forward,
    hcm_with, listener_of, load_assignment, prefix, route_config_of, vhost,
};

/// The name of the mesh's one listener.
pub const LISTENER_NAME: &str = "mesh.example.com:8080";

/// Endpoints in each [`service_endpoints`] set.
pub const ENDPOINTS_PER_SET: usize = 4;

/// The host name of service `i`.
pub fn host_name(i: usize) -> String {
    format!("svc-{i}.ns-{}.svc.cluster.local", i % 50)
}

/// The name of the cluster of service `i`, which is also the name of its endpoint set.
pub fn cluster_name(i: usize) -> String {
    format!("outbound|8080||{}", host_name(i))
}

fn string_value(s: &str) -> pbuf::Value {
    pbuf::Value {
        kind: Some(pbuf::value::Kind::StringValue(s.to_string())),
    }
}

/// The `istio` filter metadata of service `i`: its original port and its service.
fn istio_metadata(i: usize) -> HashMap<String, pbuf::Value> {
    let service = pbuf::Struct {
        fields: [
            ("host".to_string(), string_value(&host_name(i))),
            ("name".to_string(), string_value(&format!("svc-{i}"))),
            (
                "namespace".to_string(),
                string_value(&format!("ns-{}", i % 50)),
            ),
        ]
        .into_iter()
        .collect(),
    };
    [
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
    .collect()
}

/// The certificate provider instance the mesh's clusters name (istiod's proxyless
/// clusters name `default`): a client decoding them with its bootstrap needs it in
/// `certificate_providers` ([`certificate_providers_json`]).
pub const CERTIFICATE_PROVIDER: &str = "default";

/// The bootstrap's `certificate_providers` object (JSON text) that the mesh's clusters
/// need: [`CERTIFICATE_PROVIDER`] as a `file_watcher` with the paths of Istio's
/// proxyless agent.
pub fn certificate_providers_json() -> String {
    let dir = "/var/run/secrets/workload-spiffe-credentials";
    let entry = super::file_watcher_provider_json(
        Some(&format!("{dir}/certificates.pem")),
        Some(&format!("{dir}/private_key.pem")),
        Some(&format!("{dir}/ca_certificates.pem")),
        std::time::Duration::from_secs(900),
    );
    format!(r#"{{"{CERTIFICATE_PROVIDER}": {entry}}}"#)
}

/// The mTLS transport socket of service `i` as istiod sends it to proxyless gRPC: an
/// `UpstreamTlsContext` with Istio's ALPN, identity and roots from the provider instance
/// `default` through the deprecated `CertificateProviderInstance` fields gRPC still
/// reads, the service account's SPIFFE ID as the one SAN accepted, and the service's SNI.
#[allow(deprecated)] // the fields istiod sends
fn mtls_transport_socket(i: usize) -> core::TransportSocket {
    use tls::common_tls_context::{
        CertificateProviderInstance, CombinedCertificateValidationContext, ValidationContextType,
    };
    let instance = |certificate_name: &str| CertificateProviderInstance {
        instance_name: CERTIFICATE_PROVIDER.into(),
        certificate_name: certificate_name.into(),
    };
    let spiffe_id = format!("spiffe://cluster.local/ns/ns-{}/sa/default", i % 50);
    let validation = CombinedCertificateValidationContext {
        default_validation_context: Some(tls::CertificateValidationContext {
            match_subject_alt_names: vec![super::exact_matcher(&spiffe_id)],
            ..Default::default()
        }),
        validation_context_certificate_provider_instance: Some(instance("ROOTCA")),
        ..Default::default()
    };
    let upstream_tls = tls::UpstreamTlsContext {
        common_tls_context: Some(tls::CommonTlsContext {
            alpn_protocols: vec!["istio-peer-exchange".into(), "istio".into()],
            tls_certificate_certificate_provider_instance: Some(instance("default")),
            validation_context_type: Some(ValidationContextType::CombinedValidationContext(
                validation,
            )),
            ..Default::default()
        }),
        sni: format!("outbound_.8080_._.{}", host_name(i)),
        ..Default::default()
    };
    core::TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(Any {
            type_url: UPSTREAM_TLS_CONTEXT_TYPE_URL.into(),
            value: upstream_tls.encode_to_vec().into(),
        })),
    }
}

/// The outbound cluster of service `i` without the extras of [`istio_cluster`]: an EDS
/// cluster ([`cluster_msg`]) with its own name as service name, a 10 s connect timeout,
/// unlimited circuit breakers but 1024 requests, the mTLS transport socket, Istio
/// metadata and a zero panic threshold.
pub fn istio_cluster_lean(i: usize) -> cluster::Cluster {
    let name = cluster_name(i);
    let mut c = cluster::Cluster {
        connect_timeout: Some(pbuf::Duration {
            seconds: 10,
            nanos: 0,
        }),
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
        transport_socket: Some(mtls_transport_socket(i)),
        metadata: Some(core::Metadata {
            filter_metadata: [(
                "istio".to_string(),
                pbuf::Struct {
                    fields: istio_metadata(i),
                },
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        }),
        common_lb_config: Some(cluster::cluster::CommonLbConfig {
            healthy_panic_threshold: Some(Percent { value: 0.0 }),
            ..Default::default()
        }),
        ..cluster_msg(&name, 1024)
    };
    if let Some(eds) = &mut c.eds_cluster_config {
        eds.service_name = name;
    }
    c
}

/// [`istio_cluster_lean`] as an `Any`.
pub fn service_cluster(i: usize) -> Any {
    any(type_url::CLUSTER, &istio_cluster_lean(i))
}

/// The full outbound cluster of service `i` as istiod sends it (about 700 bytes):
/// [`istio_cluster_lean`] plus a stat name, outlier detection, TCP keepalive and the
/// destination rule in the metadata. `generation` is added to its max requests, so
/// that generations are distinct versions of one cluster.
pub fn istio_cluster(i: usize, generation: u32) -> cluster::Cluster {
    let mut c = istio_cluster_lean(i);
    let host = host_name(i);
    c.alt_stat_name = format!("{host}_8080");
    c.outlier_detection = Some(cluster::OutlierDetection {
        consecutive_5xx: Some(pbuf::UInt32Value { value: 5 }),
        interval: Some(pbuf::Duration {
            seconds: 10,
            nanos: 0,
        }),
        base_ejection_time: Some(pbuf::Duration {
            seconds: 30,
            nanos: 0,
        }),
        max_ejection_percent: Some(pbuf::UInt32Value { value: 10 }),
        ..Default::default()
    });
    c.upstream_connection_options = Some(cluster::UpstreamConnectionOptions {
        tcp_keepalive: Some(core::TcpKeepalive {
            keepalive_time: Some(pbuf::UInt32Value { value: 300 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    if let Some(threshold) = c
        .circuit_breakers
        .as_mut()
        .and_then(|cb| cb.thresholds.first_mut())
    {
        threshold.max_requests = Some(pbuf::UInt32Value {
            value: 1024 + generation,
        });
    }
    if let Some(istio) = c
        .metadata
        .as_mut()
        .and_then(|m| m.filter_metadata.get_mut("istio"))
    {
        istio.fields.insert(
            "config".to_string(),
            string_value(&format!(
                "/apis/networking.istio.io/v1alpha3/namespaces/ns-{}/destination-rule/svc-{i}",
                i % 50
            )),
        );
    }
    c
}

/// The address of the `j`-th endpoint of the mesh: `10.x.y.z` from the bits of `j`.
fn endpoint_address(j: usize) -> String {
    format!("10.{}.{}.{}", (j >> 16) & 255, (j >> 8) & 255, j & 255)
}

/// A healthy endpoint of weight 1 at the `j`-th address on `port`.
fn mesh_host(j: usize, port: u32) -> Host {
    Host {
        address: endpoint_address(j),
        port,
        health: core::HealthStatus::Healthy,
        weight: Some(1),
    }
}

/// An endpoint set `name` of `count` healthy endpoints (weight 1) on port
/// `8080 + generation`, in localities of `max(25, count / 40)` endpoints (weight 100,
/// zones a, b, c of us-central1 in turn, sub-zone `rack-{k}`): benchmark sizes.
pub fn istio_endpoints(
    name: &str,
    count: usize,
    generation: u32,
) -> endpoint::ClusterLoadAssignment {
    let per_locality = 25.max(count / 40);
    let hosts: Vec<Host> = (0..count)
        .map(|j| mesh_host(j, 8080 + generation))
        .collect();
    let localities: Vec<Locality> = hosts
        .chunks(per_locality)
        .enumerate()
        .map(|(k, chunk)| Locality {
            sub_zone: format!("rack-{k}"),
            weight: 100,
            ..Locality::new(
                "us-central1",
                &format!("us-central1-{}", (b'a' + (k % 3) as u8) as char),
                chunk.to_vec(),
            )
        })
        .collect();
    load_assignment(name, &localities)
}

/// The endpoint set of service `i`: [`ENDPOINTS_PER_SET`] healthy endpoints (weight 1)
/// on port 8080, split over zones a and b of us-central1 (weight 1 each); no two
/// services share an address.
pub fn service_endpoints(i: usize) -> Any {
    let zones = 2;
    let per_zone = ENDPOINTS_PER_SET / zones;
    let localities: Vec<Locality> = (0..zones)
        .map(|z| {
            let first = i * ENDPOINTS_PER_SET + z * per_zone;
            Locality::new(
                "us-central1",
                &format!("us-central1-{}", (b'a' + z as u8) as char),
                (first..first + per_zone)
                    .map(|j| mesh_host(j, 8080))
                    .collect(),
            )
        })
        .collect();
    any(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        &load_assignment(&cluster_name(i), &localities),
    )
}

/// The mesh's listener [`LISTENER_NAME`]: an API listener whose HttpConnectionManager
/// (stat prefix `outbound_8080`) carries the route table `8080` inline, one virtual
/// host per service `0..n` (its host, with and without `:8080`) routing every path to
/// the service's cluster with no timeout.
pub fn listener(n: usize) -> Any {
    let virtual_hosts = (0..n)
        .map(|i| {
            let host = host_name(i);
            let action = route::RouteAction {
                timeout: Some(pbuf::Duration {
                    seconds: 0,
                    nanos: 0,
                }),
                ..cluster_action(&cluster_name(i))
            };
            vhost(
                &format!("{host}:8080"),
                &[&host, &format!("{host}:8080")],
                vec![forward(prefix("/"), action)],
            )
        })
        .collect();
    let manager = hcm::HttpConnectionManager {
        stat_prefix: "outbound_8080".into(),
        ..hcm_with(
            hcm::http_connection_manager::RouteSpecifier::RouteConfig(route_config_of(
                "8080",
                virtual_hosts,
            )),
            None,
        )
    };
    listener_of(LISTENER_NAME, &manager)
}
