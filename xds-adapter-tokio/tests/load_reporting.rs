//! Load reporting (LRS) on tokio: 1,000 RPCs through an `xds:///` channel over two
//! localities with a 10 % drop category; the loopback control plane's LRS reports
//! add up to exactly what was sent (`xds_test_server::lrs_suite`).

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::lrs_suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_reports_equal_what_was_sent() {
    let figures = lrs_suite::load_reporting_scenario::<TokioRuntime>().await;
    println!("{figures}");
}
