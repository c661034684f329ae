//! The `xds:///` channel's endpoint connections on async-std against backends that
//! misbehave at the transport (`xds_test_server::channel_faults`, the backends on a
//! tokio runtime of their own): one that never sends HTTP/2 SETTINGS, one gone silent
//! while READY, one that sends GOAWAY.

use xds_adapter_async_std::AsyncStdRuntime;
use xds_test_server::channel_faults;

#[async_std::test]
async fn a_silent_locality_is_skipped_and_200_of_200_rpcs_succeed() {
    channel_faults::a_silent_locality_is_skipped::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn a_silent_priority_fails_over_at_the_failover_timeout() {
    channel_faults::a_silent_priority_fails_over_at_the_failover_timeout::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn the_connect_deadline_covers_the_wait_for_settings() {
    channel_faults::the_connect_deadline_covers_the_wait_for_settings::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn keepalive_notices_a_backend_gone_silent() {
    channel_faults::keepalive_notices_a_backend_gone_silent::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn goaway_retires_the_connection_for_new_rpcs() {
    channel_faults::goaway_retires_the_connection_for_new_rpcs::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn a_dropped_channel_closes_its_connections() {
    channel_faults::a_dropped_channel_closes_its_connections::<AsyncStdRuntime>().await;
}
