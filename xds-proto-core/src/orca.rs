//! ORCA backend metrics (gRFC A51): what a backend reports of its load, per call in the
//! `endpoint-load-metrics-bin` trailer or out of band on the
//! `xds.service.orca.v3.OpenRcaService/StreamCoreMetrics` stream, as one validated
//! [`OrcaLoadReport`].
//!
//! A report comes from the network, so decoding bounds it: at most
//! [`MAX_REPORT_BYTES`] encoded and [`MAX_MAP_ENTRIES`] entries per map, or it is
//! refused whole; a scalar out of its range (NaN, negative, infinite, a memory
//! utilization above 1) reads as unset (0), as gRPC's recorders ignore such values;
//! a map entry whose value is not finite (or, in `utilization`, outside `[0, 1]`) is
//! dropped. What remains is safe to sum, divide and key a map with.
//!
//! The report is decoded once per call and shared by everything that wants it (A51):
//! the load balancer's weighted round robin ([`crate::lb::LoadBalancer::call_finished_with_report`])
//! and load reporting, which reads [`OrcaLoadReport::named_metrics`] (A64).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use prost::Message;

use crate::pb::xds::data::orca::v3 as orca_pb;
use crate::pb::xds::service::orca::v3 as service_pb;

/// The trailer (binary metadata, base64 on the wire) carrying a per-call report.
pub const TRAILER: &str = "endpoint-load-metrics-bin";

/// The gRPC service of out-of-band reports.
pub const OOB_SERVICE: &str = "xds.service.orca.v3.OpenRcaService";

/// The path of its one method, a server stream of reports.
pub const STREAM_CORE_METRICS_PATH: &str = "/xds.service.orca.v3.OpenRcaService/StreamCoreMetrics";

/// The largest encoded report accepted (a per-call report rides in a trailer, and
/// gRPC keeps all metadata within a few kilobytes by default).
pub const MAX_REPORT_BYTES: usize = 16 * 1024;

/// The most entries accepted in one of a report's maps.
pub const MAX_MAP_ENTRIES: usize = 256;

/// One backend load report (`xds.data.orca.v3.OrcaLoadReport`), validated (see the
/// module documentation). Unset fields are 0, as in the proto.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OrcaLoadReport {
    /// CPU utilization, a fraction of the available CPU (may exceed 1).
    pub cpu_utilization: f64,
    /// Memory utilization, in `[0, 1]`.
    pub mem_utilization: f64,
    /// Application-specific utilization (may exceed 1); weighted round robin prefers
    /// it to `cpu_utilization` (A58).
    pub application_utilization: f64,
    /// Queries per second the backend serves (`rps_fractional`).
    pub qps: f64,
    /// Errors per second.
    pub eps: f64,
    /// Costs of the request, per name (per-call reports only).
    pub request_cost: BTreeMap<String, f64>,
    /// Named resource utilizations, each in `[0, 1]`.
    pub utilization: BTreeMap<String, f64>,
    /// Application-specific opaque metrics (A64 forwards these to LRS).
    pub named_metrics: BTreeMap<String, f64>,
}

/// Why a report was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrcaError {
    /// More than [`MAX_REPORT_BYTES`] bytes.
    TooLarge(usize),
    /// Not an `OrcaLoadReport`.
    Malformed(String),
    /// A map with more than [`MAX_MAP_ENTRIES`] entries.
    TooManyEntries {
        /// The map's field name.
        field: &'static str,
        /// How many entries it had.
        count: usize,
    },
}

impl fmt::Display for OrcaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrcaError::TooLarge(n) => write!(
                f,
                "ORCA load report of {n} bytes exceeds {MAX_REPORT_BYTES} bytes"
            ),
            OrcaError::Malformed(e) => write!(f, "malformed ORCA load report: {e}"),
            OrcaError::TooManyEntries { field, count } => write!(
                f,
                "ORCA load report has {count} entries in {field}, more than {MAX_MAP_ENTRIES}"
            ),
        }
    }
}

impl std::error::Error for OrcaError {}

impl OrcaLoadReport {
    /// Decodes and validates a serialized `OrcaLoadReport` (the trailer's value once
    /// base64-decoded, or one message of the out-of-band stream).
    ///
    /// # Errors
    /// Too large, malformed, or a map with too many entries.
    pub fn decode(bytes: &[u8]) -> Result<OrcaLoadReport, OrcaError> {
        if bytes.len() > MAX_REPORT_BYTES {
            return Err(OrcaError::TooLarge(bytes.len()));
        }
        let pb = orca_pb::OrcaLoadReport::decode(bytes)
            .map_err(|e| OrcaError::Malformed(e.to_string()))?;
        OrcaLoadReport::from_proto(pb)
    }

    /// Validates a decoded report (one a gRPC codec decoded, bounded by its own
    /// message size limit, which should be [`MAX_REPORT_BYTES`]).
    ///
    /// # Errors
    /// A map with too many entries.
    pub fn from_proto(pb: orca_pb::OrcaLoadReport) -> Result<OrcaLoadReport, OrcaError> {
        for (field, count) in [
            ("request_cost", pb.request_cost.len()),
            ("utilization", pb.utilization.len()),
            ("named_metrics", pb.named_metrics.len()),
        ] {
            if count > MAX_MAP_ENTRIES {
                return Err(OrcaError::TooManyEntries { field, count });
            }
        }
        let unbounded = |v: f64| v.is_finite() && v >= 0.0;
        let fraction = |v: f64| (0.0..=1.0).contains(&v);
        let scalar = |v: f64, valid: &dyn Fn(f64) -> bool| if valid(v) { v } else { 0.0 };
        let map = |m: BTreeMap<String, f64>, valid: &dyn Fn(f64) -> bool| {
            m.into_iter().filter(|(_, v)| valid(*v)).collect()
        };
        Ok(OrcaLoadReport {
            cpu_utilization: scalar(pb.cpu_utilization, &unbounded),
            mem_utilization: scalar(pb.mem_utilization, &fraction),
            application_utilization: scalar(pb.application_utilization, &unbounded),
            qps: scalar(pb.rps_fractional, &unbounded),
            eps: scalar(pb.eps, &unbounded),
            request_cost: map(pb.request_cost, &|v: f64| v.is_finite()),
            utilization: map(pb.utilization, &fraction),
            named_metrics: map(pb.named_metrics, &|v: f64| v.is_finite()),
        })
    }

    /// The report as the proto message.
    pub fn to_proto(&self) -> orca_pb::OrcaLoadReport {
        orca_pb::OrcaLoadReport {
            cpu_utilization: self.cpu_utilization,
            mem_utilization: self.mem_utilization,
            application_utilization: self.application_utilization,
            rps_fractional: self.qps,
            eps: self.eps,
            request_cost: self.request_cost.clone(),
            utilization: self.utilization.clone(),
            named_metrics: self.named_metrics.clone(),
            ..Default::default()
        }
    }

    /// The serialized report (what the trailer carries before base64, and what the
    /// out-of-band stream sends).
    pub fn encode_to_vec(&self) -> Vec<u8> {
        self.to_proto().encode_to_vec()
    }

    /// The utilization weighted round robin divides by (A58): `application_utilization`
    /// when set, else `cpu_utilization`.
    pub fn wrr_utilization(&self) -> f64 {
        if self.application_utilization > 0.0 {
            self.application_utilization
        } else {
            self.cpu_utilization
        }
    }
}

/// The `OrcaLoadReportRequest` that opens an out-of-band stream asking for a report
/// every `interval` (the server may send them less often).
pub fn oob_request(interval: Duration) -> service_pb::OrcaLoadReportRequest {
    service_pb::OrcaLoadReportRequest {
        report_interval: Some(crate::pb::google::protobuf::Duration {
            seconds: i64::try_from(interval.as_secs()).unwrap_or(i64::MAX),
            nanos: interval.subsec_nanos() as i32,
        }),
        request_cost_names: Vec::new(),
    }
}

/// The interval an `OrcaLoadReportRequest` asks for (a server's view): `None` when
/// unset, zero or negative, which a server treats as its minimum (A51).
pub fn requested_interval(request: &service_pb::OrcaLoadReportRequest) -> Option<Duration> {
    let d = request.report_interval.as_ref()?;
    let seconds = u64::try_from(d.seconds).ok()?;
    let nanos = u32::try_from(d.nanos).ok().filter(|n| *n < 1_000_000_000)?;
    Some(Duration::new(seconds, nanos)).filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests;
