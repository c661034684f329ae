//! The tokio adapter behind a fault-injecting proxy on 127.0.0.1: a server that never
//! sends SETTINGS, one that goes silent mid-stream (keepalive on and off), and one
//! that retires its connections with GOAWAY (`xds_test_server::suite::faults`).

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_settings_fails_at_the_connect_deadline_then_falls_back() {
    suite::no_settings_is_a_connect_failure_then_fallback::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_detects_a_server_gone_silent_and_reconnects() {
    suite::silent_server_mid_stream::<TokioRuntime>(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keepalive_a_server_gone_silent_goes_unnoticed() {
    suite::silent_server_mid_stream::<TokioRuntime>(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_rotations_use_fresh_connections_and_fail_nothing() {
    suite::goaway_rotations_use_fresh_connections::<TokioRuntime>().await;
}

/// The default keepalive (a PING after 5 min, 20 s for its ACK) on tokio's paused
/// clock: proxy, server and client share the single-threaded runtime, so the clock
/// jumps only when all are idle, and the test takes well under a second of real time.
#[tokio::test(start_paused = true)]
async fn the_default_keepalive_detects_a_silent_server_after_5_min_on_paused_time() {
    let real = std::time::Instant::now();
    suite::default_keepalive_detects_a_silent_server::<TokioRuntime>().await;
    assert!(
        real.elapsed() < std::time::Duration::from_secs(10),
        "paused time was not used: {:?}",
        real.elapsed()
    );
}
