//! The channel's HTTP filters on loopback (A39), generic over the [`Runtime`] like
//! [`crate::channel_suite`]: one [`EchoBackend`] behind the [`LoopbackServer`], whose
//! listener runs a fault injection filter (A33) that injects nothing at the top level;
//! routes override it by the RPC's `x-scenario` header.
//!
//! - `abort-half`: aborts 50 % of RPCs with ABORTED; with the channel's filter seed
//!   the aborted RPCs are exactly those whose draw from the core's `Seeded` stream
//!   falls under one half, and none of them reaches the backend;
//! - `delay`: delays every RPC by 300 ms before it is sent; within a shorter deadline
//!   it ends DEADLINE_EXCEEDED without reaching the backend;
//! - `headers`: the RPC's `x-envoy-fault-*` headers decide;
//! - anything else: no fault.

use std::time::{Duration, Instant};

use xds_adapter_common::{ClientPool, Runtime, XdsChannel};
use xds_proto_core::Bootstrap;
use xds_proto_core::filter::fault::{ABORT_GRPC_HEADER, ABORT_MESSAGE, Fraction};
use xds_proto_core::pb::envoy::config::route::v3 as route_pb;
use xds_proto_core::pb::envoy::extensions::filters::http::fault::v3::HttpFault;
use xds_proto_core::pb::envoy::r#type::matcher::v3 as matcher;
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::type_url;
use xds_proto_core::selector::Seeded;

use crate::LoopbackServer;
use crate::echo::{
    EchoBackend, EchoReply, EchoRequest, call_echo, call_echo_response, echo_request,
};
use crate::resources::{
    Host, Locality, any, cluster_action, cluster_msg, endpoints, endpoints_with, fault_abort,
    fault_any, fault_delay, fault_filter, fault_from_headers, forward, hcm_rds_with_filters,
    header, listener_of, per_million, prefix, rc_any, route_config_of, stateful_session_filter,
    string_match, vhost, with_header,
};
use crate::suite::within;

const TARGET: &str = "xds:///faults.example.com";
const LISTENER: &str = "faults.example.com";
const ROUTES: &str = "fault-routes";
/// The channel's filter seed.
const FILTER_SEED: u64 = 2026;
/// How long the `delay` route delays an RPC.
const DELAY: Duration = Duration::from_millis(300);

fn scenario_route(scenario: &str, fault: Option<&HttpFault>) -> route_pb::Route {
    let exact = matcher::string_matcher::MatchPattern::Exact(scenario.into());
    let mut route = forward(
        with_header(
            prefix("/"),
            header("x-scenario", string_match(exact, false), false),
        ),
        cluster_action("echo"),
    );
    if let Some(fault) = fault {
        route
            .typed_per_filter_config
            .insert("fault".into(), fault_any(fault));
    }
    route
}

/// The backend and the control plane serving the listener, routes, cluster and
/// endpoints.
fn start() -> (LoopbackServer, EchoBackend) {
    let backend = EchoBackend::start("echo-1");
    let server = LoopbackServer::start();
    let manager = hcm_rds_with_filters(ROUTES, vec![fault_filter("fault", &HttpFault::default())]);
    server.set_resources(
        type_url::LISTENER,
        "1",
        vec![listener_of(LISTENER, &manager)],
    );
    let routes = vec![
        scenario_route("abort-half", Some(&fault_abort(10, per_million(500_000)))),
        scenario_route("delay", Some(&fault_delay(DELAY, per_million(1_000_000)))),
        scenario_route("headers", Some(&fault_from_headers(per_million(1_000_000)))),
        forward(prefix("/"), cluster_action("echo")),
    ];
    server.set_resources(
        type_url::ROUTE_CONFIGURATION,
        "1",
        vec![rc_any(&route_config_of(
            ROUTES,
            vec![vhost("faults", &[LISTENER], routes)],
        ))],
    );
    server.set_resources(
        type_url::CLUSTER,
        "1",
        vec![any(type_url::CLUSTER, &cluster_msg("echo", 1024))],
    );
    server.set_resources(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        "1",
        vec![endpoints("echo", &[u32::from(backend.port())])],
    );
    (server, backend)
}

fn channel<R: Runtime>(server: &LoopbackServer) -> XdsChannel<R> {
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("filters", None))
        .expect("the loopback bootstrap");
    let pool = ClientPool::<R>::builder(bootstrap)
        .build_pool()
        .expect("a pool");
    XdsChannel::builder(TARGET)
        .pool(&pool)
        .seed(7)
        .filter_seed(FILTER_SEED)
        .build()
        .expect("a channel")
}

fn request(
    scenario: &'static str,
    headers: &[(&'static str, &'static str)],
) -> tonic::Request<EchoRequest> {
    let mut request = echo_request(scenario);
    let metadata = request.metadata_mut();
    metadata.insert(
        "x-scenario",
        tonic::metadata::MetadataValue::from_static(scenario),
    );
    for (name, value) in headers {
        metadata.insert(*name, tonic::metadata::MetadataValue::from_static(value));
    }
    request
}

async fn call<R: Runtime>(
    channel: &XdsChannel<R>,
    request: tonic::Request<EchoRequest>,
) -> Result<EchoReply, tonic::Status> {
    call_echo(channel.clone(), request).await
}

/// What the fault filter did on loopback.
#[derive(Clone, Debug, Default)]
pub struct FilterFigures {
    /// RPCs on the `abort-half` route, and how many were aborted.
    pub aborted: (u32, u32),
    /// How long the delayed RPC took.
    pub delayed_for: Duration,
    /// How long the RPC delayed past its deadline took to fail.
    pub deadline_after: Duration,
}

/// Runs the scenarios in order (the abort count first: the seeded stream's first
/// draws are its) and returns the figures.
pub async fn fault_scenarios<R: Runtime>() -> FilterFigures {
    let rt = R::current().expect("a runtime");
    let (server, backend) = start();
    let channel = channel::<R>(&server);
    let mut figures = FilterFigures::default();
    within(&rt, Duration::from_secs(60), "the fault scenarios", async {
        // The first configuration: an RPC without a fault.
        call(&channel, request("none", &[]))
            .await
            .expect("no fault");
        abort_half(&channel, &backend, &mut figures).await;
        delay(&channel, &backend, &mut figures).await;
        headers(&channel, &backend).await;
    })
    .await;
    drop(server);
    figures
}

/// 200 RPCs, 50 % aborted: exactly those whose draw falls under one half.
async fn abort_half<R: Runtime>(
    channel: &XdsChannel<R>,
    backend: &EchoBackend,
    figures: &mut FilterFigures,
) {
    const RPCS: u32 = 200;
    let half = Fraction {
        numerator: 500_000,
        denominator: 1_000_000,
    };
    let mut stream = Seeded(FILTER_SEED);
    let served_before = backend.served();
    let mut aborted = 0;
    for i in 0..RPCS {
        let expected = half.draw(&mut stream);
        match call(channel, request("abort-half", &[])).await {
            Ok(_) => assert!(!expected, "RPC {i} should have been aborted"),
            Err(status) => {
                assert!(expected, "RPC {i} was aborted: {status:?}");
                assert_eq!(status.code(), tonic::Code::Aborted);
                assert_eq!(status.message(), ABORT_MESSAGE);
                aborted += 1;
            }
        }
    }
    figures.aborted = (RPCS, aborted);
    assert!((70..=130).contains(&aborted), "{aborted} of {RPCS} aborted");
    assert_eq!(
        backend.served() - served_before,
        u64::from(RPCS - aborted),
        "an aborted RPC is never sent"
    );
}

/// Every RPC on `delay` waits 300 ms before it is sent; one with a 100 ms deadline
/// fails DEADLINE_EXCEEDED at its deadline, unsent.
async fn delay<R: Runtime>(
    channel: &XdsChannel<R>,
    backend: &EchoBackend,
    figures: &mut FilterFigures,
) {
    let received = backend.received();
    let start = Instant::now();
    call(channel, request("delay", &[]))
        .await
        .expect("delayed, then served");
    figures.delayed_for = start.elapsed();
    assert!(figures.delayed_for >= DELAY, "{:?}", figures.delayed_for);
    assert_eq!(backend.received() - received, 1);
    let mut short = request("delay", &[]);
    short.set_timeout(Duration::from_millis(100));
    let start = Instant::now();
    let status = call(channel, short)
        .await
        .expect_err("the deadline passes in the delay");
    figures.deadline_after = start.elapsed();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(
        figures.deadline_after < DELAY,
        "{:?}",
        figures.deadline_after
    );
    assert_eq!(
        backend.received() - received,
        1,
        "the late RPC was never sent"
    );
}

/// `x-envoy-fault-abort-grpc-request` aborts with its code; without it, no fault.
async fn headers<R: Runtime>(channel: &XdsChannel<R>, backend: &EchoBackend) {
    let received = backend.received();
    let status = call(channel, request("headers", &[(ABORT_GRPC_HEADER, "7")]))
        .await
        .expect_err("the header aborts");
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    call(channel, request("headers", &[]))
        .await
        .expect("no header, no fault");
    assert_eq!(backend.received() - received, 1);
}

// ---------------------------------------------------------------------------------------
// Stateful session affinity (A55)
// ---------------------------------------------------------------------------------------

const SESSION_TARGET: &str = "xds:///sessions.example.com";
const SESSION_LISTENER: &str = "sessions.example.com";
const SESSION_ROUTES: &str = "session-routes";
const COOKIE: &str = "grpc-session";

/// Cluster `pinned` (round robin) whose `override_host_status` is UNKNOWN, HEALTHY and,
/// when `draining`, DRAINING (A55).
fn session_cluster(draining: bool) -> Any {
    use xds_proto_core::pb::envoy::config::cluster::v3 as cluster_pb;
    use xds_proto_core::pb::envoy::config::core::v3::{HealthStatus, HealthStatusSet};
    let mut statuses = vec![HealthStatus::Unknown as i32, HealthStatus::Healthy as i32];
    if draining {
        statuses.push(HealthStatus::Draining as i32);
    }
    let mut cluster = cluster_msg("pinned", 1024);
    cluster.common_lb_config = Some(cluster_pb::cluster::CommonLbConfig {
        override_host_status: Some(HealthStatusSet { statuses }),
        ..Default::default()
    });
    any(type_url::CLUSTER, &cluster)
}

/// The endpoints of `pinned`: both backends, the one on `draining` DRAINING.
fn session_endpoints(backends: &[EchoBackend; 2], draining: Option<u16>) -> Vec<Any> {
    use xds_proto_core::pb::envoy::config::core::v3::HealthStatus;
    let hosts = (backends.iter())
        .map(|b| {
            let mut host = Host::healthy(u32::from(b.port()));
            if draining == Some(b.port()) {
                host.health = HealthStatus::Draining;
            }
            host
        })
        .collect();
    vec![endpoints_with(
        "pinned",
        &[Locality::new("r1", "z1", hosts)],
    )]
}

/// Two backends in cluster `pinned` (round robin, DRAINING hosts allowed for sessions)
/// behind a listener whose stateful session filter uses cookie `grpc-session` on every
/// path.
fn start_sessions() -> (LoopbackServer, [EchoBackend; 2]) {
    let backends = ["pinned-1", "pinned-2"].map(EchoBackend::start);
    let server = LoopbackServer::start();
    let manager = hcm_rds_with_filters(
        SESSION_ROUTES,
        vec![stateful_session_filter(
            "session",
            COOKIE,
            "/",
            Some(Duration::from_secs(60)),
        )],
    );
    server.set_resources(
        type_url::LISTENER,
        "1",
        vec![listener_of(SESSION_LISTENER, &manager)],
    );
    let routes = vec![forward(prefix("/"), cluster_action("pinned"))];
    server.set_resources(
        type_url::ROUTE_CONFIGURATION,
        "1",
        vec![rc_any(&route_config_of(
            SESSION_ROUTES,
            vec![vhost("sessions", &[SESSION_LISTENER], routes)],
        ))],
    );
    server.set_resources(type_url::CLUSTER, "1", vec![session_cluster(true)]);
    server.set_resources(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        "1",
        session_endpoints(&backends, None),
    );
    (server, backends)
}

/// The port of the backend named `name`.
fn pinned_port(backends: &[EchoBackend; 2], name: &str) -> u16 {
    let backend = backends.iter().find(|b| b.name() == name);
    backend.expect("a backend of the cluster").port()
}

/// The cookie's `name=value` from a response's `set-cookie`, if any.
fn set_cookie(response: &tonic::Response<EchoReply>) -> Option<String> {
    let header = response.metadata().get("set-cookie")?.to_str().ok()?;
    Some(header.split(';').next()?.to_owned())
}

async fn session_call<R: Runtime>(
    channel: &XdsChannel<R>,
    cookie: Option<&str>,
) -> tonic::Response<EchoReply> {
    let mut request = echo_request("session");
    if let Some(cookie) = cookie {
        request
            .metadata_mut()
            .insert("cookie", cookie.parse().expect("a cookie header"));
    }
    call_echo_response(channel.clone(), request)
        .await
        .expect("a session RPC succeeds")
}

/// What stateful session affinity did on loopback.
#[derive(Clone, Debug, Default)]
pub struct SessionFigures {
    /// The backend the first response's cookie pinned, and how many of the following
    /// RPCs with the cookie it served (of how many).
    pub pinned: (String, u32, u32),
    /// Backends RPCs without a cookie reached.
    pub without_cookie: Vec<String>,
    /// Once the pinned backend is DRAINING: how many RPCs with its cookie it served
    /// (of how many), and the backends RPCs without a cookie reached.
    pub draining: (u32, u32),
    /// The same once `override_host_status` leaves DRAINING out.
    pub draining_disallowed: (u32, u32),
}

/// Sends RPCs without a cookie until `n` in a row avoid `backend` (an update that
/// took it out of round robin applied); how many were sent.
async fn until_avoided<R: Runtime>(channel: &XdsChannel<R>, backend: &str, n: u32) -> u32 {
    let (mut sent, mut in_a_row) = (0, 0);
    while in_a_row < n {
        let response = session_call(channel, None).await;
        in_a_row = if response.get_ref().backend == backend {
            0
        } else {
            in_a_row + 1
        };
        sent += 1;
        assert!(
            sent < 10_000,
            "the update taking {backend} out never applied"
        );
    }
    sent
}

/// How many of `n` RPCs with `cookie` reached `backend`.
async fn served_by<R: Runtime>(
    channel: &XdsChannel<R>,
    cookie: &str,
    backend: &str,
    n: u32,
) -> u32 {
    let mut served = 0;
    for _ in 0..n {
        if session_call(channel, Some(cookie)).await.get_ref().backend == backend {
            served += 1;
        }
    }
    served
}

/// The first response sets the cookie; RPCs carrying it all reach its backend (with
/// no new cookie), while RPCs without it get a cookie each; a cookie naming the other
/// backend moves the session there, and an invalid one gets a fresh cookie. When the
/// pinned backend turns DRAINING (allowed by `override_host_status`), RPCs with its
/// cookie still reach it and RPCs without never do; once the cluster's
/// `override_host_status` leaves DRAINING out, the cookie's RPCs go elsewhere.
pub async fn session_scenarios<R: Runtime>() -> SessionFigures {
    let rt = R::current().expect("a runtime");
    let (server, backends) = start_sessions();
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("sessions", None))
        .expect("the loopback bootstrap");
    let pool = ClientPool::<R>::builder(bootstrap)
        .build_pool()
        .expect("a pool");
    let channel: XdsChannel<R> = XdsChannel::builder(SESSION_TARGET)
        .pool(&pool)
        .seed(11)
        .build()
        .expect("a channel");
    let mut figures = SessionFigures::default();
    within(
        &rt,
        Duration::from_secs(60),
        "the session scenarios",
        async {
            let first = session_call(&channel, None).await;
            let cookie = set_cookie(&first).expect("the first response sets the cookie");
            assert!(cookie.starts_with("grpc-session="), "{cookie}");
            let pinned = first.get_ref().backend.clone();
            let mut served = 0;
            for _ in 0..20 {
                let response = session_call(&channel, Some(&cookie)).await;
                assert_eq!(set_cookie(&response), None, "the cookie already names it");
                if response.get_ref().backend == pinned {
                    served += 1;
                }
            }
            assert_eq!(served, 20, "every RPC with the cookie reached {pinned}");
            figures.pinned = (pinned.clone(), served, 20);
            for _ in 0..6 {
                let response = session_call(&channel, None).await;
                assert!(set_cookie(&response).is_some(), "no cookie: one is set");
                figures
                    .without_cookie
                    .push(response.get_ref().backend.clone());
            }
            figures.without_cookie.sort();
            figures.without_cookie.dedup();
            // The cookie of the other backend moves the session there.
            let other = backends
                .iter()
                .find(|b| b.name() != pinned)
                .expect("two backends");
            let value = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("{};cluster:pinned", other.addr()),
            );
            let response = session_call(&channel, Some(&format!("{COOKIE}={value}"))).await;
            assert_eq!(response.get_ref().backend, other.name());
            assert_eq!(set_cookie(&response), None);
            // An invalid cookie is ignored: a fresh one is set.
            let response = session_call(&channel, Some(&format!("{COOKIE}=not-base64!"))).await;
            assert!(set_cookie(&response).is_some());
            // A55: the pinned backend drains; its sessions stay, new RPCs avoid it.
            server.set_resources(
                type_url::CLUSTER_LOAD_ASSIGNMENT,
                "2",
                session_endpoints(&backends, Some(pinned_port(&backends, &pinned))),
            );
            until_avoided(&channel, &pinned, 8).await;
            figures.draining = (served_by(&channel, &cookie, &pinned, 20).await, 20);
            assert_eq!(
                figures.draining.0, 20,
                "the cookie's RPCs reach DRAINING {pinned}"
            );
            for _ in 0..10 {
                let response = session_call(&channel, None).await;
                assert_ne!(
                    response.get_ref().backend,
                    pinned,
                    "no cookie: never DRAINING"
                );
            }
            // Without DRAINING in override_host_status the session moves.
            server.set_resources(type_url::CLUSTER, "2", vec![session_cluster(false)]);
            let mut moved = 0;
            while session_call(&channel, Some(&cookie))
                .await
                .get_ref()
                .backend
                == pinned
            {
                moved += 1;
                assert!(moved < 10_000, "the cluster update never applied");
            }
            figures.draining_disallowed = (served_by(&channel, &cookie, &pinned, 20).await, 20);
            assert_eq!(figures.draining_disallowed.0, 0, "DRAINING is not allowed");
        },
    )
    .await;
    drop(server);
    figures
}
