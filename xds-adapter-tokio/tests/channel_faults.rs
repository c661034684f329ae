//! The `xds:///` channel's endpoint connections on tokio against backends that
//! misbehave at the transport (`xds_test_server::channel_faults`): one that never sends
//! HTTP/2 SETTINGS, one gone silent while READY, one that sends GOAWAY.

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::channel_faults;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_locality_is_skipped_and_200_of_200_rpcs_succeed() {
    channel_faults::a_silent_locality_is_skipped::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_priority_fails_over_at_the_failover_timeout() {
    channel_faults::a_silent_priority_fails_over_at_the_failover_timeout::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connect_deadline_covers_the_wait_for_settings() {
    channel_faults::the_connect_deadline_covers_the_wait_for_settings::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_notices_a_backend_gone_silent() {
    channel_faults::keepalive_notices_a_backend_gone_silent::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_retires_the_connection_for_new_rpcs() {
    channel_faults::goaway_retires_the_connection_for_new_rpcs::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_channel_closes_its_connections() {
    channel_faults::a_dropped_channel_closes_its_connections::<TokioRuntime>().await;
}
