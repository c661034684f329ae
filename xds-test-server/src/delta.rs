//! The delta (incremental) side of the loopback server: per type, what a stream
//! subscribes to and what the server believes the client has (by resource version);
//! a response carries only the difference, and a stream with nothing to learn gets
//! nothing. [`DeltaQuirks`] makes it deviate as istiod does.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message;
use xds_proto_core::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, Resource, ResourceError,
};
use xds_proto_core::resource::type_url;

use crate::record::{DeltaFields, RecordedRequest, RecordedResponse, RequestKind};
use crate::server::{State, TypeSnapshot};
use crate::session::Protocol;

/// How the server's delta streams deviate from the plain protocol. With none (the
/// default) the server behaves as go-control-plane's snapshot cache: it sends a
/// resource when a stream subscribes to it or its version changes, names in
/// `removed_resources` only resources the client has, stays silent about names it
/// does not have, and answers a request that only unsubscribes with nothing (as
/// istiod does too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaQuirks {
    /// A subscription to a name the server does not have is answered with
    /// `removed_resources` naming it, although the client never had it (istiod).
    pub remove_unknown: bool,
    /// Every CDS request (a subscription change, an ACK or a NACK) makes the server
    /// send every subscribed EDS resource again, changed or not (istiod's full push).
    pub eds_with_every_cds_request: bool,
}

impl DeltaQuirks {
    /// Every quirk: the server behaves as istiod does on delta.
    pub fn istiod() -> DeltaQuirks {
        DeltaQuirks {
            remove_unknown: true,
            eds_with_every_cds_request: true,
        }
    }
}

/// What one delta stream subscribes to and has, per type.
#[derive(Default)]
struct DeltaType {
    /// Subscribed to every resource of the type (`*`, or a first request naming none).
    wildcard: bool,
    names: BTreeSet<String>,
    /// What the client has, as the server believes: the version last sent, or the one
    /// the client named in `initial_resource_versions`.
    known: BTreeMap<String, String>,
    /// Names subscribed since the last response, to be named in `removed_resources`
    /// if the server lacks them ([`DeltaQuirks::remove_unknown`]).
    asked: BTreeSet<String>,
    /// The `resource_errors` last sent.
    errors_sent: Vec<ResourceError>,
    /// The snapshot revision last looked at.
    revision_seen: Option<u64>,
    /// Whether a response was ever sent (a wildcard stream gets a first one, even
    /// empty).
    answered: bool,
    /// Must be looked at.
    dirty: bool,
    /// Send every subscribed resource, changed or not.
    push_all: bool,
}

/// A delta stream's state.
#[derive(Default)]
pub(crate) struct DeltaSession {
    types: BTreeMap<String, DeltaType>,
}

impl Protocol for DeltaSession {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;

    fn on_request(&mut self, state: &mut State, stream: u64, request: DeltaDiscoveryRequest) {
        let kind = RequestKind::of(&request.response_nonce, request.error_detail.is_some());
        state.record_request(RecordedRequest {
            stream,
            kind,
            type_url: request.type_url.clone(),
            version_info: String::new(),
            resource_names: Vec::new(),
            response_nonce: request.response_nonce.clone(),
            error_detail: request.error_detail.as_ref().map(|s| s.message.clone()),
            node_id: request.node.as_ref().map(|n| n.id.clone()),
            delta: Some(DeltaFields {
                subscribe: request.resource_names_subscribe.clone(),
                unsubscribe: request.resource_names_unsubscribe.clone(),
                initial_resource_versions: request
                    .initial_resource_versions
                    .clone()
                    .into_iter()
                    .collect(),
            }),
        });
        let quirks = state.delta_quirks;
        let first = !self.types.contains_key(&request.type_url);
        let st = self.types.entry(request.type_url.clone()).or_default();
        if first {
            st.wildcard = request.resource_names_subscribe.is_empty();
            st.known = request.initial_resource_versions.into_iter().collect();
            st.dirty = true;
        }
        for name in request.resource_names_subscribe {
            if name == "*" {
                st.dirty |= !st.wildcard;
                st.wildcard = true;
            } else if st.names.insert(name.clone()) {
                st.dirty = true;
                if quirks.remove_unknown {
                    st.asked.insert(name);
                }
            }
        }
        for name in &request.resource_names_unsubscribe {
            if name == "*" {
                st.wildcard = false;
            } else {
                st.names.remove(name);
                st.known.remove(name);
                st.asked.remove(name);
            }
        }
        if request.type_url == type_url::CLUSTER
            && quirks.eds_with_every_cds_request
            && let Some(eds) = self.types.get_mut(type_url::CLUSTER_LOAD_ASSIGNMENT)
        {
            eds.push_all = true;
            eds.dirty = true;
        }
    }

    fn on_snapshot_change(&mut self, state: &State) {
        for (type_url, st) in &mut self.types {
            let revision = state.types.get(type_url).map(|s| s.revision);
            if revision != st.revision_seen {
                st.dirty = true;
            }
        }
    }

    fn respond(&mut self, state: &mut State, stream: u64) -> Vec<DeltaDiscoveryResponse> {
        let mut responses = Vec::new();
        for (type_url, st) in &mut self.types {
            if !std::mem::take(&mut st.dirty) {
                continue;
            }
            let empty = TypeSnapshot::default();
            let snapshot = state.types.get(type_url).unwrap_or(&empty);
            st.revision_seen = state.types.get(type_url).map(|s| s.revision);
            let Some(mut response) =
                st.difference(snapshot, |name| state.is_withheld(type_url, name))
            else {
                continue;
            };
            response.type_url = type_url.clone();
            response.nonce = state.next_nonce();
            state.record_response(RecordedResponse {
                stream,
                type_url: type_url.clone(),
                nonce: response.nonce.clone(),
                version: response.system_version_info.clone(),
                resources: response.resources.iter().map(|r| r.name.clone()).collect(),
                removed: response.removed_resources.clone(),
                bytes: response.encoded_len(),
                delta: true,
            });
            responses.push(response);
        }
        responses
    }
}

impl DeltaType {
    /// The response that brings the client from what it has to `snapshot` for what
    /// it subscribes to, if there is anything to send; updates what it has.
    fn difference(
        &mut self,
        snapshot: &TypeSnapshot,
        withheld: impl Fn(&str) -> bool,
    ) -> Option<DeltaDiscoveryResponse> {
        let mut wanted: BTreeSet<String> = self.names.clone();
        if self.wildcard {
            wanted.extend(snapshot.named.keys().cloned());
            // A wildcard client learns of every removal, subscribed by name or not.
            wanted.extend(self.known.keys().cloned());
        }
        let mut resources = Vec::new();
        let mut removed = Vec::new();
        for name in wanted {
            let present = snapshot.named.get(&name).filter(|_| !withheld(&name));
            match (present, snapshot.versions.get(&name)) {
                (Some(any), Some(version)) => {
                    if self.push_all || self.known.get(&name) != Some(version) {
                        self.known.insert(name.clone(), version.clone());
                        resources.push(Resource {
                            name: name.clone(),
                            version: version.clone(),
                            resource: Some(any.clone()),
                            ..Default::default()
                        });
                    }
                }
                _ => {
                    if self.known.remove(&name).is_some() || self.asked.contains(&name) {
                        removed.push(name);
                    }
                }
            }
        }
        self.asked.clear();
        self.push_all = false;
        let errors: Vec<ResourceError> = snapshot
            .errors
            .iter()
            .filter(|e| {
                e.resource_name
                    .as_ref()
                    .is_none_or(|n| self.wildcard || self.names.contains(&n.name))
            })
            .cloned()
            .collect();
        let resource_errors = if errors != self.errors_sent {
            self.errors_sent = errors.clone();
            errors
        } else {
            Vec::new()
        };
        let first_wildcard = self.wildcard && !self.answered;
        if resources.is_empty()
            && removed.is_empty()
            && resource_errors.is_empty()
            && !first_wildcard
        {
            return None;
        }
        self.answered = true;
        Some(DeltaDiscoveryResponse {
            system_version_info: snapshot.version.clone(),
            resources,
            removed_resources: removed,
            resource_errors,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use xds_proto_core::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    use xds_proto_core::resource::type_url::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};

    use xds_proto_core::pb::google::protobuf::Any;

    use super::*;
    use crate::resources::{cluster, cluster_with, endpoints};

    fn subscribe(type_url: &str, names: &[&str], nonce: &str) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: type_url.to_string(),
            resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
            response_nonce: nonce.to_string(),
            ..Default::default()
        }
    }

    fn set(state: &mut State, type_url: &str, version: &str, resources: Vec<Any>) {
        state.set_resources(type_url, version, resources);
    }

    /// (type, resources, removed) of each response.
    fn respond(
        session: &mut DeltaSession,
        state: &mut State,
    ) -> Vec<(String, Vec<String>, Vec<String>)> {
        session.on_snapshot_change(state);
        session
            .respond(state, 1)
            .into_iter()
            .map(|r| {
                let names = r
                    .resources
                    .iter()
                    .map(|r| format!("{}@{}", r.name, r.version))
                    .collect();
                (r.type_url, names, r.removed_resources)
            })
            .collect()
    }

    fn cds(resources: &[&str], removed: &[&str]) -> Vec<(String, Vec<String>, Vec<String>)> {
        vec![(
            CLUSTER.to_string(),
            resources.iter().map(|s| s.to_string()).collect(),
            removed.iter().map(|s| s.to_string()).collect(),
        )]
    }

    #[test]
    fn only_the_difference_is_sent_and_unknown_names_get_silence() {
        let mut state = State::default();
        set(&mut state, CLUSTER, "1", vec![cluster("a"), cluster("b")]);
        let mut session = DeltaSession::default();
        session.on_request(&mut state, 1, subscribe(CLUSTER, &["a", "b", "c"], ""));
        assert_eq!(respond(&mut session, &mut state), cds(&["a@1", "b@1"], &[]));
        session.on_request(&mut state, 1, subscribe(CLUSTER, &[], "nonce-1"));
        assert_eq!(
            respond(&mut session, &mut state),
            vec![],
            "an ACK with nothing new"
        );

        // Version 2 changes b only, and drops a.
        set(&mut state, CLUSTER, "2", vec![cluster_with("b", 9)]);
        assert_eq!(respond(&mut session, &mut state), cds(&["b@2"], &["a"]));

        // Unsubscribing only: no response.
        let mut unsubscribe = subscribe(CLUSTER, &[], "");
        unsubscribe.resource_names_unsubscribe = vec!["b".into()];
        session.on_request(&mut state, 1, unsubscribe);
        assert_eq!(respond(&mut session, &mut state), vec![]);
        assert_eq!(state.requests.len(), 3);
        assert_eq!(
            state.requests[2].delta.as_ref().unwrap().unsubscribe,
            vec!["b"]
        );
    }

    #[test]
    fn initial_resource_versions_spare_what_the_client_has() {
        let mut state = State::default();
        set(&mut state, CLUSTER, "1", vec![cluster("a")]);
        set(&mut state, CLUSTER, "2", vec![cluster("a"), cluster("b")]);
        let mut session = DeltaSession::default();
        let mut request = subscribe(CLUSTER, &["a", "b"], "");
        request.initial_resource_versions = [
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "0".to_string()),
        ]
        .into();
        session.on_request(&mut state, 1, request);
        assert_eq!(
            respond(&mut session, &mut state),
            cds(&["b@2"], &[]),
            "a is unchanged since 1"
        );
    }

    #[test]
    fn istiod_removes_unknown_names_and_pushes_eds_with_every_cds_request() {
        let mut state = State::default();
        state.delta_quirks = DeltaQuirks::istiod();
        set(&mut state, CLUSTER, "1", vec![cluster("a")]);
        set(
            &mut state,
            CLUSTER_LOAD_ASSIGNMENT,
            "1",
            vec![endpoints("a", &[80])],
        );
        let mut session = DeltaSession::default();
        session.on_request(&mut state, 1, subscribe(CLUSTER, &["a", "ghost"], ""));
        assert_eq!(respond(&mut session, &mut state), cds(&["a@1"], &["ghost"]));
        session.on_request(
            &mut state,
            1,
            subscribe(CLUSTER_LOAD_ASSIGNMENT, &["a"], ""),
        );
        assert_eq!(respond(&mut session, &mut state).len(), 1);
        session.on_request(
            &mut state,
            1,
            subscribe(CLUSTER_LOAD_ASSIGNMENT, &[], "nonce-2"),
        );
        assert_eq!(
            respond(&mut session, &mut state),
            vec![],
            "an EDS ACK pushes nothing"
        );
        session.on_request(&mut state, 1, subscribe(CLUSTER, &[], "nonce-1"));
        assert_eq!(
            respond(&mut session, &mut state),
            vec![(
                CLUSTER_LOAD_ASSIGNMENT.to_string(),
                vec!["a@1".to_string()],
                vec![]
            )],
            "a CDS ACK pushes the unchanged endpoints again"
        );
    }
}
