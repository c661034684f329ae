//! The cases about routing and per-route behaviour: path_matching, header_matching,
//! circuit_breaking, timeout and fault_injection.

use std::time::{Duration, Instant};

use tonic::Code;
use xds_adapter_tokio::xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_interop::pb::testing::ClientConfigureRequest;
use xds_interop::pb::testing::client_configure_request::{Metadata, RpcType};
use xds_test_server::resources::{
    case_sensitive, cluster, cluster_action, cluster_with, forward, header, listener_rds, path,
    prefix, range, regex, regex_matcher, to_cluster, with_header, with_stream_duration,
};

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// Two clusters of one backend each, `default` and `c2`, routed by `routes`, and a
/// client sending both methods with `args`.
struct TwoClusters {
    plane: ControlPlane,
    _backends: [Backend; 2],
    client: InteropClient,
}

impl TwoClusters {
    async fn start(binary: &ClientBinary, routes: Vec<route::Route>, args: &[&str]) -> TwoClusters {
        let plane = ControlPlane::start();
        let default = Backend::start("default-0").await;
        let c2 = Backend::start("c2-0").await;
        plane.set(
            vec![cluster("default"), cluster("c2")],
            vec![assignment("default", &[&default]), assignment("c2", &[&c2])],
            routes,
        );
        let mut all = vec![
            format!("--server={TARGET}"),
            "--rpc=EmptyCall,UnaryCall".to_string(),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let client = InteropClient::start(binary, &plane.bootstrap(), &all).await;
        TwoClusters {
            plane,
            _backends: [default, c2],
            client,
        }
    }

    /// Routes `routes` (then everything else to `default`), and waits until UnaryCall
    /// goes to `unary` only and EmptyCall to `empty` only, for two blocks in a row.
    async fn expect(
        &mut self,
        case: &str,
        mut routes: Vec<route::Route>,
        unary: &str,
        empty: &str,
    ) {
        routes.push(to_cluster(prefix(""), "default"));
        self.plane.set_routes(routes);
        let only = |stats: &xds_interop::pb::testing::LoadBalancerStatsResponse| {
            let u = method_peers(stats, "UnaryCall");
            let e = method_peers(stats, "EmptyCall");
            stats.num_failures == 0
                && u.len() == 1
                && u.contains_key(unary)
                && e.len() == 1
                && e.contains_key(empty)
        };
        let what = format!("{case}: UnaryCall to {unary}, EmptyCall to {empty}");
        wait_for_block(&mut self.client, 40, LIMIT, &what, only).await;
        let next = self.client.stats(40, Duration::from_secs(10)).await;
        assert!(only(&next), "{what}: the next block: {next:?}");
    }
}

fn to_c2(m: route::RouteMatch) -> route::Route {
    to_cluster(m, "c2")
}

pub async fn path_matching(binary: ClientBinary) {
    let _timer = Timer::start("path_matching", &binary);
    let mut mesh = TwoClusters::start(
        &binary,
        vec![to_cluster(prefix(""), "default")],
        &["--qps=50"],
    )
    .await;
    mesh.expect("all to default", vec![], "default-0", "default-0")
        .await;
    mesh.expect(
        "path EmptyCall",
        vec![to_c2(path(EMPTY))],
        "default-0",
        "c2-0",
    )
    .await;
    let unary_prefix = "/grpc.testing.TestService/Unary";
    mesh.expect(
        "prefix Unary",
        vec![to_c2(prefix(unary_prefix))],
        "c2-0",
        "default-0",
    )
    .await;
    let two = vec![
        to_cluster(prefix(unary_prefix), "default"),
        to_c2(path(EMPTY)),
    ];
    mesh.expect(
        "prefix Unary to default, path EmptyCall",
        two,
        "default-0",
        "c2-0",
    )
    .await;
    mesh.expect(
        "regex",
        vec![to_c2(regex(r"^\/.*\/UnaryCall$"))],
        "c2-0",
        "default-0",
    )
    .await;
    let mixed_case = case_sensitive(path("/gRpC.tEsTinG.tEstseRvice/empTycaLl"), false);
    mesh.expect(
        "case insensitive path",
        vec![to_c2(mixed_case)],
        "default-0",
        "c2-0",
    )
    .await;
}

#[allow(deprecated)]
pub async fn header_matching(binary: ClientBinary) {
    use route::header_matcher::HeaderMatchSpecifier as Spec;
    let _timer = Timer::start("header_matching", &binary);
    let metadata = "--metadata=EmptyCall:xds_md:empty_ytpme,UnaryCall:xds_md:unary_yranu,\
                    UnaryCall:xds_md_numeric:159";
    let mut mesh = TwoClusters::start(
        &binary,
        vec![to_cluster(prefix(""), "default")],
        &["--qps=50", metadata],
    )
    .await;
    let on = |name: &str, spec: Spec, invert: bool| {
        vec![to_c2(with_header(prefix(""), header(name, spec, invert)))]
    };
    let cases = [
        (
            "exact",
            on("xds_md", Spec::ExactMatch("empty_ytpme".into()), false),
            "default-0",
            "c2-0",
        ),
        (
            "prefix",
            on("xds_md", Spec::PrefixMatch("un".into()), false),
            "c2-0",
            "default-0",
        ),
        (
            "suffix",
            on("xds_md", Spec::SuffixMatch("me".into()), false),
            "default-0",
            "c2-0",
        ),
        (
            "present",
            on("xds_md_numeric", Spec::PresentMatch(true), false),
            "c2-0",
            "default-0",
        ),
        (
            "exact inverted",
            on("xds_md", Spec::ExactMatch("unary_yranu".into()), true),
            "default-0",
            "c2-0",
        ),
        (
            "range",
            on("xds_md_numeric", Spec::RangeMatch(range(100, 200)), false),
            "c2-0",
            "default-0",
        ),
        (
            "regex",
            on(
                "xds_md",
                Spec::SafeRegexMatch(regex_matcher("^em.*me$")),
                false,
            ),
            "default-0",
            "c2-0",
        ),
    ];
    for (case, routes, unary, empty) in cases {
        mesh.expect(case, routes, unary, empty).await;
    }
}

pub async fn circuit_breaking(binary: ClientBinary) {
    let _timer = Timer::start("circuit_breaking", &binary);
    let plane = ControlPlane::start();
    let b1 = Backend::start("c1-0").await;
    let b2 = Backend::start("c2-0").await;
    let endpoints = vec![assignment("c1", &[&b1]), assignment("c2", &[&b2])];
    let routes = || vec![to_cluster(path(UNARY), "c1"), to_cluster(path(EMPTY), "c2")];
    // The description's 500 and 1000 (then 800), scaled down by 10.
    plane.set(
        vec![cluster_with("c1", 50), cluster_with("c2", 100)],
        endpoints.clone(),
        routes(),
    );
    let args = [
        format!("--server={TARGET}"),
        "--qps=100".into(),
        "--rpc=UnaryCall,EmptyCall".into(),
        "--metadata=EmptyCall:rpc-behavior:keep-open,UnaryCall:rpc-behavior:keep-open".into(),
        // Longer than the case: the RPCs kept open stay in flight.
        "--rpc_timeout_sec=120".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut client = InteropClient::start(&binary, &plane.bootstrap(), &args).await;
    wait_for_in_flight(&mut client, 50, 100).await;
    plane.set(
        vec![cluster_with("c1", 80), cluster_with("c2", 100)],
        endpoints,
        routes(),
    );
    wait_for_in_flight(&mut client, 80, 100).await;
}

/// Waits until `unary` UnaryCalls and `empty` EmptyCalls are in flight, steadily:
/// for half a second every reading is at most 2 above them (an RPC counted as started
/// and not yet refused by the circuit breaker) and the least reading equals them (a
/// limit off by one never does).
async fn wait_for_in_flight(client: &mut InteropClient, unary: i32, empty: i32) {
    let deadline = Instant::now() + LIMIT;
    let mut steady: Option<(Instant, (i32, i32))> = None;
    loop {
        let stats = client.accumulated().await;
        let got = (
            in_flight(&stats, "UNARY_CALL"),
            in_flight(&stats, "EMPTY_CALL"),
        );
        let near = |got: i32, limit: i32| (limit..=limit + 2).contains(&got);
        if near(got.0, unary) && near(got.1, empty) {
            let (since, least) = steady.get_or_insert((Instant::now(), got));
            *least = (least.0.min(got.0), least.1.min(got.1));
            if since.elapsed() >= Duration::from_millis(500) && *least == (unary, empty) {
                return;
            }
        } else {
            steady = None;
        }
        assert!(
            Instant::now() < deadline,
            "in flight: {got:?}, expected ({unary}, {empty}); {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn configure(
    types: &[RpcType],
    metadata: &[(RpcType, &str, &str)],
    timeout_sec: i32,
) -> ClientConfigureRequest {
    ClientConfigureRequest {
        types: types.iter().map(|t| *t as i32).collect(),
        metadata: metadata
            .iter()
            .map(|(t, key, value)| Metadata {
                r#type: *t as i32,
                key: key.to_string(),
                value: value.to_string(),
            })
            .collect(),
        timeout_sec,
    }
}

pub async fn timeout(binary: ClientBinary) {
    let _timer = Timer::start("timeout", &binary);
    // The description's times scaled down, in the same order: an application timeout
    // of 1 s (the least a ClientConfigureRequest can set) < a sleep of 1.2 s (the
    // server's decimal extension) < the route's max_stream_duration of 1.5 s < a sleep
    // of 2 s.
    let route_limit = Duration::from_millis(1500);
    let plane = ControlPlane::start();
    plane.set_listener(listener_rds(LISTENER, ROUTES, None));
    let backend = Backend::start("backend-0").await;
    let limited = with_stream_duration(cluster_action("c"), Some(route_limit), None);
    plane.set(
        vec![cluster("c")],
        vec![assignment("c", &[&backend])],
        vec![forward(path(UNARY), limited), to_cluster(prefix(""), "c")],
    );
    let mut client = InteropClient::start(
        &binary,
        &plane.bootstrap(),
        &[&format!("--server={TARGET}"), "--qps=20"],
    )
    .await;
    use RpcType::{EmptyCall, UnaryCall};
    let sleep = |t, s| (t, "rpc-behavior", s);

    client
        .configure(configure(&[UnaryCall], &[sleep(UnaryCall, "sleep-1.2")], 1))
        .await;
    wait_for_windows(&mut client, LIMIT, "app_timeout_exceeded", |w| {
        all_ended_with(w, "UNARY_CALL", Code::DeadlineExceeded, 10)
    })
    .await;

    client.configure(configure(&[UnaryCall], &[], 0)).await;
    wait_for_windows(&mut client, LIMIT, "timeout_not_exceeded", |w| {
        all_ended_with(w, "UNARY_CALL", Code::Ok, 10)
    })
    .await;

    let both = [sleep(UnaryCall, "sleep-2"), sleep(EmptyCall, "sleep-2")];
    client
        .configure(configure(&[UnaryCall, EmptyCall], &both, 0))
        .await;
    wait_for_windows(&mut client, LIMIT, "timeout_different_route", |w| {
        all_ended_with(w, "UNARY_CALL", Code::DeadlineExceeded, 10)
            && all_ended_with(w, "EMPTY_CALL", Code::Ok, 10)
    })
    .await;
}
