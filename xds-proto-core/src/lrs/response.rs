//! The server's `LoadStatsResponse`, read as bounded input: which clusters it wants
//! reports for (`send_all_clusters`, or at most [`MAX_REPORTED_CLUSTER_NAMES`] names)
//! and how often (`load_reporting_interval`, clamped between the client's minimum and
//! [`MAX_LOAD_REPORTING_INTERVAL`]).
//!
//! The names are read one by one from the received buffer and kept up to the bound;
//! a message naming a million clusters allocates no more than one naming the bound.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Buf;
use prost::encoding::{self, DecodeContext, WireType};

use crate::pb::google::protobuf::Duration as PbDuration;

/// The most cluster names of one `LoadStatsResponse` the client keeps; the rest are
/// ignored (and logged). gRPC keeps them all; a client reports for the clusters it
/// uses, far fewer than this.
pub const MAX_REPORTED_CLUSTER_NAMES: usize = 10_000;

/// The longest `load_reporting_interval` the client takes: a longer one (up to the
/// ten thousand years a `Duration` allows) is taken as this. Not a gRPC value; it only
/// keeps the timer arithmetic far from its limits.
pub const MAX_LOAD_REPORTING_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// The shortest `load_reporting_interval` the client takes by default (gRPC C-core's
/// `GRPC_XDS_MIN_CLIENT_LOAD_REPORTING_INTERVAL_MS`): a shorter one, zero included, is
/// taken as this.
pub const DEFAULT_MIN_LOAD_REPORTING_INTERVAL: Duration = Duration::from_secs(1);

/// What an LRS server asked for in its latest `LoadStatsResponse`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportingSettings {
    /// `send_all_clusters`: report every cluster, whatever `clusters` says.
    pub send_all_clusters: bool,
    /// The clusters to report (empty with `send_all_clusters`), at most
    /// [`MAX_REPORTED_CLUSTER_NAMES`].
    pub clusters: BTreeSet<Box<str>>,
    /// The names past the bound, which are not kept.
    pub ignored_names: usize,
    /// `load_reporting_interval`, within the client's bounds.
    pub interval: Duration,
}

impl ReportingSettings {
    /// Whether the server wants reports for `cluster`.
    pub fn wants(&self, cluster: &str) -> bool {
        self.send_all_clusters || self.clusters.contains(cluster)
    }

    /// Decodes a `LoadStatsResponse` as the client takes it: the interval clamped to
    /// `min_interval..=MAX_LOAD_REPORTING_INTERVAL` (an unset, negative or malformed
    /// one counts as zero), the names bounded by [`MAX_REPORTED_CLUSTER_NAMES`].
    ///
    /// # Errors
    /// The bytes are no `LoadStatsResponse` (as the generated decoder would say).
    pub fn decode(
        bytes: impl Buf,
        min_interval: Duration,
    ) -> Result<ReportingSettings, prost::DecodeError> {
        let lite: LiteResponse = prost::Message::decode(bytes)?;
        let interval = lite
            .interval
            .as_ref()
            .and_then(|d| {
                let secs = u64::try_from(d.seconds).ok()?;
                let nanos = u32::try_from(d.nanos).ok().filter(|n| *n < 1_000_000_000)?;
                Some(Duration::new(secs, nanos))
            })
            .unwrap_or(Duration::ZERO)
            .min(MAX_LOAD_REPORTING_INTERVAL)
            .max(min_interval.min(MAX_LOAD_REPORTING_INTERVAL));
        let (clusters, ignored_names) = if lite.send_all_clusters {
            (BTreeSet::new(), 0)
        } else {
            (lite.clusters, lite.ignored)
        };
        Ok(ReportingSettings {
            send_all_clusters: lite.send_all_clusters,
            clusters,
            ignored_names,
            interval,
        })
    }
}

/// `envoy.service.load_stats.v3.LoadStatsResponse`, keeping at most
/// [`MAX_REPORTED_CLUSTER_NAMES`] distinct names.
#[derive(Debug, Default)]
struct LiteResponse {
    clusters: BTreeSet<Box<str>>,
    ignored: usize,
    interval: Option<PbDuration>,
    send_all_clusters: bool,
    /// The name being read: one buffer for every name.
    scratch: String,
}

impl prost::Message for LiteResponse {
    fn encode_raw(&self, _buf: &mut impl bytes::BufMut) {
        unreachable!("LiteResponse is only decoded")
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        match tag {
            1 => {
                // The generated decoder's checks (wire type, length, UTF-8), into a
                // buffer reused for every name.
                encoding::string::merge(wire_type, &mut self.scratch, buf, ctx)?;
                let name = self.scratch.as_str();
                let known = self.clusters.contains(name);
                if !known && self.clusters.len() < MAX_REPORTED_CLUSTER_NAMES {
                    self.clusters.insert(name.into());
                } else if !known {
                    self.ignored += 1;
                }
                Ok(())
            }
            2 => encoding::message::merge(
                wire_type,
                self.interval.get_or_insert_with(PbDuration::default),
                buf,
                ctx,
            ),
            4 => encoding::bool::merge(wire_type, &mut self.send_all_clusters, buf, ctx),
            // `report_endpoint_granularity` (3) and unknown fields: gRPC reports per
            // locality only.
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        0
    }

    fn clear(&mut self) {
        *self = LiteResponse::default();
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::pb::envoy::service::load_stats::v3::LoadStatsResponse;

    fn decode(response: &LoadStatsResponse) -> ReportingSettings {
        let bytes = response.encode_to_vec();
        ReportingSettings::decode(bytes.as_slice(), DEFAULT_MIN_LOAD_REPORTING_INTERVAL)
            .expect("a LoadStatsResponse decodes")
    }

    fn interval(seconds: i64, nanos: i32) -> Option<PbDuration> {
        Some(PbDuration { seconds, nanos })
    }

    #[test]
    fn the_interval_is_clamped_between_the_minimum_and_a_day() {
        let with = |d| LoadStatsResponse {
            load_reporting_interval: d,
            ..Default::default()
        };
        assert_eq!(
            decode(&with(interval(10, 0))).interval,
            Duration::from_secs(10)
        );
        assert_eq!(
            decode(&with(interval(2, 500_000_000))).interval,
            Duration::from_millis(2500)
        );
        for short in [None, interval(0, 0), interval(0, 1), interval(-5, 0)] {
            assert_eq!(decode(&with(short)).interval, Duration::from_secs(1));
        }
        for malformed in [interval(1, -1), interval(1, 1_000_000_000)] {
            assert_eq!(decode(&with(malformed)).interval, Duration::from_secs(1));
        }
        for huge in [interval(i64::MAX, 999_999_999), interval(10 << 40, 0)] {
            assert_eq!(decode(&with(huge)).interval, MAX_LOAD_REPORTING_INTERVAL);
        }
        let bytes = with(interval(0, 0)).encode_to_vec();
        let short = ReportingSettings::decode(bytes.as_slice(), Duration::from_millis(50));
        assert_eq!(short.unwrap().interval, Duration::from_millis(50));
    }

    #[test]
    fn send_all_clusters_wins_over_names() {
        let settings = decode(&LoadStatsResponse {
            clusters: vec!["a".into()],
            send_all_clusters: true,
            ..Default::default()
        });
        assert!(settings.wants("a") && settings.wants("anything"));
        assert!(settings.clusters.is_empty());
        let named = decode(&LoadStatsResponse {
            clusters: vec!["a".into(), "b".into(), "a".into()],
            ..Default::default()
        });
        assert!(named.wants("a") && named.wants("b") && !named.wants("c"));
        assert_eq!(named.clusters.len(), 2);
    }

    #[test]
    fn a_million_names_keep_the_bound() {
        let clusters: Vec<String> = (0..1_000_000).map(|i| format!("c{i}")).collect();
        let settings = decode(&LoadStatsResponse {
            clusters,
            ..Default::default()
        });
        assert_eq!(settings.clusters.len(), MAX_REPORTED_CLUSTER_NAMES);
        assert_eq!(
            settings.ignored_names,
            1_000_000 - MAX_REPORTED_CLUSTER_NAMES
        );
        assert!(settings.wants("c0") && !settings.wants("c999999"));
    }

    #[test]
    fn malformed_messages_are_errors_as_for_the_generated_decoder() {
        for bytes in [
            &[0x0a, 0x02, 0xff, 0xfe][..],
            &[0x0a, 0x05, b'a'],
            &[0x12, 0x01],
        ] {
            assert!(LoadStatsResponse::decode(bytes).is_err());
            assert!(ReportingSettings::decode(bytes, Duration::ZERO).is_err());
        }
    }
}
