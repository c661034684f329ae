//! How one step reaches the rules: an event for a stale stream checked to change
//! nothing, a response judged by the reference before the client sees it (the
//! context its actions are held to), then each action of the step handed to the rule
//! that owns it.

use super::*;

impl CheckedClient {
    pub(super) fn stale_event(
        &mut self,
        now: Instant,
        event: Event,
    ) -> Result<Vec<Action>, Violation> {
        let pre = self.client.resource_snapshot();
        let pre_timeout = self.client.poll_timeout();
        let shown = format!("{event:?}");
        self.client.handle_event(now, event);
        let actions = self.drain(now)?;
        let post = self.client.resource_snapshot();
        if !actions.is_empty() || post != pre || self.client.poll_timeout() != pre_timeout {
            return Err(violation(
                "stale-event-ignored",
                now,
                format!(
                    "{shown} for a stale stream or unknown server produced {actions:?} or changed the state"
                ),
            ));
        }
        self.after_step(now)?;
        Ok(actions)
    }

    pub(super) fn before_response(&mut self, now: Instant, stream: StreamId, bytes: &Bytes) -> Ctx {
        let s = self.streams.get_mut(&stream).expect("live");
        let server = s.server;
        let is_delta = self.servers[&server].config.is_delta();
        let decoded = if is_delta {
            delta::decode_as_sotw(bytes)
        } else {
            DiscoveryResponse::decode(bytes.clone())
                .ok()
                .map(|r| (r, BTreeSet::new()))
        };
        let s = self.streams.get_mut(&stream).expect("live");
        let Some((response, removed)) = decoded else {
            // The client closes the stream as if it had failed.
            let saw_response = s.saw_response;
            return self.stream_ended(now, server, saw_response);
        };
        s.connected_since.get_or_insert(now);
        s.saw_response = true;
        // Any decodable response on a live stream, even of a type not requested, shows
        // the server healthy: the client switches back to it (A71).
        self.failed.remove(&server);
        self.switch_back(server);
        let sm = self.servers.get_mut(&server).expect("server");
        sm.failures = 0;
        let features = sm.config.server_features;
        let server_config = sm.config.clone();
        let Some(ty) = self
            .types
            .iter()
            .find(|t| t.type_url() == response.type_url)
            .cloned()
        else {
            return Ctx::Quiet;
        };
        let s = self.streams.get_mut(&stream).expect("live");
        let st = s.types.entry(response.type_url.clone()).or_default();
        if !st.requested {
            return Ctx::Quiet;
        }
        st.nonce = response.nonce.clone();
        let mut verdict = judge(&ty, &DecodeContext::new(&self.bootstrap), &response);
        // Delta: a name both sent (valid or not) and removed is a contradiction the
        // client NACKs; a TP3 error beside a removal is not.
        if removed
            .iter()
            .any(|n| verdict.valid.contains_key(n) || verdict.invalid.contains(n))
        {
            verdict.accept = false;
        }
        st.pending_nack = !verdict.accept;
        if is_delta {
            st.acks_due
                .push_back((response.nonce.clone(), !verdict.accept));
        }
        if verdict.accept {
            self.servers
                .get_mut(&server)
                .expect("server")
                .accepted
                .insert(response.type_url.clone(), response.version_info.clone());
        }
        Ctx::Response {
            type_url: response.type_url.clone(),
            server: server_config,
            verdict,
            fail_on_data_errors: features.fail_on_data_errors,
            all_required: ty.all_resources_required_in_sotw() && !is_delta,
            removed,
        }
    }

    /// Checks one step of the client: each action as it comes, then what the step's
    /// input (`ctx`) requires of the whole step.
    pub(super) fn process(
        &mut self,
        now: Instant,
        ctx: &Ctx,
        actions: &[Action],
    ) -> Result<(), Violation> {
        let ambient_before = self.ambient_values();
        let (heard, started) = self.apply_actions(now, ctx, actions)?;
        match ctx {
            Ctx::Watch { watcher, pre } => {
                self.check_initial_state(now, *watcher, pre.as_ref(), &heard, actions)?
            }
            Ctx::Cancel | Ctx::Quiet => {
                if let Some((w, events)) = heard.iter().next() {
                    return Err(violation(
                        "no-notification-without-cause",
                        now,
                        format!("{w:?} told {events:?} on an input that changes no resource"),
                    ));
                }
            }
            Ctx::Response { .. } | Ctx::Timeout { .. } => {
                self.check_notify_all(now, &heard, &ambient_before)?
            }
            Ctx::Closed {
                server,
                saw_response: true,
            } => self.check_restart_after_response(now, *server, &heard, &started)?,
            Ctx::Closed {
                server,
                saw_response: false,
            }
            | Ctx::Connectivity { server } => {
                if started.contains(server) {
                    return Err(violation(
                        "backoff-respected",
                        now,
                        "a new stream started in the same step as a connectivity failure",
                    ));
                }
                self.check_connectivity_reported(now, *server, &heard)?;
            }
        }
        Ok(())
    }

    /// The watchers holding an ambient error and a value: only they hear the value
    /// again when the error clears (A88).
    fn ambient_values(&self) -> BTreeMap<WatcherId, ResourceValue> {
        (self.watchers.iter())
            .filter(|(_, w)| w.ambient)
            .filter_map(|(id, w)| match &w.held {
                Some(Ok(v)) => Some((*id, v.clone())),
                _ => None,
            })
            .collect()
    }

    /// Checks each action in turn; returns what each watcher heard, and the servers
    /// a stream was started to.
    fn apply_actions(
        &mut self,
        now: Instant,
        ctx: &Ctx,
        actions: &[Action],
    ) -> Result<(Heard, BTreeSet<ServerId>), Violation> {
        let mut heard = Heard::new();
        let mut started = BTreeSet::new();
        for action in actions {
            match action {
                Action::StartStream {
                    server,
                    config,
                    stream,
                } => {
                    self.on_start(now, *server, config, *stream)?;
                    started.insert(*server);
                }
                Action::SendRequest { stream, request } => {
                    self.on_send(now, *stream, &crate::on_the_wire(request))?
                }
                Action::SendDeltaRequest { stream, request } => {
                    self.on_send_delta(now, *stream, &crate::delta_on_the_wire(request))?
                }
                Action::CloseStream { stream } => self.on_close_action(now, *stream)?,
                Action::DropChannel { server } => self.on_drop(now, *server)?,
                Action::Notify(n) => {
                    self.on_notify(now, ctx, n)?;
                    heard.entry(n.watcher).or_default().push(n.event.clone());
                }
                other => panic!("the checker does not know the action {other:?}"),
            }
        }
        Ok((heard, started))
    }

    /// A stream that closed after a response notifies no one, and is replaced at once
    /// while the server has watchers.
    fn check_restart_after_response(
        &self,
        now: Instant,
        server: ServerId,
        heard: &Heard,
        started: &BTreeSet<ServerId>,
    ) -> Result<(), Violation> {
        if !heard.is_empty() {
            return Err(violation(
                "restart-after-response",
                now,
                format!("a stream closed after a response must not notify anyone: {heard:?}"),
            ));
        }
        let config = &self.servers[&server].config;
        if self.watchers_on(config) > 0 && !started.contains(&server) {
            return Err(violation(
                "restart-after-response",
                now,
                format!(
                    "the stream to {} closed after a response: expected a new stream at once",
                    config.server_uri
                ),
            ));
        }
        Ok(())
    }
}
