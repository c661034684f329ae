//! A custom load-balancing policy (gRFC A52): register `myorg.PreferredPort`, whose
//! `TypedStruct` config names a port, decode a CDS cluster that lists it before
//! `round_robin`, and pick with it. Its picker sends every call to the READY endpoint
//! on the preferred port, or, while that one is down, to a random READY one.
//!
//! Run: `cargo run -p xds-proto-core --example custom_lb_policy`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use prost::Message;
use xds_proto_core::Instant;
use xds_proto_core::dependency::{ClusterConfig, ClusterResolution};
use xds_proto_core::lb::{
    CallOutcome, ConnectivityState, CustomLbConfig, CustomLbPolicy, CustomPicker, LbAction,
    LbSettings, LoadBalancer, Pick, PickArgs, ReadyEndpoint,
};
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster_pb;
use xds_proto_core::pb::envoy::config::core::v3 as core_pb;
use xds_proto_core::pb::google::protobuf::{Any, Struct, Value, value::Kind};
use xds_proto_core::resource::cluster::decode_with_policies;
use xds_proto_core::resource::{
    Endpoint, EndpointsResource, HealthStatus, LbPolicy, LbPolicyRegistry, Locality,
    LocalityEndpoints, Priority,
};

/// The policy: validates its config into a [`PreferredPortConfig`].
struct PreferredPort;

#[derive(Debug)]
struct PreferredPortConfig {
    port: u16,
}

#[derive(Debug)]
struct PreferredPortPicker {
    port: u16,
}

impl CustomLbPolicy for PreferredPort {
    fn parse_config(&self, config: &Struct) -> Result<Arc<dyn CustomLbConfig>, String> {
        match config.fields.get("port").and_then(|v| v.kind.as_ref()) {
            Some(Kind::NumberValue(n)) if (1.0..=65535.0).contains(n) && n.fract() == 0.0 => {
                Ok(Arc::new(PreferredPortConfig { port: *n as u16 }))
            }
            other => Err(format!("port must be a port number, not {other:?}")),
        }
    }
}

impl CustomLbConfig for PreferredPortConfig {
    fn new_picker(&self) -> Box<dyn CustomPicker> {
        Box::new(PreferredPortPicker { port: self.port })
    }
}

impl CustomPicker for PreferredPortPicker {
    fn pick(&mut self, ready: &[ReadyEndpoint], random: u64) -> usize {
        ready
            .iter()
            .position(|e| e.address.port() == self.port)
            .unwrap_or((random % ready.len() as u64) as usize)
    }
}

/// The CDS cluster the control plane sends: `myorg.PreferredPort` (port 8082) as a
/// `TypedStruct`, then `round_robin` for clients without it.
fn cluster_from_the_control_plane() -> Vec<u8> {
    #[derive(Clone, PartialEq, Message)]
    struct TypedStruct {
        #[prost(string, tag = "1")]
        type_url: String,
        #[prost(message, optional, tag = "2")]
        value: Option<Struct>,
    }
    let mut config = Struct::default();
    config.fields.insert(
        "port".into(),
        Value {
            kind: Some(Kind::NumberValue(8082.0)),
        },
    );
    let custom = Any {
        type_url: "type.googleapis.com/xds.type.v3.TypedStruct".into(),
        value: TypedStruct {
            type_url: "type.googleapis.com/myorg.PreferredPort".into(),
            value: Some(config),
        }
        .encode_to_vec()
        .into(),
    };
    let round_robin = Any {
        type_url:
            "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"
                .into(),
        value: Default::default(),
    };
    let policy = |any| cluster_pb::load_balancing_policy::Policy {
        typed_extension_config: Some(core_pb::TypedExtensionConfig {
            name: "policy".into(),
            typed_config: Some(any),
        }),
    };
    use cluster_pb::cluster::{ClusterDiscoveryType, DiscoveryType, EdsClusterConfig};
    cluster_pb::Cluster {
        name: "backends".into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: Some(core_pb::ConfigSource {
                config_source_specifier: Some(core_pb::config_source::ConfigSourceSpecifier::Ads(
                    Default::default(),
                )),
                ..Default::default()
            }),
            service_name: String::new(),
        }),
        load_balancing_policy: Some(cluster_pb::LoadBalancingPolicy {
            policies: vec![policy(custom), policy(round_robin)],
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn endpoints(ports: &[u16]) -> EndpointsResource {
    let endpoints = ports
        .iter()
        .map(|port| Endpoint {
            address: SocketAddr::from(([127, 0, 0, 1], *port)),
            additional_addresses: vec![],
            health_status: HealthStatus::Healthy,
            weight: 1,
            hostname: String::new(),
        })
        .collect();
    EndpointsResource {
        cluster_name: "backends".into(),
        priorities: vec![Priority {
            localities: vec![LocalityEndpoints {
                locality: Locality::default(),
                weight: 1,
                endpoints,
            }],
        }],
        drop_overloads: vec![],
    }
}

/// Carries out the load balancer's actions: every connection succeeds at once, except
/// to `down`.
fn settle(lb: &mut LoadBalancer, now: Instant, down: Option<u16>) {
    while let Some(action) = lb.poll_action() {
        if let LbAction::Connect {
            subchannel,
            address,
        } = action
        {
            let state = if Some(address.port()) == down {
                ConnectivityState::TransientFailure
            } else {
                ConnectivityState::Ready
            };
            lb.subchannel_state(now, subchannel, state);
        }
    }
}

/// Picks `n` times, counting the ports picked.
fn picks(lb: &mut LoadBalancer, now: Instant, n: u64) -> BTreeMap<u16, u64> {
    let mut counts = BTreeMap::new();
    for random in 0..n {
        let args = PickArgs {
            hash: None,
            random,
            override_host: None,
        };
        if let Pick::Complete { address, call, .. } = lb.pick(now, "backends", &args) {
            *counts.entry(address.port()).or_default() += 1;
            lb.call_finished(now, call, CallOutcome::Success);
        }
    }
    counts
}

fn main() {
    // The registry belongs to whoever validates CDS: built-ins plus ours.
    let mut registry = LbPolicyRegistry::default();
    registry
        .register("myorg.PreferredPort", Arc::new(PreferredPort))
        .expect("a new name");
    let (name, cluster) =
        decode_with_policies(&registry, &cluster_from_the_control_plane()).expect("valid");
    let LbPolicy::Custom(custom) = &cluster.lb_policy else {
        panic!("expected the custom policy, got {:?}", cluster.lb_policy)
    };
    println!(
        "cluster {name}: policy {} {:?}",
        custom.type_name,
        custom.validated()
    );
    // Without the registration the same cluster falls back to round robin.
    let (_, plain) = decode_with_policies(
        LbPolicyRegistry::built_in(),
        &cluster_from_the_control_plane(),
    )
    .expect("valid");
    assert_eq!(plain.lb_policy, LbPolicy::RoundRobin);

    let config = ClusterConfig {
        cluster: Arc::new(cluster),
        children: ClusterResolution::Endpoints {
            service_name: "backends".into(),
            endpoints: Some(Arc::new(endpoints(&[8081, 8082, 8083]))),
            resolution_note: None,
        },
        load_stats: None,
    };
    let clusters = BTreeMap::from([("backends".to_owned(), Ok(config))]);
    let now = Instant::ZERO;
    let mut lb = LoadBalancer::new(LbSettings::new(1));
    lb.update_clusters(now, &clusters);
    // The first pick connects the endpoints; then the policy picks.
    let first = lb.pick(now, "backends", &PickArgs::default());
    assert!(matches!(first, Pick::Queue), "{first:?}");
    settle(&mut lb, now, None);
    let counts = picks(&mut lb, now, 100);
    println!("all READY: {counts:?}");
    assert_eq!(counts, BTreeMap::from([(8082, 100)]));

    // The preferred endpoint goes down: random picks over the other two.
    let mut lb = LoadBalancer::new(LbSettings::new(1));
    lb.update_clusters(now, &clusters);
    lb.pick(now, "backends", &PickArgs::default());
    settle(&mut lb, now, Some(8082));
    let counts = picks(&mut lb, now, 100);
    println!("8082 down: {counts:?}");
    assert_eq!(counts.keys().copied().collect::<Vec<_>>(), [8081, 8083]);
}
