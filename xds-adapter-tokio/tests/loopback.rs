//! The tokio adapter against the loopback management server on 127.0.0.1: the shared
//! scenarios of `xds_test_server::suite` on a multi-threaded runtime, and the
//! does-not-exist timer at its default 15 s and the metrics' default 5 s interval on
//! tokio's paused clock.

use std::time::Duration;

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_chain_is_delivered_and_acked() {
    suite::full_chain::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_resource_is_nacked_with_its_reason_while_valid_ones_are_used() {
    suite::invalid_resource_is_nacked::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_reconnects_with_backoff_and_keeps_cached_values() {
    suite::reconnects_after_server_restart::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_closing_the_stream_or_refusing_connections_keeps_cached_values() {
    suite::server_closes_stream_and_refuses_connections::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_down_at_startup_is_a_connectivity_error_until_it_starts() {
    suite::server_down_at_startup::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn does_not_exist_after_a_short_configured_timeout() {
    suite::does_not_exist_after_timeout::<TokioRuntime>(Some(Duration::from_millis(700))).await;
}

/// The default 15 s timer on a paused clock: the server runs on the same
/// single-threaded runtime, so the clock only jumps when client and server are both
/// idle, and the test takes milliseconds of real time.
#[tokio::test(start_paused = true)]
async fn does_not_exist_after_the_default_15_s_on_paused_time() {
    let real = std::time::Instant::now();
    suite::does_not_exist_after_timeout::<TokioRuntime>(None).await;
    assert!(
        real.elapsed() < Duration::from_secs(10),
        "paused time was not used: {:?}",
        real.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_the_client_closes_are_published_with_a_reason() {
    suite::client_closed_streams_are_published::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_leave_the_core_at_every_point_of_their_life() {
    suite::dropped_watches_are_cancelled::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_with_a_test_ca() {
    suite::tls_with_test_ca::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_channel_credentials_keep_the_last_good_certificates() {
    suite::tls_credentials_keep_the_last_good_certificates::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_21_mb_response_fits_the_default_limit_and_the_limit_is_configurable() {
    suite::large_responses::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a78_metrics_after_an_ack_a_nack_a_resource_error_a_server_stop_and_shutdown() {
    suite::xds_client_metrics::<TokioRuntime>("metrics-tokio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_exported_on_a_configured_interval() {
    suite::metrics_exported_on_interval::<TokioRuntime>(
        "metrics-interval-tokio",
        Some(Duration::from_millis(300)),
    )
    .await;
}

/// The default 5 s interval on a paused clock.
#[tokio::test(start_paused = true)]
async fn metrics_are_exported_every_5_s_by_default_on_paused_time() {
    suite::metrics_exported_on_interval::<TokioRuntime>("metrics-default-interval-tokio", None)
        .await;
}

#[tokio::test]
async fn building_outside_a_runtime_is_an_error_not_a_panic() {
    let json = r#"{"xds_servers": [{"server_uri": "127.0.0.1:1", "channel_creds": [{"type": "insecure"}]}], "node": {"id": "n"}}"#;
    let handle = std::thread::spawn(move || {
        xds_adapter_tokio::Client::from_bootstrap_json(json).map(|_| ())
    });
    let result = handle.join().expect("no panic");
    assert!(
        matches!(result, Err(xds_adapter_tokio::Error::NoRuntime(_))),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_watcher_holds_only_the_newest_state() {
    suite::stuck_watcher_holds_only_the_newest_state::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_driver_slows_a_fast_server_and_shuts_down_at_once() {
    suite::slow_driver_slows_a_fast_server::<TokioRuntime>().await;
}

/// Issue 11 item 22. Single-threaded, so that the burst is queued before the driver
/// runs (see the scenario).
#[tokio::test]
async fn a_burst_of_watches_is_one_subscribing_request_per_type() {
    suite::a_burst_of_watches_is_one_request_per_type::<TokioRuntime>().await;
}

/// Issue 24 item 4: one task per watcher, the burst spread over 50 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_watches_from_many_tasks_is_one_subscribing_request_per_type() {
    suite::a_burst_from_many_tasks_is_one_request_per_type::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_session_sends_only_what_changed_and_resumes_with_initial_versions() {
    suite::delta_session::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_session_with_an_istiod_like_server() {
    suite::istiod_delta_behaviour::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_silence_about_a_name_is_does_not_exist_after_the_timer() {
    suite::delta_silence_is_does_not_exist_after_the_timer::<TokioRuntime>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_undecodable_response_closes_the_stream() {
    suite::delta_undecodable_response_closes_the_stream::<TokioRuntime>().await;
}
