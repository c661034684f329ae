//! The server's record: every request and response, classified, and the counters of
//! its life. Tests read it through `LoopbackServer::requests`, `responses` and
//! `stats`.

use std::collections::BTreeMap;

/// What a recorded request was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// A request without a response nonce: the first of its type on the stream.
    Subscribe,
    /// A request carrying the nonce of a response and no error: an ACK (possibly with
    /// a changed subscription).
    Ack,
    /// A request carrying the nonce of a response and an error: a NACK.
    Nack,
}

impl RequestKind {
    /// The kind of a request with this `response_nonce`, and an `error_detail` or not.
    pub(crate) fn of(response_nonce: &str, has_error: bool) -> RequestKind {
        if response_nonce.is_empty() {
            RequestKind::Subscribe
        } else if has_error {
            RequestKind::Nack
        } else {
            RequestKind::Ack
        }
    }
}

/// One request as the server received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The server-side number of the stream it came on (1, 2, ... in opening order).
    pub stream: u64,
    /// What it was.
    pub kind: RequestKind,
    /// The type URL.
    pub type_url: String,
    /// `version_info`.
    pub version_info: String,
    /// `resource_names`.
    pub resource_names: Vec<String>,
    /// `response_nonce`.
    pub response_nonce: String,
    /// `error_detail.message`, for a NACK.
    pub error_detail: Option<String>,
    /// Whether it carried the node, and its id.
    pub node_id: Option<String>,
    /// What only a delta request (`DeltaDiscoveryRequest`) has; `None` for SotW. A
    /// delta request has no `version_info` and no `resource_names`: those fields are
    /// empty.
    pub delta: Option<DeltaFields>,
}

/// The fields of a `DeltaDiscoveryRequest` a SotW request does not have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeltaFields {
    /// `resource_names_subscribe`.
    pub subscribe: Vec<String>,
    /// `resource_names_unsubscribe`.
    pub unsubscribe: Vec<String>,
    /// `initial_resource_versions`.
    pub initial_resource_versions: BTreeMap<String, String>,
}

/// One response as the server queued it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedResponse {
    /// The server-side number of the stream it went on.
    pub stream: u64,
    /// The type URL.
    pub type_url: String,
    /// Its nonce.
    pub nonce: String,
    /// `version_info` (SotW) or `system_version_info` (delta).
    pub version: String,
    /// The names of the resources it carried.
    pub resources: Vec<String>,
    /// `removed_resources` (delta only).
    pub removed: Vec<String>,
    /// Its encoded size in bytes.
    pub bytes: usize,
    /// Whether it was a `DeltaDiscoveryResponse`.
    pub delta: bool,
}

/// Counters of a server's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// TCP connections accepted (refused ones included).
    pub connections: u64,
    /// ADS streams opened.
    pub streams: u64,
    /// ADS streams open now.
    pub open_streams: u64,
    /// Requests received.
    pub requests: u64,
    /// ACKs received.
    pub acks: u64,
    /// NACKs received.
    pub nacks: u64,
    /// Responses sent (queued for the stream).
    pub responses: u64,
    /// Responses HTTP/2 took from the stream's queue: written, or waiting for the
    /// client's flow-control window. `responses - responses_taken` wait in the server.
    pub responses_taken: u64,
}
