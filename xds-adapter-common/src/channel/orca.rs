//! ORCA on the channel's side (gRFC A51): the per-call load report read from a call's
//! trailers when its pick wants it (weighted round robin, A58), and the out-of-band
//! `OpenRcaService/StreamCoreMetrics` calls the load balancer asks for
//! (`LbAction::LoadReports`), one per READY subchannel connection.
//!
//! A report is decoded once, by the core ([`OrcaLoadReport::decode`], bounded); this
//! module only takes the `endpoint-load-metrics-bin` value out of the trailers and
//! undoes its base64. A malformed trailer is logged and ignored: the RPC's outcome is
//! its status alone. An out-of-band call that fails is opened again after a backoff
//! (reset by every report received), except after UNIMPLEMENTED, which ends it for
//! the connection (A51); it ends with its connection, or when the balancer stops
//! asking, and starts again on the subchannel's next connection.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::channel::oneshot;
use http::HeaderMap;
use http::uri::PathAndQuery;
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tonic::metadata::MetadataMap;
use xds_proto_core::backoff::{Backoff, BackoffConfig};
use xds_proto_core::lb::{CallToken, SubchannelId};
use xds_proto_core::orca::{self, MAX_REPORT_BYTES, OrcaLoadReport};
use xds_proto_core::pb::xds::data::orca::v3 as orca_pb;
use xds_proto_core::pb::xds::service::orca::v3::OrcaLoadReportRequest;

use super::balancer::Shared;
use super::connections::Attempt;
use crate::runtime::{BoxFuture, Runtime};
use crate::transport::{Connection, H2Service};

/// The longest trailer value worth decoding: base64 of [`MAX_REPORT_BYTES`].
const MAX_ENCODED_LEN: usize = MAX_REPORT_BYTES.div_ceil(3) * 4;

/// The call's per-call report, when its pick wants one and the trailers (or the
/// Trailers-Only response's headers) carry one that decodes.
pub(super) fn call_report(
    call: &CallToken,
    trailers: Option<&HeaderMap>,
) -> Option<OrcaLoadReport> {
    if !call.wants_load_report() {
        return None;
    }
    trailer_report(trailers?)
}

/// The report in `trailers`, if one is there and decodes; otherwise `None`, logged.
fn trailer_report(trailers: &HeaderMap) -> Option<OrcaLoadReport> {
    let value = trailers.get(orca::TRAILER)?;
    if value.len() > MAX_ENCODED_LEN {
        tracing::debug!(
            len = value.len(),
            "ignoring an ORCA load report trailer: too long"
        );
        return None;
    }
    let mut one = HeaderMap::with_capacity(1);
    one.insert(orca::TRAILER, value.clone());
    let bytes = match MetadataMap::from_headers(one)
        .get_bin(orca::TRAILER)?
        .to_bytes()
    {
        Ok(bytes) => bytes,
        Err(_) => {
            tracing::debug!("ignoring an ORCA load report trailer: not base64");
            return None;
        }
    };
    OrcaLoadReport::decode(&bytes)
        .map_err(|error| tracing::debug!(%error, "ignoring an ORCA load report trailer"))
        .ok()
}

/// An out-of-band stream to start once the lock is released.
pub(super) struct OobStart {
    subchannel: SubchannelId,
    attempt: Attempt,
    connection: Connection,
    interval: Duration,
    cancel: oneshot::Receiver<()>,
}

/// Per subchannel: the reporting interval the balancer asks for, and the stream
/// running on its current connection (dropping the sender ends it).
#[derive(Default)]
pub(super) struct OobStreams {
    wanted: HashMap<SubchannelId, Duration>,
    running: HashMap<SubchannelId, oneshot::Sender<()>>,
}

impl OobStreams {
    /// The balancer's `LoadReports`: a stream at the new interval replaces the one
    /// running, on `ready`, the subchannel's connection if it is READY.
    pub(super) fn set(
        &mut self,
        subchannel: SubchannelId,
        interval: Option<Duration>,
        ready: Option<(Attempt, &Connection)>,
    ) -> Option<OobStart> {
        self.running.remove(&subchannel);
        match interval {
            None => {
                self.wanted.remove(&subchannel);
                None
            }
            Some(interval) => {
                self.wanted.insert(subchannel, interval);
                self.connected(subchannel, ready?.0, ready?.1)
            }
        }
    }

    /// The subchannel's connection `attempt` is READY: its stream starts, if wanted.
    pub(super) fn connected(
        &mut self,
        subchannel: SubchannelId,
        attempt: Attempt,
        connection: &Connection,
    ) -> Option<OobStart> {
        let interval = *self.wanted.get(&subchannel)?;
        let (stop, cancel) = oneshot::channel();
        self.running.insert(subchannel, stop);
        Some(OobStart {
            subchannel,
            attempt,
            connection: connection.clone(),
            interval,
            cancel,
        })
    }

    /// The subchannel's connection is gone (or it is): its stream ends.
    pub(super) fn disconnected(&mut self, subchannel: SubchannelId) {
        self.running.remove(&subchannel);
    }

    /// The subchannel is gone: nothing more is wanted of it.
    pub(super) fn forget(&mut self, subchannel: SubchannelId) {
        self.running.remove(&subchannel);
        self.wanted.remove(&subchannel);
    }
}

/// Runs `start`'s stream on the runtime until it is cancelled, its connection ends or
/// the server says UNIMPLEMENTED.
pub(super) fn spawn<R: Runtime>(shared: &Arc<Shared<R>>, start: OobStart) {
    let rt = shared.rt.clone();
    let spawner = rt.clone();
    let seed = u64::from(shared.random_u32());
    let shared = Arc::downgrade(shared);
    let task: BoxFuture<()> = Box::pin(async move {
        let OobStart {
            subchannel,
            attempt,
            connection,
            interval,
            cancel,
        } = start;
        let streams = reopen(
            &rt, &shared, subchannel, attempt, connection, interval, seed,
        );
        let _ = futures::future::select(Box::pin(streams), cancel).await;
    });
    spawner.spawn(task);
}

/// Opens the stream again and again, with backoff, while the connection takes streams.
async fn reopen<R: Runtime>(
    rt: &R,
    shared: &Weak<Shared<R>>,
    subchannel: SubchannelId,
    attempt: Attempt,
    connection: Connection,
    interval: Duration,
    seed: u64,
) {
    let mut backoff = Backoff::new(BackoffConfig::default());
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    while connection.takes_new_streams() {
        let (status, reports) = stream(shared, subchannel, attempt, &connection, interval).await;
        if status.code() == tonic::Code::Unimplemented {
            tracing::error!(
                address = %connection.origin,
                "the backend does not serve ORCA out-of-band load reports (UNIMPLEMENTED)"
            );
            return;
        }
        if reports > 0 {
            backoff.reset();
        }
        let delay = backoff.next_delay(&mut rng);
        tracing::debug!(address = %connection.origin, ?delay, %status, "ORCA out-of-band stream ended");
        rt.sleep(delay).await;
    }
}

/// One `StreamCoreMetrics` call, to its end: its status and how many reports came.
async fn stream<R: Runtime>(
    shared: &Weak<Shared<R>>,
    subchannel: SubchannelId,
    attempt: Attempt,
    connection: &Connection,
    interval: Duration,
) -> (tonic::Status, u64) {
    let service = H2Service(connection.send.clone());
    let mut grpc = tonic::client::Grpc::with_origin(service, connection.origin.clone())
        .max_decoding_message_size(MAX_REPORT_BYTES);
    if let Err(e) = grpc.ready().await {
        return (tonic::Status::unavailable(e.to_string()), 0);
    }
    let request = orca::oob_request(interval);
    let codec =
        tonic_prost::ProstCodec::<OrcaLoadReportRequest, orca_pb::OrcaLoadReport>::default();
    let path = PathAndQuery::from_static(orca::STREAM_CORE_METRICS_PATH);
    let response = grpc
        .server_streaming(tonic::Request::new(request), path, codec)
        .await;
    let mut messages = match response {
        Ok(response) => response.into_inner(),
        Err(status) => return (status, 0),
    };
    let mut reports = 0;
    loop {
        match messages.message().await {
            Ok(Some(message)) => {
                reports += 1;
                let Some(shared) = shared.upgrade() else {
                    return (tonic::Status::cancelled("the channel is gone"), reports);
                };
                match OrcaLoadReport::from_proto(message) {
                    Ok(report) => shared.oob_report(subchannel, attempt, &report),
                    Err(error) => tracing::debug!(%error, "ignoring an ORCA out-of-band report"),
                }
            }
            Ok(None) => return (tonic::Status::ok(""), reports),
            Err(status) => return (status, reports),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn trailers(value: &[u8]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(orca::TRAILER, HeaderValue::from_bytes(value).unwrap());
        map
    }

    #[test]
    fn a_trailer_decodes_with_or_without_base64_padding() {
        let report = OrcaLoadReport {
            qps: 10.0,
            cpu_utilization: 0.5,
            named_metrics: [("a".to_owned(), 1.0)].into(),
            ..OrcaLoadReport::default()
        };
        let bytes = report.encode_to_vec();
        assert_ne!(bytes.len() % 3, 0, "the example needs padding");
        let encoded = tonic::metadata::BinaryMetadataValue::from_bytes(&bytes);
        let unpadded: Vec<u8> = (encoded.as_encoded_bytes().iter().copied())
            .filter(|b| *b != b'=')
            .collect();
        let mut padded = unpadded.clone();
        padded.resize(unpadded.len().div_ceil(4) * 4, b'=');
        for encoded in [padded, unpadded] {
            assert_eq!(trailer_report(&trailers(&encoded)), Some(report.clone()));
        }
    }

    #[test]
    fn a_malformed_trailer_is_ignored() {
        assert_eq!(trailer_report(&HeaderMap::new()), None, "no trailer");
        assert_eq!(trailer_report(&trailers(b"!!not base64!!")), None);
        // Valid base64 of bytes that are no report.
        assert_eq!(trailer_report(&trailers(b"/////w")), None);
        let long = vec![b'A'; MAX_ENCODED_LEN + 4];
        assert_eq!(trailer_report(&trailers(&long)), None, "too long to decode");
    }
}
