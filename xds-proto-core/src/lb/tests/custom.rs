//! Custom LB policies (A52) from the CDS validator to the pick: the registry's list
//! walk (the first supported entry wins, none supported is a NACK naming what was
//! listed), the `TypedStruct`'s config reaching the policy, registration errors, and a
//! registered policy's picks deciding the load balancer's.

use std::sync::{Arc, Mutex};

use prost::Message;

use super::*;
use crate::lb::{CustomLbConfig, CustomLbPolicy, CustomPicker, ReadyEndpoint};
use crate::pb::envoy::config::cluster::v3 as cluster_pb;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::extensions::load_balancing_policies as lb_pb;
use crate::pb::google::protobuf::{self as pbuf, Struct, Value, value::Kind};
use crate::resource::cluster::decode_with_policies;
use crate::resource::{LbPolicyRegistry, RegisterError};

const PINNED: &str = "myorg.PinnedLb";
const TYPED_STRUCT: &str = "type.googleapis.com/xds.type.v3.TypedStruct";

/// A test policy: every pick takes the READY endpoint at position `index` (its
/// config's number field); the configs it was given are recorded.
#[derive(Default)]
struct Pinned {
    seen: Mutex<Vec<Struct>>,
}

#[derive(Debug)]
struct PinnedConfig(usize);

#[derive(Debug)]
struct PinnedPicker(usize);

impl CustomLbPolicy for Pinned {
    fn parse_config(&self, config: &Struct) -> Result<Arc<dyn CustomLbConfig>, String> {
        self.seen.lock().unwrap().push(config.clone());
        match config.fields.get("index").and_then(|v| v.kind.as_ref()) {
            Some(Kind::NumberValue(n)) if *n >= 0.0 && n.fract() == 0.0 => {
                Ok(Arc::new(PinnedConfig(*n as usize)))
            }
            other => Err(format!("index must be a whole number, not {other:?}")),
        }
    }
}

impl CustomLbConfig for PinnedConfig {
    fn new_picker(&self) -> Box<dyn CustomPicker> {
        Box::new(PinnedPicker(self.0))
    }
}

impl CustomPicker for PinnedPicker {
    fn pick(&mut self, ready: &[ReadyEndpoint], _random: u64) -> usize {
        self.0 % ready.len()
    }
}

fn index_config(index: f64) -> Struct {
    let mut config = Struct::default();
    config.fields.insert(
        "index".to_owned(),
        Value {
            kind: Some(Kind::NumberValue(index)),
        },
    );
    config
}

/// A `TypedStruct` naming `type_name` with `config`.
fn typed_struct(type_name: &str, config: Option<Struct>) -> pbuf::Any {
    #[derive(Clone, PartialEq, Message)]
    struct TypedStruct {
        #[prost(string, tag = "1")]
        type_url: String,
        #[prost(message, optional, tag = "2")]
        value: Option<Struct>,
    }
    let ts = TypedStruct {
        type_url: format!("type.googleapis.com/{type_name}"),
        value: config,
    };
    pbuf::Any {
        type_url: TYPED_STRUCT.to_owned(),
        value: ts.encode_to_vec().into(),
    }
}

fn built_in(type_name: &str, config: &impl Message) -> pbuf::Any {
    pbuf::Any {
        type_url: format!(
            "type.googleapis.com/envoy.extensions.load_balancing_policies.{type_name}"
        ),
        value: config.encode_to_vec().into(),
    }
}

fn round_robin() -> pbuf::Any {
    built_in(
        "round_robin.v3.RoundRobin",
        &lb_pb::round_robin::v3::RoundRobin::default(),
    )
}

fn list(policies: Vec<pbuf::Any>) -> cluster_pb::LoadBalancingPolicy {
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

/// An EDS cluster `c` (over ADS) with this `load_balancing_policy` list, encoded.
fn cluster_bytes(policies: Vec<pbuf::Any>) -> Vec<u8> {
    use cluster_pb::cluster::{ClusterDiscoveryType, DiscoveryType, EdsClusterConfig};
    cluster_pb::Cluster {
        name: "c".to_owned(),
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
        load_balancing_policy: Some(list(policies)),
        ..Default::default()
    }
    .encode_to_vec()
}

fn registry_with_pinned() -> (LbPolicyRegistry, Arc<Pinned>) {
    let pinned = Arc::new(Pinned::default());
    let mut registry = LbPolicyRegistry::default();
    registry.register(PINNED, pinned.clone()).unwrap();
    (registry, pinned)
}

fn policy_of(registry: &LbPolicyRegistry, policies: Vec<pbuf::Any>) -> LbPolicy {
    decode_with_policies(registry, &cluster_bytes(policies))
        .expect("valid")
        .1
        .lb_policy
}

fn nack(registry: &LbPolicyRegistry, policies: Vec<pbuf::Any>) -> String {
    decode_with_policies(registry, &cluster_bytes(policies))
        .expect_err("a NACK")
        .message
}

fn type_name_of(policy: &LbPolicy) -> Option<&str> {
    match policy {
        LbPolicy::Custom(c) => Some(&c.type_name),
        _ => None,
    }
}

#[test]
fn the_first_policy_the_registry_supports_wins() {
    let (registry, _) = registry_with_pinned();
    let pinned = || typed_struct(PINNED, Some(index_config(1.0)));
    let policies = vec![
        typed_struct("other.Unregistered", None),
        pbuf::Any {
            type_url: "type.googleapis.com/example.Unknown".to_owned(),
            value: Default::default(),
        },
        pinned(),
        round_robin(),
    ];
    // Registered: the custom policy, listed before round robin.
    let policy = policy_of(&registry, policies.clone());
    assert_eq!(type_name_of(&policy), Some(PINNED), "{policy:?}");
    // Not registered (the built-in registry): skipped, round robin wins.
    let policy = policy_of(LbPolicyRegistry::built_in(), policies);
    assert_eq!(policy, LbPolicy::RoundRobin);
    // Listed after a supported policy: never reached.
    let policy = policy_of(&registry, vec![round_robin(), pinned()]);
    assert_eq!(policy, LbPolicy::RoundRobin);
    // Under wrr_locality, as A52's example nests it.
    let locality = lb_pb::wrr_locality::v3::WrrLocality {
        endpoint_picking_policy: Some(list(vec![pinned(), round_robin()])),
    };
    let policy = policy_of(
        &registry,
        vec![built_in("wrr_locality.v3.WrrLocality", &locality)],
    );
    let LbPolicy::WrrLocality(child) = &policy else {
        panic!("{policy:?}")
    };
    assert_eq!(type_name_of(child), Some(PINNED));
    // A built-in type name inside a TypedStruct is no custom policy: skipped.
    let rr_struct = typed_struct(
        "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin",
        None,
    );
    assert_eq!(
        nack(&registry, vec![rr_struct]),
        "load_balancing_policy: no supported load balancing policy found among [TypedStruct \
         envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin] (a custom \
         policy must be registered under the TypedStruct's type name)"
    );
}

#[test]
fn no_supported_policy_is_a_nack_naming_what_was_listed() {
    let (registry, _) = registry_with_pinned();
    let unknown = pbuf::Any {
        type_url: "type.googleapis.com/example.Unknown".to_owned(),
        value: Default::default(),
    };
    assert_eq!(
        nack(
            &registry,
            vec![typed_struct("other.Unregistered", None), unknown.clone()]
        ),
        "load_balancing_policy: no supported load balancing policy found among [TypedStruct \
         other.Unregistered, example.Unknown] (a custom policy must be registered under the \
         TypedStruct's type name)"
    );
    // A long list: the first eight, and how many more.
    let message = nack(&registry, vec![unknown; 1000]);
    assert!(
        message.ends_with(
            "example.Unknown] and 992 more (a custom policy must be registered under the \
             TypedStruct's type name)"
        ),
        "{message}"
    );
    assert!(message.len() < 400, "{message}");
    // The built-in registry NACKs a custom policy's cluster the same way.
    let message = nack(
        LbPolicyRegistry::built_in(),
        vec![typed_struct(PINNED, None)],
    );
    assert!(
        message.contains("among [TypedStruct myorg.PinnedLb]"),
        "{message}"
    );
}

#[test]
fn the_typed_structs_config_reaches_the_policy_and_its_errors_nack() {
    let (registry, pinned) = registry_with_pinned();
    let mut config = index_config(2.0);
    config.fields.insert(
        "note".to_owned(),
        Value {
            kind: Some(Kind::StringValue("from the control plane".to_owned())),
        },
    );
    let policy = policy_of(&registry, vec![typed_struct(PINNED, Some(config.clone()))]);
    assert_eq!(pinned.seen.lock().unwrap().as_slice(), [config.clone()]);
    let LbPolicy::Custom(custom) = &policy else {
        panic!("{policy:?}")
    };
    assert_eq!(custom.config, config);
    // Clusters compare by type name and config.
    let again = policy_of(&registry, vec![typed_struct(PINNED, Some(config))]);
    assert_eq!(policy, again);
    assert_ne!(
        policy,
        policy_of(
            &registry,
            vec![typed_struct(PINNED, Some(index_config(3.0)))]
        )
    );
    // The policy refusing its config NACKs the cluster, though round robin follows.
    assert_eq!(
        nack(
            &registry,
            vec![typed_struct(PINNED, Some(index_config(0.5))), round_robin()]
        ),
        "load_balancing_policy.policies[0].typed_extension_config.typed_config.value.value: \
         myorg.PinnedLb: index must be a whole number, not Some(NumberValue(0.5))"
    );
    // No value at all: the policy gets an empty Struct.
    nack(&registry, vec![typed_struct(PINNED, None)]);
    assert_eq!(pinned.seen.lock().unwrap().last(), Some(&Struct::default()));
}

#[test]
fn registration_refuses_taken_and_invalid_names() {
    let (mut registry, pinned) = registry_with_pinned();
    for built_in in [
        "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin",
        "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash",
        "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest",
        "envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality",
        "envoy.extensions.load_balancing_policies.pick_first.v3.PickFirst",
        "envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.\
         ClientSideWeightedRoundRobin",
    ] {
        assert!(
            LbPolicyRegistry::built_in().contains(built_in),
            "{built_in}"
        );
        assert_eq!(
            registry.register(built_in, pinned.clone()),
            Err(RegisterError::AlreadyRegistered(built_in.to_owned()))
        );
    }
    assert_eq!(
        registry.register(PINNED, pinned.clone()),
        Err(RegisterError::AlreadyRegistered(PINNED.to_owned()))
    );
    for bad in ["", "type.googleapis.com/myorg.X"] {
        assert_eq!(
            registry.register(bad, pinned.clone()),
            Err(RegisterError::InvalidName(bad.to_owned()))
        );
    }
    assert!(!LbPolicyRegistry::built_in().contains(PINNED));
}

#[test]
fn a_custom_policys_picks_are_the_load_balancers() {
    let (registry, _) = registry_with_pinned();
    for (index, expected) in [(0.0, 1), (2.0, 3), (4.0, 2)] {
        let policy = policy_of(
            &registry,
            vec![typed_struct(PINNED, Some(index_config(index)))],
        );
        let mut net = Net::new();
        net.update(vec![eds(cluster_resource("c", policy), simple(&[1, 2, 3]))]);
        assert_eq!(net.pick("c", 0), Pick::Queue, "the first pick connects");
        assert_eq!(net.connects.len(), 3, "every endpoint is connected");
        let seen = net.picks("c", 50, |_| CallOutcome::Success);
        assert_eq!(
            seen,
            BTreeMap::from([(addr(expected), 50)]),
            "index {index}"
        );
        // The endpoint it pins fails (and fails to reconnect): the picker chooses
        // among the two still READY, in EDS order.
        let id = (0..100)
            .map(SubchannelId)
            .find(|id| net.lb.subchannel_address(*id) == Some(addr(expected)))
            .expect("the pinned endpoint's subchannel");
        net.failing.insert(addr(expected));
        (net.lb).subchannel_state(net.now, id, ConnectivityState::TransientFailure);
        net.settle();
        let rest: Vec<u16> = [1, 2, 3].into_iter().filter(|p| *p != expected).collect();
        let seen = net.picks("c", 10, |_| CallOutcome::Success);
        let want = rest[index as usize % 2];
        assert_eq!(seen, BTreeMap::from([(addr(want), 10)]), "index {index}");
    }
}

/// The client decodes CDS with its config's registry (`XdsClientConfig::lb_policies`,
/// through the decode context): with the embedder's policy registered, a cluster naming
/// it is ACKed and its watcher gets the custom policy; a client with the built-in
/// registry NACKs the same response.
#[test]
fn the_client_validates_cds_with_its_registry() {
    use crate::bootstrap::Bootstrap;
    use crate::client::{Action, Event, XdsClient, XdsClientConfig};
    use crate::pb::envoy::service::discovery::v3::DiscoveryResponse;
    use crate::resource::{Cds, XdsResourceType};

    let run = |registry: Option<LbPolicyRegistry>| {
        let bootstrap = Bootstrap::from_json_str(
            r#"{"xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
                "node": {"id": "n"}}"#,
        )
        .unwrap();
        let mut config = XdsClientConfig::new(bootstrap);
        if let Some(registry) = registry {
            config.lb_policies = Arc::new(registry);
        }
        let mut client = XdsClient::new(config, 1);
        client.watch::<Cds>("c").unwrap();
        let stream = match client.poll_action() {
            Some(Action::StartStream { stream, .. }) => stream,
            other => panic!("{other:?}"),
        };
        while client.poll_action().is_some() {}
        let now = Instant::from_secs(1);
        client.handle_event(now, Event::StreamStarted { stream });
        let response = DiscoveryResponse {
            version_info: "v1".into(),
            type_url: Cds::TYPE_URL.into(),
            nonce: "n1".into(),
            resources: vec![pbuf::Any {
                type_url: Cds::TYPE_URL.into(),
                value: cluster_bytes(vec![typed_struct(PINNED, Some(index_config(1.0)))]).into(),
            }],
            ..Default::default()
        };
        let bytes = response.encode_to_vec().into();
        client.handle_event(now, Event::ResponseReceived { stream, bytes });
        let mut told = None;
        while let Some(action) = client.poll_action() {
            if let Action::Notify(n) = action {
                told = n.event.changed::<Cds>();
            }
        }
        told.expect("the watcher is told")
    };
    let (registry, _) = registry_with_pinned();
    let cluster = run(Some(registry)).expect("ACKed with the registry");
    assert_eq!(type_name_of(&cluster.lb_policy), Some(PINNED));
    let error = run(None).expect_err("NACKed without it");
    assert!(
        error.to_string().contains(PINNED),
        "the NACK names the unsupported policy: {error}"
    );
}
