//! Seeded endpoint-churn simulation, with the client simulator's habits: a seed
//! reproduces a run exactly, and a failing seed is replayed with its trace.
//!
//! - `seeds`: `XDS_LB_SIM_SEEDS` seeds (default 100) from `XDS_LB_SIM_SEED_START`;
//! - `replay`: the seed in `XDS_LB_SIM_SEED` (default 0) with its trace printed:
//!   `XDS_LB_SIM_SEED=12 cargo test -p xds-proto-core --lib lb::tests::simulation::replay -- --nocapture`
//!
//! The world: five clusters over 24 addresses (round robin, ring hash, least request
//! with outlier detection and a small circuit breaker, pick first, and an aggregate of
//! two), EDS updates that move endpoints between priorities, localities and health
//! states, connections that succeed, fail or drop, picks, call ends and time. After
//! every step the invariants hold: a pick returns a READY subchannel of an address the
//! cluster lists, one subchannel per address, connections only requested for live IDLE
//! subchannels, circuit breakers respected, timers in the future; at the end, removing
//! every cluster disconnects every subchannel exactly once.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::*;

const CLUSTERS: [&str; 4] = ["rr", "ring", "lr", "pf"];
const MAX_REQUESTS_LR: u32 = 4;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct World {
    rng: Xoshiro256PlusPlus,
    lb: LoadBalancer,
    now: Instant,
    /// The embedder's view of every live subchannel: address and last reported state.
    subchannels: BTreeMap<SubchannelId, (SocketAddr, ConnectivityState)>,
    /// Subchannels with a connection attempt under way.
    connecting: Vec<SubchannelId>,
    disconnected: BTreeSet<SubchannelId>,
    calls: Vec<(String, CallToken)>,
    /// Per cluster, the addresses of its usable endpoints.
    usable: BTreeMap<String, BTreeSet<SocketAddr>>,
    config: Clusters,
    trace: String,
}

impl World {
    fn new(seed: u64) -> World {
        World {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            lb: LoadBalancer::new(LbSettings::new(seed)),
            now: Instant::ZERO,
            subchannels: BTreeMap::new(),
            connecting: Vec::new(),
            disconnected: BTreeSet::new(),
            calls: Vec::new(),
            usable: BTreeMap::new(),
            config: Clusters::new(),
            trace: String::new(),
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n
    }

    fn random_endpoints(&mut self) -> (Vec<Priority>, BTreeSet<SocketAddr>) {
        let mut usable = BTreeSet::new();
        let priorities = 1 + self.below(2) as usize;
        let mut out = Vec::new();
        for p in 0..priorities {
            let mut localities = Vec::new();
            for l in 0..1 + self.below(3) {
                let mut endpoints = Vec::new();
                for _ in 0..self.below(4) {
                    let port = 1 + self.below(24) as u16;
                    if out
                        .iter()
                        .chain(std::iter::once(&Priority {
                            localities: localities.clone(),
                        }))
                        .flat_map(|p: &Priority| &p.localities)
                        .flat_map(|l| &l.endpoints)
                        .chain(&endpoints)
                        .any(|e: &Endpoint| e.address == addr(port))
                    {
                        continue;
                    }
                    let mut e = endpoint(port);
                    e.weight = 1 + self.below(3) as u32;
                    e.health_status = match self.below(6) {
                        0 => HealthStatus::Unhealthy,
                        1 => HealthStatus::Draining,
                        2 => HealthStatus::Healthy,
                        _ => HealthStatus::Unknown,
                    };
                    if e.health_status.is_usable() {
                        usable.insert(e.address);
                    }
                    endpoints.push(e);
                }
                localities.push(locality(
                    &format!("p{p}l{l}"),
                    1 + self.below(4) as u32,
                    endpoints,
                ));
            }
            out.push(Priority { localities });
        }
        (out, usable)
    }

    fn new_eds(&mut self, name: &str) {
        let policy = match name {
            "rr" => LbPolicy::RoundRobin,
            "ring" => LbPolicy::RingHash {
                min_ring_size: 64,
                max_ring_size: 256,
            },
            "lr" => LbPolicy::LeastRequest { choice_count: 2 },
            _ => LbPolicy::PickFirst {
                shuffle_address_list: self.below(2) == 0,
            },
        };
        let mut resource = cluster_resource(name, policy);
        if name == "lr" {
            resource.max_requests = MAX_REQUESTS_LR;
            resource.outlier_detection = Some(OutlierDetection {
                interval: Duration::from_secs(5),
                base_ejection_time: Duration::from_secs(10),
                max_ejection_time: Duration::from_secs(60),
                max_ejection_percent: 50,
                success_rate_ejection: None,
                failure_percentage_ejection: Some(FailurePercentageEjection {
                    threshold: 50,
                    enforcement_percentage: 100,
                    minimum_hosts: 1,
                    request_volume: 3,
                }),
            });
        }
        let (priorities, usable) = self.random_endpoints();
        let _ = writeln!(self.trace, "{} eds {name}: {usable:?}", self.now);
        self.usable.insert(name.to_owned(), usable);
        self.config
            .insert(name.to_owned(), Ok(eds(resource, priorities)));
        self.push_config();
    }

    fn push_config(&mut self) {
        let mut config = self.config.clone();
        let mut aggregate = cluster_resource("agg", LbPolicy::RoundRobin);
        aggregate.cluster_type = ClusterType::Aggregate {
            clusters: vec!["rr".into(), "pf".into()],
        };
        config.insert(
            "agg".into(),
            Ok(ClusterConfig {
                load_stats: None,
                cluster: Arc::new(aggregate),
                children: ClusterResolution::Aggregate {
                    leaf_clusters: vec!["rr".into(), "pf".into()],
                },
            }),
        );
        self.lb.update_clusters(self.now, &config);
    }

    /// Carries out the load balancer's actions, checking each.
    fn drain(&mut self) {
        while let Some(action) = self.lb.poll_action() {
            match action {
                LbAction::Connect {
                    subchannel,
                    address,
                } => {
                    assert!(
                        !self.disconnected.contains(&subchannel),
                        "connect after disconnect"
                    );
                    let entry = self
                        .subchannels
                        .entry(subchannel)
                        .or_insert((address, ConnectivityState::Idle));
                    assert_eq!(entry.0, address);
                    assert_eq!(
                        entry.1,
                        ConnectivityState::Idle,
                        "connect while {:?}",
                        entry.1
                    );
                    entry.1 = ConnectivityState::Connecting;
                    self.lb
                        .subchannel_state(self.now, subchannel, ConnectivityState::Connecting);
                    self.connecting.push(subchannel);
                    let _ = writeln!(self.trace, "{} connect {address}", self.now);
                }
                LbAction::Disconnect { subchannel } => {
                    assert!(self.disconnected.insert(subchannel), "disconnected twice");
                    self.subchannels.remove(&subchannel);
                    self.connecting.retain(|s| *s != subchannel);
                    let _ = writeln!(self.trace, "{} disconnect {subchannel:?}", self.now);
                }
                LbAction::Idle { subchannel } => {
                    let entry = self.subchannels.get_mut(&subchannel).expect("known");
                    assert!(
                        matches!(
                            entry.1,
                            ConnectivityState::Ready | ConnectivityState::Connecting
                        ),
                        "idled while {:?}",
                        entry.1
                    );
                    entry.1 = ConnectivityState::Idle;
                    self.connecting.retain(|s| *s != subchannel);
                    let _ = writeln!(self.trace, "{} idle {subchannel:?}", self.now);
                }
                LbAction::ResolveDns { .. } => panic!("no DNS clusters here"),
                LbAction::PickerChanged => {}
            }
        }
        let mut addresses = BTreeSet::new();
        for (address, _) in self.subchannels.values() {
            assert!(addresses.insert(*address), "two subchannels for {address}");
        }
    }

    /// The pool's view (the embedder's view, but TRANSIENT_FAILURE lasts for the
    /// backoff: the pool reports IDLE when it ends, which the embedder learns here).
    fn sync_backoff_ends(&mut self) {
        for (id, (_, state)) in self.subchannels.iter_mut() {
            if *state == ConnectivityState::TransientFailure
                && self.lb.pool.state(*id) == ConnectivityState::Idle
            {
                *state = ConnectivityState::Idle;
            }
        }
    }

    fn report(&mut self, id: SubchannelId, state: ConnectivityState) {
        if let Some(entry) = self.subchannels.get_mut(&id) {
            entry.1 = state;
            let _ = writeln!(self.trace, "{} {} -> {state:?}", self.now, entry.0);
            self.lb.subchannel_state(self.now, id, state);
        }
    }

    fn pick(&mut self) {
        let name = match self.below(5) {
            4 => "agg",
            i => CLUSTERS[i as usize],
        };
        let args = PickArgs {
            hash: (self.below(2) == 0).then(|| self.rng.next_u64()),
            random: self.rng.next_u64(),
        };
        let pick = self.lb.pick(self.now, name, &args);
        let _ = writeln!(self.trace, "{} pick {name}: {pick:?}", self.now);
        if let Pick::Complete {
            subchannel,
            address,
            call,
        } = pick
        {
            let (known, state) = self.subchannels[&subchannel];
            assert_eq!(known, address);
            assert_eq!(
                state,
                ConnectivityState::Ready,
                "picked a {state:?} subchannel"
            );
            let allowed = if name == "agg" {
                ["rr", "pf"]
                    .iter()
                    .any(|c| self.usable.get(*c).is_some_and(|u| u.contains(&address)))
            } else {
                self.usable[name].contains(&address)
            };
            assert!(allowed, "{address} is not a usable endpoint of {name}");
            self.calls.push((name.to_owned(), call));
        }
    }

    fn step(&mut self) {
        match self.below(20) {
            0 | 1 => {
                let name = CLUSTERS[self.below(4) as usize];
                self.new_eds(name);
            }
            2..=5 => {
                if !self.connecting.is_empty() {
                    let i = self.below(self.connecting.len() as u64) as usize;
                    let id = self.connecting.swap_remove(i);
                    let state = if self.below(3) == 0 {
                        ConnectivityState::TransientFailure
                    } else {
                        ConnectivityState::Ready
                    };
                    self.report(id, state);
                }
            }
            6 => {
                let ready: Vec<SubchannelId> = self
                    .subchannels
                    .iter()
                    .filter(|(_, (_, s))| *s == ConnectivityState::Ready)
                    .map(|(id, _)| *id)
                    .collect();
                if !ready.is_empty() {
                    let id = ready[self.below(ready.len() as u64) as usize];
                    self.report(id, ConnectivityState::Idle);
                }
            }
            7..=13 => self.pick(),
            14..=16 => {
                if !self.calls.is_empty() {
                    let i = self.below(self.calls.len() as u64) as usize;
                    let (_, call) = self.calls.swap_remove(i);
                    let outcome = if self.below(4) == 0 {
                        CallOutcome::Failure
                    } else {
                        CallOutcome::Success
                    };
                    self.lb.call_finished(self.now, call, outcome);
                }
            }
            _ => {
                let delay = Duration::from_millis(self.below(3000));
                self.now += delay;
                while let Some(at) = self.lb.poll_timeout().filter(|at| *at <= self.now) {
                    self.lb.handle_timeout(at.max(Instant::ZERO));
                    assert!(
                        self.lb.poll_timeout().is_none_or(|next| next > at),
                        "a timer due at {at} is still due after handle_timeout"
                    );
                    self.sync_backoff_ends();
                    self.drain();
                }
            }
        }
        self.sync_backoff_ends();
        self.drain();
        self.check_circuit_breaker();
    }

    fn check_circuit_breaker(&self) {
        if let Some(Entry::Leaf(slot)) = self.lb.names.get("lr")
            && let Some(leaf) = &self.lb.leaves[*slot as usize]
        {
            assert!(leaf.in_flight() <= MAX_REQUESTS_LR);
            let open = self.calls.iter().filter(|(c, _)| c == "lr").count() as u32;
            assert!(leaf.in_flight() <= open, "{} > {open}", leaf.in_flight());
            if let Some(outlier) = leaf.outlier() {
                let _ = outlier.ejected_count();
            }
        }
    }

    fn finish(&mut self) {
        self.lb.update_clusters(self.now, &Clusters::new());
        self.drain();
        assert!(
            self.subchannels.is_empty(),
            "left connected: {:?}",
            self.subchannels
        );
        assert_eq!(self.lb.pool.live_count(), 0);
    }
}

fn run(seed: u64, steps: usize) -> String {
    let mut world = World::new(seed);
    for name in CLUSTERS {
        world.new_eds(name);
    }
    world.drain();
    for _ in 0..steps {
        world.step();
    }
    world.finish();
    world.trace
}

#[test]
fn seeds() {
    let count = env_u64("XDS_LB_SIM_SEEDS", 100);
    let start = env_u64("XDS_LB_SIM_SEED_START", 0);
    for seed in start..start + count {
        let result = std::panic::catch_unwind(|| run(seed, 400));
        assert!(
            result.is_ok(),
            "seed {seed} failed; replay: XDS_LB_SIM_SEED={seed} cargo test -p xds-proto-core \
             --lib lb::tests::simulation::replay -- --nocapture"
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    assert_eq!(run(42, 300), run(42, 300));
    assert_ne!(
        run(42, 300),
        run(43, 300),
        "different seeds, different runs"
    );
}

#[test]
fn replay() {
    let seed = env_u64("XDS_LB_SIM_SEED", 0);
    let trace = run(seed, 400);
    println!("{trace}");
}
