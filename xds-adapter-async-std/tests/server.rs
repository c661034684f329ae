//! A36 on async-std: the same scenarios as on tokio (`xds_test_server::server_suite`).

use xds_adapter_async_std::AsyncStdRuntime;
use xds_test_server::server_suite;

#[async_std::test]
async fn xds_server_serves_drains_and_stops_with_its_listener() {
    let figures =
        server_suite::server_scenarios::<AsyncStdRuntime, _, _>(|builder, addr, service| {
            xds_adapter_async_std::server::serve(builder, addr, service)
        })
        .await;
    println!("{figures:?}");
}

#[async_std::test]
async fn xds_server_terminates_mtls_from_its_filter_chain() {
    let (sans, refusal) =
        server_suite::server_mtls_scenarios::<AsyncStdRuntime, _, _>(|builder, addr, service| {
            xds_adapter_async_std::server::serve(builder, addr, service)
        })
        .await;
    println!("client SANs seen by the hook: {sans:?}; without a client certificate: {refusal}");
}

#[async_std::test]
async fn xds_server_runs_rbac_by_path_header_and_client_identity() {
    let figures =
        server_suite::server_rbac_scenarios::<AsyncStdRuntime, _, _>(|builder, addr, service| {
            xds_adapter_async_std::server::serve(builder, addr, service)
        })
        .await;
    println!("{figures:#?}");
}
