//! The `LoadStatsRequest`s the client sends: the first of a stream (the node, with the
//! `envoy.lrs.supports_send_all_clusters` client feature, and no stats), and the load
//! reports (per cluster and EDS service name: per locality the requests issued,
//! succeeded, failed and in progress and the A64 named metrics; the drops by category
//! and in total; the actual interval).

use std::time::Duration;

use super::stats::{LocalitySnapshot, NamedMetric};
use super::store::ClusterReport;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::endpoint::v3 as endpoint_pb;
use crate::pb::envoy::service::load_stats::v3::LoadStatsRequest;
use crate::pb::google::protobuf::Duration as PbDuration;

/// The client feature that tells an LRS server the client honours
/// `send_all_clusters`.
pub const SEND_ALL_CLUSTERS_FEATURE: &str = "envoy.lrs.supports_send_all_clusters";

/// The first request of a stream: the node, advertising `send_all_clusters` support.
pub(crate) fn initial_request(node: &core_pb::Node) -> LoadStatsRequest {
    let mut node = node.clone();
    node.client_features
        .push(SEND_ALL_CLUSTERS_FEATURE.to_owned());
    LoadStatsRequest {
        node: Some(node),
        cluster_stats: Vec::new(),
    }
}

/// A load report of these clusters.
pub(crate) fn load_report(clusters: Vec<ClusterReport>) -> LoadStatsRequest {
    LoadStatsRequest {
        node: None,
        cluster_stats: clusters.into_iter().map(cluster_stats).collect(),
    }
}

fn cluster_stats(report: ClusterReport) -> endpoint_pb::ClusterStats {
    let snapshot = report.snapshot;
    let total_dropped_requests = snapshot.total_dropped();
    endpoint_pb::ClusterStats {
        cluster_name: report.cluster.into(),
        cluster_service_name: report
            .eds_service_name
            .map(String::from)
            .unwrap_or_default(),
        upstream_locality_stats: snapshot
            .localities
            .into_iter()
            .map(locality_stats)
            .collect(),
        total_dropped_requests,
        dropped_requests: (snapshot.drops.into_iter())
            .map(
                |(category, dropped_count)| endpoint_pb::cluster_stats::DroppedRequests {
                    category: category.to_string(),
                    dropped_count,
                },
            )
            .collect(),
        load_report_interval: Some(duration(report.interval)),
    }
}

fn locality_stats(snapshot: LocalitySnapshot) -> endpoint_pb::UpstreamLocalityStats {
    let locality = snapshot.locality;
    endpoint_pb::UpstreamLocalityStats {
        locality: Some(core_pb::Locality {
            region: locality.region,
            zone: locality.zone,
            sub_zone: locality.sub_zone,
        }),
        total_successful_requests: snapshot.succeeded,
        total_requests_in_progress: snapshot.in_progress,
        total_error_requests: snapshot.errored,
        total_issued_requests: snapshot.issued,
        load_metric_stats: snapshot.named_metrics.into_iter().map(metric).collect(),
        ..Default::default()
    }
}

fn metric(m: NamedMetric) -> endpoint_pb::EndpointLoadMetricStats {
    endpoint_pb::EndpointLoadMetricStats {
        metric_name: m.name.into(),
        num_requests_finished_with_metric: m.requests,
        total_metric_value: m.total,
    }
}

fn duration(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}
