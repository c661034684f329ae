//! The async-std adapter behind a fault-injecting proxy on 127.0.0.1: a server that never
//! sends SETTINGS, one that goes silent mid-stream (keepalive on and off), and one
//! that retires its connections with GOAWAY (`xds_test_server::suite::faults`).

use xds_adapter_async_std::AsyncStdRuntime;
use xds_test_server::suite;

#[async_std::test]
async fn no_settings_fails_at_the_connect_deadline_then_falls_back() {
    suite::no_settings_is_a_connect_failure_then_fallback::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn keepalive_detects_a_server_gone_silent_and_reconnects() {
    suite::silent_server_mid_stream::<AsyncStdRuntime>(true).await;
}

#[async_std::test]
async fn without_keepalive_a_server_gone_silent_goes_unnoticed() {
    suite::silent_server_mid_stream::<AsyncStdRuntime>(false).await;
}

#[async_std::test]
async fn goaway_rotations_use_fresh_connections_and_fail_nothing() {
    suite::goaway_rotations_use_fresh_connections::<AsyncStdRuntime>().await;
}
