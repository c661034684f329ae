//! The checker's rules for what the client sends: a stream started once per server
//! and only with a reason, each SotW request held to the one-outstanding, nonce,
//! version, node and subscription rules (and to whether it NACKs exactly the
//! responses the reference judge rejects), streams closed and servers dropped.

use super::*;

impl CheckedClient {
    pub(super) fn on_start(
        &mut self,
        now: Instant,
        server: ServerId,
        config: &Arc<ServerConfig>,
        stream: StreamId,
    ) -> Result<(), Violation> {
        if stream.into_raw() <= self.max_stream {
            return Err(violation(
                "ids-never-reused",
                now,
                format!("stream id {stream:?} reused"),
            ));
        }
        self.max_stream = stream.into_raw();
        let watchers = self.watchers_on(config);
        let (lo, hi) = {
            let failures = self.servers.get(&server).map_or(0, |s| s.failures);
            self.backoff_window(failures.max(1))
        };
        let sm = self.servers.entry(server).or_insert_with(|| ServerModel {
            config: config.clone(),
            in_use: true,
            current: None,
            accepted: BTreeMap::new(),
            failures: 0,
            closed_at: now,
        });
        if *sm.config != **config {
            return Err(violation(
                "server-id-stable",
                now,
                format!(
                    "{server:?} was {} and is now {}",
                    sm.config.server_uri, config.server_uri
                ),
            ));
        }
        if let Some(current) = sm.current {
            return Err(violation(
                "one-stream-per-server",
                now,
                format!(
                    "{stream:?} started while {current:?} to {} is open",
                    config.server_uri
                ),
            ));
        }
        if watchers == 0 {
            return Err(violation(
                "stream-has-reason",
                now,
                format!(
                    "{stream:?} started to {} with nothing watched there",
                    config.server_uri
                ),
            ));
        }
        if sm.failures > 0 {
            let waited = now.saturating_duration_since(sm.closed_at);
            if waited < lo || (self.opts.exact_timing && waited > hi) {
                return Err(violation(
                    "backoff-respected",
                    now,
                    format!(
                        "after {} failed stream(s) to {}, the next started {waited:?} later; \
                         allowed {lo:?}..={hi:?}",
                        sm.failures, config.server_uri
                    ),
                ));
            }
        }
        sm.current = Some(stream);
        sm.in_use = true;
        self.step.started.insert(server);
        self.streams.insert(stream, StreamModel::new(server));
        Ok(())
    }

    pub(super) fn on_send(
        &mut self,
        now: Instant,
        stream: StreamId,
        req: &DiscoveryRequest,
    ) -> Result<(), Violation> {
        let server = self.check_request_may_go(now, stream, req)?;
        let names = self.names_verdict(server, req);
        self.step.requests.push((
            stream,
            server,
            req.type_url.clone(),
            req.resource_names.clone(),
        ));
        let accepted = self.servers[&server]
            .accepted
            .get(&req.type_url)
            .cloned()
            .unwrap_or_default();
        let s = self.streams.get_mut(&stream).expect("live");
        s.requests += 1;
        let st = s.types.entry(req.type_url.clone()).or_default();
        check_ack(now, stream, req, st, &accepted)?;
        st.pending_nack = false;
        st.requested = true;
        if let Err(expected) = names {
            return Err(violation(
                "request-names-are-subscription",
                now,
                format!(
                    "{} request names {:?}, watched {expected}",
                    short(&req.type_url),
                    req.resource_names
                ),
            ));
        }
        s.outstanding = Some((req.type_url.clone(), req.resource_names.clone()));
        Ok(())
    }

    /// A request may go on a live stream with no request waiting to be sent, for a
    /// registered type, with the node on the stream's first request only. Returns the
    /// stream's server.
    fn check_request_may_go(
        &self,
        now: Instant,
        stream: StreamId,
        req: &DiscoveryRequest,
    ) -> Result<ServerId, Violation> {
        let Some(s) = self.streams.get(&stream).filter(|s| s.alive) else {
            return Err(violation(
                "request-on-live-stream",
                now,
                format!("request on {stream:?}, not open"),
            ));
        };
        if let Some((t, _)) = &s.outstanding {
            return Err(violation(
                "one-outstanding-send",
                now,
                format!(
                    "{} request on {stream:?} while the {} request is not yet sent",
                    short(&req.type_url),
                    short(t)
                ),
            ));
        }
        if self.type_of(&req.type_url).is_none() {
            return Err(violation(
                "request-type-registered",
                now,
                format!("request for {}", req.type_url),
            ));
        }
        if req.node.is_some() != (s.requests == 0) {
            return Err(violation(
                "node-on-first-request-only",
                now,
                format!(
                    "request #{} on {stream:?} has node: {}",
                    s.requests + 1,
                    req.node.is_some()
                ),
            ));
        }
        Ok(s.server)
    }

    /// Whether the request's names are the subscription to `server`: sorted, without
    /// duplicates, every name watched only through this server, and no name not
    /// watched through it. Names of authorities with fallback servers may be there
    /// (which of them are in use is A71's business). The error says what was expected.
    fn names_verdict(&self, server: ServerId, req: &DiscoveryRequest) -> Result<(), String> {
        let config = &self.servers[&server].config;
        let of_type = || {
            self.watchers
                .values()
                .filter(|w| w.type_url == req.type_url)
        };
        let must: BTreeSet<&str> = of_type()
            .filter(|w| w.servers.len() == 1 && w.servers[0] == **config)
            .map(|w| w.name.as_str())
            .collect();
        let may: BTreeSet<&str> = of_type()
            .filter(|w| w.servers.contains(config))
            .map(|w| w.name.as_str())
            .collect();
        let sorted = req.resource_names.windows(2).all(|p| p[0] < p[1]);
        let names: BTreeSet<&str> = req.resource_names.iter().map(String::as_str).collect();
        if sorted && must.is_subset(&names) && names.is_subset(&may) {
            Ok(())
        } else {
            Err(format!(
                "all of {must:?}, within {may:?}, sorted, no duplicates"
            ))
        }
    }

    pub(super) fn on_close_action(
        &mut self,
        now: Instant,
        stream: StreamId,
    ) -> Result<(), Violation> {
        let Some(s) = self.streams.get_mut(&stream).filter(|s| s.alive) else {
            return Err(violation(
                "close-live-stream",
                now,
                format!("CloseStream({stream:?}) of a stream not open"),
            ));
        };
        s.alive = false;
        let server = s.server;
        self.servers.get_mut(&server).expect("server").current = None;
        Ok(())
    }

    pub(super) fn on_drop(&mut self, now: Instant, server: ServerId) -> Result<(), Violation> {
        let Some(sm) = self.servers.get(&server) else {
            return Err(violation(
                "drop-known-channel",
                now,
                format!("DropChannel({server:?}) never started"),
            ));
        };
        let config = sm.config.clone();
        let primary_of = self
            .watchers
            .values()
            .filter(|w| w.servers.first() == Some(&config))
            .count();
        if sm.current.is_some() || primary_of > 0 {
            return Err(violation(
                "drop-only-unwatched",
                now,
                format!("DropChannel({server:?}) with a stream open or watchers left"),
            ));
        }
        let sm = self.servers.get_mut(&server).expect("server");
        sm.accepted.clear();
        sm.failures = 0;
        sm.in_use = false;
        // A dropped channel forgets its failure, and no authority has it in use (nor,
        // the in-use servers being a prefix, any server after it).
        self.failed.remove(&server);
        for a in self.authorities.values_mut() {
            if let Some(pos) = a.servers.iter().position(|c| *c == *config) {
                a.allowed = a.allowed.min(pos);
            }
        }
        Ok(())
    }
}

/// The request answers the stream's last response of its type: that response's nonce,
/// the last accepted version, and a NACK (with a bounded, non-empty detail) exactly
/// when the response was rejected.
fn check_ack(
    now: Instant,
    stream: StreamId,
    req: &DiscoveryRequest,
    st: &StreamTypeModel,
    accepted: &str,
) -> Result<(), Violation> {
    let ty = short(&req.type_url);
    if req.response_nonce != st.nonce {
        return Err(violation(
            "nonce-is-last-received",
            now,
            format!(
                "{ty} request on {stream:?} has nonce {:?}, last received {:?}",
                req.response_nonce, st.nonce
            ),
        ));
    }
    if req.version_info != accepted {
        return Err(violation(
            "version-is-last-accepted",
            now,
            format!(
                "{ty} request on {stream:?} has version {:?}, last accepted {accepted:?}",
                req.version_info
            ),
        ));
    }
    match (&req.error_detail, st.pending_nack) {
        (Some(d), false) => Err(violation(
            "nack-only-for-rejected",
            now,
            format!(
                "{ty} NACK ({:?}) but the last response was valid or already answered",
                d.message
            ),
        )),
        (None, true) => Err(violation(
            "rejected-response-is-nacked",
            now,
            format!(
                "{ty} request acks version {:?} of a response with invalid content",
                req.version_info
            ),
        )),
        (Some(d), true) if d.message.is_empty() || d.message.len() > MAX_NACK_DETAIL_BYTES => {
            Err(violation(
                "nack-detail-bounded",
                now,
                format!("NACK detail of {} bytes", d.message.len()),
            ))
        }
        _ => Ok(()),
    }
}
