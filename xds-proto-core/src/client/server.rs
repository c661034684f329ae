//! One xDS server in use: its [`ServerState`] (subscriptions and accepted version per
//! type, backoff, standing error, A78 counters) and its open ADS stream
//! ([`StreamState`]: nonces, pending NACKs, which type to send next, the request in
//! flight). Building the next request is theirs (the delta one in `delta.rs`); the
//! client decides when.

use std::collections::VecDeque;
use std::sync::Arc;

use super::cache::Slot;
use super::subscription::Subscription;
use super::{AdsRequest, Code, DeltaRequest, StreamId, TypeIdx, XdsError};
use crate::backoff::{Backoff, BackoffConfig};
use crate::bootstrap::ServerConfig;
use crate::pb::envoy::config::core::v3::Node;
use crate::resource::ResourceTypeInfo;

/// One resource type on one server, across its streams.
#[derive(Debug, Default)]
pub(super) struct ServerTypeState {
    /// The last accepted `version_info` of this type from this server.
    pub(super) version: String,
    /// The names subscribed on this server.
    pub(super) subscribed: Subscription,
    /// The watched resources of the last response by position (`None` where one was
    /// rejected or not watched), to recognise unchanged resources of a SotW resend
    /// without decoding or hashing their names.
    pub(super) last_slots: Vec<Option<Slot>>,
    /// Valid and invalid resources received of this type (A78 `resource_updates_*`).
    pub(super) updates_valid: u64,
    pub(super) updates_invalid: u64,
}

/// One resource type on one stream.
#[derive(Debug, Default, Clone)]
pub(super) struct StreamTypeState {
    pub(super) nonce: String,
    /// A NACK message waiting to be sent.
    pub(super) nack: Option<String>,
    /// A request for this type has been emitted on this stream.
    pub(super) ever_sent: bool,
    /// A request for this type must be (re)sent.
    pub(super) dirty: bool,
    /// Names subscribed on this stream since the last request of this type was emitted:
    /// the next request is their subscribing message, which starts their timers.
    pub(super) new_names: Vec<Arc<str>>,
    /// Delta: names the server was told to track and that are no longer subscribed,
    /// for the next request's `resource_names_unsubscribe`.
    pub(super) unsubscribe: Vec<Arc<str>>,
    /// Delta: names in `new_names` whose unsubscribe, still to be sent, a new watch
    /// cancelled: the server still tracks them.
    pub(super) resubscribed: Vec<Arc<str>>,
    /// Delta: the responses waiting for their ACK or NACK, oldest first: each nonce
    /// with the NACK's message, if rejected. Every delta response is answered, each
    /// by its own request (a later ACK does not stand for an earlier NACK, as it
    /// does in state of the world).
    pub(super) delta_acks: VecDeque<PendingAck>,
}

/// A delta response's ACK (no message) or NACK, not yet sent.
#[derive(Debug, Clone)]
pub(super) struct PendingAck {
    pub(super) nonce: String,
    pub(super) nack: Option<String>,
}

/// The bound on a type's unanswered delta responses. Only a server sending faster
/// than the transport takes requests fills it; the oldest ACK (else the oldest NACK)
/// is then dropped, so the server still hears of the latest responses.
pub(super) const MAX_PENDING_DELTA_ACKS: usize = 256;

impl StreamTypeState {
    /// Queues the answer to the delta response with nonce `nonce`.
    pub(super) fn queue_delta_ack(&mut self, nonce: String, nack: Option<String>) {
        if self.delta_acks.len() >= MAX_PENDING_DELTA_ACKS {
            let drop = self
                .delta_acks
                .iter()
                .position(|a| a.nack.is_none())
                .unwrap_or(0);
            self.delta_acks.remove(drop);
        }
        self.delta_acks.push_back(PendingAck { nonce, nack });
    }
}

/// A request of either variant, as the server's stream speaks it.
pub(super) enum Request {
    Sotw(AdsRequest),
    Delta(DeltaRequest),
}

/// The request emitted and not yet reported sent, and the names it subscribes.
#[derive(Debug)]
pub(super) struct InFlight {
    pub(super) type_idx: TypeIdx,
    pub(super) names: Vec<Arc<str>>,
}

/// One ADS stream.
#[derive(Debug)]
pub(super) struct StreamState {
    pub(super) id: StreamId,
    pub(super) connected: bool,
    pub(super) saw_response: bool,
    pub(super) sent_node: bool,
    pub(super) in_flight: Option<InFlight>,
    /// Names whose subscribing request was sent before the stream was connected.
    pub(super) sent_before_connect: Vec<(TypeIdx, Arc<str>)>,
    pub(super) types: Vec<StreamTypeState>,
    pub(super) dirty_order: VecDeque<TypeIdx>,
}

/// One server this client uses, and its stream while one is open.
#[derive(Debug)]
pub(super) struct ServerState {
    pub(super) config: Arc<ServerConfig>,
    pub(super) stream: Option<StreamState>,
    pub(super) backoff: Backoff,
    pub(super) connectivity_error: Option<XdsError>,
    pub(super) types: Vec<ServerTypeState>,
    /// A response arrived since the last connectivity failure (A78 `connected`).
    pub(super) responded: bool,
    /// Healthy-to-unhealthy transitions (A78 `server_failure`).
    pub(super) failures: u64,
}

impl StreamState {
    fn new(id: StreamId, types: usize) -> StreamState {
        StreamState {
            id,
            connected: false,
            saw_response: false,
            sent_node: false,
            in_flight: None,
            sent_before_connect: Vec::new(),
            types: vec![StreamTypeState::default(); types],
            dirty_order: VecDeque::new(),
        }
    }

    /// Queues a request of type `t`, once however often it changes before it is sent.
    pub(super) fn mark_dirty(&mut self, t: TypeIdx) {
        let ts = &mut self.types[t];
        if !ts.dirty {
            ts.dirty = true;
            self.dirty_order.push_back(t);
        }
    }

    /// Takes the first type queued to send whose requests are not held (`on_hold`,
    /// by type); held ones keep their place.
    pub(super) fn take_dirty(&mut self, on_hold: &[bool]) -> Option<TypeIdx> {
        let at =
            (self.dirty_order.iter()).position(|&t| !on_hold.get(t).copied().unwrap_or(false))?;
        self.dirty_order.remove(at)
    }

    /// The transport took the request in flight: returns its type and the names whose
    /// does-not-exist timers start now, or `None` when none was in flight. Before the
    /// stream is connected (unless `assume_connected`) the names wait for it (A57).
    pub(super) fn request_sent(
        &mut self,
        assume_connected: bool,
    ) -> Option<(TypeIdx, Vec<Arc<str>>)> {
        let InFlight { type_idx, names } = self.in_flight.take()?;
        if self.connected || assume_connected {
            return Some((type_idx, names));
        }
        self.sent_before_connect
            .extend(names.into_iter().map(|n| (type_idx, n)));
        Some((type_idx, Vec::new()))
    }

    /// The stream is connected: returns the names whose timers waited for it.
    pub(super) fn connect(&mut self) -> Vec<(TypeIdx, Arc<str>)> {
        if self.connected {
            return Vec::new();
        }
        self.connected = true;
        std::mem::take(&mut self.sent_before_connect)
    }
}

impl ServerState {
    pub(super) fn new(config: Arc<ServerConfig>, backoff: BackoffConfig, types: usize) -> Self {
        ServerState {
            config,
            stream: None,
            backoff: Backoff::new(backoff),
            connectivity_error: None,
            responded: false,
            failures: 0,
            types: (0..types).map(|_| ServerTypeState::default()).collect(),
        }
    }

    /// A resource type was registered after the server was first used.
    pub(super) fn add_type(&mut self) {
        self.types.push(ServerTypeState::default());
        if let Some(stream) = &mut self.stream {
            stream.types.push(StreamTypeState::default());
        }
    }

    pub(super) fn has_subscriptions(&self) -> bool {
        self.types.iter().any(|t| !t.subscribed.is_empty())
    }

    /// Adds `name` to the subscription of type `t`; returns whether it is new. A new
    /// name is remembered for the stream's next request, which subscribes it.
    pub(super) fn subscribe(&mut self, t: TypeIdx, name: &Arc<str>) -> bool {
        if !self.types[t].subscribed.insert(name) {
            return false;
        }
        if let Some(stream) = &mut self.stream {
            let ts = &mut stream.types[t];
            ts.new_names.push(name.clone());
            // Unsubscribed and subscribed again before the change went out: the
            // subscribe alone is sent, and the server must send the resource again.
            let pending = ts.unsubscribe.len();
            ts.unsubscribe.retain(|n| n != name);
            if ts.unsubscribe.len() < pending {
                ts.resubscribed.push(name.clone());
            }
        }
        true
    }

    /// Removes `name` from the subscription of type `t`, and from the stream's record
    /// of names whose subscribing request is still to be sent, is outstanding, or was
    /// sent before the stream connected: if the name is watched again, only a request
    /// built after that may start its timer (A57).
    pub(super) fn unsubscribe(&mut self, t: TypeIdx, name: &Arc<str>) {
        if !self.types[t].subscribed.remove(name) {
            return;
        }
        let delta = self.config.is_delta();
        if let Some(stream) = &mut self.stream {
            let ts = &mut stream.types[t];
            let pending = ts.new_names.len();
            ts.new_names.retain(|n| n != name);
            let resubscribed = ts.resubscribed.len();
            ts.resubscribed.retain(|n| n != name);
            // Delta: a name the server tracks (its subscribe went out, or a watch
            // cancelled its unsubscribe) is told to the server as gone.
            let tracked = ts.new_names.len() == pending || ts.resubscribed.len() < resubscribed;
            if delta && tracked {
                ts.unsubscribe.push(name.clone());
            }
            if let Some(in_flight) = &mut stream.in_flight
                && in_flight.type_idx == t
            {
                in_flight.names.retain(|n| n != name);
            }
            stream
                .sent_before_connect
                .retain(|(ty, n)| !(*ty == t && n == name));
        }
    }

    /// Opens a stream `id` whose first requests subscribe every subscribed name.
    pub(super) fn open_stream(&mut self, id: StreamId, types: usize) {
        let mut stream = StreamState::new(id, types);
        for (t, ts) in self.types.iter_mut().enumerate() {
            if !ts.subscribed.is_empty() {
                stream.types[t].new_names = ts.subscribed.names().to_vec();
                stream.mark_dirty(t);
            }
        }
        self.stream = Some(stream);
    }

    /// The subscription of type `t` changed: queues its request on the open stream.
    /// Returns whether a stream is open.
    pub(super) fn subscription_changed(&mut self, t: TypeIdx) -> bool {
        let Some(stream) = &mut self.stream else {
            return false;
        };
        if stream.types[t].ever_sent || !self.types[t].subscribed.is_empty() {
            stream.mark_dirty(t);
        }
        true
    }

    /// The next request of the open stream, unless one is in flight or none is due.
    /// On a delta stream, `held(t, names)` gives the versions of the resources among
    /// `names` of type `t` that the client holds from this server.
    pub(super) fn next_request(
        &mut self,
        node: &Node,
        types: &[ResourceTypeInfo],
        on_hold: &[bool],
        held: impl FnOnce(TypeIdx, &[Arc<str>]) -> Vec<(Arc<str>, Arc<str>)>,
    ) -> Option<(StreamId, Request)> {
        if self.config.is_delta() {
            return self
                .next_delta_request(node, types, on_hold, held)
                .map(|(id, r)| (id, Request::Delta(r)));
        }
        self.next_sotw_request(node, types, on_hold)
            .map(|(id, r)| (id, Request::Sotw(r)))
    }

    fn next_sotw_request(
        &mut self,
        node: &Node,
        types: &[ResourceTypeInfo],
        on_hold: &[bool],
    ) -> Option<(StreamId, AdsRequest)> {
        let stream = self.stream.as_mut()?;
        if stream.in_flight.is_some() {
            return None;
        }
        // A type whose names were all unwatched before its first request left sends
        // nothing: an empty first request would be a wildcard subscription for LDS/CDS.
        let t = loop {
            let t = stream.take_dirty(on_hold)?;
            let ts = &mut stream.types[t];
            if ts.ever_sent || !self.types[t].subscribed.is_empty() {
                break t;
            }
            ts.dirty = false;
            ts.new_names.clear();
            ts.nack = None;
        };
        let ts = &mut stream.types[t];
        ts.dirty = false;
        ts.ever_sent = true;
        let names = std::mem::take(&mut ts.new_names);
        let error_detail = ts
            .nack
            .take()
            .map(|message| crate::pb::google::rpc::Status {
                code: Code::INVALID_ARGUMENT.0,
                message,
                details: Vec::new(),
            });
        let sts = &mut self.types[t];
        let resource_names = sts.subscribed.names();
        let request = AdsRequest {
            version_info: sts.version.clone(),
            node: (!stream.sent_node).then(|| node.clone()),
            resource_names,
            type_url: types[t].type_url(),
            response_nonce: ts.nonce.clone(),
            error_detail,
        };
        stream.sent_node = true;
        stream.in_flight = Some(InFlight { type_idx: t, names });
        Some((stream.id, request))
    }

    /// A response of type `t` was applied: ACK `Ok(version)` or NACK `Err(detail)`
    /// with the next request of that type.
    pub(super) fn record_outcome(&mut self, t: TypeIdx, outcome: Result<String, String>) {
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let nack = match outcome {
            Ok(version) => {
                self.types[t].version = version;
                None
            }
            Err(detail) => Some(detail),
        };
        let ts = &mut stream.types[t];
        if self.config.is_delta() {
            let nonce = ts.nonce.clone();
            ts.queue_delta_ack(nonce, nack);
        } else {
            ts.nack = nack;
        }
        stream.mark_dirty(t);
    }

    /// The server answered: its backoff and standing error reset.
    pub(super) fn mark_healthy(&mut self) {
        self.backoff.reset();
        self.connectivity_error = None;
        self.responded = true;
    }

    /// The server failed: `error` stands until it answers again.
    pub(super) fn mark_failed(&mut self, error: XdsError) {
        if self.connectivity_error.is_none() {
            self.failures += 1;
        }
        self.responded = false;
        self.connectivity_error = Some(error);
    }

    /// Nothing is watched on it any more: forgets its stream (returned, to be closed)
    /// and its per-stream state; the A78 counters stay.
    pub(super) fn release(&mut self) -> Option<StreamId> {
        let stream = self.stream.take().map(|s| s.id);
        self.backoff.reset();
        self.connectivity_error = None;
        self.responded = false;
        for ts in &mut self.types {
            ts.version.clear();
        }
        stream
    }
}
