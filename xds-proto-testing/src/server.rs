//! A sans-IO xDS management server, the one the simulator runs. It never does I/O: the
//! embedder opens and closes its streams, feeds it the requests a stream carries and
//! delivers the responses it returns. It holds a versioned SotW snapshot per type of
//! [`SimResource`]s (built with [`crate::resources`]) and, per ADS stream, what the
//! client subscribed to, the version and nonce it last sent; it answers the way a real
//! control plane does:
//! - each type gets the subscribed resources that exist (every one of them: LDS and
//!   CDS responses are complete), TP3 `resource_errors` for names in error, and the
//!   invalid resources it has been told to serve;
//! - a burst of requests gets one response per type ([`ManagementServer::flush`] runs
//!   after the burst), and a type is answered only when its subscription changed or
//!   the snapshot moved past the version last sent on that stream, so a NACK of the
//!   current version gets no reply;
//! - by policy, requests with a stale nonce are ignored, an empty LDS/CDS name list is
//!   a legacy wildcard, and resources come wrapped in `Resource`.
//!
//! Delta streams (`open_delta_stream`, `on_delta_request`, `flush_delta`) answer from
//! the same snapshot, sending only what each client lacks (see the `delta` module).
//!
//! Faults are methods: [`ManagementServer::restart`] forgets every stream and restarts
//! the nonce counter; [`ManagementServer::inject_garbage`] adds an undecodable
//! resource to the next response of a type; [`ManagementServer::duplicate`] resends a
//! type's last response, with its nonce or a fresh one.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use xds_proto_core::Code;
use xds_proto_core::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::type_url::{
    CLUSTER as CDS, CLUSTER_LOAD_ASSIGNMENT as EDS, LISTENER as LDS, ROUTE_CONFIGURATION as RDS,
};

use crate::resources::{self, resource_error, wrap_resource};

mod delta;

/// The types the server serves, in a fixed order.
pub const SIM_TYPES: [&str; 4] = [LDS, RDS, CDS, EDS];

/// Whether a SotW response of this type must list every subscribed resource.
pub fn all_required(type_url: &str) -> bool {
    type_url == LDS || type_url == CDS
}

/// What a server holds under one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimResource {
    /// A valid resource; the generation makes each update's content distinct.
    Valid(u32),
    /// A resource that fails the client's validation (LDS and CDS only).
    Invalid,
    /// A TP3 `resource_errors` entry with this code instead of the resource.
    Error(Code),
}

/// The valid resource of `type_url` named `name` in generation `generation`.
pub fn valid_any(type_url: &str, name: &str, generation: u32) -> Any {
    match type_url {
        LDS => resources::listener(name, &format!("route-{generation}")),
        RDS => resources::route_config(name, &format!("cluster-{generation}")),
        CDS => resources::cluster_with(name, 100 + generation),
        EDS => resources::endpoints(name, &[10_000 + generation]),
        other => panic!("the server does not serve {other}"),
    }
}

/// A resource named `name` that fails validation, for the types that have one.
pub fn invalid_any(type_url: &str, name: &str) -> Option<Any> {
    match type_url {
        LDS => Some(resources::invalid_listener(name)),
        CDS => Some(resources::invalid_cluster(name)),
        _ => None,
    }
}

/// An `Any` of `type_url` whose bytes do not decode (a truncated field 1).
pub fn garbage_any(type_url: &str) -> Any {
    Any {
        type_url: type_url.to_string(),
        value: Bytes::from_static(&[0x0a, 0xff, 0x01]),
    }
}

/// How a server answers, drawn per server from the seed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerPolicy {
    /// Ignore a request whose nonce is not the last one sent for its type.
    pub ignore_stale_nonce: bool,
    /// Treat an empty LDS/CDS name list as the legacy wildcard (send everything).
    pub empty_is_wildcard: bool,
    /// Wrap each resource in `envoy.service.discovery.v3.Resource`.
    pub wrap_resources: bool,
}

#[derive(Clone, Debug, Default)]
struct TypeSnapshot {
    version: u64,
    resources: BTreeMap<String, SimResource>,
}

#[derive(Clone, Debug, Default)]
struct StreamType {
    subscribed: BTreeSet<String>,
    wildcard: bool,
    sent_version: Option<String>,
    last_nonce: String,
    dirty: bool,
    last_response: Option<DiscoveryResponse>,
}

#[derive(Clone, Debug, Default)]
struct ServerStream {
    types: BTreeMap<&'static str, StreamType>,
}

/// One management server.
#[derive(Clone, Debug)]
pub struct ManagementServer {
    /// The URI clients reach it by.
    pub uri: String,
    /// How it answers.
    pub policy: ServerPolicy,
    up: bool,
    epoch: u32,
    nonce: u64,
    snapshot: BTreeMap<&'static str, TypeSnapshot>,
    streams: BTreeMap<u64, ServerStream>,
    delta_streams: BTreeMap<u64, delta::DeltaStream>,
    garbage: BTreeSet<&'static str>,
    responses: u64,
}

fn canonical(type_url: &str) -> Option<&'static str> {
    SIM_TYPES.iter().copied().find(|t| *t == type_url)
}

impl ManagementServer {
    /// A running server with an empty snapshot.
    pub fn new(uri: impl Into<String>, policy: ServerPolicy) -> ManagementServer {
        ManagementServer {
            uri: uri.into(),
            policy,
            up: true,
            epoch: 1,
            nonce: 0,
            snapshot: SIM_TYPES
                .iter()
                .map(|t| (*t, TypeSnapshot::default()))
                .collect(),
            streams: BTreeMap::new(),
            delta_streams: BTreeMap::new(),
            garbage: BTreeSet::new(),
            responses: 0,
        }
    }

    /// Whether it accepts connections.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// The version string of a type's snapshot. It carries the restart epoch, so a
    /// restarted server never reuses a version for different content.
    pub fn version(&self, type_url: &str) -> String {
        let v = self.snapshot.get(type_url).map_or(0, |s| s.version);
        format!("{}.{v}", self.epoch)
    }

    /// What it holds under `name`.
    pub fn resource(&self, type_url: &str, name: &str) -> Option<SimResource> {
        self.snapshot.get(type_url)?.resources.get(name).copied()
    }

    /// How many responses it has sent.
    pub fn responses_sent(&self) -> u64 {
        self.responses
    }

    fn bump(&mut self, type_url: &'static str) {
        self.snapshot
            .get_mut(type_url)
            .expect("served type")
            .version += 1;
        for stream in self.streams.values_mut() {
            if let Some(st) = stream.types.get_mut(type_url)
                && st.sent_version.is_some()
                && (st.wildcard || !st.subscribed.is_empty())
            {
                st.dirty = true;
            }
        }
        self.bump_delta(type_url);
    }

    /// Sets `name` to `resource` and moves the type's version on.
    pub fn set(&mut self, type_url: &str, name: &str, resource: SimResource) {
        let t = canonical(type_url).expect("served type");
        self.snapshot
            .get_mut(t)
            .expect("served type")
            .resources
            .insert(name.to_string(), resource);
        self.bump(t);
    }

    /// Deletes `name` and moves the type's version on.
    pub fn remove(&mut self, type_url: &str, name: &str) {
        let t = canonical(type_url).expect("served type");
        self.snapshot
            .get_mut(t)
            .expect("served type")
            .resources
            .remove(name);
        self.bump(t);
    }

    /// The next response of `type_url` on every stream carries one undecodable resource.
    pub fn inject_garbage(&mut self, type_url: &str) {
        let t = canonical(type_url).expect("served type");
        self.garbage.insert(t);
        self.bump(t);
    }

    /// Drops the undecodable resources still waiting to go out (the faults stop).
    pub fn clear_garbage(&mut self) {
        self.garbage.clear();
    }

    /// A new ADS stream reached the server.
    pub fn open_stream(&mut self, key: u64) {
        self.streams.insert(key, ServerStream::default());
    }

    /// A stream ended.
    pub fn close_stream(&mut self, key: u64) {
        self.streams.remove(&key);
        self.delta_streams.remove(&key);
    }

    /// Whether the server knows this stream (it forgets them all on restart).
    pub fn has_stream(&self, key: u64) -> bool {
        self.streams.contains_key(&key) || self.delta_streams.contains_key(&key)
    }

    /// The server crashes: every stream and nonce is forgotten and it stops accepting
    /// connections until [`start`](Self::start).
    pub fn restart(&mut self) {
        self.streams.clear();
        self.delta_streams.clear();
        self.nonce = 0;
        self.epoch += 1;
        self.up = false;
    }

    /// The server accepts connections again.
    pub fn start(&mut self) {
        self.up = true;
    }

    /// Takes a request. Returns true when a [`flush`](Self::flush) of the stream is due.
    pub fn on_request(&mut self, key: u64, request: &DiscoveryRequest) -> bool {
        let Some(t) = canonical(&request.type_url) else {
            return false;
        };
        let policy = self.policy;
        let version = self.version(t);
        let Some(stream) = self.streams.get_mut(&key) else {
            return false;
        };
        let st = stream.types.entry(t).or_default();
        if policy.ignore_stale_nonce
            && !request.response_nonce.is_empty()
            && request.response_nonce != st.last_nonce
        {
            return false;
        }
        let names: BTreeSet<String> = request.resource_names.iter().cloned().collect();
        let wildcard = names.is_empty() && policy.empty_is_wildcard && all_required(t);
        let changed =
            names != st.subscribed || wildcard != st.wildcard || st.sent_version.is_none();
        st.subscribed = names;
        st.wildcard = wildcard;
        let wanted = st.wildcard || !st.subscribed.is_empty();
        if wanted && (changed || st.sent_version.as_deref() != Some(version.as_str())) {
            st.dirty = true;
        }
        if !wanted {
            st.dirty = false;
        }
        st.dirty
    }

    /// Answers every type of the stream that is due, one response each, in an order
    /// shuffled by `pick` (responses of different types may be reordered): `pick(n)`
    /// returns an index below `n`, e.g. drawn from a seeded random stream.
    pub fn flush(
        &mut self,
        key: u64,
        mut pick: impl FnMut(usize) -> usize,
    ) -> Vec<DiscoveryResponse> {
        let Some(stream) = self.streams.get(&key) else {
            return Vec::new();
        };
        let due = shuffled_due(stream.types.iter().map(|(t, st)| (*t, st.dirty)), &mut pick);
        let mut out = Vec::new();
        for t in due {
            let response = self.build(key, t);
            self.nonce += 1;
            let nonce = self.nonce.to_string();
            let response = DiscoveryResponse {
                nonce: nonce.clone(),
                ..response
            };
            let st = self
                .streams
                .get_mut(&key)
                .expect("stream")
                .types
                .get_mut(t)
                .expect("type");
            st.dirty = false;
            st.sent_version = Some(response.version_info.clone());
            st.last_nonce = nonce;
            st.last_response = Some(response.clone());
            self.responses += 1;
            out.push(response);
        }
        out
    }

    fn build(&mut self, key: u64, t: &'static str) -> DiscoveryResponse {
        let st = &self.streams[&key].types[t];
        let snapshot = &self.snapshot[t];
        let names: Vec<String> = if st.wildcard {
            snapshot.resources.keys().cloned().collect()
        } else {
            st.subscribed.iter().cloned().collect()
        };
        let mut resources = Vec::new();
        let mut resource_errors = Vec::new();
        for name in names {
            match snapshot.resources.get(&name) {
                Some(SimResource::Valid(g)) => {
                    let any = valid_any(t, &name, *g);
                    resources.push(if self.policy.wrap_resources {
                        wrap_resource(&name, any)
                    } else {
                        any
                    });
                }
                Some(SimResource::Invalid) => resources.extend(invalid_any(t, &name)),
                Some(SimResource::Error(code)) => {
                    resource_errors.push(resource_error(&name, *code, "simulated server error"))
                }
                None => {}
            }
        }
        if self.garbage.remove(t) {
            resources.push(garbage_any(t));
        }
        DiscoveryResponse {
            version_info: self.version(t),
            resources,
            type_url: t.to_string(),
            resource_errors,
            ..Default::default()
        }
    }

    /// The last response of `type_url` on the stream again: the very same message, or
    /// (`fresh_nonce`) the same content with a new nonce, which the stream then expects.
    pub fn duplicate(
        &mut self,
        key: u64,
        type_url: &str,
        fresh_nonce: bool,
    ) -> Option<DiscoveryResponse> {
        let t = canonical(type_url)?;
        let last = self
            .streams
            .get(&key)?
            .types
            .get(t)?
            .last_response
            .clone()?;
        if !fresh_nonce {
            self.responses += 1;
            return Some(last);
        }
        self.nonce += 1;
        let nonce = self.nonce.to_string();
        let st = self.streams.get_mut(&key)?.types.get_mut(t)?;
        st.last_nonce = nonce.clone();
        let again = DiscoveryResponse { nonce, ..last };
        st.last_response = Some(again.clone());
        self.responses += 1;
        Some(again)
    }

    /// The types the stream has asked for, for fault injection.
    pub fn stream_types(&self, key: u64) -> Vec<&'static str> {
        match self.delta_streams.get(&key) {
            Some(s) => s.types.keys().copied().collect(),
            None => self
                .streams
                .get(&key)
                .map(|s| s.types.keys().copied().collect())
                .unwrap_or_default(),
        }
    }
}

/// The types marked dirty, in an order shuffled by `pick` (Fisher-Yates: `pick(n)`
/// returns an index below `n`): the order a stream's due responses go out in.
pub(crate) fn shuffled_due(
    types: impl Iterator<Item = (&'static str, bool)>,
    pick: &mut impl FnMut(usize) -> usize,
) -> Vec<&'static str> {
    let mut due: Vec<&'static str> = types.filter(|(_, dirty)| *dirty).map(|(t, _)| t).collect();
    for i in (1..due.len()).rev() {
        due.swap(i, pick(i + 1));
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(type_url: &str, names: &[&str], version: &str, nonce: &str) -> DiscoveryRequest {
        DiscoveryRequest {
            type_url: type_url.to_string(),
            resource_names: names.iter().map(|s| s.to_string()).collect(),
            version_info: version.to_string(),
            response_nonce: nonce.to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn answers_changes_once_per_burst_and_not_a_nack_of_the_same_version() {
        // Responses of one type are never reordered: any shuffle will do.
        let first = |_: usize| 0;
        let mut s = ManagementServer::new("x", ServerPolicy::default());
        s.set(CDS, "c1", SimResource::Valid(1));
        s.open_stream(7);
        assert!(s.on_request(7, &request(CDS, &["c1"], "", "")));
        assert!(s.on_request(7, &request(CDS, &["c1", "c2"], "", "")));
        let out = s.flush(7, first);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].resources.len(), 1);
        assert_eq!(out[0].version_info, "1.1");
        // An ACK or NACK of the current version is not answered.
        assert!(!s.on_request(7, &request(CDS, &["c1", "c2"], "", &out[0].nonce)));
        // A snapshot change is.
        s.set(CDS, "c2", SimResource::Error(Code::NOT_FOUND));
        let out = s.flush(7, first);
        assert_eq!((out.len(), out[0].resource_errors.len()), (1, 1));
        // A restart forgets the stream and the nonces.
        s.restart();
        assert!(!s.has_stream(7) && !s.is_up());
        s.start();
        s.open_stream(8);
        assert!(s.on_request(8, &request(CDS, &["c1"], "1.2", "")));
        assert_eq!(s.flush(8, first)[0].nonce, "1");
    }
}
