//! Config streams on tokio (gRFC A74 dependency manager and A31 config selector run by
//! the driver) against the loopback management server: the shared scenarios of
//! `xds_test_server::config_suite`.

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::config_suite;

#[tokio::test]
async fn config_stream_follows_the_mesh_and_routes_rpcs() {
    config_suite::config_stream::<TokioRuntime>().await;
}

#[tokio::test]
async fn clusters_in_use_stay_until_released_and_dropping_the_stream_cancels_its_watches() {
    config_suite::config_stream_holds_clusters::<TokioRuntime>().await;
}

#[tokio::test]
async fn config_stream_reports_a_missing_listener_and_ends_on_shutdown() {
    config_suite::config_stream_errors::<TokioRuntime>().await;
}
