//! Authorities (gRFC A47) and their servers: which authority serves a name, the
//! servers' states created on first use, and A71 fallback: when the active server of
//! an authority fails with a resource uncached, the next server is put in use; when a
//! higher-priority server answers again, the authority switches back to it.

use std::sync::Arc;

use super::check::checked_authority;
use super::server::ServerState;
use super::{Action, ServerId, TypeIdx, WatchError, XdsClient};
use crate::bootstrap::ServerConfig;

#[derive(Debug)]
pub(super) struct AuthorityState {
    /// `None` for old-style names, served by the top-level servers.
    pub(super) name: Option<String>,
    /// The bootstrap's servers for this authority, highest priority first.
    pub(super) servers: Vec<usize>,
    /// How many of them are in use, `servers[..in_use]`; the last one is active.
    pub(super) in_use: usize,
    /// How many resources of this authority are watched.
    pub(super) resources: usize,
}

impl AuthorityState {
    pub(super) fn in_use(&self) -> &[usize] {
        &self.servers[..self.in_use]
    }

    pub(super) fn active(&self) -> Option<usize> {
        self.in_use().last().copied()
    }

    /// A watch of this authority starts: its first server is in use from now on.
    pub(super) fn start_using(&mut self) {
        if self.in_use == 0 {
            self.in_use = 1;
        }
    }

    /// One of its resources is no longer watched; returns the servers that were in use
    /// for it (none stays in use once its last resource goes).
    pub(super) fn remove_resource(&mut self) -> Vec<usize> {
        let servers = self.in_use().to_vec();
        self.resources -= 1;
        if self.resources == 0 {
            self.in_use = 0;
        }
        servers
    }
}

impl XdsClient {
    /// The authority that serves the canonical name `name`, creating its state (and
    /// the state of its servers) on first use.
    pub(super) fn authority_for(&mut self, t: TypeIdx, name: &str) -> Result<usize, WatchError> {
        let (authority, configs) =
            checked_authority(&self.config.bootstrap, self.types[t].type_url(), name)?;
        if let Some(i) = self
            .authorities
            .iter()
            .position(|a| a.name.as_deref() == authority)
        {
            return Ok(i);
        }
        let configs = configs.to_vec();
        let mut servers: Vec<usize> = Vec::with_capacity(configs.len());
        for config in &configs {
            let server = self.server_index(config);
            if !servers.contains(&server) {
                servers.push(server);
            }
        }
        self.authorities.push(AuthorityState {
            name: authority.map(str::to_string),
            servers,
            in_use: 0,
            resources: 0,
        });
        Ok(self.authorities.len() - 1)
    }

    /// The index of a server, creating its state on first use. Identical server
    /// configurations share one state, and so one stream.
    pub(super) fn server_index(&mut self, config: &ServerConfig) -> usize {
        if let Some(i) = self.servers.iter().position(|s| *s.config == *config) {
            return i;
        }
        self.servers.push(ServerState::new(
            Arc::new(config.clone()),
            self.config.backoff,
            self.types.len(),
        ));
        self.servers.len() - 1
    }

    /// Starts fallback for an authority whose active server failed, if it has an
    /// uncached watched resource (gRFC A71): the next servers in order are put in use,
    /// each subscribed to every watched resource of the authority, until one is not
    /// known to be failing. Returns whether a server that may work is now in use.
    pub(super) fn maybe_fallback(&mut self, authority: usize) -> bool {
        let uncached = self.resources.iter().any(|table| {
            table
                .values()
                .any(|e| e.authority == authority && !e.is_cached())
        });
        if !uncached {
            return false;
        }
        loop {
            let auth = &mut self.authorities[authority];
            let Some(&server) = auth.servers.get(auth.in_use) else {
                return false;
            };
            auth.in_use += 1;
            tracing::info!(
                authority = auth.name.as_deref().unwrap_or(""),
                server = %self.servers[server].config.server_uri,
                "falling back to the next xDS server"
            );
            for t in 0..self.types.len() {
                let names: Vec<Arc<str>> = self.resources[t]
                    .values()
                    .filter(|e| e.authority == authority)
                    .map(|e| e.name.clone())
                    .collect();
                let mut added = false;
                for name in &names {
                    added |= self.servers[server].subscribe(t, name);
                }
                if added {
                    self.subscription_changed(server, t);
                }
            }
            if self.servers[server].connectivity_error.is_none() {
                return true;
            }
        }
    }

    /// A server answered: it is healthy. For every authority that has it in use below a
    /// lower-priority server, switch back to it and stop using those below (A71).
    pub(super) fn set_healthy(&mut self, server: usize) {
        self.servers[server].mark_healthy();
        let mut lowers: Vec<usize> = Vec::new();
        let mut changed: Vec<(usize, TypeIdx)> = Vec::new();
        for a in 0..self.authorities.len() {
            let auth = &mut self.authorities[a];
            let Some(pos) = auth.in_use().iter().position(|s| *s == server) else {
                continue;
            };
            if pos + 1 == auth.in_use {
                continue;
            }
            let dropped = auth.servers[pos + 1..auth.in_use].to_vec();
            auth.in_use = pos + 1;
            tracing::info!(
                authority = auth.name.as_deref().unwrap_or(""),
                server = %self.servers[server].config.server_uri,
                dropped = dropped.len(),
                "switching back to a higher-priority xDS server"
            );
            for lower in dropped {
                if !lowers.contains(&lower) {
                    lowers.push(lower);
                }
                for t in self.unsubscribe_authority(a, lower) {
                    if !changed.contains(&(lower, t)) {
                        changed.push((lower, t));
                    }
                }
            }
        }
        // Every authority first, then one request or one release per server: a server
        // shared by two authorities is not sent the second one's names on its way out.
        for lower in lowers {
            if !self.servers[lower].has_subscriptions() {
                self.release_server(lower);
                continue;
            }
            for &(_, t) in changed.iter().filter(|(s, _)| *s == lower) {
                self.subscription_changed(lower, t);
            }
        }
    }

    /// Removes every resource of `authority` from `server`'s subscriptions; returns the
    /// types whose subscription changed (the caller sends them or releases the server).
    pub(super) fn unsubscribe_authority(
        &mut self,
        authority: usize,
        server: usize,
    ) -> Vec<TypeIdx> {
        let mut changed = Vec::new();
        let mut removed = Vec::new();
        for (t, table) in self.resources.iter_mut().enumerate() {
            for entry in table.values_mut().filter(|e| e.authority == authority) {
                if self.servers[server].types[t]
                    .subscribed
                    .contains(&entry.name)
                {
                    if !changed.contains(&t) {
                        changed.push(t);
                    }
                    removed.push((t, entry.name.clone()));
                    entry.disarm_timers(&mut self.timers, Some(server));
                }
            }
        }
        for (t, name) in removed {
            self.servers[server].unsubscribe(t, &name);
        }
        changed
    }

    /// Nothing is watched on `server` any more: close its stream and forget its state.
    pub(super) fn release_server(&mut self, server: usize) {
        let srv = &mut self.servers[server];
        tracing::debug!(server = %srv.config.server_uri, "xDS server no longer used");
        if let Some(stream) = srv.release() {
            self.actions.push_back(Action::CloseStream { stream });
        }
        self.timers.cancel_reconnect(server);
        // An LRS stream still on the connection keeps it; the channel goes with it.
        if !self.lrs.uses_server(server) {
            self.actions.push_back(Action::DropChannel {
                server: ServerId(server),
            });
        }
    }
}
