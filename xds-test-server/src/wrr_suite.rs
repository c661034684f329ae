//! Weighted round robin (gRFC A58) through the `xds:///` channel, generic over the
//! [`Runtime`] like [`crate::channel_suite`]: three ORCA echo backends on loopback
//! ([`EchoBackend::start_with_orca`]) behind the [`LoopbackServer`], one cluster
//! balanced by client-side weighted round robin, and tonic's generic client.
//!
//! The backends report utilizations 0.2, 0.4 and 0.8. An endpoint's weight is
//! `qps / utilization` (A58, no errors here), so what each one sends as `qps` decides
//! the shares:
//! - a fixed `qps` (100 from all three, as gRPC-Go's interop server sends its flags):
//!   the weights are `100 / u`, and the shares are `(1/u) / Σ(1/u)` = 4/7, 2/7, 1/7,
//!   whatever the traffic; the scenarios check them within ±10 %, with per-call
//!   reports and with out-of-band ones;
//! - the `qps` each one actually serves: with `q_i = s_i × Q` for a total rate `Q`,
//!   the next shares are `s_i' ∝ s_i / u_i`, so each weight update multiplies a share
//!   ratio `s_i / s_j` by `u_j / u_i`. The only fixed points give all the traffic to
//!   one backend, and the only stable one is the least utilized: the scenario checks
//!   that `0.2` ends up with at least 90 % of the RPCs. A backend that reports a fixed
//!   utilization with its real rate is telling its clients that more traffic costs it
//!   nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use xds_adapter_common::orca::OrcaService;
use xds_adapter_common::{ClientPool, Runtime, XdsChannel};
use xds_proto_core::Bootstrap;
use xds_proto_core::pb::envoy::extensions::load_balancing_policies::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin;
use xds_proto_core::pb::google::protobuf::BoolValue;
use xds_proto_core::resource::type_url;

use crate::LoopbackServer;
use crate::echo::{EchoBackend, EchoOrca, ServerMetricRecorder, call_echo, echo_request};
use crate::resources::{endpoints, listener, pb_duration, route_config, wrr_cluster};
use crate::suite::within;

/// The channel's target.
pub const TARGET: &str = "xds:///wrr.example.com";
const LISTENER: &str = "wrr.example.com";
const ROUTES: &str = "wrr-routes";
const CLUSTER: &str = "wrr";
/// The backends' names and utilizations.
pub const BACKENDS: [(&str, f64); 3] = [("u20", 0.2), ("u40", 0.4), ("u80", 0.8)];
/// The qps every backend reports when it reports a fixed one.
pub const FIXED_QPS: f64 = 100.0;

/// How the backends report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reporting {
    /// Per call, a fixed qps.
    PerCall,
    /// Out of band (every 100 ms), a fixed qps.
    OutOfBand,
    /// Per call, the qps each backend measures over the last 300 ms.
    PerCallMeasuredQps,
}

/// The RPCs each backend answered in the measured phase.
#[derive(Clone, Debug, Default)]
pub struct WrrShares {
    /// By backend name.
    pub counts: BTreeMap<String, u64>,
}

impl WrrShares {
    /// The fraction of the RPCs `backend` answered.
    pub fn share(&self, backend: &str) -> f64 {
        let total: u64 = self.counts.values().sum();
        self.counts.get(backend).copied().unwrap_or(0) as f64 / total.max(1) as f64
    }
}

/// The shares weights `qps / u` with the same qps give: `(1/u) / Σ(1/u)`.
pub fn expected_fixed_qps_share(utilization: f64) -> f64 {
    let sum: f64 = BACKENDS.iter().map(|(_, u)| 1.0 / u).sum();
    (1.0 / utilization) / sum
}

/// The backends, reporting as asked, and the control plane.
pub struct WrrMesh {
    /// The control plane.
    pub server: LoopbackServer,
    /// The backends, in [`BACKENDS`] order.
    pub backends: Vec<EchoBackend>,
}

impl WrrMesh {
    /// Starts the backends (their out-of-band service timed on `rt`) and serves the
    /// mesh: weight updates every 100 ms, no blackout.
    pub fn start<R: Runtime>(rt: &R, reporting: Reporting) -> WrrMesh {
        let backends: Vec<EchoBackend> = BACKENDS
            .iter()
            .map(|(name, utilization)| {
                let recorder = ServerMetricRecorder::new();
                recorder.set_cpu_utilization(*utilization);
                recorder.set_qps(FIXED_QPS);
                let orca = EchoOrca::new(recorder.clone());
                let orca = match reporting {
                    Reporting::PerCall => orca,
                    Reporting::PerCallMeasuredQps => orca.measured_qps(Duration::from_millis(300)),
                    Reporting::OutOfBand => orca.out_of_band(
                        OrcaService::new(recorder, rt.clone())
                            .min_report_interval(Duration::from_millis(50)),
                    ),
                };
                EchoBackend::start_with_orca(name, orca)
            })
            .collect();
        let config = ClientSideWeightedRoundRobin {
            enable_oob_load_report: Some(BoolValue {
                value: reporting == Reporting::OutOfBand,
            }),
            oob_reporting_period: Some(pb_duration(Duration::from_millis(100))),
            blackout_period: Some(pb_duration(Duration::ZERO)),
            weight_update_period: Some(pb_duration(Duration::from_millis(100))),
            ..Default::default()
        };
        let ports: Vec<u32> = backends.iter().map(|b| u32::from(b.port())).collect();
        let server = LoopbackServer::start();
        server.set_resources(type_url::LISTENER, "1", vec![listener(LISTENER, ROUTES)]);
        server.set_resources(
            type_url::ROUTE_CONFIGURATION,
            "1",
            vec![route_config(ROUTES, CLUSTER)],
        );
        server.set_resources(type_url::CLUSTER, "1", vec![wrr_cluster(CLUSTER, config)]);
        server.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            "1",
            vec![endpoints(CLUSTER, &ports)],
        );
        WrrMesh { server, backends }
    }

    /// A channel to [`TARGET`] through a pool on the server's bootstrap.
    pub fn channel<R: Runtime>(&self, seed: u64) -> XdsChannel<R> {
        let bootstrap = Bootstrap::from_json_str(&self.server.bootstrap_json("wrr", None))
            .expect("the loopback bootstrap");
        let pool = ClientPool::<R>::builder(bootstrap)
            .build_pool()
            .expect("a pool");
        XdsChannel::builder(TARGET)
            .pool(&pool)
            .seed(seed)
            .build()
            .expect("a channel")
    }
}

/// Sends RPCs for `warm_up` (the weights come into use), then `rpcs` more, counted by
/// the backend that answered.
pub async fn measure<R: Runtime>(
    rt: &R,
    channel: &XdsChannel<R>,
    warm_up: Duration,
    rpcs: u64,
) -> WrrShares {
    let start = rt.now();
    while rt.now() - start < warm_up {
        call_echo(channel.clone(), echo_request("warm-up"))
            .await
            .expect("a warm-up RPC");
    }
    let mut shares = WrrShares::default();
    for i in 0..rpcs {
        let reply = call_echo(channel.clone(), echo_request(&format!("wrr {i}")))
            .await
            .expect("an RPC");
        *shares.counts.entry(reply.backend).or_default() += 1;
    }
    shares
}

/// Runs one scenario: its shares, checked.
pub async fn wrr_scenario<R: Runtime>(reporting: Reporting) -> WrrShares {
    let rt = R::current().expect("a runtime");
    let mesh = WrrMesh::start(&rt, reporting);
    let channel = mesh.channel::<R>(11);
    let (warm_up, rpcs) = match reporting {
        Reporting::PerCallMeasuredQps => (Duration::from_secs(3), 1_000),
        _ => (Duration::from_millis(500), 1_400),
    };
    let limit = Duration::from_secs(60);
    let shares = within(&rt, limit, "the weighted round robin RPCs", async {
        measure(&rt, &channel, warm_up, rpcs).await
    })
    .await;
    match reporting {
        Reporting::PerCall | Reporting::OutOfBand => {
            for (name, utilization) in BACKENDS {
                let expected = expected_fixed_qps_share(utilization);
                let got = shares.share(name);
                assert!(
                    (got - expected).abs() <= 0.1 * expected,
                    "{reporting:?}: {name} got {got:.3} of the RPCs, expected {expected:.3} \
                     ± 10 %: {:?}",
                    shares.counts
                );
            }
        }
        Reporting::PerCallMeasuredQps => {
            let least = shares.share(BACKENDS[0].0);
            assert!(
                least >= 0.9,
                "the least utilized backend got {least:.3}: {:?}",
                shares.counts
            );
        }
    }
    drop(mesh);
    shares
}
