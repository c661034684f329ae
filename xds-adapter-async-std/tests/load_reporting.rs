//! Load reporting (LRS) on async-std: the same scenario as on tokio
//! (`xds_test_server::lrs_suite`), with the control plane and the echo backends on a
//! tokio runtime of their own.

use xds_adapter_async_std::AsyncStdRuntime;
use xds_test_server::lrs_suite;

#[async_std::test]
async fn load_reports_equal_what_was_sent() {
    let figures = lrs_suite::load_reporting_scenario::<AsyncStdRuntime>().await;
    println!("{figures}");
}
