//! Decode-only views of the CDS messages: only the fields the validation reads, by their
//! real field numbers and wire types. prost skips every other field on the wire without
//! building it (metadata, `connect_timeout`, health checks, ...). The TLS context inside
//! the transport socket has its own views, in `resource/tls/lite.rs`.
//! Oneofs keep all their members, so that "the last member wins" behaves as in the full
//! messages; members never read decode into `Skipped`. Fields that are rare and read in
//! full (the aggregate and LOGICAL_DNS configs, `load_balancing_policy`, `lrs_server`)
//! keep their generated types. The structs are named after the Envoy messages, so decode
//! errors name the same messages.

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
    #[prost(message, optional, tag = "19")]
    pub outlier_detection: Option<cluster_pb::OutlierDetection>,
    #[prost(oneof = "cluster::LbConfig", tags = "23, 34, 37, 52, 56")]
    pub lb_config: Option<cluster::LbConfig>,
    #[prost(message, optional, tag = "24")]
    pub transport_socket: Option<TransportSocket>,
    /// `common_lb_config`: only `override_host_status` (A55).
    #[prost(message, optional, tag = "27")]
    pub common_lb_config: Option<CommonLbConfig>,
    #[prost(message, optional, tag = "33")]
    pub load_assignment: Option<endpoint_pb::ClusterLoadAssignment>,
    #[prost(message, optional, tag = "41")]
    pub load_balancing_policy: Option<cluster_pb::LoadBalancingPolicy>,
    #[prost(message, optional, tag = "42")]
    pub lrs_server: Option<core_pb::ConfigSource>,
    /// `transport_socket_matches`: only whether there are any (they are NACKed).
    #[prost(message, repeated, tag = "43")]
    pub transport_socket_matches: Vec<Skipped>,
}

/// `envoy.config.cluster.v3.Cluster.CommonLbConfig`: only `override_host_status`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommonLbConfig {
    #[prost(message, optional, tag = "8")]
    pub override_host_status: Option<core_pb::HealthStatusSet>,
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
