//! ORCA for servers (gRFC A51): what a tonic backend needs to feed clients' weighted
//! round robin (A58) and their load reports (A64).
//!
//! - [`ServerMetricRecorder`]: the per-server metrics (utilization, qps, eps, named
//!   utilizations), set by the application whenever it measures them;
//! - [`CallMetricRecorder`]: the per-call metrics, found in each request's extensions
//!   (`request.extensions().get::<CallMetricRecorder>()`, with tonic
//!   `tonic::Request::extensions`) while [`OrcaLayer`] wraps the service;
//! - [`OrcaLayer`]: a tower layer that attaches each call's report (the server's
//!   metrics, overridden by the call's) as the `endpoint-load-metrics-bin` trailer;
//! - [`OrcaService`]: the out-of-band `xds.service.orca.v3.OpenRcaService`, sending the
//!   server's metrics on every `StreamCoreMetrics` call at the interval the client asks
//!   for, but never more often than its minimum (30 s by default, as gRPC).
//!
//! As gRPC's recorders do, a value outside its range (negative, not finite, a memory
//! utilization above 1, a named utilization outside `[0, 1]`) is ignored.
//!
//! ```no_run
//! # use std::time::Duration;
//! # use xds_adapter_common::orca::{CallMetricRecorder, OrcaLayer, ServerMetricRecorder};
//! let recorder = ServerMetricRecorder::new();
//! recorder.set_cpu_utilization(0.4);
//! recorder.set_qps(250.0);
//! // tonic::transport::Server::builder().layer(OrcaLayer::new(recorder.clone()))...
//! let layer = OrcaLayer::new(recorder.clone());
//! // In a handler, per call:
//! fn handler(request: &tonic::Request<()>) {
//!     if let Some(call) = request.extensions().get::<CallMetricRecorder>() {
//!         call.record_named_metric("queue_depth", 3.0);
//!     }
//! }
//! # let _ = layer;
//! ```

mod layer;
mod service;

use std::sync::{Arc, Mutex, MutexGuard};

use xds_proto_core::orca::OrcaLoadReport;

pub use layer::{OrcaBody, OrcaLayer, OrcaMiddleware};
pub use service::{DEFAULT_MIN_REPORT_INTERVAL, OrcaService};

/// Which scalar metrics were recorded (a recorded 0 still overrides the server's).
#[derive(Clone, Copy, Debug, Default)]
struct Recorded {
    cpu: bool,
    mem: bool,
    application: bool,
    qps: bool,
    eps: bool,
}

/// A report with what of it was recorded.
#[derive(Clone, Debug, Default)]
struct Metrics {
    report: OrcaLoadReport,
    recorded: Recorded,
}

impl Metrics {
    fn is_empty(&self) -> bool {
        let r = &self.recorded;
        !(r.cpu || r.mem || r.application || r.qps || r.eps)
            && self.report.request_cost.is_empty()
            && self.report.utilization.is_empty()
            && self.report.named_metrics.is_empty()
    }

    /// These metrics over `base`: what was recorded here wins (A51: per-call
    /// metrics take precedence over the server's).
    fn over(&self, base: &Metrics) -> OrcaLoadReport {
        let (mine, r) = (&self.report, self.recorded);
        let pick =
            |recorded: bool, value: f64, fallback: f64| if recorded { value } else { fallback };
        let mut report = base.report.clone();
        report.cpu_utilization = pick(r.cpu, mine.cpu_utilization, report.cpu_utilization);
        report.mem_utilization = pick(r.mem, mine.mem_utilization, report.mem_utilization);
        report.application_utilization = pick(
            r.application,
            mine.application_utilization,
            report.application_utilization,
        );
        report.qps = pick(r.qps, mine.qps, report.qps);
        report.eps = pick(r.eps, mine.eps, report.eps);
        for (into, from) in [
            (&mut report.request_cost, &mine.request_cost),
            (&mut report.utilization, &mine.utilization),
            (&mut report.named_metrics, &mine.named_metrics),
        ] {
            into.extend(from.iter().map(|(k, v)| (k.clone(), *v)));
        }
        report
    }
}

fn unbounded(value: f64) -> bool {
    value.is_finite() && value >= 0.0
}

fn fraction(value: f64) -> bool {
    (0.0..=1.0).contains(&value)
}

/// The metrics of one server (A51's per-server recorder). Cheap to clone: every clone
/// is the same recorder. Thread-safe; no atomicity across calls.
#[derive(Clone, Debug, Default)]
pub struct ServerMetricRecorder {
    inner: Arc<Mutex<Metrics>>,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $set:ident, $clear:ident, $field:ident, $flag:ident, $valid:ident;)*) => {$(
        $(#[$doc])*
        pub fn $set(&self, value: f64) {
            if $valid(value) {
                let mut m = self.lock();
                m.report.$field = value;
                m.recorded.$flag = true;
            }
        }

        /// Clears it.
        pub fn $clear(&self) {
            let mut m = self.lock();
            m.report.$field = 0.0;
            m.recorded.$flag = false;
        }
    )*};
}

impl ServerMetricRecorder {
    /// A recorder with nothing set.
    pub fn new() -> ServerMetricRecorder {
        ServerMetricRecorder::default()
    }

    fn lock(&self) -> MutexGuard<'_, Metrics> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    setters! {
        /// Sets the CPU utilization (`[0, ∞)`: may exceed 1 beyond a soft limit).
        set_cpu_utilization, clear_cpu_utilization, cpu_utilization, cpu, unbounded;
        /// Sets the memory utilization (`[0, 1]`).
        set_mem_utilization, clear_mem_utilization, mem_utilization, mem, fraction;
        /// Sets the application utilization (`[0, ∞)`), which weighted round robin
        /// prefers to the CPU's.
        set_application_utilization, clear_application_utilization, application_utilization, application, unbounded;
        /// Sets the queries per second (`[0, ∞)`).
        set_qps, clear_qps, qps, qps, unbounded;
        /// Sets the errors per second (`[0, ∞)`).
        set_eps, clear_eps, eps, eps, unbounded;
    }

    /// Sets a named utilization (`[0, 1]`).
    pub fn set_named_utilization(&self, name: &str, value: f64) {
        if fraction(value) {
            self.lock()
                .report
                .utilization
                .insert(name.to_owned(), value);
        }
    }

    /// Clears a named utilization.
    pub fn clear_named_utilization(&self, name: &str) {
        self.lock().report.utilization.remove(name);
    }

    /// The report the server's metrics make now.
    pub fn snapshot(&self) -> OrcaLoadReport {
        self.lock().report.clone()
    }

    fn metrics(&self) -> Metrics {
        self.lock().clone()
    }
}

/// The metrics of one call (A51's per-call recorder): in the request's extensions
/// while [`OrcaLayer`] wraps the service. What it records overrides the server's
/// metrics in the call's report. Cheap to clone; thread-safe.
#[derive(Clone, Debug, Default)]
pub struct CallMetricRecorder {
    inner: Arc<Mutex<Metrics>>,
}

macro_rules! recorders {
    ($($(#[$doc:meta])* $record:ident, $field:ident, $flag:ident, $valid:ident;)*) => {$(
        $(#[$doc])*
        pub fn $record(&self, value: f64) -> &Self {
            if $valid(value) {
                let mut m = self.lock();
                m.report.$field = value;
                m.recorded.$flag = true;
            }
            self
        }
    )*};
}

impl CallMetricRecorder {
    fn lock(&self) -> MutexGuard<'_, Metrics> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    recorders! {
        /// Records the CPU utilization (`[0, ∞)`).
        record_cpu_utilization, cpu_utilization, cpu, unbounded;
        /// Records the memory utilization (`[0, 1]`).
        record_mem_utilization, mem_utilization, mem, fraction;
        /// Records the application utilization (`[0, ∞)`).
        record_application_utilization, application_utilization, application, unbounded;
        /// Records the queries per second (`[0, ∞)`).
        record_qps, qps, qps, unbounded;
        /// Records the errors per second (`[0, ∞)`).
        record_eps, eps, eps, unbounded;
    }

    /// Records a named utilization (`[0, 1]`).
    pub fn record_utilization(&self, name: &str, value: f64) -> &Self {
        if fraction(value) {
            self.lock()
                .report
                .utilization
                .insert(name.to_owned(), value);
        }
        self
    }

    /// Records a request cost (any finite value).
    pub fn record_request_cost(&self, name: &str, value: f64) -> &Self {
        if value.is_finite() {
            self.lock()
                .report
                .request_cost
                .insert(name.to_owned(), value);
        }
        self
    }

    /// Records an opaque named metric (any finite value; A64 forwards these to LRS).
    pub fn record_named_metric(&self, name: &str, value: f64) -> &Self {
        if value.is_finite() {
            self.lock()
                .report
                .named_metrics
                .insert(name.to_owned(), value);
        }
        self
    }

    /// The call's report over `server`'s metrics; `None` when neither has anything.
    fn report(&self, server: Option<&ServerMetricRecorder>) -> Option<OrcaLoadReport> {
        let call = self.lock().clone();
        let server = server
            .map(ServerMetricRecorder::metrics)
            .unwrap_or_default();
        if call.is_empty() && server.is_empty() {
            return None;
        }
        Some(call.over(&server))
    }
}

#[cfg(test)]
mod tests;
