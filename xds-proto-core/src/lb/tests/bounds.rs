//! Numbers from the network (and the ring size cap from the user) that size a loop, a
//! sum or an allocation in the load balancer: each is bounded as gRPC bounds it.

use super::*;
use crate::lb::layout::Layout;
use crate::lb::policy::PolicyKind;
use crate::resource::cluster::{MAX_CHOICE_COUNT, MAX_RING_SIZE};

fn ring_hash(min_ring_size: u64, max_ring_size: u64) -> LbPolicy {
    LbPolicy::RingHash {
        min_ring_size,
        max_ring_size,
    }
}

/// Picks with 64 spread hashes; the addresses that answered.
fn hashed_picks(net: &mut Net, cluster: &str) -> BTreeSet<SocketAddr> {
    let mut seen = BTreeSet::new();
    for _ in 0..3 {
        for i in 0..64u64 {
            let args = PickArgs {
                hash: Some(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                random: i,
                override_host: None,
            };
            if let Pick::Complete { address, .. } = net.lb.pick(net.now, cluster, &args) {
                seen.insert(address);
            }
            net.settle();
        }
    }
    seen
}

/// Locality weight × endpoint weight is up to about 2^64 per endpoint: two such
/// endpoints overflowed the ring's `u64` total (a panic in debug builds; in release an
/// empty ring, or a ring-building loop of some 10^12 entries).
#[test]
fn ring_hash_weights_at_their_limits_build_a_bounded_ring() {
    let mut net = Net::new();
    let heavy = |port| Endpoint {
        weight: u32::MAX,
        ..endpoint(port)
    };
    let endpoints = vec![heavy(1), heavy(2), endpoint(3)];
    let priorities = vec![Priority {
        localities: vec![locality("r", u32::MAX, endpoints)],
    }];
    net.update(vec![eds(
        cluster_resource("c", ring_hash(1024, MAX_RING_SIZE)),
        priorities,
    )]);
    let seen = hashed_picks(&mut net, "c");
    let rings = net.lb.ring_sizes();
    assert_eq!(rings.len(), 1, "{rings:?}");
    let (endpoints, entries) = rings[0];
    assert_eq!(endpoints, 3);
    assert!(
        (1..=DEFAULT_RING_SIZE_CAP as usize).contains(&entries),
        "{entries} entries"
    );
    assert_eq!(
        seen,
        BTreeSet::from([addr(1), addr(2)]),
        "the two heavy endpoints share the ring; the light one gets no entry"
    );
}

/// The cap comes from the user: 0 made every ring empty (every pick failed), and a cap
/// above xDS's 8M would let a ring grow past what any control plane may ask for.
#[test]
fn the_ring_size_cap_is_brought_into_1_to_8m() {
    for (requested, used) in [
        (0, 1),
        (1, 1),
        (4096, 4096),
        (MAX_RING_SIZE, MAX_RING_SIZE),
        (MAX_RING_SIZE + 1, MAX_RING_SIZE),
        (u64::MAX, MAX_RING_SIZE),
    ] {
        let mut settings = LbSettings::new(1);
        settings.ring_size_cap = requested;
        let lb = LoadBalancer::new(settings);
        assert_eq!(lb.settings().ring_size_cap, used, "requested {requested}");
    }
    let mut net = Net::new();
    let mut settings = LbSettings::new(7);
    settings.ring_size_cap = 0;
    net.lb = LoadBalancer::new(settings);
    net.update(vec![eds(
        cluster_resource("c", ring_hash(1024, 4096)),
        simple(&[1, 2, 3]),
    )]);
    let seen = hashed_picks(&mut net, "c");
    assert_eq!(net.lb.ring_sizes(), vec![(3, 1)]);
    assert_eq!(
        seen.len(),
        1,
        "a one-entry ring sends every hash to one endpoint"
    );
}

/// A48: a `choice_count` above 10 is used as 10 (a CDS value near 2^32 made every pick
/// sample that many times); decoding has already rejected one below 2.
#[test]
fn least_request_samples_at_most_ten_endpoints() {
    for (sent, used) in [(2, 2), (10, 10), (11, MAX_CHOICE_COUNT), (u32::MAX, 10)] {
        let layout = Layout::of(&LbPolicy::LeastRequest { choice_count: sent }, 4096);
        assert!(
            matches!(layout.policy, PolicyKind::LeastRequest { choice_count } if choice_count == used),
            "choice_count {sent}: {:?}",
            layout.policy
        );
    }
    let mut net = Net::new();
    let policy = LbPolicy::LeastRequest {
        choice_count: u32::MAX,
    };
    net.update(vec![eds(cluster_resource("c", policy), simple(&[1, 2]))]);
    net.pick("c", 0);
    let seen = net.picks("c", 100, |_| CallOutcome::Success);
    assert_eq!(seen.values().sum::<u64>(), 100);
}

/// A50 allows an outlier-detection `interval` of 0: the sweep was due again at the
/// instant it ran, so `handle_timeout(now)` never left the timer in the future and an
/// embedder's timer loop spun without time moving.
#[test]
fn an_outlier_interval_of_zero_leaves_no_timer_due_after_it_runs() {
    let mut net = Net::new();
    let mut resource = cluster_resource("c", LbPolicy::RoundRobin);
    let mut config = failure_percentage(50);
    config.interval = Duration::ZERO;
    resource.outlier_detection = Some(config);
    net.update(vec![eds(resource, simple(&[1, 2, 3]))]);
    net.pick("c", 0);
    for step in 0..5u64 {
        net.now = Instant::from_millis(step * 3);
        net.lb.handle_timeout(net.now);
        net.settle();
        let next = net.lb.poll_timeout().expect("the sweep timer");
        assert!(
            next > net.now,
            "due at {next:?} after running at {:?}",
            net.now
        );
    }
}
