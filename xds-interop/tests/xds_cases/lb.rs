//! The cases about load balancing and failover: ping_pong, round_robin,
//! backends_restart, secondary_locality_gets_requests_on_primary_failure,
//! change_backend_service and traffic_splitting.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;
use xds_adapter_tokio::xds_proto_core::pb::google::protobuf::Any;
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_test_server::resources::{
    Host, Locality, RbacAction, SERVER_LISTENER_TEMPLATE, any, cluster, downstream_tls_context,
    endpoints_with, forward, listener, mtls_cluster, path_permission, prefix, principal_name,
    rbac_filter, rbac_filter_chain, rbac_policy, rbac_rules, server_listener_name, server_routes,
    serving_listener, tls_server_listener_msg, to_cluster, weighted_action,
};
use xds_test_server::security_suite::{INSTANCE, MeshPki, SERVER_ID};

const LIMIT: Duration = Duration::from_secs(30);

/// Which backends a case runs.
pub enum Servers {
    /// `xds-interop-server`.
    Ours,
    /// gRPC-Go's interop server, plain.
    GrpcGo(PathBuf),
    /// gRPC-Go's interop server, xDS-enabled (`--secure_mode=true`), each served a
    /// Listener for its address that serves every RPC in plaintext.
    GrpcGoXds(PathBuf),
    /// The same with mTLS (gRFC A29): the Listeners require a client certificate of
    /// the mesh CA (the `file_watcher` instance `server`), the cluster's
    /// UpstreamTlsContext the servers' SPIFFE ID (instance `mesh`), and the client
    /// runs with `--secure_mode=true`.
    GrpcGoXdsMtls(PathBuf),
    /// `xds-interop-server --secure_mode=true` (an `XdsServer`), served Listeners as
    /// [`Servers::GrpcGoXds`]'s.
    OursXds,
    /// The same with mTLS, as [`Servers::GrpcGoXdsMtls`].
    OursXdsMtls,
    /// [`Servers::OursXdsMtls`] whose Listeners also run RBAC (gRFC A41): one ALLOW
    /// policy, UnaryCall from the client's SPIFFE ID ([`RBAC_ALLOWED_PRINCIPAL`]), so
    /// that every EmptyCall is denied.
    OursXdsMtlsRbac,
}

/// The identity of the mTLS clients' certificate (the mesh PKI's `client-1`).
pub const RBAC_ALLOWED_PRINCIPAL: &str = "spiffe://mesh.test/ns/default/sa/client-1";

impl Servers {
    /// Their part of a case's name.
    fn label(&self) -> &'static str {
        match self {
            Servers::Ours => "",
            Servers::GrpcGo(_) => " on grpc-go servers",
            Servers::GrpcGoXds(_) => " on grpc-go xDS servers",
            Servers::GrpcGoXdsMtls(_) => " on grpc-go xDS servers, mTLS",
            Servers::OursXds => " on xDS-enabled xds-interop-servers",
            Servers::OursXdsMtls => " on xDS-enabled xds-interop-servers, mTLS",
            Servers::OursXdsMtlsRbac => " on xDS-enabled xds-interop-servers, mTLS and RBAC",
        }
    }

    /// Whether they are xDS-enabled servers, served a Listener each.
    fn xds_enabled(&self) -> bool {
        !matches!(self, Servers::Ours | Servers::GrpcGo(_))
    }

    /// Whether their Listeners require mTLS.
    fn mtls(&self) -> bool {
        matches!(
            self,
            Servers::GrpcGoXdsMtls(_) | Servers::OursXdsMtls | Servers::OursXdsMtlsRbac
        )
    }

    /// How to run them, with the xDS-enabled servers' `bootstrap`.
    fn binary(&self, bootstrap: &str) -> ServerBinary {
        let bootstrap = bootstrap.to_string();
        match self {
            Servers::Ours => ServerBinary::Ours,
            Servers::GrpcGo(path) => ServerBinary::GrpcGo(path.clone()),
            Servers::GrpcGoXds(path) | Servers::GrpcGoXdsMtls(path) => ServerBinary::GrpcGoXds {
                binary: path.clone(),
                bootstrap,
            },
            Servers::OursXds | Servers::OursXdsMtls | Servers::OursXdsMtlsRbac => {
                ServerBinary::OursXds { bootstrap }
            }
        }
    }
}

/// What a case keeps until its end: the control plane, and the certificate files of
/// an mTLS case.
type Keep = (ControlPlane, Option<MeshPki>);

/// The mesh PKI's files and a bootstrap for the servers and the client that names
/// them: `file_watcher` instances `mesh` (the client's) and `server`.
fn mtls_bootstrap(plane: &ControlPlane) -> (MeshPki, String) {
    let pki = MeshPki::generate();
    let server = pki.write_server(&pki.server(false, false));
    let client = pki.provider_json();
    let providers = format!(
        "{}, {}",
        client.trim_end().strip_suffix('}').expect("an object"),
        server.trim_start().strip_prefix('{').expect("an object")
    );
    let bootstrap = plane.server_bootstrap(SERVER_LISTENER_TEMPLATE);
    let bootstrap = format!(
        r#"{}, "certificate_providers": {providers}}}"#,
        bootstrap.trim_end().strip_suffix('}').expect("an object")
    );
    (pki, bootstrap)
}

/// The Listener of an xDS-enabled server on `port`: it listens on 127.0.0.1 (gRPC-Go's
/// by the build's overlay, `interop/grpc-go/build.sh`, ours by `--listen_host`), so
/// the Listener is named after 127.0.0.1:port and has that address.
fn server_listener(port: u32, servers: &Servers) -> Any {
    let port = u16::try_from(port).expect("a port");
    if !servers.mtls() {
        return serving_listener(SERVER_LISTENER_TEMPLATE, ([127, 0, 0, 1], port).into());
    }
    let name = server_listener_name(SERVER_LISTENER_TEMPLATE, ([127, 0, 0, 1], port).into());
    let context = downstream_tls_context("server", Some("server"), true);
    let mut msg = tls_server_listener_msg(&name, "127.0.0.1", u32::from(port), Some(&context));
    if matches!(servers, Servers::OursXdsMtlsRbac) {
        let allow = rbac_policy(
            vec![path_permission("/grpc.testing.TestService/UnaryCall")],
            vec![principal_name(RBAC_ALLOWED_PRINCIPAL)],
        );
        let rules = rbac_rules(RbacAction::Allow, vec![("unary-from-client-1", allow)]);
        let mut chain = rbac_filter_chain(
            "rbac",
            server_routes("inbound"),
            vec![rbac_filter("rbac", rules)],
        );
        chain.transport_socket = msg.filter_chains[0].transport_socket.take();
        msg.filter_chains = vec![chain];
    }
    any(type_url::LISTENER, &msg)
}

/// 4 backends in one locality behind cluster `c`, and `binary` at `qps`.
async fn four_backends(
    binary: &ClientBinary,
    servers: &Servers,
    qps: &str,
    fail_on_failed_rpcs: bool,
) -> (Keep, Vec<Backend>, InteropClient) {
    let plane = ControlPlane::start();
    let mtls = servers.mtls();
    let (pki, bootstrap) = if mtls {
        let (pki, bootstrap) = mtls_bootstrap(&plane);
        (Some(pki), bootstrap)
    } else if servers.xds_enabled() {
        (None, plane.server_bootstrap(SERVER_LISTENER_TEMPLATE))
    } else {
        (None, plane.bootstrap())
    };
    let server = servers.binary(&bootstrap);
    let mut backends = Vec::new();
    for i in 0..4 {
        backends.push(Backend::start_binary(&format!("backend-{i}"), server.clone()).await);
    }
    if servers.xds_enabled() {
        let mut listeners = vec![listener(LISTENER, ROUTES)];
        listeners.extend(backends.iter().map(|b| server_listener(b.port(), servers)));
        plane.set_listeners(listeners);
    }
    let all: Vec<&Backend> = backends.iter().collect();
    let c = if mtls {
        mtls_cluster("c", INSTANCE, &[SERVER_ID])
    } else {
        cluster("c")
    };
    plane.set(
        vec![c],
        vec![assignment("c", &all)],
        vec![to_cluster(prefix(""), "c")],
    );
    let fail = format!("--fail_on_failed_rpc={fail_on_failed_rpcs}");
    let server_flag = format!("--server={TARGET}");
    let mut args = vec![server_flag.as_str(), qps, &fail];
    if mtls {
        args.push("--secure_mode=true");
    }
    if matches!(servers, Servers::OursXdsMtlsRbac) {
        // Both methods: RBAC lets one through and denies the other.
        args.push("--rpc=UnaryCall,EmptyCall");
    }
    let client = InteropClient::start(binary, &bootstrap, &args).await;
    ((plane, pki), backends, client)
}

pub async fn ping_pong(binary: ClientBinary) {
    ping_pong_on(binary, Servers::Ours).await;
}

/// ping_pong with these backends.
pub async fn ping_pong_on(binary: ClientBinary, servers: Servers) {
    let _timer = Timer::start(&format!("ping_pong{}", servers.label()), &binary);
    let (_plane, backends, mut client) = four_backends(&binary, &servers, "--qps=100", true).await;
    wait_for_peers(&mut client, &names(&backends), LIMIT).await;
    client.assert_running();
}

pub async fn round_robin(binary: ClientBinary) {
    round_robin_on(binary, Servers::Ours).await;
}

/// round_robin with these backends.
pub async fn round_robin_on(binary: ClientBinary, servers: Servers) {
    let _timer = Timer::start(&format!("round_robin{}", servers.label()), &binary);
    let (_plane, backends, mut client) = four_backends(&binary, &servers, "--qps=100", true).await;
    wait_for_peers(&mut client, &names(&backends), LIMIT).await;
    let stats = client.stats(100, Duration::from_secs(10)).await;
    assert_eq!(stats.num_failures, 0, "{stats:?}");
    for backend in &backends {
        let got = stats.rpcs_by_peer.get(backend.name()).copied().unwrap_or(0);
        assert!(
            (got - 25).abs() <= 1,
            "{} got {got} of 100: {:?}",
            backend.name(),
            peers(&stats)
        );
    }
    client.assert_running();
}

/// RBAC on `XdsServer`s (gRFC A41) called over mTLS: UnaryCall, which the policy
/// allows from the client's SPIFFE ID, reaches every backend; every EmptyCall fails
/// with PERMISSION_DENIED (7), and no RPC of either fails otherwise.
pub async fn rbac_allows_and_denies(binary: ClientBinary) {
    let servers = Servers::OursXdsMtlsRbac;
    let _timer = Timer::start(&format!("rbac{}", servers.label()), &binary);
    let (_plane, backends, mut client) = four_backends(&binary, &servers, "--qps=50", false).await;
    wait_for_peers(&mut client, &names(&backends), LIMIT).await;
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let stats = client.accumulated().await.stats_per_method;
        let results = |method: &str| {
            stats
                .get(method)
                .map(|m| m.result.clone())
                .unwrap_or_default()
        };
        let (unary, empty) = (results("UNARY_CALL"), results("EMPTY_CALL"));
        let count = |r: &std::collections::HashMap<i32, i32>| r.values().sum::<i32>();
        if count(&unary) >= 20 && count(&empty) >= 20 {
            assert_eq!(
                unary.keys().collect::<Vec<_>>(),
                [&0],
                "UnaryCall: {unary:?}"
            );
            assert_eq!(
                empty.keys().collect::<Vec<_>>(),
                [&7],
                "EmptyCall: {empty:?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "20 results of each method within {LIMIT:?}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn backends_restart(binary: ClientBinary) {
    let _timer = Timer::start("backends_restart", &binary);
    let (_plane, mut backends, mut client) =
        four_backends(&binary, &Servers::Ours, "--qps=100", false).await;
    let all = names(&backends);
    wait_for_only(&mut client, &all, 50, LIMIT).await;
    let before = distribution(&client.stats(100, Duration::from_secs(10)).await);
    for backend in &mut backends {
        backend.stop();
    }
    wait_for_block(
        &mut client,
        50,
        LIMIT,
        "no RPC succeeds with the backends stopped",
        |s| s.rpcs_by_peer.is_empty() && s.num_failures == 50,
    )
    .await;
    for backend in &mut backends {
        backend.resume().await;
    }
    wait_for_only(&mut client, &all, 50, LIMIT).await;
    let after = distribution(&client.stats(100, Duration::from_secs(10)).await);
    // As gRPC's driver compares them: sorted (which backend is which may change),
    // each within 3 RPCs.
    let close =
        before.len() == after.len() && before.iter().zip(&after).all(|(b, a)| (a - b).abs() <= 3);
    assert!(
        close,
        "100 RPCs before the restart: {before:?}, after: {after:?}"
    );
}

/// The RPCs each peer answered in a block, sorted; failures as one more entry.
fn distribution(stats: &xds_interop::pb::testing::LoadBalancerStatsResponse) -> Vec<i32> {
    let mut counts: Vec<i32> = stats.rpcs_by_peer.values().copied().collect();
    counts.sort_unstable();
    counts.push(stats.num_failures);
    counts
}

pub async fn secondary_locality_gets_requests_on_primary_failure(binary: ClientBinary) {
    let _timer = Timer::start(
        "secondary_locality_gets_requests_on_primary_failure",
        &binary,
    );
    let plane = ControlPlane::start();
    let mut primary = start_backends("primary", 2).await;
    let secondary = start_backends("secondary", 2).await;
    let hosts = |b: &[Backend]| {
        b.iter()
            .map(|b| Host::healthy(b.port()))
            .collect::<Vec<_>>()
    };
    let mut low = Locality::new("r1", "z2", hosts(&secondary));
    low.priority = 1;
    let localities = [Locality::new("r1", "z1", hosts(&primary)), low];
    plane.set(
        vec![cluster("c")],
        vec![endpoints_with("c", &localities)],
        vec![to_cluster(prefix(""), "c")],
    );
    let mut client = InteropClient::start(
        &binary,
        &plane.bootstrap(),
        &[&format!("--server={TARGET}"), "--qps=100"],
    )
    .await;
    let (p, s) = (names(&primary), names(&secondary));
    wait_for_only(&mut client, &p, 50, LIMIT).await;
    for backend in &mut primary {
        backend.stop();
    }
    wait_for_only(&mut client, &s, 50, LIMIT).await;
    for backend in &mut primary {
        backend.resume().await;
    }
    wait_for_only(&mut client, &p, 50, LIMIT).await;
}

pub async fn change_backend_service(binary: ClientBinary) {
    let _timer = Timer::start("change_backend_service", &binary);
    let plane = ControlPlane::start();
    let old = start_backends("old", 2).await;
    let new = start_backends("new", 2).await;
    let (old_refs, new_refs): (Vec<&Backend>, Vec<&Backend>) =
        (old.iter().collect(), new.iter().collect());
    plane.set(
        vec![cluster("c1")],
        vec![assignment("c1", &old_refs)],
        vec![to_cluster(prefix(""), "c1")],
    );
    let mut client = InteropClient::start(
        &binary,
        &plane.bootstrap(),
        &[&format!("--server={TARGET}"), "--qps=100"],
    )
    .await;
    wait_for_only(&mut client, &names(&old), 50, LIMIT).await;
    plane.set(
        vec![cluster("c1"), cluster("c2")],
        vec![assignment("c1", &old_refs), assignment("c2", &new_refs)],
        vec![to_cluster(prefix(""), "c2")],
    );
    wait_for_only(&mut client, &names(&new), 100, LIMIT).await;
}

pub async fn traffic_splitting(binary: ClientBinary) {
    let _timer = Timer::start("traffic_splitting", &binary);
    let plane = ControlPlane::start();
    let a = Backend::start("a-0").await;
    let b = Backend::start("b-0").await;
    plane.set(
        vec![cluster("a"), cluster("b")],
        vec![assignment("a", &[&a]), assignment("b", &[&b])],
        vec![to_cluster(prefix(""), "a")],
    );
    let mut client = InteropClient::start(
        &binary,
        &plane.bootstrap(),
        &[&format!("--server={TARGET}"), "--qps=250"],
    )
    .await;
    wait_for_only(&mut client, &names([&a]), 50, LIMIT).await;
    let next = client.stats(1000, Duration::from_secs(20)).await;
    assert_eq!(
        peers(&next),
        [(a.name().to_string(), 1000)].into(),
        "{} failed",
        next.num_failures
    );
    plane.set_routes(vec![forward(
        prefix(""),
        weighted_action(&[("a", 20), ("b", 80)]),
    )]);
    let both: BTreeSet<String> = names([&a, &b]);
    wait_for_only(&mut client, &both, 50, LIMIT).await;
    let split = client.stats(1000, Duration::from_secs(20)).await;
    assert_eq!(split.num_failures, 0);
    let count = |name: &str| split.rpcs_by_peer.get(name).copied().unwrap_or(0);
    let (to_a, to_b) = (count(a.name()), count(b.name()));
    // gRPC's driver allows 5 % of the RPCs either way; Binomial(1000, 0.2) has a
    // standard deviation of 12.6 RPCs, so 50 is four of them.
    assert!(
        (to_a - 200).abs() <= 50 && (to_b - 800).abs() <= 50,
        "a {to_a}, b {to_b} of 1000, expected 200/800"
    );
}
