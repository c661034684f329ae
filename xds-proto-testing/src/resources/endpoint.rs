//! ClusterLoadAssignment builders: localities with a weight, a priority and endpoints
//! with a health status and an optional weight.

use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint;
use xds_proto_core::pb::google::protobuf::{Any, UInt32Value};
use xds_proto_core::resource::type_url;

use super::{any, socket_address};

/// One endpoint of an assignment. gRPC requires an IP literal (no host name) and a port
/// up to 65535, unique within the assignment; a weight, when set, above 0. An endpoint
/// with a health status value it does not know is skipped.
#[derive(Clone, Debug)]
pub struct Host {
    /// IP address.
    pub address: String,
    /// Port.
    pub port: u32,
    /// Health status.
    pub health: core::HealthStatus,
    /// Load-balancing weight (None: unset, which counts as 1).
    pub weight: Option<u32>,
}

impl Host {
    /// A healthy endpoint on 127.0.0.1 without a weight.
    pub fn healthy(port: u32) -> Host {
        Host {
            address: "127.0.0.1".into(),
            port,
            health: core::HealthStatus::Healthy,
            weight: None,
        }
    }

    fn to_lb_endpoint(&self) -> endpoint::LbEndpoint {
        endpoint::LbEndpoint {
            host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                endpoint::Endpoint {
                    address: Some(socket_address(&self.address, self.port)),
                    ..Default::default()
                },
            )),
            health_status: self.health as i32,
            load_balancing_weight: self.weight.map(|value| UInt32Value { value }),
            ..Default::default()
        }
    }
}

/// A locality of an assignment. gRPC ignores a locality of weight 0; the others need
/// the `locality` field (always set here), must be unique within their priority, and
/// their weights must sum to at most `u32::MAX` per priority. Priorities must be
/// contiguous from 0.
#[derive(Clone, Debug)]
pub struct Locality {
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Sub-zone (usually empty).
    pub sub_zone: String,
    /// The locality's weight.
    pub weight: u32,
    /// Priority (0 is the highest).
    pub priority: u32,
    /// Endpoints.
    pub hosts: Vec<Host>,
}

impl Locality {
    /// A locality `region`/`zone` of weight 1 at priority 0, without sub-zone.
    pub fn new(region: &str, zone: &str, hosts: Vec<Host>) -> Locality {
        Locality {
            region: region.to_string(),
            zone: zone.to_string(),
            sub_zone: String::new(),
            weight: 1,
            priority: 0,
            hosts,
        }
    }

    fn to_locality_lb_endpoints(&self) -> endpoint::LocalityLbEndpoints {
        endpoint::LocalityLbEndpoints {
            locality: Some(core::Locality {
                region: self.region.clone(),
                zone: self.zone.clone(),
                sub_zone: self.sub_zone.clone(),
            }),
            load_balancing_weight: Some(UInt32Value { value: self.weight }),
            priority: self.priority,
            lb_endpoints: self.hosts.iter().map(Host::to_lb_endpoint).collect(),
            ..Default::default()
        }
    }
}

/// An endpoint assignment for the cluster (or EDS service name) `cluster_name` with
/// these localities, in order.
pub fn load_assignment(
    cluster_name: &str,
    localities: &[Locality],
) -> endpoint::ClusterLoadAssignment {
    endpoint::ClusterLoadAssignment {
        cluster_name: cluster_name.to_string(),
        endpoints: localities
            .iter()
            .map(Locality::to_locality_lb_endpoints)
            .collect(),
        ..Default::default()
    }
}

/// [`load_assignment`] as an `Any`.
pub fn endpoints_with(cluster_name: &str, localities: &[Locality]) -> Any {
    any(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        &load_assignment(cluster_name, localities),
    )
}

/// An endpoint assignment with one locality (r1/z1, weight 1, priority 0) holding one
/// healthy endpoint per port on 127.0.0.1.
pub fn endpoints_msg(cluster_name: &str, ports: &[u32]) -> endpoint::ClusterLoadAssignment {
    let hosts = ports.iter().map(|p| Host::healthy(*p)).collect();
    load_assignment(cluster_name, &[Locality::new("r1", "z1", hosts)])
}

/// [`endpoints_msg`] as an `Any`.
pub fn endpoints(cluster_name: &str, ports: &[u32]) -> Any {
    any(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        &endpoints_msg(cluster_name, ports),
    )
}

/// `assignment` with these `drop_overloads` (category, drops per million), in order:
/// gRPC drops an RPC in the first category whose draw falls under its rate, and
/// reports the drops by category (LRS).
pub fn with_drop_overloads(
    mut assignment: endpoint::ClusterLoadAssignment,
    drops: &[(&str, u32)],
) -> endpoint::ClusterLoadAssignment {
    use xds_proto_core::pb::envoy::r#type::v3::{FractionalPercent, fractional_percent};
    let policy = assignment.policy.get_or_insert_with(Default::default);
    policy.drop_overloads = drops
        .iter()
        .map(
            |(category, per_million)| endpoint::cluster_load_assignment::policy::DropOverload {
                category: category.to_string(),
                drop_percentage: Some(FractionalPercent {
                    numerator: *per_million,
                    denominator: fractional_percent::DenominatorType::Million as i32,
                }),
            },
        )
        .collect();
    assignment
}
