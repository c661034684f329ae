//! A29 on async-std: the same scenarios as on tokio (`xds_test_server::security_suite`),
//! with the control plane and the echo backends on a tokio runtime of their own.

use xds_adapter_async_std::AsyncStdRuntime;
use xds_test_server::security_suite;

#[async_std::test]
async fn xds_channel_mtls_failures_tls_toggle_and_rotation() {
    let figures = security_suite::security_scenarios::<AsyncStdRuntime>().await;
    println!("{figures:#?}");
}

#[async_std::test]
async fn xds_server_credentials_from_a_static_lds() {
    let refusal = security_suite::server_credentials_scenarios::<AsyncStdRuntime>().await;
    println!("{refusal}");
}
