//! LRS scenarios (gRFC A27's load reporting, A64's named metrics): the dependency
//! manager resolves a cluster whose `lrs_server` is `self` with the client's load
//! counters, the sans-IO load balancer counts picks, drops and call ends into them,
//! and the test plays the LRS server on virtual time: the exact report for a scripted
//! run, drops by category and the circuit breaker's, the server's choice of clusters,
//! the interval (and its bounds), backoff after a failed stream, and the stream's end
//! once no cluster needs it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use xds_proto_core::Status;
use xds_proto_core::client::{Action, Event, StreamId};
use xds_proto_core::dependency::XdsConfig;
use xds_proto_core::dependency::XdsDependencyManager;
use xds_proto_core::lb::{
    CallOutcome, CallToken, ConnectivityState, LbAction, LbSettings, LoadBalancer, Pick, PickArgs,
};
use xds_proto_core::lrs::SEND_ALL_CLUSTERS_FEATURE;
use xds_proto_core::orca::OrcaLoadReport;
use xds_proto_core::pb::envoy::config::core::v3 as core_pb;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint_pb;
use xds_proto_core::pb::envoy::service::load_stats::v3::{LoadStatsRequest, LoadStatsResponse};
use xds_proto_core::pb::google::protobuf::{Any, Duration as PbDuration};
use xds_proto_core::prost::Message;
use xds_proto_core::{Code, ServerId};
use xds_proto_tests::fixtures_routes::*;
use xds_proto_tests::{CDS, EDS, LDS, RDS, lrs_response};

const LISTENER: &str = "lis";
const SEC: Duration = Duration::from_secs(1);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// An assignment for `service` with one endpoint per zone of region `r1` (port
/// 8000 + i for zone i), and these drop categories.
fn assignment(service: &str, zones: &[&str], drops: &[(&str, u32)]) -> Any {
    let localities: Vec<Locality> = (zones.iter().enumerate())
        .map(|(i, z)| Locality::new("r1", z, vec![Host::healthy(8000 + i as u32)]))
        .collect();
    let cla = with_drop_overloads(load_assignment(service, &localities), drops);
    any(EDS, &cla)
}

/// A dependency manager on the scripted client, a load balancer fed its config, the
/// random source of the picks, and what the test counted itself, by endpoint port and
/// drop category.
struct Run {
    d: DmDriver,
    lb: LoadBalancer,
    config: Arc<XdsConfig>,
    rng: Xoshiro256PlusPlus,
    counted: BTreeMap<u16, Counted>,
    drops: BTreeMap<String, u64>,
}

impl Run {
    /// Serves the listener, a route splitting across `route_to`, these clusters and
    /// endpoints; the load balancer takes the config and connects every endpoint.
    fn start(route_to: &[(&str, u32)], clusters: Vec<Any>, assignments: Vec<Any>) -> Run {
        let mut d = DmDriver::new(LISTENER, "svc.example.com");
        d.respond(LDS, "1", vec![listener_rds(LISTENER, "routes", None)]);
        let routes = routes_config(
            "routes",
            vec![forward(prefix(""), weighted_action(route_to))],
        );
        d.respond(RDS, "1", vec![rc_any(&routes)]);
        d.respond(CDS, "1", clusters);
        d.respond(EDS, "1", assignments);
        let config = d.expect_config();
        let mut lb = LoadBalancer::new(LbSettings::new(5));
        lb.update(d.h.now, &config);
        let mut run = Run {
            d,
            lb,
            config,
            rng: Xoshiro256PlusPlus::seed_from_u64(11),
            counted: BTreeMap::new(),
            drops: BTreeMap::new(),
        };
        for (cluster, _) in route_to {
            run.connect(cluster);
        }
        run
    }

    /// Starts `cluster` and reports every connection it asks for ready, until a call
    /// completes (and succeeds). The picks on the way count like any other.
    fn connect(&mut self, cluster: &str) {
        for _ in 0..10 {
            if let Some((port, call)) = self.call(cluster) {
                return self.end(port, call, CallOutcome::Success, &[]);
            }
            self.ready_every_connection_asked_for();
        }
        panic!("{cluster} does not become ready");
    }

    /// Reports every connection the load balancer asks for ready.
    fn ready_every_connection_asked_for(&mut self) {
        let now = self.d.h.now;
        while let Some(action) = self.lb.poll_action() {
            if let LbAction::Connect { subchannel, .. } = action {
                let lb = &mut self.lb;
                lb.subchannel_state(now, subchannel, ConnectivityState::Connecting);
                lb.subchannel_state(now, subchannel, ConnectivityState::Ready);
            }
        }
    }

    /// A pick, counted: a call issued (and in progress) at its endpoint's port, or a
    /// drop by category. `None` when no call started.
    fn call(&mut self, cluster: &str) -> Option<(u16, CallToken)> {
        match self.pick(cluster) {
            Pick::Complete { address, call, .. } => {
                let c = self.counted.entry(address.port()).or_default();
                c.issued += 1;
                c.in_progress += 1;
                Some((address.port(), call))
            }
            Pick::Drop { category } => {
                *self.drops.entry(category.to_string()).or_default() += 1;
                None
            }
            Pick::Queue => None,
            Pick::Fail(status) => panic!("{cluster}: {status}"),
        }
    }

    /// The end of a call started at `port`, counted, with ORCA named metrics.
    fn end(&mut self, port: u16, call: CallToken, outcome: CallOutcome, metrics: &[(&str, f64)]) {
        let c = self.counted.entry(port).or_default();
        c.in_progress -= 1;
        match outcome {
            CallOutcome::Success => c.succeeded += 1,
            CallOutcome::Failure => c.errored += 1,
        }
        for (name, value) in metrics {
            let m = c.metrics.entry(name.to_string()).or_default();
            m.0 += 1;
            m.1 += value;
        }
        let now = self.d.h.now;
        if !metrics.is_empty() {
            assert!(
                call.wants_load_report(),
                "LRS adds up the report's named metrics"
            );
        }
        let report = OrcaLoadReport {
            named_metrics: metrics.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            ..Default::default()
        };
        (self.lb).call_finished_with_report(now, call, outcome, Some(&report));
    }

    fn args(&mut self) -> PickArgs {
        PickArgs {
            hash: None,
            random: self.rng.next_u64(),
            override_host: None,
        }
    }

    fn pick(&mut self, cluster: &str) -> Pick {
        let now = self.d.h.now;
        let args = self.args();
        self.lb.pick(now, cluster, &args)
    }

    /// The next load-reporting action must start a stream, then send its first
    /// request; the stream is reported started and the request sent.
    fn lrs_stream(&mut self) -> StreamId {
        let stream = match self.d.lrs.pop_front() {
            Some(Action::StartLoadReportStream { stream, .. }) => stream,
            other => panic!("expected an LRS stream to start, got {other:?}"),
        };
        let first = self.lrs_request(stream);
        let node = first.node.expect("the first request carries the node");
        assert_eq!(node.id, "test-node");
        assert!(
            node.client_features
                .iter()
                .any(|f| f == SEND_ALL_CLUSTERS_FEATURE)
        );
        assert!(first.cluster_stats.is_empty());
        self.d.event(Event::StreamStarted { stream });
        self.d.event(Event::RequestSent { stream });
        stream
    }

    /// The next load-reporting action must be a request on `stream` (as the server
    /// decodes it).
    fn lrs_request(&mut self, stream: StreamId) -> LoadStatsRequest {
        match self.d.lrs.pop_front() {
            Some(Action::SendLoadReport { stream: s, request }) if s == stream => {
                LoadStatsRequest::decode(request.encode_to_vec().as_slice()).expect("decodes")
            }
            other => panic!("expected a load report on {stream}, got {other:?}"),
        }
    }

    /// The report due now on `stream`, reported sent.
    fn report(&mut self, stream: StreamId) -> LoadStatsRequest {
        let report = self.lrs_request(stream);
        assert!(
            report.node.is_none(),
            "only the first request carries the node"
        );
        self.d.event(Event::RequestSent { stream });
        report
    }

    fn respond(&mut self, stream: StreamId, response: &LoadStatsResponse) {
        let bytes = response.encode_to_vec().into();
        self.d.event(Event::ResponseReceived { stream, bytes });
    }

    fn expect_no_lrs(&mut self) {
        assert!(self.d.lrs.is_empty(), "unexpected: {:?}", self.d.lrs);
    }
}

fn interval(d: Duration) -> Option<PbDuration> {
    Some(PbDuration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    })
}

/// What the test counted itself for one locality.
#[derive(Clone, Debug, Default)]
struct Counted {
    issued: u64,
    succeeded: u64,
    errored: u64,
    in_progress: u64,
    metrics: BTreeMap<String, (u64, f64)>,
}

impl Counted {
    fn stats(&self, zone: &str) -> endpoint_pb::UpstreamLocalityStats {
        endpoint_pb::UpstreamLocalityStats {
            locality: Some(core_pb::Locality {
                region: "r1".into(),
                zone: zone.into(),
                sub_zone: String::new(),
            }),
            total_successful_requests: self.succeeded,
            total_requests_in_progress: self.in_progress,
            total_error_requests: self.errored,
            total_issued_requests: self.issued,
            load_metric_stats: (self.metrics.iter())
                .map(
                    |(name, (requests, total))| endpoint_pb::EndpointLoadMetricStats {
                        metric_name: name.clone(),
                        num_requests_finished_with_metric: *requests,
                        total_metric_value: *total,
                    },
                )
                .collect(),
            ..Default::default()
        }
    }
}

/// A scripted run: 1,000 picks over two localities with two drop categories (10 % and
/// 5 %), every third call failing, every tenth left in flight, ORCA named metrics on
/// the calls of one locality. The report is exactly what the test counted from the
/// picks themselves, with the interval since the cluster's counters were created.
#[test]
fn a_report_counts_every_pick_drop_and_call_end_per_locality_exactly() {
    let cluster = load_reporting_cluster("c", Some("svc"));
    let eds = assignment(
        "svc",
        &["z0", "z1"],
        &[("lb", 100_000), ("throttle", 50_000)],
    );
    let mut run = Run::start(&[("c", 1)], vec![cluster], vec![eds]);
    let created = run.d.h.now;
    assert!(
        run.config.clusters["c"]
            .as_ref()
            .unwrap()
            .load_stats
            .is_some(),
        "the cluster's config carries its load counters"
    );
    let stream = run.lrs_stream();
    run.d.advance(secs(3));
    run.respond(stream, &lrs_response(&[], secs(10)));
    run.expect_no_lrs();

    let mut in_flight = Vec::new();
    for i in 0..1_000 {
        let Some((port, call)) = run.call("c") else {
            continue;
        };
        if i % 10 == 0 {
            in_flight.push((port, call));
            continue;
        }
        let metrics: &[(&str, f64)] = if port == 8000 {
            &[("cpu", 0.25), ("queue", 2.0)]
        } else {
            &[]
        };
        let outcome = if i % 3 == 0 {
            CallOutcome::Failure
        } else {
            CallOutcome::Success
        };
        run.end(port, call, outcome, metrics);
    }
    assert_eq!(
        run.drops.len(),
        2,
        "both categories dropped: {:?}",
        run.drops
    );
    assert_eq!(run.counted.len(), 2, "both localities served");
    let dropped: u64 = run.drops.values().sum();
    assert!(
        (100..200).contains(&dropped),
        "about 14.5 % of 1,000: {dropped}"
    );

    run.d.advance(secs(10));
    let report = run.report(stream);
    let want = endpoint_pb::ClusterStats {
        cluster_name: "c".into(),
        cluster_service_name: "svc".into(),
        upstream_locality_stats: vec![
            run.counted[&8000].stats("z0"),
            run.counted[&8001].stats("z1"),
        ],
        total_dropped_requests: dropped,
        dropped_requests: (run.drops.iter())
            .map(
                |(category, n)| endpoint_pb::cluster_stats::DroppedRequests {
                    category: category.clone(),
                    dropped_count: *n,
                },
            )
            .collect(),
        load_report_interval: interval(run.d.h.now.saturating_duration_since(created)),
    };
    assert_eq!(report.cluster_stats, vec![want]);
    assert_eq!(
        report.cluster_stats[0].load_report_interval,
        interval(secs(13))
    );
    assert!(run.counted[&8000].in_progress > 0 && run.counted[&8001].in_progress > 0);

    // The next interval: only the calls that were in flight, which now end.
    let was_in_flight: Vec<_> = [8000, 8001]
        .iter()
        .map(|p| (0, run.counted[p].in_progress, 0))
        .collect();
    for (port, call) in in_flight {
        run.end(port, call, CallOutcome::Success, &[]);
    }
    run.d.advance(secs(10));
    let next = &run.report(stream).cluster_stats[0];
    let ended: Vec<_> = (next.upstream_locality_stats.iter())
        .map(|l| {
            (
                l.total_issued_requests,
                l.total_successful_requests,
                l.total_requests_in_progress,
            )
        })
        .collect();
    assert_eq!(ended, was_in_flight);
    assert!(
        next.upstream_locality_stats
            .iter()
            .all(|l| l.load_metric_stats.is_empty())
    );
    assert_eq!(next.total_dropped_requests, 0);
    assert!(next.dropped_requests.is_empty());
    assert_eq!(next.load_report_interval, interval(secs(10)));
}

/// A cluster whose circuit breaker is open counts the rejected picks as drops without
/// a category, as gRPC does.
#[test]
fn circuit_breaker_rejections_are_uncategorized_drops() {
    let cluster = any(CDS, &reporting_load(cluster_msg("c", 2)));
    let mut run = Run::start(
        &[("c", 1)],
        vec![cluster],
        vec![assignment("c", &["z0"], &[])],
    );
    let stream = run.lrs_stream();
    run.respond(stream, &lrs_response(&[], secs(5)));
    let held: Vec<CallToken> = (0..2)
        .map(|_| match run.pick("c") {
            Pick::Complete { call, .. } => call,
            other => panic!("{other:?}"),
        })
        .collect();
    for _ in 0..3 {
        assert!(matches!(run.pick("c"), Pick::Fail(s) if s.code == Code::UNAVAILABLE));
    }
    run.d.advance(secs(5));
    let stats = &run.report(stream).cluster_stats[0];
    assert_eq!(stats.total_dropped_requests, 3);
    assert!(stats.dropped_requests.is_empty(), "no category");
    assert_eq!(stats.cluster_service_name, "", "no EDS service name set");
    let z0 = &stats.upstream_locality_stats[0];
    // The warm-up call and the two held.
    assert_eq!(
        (z0.total_issued_requests, z0.total_requests_in_progress),
        (3, 2)
    );
    assert_eq!(held.len(), 2);
}

/// The server names the clusters it wants: the others are left out of the reports but
/// reset by them, so a later report never carries an older interval's counts; then
/// `send_all_clusters` brings them all.
#[test]
fn the_server_chooses_the_clusters_and_a_report_resets_the_others() {
    let clusters = vec![
        load_reporting_cluster("a", None),
        load_reporting_cluster("b", None),
    ];
    let eds = vec![assignment("a", &["z0"], &[]), assignment("b", &["z0"], &[])];
    let mut run = Run::start(&[("a", 1), ("b", 1)], clusters, eds);
    let stream = run.lrs_stream();
    run.expect_no_lrs();
    run.respond(stream, &lrs_response(&["a", "unknown"], secs(10)));
    for cluster in ["a", "b"] {
        assert!(matches!(run.pick(cluster), Pick::Complete { .. }));
    }
    run.d.advance(secs(10));
    let report = run.report(stream);
    let names: Vec<_> = report
        .cluster_stats
        .iter()
        .map(|c| c.cluster_name.as_str())
        .collect();
    assert_eq!(names, ["a"]);
    run.respond(stream, &lrs_response(&[], secs(10)));
    run.d.advance(secs(10));
    let report = run.report(stream);
    let issued: Vec<_> = (report.cluster_stats.iter())
        .map(|c| {
            (
                c.cluster_name.as_str(),
                c.upstream_locality_stats[0].total_issued_requests,
            )
        })
        .collect();
    assert_eq!(
        issued,
        [("a", 0), ("b", 0)],
        "b's pick went with the report that left it out"
    );
}

/// The interval: gRPC's 1 s minimum for a shorter one (zero included), timed from
/// when the previous report was taken by the transport; a changed interval restarts
/// the timer from the response, the same settings again change nothing; a second
/// report in a row with nothing counted is not sent, and the timer goes on.
#[test]
fn reports_follow_the_interval_and_a_second_empty_one_is_skipped() {
    let mut run = Run::start(
        &[("c", 1)],
        vec![load_reporting_cluster("c", None)],
        vec![assignment("c", &["z0"], &[])],
    );
    let stream = run.lrs_stream();
    let t0 = run.d.h.now;
    let zero = LoadStatsResponse {
        send_all_clusters: true,
        ..Default::default()
    };
    run.respond(stream, &zero);
    assert_eq!(
        run.d.h.client.poll_timeout(),
        Some(t0 + SEC),
        "1 s at least"
    );
    run.d.advance(SEC);
    // The warm-up call: counted once, then an empty report, then none.
    assert_eq!(
        run.lrs_request(stream).cluster_stats[0].upstream_locality_stats[0].total_issued_requests,
        1
    );
    run.d.advance(secs(2));
    run.expect_no_lrs();
    run.d.event(Event::RequestSent { stream });
    let sent_at = run.d.h.now;
    assert_eq!(
        run.d.h.client.poll_timeout(),
        Some(sent_at + SEC),
        "timed from the send"
    );
    run.d.advance(SEC);
    let empty = run.report(stream);
    assert_eq!(
        empty.cluster_stats[0].upstream_locality_stats[0].total_issued_requests,
        0
    );
    run.d.advance(SEC);
    run.expect_no_lrs();
    assert_eq!(
        run.d.h.client.poll_timeout(),
        Some(run.d.h.now + SEC),
        "the timer goes on"
    );

    run.d.advance(SEC / 2);
    run.respond(stream, &lrs_response(&[], secs(30)));
    let changed_at = run.d.h.now;
    assert_eq!(run.d.h.client.poll_timeout(), Some(changed_at + secs(30)));
    run.d.advance(secs(7));
    run.respond(stream, &lrs_response(&[], secs(30)));
    assert_eq!(
        run.d.h.client.poll_timeout(),
        Some(changed_at + secs(30)),
        "unchanged"
    );
    assert!(matches!(run.pick("c"), Pick::Complete { .. }));
    run.d.advance(secs(23));
    let report = run.report(stream);
    // Counted since the last snapshot, the skipped report's, 30.5 s before.
    assert_eq!(
        report.cluster_stats[0].load_report_interval,
        interval(Duration::from_millis(30_500))
    );
}

/// A stream that ends before any response backs off (gRPC's 1 s, ±20 %, growing);
/// one that ends after a response reopens at once with a fresh backoff. The new
/// stream sends the node again.
#[test]
fn a_stream_failing_before_a_response_backs_off_and_one_after_reopens_at_once() {
    let mut run = Run::start(
        &[("c", 1)],
        vec![load_reporting_cluster("c", None)],
        vec![assignment("c", &["z0"], &[])],
    );
    let first = run.lrs_stream();
    let unavailable = |stream| Event::StreamClosed {
        stream,
        status: Status::new(Code::UNIMPLEMENTED, "no LRS here"),
    };
    run.d.event(unavailable(first));
    run.expect_no_lrs();
    let failed_at = run.d.h.now;
    let retry = run.d.h.client.poll_timeout().expect("a retry is armed");
    let delay = retry.saturating_duration_since(failed_at);
    assert!((800..=1200).contains(&delay.as_millis()), "{delay:?}");
    run.d.advance(delay - Duration::from_millis(1));
    run.expect_no_lrs();
    run.d.advance(Duration::from_millis(1));
    let second = run.lrs_stream();
    run.d.event(unavailable(second));
    let delay = run
        .d
        .h
        .client
        .poll_timeout()
        .unwrap()
        .saturating_duration_since(run.d.h.now);
    assert!(
        (1280..=1920).contains(&delay.as_millis()),
        "grown ×1.6: {delay:?}"
    );
    run.d.advance(delay);
    let third = run.lrs_stream();
    run.respond(third, &lrs_response(&[], secs(10)));
    run.d.event(unavailable(third));
    let fourth = run.lrs_stream();
    assert!(fourth > third);
    run.d.event(unavailable(fourth));
    let delay = run
        .d
        .h
        .client
        .poll_timeout()
        .unwrap()
        .saturating_duration_since(run.d.h.now);
    assert!(
        (800..=1200).contains(&delay.as_millis()),
        "the response reset it: {delay:?}"
    );
    // The events of a stream that is gone are ignored.
    run.d.event(Event::RequestSent { stream: third });
    run.expect_no_lrs();
}

/// When the route stops naming the cluster and the load balancer lets it go, the next
/// report carries its final counts (a call still in flight when it went ends in the
/// locality it started in), and the stream closes once that report is sent.
#[test]
fn the_stream_closes_once_no_cluster_needs_it_after_the_final_counts() {
    let mut run = Run::start(
        &[("c", 1)],
        vec![load_reporting_cluster("c", None), cluster("plain")],
        vec![
            assignment("c", &["z0"], &[]),
            assignment("plain", &["z0"], &[]),
        ],
    );
    let stream = run.lrs_stream();
    run.respond(stream, &lrs_response(&[], secs(10)));
    let (port, call) = run.call("c").expect("a call on c");
    let routes = routes_config("routes", vec![to_cluster(prefix(""), "plain")]);
    run.d.respond(RDS, "2", vec![rc_any(&routes)]);
    let clusters = vec![load_reporting_cluster("c", None), cluster("plain")];
    run.d.respond(CDS, "2", clusters);
    let eds = vec![
        assignment("c", &["z0"], &[]),
        assignment("plain", &["z0"], &[]),
    ];
    run.d.respond(EDS, "2", eds);
    let config = run.d.expect_config();
    assert!(!config.clusters.contains_key("c"));
    let now = run.d.h.now;
    run.lb.update(now, &config);
    run.config = config;
    run.end(port, call, CallOutcome::Failure, &[]);
    run.d.advance(secs(10));
    let last = run.report(stream);
    let z0 = &last.cluster_stats[0].upstream_locality_stats[0];
    assert_eq!(
        (
            z0.total_issued_requests,
            z0.total_error_requests,
            z0.total_requests_in_progress
        ),
        (2, 1, 0),
        "the warm-up call and the one that ended after the cluster went"
    );
    match run.d.lrs.pop_front() {
        Some(Action::CloseStream { stream: s }) => assert_eq!(s, stream),
        other => panic!("expected the LRS stream to close, got {other:?}"),
    }
    run.d.advance(secs(60));
    run.expect_no_lrs();
    assert_eq!(run.d.h.client.poll_timeout(), None, "no LRS timer is left");
}

/// The client hands out counters only for a cluster it has from a server.
#[test]
fn no_counters_for_a_cluster_no_server_sent() {
    let mut d = DmDriver::new(LISTENER, "svc.example.com");
    assert!(d.h.client.cluster_load_stats("never-seen", None).is_none());
    d.pump();
    assert!(d.lrs.is_empty());
}

/// The channel to the server stays while load is reported to it: when the last watch
/// goes (the dependency manager stops) but a load balancer still holds the cluster's
/// counters, ADS closes its stream without dropping the channel; reports go on, and
/// the channel is dropped once the last report is sent and the LRS stream closes.
#[test]
fn the_channel_stays_while_load_is_reported_and_goes_with_the_last_report() {
    let mut run = Run::start(
        &[("c", 1)],
        vec![load_reporting_cluster("c", None)],
        vec![assignment("c", &["z0"], &[])],
    );
    let stream = run.lrs_stream();
    run.respond(stream, &lrs_response(&[], secs(10)));
    run.d.dm.stop(&mut run.d.h.client);
    run.d.dm = XdsDependencyManager::new(LISTENER, "svc.example.com");
    run.d.pump();
    let server = ServerId::from_raw(0);
    assert_eq!(run.d.h.client.current_stream(server), None, "ADS closed");
    assert!(
        run.d.dropped_channels.is_empty(),
        "LRS still uses the channel"
    );
    let (port, call) = run
        .call("c")
        .expect("the load balancer still has the cluster");
    run.d.advance(secs(10));
    let report = run.report(stream);
    let z0 = &report.cluster_stats[0].upstream_locality_stats[0];
    assert_eq!(
        (z0.total_issued_requests, z0.total_requests_in_progress),
        (2, 1)
    );
    run.expect_no_lrs();

    // The load balancer and the config let the counters go; the call still holds its
    // locality's until it ends.
    let now = run.d.h.now;
    run.lb.update_clusters(now, &BTreeMap::new());
    let mut bare = XdsConfig::clone(&run.config);
    for cluster in bare.clusters.values_mut().flatten() {
        cluster.load_stats = None;
    }
    run.config = Arc::new(bare);
    run.d.advance(secs(10));
    let _ = run.report(stream);
    run.expect_no_lrs();
    run.end(port, call, CallOutcome::Success, &[]);
    run.d.advance(secs(10));
    let last = run.report(stream);
    let z0 = &last.cluster_stats[0].upstream_locality_stats[0];
    assert_eq!(
        (z0.total_successful_requests, z0.total_requests_in_progress),
        (1, 0)
    );
    assert!(
        matches!(run.d.lrs.pop_front(), Some(Action::CloseStream { stream: s }) if s == stream)
    );
    assert_eq!(run.d.dropped_channels, [server]);
}

/// New endpoints take effect for counting with the update that brings them: a new
/// locality counts from then on, and a call started before the update ends where it
/// started.
#[test]
fn a_new_locality_counts_from_the_update_that_brings_it() {
    let mut run = Run::start(
        &[("c", 1)],
        vec![load_reporting_cluster("c", None)],
        vec![assignment("c", &["z0"], &[])],
    );
    let stream = run.lrs_stream();
    run.respond(stream, &lrs_response(&[], secs(10)));
    let (port, call) = run.call("c").expect("a call in z0");
    assert_eq!(port, 8000);
    run.d
        .respond(EDS, "2", vec![assignment("c", &["z0", "z1"], &[])]);
    let config = run.d.expect_config();
    let now = run.d.h.now;
    run.lb.update(now, &config);
    run.config = config;
    run.end(port, call, CallOutcome::Failure, &[]);
    for _ in 0..100 {
        if run.counted.get(&8001).is_some_and(|c| c.issued >= 3) {
            break;
        }
        run.ready_every_connection_asked_for();
        if let Some((port, call)) = run.call("c") {
            run.end(port, call, CallOutcome::Success, &[]);
        }
    }
    assert!(run.counted[&8001].issued >= 3, "z1 is picked");
    run.d.advance(secs(10));
    let report = run.report(stream);
    let got = &report.cluster_stats[0].upstream_locality_stats;
    let want = vec![
        run.counted[&8000].stats("z0"),
        run.counted[&8001].stats("z1"),
    ];
    assert_eq!(*got, want);
    assert_eq!(
        got[0].total_error_requests, 1,
        "the call from before the update"
    );
}
