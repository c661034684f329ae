//! The management server's delta streams: per stream and type, the names the client
//! tracks and the version of each resource it has (from what was sent, and from the
//! client's `initial_resource_versions` on a new stream); a flush sends only what
//! differs: changed resources, TP3 errors, and `removed_resources` for names the
//! client has that the snapshot no longer holds. A name the server never had stays
//! unanswered (the client's does-not-exist timer decides), as delta servers do.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use xds_proto_core::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, Resource,
};

use super::{Body, Held, ManagementServer, SimResource, all_required, garbage_any, type_key};

/// One type on one delta stream.
#[derive(Clone, Debug, Default)]
pub(super) struct DeltaStreamType {
    pub(super) subscribed: BTreeSet<String>,
    pub(super) wildcard: bool,
    /// What the client has, by name: the resource version, or a marker for an error or
    /// an invalid resource sent.
    pub(super) known: BTreeMap<String, String>,
    pub(super) ever_requested: bool,
    pub(super) dirty: bool,
    pub(super) last_response: Option<DeltaDiscoveryResponse>,
}

/// One delta stream.
#[derive(Clone, Debug, Default)]
pub(super) struct DeltaStream {
    pub(super) types: BTreeMap<&'static str, DeltaStreamType>,
}

/// The version the server gives a resource: its content's, so that a restarted server
/// never gives different content an old version. A given resource's is a hash of its
/// type URL and bytes (`DefaultHasher::new()` has fixed keys: the same in every run).
fn version_of(resource: &Held) -> String {
    match resource {
        Held::Sim(SimResource::Valid(g)) => format!("g{g}"),
        Held::Sim(SimResource::Invalid) => "invalid".to_string(),
        Held::Sim(SimResource::Error(code)) => format!("error-{}", code.0),
        Held::Given(any) => {
            let mut hasher = DefaultHasher::new();
            (&any.type_url, &any.value[..]).hash(&mut hasher);
            format!("b{:016x}", hasher.finish())
        }
    }
}

impl ManagementServer {
    /// A new delta (`DeltaAggregatedResources`) stream reached the server.
    pub fn open_delta_stream(&mut self, key: u64) {
        self.delta_streams.insert(key, DeltaStream::default());
    }

    /// Whether `key` is a delta stream the server knows.
    pub fn is_delta_stream(&self, key: u64) -> bool {
        self.delta_streams.contains_key(&key)
    }

    /// Takes a delta request: subscription changes and, on a type's first request,
    /// the versions the client holds. Returns true when a
    /// [`flush_delta`](Self::flush_delta) of the stream is due. ACKs and NACKs change
    /// nothing: a NACKed resource is not sent again until it changes.
    pub fn on_delta_request(&mut self, key: u64, request: &DeltaDiscoveryRequest) -> bool {
        if request.type_url.is_empty() {
            return false;
        }
        let t = type_key(&request.type_url);
        self.snapshot.entry(t).or_default();
        let policy = self.policy;
        let Some(stream) = self.delta_streams.get_mut(&key) else {
            return false;
        };
        let st = stream.types.entry(t).or_default();
        if !st.ever_requested {
            st.ever_requested = true;
            // The legacy wildcard: an empty first subscribe (LDS/CDS), by policy.
            if request.resource_names_subscribe.is_empty()
                && policy.empty_is_wildcard
                && all_required(t)
            {
                st.wildcard = true;
                st.dirty = true;
            }
            for (name, version) in &request.initial_resource_versions {
                st.known.insert(name.clone(), version.clone());
            }
        }
        for name in &request.resource_names_unsubscribe {
            if name == "*" {
                st.wildcard = false;
            }
            st.subscribed.remove(name);
            st.known.remove(name);
        }
        for name in &request.resource_names_subscribe {
            if name == "*" {
                st.wildcard = true;
            } else {
                st.subscribed.insert(name.clone());
            }
            // Named in a subscribe: sent again, unless the client said it has it.
            if !request.initial_resource_versions.contains_key(name) {
                st.known.remove(name);
            }
            st.dirty = true;
        }
        st.dirty
    }

    /// Answers every type of the delta stream that has something new, one response
    /// each, in an order shuffled by `pick` (as [`flush`](Self::flush)).
    pub fn flush_delta(
        &mut self,
        key: u64,
        mut pick: impl FnMut(usize) -> usize,
    ) -> Vec<DeltaDiscoveryResponse> {
        let Some(stream) = self.delta_streams.get(&key) else {
            return Vec::new();
        };
        let due = super::shuffled_due(stream.types.iter().map(|(t, st)| (*t, st.dirty)), &mut pick);
        let mut out = Vec::new();
        for t in due {
            let Some(response) = self.build_delta(key, t) else {
                continue;
            };
            self.nonce += 1;
            let response = DeltaDiscoveryResponse {
                nonce: self.nonce.to_string(),
                ..response
            };
            let st = self.delta_stream_type(key, t);
            st.last_response = Some(response.clone());
            self.responses += 1;
            out.push(response);
        }
        out
    }

    fn delta_stream_type(&mut self, key: u64, t: &'static str) -> &mut DeltaStreamType {
        self.delta_streams
            .get_mut(&key)
            .and_then(|s| s.types.get_mut(t))
            .expect("a delta stream type")
    }

    /// What differs between the snapshot and what the client has, or `None`.
    fn build_delta(&mut self, key: u64, t: &'static str) -> Option<DeltaDiscoveryResponse> {
        let snapshot = self.snapshot[t].resources.clone();
        let system_version_info = self.version(t);
        let garbage = self.garbage.remove(t);
        let st = self.delta_stream_type(key, t);
        st.dirty = false;
        let names: BTreeSet<String> = if st.wildcard {
            snapshot
                .keys()
                .chain(st.subscribed.iter())
                .cloned()
                .collect()
        } else {
            st.subscribed.clone()
        };
        let mut response = DeltaDiscoveryResponse {
            system_version_info,
            type_url: t.to_string(),
            ..Default::default()
        };
        for name in names {
            let Some(resource) = snapshot.get(&name) else {
                if st.known.remove(&name).is_some() {
                    response.removed_resources.push(name);
                }
                continue;
            };
            let version = version_of(resource);
            if st.known.get(&name) == Some(&version) {
                continue;
            }
            st.known.insert(name.clone(), version.clone());
            let body = match resource.body(t, &name) {
                Body::Resource(body) => Some(body),
                Body::Nothing => None,
                Body::Error(error) => {
                    response.resource_errors.push(error);
                    None
                }
            };
            if let Some(body) = body {
                response.resources.push(Resource {
                    name,
                    version,
                    resource: Some(body),
                    ..Default::default()
                });
            }
        }
        if garbage {
            response.resources.push(Resource {
                version: "garbage".to_string(),
                resource: Some(garbage_any(t)),
                ..Default::default()
            });
        }
        let empty = response.resources.is_empty()
            && response.removed_resources.is_empty()
            && response.resource_errors.is_empty();
        (!empty).then_some(response)
    }

    /// The last delta response of `type_url` on the stream again: the same message,
    /// or (`fresh_nonce`) the same content with a new nonce.
    pub fn duplicate_delta(
        &mut self,
        key: u64,
        type_url: &str,
        fresh_nonce: bool,
    ) -> Option<DeltaDiscoveryResponse> {
        let t = type_key(type_url);
        let last = self
            .delta_streams
            .get(&key)?
            .types
            .get(t)?
            .last_response
            .clone()?;
        self.responses += 1;
        if !fresh_nonce {
            return Some(last);
        }
        self.nonce += 1;
        Some(DeltaDiscoveryResponse {
            nonce: self.nonce.to_string(),
            ..last
        })
    }

    /// Marks the delta streams that track `t` (or take all of it) as due.
    pub(super) fn bump_delta(&mut self, t: &'static str) {
        for stream in self.delta_streams.values_mut() {
            if let Some(st) = stream.types.get_mut(t)
                && (st.wildcard || !st.subscribed.is_empty())
            {
                st.dirty = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use xds_proto_core::Code;

    use super::*;
    use crate::peer::CDS;

    fn request(
        subscribe: &[&str],
        unsubscribe: &[&str],
        initial: &[(&str, &str)],
    ) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: CDS.to_string(),
            resource_names_subscribe: subscribe.iter().map(|s| s.to_string()).collect(),
            resource_names_unsubscribe: unsubscribe.iter().map(|s| s.to_string()).collect(),
            initial_resource_versions: initial
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn sends_only_what_the_client_lacks_and_removes_what_is_gone() {
        let first = |_: usize| 0;
        let mut s = ManagementServer::new("x", Default::default());
        s.set(CDS, "c1", SimResource::Valid(1));
        s.set(CDS, "c2", SimResource::Valid(1));
        s.open_delta_stream(1);
        assert!(s.on_delta_request(1, &request(&["c1", "c2", "c3"], &[], &[("c1", "g1")])));
        let out = s.flush_delta(1, first);
        // c1 is known at its version; c3 does not exist: silence.
        assert_eq!(out.len(), 1);
        let names: Vec<&str> = out[0].resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["c2"]);
        assert_eq!(out[0].resources[0].version, "g1");
        // An ACK asks for nothing.
        assert!(!s.on_delta_request(
            1,
            &DeltaDiscoveryRequest {
                response_nonce: out[0].nonce.clone(),
                ..request(&[], &[], &[])
            }
        ));
        // One change: one resource on the wire; a removal; an error.
        s.set(CDS, "c1", SimResource::Valid(2));
        s.remove(CDS, "c2");
        s.set(CDS, "c3", SimResource::Error(Code::PERMISSION_DENIED));
        let out = s.flush_delta(1, first);
        assert_eq!(out[0].resources.len(), 1);
        assert_eq!(out[0].resources[0].version, "g2");
        assert_eq!(out[0].removed_resources, ["c2"]);
        assert_eq!(out[0].resource_errors.len(), 1);
        // Nothing new: nothing sent.
        s.set(CDS, "c1", SimResource::Valid(2));
        assert!(s.flush_delta(1, first).is_empty());
        // Unsubscribed names are forgotten; a resubscribe gets the resource again.
        s.on_delta_request(1, &request(&[], &["c1"], &[]));
        s.on_delta_request(1, &request(&["c1"], &[], &[]));
        let out = s.flush_delta(1, first);
        assert_eq!(out[0].resources[0].name, "c1");
        assert!(s.is_delta_stream(1) && !s.is_delta_stream(2));
    }
}
