//! The `xds:///` channel on tokio: three echo backends on loopback behind the loopback
//! control plane, RPCs through tonic's generic client (`xds_test_server::channel_suite`).

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::channel_suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_channel_splits_ejects_retries_and_times_out() {
    let figures = channel_suite::channel_scenarios::<TokioRuntime>().await;
    println!("{figures:?}");
}

#[tokio::test]
async fn xds_channel_fails_unreachable_endpoints_and_unknown_authorities() {
    channel_suite::channel_failures::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_channel_injects_faults_from_the_routes_filters() {
    let figures = xds_test_server::filter_suite::fault_scenarios::<TokioRuntime>().await;
    println!("{figures:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_channel_pins_rpcs_to_the_session_cookies_backend() {
    let figures = xds_test_server::filter_suite::session_scenarios::<TokioRuntime>().await;
    println!("{figures:?}");
}
