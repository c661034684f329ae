//! A55's override host in the pick: a READY host of the cluster whose health the
//! cluster allows is picked every time; an IDLE one is connected and the pick queued,
//! a CONNECTING one queues; an unknown or disallowed host, or none, picks as usual.
//! A DRAINING host is kept for its sessions (and its connection held) only when
//! `override_host_status` includes DRAINING; no policy nor failover ever counts it.

use super::*;
use crate::resource::cluster::OverrideHostStatus;
use crate::resource::endpoint::HealthStatus;

fn pick_with(net: &mut Net, host: Option<SocketAddr>, random: u64) -> Pick {
    let args = PickArgs {
        hash: None,
        random,
        override_host: host,
    };
    let pick = net.lb.pick(net.now, "c", &args);
    net.settle();
    pick
}

fn picked(pick: &Pick) -> Option<SocketAddr> {
    match pick {
        Pick::Complete { address, .. } => Some(*address),
        _ => None,
    }
}

/// Addresses of `n` picks (random 0..n) with `host`, calls finished at once.
fn addresses(net: &mut Net, host: Option<SocketAddr>, n: u64) -> BTreeSet<SocketAddr> {
    (0..n)
        .map(|i| {
            let pick = pick_with(net, host, i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            if let Pick::Complete { call, .. } = &pick {
                net.lb.call_finished(net.now, *call, CallOutcome::Success);
            }
            picked(&pick).expect("a READY endpoint")
        })
        .collect()
}

fn round_robin(net: &mut Net, status: OverrideHostStatus) {
    let mut resource = cluster_resource("c", LbPolicy::RoundRobin);
    resource.override_host_status = status;
    net.update(vec![eds(resource, simple(&[1, 2, 3]))]);
    net.pick("c", 0);
}

#[test]
fn a_ready_override_host_is_picked_every_time() {
    let mut net = Net::new();
    round_robin(&mut net, OverrideHostStatus::DEFAULT);
    assert_eq!(addresses(&mut net, None, 12).len(), 3, "round robin");
    assert_eq!(
        addresses(&mut net, Some(addr(2)), 12),
        BTreeSet::from([addr(2)])
    );
}

#[test]
fn a_host_not_in_the_cluster_or_not_allowed_picks_as_usual() {
    let mut net = Net::new();
    round_robin(&mut net, OverrideHostStatus::DEFAULT);
    assert_eq!(addresses(&mut net, Some(addr(9)), 12).len(), 3);
    // An empty override_host_status allows no host.
    let mut net = Net::new();
    round_robin(&mut net, OverrideHostStatus::NONE);
    assert_eq!(addresses(&mut net, Some(addr(2)), 12).len(), 3);
}

#[test]
fn an_idle_override_host_is_connected_and_a_connecting_one_queues() {
    let mut net = Net::new();
    let policy = LbPolicy::PickFirst {
        shuffle_address_list: false,
    };
    net.update(vec![eds(cluster_resource("c", policy), simple(&[1, 2]))]);
    net.hanging.insert(addr(2));
    assert_eq!(picked(&pick_with(&mut net, None, 0)), None, "starting");
    assert_eq!(picked(&pick_with(&mut net, None, 0)), Some(addr(1)));
    assert_eq!(net.connects, vec![addr(1)], "pick_first connects one");
    // addr(2) is IDLE: the override connects it and queues; CONNECTING, it queues.
    assert_eq!(pick_with(&mut net, Some(addr(2)), 0), Pick::Queue);
    assert_eq!(net.connects, vec![addr(1), addr(2)]);
    assert_eq!(pick_with(&mut net, Some(addr(2)), 0), Pick::Queue);
    net.end_attempt(addr(2), ConnectivityState::Ready);
    assert_eq!(
        picked(&pick_with(&mut net, Some(addr(2)), 0)),
        Some(addr(2))
    );
    // In TRANSIENT_FAILURE it is passed over.
    let mut net = Net::new();
    let policy = LbPolicy::PickFirst {
        shuffle_address_list: false,
    };
    net.update(vec![eds(cluster_resource("c", policy), simple(&[1, 2]))]);
    net.failing.insert(addr(2));
    net.hanging.insert(addr(2));
    pick_with(&mut net, None, 0);
    assert_eq!(pick_with(&mut net, Some(addr(2)), 0), Pick::Queue);
    net.end_attempt(addr(2), ConnectivityState::TransientFailure);
    assert_eq!(
        picked(&pick_with(&mut net, Some(addr(2)), 0)),
        Some(addr(1))
    );
}

#[test]
fn the_override_host_status_defaults_to_unknown_and_healthy() {
    let default = OverrideHostStatus::default();
    assert!(default.contains(HealthStatus::Unknown) && default.contains(HealthStatus::Healthy));
    assert!(!default.contains(HealthStatus::Draining));
    assert!(!OverrideHostStatus::NONE.contains(HealthStatus::Healthy));
}

/// `override_host_status` [UNKNOWN, HEALTHY, DRAINING], as CDS gives it.
fn with_draining() -> OverrideHostStatus {
    use crate::pb::envoy::config::cluster::v3 as cluster_pb;
    use crate::pb::envoy::config::core::v3 as core_pb;
    use prost::Message;
    let ads = core_pb::ConfigSource {
        config_source_specifier: Some(core_pb::config_source::ConfigSourceSpecifier::Ads(
            core_pb::AggregatedConfigSource {},
        )),
        ..Default::default()
    };
    let statuses = [
        core_pb::HealthStatus::Unknown,
        core_pb::HealthStatus::Healthy,
        core_pb::HealthStatus::Draining,
    ];
    let cluster = cluster_pb::Cluster {
        name: "c".into(),
        cluster_discovery_type: Some(cluster_pb::cluster::ClusterDiscoveryType::Type(
            cluster_pb::cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster_pb::cluster::EdsClusterConfig {
            eds_config: Some(ads),
            service_name: String::new(),
        }),
        common_lb_config: Some(cluster_pb::cluster::CommonLbConfig {
            override_host_status: Some(core_pb::HealthStatusSet {
                statuses: statuses.iter().map(|s| *s as i32).collect(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let (_, resource) = crate::resource::cluster::decode(&cluster.encode_to_vec()).unwrap();
    assert!(
        resource
            .override_host_status
            .contains(HealthStatus::Draining)
    );
    resource.override_host_status
}

/// Round robin over `ports`, those in `draining` DRAINING.
fn draining_update(net: &mut Net, status: OverrideHostStatus, ports: &[u16], draining: &[u16]) {
    let mut resource = cluster_resource("c", LbPolicy::RoundRobin);
    resource.override_host_status = status;
    let endpoints = (ports.iter())
        .map(|p| {
            let mut e = endpoint(*p);
            if draining.contains(p) {
                e.health_status = HealthStatus::Draining;
            }
            e
        })
        .collect();
    net.update(vec![eds(resource, one_locality(endpoints))]);
}

#[test]
fn a_draining_host_keeps_its_sessions_and_connection_when_allowed() {
    let mut net = Net::new();
    draining_update(&mut net, with_draining(), &[1, 2, 3], &[]);
    net.pick("c", 0);
    assert_eq!(
        addresses(&mut net, Some(addr(2)), 6),
        BTreeSet::from([addr(2)])
    );
    // Endpoint 2 turns DRAINING: round robin drops it, its sessions stay on it.
    draining_update(&mut net, with_draining(), &[1, 2, 3], &[2]);
    assert_eq!(
        addresses(&mut net, Some(addr(2)), 12),
        BTreeSet::from([addr(2)])
    );
    assert_eq!(
        addresses(&mut net, None, 30),
        BTreeSet::from([addr(1), addr(3)]),
        "never picked without the override"
    );
    // Its connection is kept, past the retention of an unused subchannel too.
    net.advance_to(net.now + super::super::subchannel::CHILD_RETENTION * 2);
    assert!(net.disconnects.is_empty() && net.idled.is_empty());
    assert_eq!(net.connects, vec![addr(1), addr(2), addr(3)]);
    // The server closes it: the next session pick reconnects it and waits.
    let Pick::Complete { subchannel, .. } = pick_with(&mut net, Some(addr(2)), 0) else {
        panic!("addr(2) is READY");
    };
    net.hanging.insert(addr(2));
    net.lb
        .subchannel_state(net.now, subchannel, ConnectivityState::Idle);
    net.settle();
    assert_eq!(pick_with(&mut net, Some(addr(2)), 0), Pick::Queue);
    assert_eq!(net.connects.last(), Some(&addr(2)));
    net.end_attempt(addr(2), ConnectivityState::Ready);
    assert_eq!(
        picked(&pick_with(&mut net, Some(addr(2)), 0)),
        Some(addr(2))
    );
    // An update without the endpoint closes it; its sessions move.
    draining_update(&mut net, with_draining(), &[1, 3], &[]);
    assert_eq!(net.disconnects, vec![subchannel]);
    assert_eq!(addresses(&mut net, Some(addr(2)), 12).len(), 2);
}

#[test]
fn a_draining_host_is_dropped_when_override_host_status_leaves_draining_out() {
    let mut net = Net::new();
    draining_update(&mut net, with_draining(), &[1, 2, 3], &[2]);
    net.pick("c", 0);
    assert_eq!(
        net.connects,
        vec![addr(1), addr(3)],
        "round robin's endpoints"
    );
    // A session's first pick connects the (IDLE) draining host and waits.
    assert_eq!(pick_with(&mut net, Some(addr(2)), 0), Pick::Queue);
    assert_eq!(
        addresses(&mut net, Some(addr(2)), 6),
        BTreeSet::from([addr(2)])
    );
    assert!(net.disconnects.is_empty());
    // Without DRAINING in the set (the default), the host is released and passed over.
    draining_update(&mut net, OverrideHostStatus::DEFAULT, &[1, 2, 3], &[2]);
    assert_eq!(net.disconnects.len(), 1);
    assert_eq!(
        addresses(&mut net, Some(addr(2)), 12),
        BTreeSet::from([addr(1), addr(3)])
    );
    // Nor is it ever connected for a session while the set leaves DRAINING out.
    let mut net = Net::new();
    draining_update(&mut net, OverrideHostStatus::DEFAULT, &[1, 2], &[2]);
    net.pick("c", 0);
    assert_eq!(
        addresses(&mut net, Some(addr(2)), 6),
        BTreeSet::from([addr(1)])
    );
    assert_eq!(net.connects, vec![addr(1)]);
}

#[test]
fn a_draining_endpoint_never_counts_for_priority_failover() {
    let mut net = Net::new();
    let mut resource = cluster_resource("c", LbPolicy::RoundRobin);
    resource.override_host_status = with_draining();
    let priorities = |first: HealthStatus| {
        let mut e = endpoint(1);
        e.health_status = first;
        vec![
            Priority {
                localities: vec![locality("p0", 1, vec![e])],
            },
            Priority {
                localities: vec![locality("p1", 1, vec![endpoint(2)])],
            },
        ]
    };
    net.update(vec![eds(
        resource.clone(),
        priorities(HealthStatus::Healthy),
    )]);
    net.pick("c", 0);
    assert_eq!(addresses(&mut net, None, 6), BTreeSet::from([addr(1)]));
    // Endpoint 1, priority 0's only one, drains: priority 1 takes over although 1's
    // connection is READY and kept (priority 0 stays started, as gRPC's does).
    net.update(vec![eds(resource, priorities(HealthStatus::Draining))]);
    net.pick("c", 0);
    assert_eq!(addresses(&mut net, None, 12), BTreeSet::from([addr(2)]));
    assert_eq!(net.lb.cluster_state("c"), Some(ConnectivityState::Ready));
    assert!(net.disconnects.is_empty(), "1's connection is kept");
    // A session names hosts of the priority in use only (A55's policy is per priority).
    assert_eq!(
        addresses(&mut net, Some(addr(1)), 6),
        BTreeSet::from([addr(2)])
    );
}
