//! The gRFC A78 XdsClient metrics as a real client exports them through the `metrics`
//! facade, read back from the global [`TestRecorder`] by the client's `grpc.target`.

use std::collections::BTreeMap;
use std::time::Duration;

use xds_adapter_common::Runtime;
use xds_adapter_common::metrics::{CacheState, OLD_STYLE_AUTHORITY, labels, names};
use xds_proto_core::Code;
use xds_proto_core::resource::Cds;

use super::{CDS, PROMPT, acked, builder, next_value, server_saw, within};
use crate::LoopbackServer;
use crate::recorder::{Kind, Series, TestRecorder, series};
use crate::resources::{cluster, cluster_with, invalid_cluster, resource_error};

/// The `grpc.xds.resource_type` of clusters.
const CLUSTER: &str = "envoy.config.cluster.v3.Cluster";

/// Every metric with every label, read after each step of a session: three clusters
/// requested, ACKed, one NACKed (cached: `nacked_but_cached`), a TP3 error for another
/// (`received_error_but_cached`), the server stopped (one server failure, not
/// connected), a watch cancelled (its cache state's series reads 0), and the client
/// shut down (every gauge 0, the counters kept). Exports are on demand
/// ([`Client::export_metrics`](xds_adapter_common::Client::export_metrics)): the
/// interval is an hour. `target` must be unique in the test binary.
pub async fn xds_client_metrics<R: Runtime>(target: &str) {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    let uri = server.uri();
    let m = Readings {
        recorder: TestRecorder::global(),
        target,
        server: &uri,
    };
    let client = builder::<R>(&server.bootstrap_json("metrics-node", None))
        .target(target)
        .metrics_interval(Some(Duration::from_secs(3600)))
        .build()
        .expect("client");
    let mut watches = Vec::new();
    for name in ["c1", "c2", "c3"] {
        watches.push(client.watch::<Cds>(name).await.expect("watch"));
    }
    server_saw(
        &rt,
        &server,
        "the subscription to three clusters",
        |reqs, _| {
            reqs.iter()
                .any(|r| r.type_url == CDS && r.resource_names.len() == 3)
                .then_some(())
        },
    )
    .await;
    client.export_metrics().await.expect("export");
    let requested = [(CacheState::Requested, 3)];
    assert_eq!(
        m.read(),
        m.expected(false, 0, None, &requested),
        "requested"
    );

    server.set_resources(CDS, "1", vec![cluster("c1"), cluster("c2"), cluster("c3")]);
    for watch in &mut watches {
        next_value(&rt, watch).await;
    }
    server_saw(&rt, &server, "the ACK of version 1", |reqs, _| {
        acked(reqs, CDS, "1").then_some(())
    })
    .await;
    client.export_metrics().await.expect("export");
    let resources = [(CacheState::Requested, 0), (CacheState::Acked, 3)];
    let after_ack = m.expected(true, 0, Some((3, 0)), &resources);
    assert_eq!(
        m.read(),
        after_ack,
        "after the ACK (nothing is requested any more)"
    );

    // c2 becomes invalid; c1 and c3, unchanged, still count as valid updates.
    server.set_resources(
        CDS,
        "2",
        vec![cluster("c1"), invalid_cluster("c2"), cluster("c3")],
    );
    server_saw(&rt, &server, "a NACK", |_, stats| {
        (stats.nacks == 1).then_some(())
    })
    .await;
    client.export_metrics().await.expect("export");
    let resources = [
        (CacheState::Requested, 0),
        (CacheState::Acked, 2),
        (CacheState::NackedButCached, 1),
    ];
    let after_nack = m.expected(true, 0, Some((5, 1)), &resources);
    assert_eq!(m.read(), after_nack, "after the NACK");

    // A TP3 error for c3 is not a resource: only c1 and c2 count as updates.
    server.set_resources_and_errors(
        CDS,
        "3",
        vec![cluster_with("c1", 7), invalid_cluster("c2")],
        vec![resource_error("c3", Code::UNAVAILABLE, "backend down")],
    );
    assert_eq!(next_value(&rt, &mut watches[0]).await.max_requests, 7);
    server_saw(&rt, &server, "the second NACK", |_, stats| {
        (stats.nacks == 2).then_some(())
    })
    .await;
    client.export_metrics().await.expect("export");
    let resources = [
        (CacheState::Requested, 0),
        (CacheState::Acked, 1),
        (CacheState::NackedButCached, 1),
        (CacheState::ReceivedErrorButCached, 1),
    ];
    let after_error = m.expected(true, 0, Some((6, 2)), &resources);
    assert_eq!(m.read(), after_error, "after the resource error");

    // The stream ends after responses (no failure, A57), then reconnecting fails: one
    // healthy-to-unhealthy transition, however many attempts follow.
    server.stop().await;
    within(&rt, PROMPT, "a server failure", async {
        loop {
            client.export_metrics().await.expect("export");
            if m.value(Kind::Counter, names::SERVER_FAILURE, &m.server_labels()) == Some(1.0) {
                return;
            }
            rt.sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let after_stop = m.expected(false, 1, Some((6, 2)), &resources);
    assert_eq!(m.read(), after_stop, "after the server stopped");

    drop(watches.remove(0));
    client.export_metrics().await.expect("export");
    let resources = [
        (CacheState::Requested, 0),
        (CacheState::Acked, 0),
        (CacheState::NackedButCached, 1),
        (CacheState::ReceivedErrorButCached, 1),
    ];
    let after_cancel = m.expected(false, 1, Some((6, 2)), &resources);
    assert_eq!(m.read(), after_cancel, "after c1's watch was cancelled");

    // The final export retires every gauge; the counters keep their totals.
    client.shutdown().await;
    let resources = resources.map(|(state, _)| (state, 0));
    let after_shutdown = m.expected(false, 1, Some((6, 2)), &resources);
    assert_eq!(m.read(), after_shutdown, "after shutdown");
    assert_described(m.recorder);
}

/// A client exports on its own, first one `interval` after it starts (`None`: the
/// default 5 s), and never before. `target` must be unique in the test binary.
pub async fn metrics_exported_on_interval<R: Runtime>(target: &str, interval: Option<Duration>) {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("c1")]);
    let uri = server.uri();
    let m = Readings {
        recorder: TestRecorder::global(),
        target,
        server: &uri,
    };
    let mut builder = builder::<R>(&server.bootstrap_json("interval-node", None)).target(target);
    if let Some(interval) = interval {
        builder = builder.metrics_interval(Some(interval));
    }
    let started = rt.now();
    let client = builder.build().expect("client");
    let mut watch = client.watch::<Cds>("c1").await.expect("watch");
    next_value(&rt, &mut watch).await;
    let interval = interval.unwrap_or(xds_adapter_common::metrics::DEFAULT_METRICS_INTERVAL);
    let acked = m.clusters_in(CacheState::Acked);
    within(&rt, interval + PROMPT, "an automatic export", async {
        while m.read().get(&acked) != Some(&1.0) {
            rt.sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        rt.now().saturating_duration_since(started) >= interval,
        "exported before the interval"
    );
    // An export before the value came (a loaded machine can take longer than the
    // interval to get it) leaves the requested-state gauge behind at 0.
    let mut read = m.read();
    let requested = m.clusters_in(CacheState::Requested);
    if read.get(&requested) == Some(&0.0) {
        read.remove(&requested);
    }
    assert_eq!(
        read,
        m.expected(true, 0, Some((1, 0)), &[(CacheState::Acked, 1)])
    );
    client.shutdown().await;
    server.stop().await;
}

fn assert_described(recorder: &TestRecorder) {
    for (kind, name) in [
        (Kind::Gauge, names::CONNECTED),
        (Kind::Counter, names::SERVER_FAILURE),
        (Kind::Counter, names::RESOURCE_UPDATES_VALID),
        (Kind::Counter, names::RESOURCE_UPDATES_INVALID),
        (Kind::Gauge, names::RESOURCES),
    ] {
        let (unit, text) = recorder
            .description(kind, name)
            .unwrap_or_else(|| panic!("{name} is not described"));
        assert_eq!(unit, Some(metrics::Unit::Count), "{name}");
        assert!(!text.is_empty(), "{name}");
    }
}

/// One client's series in the recorder.
struct Readings<'a> {
    recorder: &'a TestRecorder,
    target: &'a str,
    server: &'a str,
}

impl Readings<'_> {
    /// Every series labelled with the target.
    fn read(&self) -> BTreeMap<Series, f64> {
        self.recorder
            .series_with(labels::TARGET, self.target)
            .into_iter()
            .collect()
    }

    fn value(&self, kind: Kind, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.recorder.value(kind, name, labels)
    }

    fn server_labels(&self) -> [(&str, &str); 2] {
        [(labels::TARGET, self.target), (labels::SERVER, self.server)]
    }

    /// The series of one server and the cluster type: `updates` is (valid, invalid),
    /// `None` before any; `resources` the clusters by cache state.
    fn expected(
        &self,
        connected: bool,
        failures: u64,
        updates: Option<(u64, u64)>,
        resources: &[(CacheState, u64)],
    ) -> BTreeMap<Series, f64> {
        let server = self.server_labels();
        let mut out = BTreeMap::new();
        out.insert(
            series(Kind::Gauge, names::CONNECTED, &server),
            if connected { 1.0 } else { 0.0 },
        );
        out.insert(
            series(Kind::Counter, names::SERVER_FAILURE, &server),
            failures as f64,
        );
        if let Some((valid, invalid)) = updates {
            let by_type = [server[0], server[1], (labels::RESOURCE_TYPE, CLUSTER)];
            out.insert(
                series(Kind::Counter, names::RESOURCE_UPDATES_VALID, &by_type),
                valid as f64,
            );
            out.insert(
                series(Kind::Counter, names::RESOURCE_UPDATES_INVALID, &by_type),
                invalid as f64,
            );
        }
        for (state, count) in resources {
            out.insert(self.clusters_in(*state), *count as f64);
        }
        out
    }

    /// The gauge of this client's clusters in cache state `state`.
    fn clusters_in(&self, state: CacheState) -> Series {
        let by_state = [
            (labels::TARGET, self.target),
            (labels::AUTHORITY, OLD_STYLE_AUTHORITY),
            (labels::RESOURCE_TYPE, CLUSTER),
            (labels::CACHE_STATE, state.as_str()),
        ];
        series(Kind::Gauge, names::RESOURCES, &by_state)
    }
}
