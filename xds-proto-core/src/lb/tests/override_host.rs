//! A55's override host in the pick: a READY host of the cluster whose health the
//! cluster allows is picked every time; an IDLE one is connected and the pick queued,
//! a CONNECTING one queues; an unknown or disallowed host, or none, picks as usual.

use super::*;
use crate::resource::cluster::OverrideHostStatus;

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
    use crate::resource::endpoint::HealthStatus;
    let default = OverrideHostStatus::default();
    assert!(default.contains(HealthStatus::Unknown) && default.contains(HealthStatus::Healthy));
    assert!(!default.contains(HealthStatus::Draining));
    assert!(!OverrideHostStatus::NONE.contains(HealthStatus::Healthy));
}
