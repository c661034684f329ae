//! The checker's A71 rules: which servers each authority may use, when a lower-priority
//! server may be put in use, and the switch back once a higher one responds.

use super::*;

impl CheckedClient {
    /// A response from `server`: every authority that lists it stops using the servers
    /// after it (A71). Sound whether or not the authority had it in use: the client's
    /// servers in use are a prefix of the list, so any below it are dropped.
    pub(super) fn switch_back(&mut self, server: ServerId) {
        let config = self.servers[&server].config.clone();
        for (key, a) in &mut self.authorities {
            let Some(pos) = a.servers.iter().position(|c| *c == *config) else {
                continue;
            };
            for k in pos + 1..a.allowed {
                a.cut.insert(k, config.server_uri.clone());
                self.step.cut.insert((key.clone(), k));
            }
            a.allowed = a.allowed.min(pos + 1);
        }
    }

    pub(super) fn server_id_of(&self, config: &ServerConfig) -> Option<ServerId> {
        self.servers
            .iter()
            .find(|(_, s)| *s.config == *config)
            .map(|(id, _)| *id)
    }

    /// The first server before position `k` of authority `a` without a standing
    /// connectivity failure, if any.
    pub(super) fn unfailed_before(&self, a: &AuthorityModel, k: usize) -> Option<String> {
        a.servers[..k]
            .iter()
            .find(|c| {
                self.server_id_of(c)
                    .is_none_or(|id| !self.failed.contains(&id))
            })
            .map(|c| c.server_uri.clone())
    }

    /// Whether some watched resource of `authority` is uncached in the A71 sense: no
    /// watcher of it holds a value or does-not-exist.
    pub(super) fn has_uncached(&self, authority: &Option<String>) -> bool {
        let mut cached: BTreeMap<(&str, &str), bool> = BTreeMap::new();
        for w in self.watchers.values().filter(|w| w.authority == *authority) {
            let holds = match &w.held {
                Some(Ok(_)) => true,
                Some(Err(e)) => e.kind == ErrorKind::DoesNotExist,
                None => false,
            };
            *cached.entry((w.type_url, w.name.as_str())).or_default() |= holds;
        }
        cached.values().any(|c| !c)
    }

    /// The rule that the use of server #`k` of `authority` (beyond what it may use)
    /// breaks, and why.
    pub(super) fn fallback_violation(
        &self,
        now: Instant,
        authority: &Option<String>,
        k: usize,
        what: String,
    ) -> Violation {
        let a = &self.authorities[authority];
        let uri = &a.servers[k].server_uri;
        let unfailed = self.unfailed_before(a, k);
        if let (Some(by), Some(_)) = (a.cut.get(&k), &unfailed) {
            return violation(
                "switch-back-on-response",
                now,
                format!(
                    "{what}: {uri} (server #{k} of authority {authority:?}) stopped serving it \
                     when {by} responded, and it may not fall back again since"
                ),
            );
        }
        match unfailed {
            Some(up) => violation(
                "fallback-needs-failure",
                now,
                format!(
                    "{what}: {uri} is server #{k} of authority {authority:?}, and the \
                     higher-priority {up} has no connectivity failure standing"
                ),
            ),
            None => violation(
                "fallback-needs-uncached",
                now,
                format!(
                    "{what}: {uri} is server #{k} of authority {authority:?}, and every \
                     watched resource of it is cached (a value or does-not-exist)"
                ),
            ),
        }
    }

    /// Where server `server` sits in `authority`'s list, when the authority is watched
    /// and lists it.
    pub(super) fn position_in(
        &self,
        authority: &Option<String>,
        server: ServerId,
    ) -> Option<usize> {
        let config = &self.servers.get(&server)?.config;
        let a = self.authorities.get(authority)?;
        a.servers.iter().position(|c| *c == **config)
    }

    /// A71 fallback. The model (`AuthorityModel::allowed`) is brought up to date for
    /// the step (watched authorities use their primary; while every server before the
    /// next has a connectivity failure standing and some watched resource is uncached,
    /// the next may be used too), then the client is held to it:
    /// - a request emitted in the step names a resource of an authority only on servers
    ///   it may use;
    /// - a server with an open stream is one some watched authority may use (so a
    ///   started stream, and one left open after a switch-back, have a reason);
    /// - an open stream with no request outstanding is subscribed (per its last request
    ///   of each type) to an authority's names only on servers it may use: after a
    ///   switch-back, the request that unsubscribes them is emitted in that step, or as
    ///   soon as the outstanding one is sent.
    ///
    /// A use beyond the model breaks `switch-back-on-response` when a response from a
    /// higher-priority server took the server out of use, else `fallback-needs-failure`
    /// or `fallback-needs-uncached` for the condition that does not hold. Updates from
    /// servers not in use are checked as they are notified
    /// (`updates-only-from-server-in-use`).
    pub fn check_fallback(&mut self, now: Instant) -> Result<(), Violation> {
        let step = std::mem::take(&mut self.step);
        self.follow_watched_authorities();
        self.allow_fallback_where_due();
        self.check_step_requests(now, &step)?;
        self.check_open_streams(now, &step)
    }

    /// Watched authorities use their primary (at least); unwatched ones use nothing.
    fn follow_watched_authorities(&mut self) {
        let mut watched: BTreeMap<Option<String>, Vec<ServerConfig>> = BTreeMap::new();
        for w in self.watchers.values() {
            watched.entry(w.authority.clone()).or_insert_with(|| {
                let mut servers: Vec<ServerConfig> = Vec::new();
                for c in &w.servers {
                    if !servers.contains(c) {
                        servers.push(c.clone());
                    }
                }
                servers
            });
        }
        for (key, a) in &mut self.authorities {
            if !watched.contains_key(key) {
                a.allowed = 0;
                a.cut.clear();
            }
        }
        for (key, servers) in watched {
            let a = self.authorities.entry(key).or_default();
            a.servers = servers;
            a.allowed = a.allowed.max(1).min(a.servers.len());
        }
    }

    /// Fallback is allowed, one server further at a time, while its conditions hold:
    /// an uncached watched resource, and every server before the next one failed.
    fn allow_fallback_where_due(&mut self) {
        let keys: Vec<Option<String>> = self
            .authorities
            .iter()
            .filter(|(_, a)| a.allowed > 0)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &keys {
            if !self.has_uncached(key) {
                continue;
            }
            loop {
                let a = &self.authorities[key];
                let k = a.allowed;
                if k >= a.servers.len() || self.unfailed_before(a, k).is_some() {
                    break;
                }
                let a = self.authorities.get_mut(key).expect("known");
                a.allowed += 1;
                a.cut.remove(&k);
            }
        }
    }

    /// Requests name an authority's resources only on servers it may use. In the step
    /// that takes a server out of use, the client drops one authority at a time: a
    /// request emitted before it got to this one may still name its resources, if the
    /// stream is closed or the next request unsubscribes them (checked by
    /// [`check_open_streams`](Self::check_open_streams) and when that request is
    /// emitted).
    fn check_step_requests(&self, now: Instant, step: &FallbackStep) -> Result<(), Violation> {
        for (stream, server, type_url, names) in &step.requests {
            for name in names {
                let authority = authority_of(name);
                if let Some(k) = self.position_in(&authority, *server)
                    && k >= self.authorities[&authority].allowed
                    && !step.cut.contains(&(authority.clone(), k))
                {
                    return Err(self.fallback_violation(
                        now,
                        &authority,
                        k,
                        format!("{} request on {stream:?} names {name:?}", short(type_url)),
                    ));
                }
            }
        }
        Ok(())
    }

    /// An open stream needs an authority that may use its server (else the authority
    /// it was last taken out of use for, if any, is blamed), and an idle stream's
    /// subscription is only what the client has in use.
    fn check_open_streams(&self, now: Instant, step: &FallbackStep) -> Result<(), Violation> {
        for (id, sm) in &self.servers {
            let Some(stream) = sm.current else {
                continue;
            };
            let mut listed = None;
            let mut needed = false;
            for (key, a) in self.authorities.iter().filter(|(_, a)| a.allowed > 0) {
                if let Some(k) = a.servers.iter().position(|c| *c == *sm.config) {
                    needed |= k < a.allowed;
                    if listed.is_none() || a.cut.contains_key(&k) {
                        listed = Some((key, k));
                    }
                }
            }
            if let (false, Some((key, k))) = (needed, listed) {
                let what = if step.started.contains(id) {
                    format!("{stream:?} started")
                } else {
                    format!("{stream:?} left open")
                };
                return Err(self.fallback_violation(now, key, k, what));
            }
            let s = &self.streams[&stream];
            if s.outstanding.is_some() {
                continue;
            }
            for (type_url, st) in &s.types {
                for name in st.sent.keys() {
                    let authority = authority_of(name);
                    if let Some(k) = self.position_in(&authority, *id)
                        && k >= self.authorities[&authority].allowed
                    {
                        return Err(self.fallback_violation(
                            now,
                            &authority,
                            k,
                            format!(
                                "{stream:?} (no request outstanding) stays subscribed to {} {name:?}",
                                short(type_url)
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
