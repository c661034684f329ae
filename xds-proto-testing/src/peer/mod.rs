//! A scripted ADS peer: [`Harness`] drives one [`XdsClient`] over virtual time and lets
//! a test play the management server by hand — it answers the client's actions itself
//! (`expect_start`, `expect_request`, `started`, `sent`, `respond`, `close`, ...) and
//! asserts the exact requests the client sends ([`Req`]) and the exact notifications
//! its watchers get; on a delta stream, [`DeltaReq`] and `expect_delta_request` /
//! `respond_delta`; on an LRS stream, `connect_lrs`, `expect_load_report` and
//! `respond_lrs` (with [`lrs_response`]). [`DmDriver`] runs a dependency manager the
//! same way against an automatic server, and [`SplitMix`], [`Scripted`] and [`Fixed`]
//! are random sources for the config selector.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use xds_proto_core::client::{
    Action, Event, Notification, StreamId, WatchEvent, WatcherId, XdsClient, XdsClientConfig,
};
use xds_proto_core::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::ResourceValue;
use xds_proto_core::{
    Bootstrap, Code, Instant, ServerId, Status, WatchError, XdsError, XdsResourceType,
};

mod delta;
mod dependency;
mod lrs;
mod random;

pub use delta::{
    DELTA_BOOTSTRAP, DeltaReq, delta_errors, delta_on_the_wire, delta_resource, delta_response,
};
pub use dependency::DmDriver;
pub use lrs::lrs_response;
pub use random::{Fixed, Scripted, SplitMix};

pub use crate::resources::resource_error;
pub use xds_proto_core::resource::type_url::{
    CLUSTER as CDS, CLUSTER_LOAD_ASSIGNMENT as EDS, LISTENER as LDS, ROUTE_CONFIGURATION as RDS,
};

/// A bootstrap with one server, `xds.example:443`, and node id `test-node`.
pub const ONE_SERVER_BOOTSTRAP: &str = r#"{
  "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
  "node": {"id": "test-node", "cluster": "test-cluster"}
}"#;

/// The value a `Changed(Ok)` notification carries; panics naming the resource
/// otherwise.
pub fn value_of(n: &Notification) -> &ResourceValue {
    match &n.event {
        WatchEvent::Changed(Ok(v)) => v,
        other => panic!("expected a value for {:?}, got {other:?}", n.name),
    }
}

/// The error a `Changed(Err)` notification carries; panics naming the resource
/// otherwise.
pub fn changed_error(n: &Notification) -> &XdsError {
    match &n.event {
        WatchEvent::Changed(Err(e)) => e,
        other => panic!("expected a Changed(Err) for {:?}, got {other:?}", n.name),
    }
}

/// The error an `AmbientError` notification carries; panics naming the resource
/// otherwise.
pub fn ambient_error(n: &Notification) -> &XdsError {
    match &n.event {
        WatchEvent::AmbientError(e) => e,
        other => panic!("expected an AmbientError for {:?}, got {other:?}", n.name),
    }
}

/// A watch of the built-in type whose URL is `type_url` ([`XdsClient::watch_type`]):
/// for drivers (the simulator, the fuzzer) that choose the type at run time. An unknown
/// URL is refused as the client refuses an unregistered type.
pub fn watch_by_type_url(
    client: &mut XdsClient,
    type_url: &str,
    name: &str,
) -> Result<WatcherId, WatchError> {
    let builtin = xds_proto_core::resource::builtin_types();
    match builtin.iter().find(|t| t.type_url() == type_url) {
        Some(ty) => client.watch_type(ty, name),
        None => Err(WatchError::UnknownType(type_url.to_string())),
    }
}

/// The parts of a `DiscoveryRequest` a scenario asserts on, in a comparable form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Req {
    /// Type URL.
    pub type_url: String,
    /// Subscribed names, in the order sent.
    pub names: Vec<String>,
    /// `version_info`.
    pub version: String,
    /// `response_nonce`.
    pub nonce: String,
    /// Whether the node identity was included.
    pub node: bool,
    /// `error_detail.message`, when it is a NACK.
    pub error: Option<String>,
}

impl Req {
    /// A request with no node and no error.
    pub fn new(type_url: &str, names: &[&str], version: &str, nonce: &str) -> Req {
        Req {
            type_url: type_url.to_string(),
            names: names.iter().map(|s| s.to_string()).collect(),
            version: version.to_string(),
            nonce: nonce.to_string(),
            node: false,
            error: None,
        }
    }

    /// The same request carrying the node identity.
    pub fn with_node(mut self) -> Req {
        self.node = true;
        self
    }

    /// The same request as a NACK with this error detail.
    pub fn nack(mut self, detail: &str) -> Req {
        self.error = Some(detail.to_string());
        self
    }

    /// Views a request the client emitted, as the server decodes it from the wire.
    pub fn of(r: &xds_proto_core::AdsRequest) -> Req {
        Req::of_proto(&on_the_wire(r))
    }

    /// Views a generated request.
    pub fn of_proto(r: &DiscoveryRequest) -> Req {
        Req {
            type_url: r.type_url.clone(),
            names: r.resource_names.clone(),
            version: r.version_info.clone(),
            nonce: r.response_nonce.clone(),
            node: r.node.is_some(),
            error: r.error_detail.as_ref().map(|s| s.message.clone()),
        }
    }
}

/// A request as a server sees it: encoded by the client's encoder, decoded by the
/// generated message.
pub fn on_the_wire(r: &xds_proto_core::AdsRequest) -> DiscoveryRequest {
    DiscoveryRequest::decode(r.encode_to_vec().as_slice())
        .expect("the client's request encoding decodes")
}

/// One client driven by a test script over virtual time.
pub struct Harness {
    /// The client under test.
    pub client: XdsClient,
    /// Virtual now.
    pub now: Instant,
    pending: VecDeque<Action>,
}

impl Harness {
    /// A client on [`ONE_SERVER_BOOTSTRAP`] with default settings.
    pub fn new() -> Harness {
        Harness::with_bootstrap(ONE_SERVER_BOOTSTRAP, |_| {})
    }

    /// A client on this bootstrap, with settings adjusted by `tune`.
    pub fn with_bootstrap(json: &str, tune: impl FnOnce(&mut XdsClientConfig)) -> Harness {
        let bootstrap = Bootstrap::from_json_str(json).expect("test bootstrap parses");
        let mut config = XdsClientConfig::new(bootstrap);
        tune(&mut config);
        Harness {
            client: XdsClient::new(config, 1),
            now: Instant::from_secs(1000),
            pending: VecDeque::new(),
        }
    }

    pub(super) fn collect(&mut self) {
        while let Some(a) = self.client.poll_action() {
            self.pending.push_back(a);
        }
    }

    /// Takes the client's actions after a call made on [`client`](Self::client)
    /// directly (the harness's own methods take them themselves).
    pub fn collect_actions(&mut self) {
        self.collect();
    }

    /// Watches a resource of type `T`.
    pub fn watch<T: XdsResourceType>(&mut self, name: &str) -> WatcherId {
        let id = self.client.watch::<T>(name).expect("watch accepted");
        self.collect();
        id
    }

    /// Watches a built-in type chosen at run time (see [`watch_by_type_url`]).
    pub fn watch_by_type_url(&mut self, type_url: &str, name: &str) -> WatcherId {
        let id = watch_by_type_url(&mut self.client, type_url, name).expect("watch accepted");
        self.collect();
        id
    }

    /// Cancels a watch.
    pub fn cancel(&mut self, watcher: WatcherId) {
        self.client.cancel_watch(watcher);
        self.collect();
    }

    /// Feeds a transport event.
    pub fn event(&mut self, event: Event) {
        self.client.handle_event(self.now, event);
        self.collect();
    }

    /// Reports that the stream is established.
    pub fn started(&mut self, stream: StreamId) {
        self.event(Event::StreamStarted { stream });
    }

    /// Reports that the outstanding request of `stream` was sent.
    pub fn sent(&mut self, stream: StreamId) {
        self.event(Event::RequestSent { stream });
    }

    /// Delivers a response.
    pub fn respond(
        &mut self,
        stream: StreamId,
        type_url: &str,
        version: &str,
        nonce: &str,
        resources: Vec<Any>,
    ) {
        self.respond_with(stream, response(type_url, version, nonce, resources));
    }

    /// Delivers a response built by the test.
    pub fn respond_with(&mut self, stream: StreamId, response: DiscoveryResponse) {
        self.event(Event::ResponseReceived {
            stream,
            bytes: Bytes::from(response.encode_to_vec()),
        });
    }

    /// Closes a stream with a status.
    pub fn close(&mut self, stream: StreamId, code: Code, message: &str) {
        self.event(Event::StreamClosed {
            stream,
            status: Status::new(code, message),
        });
    }

    /// Reports a channel connectivity failure.
    pub fn connectivity_failure(&mut self, server: usize, reason: &str) {
        self.event(Event::ConnectivityFailure {
            server: ServerId::from_raw(server),
            reason: reason.to_string(),
        });
    }

    /// Advances virtual time by `by`, firing every timer due on the way at its deadline.
    pub fn advance(&mut self, by: Duration) {
        let target = self.now + by;
        while let Some(at) = self.client.poll_timeout() {
            if at > target {
                break;
            }
            self.now = self.now.max(at);
            self.client.handle_timeout(self.now);
            self.collect();
        }
        self.now = target;
    }

    /// Takes every action emitted so far.
    pub fn take(&mut self) -> Vec<Action> {
        self.pending.drain(..).collect()
    }

    /// Takes the next action, panicking with the remaining ones if there is none.
    pub fn next_action(&mut self) -> Action {
        self.pending
            .pop_front()
            .expect("expected another action, got none")
    }

    /// The next action must be a `StartStream`; returns its stream id.
    pub fn expect_start(&mut self) -> StreamId {
        match self.next_action() {
            Action::StartStream { stream, .. } => stream,
            other => panic!("expected StartStream, got {other:?}"),
        }
    }

    /// The next action must be a request on `stream`; returns its view.
    pub fn expect_request(&mut self, stream: StreamId) -> Req {
        match self.next_action() {
            Action::SendRequest { stream: s, request } if s == stream => Req::of(&request),
            other => panic!("expected SendRequest on {stream:?}, got {other:?}"),
        }
    }

    /// The next action must be a notification; returns it.
    pub fn expect_notify(&mut self) -> Notification {
        match self.next_action() {
            Action::Notify(n) => n,
            other => panic!("expected Notify, got {other:?}"),
        }
    }

    /// No action may be pending.
    pub fn expect_nothing(&mut self) {
        assert!(
            self.pending.is_empty(),
            "expected no action, got {:?}",
            self.pending
        );
    }

    /// The actions pending, without taking them.
    pub fn pending(&self) -> &VecDeque<Action> {
        &self.pending
    }

    /// Opens the first stream of a fresh watch: expects `StartStream` and the first
    /// request, reports the stream started and the request sent. Returns the stream.
    pub fn connect_first(&mut self, type_url: &str, names: &[&str]) -> StreamId {
        let stream = self.expect_start();
        assert_eq!(
            self.expect_request(stream),
            Req::new(type_url, names, "", "").with_node()
        );
        self.started(stream);
        self.sent(stream);
        stream
    }
}

impl Default for Harness {
    fn default() -> Harness {
        Harness::new()
    }
}

/// A SotW response.
pub fn response(
    type_url: &str,
    version: &str,
    nonce: &str,
    resources: Vec<Any>,
) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: version.to_string(),
        resources,
        type_url: type_url.to_string(),
        nonce: nonce.to_string(),
        ..Default::default()
    }
}
