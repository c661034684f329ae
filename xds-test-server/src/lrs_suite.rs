//! The load-reporting (LRS) scenario, generic over the [`Runtime`] like
//! [`crate::channel_suite`]: two [`EchoBackend`]s, one per locality (`r1/z0`,
//! `r1/z1`), behind the [`LoopbackServer`], whose cluster reports its load to it
//! (`lrs_server: self`) and drops 10 % of RPCs in the category `throttle`; an
//! [`XdsChannel`] sends 1,000 RPCs, the `z1` backend failing its first 25. The LRS
//! reports, summed, must equal what the test sent exactly: per locality the RPCs
//! issued, succeeded and failed (none left in progress), and the drops by category and
//! in total; the LRS stream shares the ADS stream's connection.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use xds_adapter_common::{ClientPool, Runtime, XdsChannel};
use xds_proto_core::Bootstrap;
use xds_proto_core::lrs::SEND_ALL_CLUSTERS_FEATURE;
use xds_proto_core::pb::envoy::config::endpoint::v3::ClusterStats;
use xds_proto_core::resource::type_url;

use crate::echo::{EchoBackend, call_echo, echo_request};
use crate::resources::{
    Host, Locality, any, listener, load_assignment, load_reporting_cluster, route_config,
    with_drop_overloads,
};
use crate::suite::within;
use crate::{LoadReportingSettings, LoopbackServer};

/// The channel's target.
pub const TARGET: &str = "xds:///lrs.example.com";
const LISTENER: &str = "lrs.example.com";
const ROUTES: &str = "lrs-routes";
const CLUSTER: &str = "lrs-echo";
const SERVICE: &str = "lrs-echo-endpoints";
const ZONES: [&str; 2] = ["z0", "z1"];
const RPCS: u32 = 1_000;
const DROP_CATEGORY: &str = "throttle";
/// The `z1` backend fails this many RPCs first, with UNAVAILABLE.
const FAILED_FIRST: u64 = 25;

/// One locality's counts: what the test saw, or what the reports said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalityCounts {
    /// RPCs sent to the locality (`total_issued_requests`).
    pub issued: u64,
    /// RPCs that succeeded there.
    pub succeeded: u64,
    /// RPCs that failed there.
    pub errored: u64,
    /// RPCs in progress (reports: in the last one).
    pub in_progress: u64,
}

/// Everything one side counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadCounts {
    /// By zone.
    pub localities: BTreeMap<String, LocalityCounts>,
    /// Drops by category.
    pub dropped: BTreeMap<String, u64>,
    /// All drops (reports: `total_dropped_requests`).
    pub total_dropped: u64,
}

/// What the scenario measured.
#[derive(Clone, Debug, Default)]
pub struct LoadReportFigures {
    /// RPCs sent.
    pub rpcs: u32,
    /// What the test counted from the RPCs and the backends.
    pub sent: LoadCounts,
    /// The reports' counts, summed.
    pub reported: LoadCounts,
    /// Load reports received (the first request of the stream excluded).
    pub reports: usize,
    /// TCP connections the control plane accepted (ADS and LRS share one).
    pub connections: u64,
}

impl fmt::Display for LoadReportFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} RPCs; {} load reports over {} connection(s)",
            self.rpcs, self.reports, self.connections
        )?;
        writeln!(
            f,
            "| locality | issued (sent / reported) | succeeded | errored | in progress |"
        )?;
        writeln!(f, "|---|---|---|---|---|")?;
        for (zone, sent) in &self.sent.localities {
            let got = self
                .reported
                .localities
                .get(zone)
                .copied()
                .unwrap_or_default();
            writeln!(
                f,
                "| r1/{zone} | {} / {} | {} / {} | {} / {} | {} / {} |",
                sent.issued,
                got.issued,
                sent.succeeded,
                got.succeeded,
                sent.errored,
                got.errored,
                sent.in_progress,
                got.in_progress
            )?;
        }
        for (category, sent) in &self.sent.dropped {
            let got = self
                .reported
                .dropped
                .get(category)
                .copied()
                .unwrap_or_default();
            writeln!(f, "| dropped `{category}` | {sent} / {got} | | | |")?;
        }
        write!(
            f,
            "| dropped in total | {} / {} | | | |",
            self.sent.total_dropped, self.reported.total_dropped
        )
    }
}

/// Adds one report's stats of [`CLUSTER`] to `counts` (in progress: the latest).
fn add_report(counts: &mut LoadCounts, stats: &ClusterStats) {
    for l in &stats.upstream_locality_stats {
        let zone = l
            .locality
            .as_ref()
            .map(|l| l.zone.clone())
            .unwrap_or_default();
        let c = counts.localities.entry(zone).or_default();
        c.issued += l.total_issued_requests;
        c.succeeded += l.total_successful_requests;
        c.errored += l.total_error_requests;
        c.in_progress = l.total_requests_in_progress;
    }
    for d in &stats.dropped_requests {
        *counts.dropped.entry(d.category.clone()).or_default() += d.dropped_count;
    }
    counts.total_dropped += stats.total_dropped_requests;
}

/// Serves the mesh: the listener, the route, the cluster reporting its load, and its
/// two localities with the drop category.
fn serve(server: &LoopbackServer, backends: &[EchoBackend; 2]) {
    server.set_resources(type_url::LISTENER, "1", vec![listener(LISTENER, ROUTES)]);
    server.set_resources(
        type_url::ROUTE_CONFIGURATION,
        "1",
        vec![route_config(ROUTES, CLUSTER)],
    );
    server.set_resources(
        type_url::CLUSTER,
        "1",
        vec![load_reporting_cluster(CLUSTER, Some(SERVICE))],
    );
    let localities: Vec<Locality> = (ZONES.iter().zip(backends))
        .map(|(zone, b)| Locality::new("r1", zone, vec![Host::healthy(u32::from(b.port()))]))
        .collect();
    let cla = with_drop_overloads(
        load_assignment(SERVICE, &localities),
        &[(DROP_CATEGORY, 100_000)],
    );
    server.set_resources(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        "1",
        vec![any(type_url::CLUSTER_LOAD_ASSIGNMENT, &cla)],
    );
    server.set_load_reporting(LoadReportingSettings {
        send_all_clusters: false,
        clusters: vec![CLUSTER.to_owned()],
        interval: Duration::from_millis(100),
    });
}

/// A channel through a pool whose client takes a 50 ms reporting interval (gRPC's
/// minimum is 1 s; the test's 100 ms keeps it fast).
fn channel<R: Runtime>(server: &LoopbackServer) -> XdsChannel<R> {
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("lrs-node", None))
        .expect("the loopback bootstrap");
    let mut builder = ClientPool::<R>::builder(bootstrap);
    builder.config_mut().min_load_reporting_interval = Duration::from_millis(50);
    let pool = builder.build_pool().expect("a pool");
    XdsChannel::builder(TARGET)
        .pool(&pool)
        .seed(3)
        .build()
        .expect("a channel")
}

/// Runs the scenario; panics when a report's count differs from what was sent.
pub async fn load_reporting_scenario<R: Runtime>() -> LoadReportFigures {
    let rt = R::current().expect("a runtime");
    let backends = ZONES.map(|z| EchoBackend::start(&format!("lrs-{z}")));
    let server = LoopbackServer::start();
    serve(&server, &backends);
    let channel = channel::<R>(&server);
    backends[1].fail_next(FAILED_FIRST);
    let mut sent = LoadCounts::default();
    within(&rt, Duration::from_secs(60), "1,000 RPCs", async {
        for i in 0..RPCS {
            let status = match call_echo(channel.clone(), echo_request(&format!("lrs {i}"))).await {
                Ok(_) => continue,
                Err(status) => status,
            };
            let dropped = format!("dropped by the control plane: {DROP_CATEGORY}");
            if status.message().contains(&dropped) {
                *sent.dropped.entry(DROP_CATEGORY.to_owned()).or_default() += 1;
                sent.total_dropped += 1;
            }
        }
    })
    .await;
    for (zone, backend) in ZONES.iter().zip(&backends) {
        sent.localities.insert(
            zone.to_string(),
            LocalityCounts {
                issued: backend.served() + backend.failed(),
                succeeded: backend.served(),
                errored: backend.failed(),
                in_progress: 0,
            },
        );
    }
    let issued: u64 = sent.localities.values().map(|l| l.issued).sum();
    assert_eq!(
        issued + sent.total_dropped,
        u64::from(RPCS),
        "every RPC reached a backend or was dropped: {sent:?}"
    );
    assert_eq!(backends[1].failed(), FAILED_FIRST);
    let share = sent.total_dropped as f64 / f64::from(RPCS);
    assert!(
        (0.07..=0.13).contains(&share),
        "about 10 % dropped: {share}"
    );

    // The reports until they add up to what was sent (a report a little late may
    // still be on its way); then they must equal it exactly.
    let reported = within(&rt, Duration::from_secs(10), "the load reports", async {
        server
            .wait_for_load_reports(|reports| {
                let counts = sum_reports(reports);
                let total: u64 = counts.localities.values().map(|l| l.issued).sum();
                (total + counts.total_dropped >= u64::from(RPCS)
                    && counts.localities.values().all(|l| l.in_progress == 0))
                .then_some(counts)
            })
            .await
    })
    .await;
    let reports = server.load_reports();
    let first = &reports[0].request;
    let node = first
        .node
        .as_ref()
        .expect("the stream's first request names the node");
    assert_eq!(node.id, "lrs-node");
    assert!(
        node.client_features
            .iter()
            .any(|f| f == SEND_ALL_CLUSTERS_FEATURE)
    );
    let figures = LoadReportFigures {
        rpcs: RPCS,
        sent,
        reported,
        reports: reports.len() - 1,
        connections: server.stats().connections,
    };
    assert_eq!(figures.reported, figures.sent, "\n{figures}");
    assert_eq!(figures.connections, 1, "LRS rides on the ADS connection");
    assert_eq!(
        server.load_report_streams(),
        (1, 1),
        "one LRS stream, still open"
    );
    figures
}

/// The counts of [`CLUSTER`] over every report, with the EDS service name each names.
fn sum_reports(reports: &[crate::RecordedLoadReport]) -> LoadCounts {
    let mut counts = LoadCounts::default();
    for stats in reports.iter().flat_map(|r| &r.request.cluster_stats) {
        assert_eq!(stats.cluster_name, CLUSTER);
        assert_eq!(stats.cluster_service_name, SERVICE);
        add_report(&mut counts, stats);
    }
    counts
}
