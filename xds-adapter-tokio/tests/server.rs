//! A36 on tokio: `XdsServer` against the loopback control plane
//! (`xds_test_server::server_suite`).

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::server_suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_server_serves_drains_and_stops_with_its_listener() {
    let figures = server_suite::server_scenarios::<TokioRuntime, _, _>(|builder, addr, service| {
        xds_adapter_tokio::server::serve(builder, addr, service)
    })
    .await;
    println!("{figures:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_server_terminates_mtls_from_its_filter_chain() {
    let (sans, refusal) =
        server_suite::server_mtls_scenarios::<TokioRuntime, _, _>(|builder, addr, service| {
            xds_adapter_tokio::server::serve(builder, addr, service)
        })
        .await;
    println!("client SANs seen by the hook: {sans:?}; without a client certificate: {refusal}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_server_runs_rbac_by_path_header_and_client_identity() {
    let figures =
        server_suite::server_rbac_scenarios::<TokioRuntime, _, _>(|builder, addr, service| {
            xds_adapter_tokio::server::serve(builder, addr, service)
        })
        .await;
    println!("{figures:#?}");
}
