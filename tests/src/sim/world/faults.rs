//! What happens to a run between its start and its heal: watch churn, resource
//! updates on the servers, and the faults drawn from the plan (disconnects,
//! partitions, server restarts, duplicate and stale responses); then the heal that
//! lets the run converge.

use super::*;

impl World {
    pub(super) fn churn(&mut self, client: usize) -> Result<(), SimFailure> {
        if !self.safety() {
            return Ok(());
        }
        let gap = self.rng.exp_millis(self.clients[client].churn_mean_ms);
        self.schedule(self.now + gap, Ev::Churn { client });
        let active: Vec<WatcherId> = self.clients[client].cc.watchers().keys().copied().collect();
        if active.is_empty() || self.rng.chance(0.55) {
            if self.rng.chance(0.03) {
                let name = "xdstp://nowhere.sim/envoy.config.cluster.v3.Cluster/c0";
                return self.watch(client, crate::CDS, name);
            }
            let g = self.rng.index(self.groups.len());
            let (t, name) = self.rng.pick(&self.groups[g].names).clone();
            self.watch(client, t, &name)
        } else {
            let w = *self.rng.pick(&active);
            self.note(format_args!("c{client} cancel {w:?}"));
            let actions = self.client_step(client, |cc, now| cc.cancel(now, w))?;
            self.apply(client, actions)
        }
    }

    pub(super) fn watch(
        &mut self,
        client: usize,
        t: &'static str,
        name: &str,
    ) -> Result<(), SimFailure> {
        let (result, actions) = self.client_step(client, |cc, now| cc.watch(now, t, name))?;
        self.note(format_args!(
            "c{client} watch {} {name:?} -> {result:?}",
            short(t)
        ));
        if name.contains("nowhere.sim") == result.is_ok() {
            return Err(self.failure(
                "watch-unknown-authority",
                format!("watch({name}) returned {result:?}"),
            ));
        }
        self.apply(client, actions)
    }

    pub(super) fn update(&mut self) {
        let g = self.rng.index(self.groups.len());
        let (t, name) = self.rng.pick(&self.groups[g].names).clone();
        let current = self.servers[self.groups[g].servers[0]].resource(t, &name);
        match self.rng.weighted(&[45, 10, 15, 10, 12, 8]) {
            1 if matches!(current, Some(SimResource::Valid(_))) => {
                let r = current.expect("valid");
                self.set_resource(g, t, &name, r);
            }
            2 => self.remove_resource(g, t, &name),
            3 if invalid_any(t, &name).is_some() => {
                self.set_resource(g, t, &name, SimResource::Invalid)
            }
            4 => {
                let code = *self.rng.pick(&[
                    Code::NOT_FOUND,
                    Code::PERMISSION_DENIED,
                    Code::UNAVAILABLE,
                    Code::INTERNAL,
                    Code::UNKNOWN,
                    Code(42),
                ]);
                self.set_resource(g, t, &name, SimResource::Error(code));
            }
            5 => {
                self.note(format_args!(
                    "group {g}: next {} response carries junk",
                    short(t)
                ));
                for s in self.groups[g].servers.clone() {
                    self.servers[s].inject_garbage(t);
                    self.wake_streams(s);
                }
            }
            _ => {
                self.generation += 1;
                let gen_ = self.generation;
                self.set_resource(g, t, &name, SimResource::Valid(gen_));
            }
        }
    }

    /// Draws one fault from the plan's weights (kinds in the order of
    /// `plan::FAULT_NAMES`) and applies it. A kind that needs an open stream, when none
    /// is, does nothing.
    pub(super) fn fault(&mut self) -> Result<(), SimFailure> {
        self.stats.faults += 1;
        let kind = self.rng.weighted(&self.plan.fault_weights);
        let open = self.open_conns();
        match kind {
            0 if !open.is_empty() => self.reset_stream(&open),
            1 if !open.is_empty() => self.server_closes_stream(&open),
            2 => self.fail_channel(),
            3 => self.blackhole(),
            4 => self.restart_server(),
            5 if !open.is_empty() => self.junk_response(&open),
            6 if !open.is_empty() => self.duplicate_response(&open),
            7 => self.ghost_event(),
            _ => Ok(()),
        }
    }

    /// A stream reset by the network (RST_STREAM): the client hears the close at once.
    fn reset_stream(&mut self, open: &[u64]) -> Result<(), SimFailure> {
        let id = *self.rng.pick(open);
        self.note(format_args!("fault: reset conn {id}"));
        let c = self.conns.get_mut(&id).expect("conn");
        c.state = ConnState::Closed;
        let (client, stream, server) = (c.client, c.stream, c.server);
        self.servers[server].close_stream(id);
        let status = Status::new(Code::UNAVAILABLE, "stream reset by the network");
        self.deliver(client, Event::StreamClosed { stream, status })
    }

    /// The server ends a stream, with OK or UNAVAILABLE (a maximum connection age):
    /// the client hears it one latency later.
    fn server_closes_stream(&mut self, open: &[u64]) -> Result<(), SimFailure> {
        let id = *self.rng.pick(open);
        let status = if self.rng.chance(0.5) {
            Status::new(Code::OK, "")
        } else {
            Status::new(Code::UNAVAILABLE, "max connection age")
        };
        self.note(format_args!("fault: server closes conn {id} with {status}"));
        let server = self.conns[&id].server;
        self.servers[server].close_stream(id);
        let lat = self.latency();
        let c = self.conns.get_mut(&id).expect("conn");
        let at = (self.now + lat).max(c.s2c_last);
        c.s2c_last = at;
        self.schedule(at, Ev::ClientClosed { conn: id, status });
        Ok(())
    }

    /// A live connection (open or connecting) fails as a whole: its channel reports
    /// the failure.
    fn fail_channel(&mut self) -> Result<(), SimFailure> {
        let live: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.state != ConnState::Closed)
            .map(|(k, _)| *k)
            .collect();
        if live.is_empty() {
            return Ok(());
        }
        let id = *self.rng.pick(&live);
        self.fail_conn(id, "connection reset by peer")
    }

    /// A partition between one client and one server for 5–60 s: open connections go
    /// silent, attempts time out.
    fn blackhole(&mut self) -> Result<(), SimFailure> {
        let client = self.rng.index(self.clients.len());
        let server = self.rng.index(self.servers.len());
        let until = self.now + self.rng.millis(5_000, 60_000);
        let uri = self.servers[server].uri.clone();
        self.note(format_args!(
            "fault: blackhole c{client} -> {uri} until {until}"
        ));
        self.blackholes.insert((client, server), until);
        let hit: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.client == client && c.server == server && c.state != ConnState::Closed
            })
            .map(|(k, _)| *k)
            .collect();
        for id in hit {
            let c = self.conns.get_mut(&id).expect("conn");
            if c.state == ConnState::Open {
                self.partition(id, until);
            } else if c.fate == Fate::Normal {
                c.fate = Fate::NeverEstablish;
                self.schedule(
                    self.now + CONNECT_TIMEOUT,
                    Ev::ConnectFail {
                        conn: id,
                        reason: "connection attempt timed out",
                    },
                );
            }
        }
        Ok(())
    }

    /// A server goes down for 0.5–30 s: its open streams close at once.
    fn restart_server(&mut self) -> Result<(), SimFailure> {
        let server = self.rng.index(self.servers.len());
        if !self.servers[server].is_up() {
            return Ok(());
        }
        let down = self.rng.millis(500, 30_000);
        let uri = self.servers[server].uri.clone();
        self.note(format_args!("fault: restart {uri} (down {down:?})"));
        self.servers[server].restart();
        self.schedule(self.now + down, Ev::ServerUp { server });
        let hit: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.server == server && c.state == ConnState::Open)
            .map(|(k, _)| *k)
            .collect();
        for id in hit {
            let c = self.conns.get_mut(&id).expect("conn");
            c.state = ConnState::Closed;
            let (client, stream) = (c.client, c.stream);
            let status = Status::new(Code::UNAVAILABLE, "server restarted");
            self.deliver(client, Event::StreamClosed { stream, status })?;
        }
        Ok(())
    }

    /// An undecodable message on an open stream.
    fn junk_response(&mut self, open: &[u64]) -> Result<(), SimFailure> {
        let id = *self.rng.pick(open);
        self.note(format_args!("fault: junk message on conn {id}"));
        let (client, stream) = (self.conns[&id].client, self.conns[&id].stream);
        let bytes = Bytes::from_static(&[0xff, 0xff, 0xff, 0x07]);
        self.deliver(client, Event::ResponseReceived { stream, bytes })
    }

    /// A response sent twice on an open stream (fresh: a new nonce; else a replay).
    fn duplicate_response(&mut self, open: &[u64]) -> Result<(), SimFailure> {
        let id = *self.rng.pick(open);
        let server = self.conns[&id].server;
        let types = self.servers[server].stream_types(id);
        if types.is_empty() {
            return Ok(());
        }
        let t = *self.rng.pick(&types);
        let fresh = self.rng.chance(0.5);
        self.duplicate(id, t, fresh);
        Ok(())
    }

    /// An event for a stream that has already closed (a late report from its task).
    fn ghost_event(&mut self) -> Result<(), SimFailure> {
        let dead: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.state == ConnState::Closed)
            .map(|(k, _)| *k)
            .collect();
        if dead.is_empty() {
            return Ok(());
        }
        let id = *self.rng.pick(&dead);
        let c = self.conns[&id].clone();
        let event = match self.rng.index(4) {
            0 => Event::StreamStarted { stream: c.stream },
            1 => Event::RequestSent { stream: c.stream },
            2 => Event::ResponseReceived {
                stream: c.stream,
                bytes: c.last_bytes.unwrap_or_default(),
            },
            _ => Event::StreamClosed {
                stream: c.stream,
                status: Status::new(Code::UNAVAILABLE, "late close"),
            },
        };
        self.note(format_args!("fault: ghost event for conn {id}"));
        self.deliver(c.client, event)
    }

    pub(super) fn heal(&mut self) -> Result<(), SimFailure> {
        self.note(format_args!("heal: faults stop, snapshots are repaired"));
        self.phase = Phase::Liveness;
        self.blackholes.clear();
        for s in 0..self.servers.len() {
            self.servers[s].clear_garbage();
            if !self.servers[s].is_up() {
                self.servers[s].start();
            }
        }
        let troubled: Vec<(u64, &'static str)> = self
            .conns
            .iter()
            .filter_map(|(k, c)| match (c.state, c.fate) {
                (ConnState::Connecting, Fate::NeverEstablish) => {
                    Some((*k, "connection attempt timed out"))
                }
                _ => None,
            })
            .collect();
        for (id, reason) in troubled {
            self.fail_conn(id, reason)?;
        }
        let partitioned: Vec<u64> = (self.conns.iter())
            .filter(|(_, c)| c.state == ConnState::Open && c.stalled)
            .map(|(k, _)| *k)
            .collect();
        for id in partitioned {
            self.resume(id)?;
        }
        for g in 0..self.groups.len() {
            for (t, name) in self.groups[g].names.clone() {
                let bad = self.ever_bad.contains(&(g, t, name.clone()));
                if bad || self.rng.chance(0.75) {
                    self.generation += 1;
                    let gen_ = self.generation;
                    self.set_resource(g, t, &name, SimResource::Valid(gen_));
                } else {
                    self.remove_resource(g, t, &name);
                }
            }
        }
        for client in 0..self.clients.len() {
            if self.clients[client].cc.watchers().is_empty() {
                let (t, name) = self.rng.pick(&self.groups[0].names).clone();
                self.watch(client, t, &name)?;
            }
        }
        self.schedule(self.now + Duration::from_secs(1), Ev::Probe);
        Ok(())
    }
}
