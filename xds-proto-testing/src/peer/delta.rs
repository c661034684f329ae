//! The delta side of the scripted peer: [`DeltaReq`], the comparable view of a
//! `DeltaDiscoveryRequest`, the [`Harness`] steps of a delta stream, and delta
//! response builders.

use bytes::Bytes;
use prost::Message;
use xds_proto_core::client::{Action, Event, StreamId};
use xds_proto_core::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, Resource, ResourceError,
};
use xds_proto_core::pb::google::protobuf::Any;

use super::Harness;

/// [`ONE_SERVER_BOOTSTRAP`](super::ONE_SERVER_BOOTSTRAP) with the server spoken to over
/// delta xDS (`"api_type": "AGGREGATED_DELTA_GRPC"`).
pub const DELTA_BOOTSTRAP: &str = r#"{
  "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}],
                   "api_type": "AGGREGATED_DELTA_GRPC"}],
  "node": {"id": "test-node", "cluster": "test-cluster"}
}"#;

/// The parts of a `DeltaDiscoveryRequest` a scenario asserts on, in a comparable form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaReq {
    /// Type URL.
    pub type_url: String,
    /// `resource_names_subscribe`, in the order sent.
    pub subscribe: Vec<String>,
    /// `resource_names_unsubscribe`, in the order sent.
    pub unsubscribe: Vec<String>,
    /// `initial_resource_versions`, sorted by name.
    pub initial_versions: Vec<(String, String)>,
    /// `response_nonce`.
    pub nonce: String,
    /// Whether the node identity was included.
    pub node: bool,
    /// `error_detail.message`, when it is a NACK.
    pub error: Option<String>,
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

impl DeltaReq {
    /// A request of `type_url` that changes nothing, with no nonce, node or error.
    pub fn new(type_url: &str) -> DeltaReq {
        DeltaReq {
            type_url: type_url.to_string(),
            subscribe: Vec::new(),
            unsubscribe: Vec::new(),
            initial_versions: Vec::new(),
            nonce: String::new(),
            node: false,
            error: None,
        }
    }

    /// With these names in `resource_names_subscribe`.
    pub fn subscribe(mut self, names: &[&str]) -> DeltaReq {
        self.subscribe = strings(names);
        self
    }

    /// With these names in `resource_names_unsubscribe`.
    pub fn unsubscribe(mut self, names: &[&str]) -> DeltaReq {
        self.unsubscribe = strings(names);
        self
    }

    /// With these `initial_resource_versions` (name, version).
    pub fn initial(mut self, versions: &[(&str, &str)]) -> DeltaReq {
        self.initial_versions = versions
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        self.initial_versions.sort();
        self
    }

    /// An ACK of the response with this nonce.
    pub fn ack(mut self, nonce: &str) -> DeltaReq {
        self.nonce = nonce.to_string();
        self
    }

    /// A NACK of the response with this nonce, with this error detail.
    pub fn nack(mut self, nonce: &str, detail: &str) -> DeltaReq {
        self.nonce = nonce.to_string();
        self.error = Some(detail.to_string());
        self
    }

    /// The same request carrying the node identity.
    pub fn with_node(mut self) -> DeltaReq {
        self.node = true;
        self
    }

    /// Views a request the client emitted, as the server decodes it from the wire.
    pub fn of(r: &xds_proto_core::DeltaRequest) -> DeltaReq {
        DeltaReq::of_proto(&delta_on_the_wire(r))
    }

    /// Views a generated request.
    pub fn of_proto(r: &DeltaDiscoveryRequest) -> DeltaReq {
        let mut initial_versions: Vec<(String, String)> = r
            .initial_resource_versions
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        initial_versions.sort();
        DeltaReq {
            type_url: r.type_url.clone(),
            subscribe: r.resource_names_subscribe.clone(),
            unsubscribe: r.resource_names_unsubscribe.clone(),
            initial_versions,
            nonce: r.response_nonce.clone(),
            node: r.node.is_some(),
            error: r.error_detail.as_ref().map(|s| s.message.clone()),
        }
    }
}

/// A delta request as a server sees it: encoded by the client's encoder, decoded by
/// the generated message.
pub fn delta_on_the_wire(r: &xds_proto_core::DeltaRequest) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest::decode(r.encode_to_vec().as_slice())
        .expect("the client's delta request encoding decodes")
}

/// A delta `Resource`: `resource` named `name` at `version`.
pub fn delta_resource(name: &str, version: &str, resource: Any) -> Resource {
    Resource {
        name: name.to_string(),
        version: version.to_string(),
        resource: Some(resource),
        ..Default::default()
    }
}

/// A delta response of `type_url` with these resources (name, version, resource) and
/// removed names.
pub fn delta_response(
    type_url: &str,
    nonce: &str,
    resources: Vec<(&str, &str, Any)>,
    removed: &[&str],
) -> DeltaDiscoveryResponse {
    DeltaDiscoveryResponse {
        system_version_info: String::new(),
        resources: resources
            .into_iter()
            .map(|(n, v, r)| delta_resource(n, v, r))
            .collect(),
        type_url: type_url.to_string(),
        removed_resources: strings(removed),
        nonce: nonce.to_string(),
        ..Default::default()
    }
}

/// A delta response of `type_url` carrying only TP3 `resource_errors`.
pub fn delta_errors(
    type_url: &str,
    nonce: &str,
    resource_errors: Vec<ResourceError>,
) -> DeltaDiscoveryResponse {
    DeltaDiscoveryResponse {
        type_url: type_url.to_string(),
        nonce: nonce.to_string(),
        resource_errors,
        ..Default::default()
    }
}

impl Harness {
    /// A client on [`DELTA_BOOTSTRAP`] with default settings.
    pub fn delta() -> Harness {
        Harness::with_bootstrap(DELTA_BOOTSTRAP, |_| {})
    }

    /// The next action must be a delta request on `stream`; returns its view.
    pub fn expect_delta_request(&mut self, stream: StreamId) -> DeltaReq {
        match self.next_action() {
            Action::SendDeltaRequest { stream: s, request } if s == stream => {
                DeltaReq::of(&request)
            }
            other => panic!("expected SendDeltaRequest on {stream:?}, got {other:?}"),
        }
    }

    /// Delivers a delta response.
    pub fn respond_delta(&mut self, stream: StreamId, response: DeltaDiscoveryResponse) {
        self.event(Event::ResponseReceived {
            stream,
            bytes: Bytes::from(response.encode_to_vec()),
        });
    }

    /// Opens the first delta stream of a fresh watch: expects `StartStream` and the
    /// first request (subscribing `names` with the node), reports the stream started
    /// and the request sent. Returns the stream.
    pub fn connect_first_delta(&mut self, type_url: &str, names: &[&str]) -> StreamId {
        let stream = self.expect_start();
        assert_eq!(
            self.expect_delta_request(stream),
            DeltaReq::new(type_url).subscribe(names).with_node()
        );
        self.started(stream);
        self.sent(stream);
        stream
    }
}
