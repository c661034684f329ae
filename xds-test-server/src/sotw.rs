//! The State-of-the-World side of the loopback server: per type, the names a stream
//! subscribes to and the version it was last sent; every change of either is answered
//! with the whole subscribed set.

use std::collections::{BTreeSet, HashMap};

use prost::Message;
use xds_proto_core::pb::envoy::service::discovery::v3::{
    DiscoveryRequest, DiscoveryResponse, ResourceError,
};
use xds_proto_core::pb::google::protobuf::Any;

use crate::record::{RecordedRequest, RecordedResponse, RequestKind};
use crate::resources::resource_name;
use crate::server::State;
use crate::session::Protocol;

/// What one stream subscribes to and was sent, per type.
#[derive(Default)]
struct StreamType {
    names: BTreeSet<String>,
    last_nonce: String,
    sent_version: Option<String>,
    /// Must be answered.
    dirty: bool,
}

/// A SotW stream's state.
#[derive(Default)]
pub(crate) struct SotwSession {
    types: HashMap<String, StreamType>,
}

impl Protocol for SotwSession {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;

    fn on_request(&mut self, state: &mut State, stream: u64, request: DiscoveryRequest) {
        let kind = RequestKind::of(&request.response_nonce, request.error_detail.is_some());
        state.record_request(RecordedRequest {
            stream,
            kind,
            type_url: request.type_url.clone(),
            version_info: request.version_info.clone(),
            resource_names: request.resource_names.clone(),
            response_nonce: request.response_nonce.clone(),
            error_detail: request.error_detail.as_ref().map(|s| s.message.clone()),
            node_id: request.node.as_ref().map(|n| n.id.clone()),
            delta: None,
        });
        let st = self.types.entry(request.type_url).or_default();
        if kind != RequestKind::Subscribe && request.response_nonce != st.last_nonce {
            return; // a stale nonce: ignored, as go-control-plane does
        }
        let names: BTreeSet<String> = request.resource_names.into_iter().collect();
        if kind == RequestKind::Subscribe || names != st.names {
            st.dirty = true;
        }
        st.names = names;
    }

    fn on_snapshot_change(&mut self, state: &State) {
        for (type_url, st) in &mut self.types {
            if let Some(snapshot) = state.types.get(type_url)
                && st.sent_version.as_deref() != Some(snapshot.version.as_str())
            {
                st.dirty = true;
            }
        }
    }

    fn respond(&mut self, state: &mut State, stream: u64) -> Vec<DiscoveryResponse> {
        let mut responses = Vec::new();
        let mut types: Vec<String> = self.types.keys().cloned().collect();
        types.sort();
        for type_url in types {
            let st = self.types.get_mut(&type_url).expect("present");
            if !st.dirty {
                continue;
            }
            st.dirty = false;
            let Some(snapshot) = state.types.get(&type_url) else {
                continue; // nothing for this type yet: wait for it
            };
            let wanted = |name: &str| st.names.is_empty() || st.names.contains(name);
            let resources: Vec<Any> = snapshot
                .named
                .iter()
                .filter(|(name, _)| wanted(name) && !state.is_withheld(&type_url, name))
                .map(|(_, r)| r.clone())
                .chain(snapshot.unnamed.iter().cloned())
                .collect();
            let resource_errors: Vec<ResourceError> = snapshot
                .errors
                .iter()
                .filter(|e| e.resource_name.as_ref().is_none_or(|n| wanted(&n.name)))
                .cloned()
                .collect();
            let response = DiscoveryResponse {
                version_info: snapshot.version.clone(),
                resources,
                type_url: type_url.clone(),
                nonce: state.next_nonce(),
                resource_errors,
                ..Default::default()
            };
            state.record_response(RecordedResponse {
                stream,
                type_url: type_url.clone(),
                nonce: response.nonce.clone(),
                version: response.version_info.clone(),
                resources: response
                    .resources
                    .iter()
                    .filter_map(resource_name)
                    .collect(),
                removed: Vec::new(),
                bytes: response.encoded_len(),
                delta: false,
            });
            st.sent_version = Some(response.version_info.clone());
            st.last_nonce = response.nonce.clone();
            responses.push(response);
        }
        responses
    }
}
