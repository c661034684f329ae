//! The simulated network: connections opened (or hung, refused, blackholed), bytes
//! sent each way with latency and partitions, connections failed and resumed, and
//! the events each of these becomes for the client and the management server.

use super::*;

impl World {
    pub(super) fn start_conn(
        &mut self,
        client: usize,
        server_id: ServerId,
        uri: &str,
        stream: StreamId,
    ) -> Result<(), SimFailure> {
        let Some(server) = self.servers.iter().position(|s| s.uri == uri) else {
            return Err(self.failure(
                "known-server",
                format!("stream to {uri}, which the bootstrap does not list"),
            ));
        };
        let id = self.next_conn;
        self.next_conn += 1;
        let blackholed = self
            .blackholes
            .get(&(client, server))
            .is_some_and(|until| *until > self.now);
        let fate = if blackholed || (self.safety() && self.rng.chance(self.plan.p_never)) {
            Fate::NeverEstablish
        } else if !self.servers[server].is_up() {
            Fate::Refused
        } else {
            Fate::Normal
        };
        let (delay, ev) = match fate {
            Fate::Normal => {
                let slow = self.safety() && self.rng.chance(self.plan.p_slow_connect);
                let d = if slow {
                    self.rng.millis(1_000, 40_000)
                } else {
                    self.rng.millis(1, self.plan.connect_ms)
                };
                (d, Ev::Connect { conn: id })
            }
            Fate::Refused => (
                self.rng.millis(1, 50),
                Ev::ConnectFail {
                    conn: id,
                    reason: "connection refused",
                },
            ),
            Fate::NeverEstablish => (
                CONNECT_TIMEOUT,
                Ev::ConnectFail {
                    conn: id,
                    reason: "connection attempt timed out",
                },
            ),
        };
        self.note(format_args!(
            "net: conn {id} for c{client} {stream:?} to {uri}: {fate:?} in {delay:?}"
        ));
        self.conns.insert(
            id,
            Conn {
                client,
                stream,
                server_id,
                server,
                state: ConnState::Connecting,
                fate,
                stalled: false,
                stall: 0,
                stall_span: (self.now, self.now),
                held: Vec::new(),
                last_activity: self.now,
                pending: None,
                backlog: Vec::new(),
                c2s_last: self.now,
                s2c_last: self.now,
                last_bytes: None,
            },
        );
        self.conn_of.insert((client, stream), id);
        self.schedule(self.now + delay, ev);
        Ok(())
    }

    pub(super) fn send_delay(&mut self) -> Duration {
        if self.safety() && self.rng.chance(self.plan.p_slow_send) {
            self.rng.millis(1_000, 30_000)
        } else {
            self.rng.millis(0, 2)
        }
    }

    pub(super) fn client_send(&mut self, client: usize, stream: StreamId, request: Wire) {
        let Some(&id) = self.conn_of.get(&(client, stream)) else {
            return;
        };
        let buffering = self.clients[client].buffering;
        let state = self.conns[&id].state;
        self.conns.get_mut(&id).expect("conn").pending = Some(request);
        match state {
            ConnState::Open => {
                let d = self.send_delay();
                self.schedule(self.now + d, Ev::SendDone { conn: id });
            }
            ConnState::Connecting if buffering => {
                let d = self.rng.millis(0, 5);
                self.schedule(self.now + d, Ev::BufferedSent { conn: id });
            }
            _ => {}
        }
    }

    pub(super) fn client_close(&mut self, client: usize, stream: StreamId) {
        let Some(&id) = self.conn_of.get(&(client, stream)) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("conn");
        c.state = ConnState::Closed;
        let server = c.server;
        if self.servers[server].has_stream(id) {
            let at = self.now + self.latency();
            self.schedule(at, Ev::ServerSeesClose { conn: id });
        }
    }

    /// The open connection `id` is partitioned until `until` (a partition already under
    /// way lasts until the later end): the client's keepalive fails it if it notices
    /// first, else it resumes when the partition lifts.
    pub(super) fn partition(&mut self, id: u64, until: Instant) {
        let now = self.now;
        let c = self.conns.get_mut(&id).expect("conn");
        if !c.stalled {
            c.stalled = true;
            c.stall_span = (now, until);
        }
        c.stall += 1;
        c.stall_span.1 = c.stall_span.1.max(until);
        let (stall, (began, until)) = (c.stall, c.stall_span);
        let keepalive = self.clients[c.client].keepalive;
        match keepalive::failure_at(keepalive, c.last_activity, began) {
            Some(fails) if fails < until => self.schedule(fails, Ev::Kill { conn: id, stall }),
            _ => self.schedule(until, Ev::Resume { conn: id, stall }),
        }
    }

    /// A partition of the open connection `id` lifts: TCP delivers the responses it
    /// held back, and the request waiting to go out goes.
    pub(super) fn resume(&mut self, id: u64) -> Result<(), SimFailure> {
        let c = self.conns.get_mut(&id).expect("conn");
        if c.state != ConnState::Open || !c.stalled {
            return Ok(());
        }
        c.stalled = false;
        c.stall += 1;
        let held = std::mem::take(&mut c.held);
        let has_pending = c.pending.is_some();
        self.stats.partitions_resumed += 1;
        self.note(format_args!(
            "net: conn {id} partition lifts, {} held response(s)",
            held.len()
        ));
        if has_pending {
            let d = self.send_delay();
            self.schedule(self.now + d, Ev::SendDone { conn: id });
        }
        // Now, in order: responses still in flight arrive after them.
        for bytes in held {
            if self.conns[&id].state != ConnState::Open {
                break;
            }
            self.receive(id, bytes)?;
        }
        Ok(())
    }

    /// The client reads a response on the open, unpartitioned connection `id`.
    pub(super) fn receive(&mut self, id: u64, bytes: Bytes) -> Result<(), SimFailure> {
        let c = self.conns.get_mut(&id).expect("conn");
        c.last_activity = self.now;
        c.last_bytes = Some(bytes.clone());
        let (client, stream) = (c.client, c.stream);
        self.deliver(client, Event::ResponseReceived { stream, bytes })
    }

    /// The transport gives up on a connection: a channel failure (when the client's
    /// transport reports them) and the stream's close.
    pub(super) fn fail_conn(&mut self, id: u64, reason: &str) -> Result<(), SimFailure> {
        let c = self.conns.get_mut(&id).expect("conn");
        if c.state == ConnState::Closed {
            return Ok(());
        }
        c.state = ConnState::Closed;
        let (client, stream, server_id, server) = (c.client, c.stream, c.server_id, c.server);
        self.servers[server].close_stream(id);
        self.note(format_args!("net: conn {id} fails: {reason}"));
        if self.clients[client].reports_connectivity {
            self.deliver(
                client,
                Event::ConnectivityFailure {
                    server: server_id,
                    reason: reason.to_string(),
                },
            )?;
        }
        self.deliver(
            client,
            Event::StreamClosed {
                stream,
                status: Status::new(Code::UNAVAILABLE, reason),
            },
        )
    }

    pub(super) fn send_to_server(&mut self, id: u64, request: Wire) {
        let lat = self.latency();
        let c = self.conns.get_mut(&id).expect("conn");
        let at = (self.now + lat).max(c.c2s_last);
        c.c2s_last = at;
        self.schedule(
            at,
            Ev::ServerRecv {
                conn: id,
                request: Box::new(request),
            },
        );
    }

    pub(super) fn send_to_client(&mut self, id: u64, bytes: Bytes) {
        let lat = self.latency();
        let c = self.conns.get_mut(&id).expect("conn");
        let at = (self.now + lat).max(c.s2c_last);
        c.s2c_last = at;
        self.schedule(at, Ev::ClientRecv { conn: id, bytes });
    }

    /// The server of `conn` sends its last response of `t` again (a fault).
    pub(super) fn duplicate(&mut self, conn: u64, t: &str, fresh: bool) {
        let server = &mut self.servers[self.conns[&conn].server];
        let dup: Option<Bytes> = if server.is_delta_stream(conn) {
            server
                .duplicate_delta(conn, t, fresh)
                .map(|r| r.encode_to_vec().into())
        } else {
            server
                .duplicate(conn, t, fresh)
                .map(|r| r.encode_to_vec().into())
        };
        if let Some(dup) = dup {
            self.note(format_args!(
                "fault: duplicate {} on conn {conn} (fresh nonce: {fresh})",
                short(t)
            ));
            self.send_to_client(conn, dup);
        }
    }

    pub(super) fn open_conns(&self) -> Vec<u64> {
        self.conns
            .iter()
            .filter(|(_, c)| c.state == ConnState::Open && !c.stalled)
            .map(|(k, _)| *k)
            .collect()
    }

    // ----- events -----

    pub(super) fn on_connect(&mut self, conn: u64) -> Result<(), SimFailure> {
        let c = &self.conns[&conn];
        if c.state != ConnState::Connecting || c.fate != Fate::Normal {
            return Ok(());
        }
        if !self.servers[c.server].is_up() {
            return self.fail_conn(conn, "connection refused");
        }
        let (client, stream, server) = (c.client, c.stream, c.server);
        if self.delta[server] {
            self.servers[server].open_delta_stream(conn);
        } else {
            self.servers[server].open_stream(conn);
        }
        let c = self.conns.get_mut(&conn).expect("conn");
        c.state = ConnState::Open;
        c.last_activity = self.now;
        let backlog = std::mem::take(&mut c.backlog);
        let has_pending = c.pending.is_some();
        for request in backlog {
            self.send_to_server(conn, request);
        }
        if has_pending {
            let d = self.send_delay();
            self.schedule(self.now + d, Ev::SendDone { conn });
        }
        self.deliver(client, Event::StreamStarted { stream })
    }

    pub(super) fn on_send_done(&mut self, conn: u64) -> Result<(), SimFailure> {
        let c = self.conns.get_mut(&conn).expect("conn");
        if c.state != ConnState::Open || c.stalled {
            return Ok(());
        }
        let Some(request) = c.pending.take() else {
            return Ok(());
        };
        let (client, stream) = (c.client, c.stream);
        self.send_to_server(conn, request);
        self.deliver(client, Event::RequestSent { stream })
    }

    /// A request handed to a connection before it opened has been written.
    pub(super) fn on_buffered_sent(&mut self, conn: u64) -> Result<(), SimFailure> {
        let c = &self.conns[&conn];
        match c.state {
            ConnState::Connecting if c.pending.is_some() => {
                let c = self.conns.get_mut(&conn).expect("conn");
                let request = c.pending.take().expect("pending");
                c.backlog.push(request);
                let (client, stream) = (c.client, c.stream);
                self.deliver(client, Event::RequestSent { stream })
            }
            ConnState::Open => self.on_send_done(conn),
            _ => Ok(()),
        }
    }

    /// A request reached the server: it answers after a flush delay when it has something due.
    pub(super) fn on_server_recv(
        &mut self,
        conn: u64,
        request: Box<Wire>,
    ) -> Result<(), SimFailure> {
        let server = self.conns[&conn].server;
        let srv = &mut self.servers[server];
        let due = srv.has_stream(conn)
            && match *request {
                Wire::Sotw(r) => srv.on_request(conn, &r),
                Wire::Delta(r) => srv.on_delta_request(conn, &r),
            };
        if due {
            self.schedule_flush(conn);
        }
        Ok(())
    }

    /// The server sends what is due on a stream, sometimes followed by a duplicate.
    pub(super) fn on_server_flush(&mut self, conn: u64) -> Result<(), SimFailure> {
        self.flush_due.remove(&conn);
        let server = self.conns[&conn].server;
        let rng = &mut self.rng;
        let responses: Vec<(String, Bytes)> = if self.servers[server].is_delta_stream(conn) {
            let out = self.servers[server].flush_delta(conn, |n| rng.index(n));
            out.into_iter()
                .map(|r| (r.type_url.clone(), r.encode_to_vec().into()))
                .collect()
        } else {
            let out = self.servers[server].flush(conn, |n| rng.index(n));
            out.into_iter()
                .map(|r| (r.type_url.clone(), r.encode_to_vec().into()))
                .collect()
        };
        for (t, bytes) in responses {
            self.send_to_client(conn, bytes);
            if self.safety() && self.rng.chance(self.plan.p_dup) {
                let fresh = self.rng.chance(0.5);
                self.duplicate(conn, &t, fresh);
            }
        }
        Ok(())
    }

    /// Response bytes reached the client, unless the connection is stalled (then held).
    pub(super) fn on_client_recv(&mut self, conn: u64, bytes: Bytes) -> Result<(), SimFailure> {
        let c = self.conns.get_mut(&conn).expect("conn");
        if c.state != ConnState::Open {
            return Ok(());
        }
        if c.stalled {
            c.held.push(bytes);
            return Ok(());
        }
        self.receive(conn, bytes)
    }

    /// The server ended the stream with a status.
    pub(super) fn on_client_closed(&mut self, conn: u64, status: Status) -> Result<(), SimFailure> {
        let c = self.conns.get_mut(&conn).expect("conn");
        if c.state != ConnState::Open {
            return Ok(());
        }
        c.state = ConnState::Closed;
        let (client, stream) = (c.client, c.stream);
        self.deliver(client, Event::StreamClosed { stream, status })
    }

    /// A stalled connection's keepalive expires, unless it resumed or stalled again since.
    pub(super) fn on_kill(&mut self, conn: u64, stall: u64) -> Result<(), SimFailure> {
        let c = &self.conns[&conn];
        if c.state != ConnState::Open || !c.stalled || c.stall != stall {
            return Ok(());
        }
        self.stats.keepalive_failures += 1;
        self.fail_conn(conn, "keep-alive timed out")
    }
}
