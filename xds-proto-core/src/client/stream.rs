//! The client's side of a stream's life: opening it when a server has subscriptions,
//! emitting one request at a time (none while the embedder holds requests back), and
//! starting the does-not-exist timers once a subscribing request has gone out on a
//! connected stream (A57).

use std::sync::Arc;

use super::server::Request;
use super::{Action, AdsRequest, DeltaRequest, ServerId, StreamId, TypeIdx, XdsClient};
use crate::time::Instant;

impl XdsClient {
    /// The subscription of type `t` on `server` changed: resend it, or open a stream.
    pub(super) fn subscription_changed(&mut self, server: usize, t: TypeIdx) {
        if self.servers[server].subscription_changed(t) {
            self.pump(server);
        } else {
            self.ensure_stream(server);
        }
    }

    /// Opens a stream to `server` if it has subscriptions, none is open, and no
    /// backoff is pending.
    pub(super) fn ensure_stream(&mut self, server: usize) {
        let srv = &mut self.servers[server];
        if srv.stream.is_some() || !srv.has_subscriptions() || self.timers.reconnect_armed(server) {
            return;
        }
        let id = StreamId(self.next_stream);
        self.next_stream += 1;
        srv.open_stream(id, self.types.len());
        let delta = srv.config.is_delta();
        tracing::debug!(server = %srv.config.server_uri, stream = %id, delta, "ADS stream starting");
        self.actions.push_back(Action::StartStream {
            server: ServerId(server),
            config: srv.config.clone(),
            stream: id,
        });
        self.pump(server);
    }

    /// Holds every request back until [`release_requests`](Self::release_requests):
    /// subscriptions, ACKs and NACKs wait, merged as usual into one request per type,
    /// while streams still start. For an embedder that knows more watches are coming
    /// (a burst an application queues one by one, a batch of configuration changes),
    /// as Envoy pauses its ADS requests while it applies one: the burst leaves as one
    /// request per type instead of a first request with the names taken so far, whose
    /// response the server then sends again with the rest. Does-not-exist timers start
    /// only when the requests go out, as always.
    pub fn hold_requests(&mut self) {
        self.on_hold.fill(true);
    }

    /// Holds back the requests of one type only (see
    /// [`hold_requests`](Self::hold_requests)): the other types' go on, so a burst
    /// of watches of one type after another lets each type's request leave once its
    /// part of the burst is through. False for a type the client does not know.
    pub fn hold_requests_of(&mut self, type_url: &str) -> bool {
        match self.type_index(type_url) {
            Some(t) => {
                self.on_hold[t] = true;
                true
            }
            None => false,
        }
    }

    /// Lets every type's requests go again: each stream emits its next one at once.
    pub fn release_requests(&mut self) {
        if self.requests_held() {
            self.on_hold.fill(false);
            self.pump_all();
        }
    }

    /// Lets one type's requests go again (see
    /// [`hold_requests_of`](Self::hold_requests_of)).
    pub fn release_requests_of(&mut self, type_url: &str) {
        if let Some(t) = self.type_index(type_url)
            && std::mem::take(&mut self.on_hold[t])
        {
            self.pump_all();
        }
    }

    /// Whether the requests of any type are held back.
    pub fn requests_held(&self) -> bool {
        self.on_hold.contains(&true)
    }

    fn pump_all(&mut self) {
        for server in 0..self.servers.len() {
            self.pump(server);
        }
    }

    /// Emits the next request of `server`'s stream if none is outstanding.
    pub(super) fn pump(&mut self, server: usize) {
        let srv = &mut self.servers[server];
        let resources = &self.resources;
        let held = |t, names: &[Arc<str>]| XdsClient::held_versions(resources, server, t, names);
        let next = srv.next_request(&self.node, &self.types, &self.on_hold, held);
        let Some((stream, request)) = next else {
            return;
        };
        let server_uri = &srv.config.server_uri;
        let action = match request {
            Request::Sotw(request) => {
                log_request(server_uri, stream, &request);
                Action::SendRequest {
                    stream,
                    request: Box::new(request),
                }
            }
            Request::Delta(request) => {
                log_delta_request(server_uri, stream, &request);
                Action::SendDeltaRequest {
                    stream,
                    request: Box::new(request),
                }
            }
        };
        self.actions.push_back(action);
    }

    pub(super) fn on_request_sent(&mut self, stream_id: StreamId, now: Instant) {
        let Some(server) = self.server_of_stream(stream_id) else {
            return;
        };
        let Some(stream) = self.servers[server].stream.as_mut() else {
            return;
        };
        #[cfg(feature = "planted-bug")]
        let assume_connected = self.planted_bug;
        #[cfg(not(feature = "planted-bug"))]
        let assume_connected = false;
        let Some((t, names)) = stream.request_sent(assume_connected) else {
            return;
        };
        for name in &names {
            self.start_resource_timer(server, t, name, now);
        }
        self.pump(server);
    }

    /// The stream of `server` is connected: the timers of the names whose subscribing
    /// request went out before start now.
    pub(super) fn mark_connected(&mut self, server: usize, now: Instant) {
        let srv = &mut self.servers[server];
        let Some(stream) = srv.stream.as_mut() else {
            return;
        };
        if stream.connected {
            return;
        }
        tracing::debug!(server = %srv.config.server_uri, stream = %stream.id, "ADS stream connected");
        let waiting: Vec<(TypeIdx, Arc<str>)> = stream.connect();
        for (t, name) in waiting {
            self.start_resource_timer(server, t, &name, now);
        }
    }
}

fn log_request(server_uri: &str, stream: StreamId, request: &AdsRequest) {
    match &request.error_detail {
        Some(detail) => tracing::warn!(
            server = %server_uri,
            %stream,
            type_url = request.type_url,
            version = %request.version_info,
            nonce = %request.response_nonce,
            detail = %detail.message,
            "sending NACK"
        ),
        None => tracing::debug!(
            server = %server_uri,
            %stream,
            type_url = request.type_url,
            version = %request.version_info,
            nonce = %request.response_nonce,
            resources = request.resource_names.len(),
            "sending request"
        ),
    }
}

fn log_delta_request(server_uri: &str, stream: StreamId, request: &DeltaRequest) {
    match &request.error_detail {
        Some(detail) => tracing::warn!(
            server = %server_uri,
            %stream,
            type_url = request.type_url,
            nonce = %request.response_nonce,
            detail = %detail.message,
            "sending delta NACK"
        ),
        None => tracing::debug!(
            server = %server_uri,
            %stream,
            type_url = request.type_url,
            nonce = %request.response_nonce,
            subscribe = request.resource_names_subscribe.len(),
            unsubscribe = request.resource_names_unsubscribe.len(),
            initial_versions = request.initial_resource_versions.len(),
            "sending delta request"
        ),
    }
}
