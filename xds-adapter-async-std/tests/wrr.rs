//! Weighted round robin (A58) through the `xds:///` channel on async-std: the same
//! scenarios as on tokio (`xds_test_server::wrr_suite`), the backends on a tokio
//! runtime of their own.

use xds_adapter_async_std::AsyncStdRuntime;
use xds_test_server::wrr_suite::{self, Reporting};

#[async_std::test]
async fn per_call_reports_with_a_fixed_qps_give_shares_proportional_to_qps_over_utilization() {
    let shares = wrr_suite::wrr_scenario::<AsyncStdRuntime>(Reporting::PerCall).await;
    println!("{shares:?}");
}

#[async_std::test]
async fn out_of_band_reports_give_the_same_shares() {
    let shares = wrr_suite::wrr_scenario::<AsyncStdRuntime>(Reporting::OutOfBand).await;
    println!("{shares:?}");
}
