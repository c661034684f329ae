//! Delta (incremental) xDS on a server whose `api_type` asks for it: building each
//! `DeltaDiscoveryRequest` from the subscription changes, the pending ACK or NACK and,
//! on a new stream, the versions of the cached resources; and applying a
//! `DeltaDiscoveryResponse`. Everything else (subscriptions, cache, timers, A57, A71,
//! A88/TP3, CSDS) is shared with state of the world.
//!
//! The rules: a type's first request on a stream is never an empty subscribe (that
//! would be a wildcard); changes made while a request is outstanding merge into the
//! next one; a response is (N)ACKed by its nonce and a request that is neither carries
//! none; each resource keeps its own version; `removed_resources` is a data error
//! (A88): a cached resource keeps its value with an ambient NOT_FOUND (dropped under
//! `fail_on_data_errors`), an uncached one does not exist at once.

use std::sync::Arc;

use bytes::Bytes;

use super::cache::{ResourceEntry, ResourceTable};
use super::envelope::{self, DeltaResource, decode_enveloped};
use super::response::{Decoded, ResponseContext, canonical_name};
use super::server::{InFlight, PendingAck, ServerState};
use super::wildcard::WILDCARD;
use super::{Code, DeltaRequest, StreamId, TypeIdx, XdsClient};
use crate::pb::envoy::config::core::v3::Node;
use crate::resource::{self, ResourceTypeInfo, ResourceValue};
use crate::time::Instant;

impl ServerState {
    /// The next delta request of the open stream, unless one is in flight or none is
    /// due: a type with nothing to subscribe, unsubscribe or (N)ACK sends nothing.
    /// A type's first request on the stream tells the versions `held` gives for the
    /// names it subscribes, read as it is built (a value may change before).
    pub(super) fn next_delta_request(
        &mut self,
        node: &Node,
        types: &[ResourceTypeInfo],
        on_hold: &[bool],
        held: impl FnOnce(TypeIdx, &[Arc<str>]) -> Vec<(Arc<str>, Arc<str>)>,
    ) -> Option<(StreamId, DeltaRequest)> {
        let stream = self.stream.as_mut()?;
        if stream.in_flight.is_some() {
            return None;
        }
        let t = loop {
            let t = stream.take_dirty(on_hold)?;
            let ts = &mut stream.types[t];
            ts.dirty = false;
            // A type's first request names what it subscribes: an empty one would be
            // a wildcard subscription (LDS/CDS).
            let due = if ts.ever_sent {
                !ts.new_names.is_empty() || !ts.unsubscribe.is_empty() || !ts.delta_acks.is_empty()
            } else {
                !ts.new_names.is_empty()
            };
            if due {
                break t;
            }
            ts.unsubscribe.clear();
            ts.resubscribed.clear();
        };
        let ts = &mut stream.types[t];
        let initial_resource_versions = if ts.ever_sent {
            Vec::new()
        } else {
            ts.new_names.sort_unstable();
            held(t, &ts.new_names)
        };
        ts.ever_sent = true;
        let mut subscribe = std::mem::take(&mut ts.new_names);
        subscribe.sort_unstable();
        ts.resubscribed.clear();
        let mut unsubscribe = std::mem::take(&mut ts.unsubscribe);
        unsubscribe.sort_unstable();
        // One response answered per request, oldest first; the rest keep the type due.
        let (response_nonce, error_detail) = match ts.delta_acks.pop_front() {
            Some(PendingAck { nonce, nack }) => {
                let detail = nack.map(|message| crate::pb::google::rpc::Status {
                    code: Code::INVALID_ARGUMENT.0,
                    message,
                    details: Vec::new(),
                });
                (nonce, detail)
            }
            None => (String::new(), None),
        };
        let more_due = !ts.delta_acks.is_empty();
        let request = DeltaRequest {
            node: (!stream.sent_node).then(|| node.clone()),
            type_url: types[t].type_url(),
            resource_names_subscribe: subscribe.clone(),
            resource_names_unsubscribe: unsubscribe,
            initial_resource_versions,
            response_nonce,
            error_detail,
        };
        stream.sent_node = true;
        if more_due {
            stream.mark_dirty(t);
        }
        stream.in_flight = Some(InFlight {
            type_idx: t,
            names: subscribe,
        });
        Some((stream.id, request))
    }
}

impl XdsClient {
    /// The versions of the resources among `names` (of type `t`) that the client
    /// holds from `server` and that it has not deleted: a new delta stream's
    /// `initial_resource_versions`, so that the server can skip what the client has.
    /// When `names` (sorted) subscribe the wildcard, so are the resources held for it
    /// alone, sorted by name after the named ones.
    pub(super) fn held_versions(
        resources: &[ResourceTable],
        server: usize,
        t: TypeIdx,
        names: &[Arc<str>],
    ) -> Vec<(Arc<str>, Arc<str>)> {
        let table = &resources[t];
        let version =
            |entry: &ResourceEntry| Some((entry.name.clone(), entry.version_from(server)?.clone()));
        let mut held: Vec<_> = names
            .iter()
            .filter_map(|n| version(table.get(n)?))
            .collect();
        if names.binary_search_by(|n| (**n).cmp(WILDCARD)).is_ok() {
            let named = held.len();
            held.extend(
                table
                    .values()
                    .filter(|e| !e.rare().wildcard_watchers.is_empty())
                    .filter(|e| names.binary_search(&e.name).is_err())
                    .filter_map(version),
            );
            held[named..].sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        held
    }

    /// A message arrived on `server`'s delta stream.
    pub(super) fn on_delta_response(
        &mut self,
        server: usize,
        stream_id: StreamId,
        bytes: Bytes,
        now: Instant,
    ) {
        let response = match envelope::decode_delta(bytes) {
            Ok(r) => r,
            Err(e) => {
                return self.undecodable(server, stream_id, "DeltaDiscoveryResponse", &e, now);
            }
        };
        tracing::debug!(
            server = %self.servers[server].config.server_uri,
            stream = %stream_id,
            type_url = %response.type_url,
            version = %response.system_version_info,
            nonce = %response.nonce,
            resources = response.resources.len(),
            removed = response.removed_resources.len() + response.removed_resource_names.len(),
            resource_errors = response.resource_errors.len(),
            "delta response received"
        );
        let Some(t) = self.accept_response(server, &response.type_url, &response.nonce, now) else {
            return;
        };
        let outcome = self.apply_delta_response(server, t, response, now);
        self.servers[server].record_outcome(t, outcome);
        self.pump(server);
    }

    /// Validates and applies one delta response: the resources (each with its own
    /// version), the TP3 errors, then the removals. Returns the system version to
    /// ACK, or the NACK's error detail listing every rejected resource.
    fn apply_delta_response(
        &mut self,
        server: usize,
        t: TypeIdx,
        response: envelope::DeltaDiscoveryResponse,
        now: Instant,
    ) -> Result<String, String> {
        let cx = self.response_context(server, t, response.system_version_info, now);
        let count = response.resources.len() as u64;
        let mut decoded = self.decode_delta_items(&cx, response.resources);
        let removed_names = response
            .removed_resources
            .into_iter()
            .chain(response.removed_resource_names.into_iter().map(|r| r.name));
        let removed = self.check_removals(&cx, removed_names, &mut decoded);
        let server_errors = self.check_resource_errors(&cx, response.resource_errors, &mut decoded);
        self.adopt_for_wildcard(&cx, &mut decoded);
        self.apply_items(&cx, &mut decoded);
        self.apply_server_errors(&cx, &server_errors);
        let table = &mut self.resources[t];
        for name in removed {
            let Some(entry) = table.get_mut(&name) else {
                continue;
            };
            let authority = &self.authorities[entry.authority];
            if authority.active() != Some(server) || server_errors.iter().any(|(n, _)| *n == name) {
                continue; // served by another server (A71), or the TP3 error decides
            }
            entry.disarm_timers(&mut self.timers, None);
            entry.delete(
                &mut self.actions,
                cx.type_url,
                (&cx.config, &cx.node),
                &cx.version_info,
                now,
            );
        }
        cx.outcome(&decoded, count, server_errors.len())
    }

    /// Decodes the delta resources into items with their versions, and counts them
    /// for A78.
    fn decode_delta_items(
        &mut self,
        cx: &ResponseContext,
        resources: Vec<DeltaResource>,
    ) -> Decoded {
        let ty = self.types[cx.t];
        let count = resources.len() as u64;
        let mut decoded = Decoded::default();
        let context = resource::DecodeContext::new(&self.config.bootstrap)
            .with_lb_policies(&self.config.lb_policies);
        let table = &mut self.resources[cx.t];
        for (i, r) in resources.into_iter().enumerate() {
            let version: Arc<str> = Arc::from(r.version.as_str());
            let before = decoded.items.len();
            let result = decode_delta_resource(&ty, &context, r);
            decoded.note(table, i, result, cx.stamp);
            if decoded.items.len() > before {
                decoded.versions.push(version);
            }
        }
        // A name seen twice marks the first item invalid and adds none: the versions
        // stay aligned with the items.
        debug_assert_eq!(decoded.items.len(), decoded.versions.len());
        let sts = &mut self.servers[cx.server].types[cx.t];
        sts.updates_valid += decoded.valid;
        sts.updates_invalid += count - decoded.valid;
        decoded
    }

    /// The watched names a delta response removes (canonical, shared with the cache).
    /// A name both removed and sent in the same response is a NACK reason.
    fn check_removals(
        &self,
        cx: &ResponseContext,
        names: impl Iterator<Item = String>,
        decoded: &mut Decoded,
    ) -> Vec<Arc<str>> {
        let table = &self.resources[cx.t];
        let mut removed = Vec::new();
        for (j, name) in names.enumerate() {
            let name = canonical_name(name);
            if decoded.item_of(table, &name, cx.stamp).is_some() {
                decoded.errors.push(format!(
                    "removed_resources[{j}]: {name}: resource is also present in resources"
                ));
                continue;
            }
            if let Some(shared) = table.shared_name(&name) {
                removed.push(shared.clone());
            }
        }
        removed
    }
}

/// Decodes one delta `Resource`: named by its `name` (or else `resource_name`) as a
/// SotW `Resource` wrapper is, by the same rule ([`decode_enveloped`]).
fn decode_delta_resource(
    ty: &ResourceTypeInfo,
    context: &resource::DecodeContext<'_>,
    r: DeltaResource,
) -> Result<(String, ResourceValue, Bytes), resource::DecodeError> {
    let name = match r.name.is_empty() {
        false => r.name,
        true => r.resource_name.map(|n| n.name).unwrap_or_default(),
    };
    decode_enveloped(ty, context, name, r.resource)
}
