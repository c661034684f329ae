//! The `xds:///` channel scenarios, generic over the [`Runtime`] like [`crate::suite`]:
//! three [`EchoBackend`]s on loopback behind the [`LoopbackServer`], an
//! [`XdsChannel`] to `xds:///echo.example.com`, and tonic's generic client.
//!
//! The mesh: the default route splits 80/20 between cluster `blue` (backends `blue-1`,
//! `blue-2`, with failure-percentage outlier detection) and `green` (`green-1`); RPCs
//! with `x-scenario: retry` go to `green` with a retry policy on UNAVAILABLE, and
//! those with `x-scenario: slow` to `green` with a 300 ms route timeout.

use std::time::Duration;

use xds_adapter_common::{ClientPool, Runtime, XdsChannel};
use xds_proto_core::Bootstrap;
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster_pb;
use xds_proto_core::pb::envoy::config::route::v3 as route_pb;
use xds_proto_core::pb::envoy::r#type::matcher::v3 as matcher;
use xds_proto_core::pb::google::protobuf::{Any, UInt32Value};
use xds_proto_core::resource::type_url;

use crate::LoopbackServer;
use crate::echo::{EchoBackend, EchoRequest, call_echo, echo_request};
use crate::resources::{
    any, cluster, cluster_action, cluster_msg, endpoints, forward, header, listener, pb_duration,
    prefix, rc_any, route_config, route_config_of, string_match, vhost, weighted_action,
    with_header, with_retry, with_stream_duration,
};
use crate::suite::{PROMPT, within};

/// The channel's target.
pub const TARGET: &str = "xds:///echo.example.com";
const LISTENER: &str = "echo.example.com";
const ROUTES: &str = "echo-routes";
const SPLIT: [(&str, u32); 2] = [("blue", 80), ("green", 20)];

/// What the scenarios measured, for the report.
#[derive(Clone, Debug, Default)]
pub struct ChannelFigures {
    /// RPCs of the split, and how many reached `blue`.
    pub split: (u32, u32),
    /// RPCs that failed on the failing backend before outlier detection ejected it.
    pub failed_before_ejection: u32,
    /// RPCs that then succeeded, none on the ejected backend.
    pub succeeded_after_ejection: u32,
    /// Attempts the retried RPC took (the first failed with UNAVAILABLE).
    pub retry_attempts: u64,
    /// How long the slow RPC ran before DEADLINE_EXCEEDED.
    pub deadline_after: Duration,
    /// RPCs in flight across a route change, all of which succeeded.
    pub in_flight_across_update: u32,
}

fn scenario_route(scenario: &str, action: route_pb::RouteAction) -> route_pb::Route {
    let exact = matcher::string_matcher::MatchPattern::Exact(scenario.into());
    forward(
        with_header(
            prefix("/"),
            header("x-scenario", string_match(exact, false), false),
        ),
        action,
    )
}

fn routes(split: &[(&str, u32)]) -> Any {
    let retry = route_pb::RetryPolicy {
        retry_on: "unavailable".into(),
        num_retries: Some(UInt32Value { value: 3 }),
        retry_back_off: Some(route_pb::retry_policy::RetryBackOff {
            base_interval: Some(pb_duration(Duration::from_millis(5))),
            max_interval: Some(pb_duration(Duration::from_millis(20))),
        }),
        ..Default::default()
    };
    let slow = Some(Duration::from_millis(300));
    let routes = vec![
        scenario_route("retry", with_retry(cluster_action("green"), retry)),
        scenario_route(
            "slow",
            with_stream_duration(cluster_action("green"), slow, None),
        ),
        forward(prefix("/"), weighted_action(split)),
    ];
    rc_any(&route_config_of(
        ROUTES,
        vec![vhost("echo", &[LISTENER], routes)],
    ))
}

/// `blue` ejects a backend whose RPCs fail at least half the time (A50 failure
/// percentage), evaluated every 100 ms, at most one of its two backends.
fn blue_cluster() -> Any {
    let mut blue = cluster_msg("blue", 1024);
    let value = |value| Some(UInt32Value { value });
    blue.outlier_detection = Some(cluster_pb::OutlierDetection {
        interval: Some(pb_duration(Duration::from_millis(100))),
        base_ejection_time: Some(pb_duration(Duration::from_secs(30))),
        max_ejection_percent: value(50),
        enforcing_success_rate: value(0),
        failure_percentage_threshold: value(50),
        enforcing_failure_percentage: value(100),
        failure_percentage_minimum_hosts: value(2),
        failure_percentage_request_volume: value(5),
        ..Default::default()
    });
    any(type_url::CLUSTER, &blue)
}

/// The three backends and the control plane serving the mesh.
pub struct Mesh {
    /// The control plane.
    pub server: LoopbackServer,
    /// `blue-1`, `blue-2`, `green-1`.
    pub backends: [EchoBackend; 3],
}

impl Mesh {
    /// Starts the backends and serves the mesh.
    pub fn start() -> Mesh {
        let backends = ["blue-1", "blue-2", "green-1"].map(EchoBackend::start);
        let port = |i: usize| u32::from(backends[i].port());
        let server = LoopbackServer::start();
        server.set_resources(type_url::LISTENER, "1", vec![listener(LISTENER, ROUTES)]);
        server.set_resources(type_url::ROUTE_CONFIGURATION, "1", vec![routes(&SPLIT)]);
        let green = any(type_url::CLUSTER, &cluster_msg("green", 1024));
        server.set_resources(type_url::CLUSTER, "1", vec![blue_cluster(), green]);
        server.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            "1",
            vec![
                endpoints("blue", &[port(0), port(1)]),
                endpoints("green", &[port(2)]),
            ],
        );
        Mesh { server, backends }
    }

    /// A channel to [`TARGET`] through a pool on the server's bootstrap.
    pub fn channel<R: Runtime>(&self, seed: u64) -> XdsChannel<R> {
        let bootstrap = Bootstrap::from_json_str(&self.server.bootstrap_json("channel", None))
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

fn with_scenario(
    mut request: tonic::Request<EchoRequest>,
    scenario: &'static str,
) -> tonic::Request<EchoRequest> {
    request.metadata_mut().insert(
        "x-scenario",
        tonic::metadata::MetadataValue::from_static(scenario),
    );
    request
}

/// Runs every scenario in order and returns the figures.
pub async fn channel_scenarios<R: Runtime>() -> ChannelFigures {
    let rt = R::current().expect("a runtime");
    let mesh = Mesh::start();
    let channel = mesh.channel::<R>(7);
    let mut figures = ChannelFigures::default();
    within(
        &rt,
        Duration::from_secs(60),
        "the channel scenarios",
        async {
            split(&mesh, &channel, &mut figures).await;
            retry(&mesh, &channel, &mut figures).await;
            deadline(&rt, &channel, &mut figures).await;
            ejection(&mesh, &channel, &mut figures).await;
            update_in_flight(&rt, &mesh, &channel, &mut figures).await;
        },
    )
    .await;
    figures
}

/// 2,000 RPCs on the default route split 80/20 within ±3 points.
async fn split<R: Runtime>(mesh: &Mesh, channel: &XdsChannel<R>, figures: &mut ChannelFigures) {
    const RPCS: u32 = 2_000;
    let mut blue = 0;
    for i in 0..RPCS {
        let reply = call_echo(channel.clone(), echo_request(&format!("split {i}")))
            .await
            .expect("an RPC on the default route succeeds");
        if reply.backend.starts_with("blue") {
            blue += 1;
        }
    }
    figures.split = (RPCS, blue);
    let share = f64::from(blue) / f64::from(RPCS);
    assert!(
        (0.77..=0.83).contains(&share),
        "blue got {share:.3} of the RPCs"
    );
    let [b1, b2, g1] = &mesh.backends;
    assert_eq!(b1.served() + b2.served() + g1.served(), u64::from(RPCS));
    assert!(
        b1.served() > 0 && b2.served() > 0,
        "round robin within blue"
    );
}

/// An injected UNAVAILABLE is retried into success.
async fn retry<R: Runtime>(mesh: &Mesh, channel: &XdsChannel<R>, figures: &mut ChannelFigures) {
    let green = &mesh.backends[2];
    let (served, failed) = (green.served(), green.failed());
    green.fail_next(2);
    let reply = call_echo(
        channel.clone(),
        with_scenario(echo_request("retry"), "retry"),
    )
    .await
    .expect("the retry policy turns two UNAVAILABLEs into success");
    assert_eq!(reply.backend, "green-1");
    assert_eq!(green.failed() - failed, 2, "two attempts failed");
    assert_eq!(green.served() - served, 1, "the third succeeded");
    figures.retry_attempts = green.failed() - failed + green.served() - served;
    // Without the retry route, the same failure reaches the application.
    green.fail_next(1);
    let mut outcomes = Vec::new();
    while green.failed() - failed < 3 {
        outcomes.push(call_echo(channel.clone(), echo_request("no retry")).await);
    }
    let status = outcomes
        .pop()
        .unwrap()
        .expect_err("the failed RPC is not retried");
    assert_eq!(status.code(), tonic::Code::Unavailable);
}

/// The route's 300 ms timeout ends a 5 s RPC with DEADLINE_EXCEEDED; a shorter
/// application deadline wins over it.
async fn deadline<R: Runtime>(rt: &R, channel: &XdsChannel<R>, figures: &mut ChannelFigures) {
    let slow = |delay_ms| {
        with_scenario(
            tonic::Request::new(EchoRequest {
                message: "slow".into(),
                delay_ms,
            }),
            "slow",
        )
    };
    let start = rt.now();
    let status = call_echo(channel.clone(), slow(5_000))
        .await
        .expect_err("the route's timeout ends the RPC");
    let took = rt.now() - start;
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(2),
        "{took:?}"
    );
    figures.deadline_after = took;
    let mut short = slow(5_000);
    short.set_timeout(Duration::from_millis(50));
    let start = rt.now();
    let status = call_echo(channel.clone(), short)
        .await
        .expect_err("the application's deadline");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    // The route's 300 ms would end it at 300 ms or later: anything sooner is the 50 ms
    // deadline (the bound leaves a loaded machine 240 ms to spare).
    let took = rt.now() - start;
    assert!(took < Duration::from_millis(290), "{took:?}");
    let fast = call_echo(channel.clone(), slow(10))
        .await
        .expect("within the timeout");
    assert_eq!(fast.backend, "green-1");
}

/// `blue-2` starts failing; outlier detection ejects it and RPCs continue on `blue-1`.
async fn ejection<R: Runtime>(mesh: &Mesh, channel: &XdsChannel<R>, figures: &mut ChannelFigures) {
    let [b1, b2, _] = &mesh.backends;
    b2.set_failing(true);
    // Until the ejection, some RPCs to blue-2 fail: count them, then expect a long run
    // of successes with none reaching blue-2.
    let mut streak = 0;
    let mut failed = 0;
    let mut sent = 0;
    while streak < 200 {
        sent += 1;
        assert!(sent < 20_000, "blue-2 was never ejected");
        match call_echo(channel.clone(), echo_request("ejection")).await {
            Ok(_) => streak += 1,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable);
                failed += 1;
                streak = 0;
            }
        }
    }
    let failed_on_b2 = b2.failed();
    let served_b1 = b1.served();
    for _ in 0..100 {
        call_echo(channel.clone(), echo_request("after ejection"))
            .await
            .expect("blue-2 is ejected");
    }
    assert_eq!(
        b2.failed(),
        failed_on_b2,
        "nothing reaches the ejected backend"
    );
    assert!(b1.served() > served_b1, "blue-1 takes blue's RPCs");
    assert!(failed > 0, "blue-2 failed some RPCs before it was ejected");
    figures.failed_before_ejection = failed;
    figures.succeeded_after_ejection = streak + 100;
}

/// RPCs in flight when the routes change finish on what they picked; new RPCs follow
/// the new routes (`blue` is dropped from them, A31 keeps it until they end).
async fn update_in_flight<R: Runtime>(
    rt: &R,
    mesh: &Mesh,
    channel: &XdsChannel<R>,
    figures: &mut ChannelFigures,
) {
    const IN_FLIGHT: u32 = 20;
    let slow = |i| {
        tonic::Request::new(EchoRequest {
            message: format!("in flight {i}"),
            delay_ms: 400,
        })
    };
    let calls = (0..IN_FLIGHT).map(|i| call_echo(channel.clone(), slow(i)));
    let in_flight = futures::future::join_all(calls);
    mesh.server.record_requests(true);
    let update = async {
        rt.sleep(Duration::from_millis(100)).await;
        mesh.server.set_resources(
            type_url::ROUTE_CONFIGURATION,
            "2",
            vec![routes(&[("green", 1)])],
        );
        // New RPCs go to green once the channel has the new routes.
        let mut green = 0;
        while green < 20 {
            let reply = call_echo(channel.clone(), echo_request("after the update")).await;
            let reply = reply.expect("RPCs continue through the update");
            green = if reply.backend == "green-1" {
                green + 1
            } else {
                0
            };
        }
    };
    let (replies, ()) = futures::future::join(in_flight, update).await;
    let blue = replies
        .iter()
        .map(|r| r.as_ref().expect("no in-flight RPC is dropped"))
        .filter(|r| r.backend.starts_with("blue"))
        .count();
    assert!(
        blue > 0,
        "some in-flight RPCs were on blue when it left the routes"
    );
    // With the last RPC on blue ended, its cluster reference is released: blue leaves
    // the configuration and the client unsubscribes it.
    let last_cds_names = || {
        (mesh.server.requests().into_iter())
            .rev()
            .find(|r| r.type_url == type_url::CLUSTER)
            .map(|r| r.resource_names)
    };
    within(
        rt,
        Duration::from_secs(5),
        "blue's cluster released",
        async {
            while last_cds_names().is_none_or(|names| names.iter().any(|n| n == "blue")) {
                rt.sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    assert_eq!(last_cds_names(), Some(vec!["green".to_string()]));
    figures.in_flight_across_update = IN_FLIGHT;
}

/// A cluster whose only endpoint refuses connections: RPCs fail with UNAVAILABLE, or
/// on a wait-for-ready channel wait until their deadline. A target naming an
/// authority the bootstrap does not know is refused when the channel is built.
pub async fn channel_failures<R: Runtime>() {
    let dead = crate::ports::RefusingPort::new();
    let closed_port = dead.port();
    let server = LoopbackServer::start();
    server.set_resources(type_url::LISTENER, "1", vec![listener(LISTENER, ROUTES)]);
    server.set_resources(
        type_url::ROUTE_CONFIGURATION,
        "1",
        vec![route_config(ROUTES, "dead")],
    );
    server.set_resources(type_url::CLUSTER, "1", vec![cluster("dead")]);
    server.set_resources(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        "1",
        vec![endpoints("dead", &[u32::from(closed_port)])],
    );
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("failures", None))
        .expect("the loopback bootstrap");
    let pool = ClientPool::<R>::builder(bootstrap)
        .build_pool()
        .expect("a pool");
    let rt = R::current().expect("a runtime");

    let channel = XdsChannel::builder(TARGET)
        .pool(&pool)
        .build()
        .expect("a channel");
    let status = within(
        &rt,
        PROMPT,
        "a failed pick",
        call_echo(channel, echo_request("x")),
    )
    .await
    .expect_err("no endpoint is reachable");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");

    let waiting = (XdsChannel::builder(TARGET).pool(&pool))
        .wait_for_ready(true)
        .build()
        .expect("a channel");
    let mut request = echo_request("wait");
    request.set_timeout(Duration::from_millis(300));
    let start = rt.now();
    let status = within(&rt, PROMPT, "a deadline", call_echo(waiting, request))
        .await
        .expect_err("nothing becomes ready");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(rt.now() - start >= Duration::from_millis(290));

    let refused = XdsChannel::builder("xds://nowhere.example/svc")
        .pool(&pool)
        .build();
    assert!(
        matches!(refused, Err(xds_adapter_common::Error::Target { .. })),
        "{refused:?}"
    );
}
