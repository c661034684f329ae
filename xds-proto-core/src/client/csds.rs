//! What the client reports about itself: the CSDS snapshot of every watched resource
//! and the gRFC A78 metrics.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::cache::ResourceEntry;
use super::{ResourceSnapshot, ResourceStatusKind, XdsClient};
use crate::metrics::{
    CacheState, OLD_STYLE_AUTHORITY, ResourceCount, ServerMetrics, TypeUpdates, XdsClientMetrics,
    resource_type_label,
};
use crate::pb::google::protobuf::Timestamp;
use crate::time::Instant;

impl XdsClient {
    /// A snapshot of every watched resource, for CSDS; ordered by type, then name.
    pub fn resource_snapshot(&self) -> Vec<ResourceSnapshot> {
        let mut out = Vec::new();
        for (t, table) in self.resources.iter().enumerate() {
            let type_url = self.types[t].type_url();
            let mut entries: Vec<&ResourceEntry> = table.values().collect();
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            out.extend(entries.into_iter().map(|e| e.snapshot(type_url)));
        }
        out
    }

    /// The gRFC A78 metrics of this client (without `grpc.target`, which the embedder
    /// knows): per-server counters and connection state, and the resources gauge. The
    /// gauge is counted on each call, in time linear in the watched resources.
    pub fn metrics(&self) -> XdsClientMetrics {
        let servers = self
            .servers
            .iter()
            .map(|srv| ServerMetrics {
                server: Arc::from(srv.config.server_uri.as_str()),
                connected: srv.responded,
                failures: srv.failures,
                updates: srv
                    .types
                    .iter()
                    .zip(&self.types)
                    .filter(|(ts, _)| ts.updates_valid + ts.updates_invalid > 0)
                    .map(|(ts, ty)| TypeUpdates {
                        resource_type: resource_type_label(ty.type_url()),
                        valid: ts.updates_valid,
                        invalid: ts.updates_invalid,
                    })
                    .collect(),
            })
            .collect();
        let mut counts: BTreeMap<(usize, usize, CacheState), u64> = BTreeMap::new();
        for (t, table) in self.resources.iter().enumerate() {
            for entry in table.values() {
                *counts
                    .entry((entry.authority, t, entry.cache_state()))
                    .or_default() += 1;
            }
        }
        let mut resources: Vec<ResourceCount> = counts
            .into_iter()
            .map(|((a, t, cache_state), count)| ResourceCount {
                authority: self.authorities[a]
                    .name
                    .clone()
                    .unwrap_or_else(|| OLD_STYLE_AUTHORITY.to_string()),
                resource_type: resource_type_label(self.types[t].type_url()),
                cache_state,
                count,
            })
            .collect();
        resources.sort();
        XdsClientMetrics { servers, resources }
    }

    /// The CSDS `GenericXdsConfig` entries of this client, its times given as the time
    /// since the [`Instant`] origin (a simulation's clock). An embedder whose instants
    /// stand for wall-clock times uses [`csds_configs_at`](Self::csds_configs_at).
    pub fn csds_configs(
        &self,
    ) -> Vec<crate::pb::envoy::service::status::v3::client_config::GenericXdsConfig> {
        self.csds_configs_at(|at| {
            let d = at.since_origin();
            Timestamp {
                seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
            }
        })
    }

    /// The CSDS `GenericXdsConfig` entries of this client, each time (`last_updated`,
    /// `error_state.last_update_attempt`) mapped by `timestamp`: the core keeps no
    /// clock, so only the embedder knows which wall-clock time an [`Instant`] is.
    pub fn csds_configs_at(
        &self,
        timestamp: impl Fn(Instant) -> Timestamp,
    ) -> Vec<crate::pb::envoy::service::status::v3::client_config::GenericXdsConfig> {
        use crate::pb::envoy::admin::v3::{ClientResourceStatus, UpdateFailureState};
        use crate::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
        use crate::pb::google::protobuf::Any;
        self.resource_snapshot()
            .into_iter()
            .map(|r| GenericXdsConfig {
                type_url: r.type_url.to_string(),
                name: r.name.to_string(),
                version_info: r.version.to_string(),
                xds_config: r.raw.map(|value| Any {
                    type_url: r.type_url.to_string(),
                    value,
                }),
                last_updated: r.last_updated.map(&timestamp),
                config_status: 0,
                client_status: match r.status {
                    ResourceStatusKind::Requested => ClientResourceStatus::Requested,
                    ResourceStatusKind::DoesNotExist => ClientResourceStatus::DoesNotExist,
                    ResourceStatusKind::Acked => ClientResourceStatus::Acked,
                    ResourceStatusKind::Nacked => ClientResourceStatus::Nacked,
                    ResourceStatusKind::ReceivedError => ClientResourceStatus::ReceivedError,
                    ResourceStatusKind::Timeout => ClientResourceStatus::Timeout,
                } as i32,
                error_state: r.error_state.map(|e| UpdateFailureState {
                    failed_configuration: None,
                    last_update_attempt: Some(timestamp(e.at)),
                    details: e.details,
                    version_info: e.version,
                }),
                is_static_resource: false,
            })
            .collect()
    }
}
