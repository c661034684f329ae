//! The end of a run: once healed, every client must converge on what the servers
//! hold (each watcher's state matching its server's resources), and the report. Also
//! the fixtures' self-check that starts each run.

use super::*;

impl World {
    /// Whether every watcher of `client` holds the server's current state.
    pub(super) fn converged(&self, client: usize) -> Result<(), String> {
        let cc = &self.clients[client].cc;
        let snapshot = cc.client().resource_snapshot();
        for (w, ws) in cc.watchers() {
            let group = &self.groups[self.group_of(&ws.name)];
            let server = &self.servers[group.servers[0]];
            let entry = snapshot
                .iter()
                .find(|r| r.type_url == ws.type_url && *r.name == *ws.name);
            let held = match &ws.held {
                None => "nothing".to_string(),
                Some(Ok(v)) => format!("{v:?}"),
                Some(Err(e)) => format!("error {:?}: {}", e.kind, e.status),
            };
            let ok = match server.resource(ws.type_url, &ws.name) {
                Some(SimResource::Valid(g)) => {
                    let want = valid_any(ws.type_url, &ws.name, g).value;
                    // A delta server's per-resource version is what the cache holds too.
                    let version_ok = |e: &xds_proto_core::ResourceSnapshot| {
                        !self.delta[group.servers[0]] || *e.version == *format!("g{g}")
                    };
                    matches!(&ws.held, Some(Ok(v))
                        if entry.is_some_and(|e| e.raw.as_ref() == Some(&want)
                            && e.value.as_ref() == Some(v) && version_ok(e)))
                }
                None => match &ws.held {
                    Some(Err(e)) => {
                        e.kind == ErrorKind::DoesNotExist
                            || (group.features.transient_timer && e.kind == ErrorKind::Timeout)
                    }
                    // Kept after a deletion unless it is a data error that drops it:
                    // a SotW LDS/CDS omission, or a delta removal, which a delta server
                    // sends for what it sent (a value from the fallback server, of a
                    // fallback generation, it knows nothing of and stays silent about).
                    Some(Ok(v)) => {
                        let from_primary = entry.is_some_and(|e| {
                            let generation = e
                                .version
                                .strip_prefix('g')
                                .and_then(|g| g.parse::<u32>().ok());
                            generation.is_some_and(|g| g < FALLBACK_GENERATION_OFFSET)
                        });
                        let dropped = if self.delta[group.servers[0]] {
                            from_primary
                        } else {
                            all_required(ws.type_url)
                        };
                        !(group.features.fail_on_data_errors && dropped)
                            && entry.is_some_and(|e| e.value.as_ref() == Some(v))
                    }
                    None => false,
                },
                Some(other) => {
                    return Err(format!(
                        "the server still holds {other:?} for {:?}",
                        ws.name
                    ));
                }
            };
            if !ok {
                return Err(format!(
                    "c{client} {w:?} ({} {:?}): server {} holds {:?}; the watcher holds {held}; the cache: {:?}",
                    short(ws.type_url),
                    ws.name,
                    server.uri,
                    server.resource(ws.type_url, &ws.name),
                    entry.map(|e| (e.status, e.version.clone())),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<SimReport, SimFailure> {
        for client in 0..self.clients.len() {
            if let Err(detail) = self.converged(client) {
                return Err(self.failure(
                    "liveness",
                    format!(
                        "{:?} after the heal, not converged: {detail}",
                        self.now.saturating_duration_since(self.heal_at)
                    ),
                ));
            }
            if let Some(t) = self.clients[client].cc.poll_timeout() {
                return Err(self.failure(
                    "quiescent-at-end",
                    format!("c{client} converged yet still has a timer at {t}: a timer outlived its reason"),
                ));
            }
        }
        self.note(format_args!("end: converged"));
        Ok(SimReport {
            seed: self.seed,
            trace_hash: self.hash.0,
            stats: self.stats,
            heal_at: self.heal_at,
            converged_after: self
                .converged_at
                .map(|t| t.saturating_duration_since(self.heal_at)),
            plan: self.plan.summary(),
            trace: std::mem::take(&mut self.trace),
        })
    }
}

/// The simulator's fixtures must decode as it intends: valid ones to their name,
/// invalid ones to an error that names them. Until the decoders are complete this is
/// the first thing to fail, with a message that says so.
pub(super) fn check_fixtures() -> Result<(), String> {
    for ty in builtin_types() {
        let t = ty.type_url();
        let any = valid_any(t, "probe", 1);
        match ty.decode(&any.value) {
            Ok((name, _)) if name == "probe" => {}
            other => return Err(format!("valid {} fixture decodes to {other:?}", short(t))),
        }
        if let Some(bad) = invalid_any(t, "probe") {
            match ty.decode(&bad.value) {
                Err(e) if e.name.as_deref() == Some("probe") => {}
                other => return Err(format!("invalid {} fixture decodes to {other:?}", short(t))),
            }
        }
    }
    Ok(())
}
