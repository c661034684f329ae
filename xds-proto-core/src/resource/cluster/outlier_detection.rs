//! The cluster's `outlier_detection` (gRFC A50): gRPC's defaults, its mapping of the
//! `enforcing_*` fields to whether each algorithm runs, and its validation (durations
//! in range, percentages at most 100). Fields gRPC ignores (`consecutive_*`, local
//! origin splitting, jitter) are not read.

use super::{FailurePercentageEjection, OutlierDetection, SuccessRateEjection};
use crate::pb::envoy::config::cluster::v3 as cluster_pb;
use crate::pb::google::protobuf::UInt32Value;
use crate::resource::validate::{FieldError, optional_duration};
use std::time::Duration;

/// Parses `outlier_detection`; error paths are relative to it.
pub(super) fn parse(od: &cluster_pb::OutlierDetection) -> Result<OutlierDetection, FieldError> {
    let duration = |d, field: &str, default| {
        optional_duration(d)
            .map(|d| d.unwrap_or(default))
            .map_err(|e| e.at(field))
    };
    let interval = duration(od.interval.as_ref(), "interval", Duration::from_secs(10))?;
    let base_ejection_time = duration(
        od.base_ejection_time.as_ref(),
        "base_ejection_time",
        Duration::from_secs(30),
    )?;
    let max_ejection_time = duration(
        od.max_ejection_time.as_ref(),
        "max_ejection_time",
        Duration::from_secs(300),
    )?;
    let max_ejection_percent = percent(od.max_ejection_percent, "max_ejection_percent", 10)?;
    let enforcing_success_rate = percent(od.enforcing_success_rate, "enforcing_success_rate", 100)?;
    let success_rate_ejection = (enforcing_success_rate != 0).then(|| SuccessRateEjection {
        stdev_factor: value_or(od.success_rate_stdev_factor, 1900),
        enforcement_percentage: enforcing_success_rate,
        minimum_hosts: value_or(od.success_rate_minimum_hosts, 5),
        request_volume: value_or(od.success_rate_request_volume, 100),
    });
    let threshold = percent(
        od.failure_percentage_threshold,
        "failure_percentage_threshold",
        85,
    )?;
    let enforcing_failure_percentage = percent(
        od.enforcing_failure_percentage,
        "enforcing_failure_percentage",
        0,
    )?;
    let failure_percentage_ejection =
        (enforcing_failure_percentage != 0).then(|| FailurePercentageEjection {
            threshold,
            enforcement_percentage: enforcing_failure_percentage,
            minimum_hosts: value_or(od.failure_percentage_minimum_hosts, 5),
            request_volume: value_or(od.failure_percentage_request_volume, 50),
        });
    Ok(OutlierDetection {
        interval,
        base_ejection_time,
        max_ejection_time,
        max_ejection_percent,
        success_rate_ejection,
        failure_percentage_ejection,
    })
}

fn value_or(v: Option<UInt32Value>, default: u32) -> u32 {
    v.map_or(default, |v| v.value)
}

fn percent(v: Option<UInt32Value>, field: &str, default: u32) -> Result<u32, FieldError> {
    match v.map_or(default, |v| v.value) {
        p @ 0..=100 => Ok(p),
        p => Err(FieldError::new(
            field,
            format!("value {p} must be in the range [0, 100]"),
        )),
    }
}
