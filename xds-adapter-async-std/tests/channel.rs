//! The `xds:///` channel on async-std: the same scenarios as on tokio
//! (`xds_test_server::channel_suite`), with the control plane and the echo backends on
//! a tokio runtime of their own.

use xds_adapter_async_std::AsyncStdRuntime;
use xds_test_server::channel_suite;

#[async_std::test]
async fn xds_channel_splits_ejects_retries_and_times_out() {
    let figures = channel_suite::channel_scenarios::<AsyncStdRuntime>().await;
    println!("{figures:?}");
}

#[async_std::test]
async fn xds_channel_fails_unreachable_endpoints_and_unknown_authorities() {
    channel_suite::channel_failures::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn xds_channel_injects_faults_from_the_routes_filters() {
    let figures = xds_test_server::filter_suite::fault_scenarios::<AsyncStdRuntime>().await;
    println!("{figures:?}");
}

#[async_std::test]
async fn xds_channel_pins_rpcs_to_the_session_cookies_backend() {
    let figures = xds_test_server::filter_suite::session_scenarios::<AsyncStdRuntime>().await;
    println!("{figures:?}");
}
