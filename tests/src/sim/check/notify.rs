//! The checker's rules for what watchers hear (A88 and A57): each notification
//! matched against the model of what its watcher holds, the does-not-exist timer's
//! eligibility, a new watcher's one initial state, every watcher of a resource told
//! the same, connectivity errors reported, and the cache applied from responses.

use super::*;

impl CheckedClient {
    pub(super) fn on_notify(
        &mut self,
        now: Instant,
        ctx: &Ctx,
        n: &Notification,
    ) -> Result<(), Violation> {
        let w = self.addressee(now, n)?;
        let what = || told(n, w);
        if let Ctx::Response { server, .. } = ctx {
            self.check_server_in_use(now, w, server, &what)?;
        }
        match &n.event {
            WatchEvent::AmbientError(_) => {
                if w.held.is_none() {
                    return Err(violation(
                        "ambient-needs-state",
                        now,
                        format!("{} before any state", what()),
                    ));
                }
            }
            WatchEvent::Changed(Ok(v)) => check_value(now, ctx, n, w, v, &what)?,
            WatchEvent::Changed(Err(e)) => {
                check_error_replaces(now, w, e, &what)?;
                if matches!(e.kind, ErrorKind::DoesNotExist | ErrorKind::Timeout) {
                    self.check_dne(now, ctx, n, e, &what())?;
                }
            }
            other => panic!("the checker does not know the event {other:?}"),
        }
        let w = self.watchers.get_mut(&n.watcher).expect("known");
        match &n.event {
            WatchEvent::Changed(state) => {
                w.held = Some(state.clone());
                w.ambient = false;
            }
            WatchEvent::AmbientError(_) => w.ambient = true,
            _ => {}
        }
        Ok(())
    }

    /// The watcher `n` is for: a live one, of the type and name it was told about.
    fn addressee(&self, now: Instant, n: &Notification) -> Result<&WatcherState, Violation> {
        let Some(w) = self.watchers.get(&n.watcher) else {
            let rule = if self.cancelled.contains(&n.watcher) {
                "cancelled-watcher-silent"
            } else {
                "unknown-watcher"
            };
            return Err(violation(
                rule,
                now,
                format!("{:?} told {}", n.watcher, describe(&n.event)),
            ));
        };
        if n.type_url != w.type_url || *n.name != *w.name {
            return Err(violation(
                "notification-matches-watch",
                now,
                format!(
                    "{:?} watches {} {} but was told about {} {}",
                    n.watcher,
                    short(w.type_url),
                    w.name,
                    short(n.type_url),
                    n.name
                ),
            ));
        }
        Ok(w)
    }

    /// A response notifies only when it comes from a server the watcher's authority
    /// has in use.
    fn check_server_in_use(
        &self,
        now: Instant,
        w: &WatcherState,
        server: &ServerConfig,
        what: &dyn Fn() -> String,
    ) -> Result<(), Violation> {
        let none = AuthorityModel::default();
        let a = self.authorities.get(&w.authority).unwrap_or(&none);
        let pos = a.servers.iter().position(|c| c == server);
        if pos.is_some_and(|p| p < a.allowed) {
            return Ok(());
        }
        Err(violation(
            "updates-only-from-server-in-use",
            now,
            format!(
                "{} by a response from {} ({}), which authority {:?} does not have in use \
                 (it may use {:?})",
                what(),
                server.server_uri,
                match pos {
                    Some(p) => format!("its server #{p}"),
                    None => "not one of its servers".to_string(),
                },
                w.authority,
                a.servers[..a.allowed]
                    .iter()
                    .map(|c| c.server_uri.as_str())
                    .collect::<Vec<_>>()
            ),
        ))
    }

    pub(super) fn check_dne(
        &self,
        now: Instant,
        ctx: &Ctx,
        n: &Notification,
        e: &XdsError,
        what: &str,
    ) -> Result<(), Violation> {
        let w = &self.watchers[&n.watcher];
        match ctx {
            Ctx::Timeout { pre } => {
                let entry = pre
                    .iter()
                    .find(|r| r.type_url == w.type_url && *r.name == *w.name);
                if entry.is_some_and(|r| {
                    r.value.is_some() || r.status == ResourceStatusKind::DoesNotExist
                }) {
                    return Err(violation(
                        "dne-never-for-cached",
                        now,
                        format!("{what}, but it was cached: {entry:?}"),
                    ));
                }
                self.dne_eligible(now, w).map_err(|why| {
                    violation("dne-timer-eligibility", now, format!("{what}: {why}"))
                })
            }
            Ctx::Response {
                verdict: v,
                fail_on_data_errors,
                all_required,
                removed,
                ..
            } => {
                let not_found = v
                    .server_errors
                    .get(&w.name)
                    .is_some_and(|codes| codes.contains(&Code::NOT_FOUND));
                let deleted = *fail_on_data_errors
                    && *all_required
                    && !v.unnamed_error
                    && !v.present.contains(&w.name);
                // Delta: a removal is a deletion, of a cached value only under
                // fail_on_data_errors (cached-value-kept holds the rest).
                let deleted = deleted || removed.contains(&w.name);
                if e.kind == ErrorKind::DoesNotExist && (not_found || deleted) {
                    Ok(())
                } else {
                    Err(violation(
                        "dne-needs-a-reason",
                        now,
                        format!("{what} on a response with no NOT_FOUND or deletion for it"),
                    ))
                }
            }
            Ctx::Watch { .. } => Ok(()), // checked against the cache by check_initial_state
            _ => Err(violation(
                "dne-needs-a-reason",
                now,
                format!("{what} on an input that cannot cause it"),
            )),
        }
    }

    /// The A57 conditions for the does-not-exist timer to have run out: a live stream
    /// to a server of the resource has been connected, and the subscribing request sent
    /// on it, for at least the whole timeout.
    pub(super) fn dne_eligible(&self, now: Instant, w: &WatcherState) -> Result<(), String> {
        let mut why = Vec::new();
        for (id, s) in self.streams.iter().filter(|(_, s)| s.alive) {
            if !w.servers.contains(&self.servers[&s.server].config) {
                continue;
            }
            let timeout = self.resource_timeout_of(&self.servers[&s.server].config);
            let st = s.types.get(w.type_url);
            let sent = st.and_then(|st| st.sent.get(&w.name));
            let unsubscribed = st.is_some_and(|st| st.ever_sent.contains(&w.name));
            let dropped_unsent = st.is_some_and(|st| st.dropped_unsent.contains(&w.name));
            match (s.connected_since, sent) {
                (Some(c), Some(t)) => {
                    let since = c.max(*t);
                    if now >= since + timeout {
                        return Ok(());
                    }
                    let hint = if dropped_unsent {
                        "; the name was unwatched once before any request reported sent named it"
                    } else {
                        ""
                    };
                    why.push(format!("{id:?}: connected and sent only since {since}{hint}"));
                }
                (None, _) => why.push(format!("{id:?}: not connected")),
                (_, None) if unsubscribed => why.push(format!(
                    "{id:?}: subscription not reported sent since the name was unsubscribed \
                     (an earlier request reported sent had named it)"
                )),
                (_, None) if dropped_unsent => why.push(format!(
                    "{id:?}: subscription not reported sent; the name was unwatched once before any \
                     request reported sent named it"
                )),
                (_, None) => why.push(format!("{id:?}: subscription not reported sent")),
            }
        }
        if why.is_empty() {
            why.push("no open stream to its server".to_string());
        }
        Err(format!(
            "the resource timer has not run on a connected stream ({})",
            why.join("; ")
        ))
    }

    /// A88: the resource timer runs longer on a server that treats it as transient.
    pub(super) fn resource_timeout_of(&self, server: &ServerConfig) -> Duration {
        if server.server_features.resource_timer_is_transient_error {
            self.transient_resource_timeout
        } else {
            self.resource_timeout
        }
    }

    pub(super) fn check_initial_state(
        &self,
        now: Instant,
        watcher: WatcherId,
        pre: Option<&ResourceSnapshot>,
        heard: &Heard,
        actions: &[Action],
    ) -> Result<(), Violation> {
        if let Some((other, _)) = heard.iter().find(|(w, _)| **w != watcher) {
            return Err(violation(
                "one-initial-state",
                now,
                format!("watching {watcher:?} notified {other:?}"),
            ));
        }
        let events = heard.get(&watcher).map(Vec::as_slice).unwrap_or_default();
        let changed = events
            .iter()
            .filter(|e| matches!(e, WatchEvent::Changed(_)))
            .count();
        let bad = |why: String| {
            Err(violation(
                "one-initial-state",
                now,
                format!("{watcher:?}: {why}; got {events:?}"),
            ))
        };
        if changed > 1 {
            return bad("more than one initial Changed".to_string());
        }
        let first = events.first();
        match pre {
            Some(p) if p.value.is_some() => match first {
                Some(WatchEvent::Changed(Ok(v))) if Some(v) == p.value.as_ref() => {}
                _ => return bad("a cached resource must be delivered first".to_string()),
            },
            Some(p) if p.status == ResourceStatusKind::DoesNotExist => match first {
                Some(WatchEvent::Changed(Err(e))) if e.kind == ErrorKind::DoesNotExist => {}
                _ => return bad("a resource known not to exist must say so first".to_string()),
            },
            Some(p)
                if matches!(
                    p.status,
                    ResourceStatusKind::Nacked
                        | ResourceStatusKind::ReceivedError
                        | ResourceStatusKind::Timeout
                ) =>
            {
                if !matches!(first, Some(WatchEvent::Changed(Err(_)))) {
                    return bad(format!(
                        "a resource in state {:?} must report its error first",
                        p.status
                    ));
                }
            }
            _ => {
                let ok = match events {
                    [] => true,
                    [WatchEvent::Changed(Err(e))] => e.kind == ErrorKind::Connectivity,
                    _ => false,
                };
                if !ok {
                    return bad(
                        "an unknown resource gets nothing or the standing connectivity error"
                            .to_string(),
                    );
                }
            }
        }
        if pre.is_some()
            && let Some(a) = actions.iter().find(|a| !matches!(a, Action::Notify(_)))
        {
            return Err(violation(
                "no-request-for-known-resource",
                now,
                format!("watching an already subscribed resource produced {a:?}"),
            ));
        }
        Ok(())
    }

    /// Every watcher of a resource hears the same, except that the value told again
    /// when an ambient error clears reaches only the watchers that held that error.
    pub(super) fn check_notify_all(
        &self,
        now: Instant,
        heard: &Heard,
        ambient_before: &BTreeMap<WatcherId, ResourceValue>,
    ) -> Result<(), Violation> {
        for (id, events) in heard {
            let w = &self.watchers[id];
            // Told the value it held again (no-redundant-update allowed it: a clearing).
            let clearing = match &events[..] {
                [WatchEvent::Changed(Ok(v))] => ambient_before.get(id) == Some(v),
                _ => false,
            };
            for (other, ow) in &self.watchers {
                let spared =
                    clearing && !ambient_before.contains_key(other) && !heard.contains_key(other);
                if ow.type_url == w.type_url
                    && ow.name == w.name
                    && heard.get(other) != Some(events)
                    && !spared
                {
                    return Err(violation(
                        "notify-all-watchers",
                        now,
                        format!(
                            "{id:?} told {events:?} but {other:?} of the same resource told {:?}",
                            heard.get(other)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    pub(super) fn check_connectivity_reported(
        &self,
        now: Instant,
        server: ServerId,
        heard: &Heard,
    ) -> Result<(), Violation> {
        let config = self.servers[&server].config.clone();
        for (id, w) in &self.watchers {
            let on_server = w.servers.contains(&config);
            let events = heard.get(id).map(Vec::as_slice).unwrap_or_default();
            let told = matches!(events, [WatchEvent::Changed(Err(e)) | WatchEvent::AmbientError(e)] if e.kind == ErrorKind::Connectivity);
            // With fallback servers the authority may fall back instead, or not be on
            // this server at the moment: then nothing is said.
            let ok = if !on_server {
                events.is_empty()
            } else if w.servers.len() == 1 {
                told
            } else {
                told || events.is_empty()
            };
            if !ok {
                return Err(violation(
                    "connectivity-reported",
                    now,
                    format!(
                        "connectivity failure of {}: {id:?} (on it: {on_server}) told {events:?}",
                        config.server_uri
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn check_cache(
        &self,
        now: Instant,
        type_url: &str,
        server: &ServerConfig,
        v: &Verdict,
        pre: &[ResourceSnapshot],
    ) -> Result<(), Violation> {
        for r in self
            .client
            .resource_snapshot()
            .iter()
            .filter(|r| r.type_url == type_url)
        {
            // Only a name's own server writes it (with fallback servers, A71 decides
            // which of them that is at the moment: not checked here).
            let sole_server = self
                .watchers
                .values()
                .find(|w| w.type_url == type_url && *w.name == *r.name)
                .is_some_and(|w| w.servers.len() == 1 && w.servers[0] == *server);
            if let Some(bytes) = v.valid.get(&*r.name)
                && sole_server
                && r.raw.as_ref() != Some(bytes)
            {
                return Err(violation(
                    "valid-resources-applied",
                    now,
                    format!(
                        "{} {:?} was valid in the response but the cache holds other bytes",
                        short(type_url),
                        r.name
                    ),
                ));
            }
            if v.invalid.contains(&*r.name) && !v.server_errors.contains_key(&*r.name) {
                let before = pre
                    .iter()
                    .find(|p| p.type_url == r.type_url && p.name == r.name);
                // A88: under fail_on_data_errors a NACK drops the cached value.
                let dropped = server.server_features.fail_on_data_errors && r.value.is_none();
                if let Some(b) = before
                    && (b.raw != r.raw || b.value != r.value)
                    && !dropped
                {
                    return Err(violation(
                        "nack-keeps-cache",
                        now,
                        format!(
                            "{} {:?} was rejected but its cached value changed",
                            short(type_url),
                            r.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// How a violation names the notification: the watcher, its watch, and the event.
fn told(n: &Notification, w: &WatcherState) -> String {
    format!(
        "{:?} ({} {:?}) told {}",
        n.watcher,
        short(w.type_url),
        w.name,
        describe(&n.event)
    )
}

/// A value is news (not what the watcher holds, unless an error came between), and
/// comes from the input being handled: a response that carried it valid, from one of
/// the watch's servers, or the watch itself (a new watcher's cached state).
fn check_value(
    now: Instant,
    ctx: &Ctx,
    n: &Notification,
    w: &WatcherState,
    v: &ResourceValue,
    what: &dyn Fn() -> String,
) -> Result<(), Violation> {
    if let Some(Ok(old)) = &w.held
        && old == v
        && !w.ambient
    {
        return Err(violation(
            "no-redundant-update",
            now,
            format!("{}, equal to what it holds", what()),
        ));
    }
    let carried = match ctx {
        Ctx::Response {
            verdict, server, ..
        } => verdict.valid.contains_key(&w.name) && w.servers.contains(server),
        Ctx::Watch { watcher, .. } => *watcher == n.watcher,
        _ => false,
    };
    if carried {
        return Ok(());
    }
    Err(violation(
        "values-come-from-responses",
        now,
        format!("{} on an input that carried no such value", what()),
    ))
}

/// An error replaces a cached value only when it is a data error under
/// `fail_on_data_errors` (A88), and never replaces a does-not-exist with a
/// connectivity error (that one is ambient).
fn check_error_replaces(
    now: Instant,
    w: &WatcherState,
    e: &XdsError,
    what: &dyn Fn() -> String,
) -> Result<(), Violation> {
    let fail_on_data_errors = w
        .servers
        .first()
        .is_some_and(|s| s.server_features.fail_on_data_errors);
    match &w.held {
        Some(Ok(_)) => {
            let data_error = matches!(e.kind, ErrorKind::DoesNotExist | ErrorKind::Invalid)
                || (e.kind == ErrorKind::ServerReported
                    && e.status.code == Code::PERMISSION_DENIED);
            if !(fail_on_data_errors && data_error) {
                return Err(violation(
                    "cached-value-kept",
                    now,
                    format!("{} replacing a cached value", what()),
                ));
            }
        }
        Some(Err(h)) if h.kind == ErrorKind::DoesNotExist && e.kind == ErrorKind::Connectivity => {
            return Err(violation(
                "cached-value-kept",
                now,
                format!(
                    "{} replacing does-not-exist (a cached state: must be ambient)",
                    what()
                ),
            ));
        }
        _ => {}
    }
    Ok(())
}
