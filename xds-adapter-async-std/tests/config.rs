//! Config streams on async-std (gRFC A74 dependency manager and A31 config selector run
//! by the driver) against the loopback management server, which runs its own tokio
//! runtime on a thread of its own: the shared scenarios of
//! `xds_test_server::config_suite`.

use xds_adapter_async_std::AsyncStdRuntime;
use xds_test_server::config_suite;

#[async_std::test]
async fn config_stream_follows_the_mesh_and_routes_rpcs() {
    config_suite::config_stream::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn clusters_in_use_stay_until_released_and_dropping_the_stream_cancels_its_watches() {
    config_suite::config_stream_holds_clusters::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn a_plugin_child_stays_in_the_lb_config_until_its_last_rpc_ends() {
    config_suite::config_stream_releases_plugins::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn config_stream_reports_a_missing_listener_and_ends_on_shutdown() {
    config_suite::config_stream_errors::<AsyncStdRuntime>().await;
}
