//! Weighted round robin (A58) through the load balancer, with ORCA reports per call
//! and out of band: shares follow the reported weights once the blackout is over,
//! blackout and expiration on the virtual clock to the nanosecond, the weight update
//! timer, reconnects and EDS updates; and two properties against reference models (the
//! weight store against a model over the history of reports, and the pick shares
//! against the weights, mean substitution included).

use quickcheck::{QuickCheck, TestResult};

use super::*;
use crate::lb::wrr_weights::{EndpointWeights, WrrSettings};
use crate::orca::OrcaLoadReport;
use crate::resource::cluster::WeightedRoundRobinConfig;

fn wrr_policy(blackout: Duration, update: Duration, oob: Option<Duration>) -> LbPolicy {
    LbPolicy::WrrLocality(Box::new(LbPolicy::WeightedRoundRobin(
        WeightedRoundRobinConfig {
            blackout_period: blackout,
            weight_update_period: update,
            enable_oob_load_report: oob.is_some(),
            oob_reporting_period: oob.unwrap_or(Duration::from_secs(10)),
            ..WeightedRoundRobinConfig::default()
        },
    )))
}

fn report(qps: f64, utilization: f64) -> OrcaLoadReport {
    OrcaLoadReport {
        qps,
        cpu_utilization: utilization,
        ..OrcaLoadReport::default()
    }
}

/// What endpoint `port` reports: 100 qps at utilization `port / 10`, a weight of
/// `1000 / port`.
fn load(address: SocketAddr) -> Option<OrcaLoadReport> {
    Some(report(100.0, f64::from(address.port()) / 10.0))
}

const SECOND: Duration = Duration::from_secs(1);

impl Net {
    /// Picks `n` times at the current time, ending each call with `report`'s report
    /// for its address; counts the picked addresses.
    fn picks_reporting(
        &mut self,
        cluster: &str,
        n: u64,
        report: impl Fn(SocketAddr) -> Option<OrcaLoadReport>,
    ) -> BTreeMap<SocketAddr, u64> {
        let mut seen = BTreeMap::new();
        for i in 0..n {
            match self.pick(cluster, i) {
                Pick::Complete { address, call, .. } => {
                    *seen.entry(address).or_default() += 1;
                    let r = report(address);
                    let outcome = CallOutcome::Success;
                    (self.lb).call_finished_with_report(self.now, call, outcome, r.as_ref());
                }
                other => panic!("pick {i} on {cluster}: {other:?}"),
            }
        }
        seen
    }

    /// The subchannel of `address`, found by picking (the call ends unreported).
    fn subchannel_of(&mut self, cluster: &str, address: SocketAddr) -> SubchannelId {
        for i in 0..1000 {
            if let Pick::Complete {
                subchannel,
                address: picked,
                call,
            } = self.pick(cluster, i)
            {
                self.lb.call_finished(self.now, call, CallOutcome::Success);
                if picked == address {
                    return subchannel;
                }
            }
        }
        panic!("{address} is never picked");
    }

    fn wrr_cluster(&mut self, ports: &[u16], blackout: Duration) {
        let policy = wrr_policy(blackout, SECOND, None);
        self.update(vec![eds(cluster_resource("c", policy), simple(ports))]);
    }
}

/// Each count within `slack` of `total` split by `weights` (by port).
fn assert_shares(seen: &BTreeMap<SocketAddr, u64>, weights: &[(u16, f64)], slack: f64) {
    let total: u64 = seen.values().sum();
    let sum: f64 = weights.iter().map(|(_, w)| w).sum();
    for (port, weight) in weights {
        let expected = total as f64 * weight / sum;
        let got = seen.get(&addr(*port)).copied().unwrap_or(0) as f64;
        assert!(
            (got - expected).abs() <= slack,
            "port {port}: {got} picks, expected {expected:.1}: {seen:?}"
        );
    }
}

#[test]
fn picks_follow_the_reported_weights_once_the_blackout_is_over() {
    let mut net = Net::new();
    net.wrr_cluster(&[1, 2, 4], 10 * SECOND);
    assert_eq!(net.pick("c", 0), Pick::Queue, "the first pick connects");
    // Reports from the start; within the blackout every endpoint weighs the same.
    let seen = net.picks_reporting("c", 700, load);
    assert_shares(&seen, &[(1, 1.0), (2, 1.0), (4, 1.0)], 1.0);
    net.advance_to(Instant::ZERO + Duration::from_millis(9_999));
    let seen = net.picks_reporting("c", 700, load);
    assert_shares(&seen, &[(1, 1.0), (2, 1.0), (4, 1.0)], 1.0);
    // The first scheduler rebuilt 10 s after the first reports uses the weights
    // 1000, 500 and 250.
    net.advance_to(Instant::ZERO + 10 * SECOND);
    let seen = net.picks_reporting("c", 7000, load);
    assert_shares(&seen, &[(1, 4.0), (2, 2.0), (4, 1.0)], 1.0);
}

#[test]
fn the_error_penalty_lowers_a_failing_endpoints_weight() {
    let mut net = Net::new();
    net.wrr_cluster(&[1, 2], Duration::ZERO);
    net.pick("c", 0);
    // Both report 100 qps at utilization 0.5; endpoint 2 also 50 errors per second:
    // 100 / (0.5 + 50 / 100 × 1.0) = 100, against 200.
    let with_errors = |a: SocketAddr| {
        let mut r = report(100.0, 0.5);
        r.eps = if a.port() == 2 { 50.0 } else { 0.0 };
        Some(r)
    };
    net.picks_reporting("c", 10, with_errors);
    net.advance_to(Instant::ZERO + SECOND);
    let seen = net.picks_reporting("c", 3000, with_errors);
    assert_shares(&seen, &[(1, 2.0), (2, 1.0)], 1.0);
}

#[test]
fn weights_are_recomputed_every_update_period_of_at_least_100_ms() {
    let mut net = Net::new();
    let policy = wrr_policy(Duration::ZERO, Duration::from_millis(10), None);
    net.update(vec![eds(cluster_resource("c", policy), simple(&[1, 2]))]);
    assert_eq!(
        net.lb.poll_timeout(),
        None,
        "no timer before the cluster starts"
    );
    net.pick("c", 0);
    let first = Instant::ZERO + Duration::from_millis(100);
    assert_eq!(
        net.lb.poll_timeout(),
        Some(first),
        "10 ms is raised to 100 ms"
    );
    // Reports at 0 with blackout 0: the weights count from the rebuild at 100 ms on,
    // not before.
    net.picks_reporting("c", 10, load);
    net.advance_to(first - Duration::from_nanos(1));
    let seen = net.picks_reporting("c", 300, load);
    assert_shares(&seen, &[(1, 1.0), (2, 1.0)], 1.0);
    net.advance_to(first);
    assert_eq!(
        net.lb.poll_timeout(),
        Some(first + Duration::from_millis(100))
    );
    let seen = net.picks_reporting("c", 300, load);
    assert_shares(&seen, &[(1, 2.0), (2, 1.0)], 1.0);
}

#[test]
fn only_per_call_weighted_round_robin_asks_for_call_reports() {
    let mut net = Net::new();
    let oob = wrr_policy(SECOND, SECOND, Some(SECOND));
    net.update(vec![
        eds(cluster_resource("rr", LbPolicy::RoundRobin), simple(&[1])),
        eds(
            cluster_resource("per-call", wrr_policy(SECOND, SECOND, None)),
            simple(&[2]),
        ),
        eds(cluster_resource("oob", oob), simple(&[3])),
    ]);
    for (cluster, wanted) in [("rr", false), ("per-call", true), ("oob", false)] {
        net.pick(cluster, 0);
        let Pick::Complete { call, .. } = net.pick(cluster, 0) else {
            panic!("{cluster} picks");
        };
        assert_eq!(call.wants_load_report(), wanted, "{cluster}");
        net.lb.call_finished(net.now, call, CallOutcome::Success);
    }
}

#[test]
fn out_of_band_reports_run_at_the_shortest_interval_any_cluster_asks() {
    let mut net = Net::new();
    let every = |s| wrr_policy(SECOND, SECOND, Some(Duration::from_secs(s)));
    let a = eds(cluster_resource("a", every(10)), simple(&[1, 2]));
    let b = eds(cluster_resource("b", every(5)), simple(&[2, 3]));
    net.update(vec![a.clone(), b]);
    let intervals = |net: &Net| -> BTreeMap<SocketAddr, u64> {
        (net.load_reports.iter())
            .map(|(id, i)| (net.lb.subchannel_address(*id).unwrap(), i.as_secs()))
            .collect()
    };
    let expected = BTreeMap::from([(addr(1), 10), (addr(2), 5), (addr(3), 5)]);
    assert_eq!(intervals(&net), expected);
    // b goes: 3 is disconnected (nothing to stop), 2 goes back to a's 10 s.
    net.update(vec![a]);
    assert_eq!(
        intervals(&net),
        BTreeMap::from([(addr(1), 10), (addr(2), 10)])
    );
    // a reads per-call reports from now on: the streams stop.
    net.update(vec![eds(
        cluster_resource("a", wrr_policy(SECOND, SECOND, None)),
        simple(&[1, 2]),
    )]);
    assert!(net.load_reports.is_empty(), "{:?}", net.load_reports);
}

#[test]
fn out_of_band_reports_weigh_and_per_call_ones_are_then_ignored() {
    let mut net = Net::new();
    let policy = wrr_policy(Duration::ZERO, SECOND, Some(SECOND));
    net.update(vec![eds(cluster_resource("c", policy), simple(&[1, 2]))]);
    net.pick("c", 0);
    let subchannels: Vec<SubchannelId> = net.load_reports.keys().copied().collect();
    for id in &subchannels {
        let address = net.lb.subchannel_address(*id).unwrap();
        let r = load(address).unwrap();
        net.lb.oob_report(net.now, *id, &r);
    }
    net.advance_to(Instant::ZERO + SECOND);
    // Per-call reports that would invert the weights are not read.
    let inverted = |a: SocketAddr| Some(report(100.0, 1.0 / f64::from(a.port())));
    let seen = net.picks_reporting("c", 3000, inverted);
    assert_shares(&seen, &[(1, 2.0), (2, 1.0)], 1.0);
}

#[test]
fn an_endpoint_that_reconnects_starts_a_new_blackout() {
    let mut net = Net::new();
    net.wrr_cluster(&[1, 2, 4], SECOND);
    net.pick("c", 0);
    net.picks_reporting("c", 30, load);
    net.advance_to(Instant::ZERO + SECOND);
    let seen = net.picks_reporting("c", 7000, load);
    assert_shares(&seen, &[(1, 4.0), (2, 2.0), (4, 1.0)], 1.0);
    // Endpoint 1's connection closes; the embedder reconnects it at once. Until it
    // has reported for a second again it weighs the mean of the others, relative to
    // the largest (500): (1 + 0.5) / 2 × 500 = 375.
    let id = net.subchannel_of("c", addr(1));
    net.lb
        .subchannel_state(net.now, id, ConnectivityState::Idle);
    net.settle();
    net.advance_to(Instant::ZERO + 2 * SECOND);
    let seen = net.picks_reporting("c", 9000, load);
    assert_shares(&seen, &[(1, 375.0), (2, 500.0), (4, 250.0)], 2.0);
    net.advance_to(Instant::ZERO + 3 * SECOND);
    let seen = net.picks_reporting("c", 7000, load);
    assert_shares(&seen, &[(1, 4.0), (2, 2.0), (4, 1.0)], 1.0);
}

#[test]
fn weights_outlive_an_eds_update() {
    let mut net = Net::new();
    net.wrr_cluster(&[1, 2, 4], SECOND);
    net.pick("c", 0);
    net.picks_reporting("c", 30, load);
    net.advance_to(Instant::ZERO + SECOND);
    // Endpoint 5 joins: the others keep their weights at once, and the newcomer
    // weighs their mean relative to the largest: (1 + 0.5 + 0.25) / 3 × 1000.
    net.wrr_cluster(&[1, 2, 4, 5], SECOND);
    let seen = net.picks_reporting("c", 9000, |_| None);
    let mean = 1750.0 / 3.0;
    assert_shares(
        &seen,
        &[(1, 1000.0), (2, 500.0), (4, 250.0), (5, mean)],
        2.0,
    );
}

#[test]
fn reports_without_utilization_or_qps_or_with_hostile_values_are_ignored() {
    let settings = WrrSettings {
        blackout: Duration::ZERO,
        expiration: 10 * SECOND,
        update_period: SECOND,
        error_penalty: 1.0,
        oob_interval: None,
    };
    let id = SubchannelId::new(0, 0);
    let mut weights = EndpointWeights::new(Instant::ZERO, settings);
    weights.set_endpoints([&[id][..]].into_iter());
    let now = Instant::ZERO;
    for bad in [
        report(0.0, 0.5),
        report(100.0, 0.0),
        report(f64::NAN, 0.5),
        report(100.0, f64::NAN),
        report(-1.0, 0.5),
        report(100.0, -0.5),
        OrcaLoadReport {
            eps: f64::NAN,
            ..report(100.0, 0.5)
        },
        // An error rate so high the utilization is infinite: weight 0.
        OrcaLoadReport {
            eps: f64::MAX,
            ..report(1e-300, 0.5)
        },
    ] {
        assert!(!weights.report(now, id, &bad), "{bad:?}");
        assert_eq!(weights.weight(now, id), 0.0, "{bad:?}");
    }
    // Huge but finite values give a finite weight; the scheduler bounds the ratio.
    assert!(weights.report(now, id, &report(1e300, 1e-300)));
    assert_eq!(weights.weight(now, id), f64::MAX);
    // application_utilization is preferred to cpu_utilization.
    let mut both = report(100.0, 0.5);
    both.application_utilization = 0.25;
    assert!(weights.report(now, id, &both));
    assert_eq!(weights.weight(now, id), 400.0);
    // A report from an address the cluster does not list counts for nothing.
    assert!(!weights.report(now, SubchannelId::new(1, 0), &both));
}

#[test]
fn blackout_and_expiration_are_exact_to_the_nanosecond() {
    let settings = WrrSettings {
        blackout: 10 * SECOND,
        expiration: 30 * SECOND,
        update_period: SECOND,
        error_penalty: 1.0,
        oob_interval: None,
    };
    let id = SubchannelId::new(0, 0);
    let mut w = EndpointWeights::new(Instant::ZERO, settings);
    w.set_endpoints([&[id][..]].into_iter());
    let at = |s: u64| Instant::ZERO + Duration::from_secs(s);
    let ns = Duration::from_nanos(1);
    assert!(w.report(at(5), id, &report(100.0, 0.5)));
    assert_eq!(w.weight(at(15) - ns, id), 0.0, "within the blackout");
    assert_eq!(w.weight(at(15), id), 200.0, "blackout over");
    w.report(at(20), id, &report(100.0, 0.25));
    assert_eq!(w.weight(at(50) - ns, id), 400.0, "not yet stale");
    assert_eq!(
        w.weight(at(50), id),
        0.0,
        "stale 30 s after the last report"
    );
    // Fresh reports start the blackout again.
    w.report(at(55), id, &report(100.0, 0.5));
    assert_eq!(w.weight(at(65) - ns, id), 0.0);
    assert_eq!(w.weight(at(65), id), 200.0);
    // READY again: nothing until new reports, and a new blackout from them.
    w.became_ready(id);
    assert_eq!(w.weight(at(66), id), 0.0);
    w.report(at(70), id, &report(100.0, 0.5));
    assert_eq!(w.weight(at(80) - ns, id), 0.0);
    assert_eq!(w.weight(at(80), id), 200.0);
}

/// One step of a weight store's history: after `dt_ms`, an event.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A report weighing `qps / 0.5` (`qps` 0: an empty report, ignored).
    Report(u8),
    Ready,
    Query,
}

/// The reference: A58's rules restated over the whole history (the weight counts
/// when the last report since the last READY is younger than the expiration, and the
/// reports since the last READY or the last query that found them stale began at least
/// a blackout ago).
struct History {
    steps: Vec<(Instant, Step)>,
}

impl History {
    fn weight(&self, now: Instant, settings: &WrrSettings) -> f64 {
        let since_ready = (self.steps.iter())
            .rposition(|(_, s)| matches!(s, Step::Ready))
            .map_or(0, |i| i + 1);
        let counted = |s: &Step| matches!(s, Step::Report(q) if *q > 0);
        let Some(last) = self.steps[since_ready..]
            .iter()
            .rposition(|(_, s)| counted(s))
        else {
            return 0.0;
        };
        let (last_at, Step::Report(qps)) = self.steps[since_ready + last] else {
            unreachable!()
        };
        if now - last_at >= settings.expiration {
            return 0.0;
        }
        // Queries that found the weight stale, after the last READY.
        let mut run_start = since_ready;
        for i in since_ready..self.steps.len() {
            let (at, step) = self.steps[i];
            if matches!(step, Step::Query) {
                let before = (self.steps[since_ready..i].iter()).rposition(|(_, s)| counted(s));
                if let Some(j) = before
                    && at - self.steps[since_ready + j].0 >= settings.expiration
                {
                    run_start = i + 1;
                }
            }
        }
        let first = (self.steps[run_start..].iter()).position(|(_, s)| counted(s));
        let Some(first) = first else { return 0.0 };
        let started = self.steps[run_start + first].0;
        if !settings.blackout.is_zero() && now - started < settings.blackout {
            return 0.0;
        }
        f64::from(qps) / 0.5
    }
}

#[test]
fn the_weight_store_agrees_with_a_model_over_the_history_of_reports() {
    fn prop(steps: Vec<(u16, u8)>, blackout_s: u8, expiration_s: u8) -> TestResult {
        let settings = WrrSettings {
            blackout: Duration::from_millis(u64::from(blackout_s % 6) * 1000),
            expiration: Duration::from_millis(u64::from(expiration_s % 8 + 1) * 1000),
            update_period: SECOND,
            error_penalty: 1.0,
            oob_interval: None,
        };
        let id = SubchannelId::new(0, 0);
        let mut store = EndpointWeights::new(Instant::ZERO, settings);
        store.set_endpoints([&[id][..]].into_iter());
        let mut history = History { steps: Vec::new() };
        let mut now = Instant::ZERO;
        for (dt, kind) in steps {
            now += Duration::from_millis(u64::from(dt % 4000));
            let step = match kind % 8 {
                0 => Step::Ready,
                1..=3 => Step::Query,
                k => Step::Report(if k == 4 { 0 } else { kind / 8 }),
            };
            match step {
                Step::Report(qps) => {
                    store.report(now, id, &report(f64::from(qps), 0.5));
                }
                Step::Ready => store.became_ready(id),
                Step::Query => {
                    let expected = history.weight(now, &settings);
                    let got = store.weight(now, id);
                    if got != expected {
                        return TestResult::error(format!(
                            "at {now}: store {got}, model {expected}"
                        ));
                    }
                }
            }
            history.steps.push((now, step));
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(300)
        .quickcheck(prop as fn(Vec<(u16, u8)>, u8, u8) -> TestResult);
}

#[test]
fn pick_shares_converge_to_the_weights() {
    fn prop(utilizations: Vec<u8>) -> TestResult {
        // Up to 6 endpoints; utilization (k % 10) / 10, and 0 reports nothing.
        let utilizations: Vec<u8> = utilizations.iter().take(6).map(|u| u % 10).collect();
        if utilizations.len() < 2 {
            return TestResult::discard();
        }
        let ports: Vec<u16> = (1..=utilizations.len() as u16).collect();
        let by_port = |a: SocketAddr| utilizations[usize::from(a.port()) - 1];
        let reports = |a: SocketAddr| {
            let u = by_port(a);
            (u > 0).then(|| report(100.0, f64::from(u) / 10.0))
        };
        let mut net = Net::new();
        net.wrr_cluster(&ports, Duration::ZERO);
        net.pick("c", 0);
        net.picks_reporting("c", 100, reports);
        net.advance_to(Instant::ZERO + SECOND);
        let n = 2000 * ports.len() as u64;
        let seen = net.picks_reporting("c", n, reports);
        // The reference: weights 100 / u; without one, the mean of the others relative
        // to the largest; fewer than two weights, all equal.
        let weights: Vec<Option<f64>> = (utilizations.iter())
            .map(|u| (*u > 0).then(|| 1000.0 / f64::from(*u)))
            .collect();
        let known: Vec<f64> = weights.iter().flatten().copied().collect();
        let expected: Vec<(u16, f64)> = if known.len() < 2 {
            ports.iter().map(|p| (*p, 1.0)).collect()
        } else {
            let max = known.iter().copied().fold(0.0, f64::max);
            let mean = known.iter().map(|w| w / max).sum::<f64>() / known.len() as f64;
            (ports.iter().zip(&weights))
                .map(|(p, w)| (*p, w.map_or(mean, |w| w / max)))
                .collect()
        };
        let total: f64 = expected.iter().map(|(_, w)| w).sum();
        let ok = expected.iter().all(|(port, w)| {
            let want = n as f64 * w / total;
            let got = seen.get(&addr(*port)).copied().unwrap_or(0) as f64;
            (got - want).abs() <= 2.0
        });
        if ok {
            TestResult::passed()
        } else {
            TestResult::error(format!("{utilizations:?}: {seen:?} vs {expected:?}"))
        }
    }
    QuickCheck::new()
        .tests(40)
        .quickcheck(prop as fn(Vec<u8>) -> TestResult);
}
