//! The gRFC A78 XdsClient metrics, exported through the [`metrics`](https://docs.rs/metrics)
//! facade to whatever recorder the application installed (none: nothing is recorded).
//!
//! The core keeps the figures ([`XdsClient::metrics`]); this module owns getting them
//! out: the `grpc.target` label, the descriptions, when to export, and zeroing the gauge
//! label sets that disappeared. Computing a snapshot scans every resource, so the driver
//! exports on an interval ([`DEFAULT_METRICS_INTERVAL`], see
//! [`ClientBuilder::metrics_interval`](crate::ClientBuilder::metrics_interval)), when
//! asked ([`Client::export_metrics`](crate::Client::export_metrics)) and once when the
//! client stops, never per response.
//!
//! | metric | kind | A78 unit | labels |
//! | --- | --- | --- | --- |
//! | `grpc.xds_client.connected` | gauge (0/1) | `{bool}` | target, server |
//! | `grpc.xds_client.server_failure` | counter | `{failure}` | target, server |
//! | `grpc.xds_client.resource_updates_valid` | counter | `{resource}` | target, server, resource type |
//! | `grpc.xds_client.resource_updates_invalid` | counter | `{resource}` | target, server, resource type |
//! | `grpc.xds_client.resources` | gauge | `{resource}` | target, authority, resource type, cache state |
//!
//! The `metrics` crate has no curly-brace units, so all five are described with
//! [`Unit::Count`]. Counters are the core's totals since the client was created, set
//! with `Counter::absolute`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, SharedString, Unit};
use xds_proto_core::metrics::XdsClientMetrics;
pub use xds_proto_core::metrics::{CacheState, OLD_STYLE_AUTHORITY, labels, names};
use xds_proto_core::{Instant, XdsClient};

/// How often a client exports its metrics unless configured otherwise.
pub const DEFAULT_METRICS_INTERVAL: Duration = Duration::from_secs(5);

/// The `grpc.target` of a client built outside a pool without
/// [`ClientBuilder::target`](crate::ClientBuilder::target). Clients that share a target
/// write the same series, so give each standalone client its own target.
pub const STANDALONE_TARGET: &str = "#standalone";

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// One client's exporter: its target, its schedule, and the gauge series it set last.
pub(crate) struct MetricsExporter {
    target: SharedString,
    /// `None`: no automatic export (on-demand exports still happen).
    interval: Option<Duration>,
    next_export: Option<Instant>,
    described: bool,
    /// The gauge series set by the last export, to zero those that disappear.
    gauges: HashSet<Key>,
}

impl MetricsExporter {
    /// An exporter for the client of `target`, first exporting one `interval` after `now`.
    pub(crate) fn new(target: Arc<str>, interval: Option<Duration>, now: Instant) -> Self {
        MetricsExporter {
            target: SharedString::from(target),
            interval,
            next_export: interval.map(|i| now + i),
            described: false,
            gauges: HashSet::new(),
        }
    }

    /// When the next automatic export is due.
    pub(crate) fn next_export(&self) -> Option<Instant> {
        self.next_export
    }

    /// Exports if an automatic export is due at `now`, and schedules the next one.
    pub(crate) fn export_if_due(&mut self, now: Instant, core: &XdsClient) {
        let (Some(due), Some(interval)) = (self.next_export, self.interval) else {
            return;
        };
        if due <= now {
            self.export(&core.metrics());
            self.next_export = Some(now + interval);
        }
    }

    /// The export when the client stops: the final counters, and every gauge series
    /// set to 0 (a stopped client has no stream and holds no resource). Skipped when
    /// automatic exports are off.
    pub(crate) fn finish(&mut self, core: &XdsClient) {
        if self.interval.is_none() {
            return;
        }
        self.export(&core.metrics());
        metrics::with_recorder(|recorder| {
            for key in self.gauges.drain() {
                recorder.register_gauge(&key, &METADATA).set(0.0);
            }
        });
        self.next_export = None;
    }

    /// Hands one snapshot to the installed recorder.
    pub(crate) fn export(&mut self, snapshot: &XdsClientMetrics) {
        if !self.described {
            describe();
            self.described = true;
        }
        let mut gauges = HashSet::with_capacity(self.gauges.len());
        metrics::with_recorder(|recorder| {
            let mut set_gauge = |key: Key, value: f64| {
                recorder.register_gauge(&key, &METADATA).set(value);
                gauges.insert(key);
            };
            for server in &snapshot.servers {
                let server_labels = || {
                    vec![
                        Label::new(labels::TARGET, self.target.clone()),
                        Label::new(labels::SERVER, SharedString::from(server.server.clone())),
                    ]
                };
                set_gauge(
                    Key::from_parts(names::CONNECTED, server_labels()),
                    if server.connected { 1.0 } else { 0.0 },
                );
                recorder
                    .register_counter(
                        &Key::from_parts(names::SERVER_FAILURE, server_labels()),
                        &METADATA,
                    )
                    .absolute(server.failures);
                for updates in &server.updates {
                    let type_labels = || {
                        let mut set = server_labels();
                        set.push(Label::new(labels::RESOURCE_TYPE, updates.resource_type));
                        set
                    };
                    let valid = Key::from_parts(names::RESOURCE_UPDATES_VALID, type_labels());
                    recorder
                        .register_counter(&valid, &METADATA)
                        .absolute(updates.valid);
                    let invalid = Key::from_parts(names::RESOURCE_UPDATES_INVALID, type_labels());
                    recorder
                        .register_counter(&invalid, &METADATA)
                        .absolute(updates.invalid);
                }
            }
            for count in &snapshot.resources {
                let set = vec![
                    Label::new(labels::TARGET, self.target.clone()),
                    Label::new(labels::AUTHORITY, count.authority.clone()),
                    Label::new(labels::RESOURCE_TYPE, count.resource_type),
                    Label::new(labels::CACHE_STATE, count.cache_state.as_str()),
                ];
                set_gauge(Key::from_parts(names::RESOURCES, set), count.count as f64);
            }
            // A series the snapshot no longer has (a cache state nothing is in any more)
            // would otherwise keep its last value in the recorder.
            for gone in self.gauges.difference(&gauges) {
                recorder.register_gauge(gone, &METADATA).set(0.0);
            }
        });
        self.gauges = gauges;
    }
}

/// Describes the five metrics with A78's descriptions. Every exporter does it on its
/// first export (recorders take repeats), so a recorder installed after another client
/// started still gets them.
fn describe() {
    metrics::describe_gauge!(
        names::CONNECTED,
        Unit::Count,
        "Whether or not the xDS client currently has a working ADS stream to the xDS \
         server. For a given server, this will be set to 1 when the stream is initially \
         created. It will be set to 0 when we have a connectivity failure or when the ADS \
         stream fails without seeing a response message, as per gRFC A57. Once set to 0, \
         it will be reset to 1 when we receive the first response on an ADS stream."
    );
    metrics::describe_counter!(
        names::SERVER_FAILURE,
        Unit::Count,
        "A counter of xDS servers going from healthy to unhealthy. A server goes \
         unhealthy when we have a connectivity failure or when the ADS stream fails \
         without seeing a response message, as per gRFC A57."
    );
    metrics::describe_counter!(
        names::RESOURCE_UPDATES_VALID,
        Unit::Count,
        "A counter of resources received that were considered valid. The counter will \
         be incremented even for resources that have not changed."
    );
    metrics::describe_counter!(
        names::RESOURCE_UPDATES_INVALID,
        Unit::Count,
        "A counter of resources received that were considered invalid."
    );
    metrics::describe_gauge!(names::RESOURCES, Unit::Count, "Number of xDS resources.");
}
