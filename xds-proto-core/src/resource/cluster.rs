//! CDS: decoding and validating `envoy.config.cluster.v3.Cluster` into a compact
//! [`ClusterResource`], following gRPC's rules (gRFCs A27, A28, A37, A42, A47, A48, A52,
//! A58; A29 only as far as noting an upstream TLS context).
//!
//! The module owns the cluster types: the discovery type ([`ClusterType`]: EDS,
//! LOGICAL_DNS or aggregate), the load-balancing policy ([`LbPolicy`], from the legacy
//! `lb_policy` enum or the newer `load_balancing_policy` list), LRS, the circuit breaker
//! request limit and the presence of an upstream TLS context.

use std::time::Duration;

use prost::Message;

use super::DecodeError;
use super::listener::check_ads_or_self;
use super::validate::{
    FieldError, PortRange, decode_message, decode_resource, optional_duration, socket_port,
    typed_config,
};
use crate::pb::envoy::config::cluster::v3 as cluster_pb;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::endpoint::v3 as endpoint_pb;
use crate::pb::envoy::extensions::clusters::aggregate::v3 as aggregate_pb;
use crate::pb::envoy::extensions::load_balancing_policies as lb_pb;
#[cfg(test)]
use crate::pb::envoy::extensions::transport_sockets::tls::v3 as tls_pb;

/// Type name of the aggregate cluster config (gRFC A37).
pub const AGGREGATE_CLUSTER_TYPE: &str = "envoy.extensions.clusters.aggregate.v3.ClusterConfig";

/// Type name of `UpstreamTlsContext`, the only transport socket config accepted.
pub const UPSTREAM_TLS_CONTEXT_TYPE: &str =
    "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";

/// `max_requests` when no DEFAULT-priority circuit breaker threshold sets it.
pub const DEFAULT_MAX_REQUESTS: u32 = 1024;

/// The largest ring size gRPC accepts (A42).
pub const MAX_RING_SIZE: u64 = 8 * 1024 * 1024;

/// The default minimum ring size (A42).
pub const DEFAULT_MIN_RING_SIZE: u64 = 1024;

/// The default `choice_count` for least-request (A48).
pub const DEFAULT_CHOICE_COUNT: u32 = 2;

/// How deeply `load_balancing_policy` may nest (through `wrr_locality`).
pub const MAX_LB_POLICY_DEPTH: usize = 16;

const ROUND_ROBIN_TYPE: &str = "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin";
const RING_HASH_TYPE: &str = "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash";
const LEAST_REQUEST_TYPE: &str =
    "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest";
const WRR_LOCALITY_TYPE: &str =
    "envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality";
const CSWRR_TYPE: &str = "envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin";
const PICK_FIRST_TYPE: &str = "envoy.extensions.load_balancing_policies.pick_first.v3.PickFirst";

/// A validated `Cluster`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterResource {
    /// The resource name.
    pub name: String,
    /// How the cluster's endpoints are found.
    pub cluster_type: ClusterType,
    /// The load-balancing policy.
    pub lb_policy: LbPolicy,
    /// Whether load is reported to the management server itself (`lrs_server` is `self`).
    pub lrs_server: bool,
    /// The DEFAULT-priority circuit breaker's `max_requests` (default 1024).
    pub max_requests: u32,
    /// The upstream TLS context, when the cluster's transport socket configures one
    /// (security itself, A29, is not interpreted yet).
    pub tls: Option<UpstreamTls>,
}

/// The discovery type of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterType {
    /// `EDS` with an `ads` or `self` config source.
    Eds {
        /// `eds_cluster_config.service_name`, when set: the EDS resource name to watch
        /// instead of the cluster name.
        service_name: Option<String>,
    },
    /// `LOGICAL_DNS`: one hostname resolved by DNS.
    LogicalDns {
        /// The hostname.
        host: String,
        /// The port (non-zero).
        port: u16,
    },
    /// An aggregate cluster (A37): the underlying clusters in priority order.
    Aggregate {
        /// The cluster names, in priority order; never empty.
        clusters: Vec<String>,
    },
}

/// A cluster's load-balancing policy.
#[derive(Clone, Debug, PartialEq)]
pub enum LbPolicy {
    /// `round_robin` (the default).
    RoundRobin,
    /// `ring_hash` (A42); `min_ring_size <= max_ring_size <= 8M`.
    RingHash {
        /// Minimum ring size (default 1024).
        min_ring_size: u64,
        /// Maximum ring size (default 8M).
        max_ring_size: u64,
    },
    /// `least_request` (A48).
    LeastRequest {
        /// Endpoints sampled per pick (at least 2; default 2).
        choice_count: u32,
    },
    /// `wrr_locality` (A52): weighted locality picking with this endpoint policy.
    WrrLocality(Box<LbPolicy>),
    /// `client_side_weighted_round_robin` (A58).
    WeightedRoundRobin(WeightedRoundRobinConfig),
    /// `pick_first`.
    PickFirst {
        /// Whether to shuffle the address list.
        shuffle_address_list: bool,
    },
}

/// `ClientSideWeightedRoundRobin` settings (A58), with defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightedRoundRobinConfig {
    /// `enable_oob_load_report` (default false).
    pub enable_oob_load_report: bool,
    /// `oob_reporting_period` (default 10 s).
    pub oob_reporting_period: Duration,
    /// `blackout_period` (default 10 s).
    pub blackout_period: Duration,
    /// `weight_expiration_period` (default 3 min).
    pub weight_expiration_period: Duration,
    /// `weight_update_period` (default 1 s).
    pub weight_update_period: Duration,
    /// `error_utilization_penalty` (default 1.0; finite and non-negative).
    pub error_utilization_penalty: f32,
}

impl Default for WeightedRoundRobinConfig {
    fn default() -> WeightedRoundRobinConfig {
        WeightedRoundRobinConfig {
            enable_oob_load_report: false,
            oob_reporting_period: Duration::from_secs(10),
            blackout_period: Duration::from_secs(10),
            weight_expiration_period: Duration::from_secs(180),
            weight_update_period: Duration::from_secs(1),
            error_utilization_penalty: 1.0,
        }
    }
}

/// What the cluster's `UpstreamTlsContext` says (only the parts kept so far).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamTls {
    /// `sni` (may be empty).
    pub sni: String,
}

/// Decodes and validates one serialized `Cluster`.
///
/// Only the fields the validation reads are decoded (see `lite`); everything else
/// (metadata, timeouts, health checks, the TLS common context, ...) is skipped on the
/// wire.
pub fn decode(bytes: &[u8]) -> Result<(String, ClusterResource), DecodeError> {
    let mut cluster: lite::Cluster = decode_resource(bytes, "Cluster")?;
    let name = std::mem::take(&mut cluster.name);
    let value = parse_cluster(&name, cluster).map_err(|e| e.into_decode_error(&name))?;
    Ok((name, value))
}

fn parse_cluster(name: &str, mut cluster: lite::Cluster) -> Result<ClusterResource, FieldError> {
    let cluster_type = parse_cluster_type(name, &mut cluster)?;
    let lb_policy = match &cluster.load_balancing_policy {
        Some(policy) => {
            parse_lb_policy_list(policy, 0).map_err(|e| e.at("load_balancing_policy"))?
        }
        None => parse_legacy_lb_policy(&cluster)?,
    };
    let lrs_server = match &cluster.lrs_server {
        None => false,
        Some(source) => match source.config_source_specifier {
            Some(core_pb::config_source::ConfigSourceSpecifier::Self_(_)) => true,
            _ => {
                return Err(FieldError::new(
                    "lrs_server",
                    "ConfigSource must specify self",
                ));
            }
        },
    };
    let max_requests = cluster
        .circuit_breakers
        .as_ref()
        .and_then(|cb| cb.default_threshold.as_ref())
        .and_then(|t| t.max_requests.as_ref())
        .map_or(DEFAULT_MAX_REQUESTS, |v| v.value);
    let tls = cluster
        .transport_socket
        .as_ref()
        .map(parse_transport_socket)
        .transpose()
        .map_err(|e| e.at("transport_socket"))?;
    Ok(ClusterResource {
        name: name.to_owned(),
        cluster_type,
        lb_policy,
        lrs_server,
        max_requests,
        tls,
    })
}

fn parse_cluster_type(name: &str, cluster: &mut lite::Cluster) -> Result<ClusterType, FieldError> {
    use cluster_pb::cluster::DiscoveryType;
    use lite::cluster::ClusterDiscoveryType;
    match &cluster.cluster_discovery_type {
        Some(ClusterDiscoveryType::ClusterType(custom)) => {
            parse_aggregate(custom).map_err(|e| e.at("cluster_type"))
        }
        Some(ClusterDiscoveryType::Type(t)) => match DiscoveryType::try_from(*t) {
            Ok(DiscoveryType::Eds) => parse_eds(name, cluster.eds_cluster_config.as_mut()),
            Ok(DiscoveryType::LogicalDns) => parse_logical_dns(cluster.load_assignment.as_ref())
                .map_err(|e| e.at("load_assignment")),
            Ok(other) => Err(FieldError::new(
                "type",
                format!("unsupported discovery type {}", other.as_str_name()),
            )),
            Err(_) => Err(FieldError::new(
                "type",
                format!("unsupported discovery type {t}"),
            )),
        },
        // An unset `type` is STATIC, its proto default.
        None => Err(FieldError::new("type", "unsupported discovery type STATIC")),
    }
}

fn parse_eds(
    name: &str,
    eds: Option<&mut lite::EdsClusterConfig>,
) -> Result<ClusterType, FieldError> {
    let Some(eds) = eds else {
        return Err(FieldError::new("eds_cluster_config", "field not present"));
    };
    check_ads_or_self(eds.eds_config.as_ref())
        .map_err(|e| e.at("eds_cluster_config.eds_config"))?;
    if eds.service_name.is_empty() && name.starts_with("xdstp:") {
        return Err(FieldError::new(
            "eds_cluster_config.service_name",
            "must be set for a cluster with an xdstp: name",
        ));
    }
    Ok(ClusterType::Eds {
        service_name: (!eds.service_name.is_empty()).then(|| std::mem::take(&mut eds.service_name)),
    })
}

/// LOGICAL_DNS: exactly one locality with exactly one endpoint whose address is a
/// `socket_address` with a host and a `port_value`. Paths are relative to
/// `load_assignment`.
fn parse_logical_dns(
    load_assignment: Option<&endpoint_pb::ClusterLoadAssignment>,
) -> Result<ClusterType, FieldError> {
    use core_pb::address::Address;
    use endpoint_pb::lb_endpoint::HostIdentifier;
    let Some(load_assignment) = load_assignment else {
        return Err(FieldError::new(
            "",
            "field not present for a LOGICAL_DNS cluster",
        ));
    };
    let [locality] = load_assignment.endpoints.as_slice() else {
        return Err(FieldError::new(
            "endpoints",
            format!(
                "must contain exactly one locality for a LOGICAL_DNS cluster, found {}",
                load_assignment.endpoints.len()
            ),
        ));
    };
    let [lb_endpoint] = locality.lb_endpoints.as_slice() else {
        return Err(FieldError::new(
            "endpoints[0].lb_endpoints",
            format!(
                "must contain exactly one endpoint for a LOGICAL_DNS cluster, found {}",
                locality.lb_endpoints.len()
            ),
        ));
    };
    let p = "endpoints[0].lb_endpoints[0].endpoint";
    let Some(HostIdentifier::Endpoint(endpoint)) = &lb_endpoint.host_identifier else {
        return Err(FieldError::new(p, "field not present"));
    };
    let Some(address) = &endpoint.address else {
        return Err(FieldError::new(format!("{p}.address"), "field not present"));
    };
    let Some(Address::SocketAddress(sa)) = &address.address else {
        return Err(FieldError::new(
            format!("{p}.address.socket_address"),
            "field not present",
        ));
    };
    let sa_path = format!("{p}.address.socket_address");
    if !sa.resolver_name.is_empty() {
        return Err(FieldError::new(
            format!("{sa_path}.resolver_name"),
            "must not be set for a LOGICAL_DNS cluster",
        ));
    }
    if sa.address.is_empty() {
        return Err(FieldError::new(
            format!("{sa_path}.address"),
            "must be non-empty",
        ));
    }
    let port = socket_port(sa.port_specifier.as_ref().into(), PortRange::NonZero)
        .map_err(|e| e.at(&sa_path))?;
    Ok(ClusterType::LogicalDns {
        host: sa.address.clone(),
        port,
    })
}

/// An aggregate cluster (A37). Paths are relative to `cluster_type`.
fn parse_aggregate(
    custom: &cluster_pb::cluster::CustomClusterType,
) -> Result<ClusterType, FieldError> {
    let Some(any) = &custom.typed_config else {
        return Err(FieldError::new("typed_config", "field not present"));
    };
    let config = typed_config(any).map_err(|e| e.at("typed_config"))?;
    if config.type_name() != AGGREGATE_CLUSTER_TYPE || config.typed_struct {
        return Err(FieldError::new(
            "typed_config.type_url",
            format!("unsupported custom cluster type {:?}", config.type_url),
        ));
    }
    let aggregate: aggregate_pb::ClusterConfig =
        decode_message(&config.value, "typed_config.value", "ClusterConfig")?;
    if aggregate.clusters.is_empty() {
        return Err(FieldError::new(
            "typed_config.value.clusters",
            "must be non-empty",
        ));
    }
    Ok(ClusterType::Aggregate {
        clusters: aggregate.clusters,
    })
}

/// The legacy `lb_policy` enum with its `lb_config`.
fn parse_legacy_lb_policy(cluster: &lite::Cluster) -> Result<LbPolicy, FieldError> {
    use cluster_pb::cluster::{LbPolicy as Legacy, ring_hash_lb_config::HashFunction};
    use lite::cluster::LbConfig;
    match Legacy::try_from(cluster.lb_policy) {
        Ok(Legacy::RoundRobin) => Ok(LbPolicy::RoundRobin),
        Ok(Legacy::RingHash) => {
            let Some(LbConfig::RingHashLbConfig(config)) = &cluster.lb_config else {
                return Ok(LbPolicy::RingHash {
                    min_ring_size: DEFAULT_MIN_RING_SIZE,
                    max_ring_size: MAX_RING_SIZE,
                });
            };
            if config.hash_function != HashFunction::XxHash as i32 {
                return Err(FieldError::new(
                    "ring_hash_lb_config.hash_function",
                    "unsupported hash function (must be XX_HASH)",
                ));
            }
            ring_hash_sizes(config.minimum_ring_size, config.maximum_ring_size)
                .map_err(|e| e.at("ring_hash_lb_config"))
        }
        Ok(Legacy::LeastRequest) => {
            let choice_count = match &cluster.lb_config {
                Some(LbConfig::LeastRequestLbConfig(config)) => config.choice_count,
                _ => None,
            };
            least_request(choice_count).map_err(|e| e.at("least_request_lb_config"))
        }
        Ok(other) => Err(FieldError::new(
            "lb_policy",
            format!("unsupported LB policy {}", other.as_str_name()),
        )),
        Err(_) => Err(FieldError::new(
            "lb_policy",
            format!("unsupported LB policy {}", cluster.lb_policy),
        )),
    }
}

fn ring_hash_sizes(
    min: Option<crate::pb::google::protobuf::UInt64Value>,
    max: Option<crate::pb::google::protobuf::UInt64Value>,
) -> Result<LbPolicy, FieldError> {
    let in_range = |field: &str, size: u64| {
        if size == 0 || size > MAX_RING_SIZE {
            Err(FieldError::new(
                field,
                format!("value {size} must be in the range [1, {MAX_RING_SIZE}]"),
            ))
        } else {
            Ok(size)
        }
    };
    let max_ring_size = match max {
        Some(v) => in_range("maximum_ring_size", v.value)?,
        None => MAX_RING_SIZE,
    };
    let min_ring_size = match min {
        Some(v) => in_range("minimum_ring_size", v.value)?,
        None => DEFAULT_MIN_RING_SIZE,
    };
    if min_ring_size > max_ring_size {
        return Err(FieldError::new(
            "minimum_ring_size",
            format!(
                "value {min_ring_size} must not be greater than maximum_ring_size \
                 ({max_ring_size})"
            ),
        ));
    }
    Ok(LbPolicy::RingHash {
        min_ring_size,
        max_ring_size,
    })
}

fn least_request(
    choice_count: Option<crate::pb::google::protobuf::UInt32Value>,
) -> Result<LbPolicy, FieldError> {
    let choice_count = choice_count.map_or(DEFAULT_CHOICE_COUNT, |c| c.value);
    if choice_count < 2 {
        return Err(FieldError::new(
            "choice_count",
            format!("value {choice_count} must be at least 2"),
        ));
    }
    Ok(LbPolicy::LeastRequest { choice_count })
}

/// Walks a `LoadBalancingPolicy` list and takes the first supported policy. Paths are
/// relative to the `LoadBalancingPolicy`.
fn parse_lb_policy_list(
    list: &cluster_pb::LoadBalancingPolicy,
    depth: usize,
) -> Result<LbPolicy, FieldError> {
    if depth >= MAX_LB_POLICY_DEPTH {
        return Err(FieldError::new(
            "",
            format!("exceeds the maximum nesting depth of {MAX_LB_POLICY_DEPTH}"),
        ));
    }
    for (i, policy) in list.policies.iter().enumerate() {
        let at = |e: FieldError| e.at_index("policies", i);
        let Some(ext) = &policy.typed_extension_config else {
            return Err(at(FieldError::new(
                "typed_extension_config",
                "field not present",
            )));
        };
        let Some(any) = &ext.typed_config else {
            return Err(at(FieldError::new(
                "typed_extension_config.typed_config",
                "field not present",
            )));
        };
        let config =
            typed_config(any).map_err(|e| at(e.at("typed_extension_config.typed_config")))?;
        if config.typed_struct {
            // Custom (TypedStruct) policies are not supported: try the next one.
            continue;
        }
        let value = &config.value[..];
        let parsed = match config.type_name() {
            ROUND_ROBIN_TYPE => Ok(LbPolicy::RoundRobin),
            RING_HASH_TYPE => parse_ring_hash(value),
            LEAST_REQUEST_TYPE => decode_message::<lb_pb::least_request::v3::LeastRequest>(
                value,
                "value",
                "LeastRequest",
            )
            .and_then(|lr| least_request(lr.choice_count)),
            WRR_LOCALITY_TYPE => parse_wrr_locality(value, depth),
            CSWRR_TYPE => parse_cswrr(value),
            PICK_FIRST_TYPE => {
                decode_message::<lb_pb::pick_first::v3::PickFirst>(value, "value", "PickFirst").map(
                    |pf| LbPolicy::PickFirst {
                        shuffle_address_list: pf.shuffle_address_list,
                    },
                )
            }
            _ => continue,
        };
        return parsed.map_err(|e| at(e.at("typed_extension_config.typed_config")));
    }
    Err(FieldError::new(
        "",
        "no supported load balancing policy found",
    ))
}

fn parse_ring_hash(value: &[u8]) -> Result<LbPolicy, FieldError> {
    use lb_pb::ring_hash::v3::{RingHash, ring_hash::HashFunction};
    let rh: RingHash = decode_message(value, "value", "RingHash")?;
    if rh.hash_function != HashFunction::DefaultHash as i32
        && rh.hash_function != HashFunction::XxHash as i32
    {
        return Err(FieldError::new(
            "value.hash_function",
            "unsupported hash function (must be XX_HASH)",
        ));
    }
    ring_hash_sizes(rh.minimum_ring_size, rh.maximum_ring_size).map_err(|e| e.at("value"))
}

fn parse_wrr_locality(value: &[u8], depth: usize) -> Result<LbPolicy, FieldError> {
    let wrr: lb_pb::wrr_locality::v3::WrrLocality = decode_message(value, "value", "WrrLocality")?;
    let Some(child) = &wrr.endpoint_picking_policy else {
        return Err(FieldError::new(
            "value.endpoint_picking_policy",
            "field not present",
        ));
    };
    let child = parse_lb_policy_list(child, depth + 1)
        .map_err(|e| e.at("value.endpoint_picking_policy"))?;
    Ok(LbPolicy::WrrLocality(Box::new(child)))
}

fn parse_cswrr(value: &[u8]) -> Result<LbPolicy, FieldError> {
    let c: lb_pb::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin =
        decode_message(value, "value", "ClientSideWeightedRoundRobin")?;
    let defaults = WeightedRoundRobinConfig::default();
    let period = |d: Option<&crate::pb::google::protobuf::Duration>, field: &str, default| {
        optional_duration(d)
            .map(|d| d.unwrap_or(default))
            .map_err(|e| e.at(format_args!("value.{field}")))
    };
    let error_utilization_penalty = match &c.error_utilization_penalty {
        None => defaults.error_utilization_penalty,
        Some(v) if v.value.is_finite() && v.value >= 0.0 => v.value,
        Some(v) => {
            return Err(FieldError::new(
                "value.error_utilization_penalty",
                format!("value {} must be finite and non-negative", v.value),
            ));
        }
    };
    Ok(LbPolicy::WeightedRoundRobin(WeightedRoundRobinConfig {
        enable_oob_load_report: c.enable_oob_load_report.is_some_and(|b| b.value),
        oob_reporting_period: period(
            c.oob_reporting_period.as_ref(),
            "oob_reporting_period",
            defaults.oob_reporting_period,
        )?,
        blackout_period: period(
            c.blackout_period.as_ref(),
            "blackout_period",
            defaults.blackout_period,
        )?,
        weight_expiration_period: period(
            c.weight_expiration_period.as_ref(),
            "weight_expiration_period",
            defaults.weight_expiration_period,
        )?,
        weight_update_period: period(
            c.weight_update_period.as_ref(),
            "weight_update_period",
            defaults.weight_update_period,
        )?,
        error_utilization_penalty,
    }))
}

/// The transport socket must carry an `UpstreamTlsContext`. Paths are relative to
/// `transport_socket`.
fn parse_transport_socket(ts: &lite::TransportSocket) -> Result<UpstreamTls, FieldError> {
    use lite::transport_socket::ConfigType;
    let Some(ConfigType::TypedConfig(any)) = &ts.config_type else {
        return Err(FieldError::new("typed_config", "field not present"));
    };
    // `type.googleapis.com/<UpstreamTlsContext>` (any prefix) passes `typed_config`'s
    // checks unchanged; anything else is rejected by them or just below, with their
    // error.
    let is_tls = any
        .type_url
        .rsplit_once('/')
        .is_some_and(|(_, name)| name == UPSTREAM_TLS_CONTEXT_TYPE);
    if !is_tls {
        let any = crate::pb::google::protobuf::Any {
            type_url: any.type_url.clone(),
            value: any.value.clone().into(),
        };
        let config = typed_config(&any).map_err(|e| e.at("typed_config"))?;
        return Err(FieldError::new(
            "typed_config.type_url",
            format!("unsupported transport socket type {:?}", config.type_url),
        ));
    }
    let tls: lite::UpstreamTlsContext =
        decode_message(&any.value, "typed_config.value", "UpstreamTlsContext")?;
    Ok(UpstreamTls { sni: tls.sni })
}

/// Decode-only views of the CDS messages: only the fields the validation reads, by their
/// real field numbers and wire types. prost skips every other field on the wire without
/// building it (metadata, `connect_timeout`, health checks, the TLS common context, ...).
/// Oneofs keep all their members, so that "the last member wins" behaves as in the full
/// messages; members never read decode into `Skipped`. Fields that are rare and read in
/// full (the aggregate and LOGICAL_DNS configs, `load_balancing_policy`, `lrs_server`)
/// keep their generated types. The structs are named after the Envoy messages, so decode
/// errors name the same messages.
mod lite {
    use bytes::{Buf, BufMut};
    use prost::encoding::{self, DecodeContext, WireType};

    use crate::pb::envoy::config::cluster::v3 as cluster_pb;
    use crate::pb::envoy::config::core::v3 as core_pb;
    use crate::pb::envoy::config::endpoint::v3 as endpoint_pb;
    use crate::pb::google::protobuf::UInt32Value;

    /// A message whose fields are never read: prost checks its framing and skips them.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Skipped {}

    /// `envoy.config.cluster.v3.Cluster`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Cluster {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(oneof = "cluster::ClusterDiscoveryType", tags = "2, 38")]
        pub cluster_discovery_type: Option<cluster::ClusterDiscoveryType>,
        #[prost(message, optional, tag = "3")]
        pub eds_cluster_config: Option<EdsClusterConfig>,
        /// `envoy.config.cluster.v3.Cluster.LbPolicy`.
        #[prost(int32, tag = "6")]
        pub lb_policy: i32,
        #[prost(message, optional, tag = "10")]
        pub circuit_breakers: Option<CircuitBreakers>,
        #[prost(oneof = "cluster::LbConfig", tags = "23, 34, 37, 52, 56")]
        pub lb_config: Option<cluster::LbConfig>,
        #[prost(message, optional, tag = "24")]
        pub transport_socket: Option<TransportSocket>,
        #[prost(message, optional, tag = "33")]
        pub load_assignment: Option<endpoint_pb::ClusterLoadAssignment>,
        #[prost(message, optional, tag = "41")]
        pub load_balancing_policy: Option<cluster_pb::LoadBalancingPolicy>,
        #[prost(message, optional, tag = "42")]
        pub lrs_server: Option<core_pb::ConfigSource>,
    }

    /// Oneofs of [`Cluster`].
    pub mod cluster {
        use super::cluster_pb::cluster as full;

        /// `cluster_discovery_type`.
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum ClusterDiscoveryType {
            /// `envoy.config.cluster.v3.Cluster.DiscoveryType`.
            #[prost(int32, tag = "2")]
            Type(i32),
            #[prost(message, tag = "38")]
            ClusterType(full::CustomClusterType),
        }

        /// `lb_config`.
        #[allow(clippy::enum_variant_names)] // the Envoy oneof members' names
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum LbConfig {
            #[prost(message, tag = "23")]
            RingHashLbConfig(full::RingHashLbConfig),
            #[prost(message, tag = "52")]
            MaglevLbConfig(super::Skipped),
            #[prost(message, tag = "34")]
            OriginalDstLbConfig(super::Skipped),
            #[prost(message, tag = "37")]
            LeastRequestLbConfig(full::LeastRequestLbConfig),
            #[prost(message, tag = "56")]
            RoundRobinLbConfig(super::Skipped),
        }
    }

    /// `envoy.config.cluster.v3.Cluster.EdsClusterConfig`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EdsClusterConfig {
        #[prost(message, optional, tag = "1")]
        pub eds_config: Option<core_pb::ConfigSource>,
        #[prost(string, tag = "2")]
        pub service_name: String,
    }

    /// `envoy.config.cluster.v3.CircuitBreakers`, reduced as it is decoded to what the
    /// validation reads: the first of its `thresholds` with DEFAULT priority (so no list
    /// is built). Decode-only: encoding writes that threshold alone.
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct CircuitBreakers {
        pub default_threshold: Option<circuit_breakers::Thresholds>,
    }

    impl prost::Message for CircuitBreakers {
        fn encode_raw(&self, buf: &mut impl BufMut) {
            if let Some(t) = &self.default_threshold {
                encoding::message::encode(1, t, buf);
            }
        }

        fn merge_field(
            &mut self,
            tag: u32,
            wire_type: WireType,
            buf: &mut impl Buf,
            ctx: DecodeContext,
        ) -> Result<(), prost::DecodeError> {
            if tag != 1 {
                return encoding::skip_field(wire_type, tag, buf, ctx);
            }
            let mut t = circuit_breakers::Thresholds::default();
            encoding::message::merge(wire_type, &mut t, buf, ctx).map_err(|mut e| {
                e.push("CircuitBreakers", "thresholds");
                e
            })?;
            if self.default_threshold.is_none()
                && t.priority == core_pb::RoutingPriority::Default as i32
            {
                self.default_threshold = Some(t);
            }
            Ok(())
        }

        fn encoded_len(&self) -> usize {
            self.default_threshold
                .as_ref()
                .map_or(0, |t| encoding::message::encoded_len(1, t))
        }

        fn clear(&mut self) {
            *self = CircuitBreakers::default();
        }
    }

    /// Nested messages of [`CircuitBreakers`].
    pub mod circuit_breakers {
        /// `envoy.config.cluster.v3.CircuitBreakers.Thresholds`.
        #[derive(Clone, Copy, PartialEq, prost::Message)]
        pub struct Thresholds {
            /// `envoy.config.core.v3.RoutingPriority`.
            #[prost(int32, tag = "1")]
            pub priority: i32,
            #[prost(message, optional, tag = "4")]
            pub max_requests: Option<super::UInt32Value>,
        }
    }

    /// `envoy.config.core.v3.TransportSocket`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TransportSocket {
        #[prost(oneof = "transport_socket::ConfigType", tags = "3")]
        pub config_type: Option<transport_socket::ConfigType>,
    }

    /// Oneofs of [`TransportSocket`].
    pub mod transport_socket {
        /// `config_type`.
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum ConfigType {
            #[prost(message, tag = "3")]
            TypedConfig(super::Any),
        }
    }

    /// `google.protobuf.Any`, its value in a plain `Vec` (one allocation, no sharing).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        #[prost(string, tag = "1")]
        pub type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        pub value: Vec<u8>,
    }

    /// `envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct UpstreamTlsContext {
        #[prost(string, tag = "2")]
        pub sni: String,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::cluster::v3::cluster::{
        ClusterDiscoveryType, CustomClusterType, DiscoveryType, EdsClusterConfig, LbConfig,
    };
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
                    core_pb::config_source::ConfigSourceSpecifier::ApiConfigSource(
                        Default::default(),
                    ),
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
        c.cluster_discovery_type =
            Some(ClusterDiscoveryType::Type(DiscoveryType::StrictDns as i32));
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

    fn dns_cluster(
        load_assignment: Option<endpoint_pb::ClusterLoadAssignment>,
    ) -> cluster_pb::Cluster {
        cluster_pb::Cluster {
            name: "dns".to_owned(),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(
                DiscoveryType::LogicalDns as i32,
            )),
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
                format!(
                    "{p}.value.endpoint_picking_policy: no supported load balancing policy found"
                ),
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
                &tls_pb::UpstreamTlsContext {
                    sni: "backend.example.com".to_owned(),
                    ..Default::default()
                },
            ))),
        });
        let out = decode_cluster(&c).unwrap();
        assert!(out.lrs_server);
        assert_eq!(out.max_requests, 77);
        assert_eq!(
            out.tls,
            Some(UpstreamTls {
                sni: "backend.example.com".to_owned()
            })
        );
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
            msg.starts_with(
                "transport_socket.typed_config.value: can't decode UpstreamTlsContext: "
            ),
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
                        ..Default::default()
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
                tls: Some(UpstreamTls {
                    sni: "outbound_.8080_._.svc-1".to_owned()
                }),
            }
        );
    }

    #[test]
    fn transport_socket_type_urls() {
        let tls = tls_pb::UpstreamTlsContext {
            sni: "s".to_owned(),
            ..Default::default()
        };
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
            Some(UpstreamTls {
                sni: "s".to_owned()
            })
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
}
