//! CDS: decoding and validating `envoy.config.cluster.v3.Cluster` into a compact
//! [`ClusterResource`], following gRPC's rules (gRFCs A27, A28, A29, A37, A42, A47, A48,
//! A52, A58, A101).
//!
//! The module owns the cluster types: the discovery type ([`ClusterType`]: EDS,
//! LOGICAL_DNS or aggregate), the load-balancing policy ([`LbPolicy`], from the legacy
//! `lb_policy` enum or the newer `load_balancing_policy` list), LRS, the circuit breaker
//! request limit, outlier detection (A50) and the cluster's security config (A29: the
//! `transport_socket`'s `UpstreamTlsContext`, validated in `resource/tls.rs`).
//!
//! The LB policy is decoded in `lb_policy`; `lite` holds the decode-only message views.

use std::time::Duration;

use super::endpoint::HealthStatus;
use super::listener::check_ads_or_self;
use super::tls::{check_socket_type, parse_upstream};
use super::validate::{
    FieldError, PortRange, decode_message, decode_resource, optional, required, socket_port,
    typed_config,
};
use super::{DecodeContext, DecodeError};
use crate::pb::envoy::config::cluster::v3 as cluster_pb;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::endpoint::v3 as endpoint_pb;
use crate::pb::envoy::extensions::clusters::aggregate::v3 as aggregate_pb;
use lb_policy::{parse_lb_policy_list, parse_legacy_lb_policy};
pub use registry::{LbPolicyRegistry, RegisterError};

/// Type name of the aggregate cluster config (gRFC A37).
pub const AGGREGATE_CLUSTER_TYPE: &str = "envoy.extensions.clusters.aggregate.v3.ClusterConfig";

pub use super::tls::UPSTREAM_TLS_CONTEXT_TYPE;
pub use crate::security::UpstreamTls;

/// `max_requests` when no DEFAULT-priority circuit breaker threshold sets it.
pub const DEFAULT_MAX_REQUESTS: u32 = 1024;

/// The largest ring size gRPC accepts (A42).
pub const MAX_RING_SIZE: u64 = 8 * 1024 * 1024;

/// The default minimum ring size (A42).
pub const DEFAULT_MIN_RING_SIZE: u64 = 1024;

/// The default `choice_count` for least-request (A48).
pub const DEFAULT_CHOICE_COUNT: u32 = 2;

/// The largest `choice_count` least-request uses (A48): a larger value is accepted and
/// counts as this one.
pub const MAX_CHOICE_COUNT: u32 = 10;

/// How deeply `load_balancing_policy` may nest (through `wrr_locality`).
pub const MAX_LB_POLICY_DEPTH: usize = 16;

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
    /// The security config (A29) of the cluster's `transport_socket`, when it has one;
    /// `None`: no TLS from xDS (a channel with xDS credentials uses its fallback).
    pub tls: Option<UpstreamTls>,
    /// Outlier detection (A50), when the cluster sets `outlier_detection`.
    pub outlier_detection: Option<OutlierDetection>,
    /// `common_lb_config.override_host_status` (A55): the health statuses of the
    /// endpoints a session cookie may pick.
    pub override_host_status: OverrideHostStatus,
}

/// The endpoint health statuses whose hosts stateful session affinity may pick
/// (`common_lb_config.override_host_status`, A55): gRPC considers UNKNOWN, HEALTHY and
/// DRAINING and ignores the others; unset means UNKNOWN and HEALTHY, an empty set none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OverrideHostStatus(u8);

impl OverrideHostStatus {
    const UNKNOWN: u8 = 1;
    const HEALTHY: u8 = 2;
    const DRAINING: u8 = 4;

    /// UNKNOWN and HEALTHY (the default when the field is unset).
    pub const DEFAULT: OverrideHostStatus =
        OverrideHostStatus(OverrideHostStatus::UNKNOWN | OverrideHostStatus::HEALTHY);

    /// No status: session cookies never pick a host.
    pub const NONE: OverrideHostStatus = OverrideHostStatus(0);

    /// Whether an endpoint with `status` may be picked by a session cookie.
    pub fn contains(self, status: HealthStatus) -> bool {
        let bit = match status {
            HealthStatus::Unknown => OverrideHostStatus::UNKNOWN,
            HealthStatus::Healthy => OverrideHostStatus::HEALTHY,
            HealthStatus::Draining => OverrideHostStatus::DRAINING,
            _ => 0,
        };
        self.0 & bit != 0
    }

    fn of(set: Option<&core_pb::HealthStatusSet>) -> OverrideHostStatus {
        let Some(set) = set else {
            return OverrideHostStatus::DEFAULT;
        };
        let bits = set.statuses.iter().fold(0, |bits, s| {
            bits | match core_pb::HealthStatus::try_from(*s) {
                Ok(core_pb::HealthStatus::Unknown) => OverrideHostStatus::UNKNOWN,
                Ok(core_pb::HealthStatus::Healthy) => OverrideHostStatus::HEALTHY,
                Ok(core_pb::HealthStatus::Draining) => OverrideHostStatus::DRAINING,
                _ => 0,
            }
        });
        OverrideHostStatus(bits)
    }
}

impl Default for OverrideHostStatus {
    fn default() -> OverrideHostStatus {
        OverrideHostStatus::DEFAULT
    }
}

/// A cluster's outlier detection (gRFC A50), with gRPC's defaults applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutlierDetection {
    /// Time between ejection sweeps (`interval`, default 10 s; 0 is valid in A50, and
    /// the load balancer then sweeps at most once per millisecond).
    pub interval: Duration,
    /// `base_ejection_time` (default 30 s): an ejection lasts this times the endpoint's
    /// ejection multiplier.
    pub base_ejection_time: Duration,
    /// `max_ejection_time` (default 300 s; an ejection never lasts longer than the
    /// greater of this and `base_ejection_time`).
    pub max_ejection_time: Duration,
    /// `max_ejection_percent` (default 10, at most 100): no ejection once this share of
    /// the endpoints is ejected.
    pub max_ejection_percent: u32,
    /// Success-rate ejection; `None` when `enforcing_success_rate` is 0.
    pub success_rate_ejection: Option<SuccessRateEjection>,
    /// Failure-percentage ejection; `None` when `enforcing_failure_percentage` is unset
    /// or 0.
    pub failure_percentage_ejection: Option<FailurePercentageEjection>,
}

/// Success-rate ejection settings (A50).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuccessRateEjection {
    /// `success_rate_stdev_factor` in thousandths (default 1900): an endpoint is an
    /// outlier below `mean - stdev * stdev_factor / 1000`.
    pub stdev_factor: u32,
    /// `enforcing_success_rate` (default 100): the percent chance an outlier is ejected.
    pub enforcement_percentage: u32,
    /// `success_rate_minimum_hosts` (default 5): endpoints with enough requests needed
    /// to run the algorithm.
    pub minimum_hosts: u32,
    /// `success_rate_request_volume` (default 100): requests in an interval for an
    /// endpoint to count.
    pub request_volume: u32,
}

/// Failure-percentage ejection settings (A50).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailurePercentageEjection {
    /// `failure_percentage_threshold` (default 85, at most 100): an endpoint is an
    /// outlier above this failure percentage.
    pub threshold: u32,
    /// `enforcing_failure_percentage` (1 to 100): the percent chance an outlier is
    /// ejected.
    pub enforcement_percentage: u32,
    /// `failure_percentage_minimum_hosts` (default 5).
    pub minimum_hosts: u32,
    /// `failure_percentage_request_volume` (default 50).
    pub request_volume: u32,
}

/// The discovery type of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
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
        /// Endpoints sampled per pick, as sent (at least 2; default 2). The load
        /// balancer samples at most [`MAX_CHOICE_COUNT`] (A48).
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
    /// A policy registered in the [`LbPolicyRegistry`] (A52), named by a `TypedStruct`.
    Custom(crate::lb::CustomPolicyConfig),
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

/// Decodes and validates one serialized `Cluster` without a bootstrap: certificate
/// provider instance names are not checked (see [`DecodeContext::default`]).
///
/// Only the fields the validation reads are decoded (see `lite`); everything else
/// (metadata, timeouts, health checks, ALPN, ...) is skipped on the wire.
pub fn decode(bytes: &[u8]) -> Result<(String, ClusterResource), DecodeError> {
    decode_in(&DecodeContext::default(), bytes)
}

/// [`decode`] accepting in `load_balancing_policy` the policies of `registry` (the
/// built-in ones and an embedder's custom ones, A52) rather than the built-in ones.
pub fn decode_with_policies(
    registry: &LbPolicyRegistry,
    bytes: &[u8],
) -> Result<(String, ClusterResource), DecodeError> {
    decode_in(&DecodeContext::default().with_lb_policies(registry), bytes)
}

/// Decodes and validates one serialized `Cluster` for a client with this context (its
/// bootstrap's certificate providers, its LB policy registry).
pub fn decode_in(
    context: &DecodeContext<'_>,
    bytes: &[u8],
) -> Result<(String, ClusterResource), DecodeError> {
    let mut cluster: lite::Cluster = decode_resource(bytes, "Cluster")?;
    let name = std::mem::take(&mut cluster.name);
    let value = parse_cluster(context, &name, cluster).map_err(|e| e.into_decode_error(&name))?;
    Ok((name, value))
}

fn parse_cluster(
    context: &DecodeContext<'_>,
    name: &str,
    mut cluster: lite::Cluster,
) -> Result<ClusterResource, FieldError> {
    let cluster_type = parse_cluster_type(name, &mut cluster)?;
    let lb_policy = match &cluster.load_balancing_policy {
        Some(policy) => parse_lb_policy_list(policy, 0, context.lb_policies())
            .map_err(|e| e.at("load_balancing_policy"))?,
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
    if !cluster.transport_socket_matches.is_empty() {
        // Ignoring the matches could send plaintext where TLS was meant (gRPC-Go NACKs;
        // C-core does not read the field).
        return Err(FieldError::new("transport_socket_matches", "not supported"));
    }
    let tls = optional(
        cluster.transport_socket.as_ref(),
        "transport_socket",
        |ts| parse_transport_socket(context, ts),
    )?;
    let outlier_detection = optional(
        cluster.outlier_detection.as_ref(),
        "outlier_detection",
        outlier_detection::parse,
    )?;
    Ok(ClusterResource {
        name: name.to_owned(),
        cluster_type,
        lb_policy,
        lrs_server,
        max_requests,
        tls,
        outlier_detection,
        override_host_status: OverrideHostStatus::of(
            (cluster.common_lb_config.as_ref()).and_then(|c| c.override_host_status.as_ref()),
        ),
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
        return Err(FieldError::missing("eds_cluster_config"));
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
        return Err(FieldError::missing(p));
    };
    let address = required(endpoint.address.as_ref(), format!("{p}.address"))?;
    let Some(Address::SocketAddress(sa)) = &address.address else {
        return Err(FieldError::missing(format!("{p}.address.socket_address")));
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
    let any = required(custom.typed_config.as_ref(), "typed_config")?;
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

/// The transport socket must carry an `UpstreamTlsContext`. Paths are relative to
/// `transport_socket`.
fn parse_transport_socket(
    context: &DecodeContext<'_>,
    ts: &lite::TransportSocket,
) -> Result<UpstreamTls, FieldError> {
    use lite::transport_socket::ConfigType;
    let Some(ConfigType::TypedConfig(any)) = &ts.config_type else {
        return Err(FieldError::missing("typed_config"));
    };
    check_socket_type(&any.type_url, &any.value, UPSTREAM_TLS_CONTEXT_TYPE)
        .map_err(|e| e.at("typed_config"))?;
    parse_upstream(context, &any.value).map_err(|e| e.at("typed_config.value"))
}

mod lb_policy;
/// Decode-only views of the messages: only the fields the validation reads.
pub(super) mod lite;
mod outlier_detection;
mod registry;

#[cfg(test)]
mod tests;
