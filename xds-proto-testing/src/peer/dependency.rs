//! [`DmDriver`]: an [`XdsDependencyManager`] on a [`Harness`] client whose ADS server
//! answers every request at once and whose responses the test scripts.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use xds_proto_core::client::{Action, Event, Notification, StreamId};
use xds_proto_core::dependency::{XdsConfig, XdsDependencyManager};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::{ServerId, XdsError};

use super::{Harness, Req, response};

/// Runs an [`XdsDependencyManager`] on a [`Harness`] client whose ADS server is the test:
/// streams start and requests are sent at once, every request is recorded, the
/// manager's notifications go to it, the others are kept in `others`, and its updates
/// are collected in `updates`.
pub struct DmDriver {
    /// The harness (client and virtual time).
    pub h: Harness,
    /// The manager under test.
    pub dm: XdsDependencyManager,
    /// The current ADS stream.
    pub stream: Option<StreamId>,
    /// Every request sent, in order.
    pub requests: Vec<Req>,
    /// The names of the latest request of each type.
    pub subscribed: BTreeMap<String, Vec<String>>,
    /// Notifications for watchers that are not the manager's.
    pub others: Vec<Notification>,
    /// The manager's updates, in order.
    pub updates: Vec<Result<Arc<XdsConfig>, XdsError>>,
    /// The client's load-reporting actions (LRS streams started, requests, closes),
    /// in order, for the test to play the LRS server with.
    pub lrs: VecDeque<Action>,
    /// The servers whose channel the client dropped, in order.
    pub dropped_channels: Vec<ServerId>,
    nonce: u64,
}

impl DmDriver {
    /// A manager for `listener_name` and `authority`, started.
    pub fn new(listener_name: &str, authority: &str) -> DmDriver {
        let mut d = DmDriver {
            h: Harness::new(),
            dm: XdsDependencyManager::new(listener_name, authority),
            stream: None,
            requests: Vec::new(),
            subscribed: BTreeMap::new(),
            others: Vec::new(),
            updates: Vec::new(),
            lrs: VecDeque::new(),
            dropped_channels: Vec::new(),
            nonce: 0,
        };
        d.dm.start(&mut d.h.client)
            .expect("listener watch accepted");
        d.pump();
        d
    }

    fn dispatch(&mut self, action: Action) {
        let now = self.h.now;
        match action {
            Action::StartStream { stream, .. } => {
                self.stream = Some(stream);
                self.h
                    .client
                    .handle_event(now, Event::StreamStarted { stream });
            }
            Action::SendRequest { stream, request } => {
                let req = Req::of(&request);
                self.subscribed
                    .insert(req.type_url.clone(), req.names.clone());
                self.requests.push(req);
                self.h
                    .client
                    .handle_event(now, Event::RequestSent { stream });
            }
            Action::Notify(n) => {
                if !self.dm.handle_notification(&mut self.h.client, &n) {
                    self.others.push(n);
                }
            }
            Action::StartLoadReportStream { .. } | Action::SendLoadReport { .. } => {
                self.lrs.push_back(action)
            }
            Action::CloseStream { stream } if Some(stream) != self.stream => {
                self.lrs.push_back(action)
            }
            Action::DropChannel { server } => self.dropped_channels.push(server),
            Action::CloseStream { .. } => {}
            other => panic!("unexpected action {other:?}"),
        }
    }

    /// Delivers every pending action (the harness's first, then the client's) until
    /// none is left, and collects the manager's updates.
    pub fn pump(&mut self) {
        let mut queue: VecDeque<Action> = self.h.take().into();
        while let Some(action) = queue.pop_front().or_else(|| self.h.client.poll_action()) {
            self.dispatch(action);
        }
        while let Some(update) = self.dm.poll_update() {
            self.updates.push(update);
        }
    }

    /// The server sends a SotW response of `type_url` with these resources.
    pub fn respond(&mut self, type_url: &str, version: &str, resources: Vec<Any>) {
        let stream = self.stream.expect("a stream is open");
        self.nonce += 1;
        let bytes = Bytes::from(
            response(type_url, version, &format!("n{}", self.nonce), resources).encode_to_vec(),
        );
        let now = self.h.now;
        self.h
            .client
            .handle_event(now, Event::ResponseReceived { stream, bytes });
        self.pump();
    }

    /// Feeds an event of an LRS stream (or any other) and delivers what follows.
    pub fn event(&mut self, event: Event) {
        let now = self.h.now;
        self.h.client.handle_event(now, event);
        self.pump();
    }

    /// Advances virtual time, firing timers.
    pub fn advance(&mut self, by: Duration) {
        self.h.advance(by);
        self.pump();
    }

    /// The names currently subscribed for `type_url` (from the latest request).
    pub fn names(&self, type_url: &str) -> Vec<String> {
        self.subscribed.get(type_url).cloned().unwrap_or_default()
    }

    /// Takes the updates collected so far.
    pub fn take_updates(&mut self) -> Vec<Result<Arc<XdsConfig>, XdsError>> {
        std::mem::take(&mut self.updates)
    }

    /// The one update collected since the last call.
    fn take_one_update(&mut self) -> Result<Arc<XdsConfig>, XdsError> {
        let mut updates = self.take_updates();
        assert_eq!(
            updates.len(),
            1,
            "expected exactly one update, got {updates:?}"
        );
        updates.pop().expect("one update")
    }

    /// The one update collected since the last call, which must be a config.
    pub fn expect_config(&mut self) -> Arc<XdsConfig> {
        self.take_one_update()
            .unwrap_or_else(|e| panic!("expected a config, got {e:?}"))
    }

    /// The one update collected since the last call, which must be an error.
    pub fn expect_error(&mut self) -> XdsError {
        match self.take_one_update() {
            Ok(config) => panic!("expected an error, got {config:?}"),
            Err(e) => e,
        }
    }

    /// No update may have been collected.
    pub fn expect_no_update(&mut self) {
        let updates = self.take_updates();
        assert!(updates.is_empty(), "expected no update, got {updates:?}");
    }
}
