//! What a seed draws before its run starts: the plan (clients, authority layout,
//! server features and policies, timings, fault weights, keepalive), which servers
//! speak delta, and the checked clients the plan asks for.

use super::*;

#[derive(Clone, Copy, Debug)]
pub(super) struct Features {
    pub(super) fail_on_data_errors: bool,
    pub(super) transient_timer: bool,
}

/// The configuration drawn from the seed.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub(super) clients: usize,
    /// 0: no authority; 1: an authority with its own servers; 2: one that uses the
    /// top-level servers.
    pub(super) authority: u8,
    pub(super) list_fallback: bool,
    pub(super) features: [Features; 2],
    pub(super) resource_timeout: Duration,
    pub(super) safety: Duration,
    pub(super) latency_ms: (u64, u64),
    pub(super) connect_ms: u64,
    pub(super) buffering: Vec<bool>,
    pub(super) reports_connectivity: Vec<bool>,
    pub(super) churn_mean_ms: Vec<u64>,
    pub(super) update_mean_ms: u64,
    pub(super) fault_mean_ms: u64,
    pub(super) fault_weights: [u64; FAULT_KINDS],
    pub(super) p_never: f64,
    pub(super) p_slow_connect: f64,
    pub(super) p_slow_send: f64,
    pub(super) p_dup: f64,
    pub(super) policies: [ServerPolicy; 2],
    pub(super) keepalive: Vec<Option<KeepaliveSettings>>,
}

pub(super) const FAULT_KINDS: usize = 8;
pub(super) const FAULT_NAMES: [&str; FAULT_KINDS] = [
    "reset",
    "goaway",
    "channel-failure",
    "blackhole",
    "restart",
    "junk",
    "duplicate",
    "ghost",
];

impl Plan {
    pub(super) fn draw(rng: &mut SimRng) -> Plan {
        let clients = rng.range(1, 3) as usize;
        let mut features = [Features {
            fail_on_data_errors: false,
            transient_timer: false,
        }; 2];
        for f in &mut features {
            f.fail_on_data_errors = rng.chance(0.3);
            f.transient_timer = rng.chance(0.15);
        }
        let mut policies = [ServerPolicy::default(); 2];
        for p in &mut policies {
            p.ignore_stale_nonce = rng.chance(0.5);
            p.empty_is_wildcard = rng.chance(0.3);
            p.wrap_resources = rng.chance(0.3);
        }
        let lo = rng.range(0, 20);
        let quiet = rng.chance(0.1);
        let mut fault_weights = [0u64; FAULT_KINDS];
        for w in &mut fault_weights {
            *w = if rng.chance(0.75) {
                rng.range(1, 10)
            } else {
                0
            };
        }
        fault_weights[0] += 1;
        Plan {
            clients,
            authority: rng.range(0, 2) as u8,
            list_fallback: rng.chance(0.3),
            features,
            resource_timeout: Duration::from_secs(rng.range(5, 15)),
            safety: Duration::from_secs(rng.range(60, 200)),
            latency_ms: (lo, lo + rng.range(1, 250)),
            connect_ms: rng.range(1, 300),
            buffering: (0..clients).map(|_| rng.chance(0.5)).collect(),
            reports_connectivity: (0..clients).map(|_| rng.chance(0.5)).collect(),
            churn_mean_ms: (0..clients).map(|_| rng.range(300, 6000)).collect(),
            update_mean_ms: rng.range(300, 5000),
            fault_mean_ms: if quiet {
                600_000
            } else {
                rng.range(1000, 20_000)
            },
            fault_weights,
            p_never: if rng.chance(0.5) {
                rng.range(0, 30) as f64 / 100.0
            } else {
                0.0
            },
            p_slow_connect: rng.range(0, 15) as f64 / 100.0,
            p_slow_send: rng.range(0, 10) as f64 / 100.0,
            p_dup: rng.range(0, 10) as f64 / 100.0,
            policies,
            // Drawn last, so the draws above are what they were before keepalive.
            keepalive: (0..clients).map(|_| keepalive::draw(rng)).collect(),
        }
    }

    pub(super) fn summary(&self) -> String {
        let faults: Vec<String> = FAULT_NAMES
            .iter()
            .zip(self.fault_weights)
            .filter(|(_, w)| *w > 0)
            .map(|(n, w)| format!("{n}:{w}"))
            .collect();
        format!(
            "{} client(s) buffering={:?} conn-reports={:?}; authority mode {} fallback-listed={}; features {:?}; \
             policies {:?}; timeout {:?}; safety {:?}; latency {:?} ms; connect <= {} ms; churn {:?} ms; \
             updates {} ms; faults every ~{} ms [{}]; p(never)={} p(slow connect)={} p(slow send)={} p(dup)={}; \
             keepalive {:?}",
            self.clients,
            self.buffering,
            self.reports_connectivity,
            self.authority,
            self.list_fallback,
            self.features,
            self.policies,
            self.resource_timeout,
            self.safety,
            self.latency_ms,
            self.connect_ms,
            self.churn_mean_ms,
            self.update_mean_ms,
            self.fault_mean_ms,
            faults.join(" "),
            self.p_never,
            self.p_slow_connect,
            self.p_slow_send,
            self.p_dup,
            self.keepalive
                .iter()
                .map(|k| keepalive::describe(*k))
                .collect::<Vec<_>>(),
        )
    }
}

/// Which of the (up to four) servers speak delta: drawn from a stream of its own, so
/// that a seed's plan and faults do not depend on it.
pub(super) fn delta_servers(seed: u64, opts: &SimOptions) -> Vec<bool> {
    let mut variant = SimRng::new(seed ^ 0xde17_a0de_17a0_de17);
    let mode = variant.index(3);
    (0..4)
        .map(|_| match opts.delta {
            Some(all) => all,
            None => mode == 1 || (mode == 2 && variant.chance(0.5)),
        })
        .collect()
}

impl SimClient {
    /// The plan's clients, each a checked core on a bootstrap of the laid-out servers
    /// and authorities, its seed drawn from `rng`. An error is a rule and its detail.
    pub(super) fn for_plan(
        plan: &Plan,
        top_list: &[String],
        authorities: &str,
        rng: &mut SimRng,
        opts: &SimOptions,
    ) -> Result<Vec<SimClient>, (&'static str, String)> {
        let mut clients = Vec::new();
        for i in 0..plan.clients {
            let json = format!(
                r#"{{"xds_servers": [{}], "node": {{"id": "sim-client-{i}", "cluster": "sim"}}{authorities}}}"#,
                top_list.join(", ")
            );
            let bootstrap = Bootstrap::from_json_str(&json)
                .map_err(|e| ("sim-bootstrap", format!("{e}: {json}")))?;
            let mut config = XdsClientConfig::new(bootstrap);
            config.resource_timeout = plan.resource_timeout;
            // A88's 30 s for 15 s, scaled like the plan's timeout.
            config.transient_resource_timeout = 2 * plan.resource_timeout;
            let mut cc =
                CheckedClient::new(config, rng.next_u64(), CheckOptions { exact_timing: true });
            if opts.planted_bug {
                cc.client_mut().plant_bug(true);
            }
            clients.push(SimClient {
                cc,
                buffering: plan.buffering[i],
                reports_connectivity: plan.reports_connectivity[i],
                churn_mean_ms: plan.churn_mean_ms[i],
                keepalive: plan.keepalive[i],
            });
        }
        Ok(clients)
    }
}
