//! The checker's view of a delta stream: a `DeltaDiscoveryRequest` is held to the
//! delta rules (never an empty first subscribe, an ACK or NACK once per response by
//! its nonce, unsubscribes only of tracked names, initial_resource_versions only for
//! resources the client holds at that version) and then to the SotW rules as the
//! subscription it leaves the server tracking; a `DeltaDiscoveryResponse` is judged
//! as the SotW response of the same resources (each named by its `Resource`), with
//! its removed names beside.

use std::collections::BTreeSet;

use bytes::Bytes;
use prost::Message;
use xds_proto_core::Instant;
use xds_proto_core::client::StreamId;
use xds_proto_core::names;
use xds_proto_core::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::type_url;

use super::{CheckedClient, StreamTypeModel, Violation, short, violation};

/// A delta response as the SotW response a client must judge the same way, and the
/// names it removes (canonical). `None` when the bytes are no delta response.
pub(super) fn decode_as_sotw(bytes: &Bytes) -> Option<(DiscoveryResponse, BTreeSet<String>)> {
    let delta = DeltaDiscoveryResponse::decode(bytes.clone()).ok()?;
    let resources = delta
        .resources
        .into_iter()
        .map(|r| {
            let name = if r.name.is_empty() {
                r.resource_name.map(|n| n.name).unwrap_or_default()
            } else {
                r.name
            };
            // Named as a SotW wrapper is: the Resource's name wins over the payload's.
            let wrapper = Resource {
                name,
                resource: r.resource,
                ..Default::default()
            };
            Any {
                type_url: type_url::RESOURCE_WRAPPER.to_string(),
                value: wrapper.encode_to_vec().into(),
            }
        })
        .collect();
    let removed = delta
        .removed_resources
        .into_iter()
        .chain(delta.removed_resource_names.into_iter().map(|n| n.name))
        .map(|n| canonical(&n))
        .collect();
    let sotw = DiscoveryResponse {
        version_info: delta.system_version_info,
        resources,
        type_url: delta.type_url,
        nonce: delta.nonce,
        resource_errors: delta.resource_errors,
        ..Default::default()
    };
    Some((sotw, removed))
}

fn canonical(name: &str) -> String {
    match names::canonicalize(name) {
        Ok(c) => c.into_owned(),
        Err(_) => name.to_string(),
    }
}

impl CheckedClient {
    /// A delta request the client emitted on `stream`: checked by the delta rules, then
    /// as the SotW request it amounts to (the tracked names, the accepted version).
    pub(super) fn on_send_delta(
        &mut self,
        now: Instant,
        stream: StreamId,
        req: &DeltaDiscoveryRequest,
    ) -> Result<(), Violation> {
        let Some(s) = self.streams.get(&stream).filter(|s| s.alive) else {
            return Err(violation(
                "request-on-live-stream",
                now,
                format!("delta request on {stream:?}, not open"),
            ));
        };
        let server = s.server;
        let st = s.types.get(&req.type_url).cloned().unwrap_or_default();
        let answering = check_delta_changes(now, stream, req, &st)?;
        self.check_initial_versions(now, st.requested, req)?;
        let mut tracked = st.tracked.clone();
        for n in &req.resource_names_unsubscribe {
            tracked.remove(n);
        }
        tracked.extend(req.resource_names_subscribe.iter().cloned());
        let accepted = self.servers[&server]
            .accepted
            .get(&req.type_url)
            .cloned()
            .unwrap_or_default();
        let as_sotw = DiscoveryRequest {
            version_info: accepted,
            node: req.node.clone(),
            resource_names: tracked.iter().cloned().collect(),
            type_url: req.type_url.clone(),
            response_nonce: st.nonce.clone(),
            error_detail: req.error_detail.clone(),
            ..Default::default()
        };
        // The SotW rules judge the NACK against the response this request answers.
        if let Some(st) = self
            .streams
            .get_mut(&stream)
            .and_then(|s| s.types.get_mut(&req.type_url))
        {
            st.pending_nack = answering.as_ref().is_some_and(|(_, nack)| *nack);
        }
        self.on_send(now, stream, &as_sotw)?;
        let st = self
            .streams
            .get_mut(&stream)
            .and_then(|s| s.types.get_mut(&req.type_url))
            .expect("on_send recorded the type");
        st.tracked = tracked;
        if answering.is_some() {
            st.acks_due.pop_front();
        }
        Ok(())
    }

    /// No resource is lost across a reconnect: `initial_resource_versions` goes on a
    /// type's first request of a stream only, for names it subscribes, and claims only
    /// values the client holds, at the version it holds them (a server that believes
    /// the claim never sends the resource again).
    fn check_initial_versions(
        &self,
        now: Instant,
        requested: bool,
        req: &DeltaDiscoveryRequest,
    ) -> Result<(), Violation> {
        if req.initial_resource_versions.is_empty() {
            return Ok(());
        }
        let ty = short(&req.type_url);
        if requested {
            return Err(violation(
                "initial-versions-on-first-request",
                now,
                format!("{ty} initial_resource_versions after the type's first request"),
            ));
        }
        let snapshot = self.client.resource_snapshot();
        for (name, version) in &req.initial_resource_versions {
            let held = snapshot
                .iter()
                .find(|r| r.type_url == req.type_url && *r.name == **name);
            let ok = req.resource_names_subscribe.contains(name)
                && held.is_some_and(|r| r.value.is_some() && *r.version == **version);
            if !ok {
                return Err(violation(
                    "no-resource-lost-across-reconnect",
                    now,
                    format!(
                        "{ty} initial_resource_versions claims {name:?} at {version:?}; the \
                         client holds {:?}",
                        held.map(|r| (r.status, r.version.clone(), r.value.is_some()))
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A delta request's own rules, against its type's model `st` on the stream: the first
/// subscribes something (no accidental wildcard); the oldest unanswered response is
/// answered first, each by its own request; a request changes or answers something;
/// its lists are sorted and disjoint, and it unsubscribes only tracked names. Returns
/// the response it answers (nonce, and whether it was rejected), if any.
fn check_delta_changes(
    now: Instant,
    stream: StreamId,
    req: &DeltaDiscoveryRequest,
    st: &StreamTypeModel,
) -> Result<Option<(String, bool)>, Violation> {
    let ty = short(&req.type_url);
    let (sub, unsub) = (
        &req.resource_names_subscribe,
        &req.resource_names_unsubscribe,
    );
    if !st.requested && sub.is_empty() {
        return Err(violation(
            "no-accidental-wildcard",
            now,
            format!("the first {ty} request on {stream:?} subscribes nothing (a wildcard)"),
        ));
    }
    let answering = st.acks_due.front().cloned();
    let expected_nonce = answering.as_ref().map_or("", |(nonce, _)| nonce.as_str());
    if req.response_nonce != expected_nonce {
        return Err(violation(
            "delta-nonce-acks-each-response-once",
            now,
            format!(
                "{ty} delta request on {stream:?} has nonce {:?}; expected {expected_nonce:?}",
                req.response_nonce
            ),
        ));
    }
    if st.requested && answering.is_none() && sub.is_empty() && unsub.is_empty() {
        return Err(violation(
            "delta-request-has-reason",
            now,
            format!("{ty} delta request on {stream:?} changes nothing and answers nothing"),
        ));
    }
    let sorted = |l: &[String]| l.windows(2).all(|p| p[0] < p[1]);
    let subs: BTreeSet<&String> = sub.iter().collect();
    if !sorted(sub) || !sorted(unsub) || unsub.iter().any(|n| subs.contains(n)) {
        return Err(violation(
            "delta-changes-well-formed",
            now,
            format!("{ty} subscribe {sub:?} unsubscribe {unsub:?}: sorted, disjoint"),
        ));
    }
    if let Some(n) = unsub.iter().find(|n| !st.tracked.contains(*n)) {
        return Err(violation(
            "delta-unsubscribe-tracked",
            now,
            format!("{ty} unsubscribes {n:?}, which the server does not track"),
        ));
    }
    Ok(answering)
}
