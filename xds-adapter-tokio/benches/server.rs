//! Per-RPC overhead of `XdsServer` (A36) against the same service served without xDS,
//! side by side in one run (issue 22).
//!
//! One service (the server suite's echo) is served twice on 127.0.0.1: by plain hyper
//! HTTP/2, as tonic's own server does, and by an `XdsServer` whose listener comes from
//! the loopback control plane (one plaintext filter chain, inline routes with
//! `non_forwarding_action`), so the xDS side adds the per-RPC virtual host and route
//! match, the serving-state lookup and the refusal checks. A plain tonic channel calls
//! each; rounds of sequential unary RPCs alternate between them and the p50 of each
//! side is taken over all its rounds. A third side is an `XdsServer` whose chain runs
//! an Istio-like RBAC ALLOW (the echo path from a SPIFFE principal, or, as the
//! connection is plaintext and the principal never matches, from 127.0.0.1): every
//! RPC is evaluated against it.
//!
//! Run: `cargo bench -p xds-adapter-tokio --bench server` (under a minute).

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::{latencies, p50};
use tonic::transport::{Channel, Endpoint};
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_adapter_tokio::xds_proto_core::server::ServingMode;
use xds_adapter_tokio::{Client, TokioRuntime, XdsServerBuilder};
use xds_test_server::LoopbackServer;
use xds_test_server::echo::ECHO_PATH;
use xds_test_server::resources::{
    RbacAction, SERVER_LISTENER_TEMPLATE, any, path_permission, principal_name, rbac_filter,
    rbac_filter_chain, rbac_policy, rbac_rules, remote_ip_principal, server_listener_msg,
    server_listener_name, server_routes, serving_listener,
};
use xds_test_server::server_suite::SuiteEcho;

const ROUNDS: usize = 10;
const RPCS_PER_ROUND: usize = 2_000;

/// Serves `SuiteEcho` with plain hyper HTTP/2 on a free port.
async fn plain_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    let service = SuiteEcho::new(TokioRuntime::new(tokio::runtime::Handle::current()));
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let service = service.clone();
            tokio::spawn(async move {
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(
                            hyper_util::rt::TokioIo::new(tcp),
                            hyper_util::service::TowerToHyperService::new(service),
                        )
                        .await;
            });
        }
    });
    addr
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("an endpoint")
        .connect()
        .await
        .expect("a tonic channel")
}

/// The RBAC server's listener on `addr`: Istio's shape of an ALLOW policy (one policy
/// per rule, named `ns[..]-policy[..]-rule[..]`) on the echo path.
fn rbac_listener(addr: SocketAddr) -> xds_adapter_tokio::xds_proto_core::pb::google::protobuf::Any {
    let rules = rbac_rules(
        RbacAction::Allow,
        vec![(
            "ns[default]-policy[allow-echo]-rule[0]",
            rbac_policy(
                vec![path_permission(ECHO_PATH)],
                vec![
                    principal_name("spiffe://cluster.local/ns/default/sa/client"),
                    remote_ip_principal("127.0.0.1", 32),
                ],
            ),
        )],
    );
    let chain = rbac_filter_chain(
        "rbac",
        server_routes("rbac-routes"),
        vec![rbac_filter("envoy.filters.http.rbac", rules)],
    );
    let name = server_listener_name(SERVER_LISTENER_TEMPLATE, addr);
    any(
        type_url::LISTENER,
        &server_listener_msg(&name, addr, vec![chain]),
    )
}

fn free_addr() -> SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    probe.local_addr().expect("an address")
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let control = LoopbackServer::start();
        let xds_addr = free_addr();
        let rbac_addr = free_addr();
        control.set_resources(
            type_url::LISTENER,
            "1",
            vec![
                serving_listener(SERVER_LISTENER_TEMPLATE, xds_addr),
                rbac_listener(rbac_addr),
            ],
        );
        let json = control.bootstrap_json("bench-server", None).replacen(
            r#""node""#,
            &format!(
                r#""server_listener_resource_name_template": "{SERVER_LISTENER_TEMPLATE}", "node""#
            ),
            1,
        );
        let mut servers = Vec::new();
        for addr in [xds_addr, rbac_addr] {
            let client = Client::from_bootstrap_json(&json).expect("a client");
            let service = SuiteEcho::new(TokioRuntime::new(tokio::runtime::Handle::current()));
            let server =
                xds_adapter_tokio::server::serve(XdsServerBuilder::new(client), addr, service)
                    .await
                    .expect("the xDS server");
            while server.mode() != ServingMode::Serving {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            servers.push(server);
        }
        let plain = channel(plain_server().await).await;
        let xds = channel(xds_addr).await;
        let rbac = channel(rbac_addr).await;

        // Warm all up (an RPC RBAC refused would panic in `latencies`).
        latencies(&plain, 500).await;
        latencies(&xds, 500).await;
        latencies(&rbac, 500).await;
        let (mut plain_lat, mut xds_lat, mut rbac_lat) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            plain_lat.extend(latencies(&plain, RPCS_PER_ROUND).await);
            xds_lat.extend(latencies(&xds, RPCS_PER_ROUND).await);
            rbac_lat.extend(latencies(&rbac, RPCS_PER_ROUND).await);
        }
        let (plain_p50, xds_p50, rbac_p50) = (p50(plain_lat), p50(xds_lat), p50(rbac_lat));
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!("per-RPC overhead of XdsServer vs the same service on plain hyper/tonic");
        println!(
            "p50 latency   plain {:>8.1} µs   xds {:>8.1} µs   ratio {:.3}x (target <= 1.1x)",
            us(plain_p50),
            us(xds_p50),
            us(xds_p50) / us(plain_p50)
        );
        println!(
            "p50 latency   plain {:>8.1} µs   xds+rbac {:>8.1} µs   ratio {:.3}x (target <= 1.1x)",
            us(plain_p50),
            us(rbac_p50),
            us(rbac_p50) / us(plain_p50)
        );
        for server in servers {
            server.shutdown();
        }
    });
}
