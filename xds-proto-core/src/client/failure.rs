//! gRFC A57's failure modes: a connectivity failure of a server's channel, a stream
//! that ends (with or without a response first), the backoff before the next attempt,
//! and the does-not-exist timer of each subscribed resource.

use std::sync::Arc;

use super::cache::Slot;
use super::timer::Ticket;
use super::wildcard::WILDCARD;
use super::{Status, TypeIdx, UpdateFailure, XdsClient, XdsError};
use crate::time::Instant;

impl XdsClient {
    /// Starts `server`'s does-not-exist timer of a resource whose subscribing request
    /// was sent on its connected stream, unless the resource is cached, NACKed, has a
    /// server-reported error standing, or is already timed on this stream. A resource
    /// whose timer ran out as a transient error (`resource_timer_is_transient_error`)
    /// is not cached, so a new stream times it again (A57).
    pub(super) fn start_resource_timer(
        &mut self,
        server: usize,
        t: TypeIdx,
        name: &Arc<str>,
        now: Instant,
    ) {
        let Some(slot) = self.resources[t].slot_of(name) else {
            return;
        };
        let timeout = self.resource_timeout(server);
        let Some(entry) = self.resources[t].at_mut(slot) else {
            return;
        };
        if !self.authorities[entry.authority].in_use().contains(&server) {
            return;
        }
        if entry.is_cached() || entry.rare().nack.is_some() || entry.rare().server_error.is_some() {
            return;
        }
        if &**name == WILDCARD {
            return; // a wildcard subscription names no resource that could be missing
        }
        // An armed timer of this server is one of its current stream: every stream end
        // cancels them (`cancel_resource_timers`).
        if entry.armed.ticket(server).is_some() {
            return;
        }
        tracing::trace!(
            server = %self.servers[server].config.server_uri,
            type_url = self.types[t].type_url(),
            name = %name,
            "does-not-exist timer started"
        );
        let ticket = self.timers.arm_resource(server, now + timeout, t, slot);
        entry.armed.insert(server, ticket);
    }

    /// How long `server`'s does-not-exist timer runs: A88's 30 s (by default) on a
    /// server with `resource_timer_is_transient_error`, A57's 15 s otherwise.
    fn resource_timeout(&self, server: usize) -> std::time::Duration {
        let features = self.servers[server].config.server_features;
        if features.resource_timer_is_transient_error {
            self.config.transient_resource_timeout
        } else {
            self.config.resource_timeout
        }
    }

    /// The does-not-exist timers due at one instant ran out: each fires in key order
    /// (server, type, name) unless its resource stopped it meanwhile, which an earlier
    /// one of them may do (one verdict per resource).
    pub(super) fn on_resource_timers(
        &mut self,
        due: Vec<(usize, TypeIdx, Slot, Ticket)>,
        now: Instant,
    ) {
        let mut due: Vec<_> = due
            .into_iter()
            .filter_map(|(server, t, slot, ticket)| {
                let entry = self.resources[t].at_mut(slot)?;
                Some((server, t, entry.name.clone(), slot, ticket))
            })
            .collect();
        due.sort_unstable_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
        for (server, t, name, slot, ticket) in due {
            let live = self.resources[t]
                .at_mut(slot)
                .is_some_and(|entry| entry.armed.ticket(server) == Some(ticket));
            if live {
                self.on_resource_timer(server, t, slot, &name, now);
            }
        }
    }

    /// `server`'s does-not-exist timer of a resource ran out: unless a value arrived
    /// meanwhile, the resource does not exist (or timed out, on a server that says so).
    fn on_resource_timer(
        &mut self,
        server: usize,
        t: TypeIdx,
        slot: Slot,
        name: &Arc<str>,
        now: Instant,
    ) {
        let type_url = self.types[t].type_url();
        let timeout = self.resource_timeout(server);
        let Some(entry) = self.resources[t].at_mut(slot) else {
            return;
        };
        // One verdict per resource: the timers still running on other servers stop.
        entry.disarm_timers(&mut self.timers, None);
        if entry.is_cached() {
            return;
        }
        let config = &self.servers[server].config;
        let transient = config.server_features.resource_timer_is_transient_error;
        tracing::debug!(
            server = %config.server_uri,
            type_url,
            name = %name,
            transient,
            "does-not-exist timer fired"
        );
        let error = if transient {
            entry.rare_mut().timed_out = true;
            XdsError::timeout(&self.node_tag, type_url, name, &config.server_uri, timeout)
        } else {
            let why = format!(
                "xDS server {:?} did not send it within {timeout:?}",
                config.server_uri
            );
            let version = self.servers[server].types[t].version.to_string();
            entry.rare_mut().does_not_exist = Some(UpdateFailure {
                details: why.clone(),
                version,
                at: now,
            });
            XdsError::does_not_exist(&self.node_tag, type_url, name, &why)
        };
        entry.fail(&mut self.actions, type_url, error, false);
    }

    pub(super) fn on_connectivity_failure(&mut self, server: usize, reason: String) {
        let Some(srv) = self.servers.get_mut(server) else {
            return;
        };
        if let Some(stream) = &mut srv.stream {
            stream.connected = false;
        }
        tracing::warn!(server = %srv.config.server_uri, %reason, "xDS channel failed");
        let error = XdsError::connectivity(&self.node_tag, &srv.config.server_uri, &reason);
        self.report_connectivity_error(server, error);
    }

    /// The stream of `server` ended. After a response it is reopened at once; before
    /// any, it counts as a connectivity failure and the next attempt backs off.
    pub(super) fn on_stream_closed(&mut self, server: usize, status: Status, now: Instant) {
        let Some(stream) = self.servers[server].stream.take() else {
            return;
        };
        let srv = &mut self.servers[server];
        if stream.saw_response {
            tracing::debug!(
                server = %srv.config.server_uri,
                stream = %stream.id,
                %status,
                "ADS stream closed after a response; reopening"
            );
            srv.backoff.reset();
            self.cancel_resource_timers(server);
            self.ensure_stream(server);
            return;
        }
        let reason = format!("ADS stream closed before any response: {status}");
        let error = XdsError::connectivity(&self.node_tag, &srv.config.server_uri, &reason);
        let delay = srv.backoff.next_delay(&mut self.rng);
        tracing::warn!(
            server = %srv.config.server_uri,
            stream = %stream.id,
            %status,
            backoff = ?delay,
            "ADS stream closed before any response"
        );
        if srv.has_subscriptions() {
            self.timers.set_reconnect(server, now + delay);
        }
        self.report_connectivity_error(server, error);
    }

    /// Stops the does-not-exist timers of a server's resources (they never run while
    /// it is disconnected) and lets them start again on the next stream.
    pub(super) fn cancel_resource_timers(&mut self, server: usize) {
        for table in self.resources.iter_mut() {
            for entry in table.values_mut().filter(|e| !e.armed.is_empty()) {
                entry.disarm_timers(&mut self.timers, Some(server));
            }
        }
    }

    /// Records a connectivity failure of `server` and, for every authority it is the
    /// active server of, falls back (A71) or reports the error to the watchers.
    pub(super) fn report_connectivity_error(&mut self, server: usize, error: XdsError) {
        self.cancel_resource_timers(server);
        self.servers[server].mark_failed(error.clone());
        for a in 0..self.authorities.len() {
            if self.authorities[a].active() != Some(server) || self.maybe_fallback(a) {
                continue;
            }
            for (t, table) in self.resources.iter_mut().enumerate() {
                let type_url = self.types[t].type_url();
                let mut entries: Vec<_> = table.values_mut().filter(|e| e.authority == a).collect();
                entries.sort_by(|x, y| x.name.cmp(&y.name));
                for entry in entries {
                    entry.notify_connectivity(&mut self.actions, type_url, &error);
                }
            }
        }
    }
}
