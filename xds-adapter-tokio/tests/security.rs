//! A29 on tokio: `XdsChannel` with xDS credentials against mTLS echo backends
//! (`xds_test_server::security_suite`).

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::security_suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_channel_mtls_failures_tls_toggle_and_rotation() {
    let figures = security_suite::security_scenarios::<TokioRuntime>().await;
    println!("{figures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_server_credentials_from_a_static_lds() {
    let refusal = security_suite::server_credentials_scenarios::<TokioRuntime>().await;
    println!("{refusal}");
}
