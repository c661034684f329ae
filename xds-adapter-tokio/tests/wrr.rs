//! Weighted round robin (A58) through the `xds:///` channel on tokio: three ORCA echo
//! backends reporting utilizations 0.2, 0.4 and 0.8 (`xds_test_server::wrr_suite`).

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::wrr_suite::{self, Reporting};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_call_reports_with_a_fixed_qps_give_shares_proportional_to_qps_over_utilization() {
    let shares = wrr_suite::wrr_scenario::<TokioRuntime>(Reporting::PerCall).await;
    println!("{shares:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_band_reports_give_the_same_shares() {
    let shares = wrr_suite::wrr_scenario::<TokioRuntime>(Reporting::OutOfBand).await;
    println!("{shares:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measured_qps_with_fixed_utilization_sends_everything_to_the_least_utilized() {
    let shares = wrr_suite::wrr_scenario::<TokioRuntime>(Reporting::PerCallMeasuredQps).await;
    println!("{shares:?}");
}
