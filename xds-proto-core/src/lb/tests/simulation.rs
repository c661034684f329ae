//! Seeded endpoint-churn simulation, with the client simulator's habits: a seed
//! reproduces a run exactly, and a failing seed is replayed with its trace.
//!
//! - `seeds`: `XDS_LB_SIM_SEEDS` seeds (default 100) from `XDS_LB_SIM_SEED_START`;
//! - `replay`: the seed in `XDS_LB_SIM_SEED` (default 0) with its trace printed:
//!   `XDS_LB_SIM_SEED=12 cargo test -p xds-proto-core --lib lb::tests::simulation::replay -- --nocapture`
//!
//! The world: seven clusters over 24 addresses (round robin, ring hash, least request
//! with outlier detection and a small circuit breaker, pick first, weighted round
//! robin with per-call ORCA reports, weighted round robin with out-of-band reports, and
//! an aggregate of two), EDS updates that move endpoints between priorities,
//! localities and health states, connections that succeed, fail or drop, picks, call
//! ends with their ORCA reports (one in eight hostile: NaN, negative, infinite or huge
//! values), out-of-band reports, and time. After every step the invariants hold: a
//! pick returns a READY subchannel of an address the cluster lists, one subchannel per
//! address, connections only requested for live IDLE subchannels, circuit breakers
//! respected, timers in the future, per-call reports asked for exactly on weighted
//! round robin's calls, out-of-band reports running on exactly the subchannels of the
//! cluster that wants them, at its interval. After the churn, weighted round robin
//! converges: given one locality of endpoints (some kept from the churn, with their
//! weights) reporting their true load, each gets its weight's share of the picks. At
//! the end, removing every cluster disconnects every subchannel exactly once.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::*;
use crate::orca::OrcaLoadReport;
use crate::resource::cluster::WeightedRoundRobinConfig;

const CLUSTERS: [&str; 6] = ["rr", "ring", "lr", "pf", "wrr", "oob"];
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
    calls: Vec<(String, CallToken, SocketAddr)>,
    /// The subchannels running out-of-band load reports, at their intervals.
    oob: BTreeMap<SubchannelId, Duration>,
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
            oob: BTreeMap::new(),
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
            "wrr" | "oob" => self.wrr_policy(name == "oob"),
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

    fn wrr_policy(&mut self, oob: bool) -> LbPolicy {
        let seconds = [0, 1, 3];
        let config = WeightedRoundRobinConfig {
            blackout_period: Duration::from_secs(seconds[self.below(3) as usize]),
            weight_expiration_period: Duration::from_secs(2 + 178 * self.below(2)),
            weight_update_period: Duration::from_millis(50 + self.below(1000)),
            enable_oob_load_report: oob,
            oob_reporting_period: Duration::from_secs(1 + self.below(5)),
            error_utilization_penalty: 1.0,
        };
        LbPolicy::WrrLocality(Box::new(LbPolicy::WeightedRoundRobin(config)))
    }

    /// An address's true load: 100 qps at utilization 0.1 to 0.9 by port.
    fn true_load(address: SocketAddr) -> OrcaLoadReport {
        OrcaLoadReport {
            qps: 100.0,
            cpu_utilization: 0.1 + f64::from(address.port() % 5) * 0.2,
            ..OrcaLoadReport::default()
        }
    }

    /// A report as an endpoint sends it: its true load, or one time in eight a
    /// hostile one.
    fn report_of(&mut self, address: SocketAddr) -> OrcaLoadReport {
        let mut report = Self::true_load(address);
        let bad = [f64::NAN, -1.0, f64::INFINITY, 1e300, 1e-300, 0.0, f64::MAX];
        if self.below(8) == 0 {
            report.qps = bad[self.below(7) as usize];
            report.cpu_utilization = bad[self.below(7) as usize];
            report.application_utilization = bad[self.below(7) as usize];
            report.eps = bad[self.below(7) as usize];
        }
        report
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
                    self.oob.remove(&subchannel);
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
                LbAction::LoadReports {
                    subchannel,
                    interval,
                } => {
                    assert!(
                        !self.disconnected.contains(&subchannel),
                        "load reports on a disconnected subchannel"
                    );
                    match interval {
                        Some(interval) => self.oob.insert(subchannel, interval),
                        None => self.oob.remove(&subchannel),
                    };
                }
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
        let name = match self.below(CLUSTERS.len() as u64 + 1) as usize {
            i if i == CLUSTERS.len() => "agg",
            i => CLUSTERS[i],
        };
        let args = PickArgs {
            hash: (self.below(2) == 0).then(|| self.rng.next_u64()),
            random: self.rng.next_u64(),
            override_host: None,
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
            assert_eq!(call.wants_load_report(), name == "wrr", "{name}");
            self.calls.push((name.to_owned(), call, address));
        }
    }

    fn step(&mut self) {
        match self.below(20) {
            0 | 1 => {
                let name = CLUSTERS[self.below(CLUSTERS.len() as u64) as usize];
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
                    let (_, call, address) = self.calls.swap_remove(i);
                    let outcome = if self.below(4) == 0 {
                        CallOutcome::Failure
                    } else {
                        CallOutcome::Success
                    };
                    // Every backend sends a report; the embedder decodes it only when
                    // the call wants it.
                    let report = self.report_of(address);
                    let report = call.wants_load_report().then_some(&report);
                    (self.lb).call_finished_with_report(self.now, call, outcome, report);
                }
            }
            17 => {
                if !self.oob.is_empty() {
                    let i = self.below(self.oob.len() as u64) as usize;
                    let id = *self.oob.keys().nth(i).expect("in range");
                    let address = self.subchannels.get(&id).map_or(addr(1), |s| s.0);
                    let report = self.report_of(address);
                    let _ = writeln!(self.trace, "{} oob report {address}", self.now);
                    self.lb.oob_report(self.now, id, &report);
                }
            }
            _ => {
                let delay = Duration::from_millis(self.below(3000));
                self.advance(delay);
            }
        }
        self.sync_backoff_ends();
        self.drain();
        self.check_circuit_breaker();
        self.check_oob();
    }

    /// Moves time on by `delay`, running the timers due, each then in the future.
    fn advance(&mut self, delay: Duration) {
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

    /// The embedder runs out-of-band reports on exactly the `oob` cluster's
    /// subchannels, at its interval.
    fn check_oob(&self) {
        let expected: BTreeMap<SubchannelId, Duration> = match self.lb.names.get("oob") {
            Some(Entry::Leaf(slot)) => {
                let leaf = self.lb.leaves[*slot as usize].as_ref().expect("live");
                let interval = leaf.oob_interval().expect("oob reads out-of-band reports");
                (leaf.subchannels().iter())
                    .map(|id| (*id, interval))
                    .collect()
            }
            _ => BTreeMap::new(),
        };
        assert_eq!(self.oob, expected, "out-of-band reports");
    }

    /// After the churn: `wrr` gets one locality of 2 to 5 endpoints, every one
    /// connects, reports its true load for 3 s, and then gets its weight's share of
    /// the picks (within 2 picks and 0.5 %).
    fn check_wrr_converges(&mut self) {
        let mut ports: Vec<u16> = Vec::new();
        let count = 2 + self.below(4) as usize;
        while ports.len() < count {
            let port = 1 + self.below(24) as u16;
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        let config = WeightedRoundRobinConfig {
            blackout_period: Duration::from_secs(1),
            weight_update_period: Duration::from_millis(500),
            ..WeightedRoundRobinConfig::default()
        };
        let policy = LbPolicy::WrrLocality(Box::new(LbPolicy::WeightedRoundRobin(config)));
        let endpoints = ports.iter().map(|p| endpoint(*p)).collect();
        let resource = cluster_resource("wrr", policy);
        let _ = writeln!(self.trace, "{} converge wrr over {ports:?}", self.now);
        self.config
            .insert("wrr".into(), Ok(eds(resource, one_locality(endpoints))));
        self.usable
            .insert("wrr".into(), ports.iter().map(|p| addr(*p)).collect());
        self.push_config();
        self.drain();
        let ready = |w: &World| {
            ports.iter().all(|p| {
                (w.subchannels.values())
                    .any(|(a, s)| *a == addr(*p) && *s == ConnectivityState::Ready)
            })
        };
        for _ in 0..400 {
            self.lb.pick(self.now, "wrr", &PickArgs::default());
            self.drain();
            for id in std::mem::take(&mut self.connecting) {
                self.report(id, ConnectivityState::Ready);
            }
            self.drain();
            if ready(self) {
                break;
            }
            self.advance(Duration::from_secs(1));
        }
        assert!(ready(self), "wrr's endpoints never all connected");
        let pick_and_report = |w: &mut World| -> SocketAddr {
            let random = w.rng.next_u64();
            let pick = w.lb.pick(
                w.now,
                "wrr",
                &PickArgs {
                    hash: None,
                    random,
                    override_host: None,
                },
            );
            let Pick::Complete { address, call, .. } = pick else {
                panic!("wrr: {pick:?}");
            };
            let report = Self::true_load(address);
            (w.lb).call_finished_with_report(w.now, call, CallOutcome::Success, Some(&report));
            address
        };
        for _ in 0..30 {
            for _ in 0..20 {
                pick_and_report(self);
            }
            self.advance(Duration::from_millis(100));
        }
        let n = 3000 * ports.len() as u64;
        let mut seen: BTreeMap<SocketAddr, u64> = BTreeMap::new();
        for _ in 0..n {
            *seen.entry(pick_and_report(self)).or_default() += 1;
        }
        let weights: Vec<f64> = (ports.iter())
            .map(|p| 100.0 / Self::true_load(addr(*p)).cpu_utilization)
            .collect();
        let total: f64 = weights.iter().sum();
        for (port, weight) in ports.iter().zip(&weights) {
            let want = n as f64 * weight / total;
            let got = seen.get(&addr(*port)).copied().unwrap_or(0) as f64;
            assert!(
                (got - want).abs() <= 2.0 + want * 0.005,
                "port {port}: {got} picks, expected {want:.1} ({seen:?})"
            );
        }
    }

    fn check_circuit_breaker(&self) {
        if let Some(Entry::Leaf(slot)) = self.lb.names.get("lr")
            && let Some(leaf) = &self.lb.leaves[*slot as usize]
        {
            assert!(leaf.in_flight() <= MAX_REQUESTS_LR);
            let open = self.calls.iter().filter(|(c, ..)| c == "lr").count() as u32;
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
        assert!(
            self.oob.is_empty(),
            "out-of-band reports left: {:?}",
            self.oob
        );
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
    world.check_wrr_converges();
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
