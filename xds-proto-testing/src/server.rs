//! A sans-IO xDS management server, the one the simulator runs. It never does I/O: the
//! embedder opens and closes its streams, feeds it the requests a stream carries and
//! delivers the responses it returns. It holds a versioned SotW snapshot per type URL
//! and, per ADS stream, what the client subscribed to, the version and nonce it last
//! sent; it answers the way a real control plane does:
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
//! What it serves under a name is either a resource it generates from a small
//! description, a [`SimResource`] ([`ManagementServer::set`]), or one you give it, of
//! any type URL ([`ManagementServer::set_any`], [`ManagementServer::set_message`]):
//!
//! | under `name` | LDS | RDS | CDS | EDS |
//! |---|---|---|---|---|
//! | `Valid(g)` | an API listener whose HttpConnectionManager (router filter only) takes its routes over ADS from the route configuration `route-{g}` | one virtual host, `{name}-vhost`, for every domain (`*`), with one route: every path to cluster `cluster-{g}` | an EDS cluster over ADS (service name: its own name if it is `xdstp:`, none otherwise), round robin, a circuit breaker of `100 + g` max requests | one locality (region `r1`, zone `z1`, weight 1, priority 0) with one healthy endpoint, `127.0.0.1:{10000 + g}` |
//! | `Invalid` | a listener with neither `api_listener` nor `address` (NACKed) | nothing is sent | a STATIC cluster (NACKed) | nothing is sent |
//! | `Error(code)` | a TP3 `resource_errors` entry, `code` and "simulated server error", for any type URL ||||
//!
//! So generation 1 of a listener `L` is a whole chain that a client resolves: `L` →
//! `route-1` → `cluster-1` → `127.0.0.1:10001`, and moving one name to generation 2
//! changes its content (and only its own). The builders are [`valid_any`] and
//! [`invalid_any`], on the kit's [`resources`].
//!
//! A resource you give is sent as you give it: its `Any`, type URL and bytes, wrapped
//! in a `Resource` when the policy says so, and on delta streams with a version derived
//! from its bytes. The server does not decode it, so it serves any resource type the
//! client registered, valid or not.
//!
//! Delta streams (`open_delta_stream`, `on_delta_request`, `flush_delta`) answer from
//! the same snapshot, sending only what each client lacks (see the `delta` module).
//!
//! Faults are methods: [`ManagementServer::restart`] forgets every stream and restarts
//! the nonce counter; [`ManagementServer::inject_garbage`] adds an undecodable
//! resource to the next response of a type; [`ManagementServer::duplicate`] resends a
//! type's last response, with its nonce or a fresh one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use xds_proto_core::Code;
use xds_proto_core::pb::envoy::service::discovery::v3::{
    DiscoveryRequest, DiscoveryResponse, ResourceError,
};
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

/// A resource the server generates under a name (the module documentation's table
/// says what each one contains).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimResource {
    /// A valid resource ([`valid_any`]); the generation makes each update's content
    /// distinct. LDS, RDS, CDS and EDS only.
    Valid(u32),
    /// A resource that fails the client's validation ([`invalid_any`]): LDS and CDS
    /// have one; for the other types nothing is sent.
    Invalid,
    /// A TP3 `resource_errors` entry with this code instead of the resource.
    Error(Code),
}

/// The valid resource of `type_url` named `name` in generation `generation`: for
/// LDS, [`resources::listener`]`(name, "route-{generation}")`; for RDS,
/// [`resources::route_config`]`(name, "cluster-{generation}")`; for CDS,
/// [`resources::cluster_with`]`(name, 100 + generation)`; for EDS,
/// [`resources::endpoints`]`(name, &[10_000 + generation])`.
///
/// # Panics
/// For any other type URL: the server generates only these four types (serve others
/// with [`ManagementServer::set_any`]).
pub fn valid_any(type_url: &str, name: &str, generation: u32) -> Any {
    match type_url {
        LDS => resources::listener(name, &format!("route-{generation}")),
        RDS => resources::route_config(name, &format!("cluster-{generation}")),
        CDS => resources::cluster_with(name, 100 + generation),
        EDS => resources::endpoints(name, &[10_000 + generation]),
        other => panic!("the server generates no resource of {other}: use set_any"),
    }
}

/// A resource named `name` that fails validation, for the types that have one:
/// [`resources::invalid_listener`] and [`resources::invalid_cluster`].
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

/// What the snapshot holds under a name.
#[derive(Clone, Debug, PartialEq)]
enum Held {
    /// A resource the server generates.
    Sim(SimResource),
    /// A resource given as it is to be sent.
    Given(Any),
}

/// What goes out in a response for a name the snapshot holds.
enum Body {
    /// The resource.
    Resource(Any),
    /// Nothing: an invalid resource of a type that has none.
    Nothing,
    /// A TP3 `resource_errors` entry instead of the resource.
    Error(ResourceError),
}

impl Held {
    /// What goes out for `name` of type `t`.
    fn body(&self, t: &str, name: &str) -> Body {
        match self {
            Held::Sim(SimResource::Valid(g)) => Body::Resource(valid_any(t, name, *g)),
            Held::Sim(SimResource::Invalid) => {
                invalid_any(t, name).map_or(Body::Nothing, Body::Resource)
            }
            Held::Sim(SimResource::Error(code)) => {
                Body::Error(resource_error(name, *code, "simulated server error"))
            }
            Held::Given(any) => Body::Resource(any.clone()),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct TypeSnapshot {
    version: u64,
    resources: BTreeMap<String, Held>,
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

/// The key a type URL is filed under: one of [`SIM_TYPES`], or for any other type the
/// URL kept once for the life of the process (the streams' maps and
/// [`ManagementServer::stream_types`] hand out `&'static str`; a process meets a few
/// type URLs, those its clients register).
fn type_key(type_url: &str) -> &'static str {
    if let Some(t) = SIM_TYPES.iter().find(|t| **t == type_url) {
        return t;
    }
    static OTHERS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut others = OTHERS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(t) = others.get(type_url) {
        return t;
    }
    let t: &'static str = Box::leak(type_url.into());
    others.insert(t);
    t
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

    /// The generated resource it holds under `name`: `None` when it holds nothing there,
    /// or a resource given with [`set_any`](Self::set_any) (see [`given`](Self::given)).
    pub fn resource(&self, type_url: &str, name: &str) -> Option<SimResource> {
        match self.snapshot.get(type_url)?.resources.get(name)? {
            Held::Sim(r) => Some(*r),
            Held::Given(_) => None,
        }
    }

    /// The resource given with [`set_any`](Self::set_any) that it holds under `name`.
    pub fn given(&self, type_url: &str, name: &str) -> Option<&Any> {
        match self.snapshot.get(type_url)?.resources.get(name)? {
            Held::Given(any) => Some(any),
            Held::Sim(_) => None,
        }
    }

    /// How many responses it has sent.
    pub fn responses_sent(&self) -> u64 {
        self.responses
    }

    fn bump(&mut self, type_url: &'static str) {
        self.snapshot.entry(type_url).or_default().version += 1;
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

    fn hold(&mut self, type_url: &str, name: &str, held: Held) {
        let t = type_key(type_url);
        let snapshot = self.snapshot.entry(t).or_default();
        snapshot.resources.insert(name.to_string(), held);
        self.bump(t);
    }

    /// Serves the generated `resource` under `name` and moves the type's version on.
    ///
    /// # Panics
    /// When `resource` is `Valid` and the type is not LDS, RDS, CDS or EDS, the types
    /// the server generates (see [`valid_any`]).
    pub fn set(&mut self, type_url: &str, name: &str, resource: SimResource) {
        assert!(
            !matches!(resource, SimResource::Valid(_)) || SIM_TYPES.contains(&type_url),
            "the server generates no resource of {type_url}: use set_any"
        );
        self.hold(type_url, name, Held::Sim(resource));
    }

    /// Serves `resource` as it is under `name`, in the snapshot of its type URL (any
    /// type: a built-in one or one of your own), and moves that type's version on. It
    /// is sent as given, never decoded by the server, so it may as well be invalid.
    /// The name is what the server files it under and answers requests for; a valid
    /// resource names itself the same (the client files a resource that is not wrapped
    /// under the name its payload gives).
    ///
    /// ```
    /// use xds_proto_core::pb::envoy::service::discovery::v3::DiscoveryRequest;
    /// use xds_proto_testing::resources;
    /// use xds_proto_testing::server::{ManagementServer, ServerPolicy};
    ///
    /// let mut server = ManagementServer::new("xds.example:443", ServerPolicy::default());
    /// let mine = resources::any("type.example.com/my.Config", &resources::pb_duration(
    ///     std::time::Duration::from_secs(1),
    /// ));
    /// server.set_any("cfg", mine.clone());
    /// server.open_stream(1);
    /// let request = DiscoveryRequest {
    ///     type_url: mine.type_url.clone(),
    ///     resource_names: vec!["cfg".to_string()],
    ///     ..Default::default()
    /// };
    /// assert!(server.on_request(1, &request));
    /// assert_eq!(server.flush(1, |_| 0)[0].resources, [mine]);
    /// ```
    pub fn set_any(&mut self, name: &str, resource: Any) {
        let type_url = resource.type_url.clone();
        self.hold(&type_url, name, Held::Given(resource));
    }

    /// [`set_any`](Self::set_any) with `message` packed as an `Any` of `type_url`.
    pub fn set_message(&mut self, type_url: &str, name: &str, message: &impl prost::Message) {
        self.set_any(name, resources::any(type_url, message));
    }

    /// Deletes `name` and moves the type's version on.
    pub fn remove(&mut self, type_url: &str, name: &str) {
        let t = type_key(type_url);
        self.snapshot.entry(t).or_default().resources.remove(name);
        self.bump(t);
    }

    /// The next response of `type_url` on every stream carries one undecodable resource.
    pub fn inject_garbage(&mut self, type_url: &str) {
        let t = type_key(type_url);
        self.snapshot.entry(t).or_default();
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
    /// A request of a type the server holds nothing of is answered like any other (an
    /// empty response, then the resources once they are set); one with no type URL is
    /// ignored.
    pub fn on_request(&mut self, key: u64, request: &DiscoveryRequest) -> bool {
        if request.type_url.is_empty() {
            return false;
        }
        let t = type_key(&request.type_url);
        self.snapshot.entry(t).or_default();
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
            let Some(held) = snapshot.resources.get(&name) else {
                continue;
            };
            // Only valid resources are wrapped, as before: wrapping invalid ones too would
            // change the bytes of every simulated run under that policy.
            let wrap = self.policy.wrap_resources && held != &Held::Sim(SimResource::Invalid);
            match held.body(t, &name) {
                Body::Resource(any) if wrap => resources.push(wrap_resource(&name, any)),
                Body::Resource(any) => resources.push(any),
                Body::Nothing => {}
                Body::Error(error) => resource_errors.push(error),
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
        let t = type_key(type_url);
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

    const GREETING: &str = "type.example.com/example.Greeting";

    /// A resource type of the user's own: the payload is its name, as UTF-8.
    struct Greeting;

    impl xds_proto_core::XdsResourceType for Greeting {
        type Value = String;
        const TYPE_URL: &'static str = GREETING;
        const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
        fn decode(bytes: &[u8]) -> Result<(String, String), xds_proto_core::DecodeError> {
            let name = std::str::from_utf8(bytes)
                .map_err(|e| xds_proto_core::DecodeError::unnamed(e.to_string()))?;
            Ok((name.to_string(), format!("hello from {name}")))
        }
    }

    fn greeting(name: &str) -> Any {
        Any {
            type_url: GREETING.to_string(),
            value: Bytes::from(name.as_bytes().to_vec()),
        }
    }

    #[test]
    fn serves_given_resources_of_any_type_as_given() {
        let first = |_: usize| 0;
        let mut s = ManagementServer::new("x", ServerPolicy::default());
        s.open_stream(1);
        // A type it holds nothing of is answered like any other: empty, then filled.
        assert!(s.on_request(1, &request(GREETING, &["g1", "g2"], "", "")));
        let out = s.flush(1, first);
        assert_eq!(
            (out[0].type_url.as_str(), out[0].resources.len()),
            (GREETING, 0)
        );
        s.set_any("g1", greeting("g1"));
        let out = s.flush(1, first);
        assert_eq!(out[0].resources, [greeting("g1")]);
        assert_eq!(s.given(GREETING, "g1"), Some(&greeting("g1")));
        assert_eq!(s.resource(GREETING, "g1"), None);
        // A built-in type, from its message: the bytes go out as encoded.
        let cluster = resources::cluster_msg("c1", 7);
        s.set_message(CDS, "c1", &cluster);
        assert!(s.on_request(1, &request(CDS, &["c1"], "", "")));
        let out = s.flush(1, first);
        assert_eq!(out[0].resources, [resources::any(CDS, &cluster)]);
        assert_eq!(s.resource(CDS, "c1"), None);
        // Generated and given resources replace each other under a name.
        s.set(CDS, "c1", SimResource::Valid(1));
        assert_eq!(s.flush(1, first)[0].resources, [valid_any(CDS, "c1", 1)]);
        assert_eq!(s.given(CDS, "c1"), None);
        // Removal; and under the wrapping policy, given resources come wrapped.
        s.remove(GREETING, "g1");
        assert!(s.flush(1, first)[0].resources.is_empty());
        let mut wrapped = ManagementServer::new(
            "x",
            ServerPolicy {
                wrap_resources: true,
                ..ServerPolicy::default()
            },
        );
        wrapped.set_any("g2", greeting("g2"));
        wrapped.open_stream(1);
        assert!(wrapped.on_request(1, &request(GREETING, &["g2"], "", "")));
        let out = wrapped.flush(1, first);
        assert_eq!(out[0].resources, [wrap_resource("g2", greeting("g2"))]);
    }

    #[test]
    fn delta_streams_version_given_resources_by_their_bytes() {
        use xds_proto_core::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
        let first = |_: usize| 0;
        let mut s = ManagementServer::new("x", ServerPolicy::default());
        s.set_any("g1", greeting("g1"));
        s.open_delta_stream(1);
        let subscribe = DeltaDiscoveryRequest {
            type_url: GREETING.to_string(),
            resource_names_subscribe: vec!["g1".to_string()],
            ..Default::default()
        };
        assert!(s.on_delta_request(1, &subscribe));
        let out = s.flush_delta(1, first);
        let sent = &out[0].resources[0];
        assert_eq!(
            (sent.name.as_str(), sent.resource.as_ref()),
            ("g1", Some(&greeting("g1")))
        );
        let version = sent.version.clone();
        // The same bytes again: nothing new to send. Other bytes: a new version.
        s.set_any("g1", greeting("g1"));
        assert!(s.flush_delta(1, first).is_empty());
        let changed = Any {
            value: Bytes::from_static(b"g1, again"),
            ..greeting("g1")
        };
        s.set_any("g1", changed.clone());
        let out = s.flush_delta(1, first);
        assert_eq!(out[0].resources[0].resource.as_ref(), Some(&changed));
        assert_ne!(out[0].resources[0].version, version);
    }

    /// A client that registered its own type watches a resource the server was given:
    /// the whole exchange, the client's requests going to the server as messages.
    #[test]
    fn a_client_receives_a_given_resource_of_its_own_type() {
        use xds_proto_core::{
            Action, Bootstrap, Event, Instant, WatchEvent, XdsClient, XdsClientConfig,
        };
        let bootstrap = Bootstrap::from_json_str(
            r#"{"xds_servers": [{"server_uri": "x:1", "channel_creds": [{"type": "insecure"}]}],
                "node": {"id": "n"}}"#,
        )
        .expect("valid bootstrap");
        let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), 1);
        client.register_type::<Greeting>().expect("a new type");
        let mut server = ManagementServer::new("x:1", ServerPolicy::default());
        server.set_any("world", greeting("world"));
        let watcher = client.watch::<Greeting>("world").expect("a valid watch");
        let now = Instant::ZERO;
        let mut told = Vec::new();
        let mut responses = std::collections::VecDeque::new();
        loop {
            while let Some(action) = client.poll_action() {
                match action {
                    Action::StartStream { stream, .. } => {
                        server.open_stream(stream.into_raw());
                        client.handle_event(now, Event::StreamStarted { stream });
                    }
                    Action::SendRequest { stream, request } => {
                        client.handle_event(now, Event::RequestSent { stream });
                        if server.on_request(stream.into_raw(), &request.to_proto()) {
                            let out = server.flush(stream.into_raw(), |_| 0);
                            responses.extend(out.into_iter().map(|r| (stream, r)));
                        }
                    }
                    Action::Notify(n) => told.push(n),
                    _ => {}
                }
            }
            let Some((stream, response)) = responses.pop_front() else {
                break;
            };
            let bytes = prost::Message::encode_to_vec(&response).into();
            client.handle_event(now, Event::ResponseReceived { stream, bytes });
        }
        assert_eq!(told.len(), 1, "{told:?}");
        assert_eq!(told[0].watcher, watcher);
        assert!(matches!(told[0].event, WatchEvent::Changed(Ok(_))));
        assert_eq!(
            told[0].value::<Greeting>().map(String::as_str),
            Some("hello from world")
        );
    }

    /// The module documentation's table, checked through the core's own decoders.
    #[test]
    fn generated_resources_are_what_the_docs_say() {
        use xds_proto_core::resource::route::RouteAction;
        use xds_proto_core::resource::route::{ClusterSpecifier, DomainPattern, PathMatcher};
        use xds_proto_core::resource::{
            ClusterType, HealthStatus, LbPolicy, ListenerKind, RouteSource,
        };
        use xds_proto_core::{Cds, Eds, Lds, Rds, XdsResourceType};

        let (name, listener) = Lds::decode(&valid_any(LDS, "L", 3).value).expect("valid LDS");
        let ListenerKind::Client(hcm) = &listener.kind else {
            panic!("an API listener: {listener:?}");
        };
        assert_eq!(
            (name.as_str(), &hcm.route_config),
            ("L", &RouteSource::Rds("route-3".into()))
        );
        assert_eq!(hcm.http_filters.len(), 1, "the router only");

        let (_, rc) = Rds::decode(&valid_any(RDS, "R", 3).value).expect("valid RDS");
        let vh = &rc.virtual_hosts[..];
        assert_eq!((vh.len(), vh[0].name.as_str()), (1, "R-vhost"));
        assert_eq!(vh[0].domains, [DomainPattern::Any]);
        assert_eq!(vh[0].routes.len(), 1);
        assert_eq!(
            vh[0].routes[0].matcher.path,
            PathMatcher::Prefix(String::new())
        );
        let RouteAction::Forward(forward) = &vh[0].routes[0].action else {
            panic!("a forwarding route");
        };
        assert_eq!(
            forward.cluster,
            ClusterSpecifier::Cluster("cluster-3".into())
        );

        let (_, cluster) = Cds::decode(&valid_any(CDS, "C", 3).value).expect("valid CDS");
        assert_eq!(
            cluster.cluster_type,
            ClusterType::Eds { service_name: None }
        );
        assert_eq!(
            (cluster.lb_policy.clone(), cluster.max_requests),
            (LbPolicy::RoundRobin, 103)
        );
        let (_, xdstp) = Cds::decode(&valid_any(CDS, "xdstp://a/t/C", 1).value).expect("CDS");
        let service_name = Some("xdstp://a/t/C".to_string());
        assert_eq!(xdstp.cluster_type, ClusterType::Eds { service_name });

        let (_, eds) = Eds::decode(&valid_any(EDS, "E", 3).value).expect("valid EDS");
        assert_eq!(eds.priorities.len(), 1);
        let localities = &eds.priorities[0].localities;
        assert_eq!(localities.len(), 1);
        let l = &localities[0];
        assert_eq!(
            (
                l.locality.region.as_str(),
                l.locality.zone.as_str(),
                l.weight
            ),
            ("r1", "z1", 1)
        );
        assert_eq!(l.endpoints.len(), 1);
        assert_eq!(l.endpoints[0].address, "127.0.0.1:10003".parse().unwrap());
        assert_eq!(l.endpoints[0].health_status, HealthStatus::Healthy);

        // Invalid: a NACK for LDS and CDS; nothing for RDS and EDS.
        assert!(Lds::decode(&invalid_any(LDS, "L").unwrap().value).is_err());
        assert!(Cds::decode(&invalid_any(CDS, "C").unwrap().value).is_err());
        assert!(invalid_any(RDS, "R").is_none() && invalid_any(EDS, "E").is_none());
    }
}
