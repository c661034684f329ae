//! Config streams on tokio (gRFC A74 dependency manager and A31 config selector run by
//! the driver) against the loopback management server: the shared scenarios of
//! `xds_test_server::config_suite`.

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::config_suite;

#[tokio::test]
async fn config_stream_follows_the_mesh_routes_rpcs_and_cancels_on_drop() {
    config_suite::config_stream::<TokioRuntime>().await;
}

#[tokio::test]
async fn config_stream_reports_a_missing_listener_and_ends_on_shutdown() {
    config_suite::config_stream_errors::<TokioRuntime>().await;
}
