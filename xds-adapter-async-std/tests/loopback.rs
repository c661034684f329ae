//! The async-std adapter against the loopback management server on 127.0.0.1: the
//! shared scenarios of `xds_test_server::suite` (the server runs its own tokio runtime
//! on a thread of its own), and a check that the client never runs inside a tokio
//! runtime.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use xds_adapter_async_std::{AsyncStdRuntime, Cds, Runtime, WatchUpdate};
use xds_adapter_common::BoxFuture;
use xds_proto_core::Instant;
use xds_test_server::resources::cluster;
use xds_test_server::{LoopbackServer, suite};

#[async_std::test]
async fn full_chain_is_delivered_and_acked() {
    suite::full_chain::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn invalid_resource_is_nacked_with_its_reason_while_valid_ones_are_used() {
    suite::invalid_resource_is_nacked::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn server_restart_reconnects_with_backoff_and_keeps_cached_values() {
    suite::reconnects_after_server_restart::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn streams_the_client_closes_are_published_with_a_reason() {
    suite::client_closed_streams_are_published::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn dropped_watches_leave_the_core_at_every_point_of_their_life() {
    suite::dropped_watches_are_cancelled::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn server_closing_the_stream_or_refusing_connections_keeps_cached_values() {
    suite::server_closes_stream_and_refuses_connections::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn server_down_at_startup_is_a_connectivity_error_until_it_starts() {
    suite::server_down_at_startup::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn does_not_exist_after_a_short_configured_timeout() {
    suite::does_not_exist_after_timeout::<AsyncStdRuntime>(Some(Duration::from_millis(700))).await;
}

/// Issue 24 item 4: one task per watcher, the burst spread over 50 ms.
#[async_std::test]
async fn a_burst_of_watches_from_many_tasks_is_one_subscribing_request_per_type() {
    suite::a_burst_from_many_tasks_is_one_request_per_type::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn mtls_with_a_test_ca() {
    suite::tls_with_test_ca::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn tls_channel_credentials_keep_the_last_good_certificates() {
    suite::tls_credentials_keep_the_last_good_certificates::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn a_21_mb_response_fits_the_default_limit_and_the_limit_is_configurable() {
    suite::large_responses::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn a78_metrics_after_an_ack_a_nack_a_resource_error_a_server_stop_and_shutdown() {
    suite::xds_client_metrics::<AsyncStdRuntime>("metrics-async-std").await;
}

#[async_std::test]
async fn metrics_are_exported_on_a_configured_interval() {
    suite::metrics_exported_on_interval::<AsyncStdRuntime>(
        "metrics-interval-async-std",
        Some(Duration::from_millis(300)),
    )
    .await;
}

/// The async-std runtime, checking on every use that no tokio runtime is current.
#[derive(Clone, Debug, Default)]
struct NoTokio {
    inner: AsyncStdRuntime,
    checks: Arc<AtomicUsize>,
}

impl NoTokio {
    fn check(&self) {
        assert!(
            tokio::runtime::Handle::try_current().is_err(),
            "the async-std client runs inside a tokio runtime"
        );
        self.checks.fetch_add(1, Ordering::SeqCst);
    }
}

impl Runtime for NoTokio {
    type TcpStream = <AsyncStdRuntime as Runtime>::TcpStream;

    fn current() -> Result<NoTokio, String> {
        Ok(NoTokio::default())
    }

    fn spawn(&self, task: BoxFuture<()>) {
        self.check();
        let this = self.clone();
        let mut task = task;
        // Every poll of every task (the driver, the streams, the connections) checks.
        self.inner
            .spawn(Box::pin(futures::future::poll_fn(move |cx| {
                this.check();
                task.as_mut().poll(cx)
            })));
    }

    fn now(&self) -> Instant {
        self.check();
        self.inner.now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        self.check();
        self.inner.sleep(duration)
    }

    fn connect_tcp(&self, host: &str, port: u16) -> BoxFuture<io::Result<Self::TcpStream>> {
        self.check();
        self.inner.connect_tcp(host, port)
    }
}

#[async_std::test]
async fn runs_with_no_tokio_runtime_active() {
    assert!(tokio::runtime::Handle::try_current().is_err());
    let server = LoopbackServer::start();
    server.set_resources(
        xds_proto_core::resource::type_url::CLUSTER,
        "1",
        vec![cluster("c1")],
    );
    let runtime = NoTokio::default();
    let checks = runtime.checks.clone();
    let bootstrap =
        xds_proto_core::Bootstrap::from_json_str(&server.bootstrap_json("no-tokio", None)).unwrap();
    let client = xds_adapter_common::Client::<NoTokio>::builder(bootstrap)
        .runtime(runtime)
        .build()
        .expect("client");
    let mut watch = client.watch::<Cds>("c1").await.expect("watch");
    let update = async_std::future::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("an update in time")
        .expect("open");
    assert!(
        matches!(update, WatchUpdate::Changed(Ok(ref c)) if c.name == "c1"),
        "{update:?}"
    );
    client.shutdown().await;
    server.stop().await;
    assert!(
        checks.load(Ordering::SeqCst) > 10,
        "the driver and transport ran through the checked runtime"
    );
}

#[test]
fn load_bootstrap_from_env_reads_the_config_variable() {
    // Only reads: the variables are not set by this test suite, so this is an error.
    if std::env::var_os("GRPC_XDS_BOOTSTRAP").is_none()
        && std::env::var_os("GRPC_XDS_BOOTSTRAP_CONFIG").is_none()
    {
        let e = xds_adapter_async_std::load_bootstrap_from_env().unwrap_err();
        assert!(e.to_string().contains("GRPC_XDS_BOOTSTRAP"), "{e}");
    }
}

#[async_std::test]
async fn a_stuck_watcher_holds_only_the_newest_state() {
    suite::stuck_watcher_holds_only_the_newest_state::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn a_slow_driver_slows_a_fast_server_and_shuts_down_at_once() {
    suite::slow_driver_slows_a_fast_server::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn delta_session_sends_only_what_changed_and_resumes_with_initial_versions() {
    suite::delta_session::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn delta_session_with_an_istiod_like_server() {
    suite::istiod_delta_behaviour::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn delta_silence_about_a_name_is_does_not_exist_after_the_timer() {
    suite::delta_silence_is_does_not_exist_after_the_timer::<AsyncStdRuntime>().await;
}

#[async_std::test]
async fn delta_undecodable_response_closes_the_stream() {
    suite::delta_undecodable_response_closes_the_stream::<AsyncStdRuntime>().await;
}
