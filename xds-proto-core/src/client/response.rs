//! Applying a `DiscoveryResponse`, in phases: decode its items (recognising a SotW
//! resend's unchanged resources without decoding them, and duplicates), check its
//! TP3 `resource_errors`, apply the values and NACKed resources, then the
//! server-reported errors, then SotW deletions. The result is the ACK's version or
//! the NACK's detail.

use std::sync::Arc;

use bytes::Bytes;

use super::cache::{ResourceTable, Slot};
use super::envelope;
use super::status::NodeTag;
use super::{
    Action, Code, MAX_NACK_DETAIL_BYTES, Status, StreamId, TypeIdx, UpdateFailure, XdsClient,
    XdsError,
};
use crate::DetHashMap as HashMap;
use crate::bootstrap::ServerConfig;
use crate::names;
use crate::pb::envoy::service::discovery::v3 as discovery;
use crate::resource::{self, ResourceValue};
use crate::time::Instant;

/// The response being applied, as every phase needs it.
pub(super) struct ResponseContext {
    pub(super) server: usize,
    pub(super) t: TypeIdx,
    pub(super) type_url: &'static str,
    pub(super) config: Arc<ServerConfig>,
    pub(super) version_info: String,
    pub(super) version: Arc<str>,
    /// The response's number (see `cache::Seen`).
    pub(super) stamp: u64,
    pub(super) now: Instant,
    /// What the errors told to watchers end with.
    pub(super) node: NodeTag,
}

impl ResponseContext {
    /// Logs the applied response (`count` resources, of which `decoded.valid` were
    /// valid) and returns the version to ACK, or the NACK's error detail listing
    /// every rejected resource.
    pub(super) fn outcome(
        self,
        decoded: &Decoded,
        count: u64,
        server_errors: usize,
    ) -> Result<String, String> {
        tracing::debug!(
            server = %self.config.server_uri,
            type_url = self.type_url,
            version = %self.version_info,
            delta = self.config.is_delta(),
            valid = decoded.valid,
            invalid = count - decoded.valid,
            server_errors,
            "response applied"
        );
        if decoded.errors.is_empty() {
            Ok(self.version_info)
        } else {
            Err(nack_detail(&decoded.errors))
        }
    }
}

/// What a response says about one named resource.
pub(super) enum Outcome {
    /// The same bytes as cached (found without decoding).
    Unchanged,
    /// Decoded and valid; may still equal the cached value.
    Changed(ResourceValue, Bytes),
    /// Rejected, with the reason.
    Invalid(String),
}

/// Whether a name was already seen in the response being applied.
enum Seen {
    /// First time: its slot if watched.
    First(Option<Slot>),
    /// A duplicate of the item at this position.
    Again(usize),
}

/// The response's items once decoded, and what was wrong with them.
#[derive(Default)]
pub(super) struct Decoded {
    /// Every named resource in order: watched ones by slot (each entry stamped with
    /// this response and its item), others with no slot.
    pub(super) items: Vec<(Option<Slot>, Outcome)>,
    /// Delta: each item's own version (SotW items take the response's).
    pub(super) versions: Vec<Arc<str>>,
    /// The unwatched names and their item, only to find duplicates.
    pub(super) unwatched: HashMap<String, usize>,
    /// The NACK's reasons.
    pub(super) errors: Vec<String>,
    /// A resource failed before its name was known: deletions cannot be told apart.
    unnamed_error: bool,
    /// Resources that decoded and validated (A78); the others were invalid.
    pub(super) valid: u64,
}

impl XdsClient {
    pub(super) fn on_response(&mut self, stream_id: StreamId, bytes: Bytes, now: Instant) {
        let Some(server) = self.server_of_stream(stream_id) else {
            return;
        };
        if self.servers[server].config.is_delta() {
            self.on_delta_response(server, stream_id, bytes, now);
            return;
        }
        let response = match envelope::decode(bytes) {
            Ok(r) => r,
            Err(e) => return self.undecodable(server, stream_id, "DiscoveryResponse", &e, now),
        };
        tracing::debug!(
            server = %self.servers[server].config.server_uri,
            stream = %stream_id,
            type_url = %response.type_url,
            version = %response.version_info,
            nonce = %response.nonce,
            resources = response.resources.len(),
            resource_errors = response.resource_errors.len(),
            "response received"
        );
        let Some(t) = self.accept_response(server, &response.type_url, &response.nonce, now) else {
            return;
        };
        let outcome = self.apply_response(server, t, response, now);
        self.servers[server].record_outcome(t, outcome);
        self.pump(server);
    }

    /// A response that is no message of its kind (`what`): the stream is unusable, as
    /// gRPC treats a message it cannot parse.
    pub(super) fn undecodable(
        &mut self,
        server: usize,
        stream_id: StreamId,
        what: &str,
        error: &str,
        now: Instant,
    ) {
        tracing::warn!(
            server = %self.servers[server].config.server_uri,
            stream = %stream_id,
            %error,
            "undecodable {what}; closing the stream"
        );
        self.actions
            .push_back(Action::CloseStream { stream: stream_id });
        let status = Status::new(Code::INTERNAL, format!("failed to decode {what}: {error}"));
        self.on_stream_closed(server, status, now);
    }

    /// A response of `type_url` arrived on `server`'s stream: the stream is connected
    /// and the server healthy (A57, A71). Returns the type to apply it to, or `None`
    /// for a type this client does not know or never requested on this stream (an ACK
    /// would subscribe a wildcard); records the nonce to (N)ACK.
    pub(super) fn accept_response(
        &mut self,
        server: usize,
        type_url: &str,
        nonce: &str,
        now: Instant,
    ) -> Option<TypeIdx> {
        self.mark_connected(server, now);
        if let Some(stream) = self.servers[server].stream.as_mut() {
            stream.saw_response = true;
        }
        self.set_healthy(server);
        let t = self.type_index(type_url)?; // unknown: ignored, as gRPC does
        let stream = self.servers[server].stream.as_mut()?;
        if !stream.types[t].ever_sent {
            return None;
        }
        stream.types[t].nonce = nonce.to_string();
        Some(t)
    }

    /// Validates and applies one response. Returns the version to ACK, or the NACK's
    /// error detail.
    fn apply_response(
        &mut self,
        server: usize,
        t: TypeIdx,
        response: envelope::DiscoveryResponse,
        now: Instant,
    ) -> Result<String, String> {
        let cx = self.response_context(server, t, response.version_info, now);
        let count = response.resources.len();
        let mut decoded = self.decode_items(&cx, response.resources);
        let server_errors = self.check_resource_errors(&cx, response.resource_errors, &mut decoded);
        self.adopt_for_wildcard(&cx, &mut decoded);
        let present_here = self.apply_items(&cx, &mut decoded);
        self.apply_server_errors(&cx, &server_errors);
        if self.types[t].all_resources_required_in_sotw() && !decoded.unnamed_error {
            self.apply_deletions(&cx, present_here, &server_errors);
            self.apply_wildcard_deletions(&cx);
        }
        cx.outcome(&decoded, count as u64, server_errors.len())
    }

    /// The context of the next response applied on `server` for type `t`: the
    /// response's number is taken here, once per response.
    pub(super) fn response_context(
        &mut self,
        server: usize,
        t: TypeIdx,
        version_info: String,
        now: Instant,
    ) -> ResponseContext {
        self.responses_applied += 1;
        ResponseContext {
            server,
            t,
            type_url: self.types[t].type_url(),
            config: self.servers[server].config.clone(),
            version: Arc::from(version_info.as_str()),
            version_info,
            stamp: self.responses_applied,
            now,
            node: self.node_tag.clone(),
        }
    }

    /// Decodes the response's resources into items, and counts them for A78.
    fn decode_items(&mut self, cx: &ResponseContext, resources: Vec<envelope::Any>) -> Decoded {
        let ty = self.types[cx.t];
        let count = resources.len();
        let mut decoded = Decoded {
            items: Vec::with_capacity(count),
            ..Decoded::default()
        };
        let last_slots = std::mem::take(&mut self.servers[cx.server].types[cx.t].last_slots);
        let mut order: Vec<Option<Slot>> = Vec::with_capacity(count);
        // Each resource's type URL against the response's, in one pass over the envelope
        // just decoded (checked between decodes, each check was a cache miss).
        let type_matches: Vec<bool> = resources
            .iter()
            .map(|a| a.type_url == cx.type_url.as_bytes())
            .collect();
        let context = resource::DecodeContext::new(&self.config.bootstrap)
            .with_lb_policies(&self.config.lb_policies);
        let table = &mut self.resources[cx.t];
        for (i, any) in resources.into_iter().enumerate() {
            // SotW resends: the same bytes at the same position as in the last response
            // are the cached resource, unchanged; no decode, no name lookup.
            if let Some(Some(slot)) = last_slots.get(i)
                && type_matches[i]
                && table.see_unchanged(*slot, cx.stamp, decoded.items.len() as u32, &any.value)
            {
                decoded.valid += 1;
                decoded.items.push((Some(*slot), Outcome::Unchanged));
                order.push(Some(*slot));
                continue;
            }
            let result = envelope::decode_one(&ty, &context, any, type_matches[i]);
            order.push(decoded.note(table, i, result, cx.stamp));
        }
        let sts = &mut self.servers[cx.server].types[cx.t];
        sts.last_slots = order;
        sts.updates_valid += decoded.valid;
        sts.updates_invalid += (count as u64) - decoded.valid;
        decoded
    }

    /// Checks the TP3 `resource_errors`; returns the valid ones by name.
    pub(super) fn check_resource_errors(
        &self,
        cx: &ResponseContext,
        resource_errors: Vec<discovery::ResourceError>,
        decoded: &mut Decoded,
    ) -> Vec<(Arc<str>, Status)> {
        let mut server_errors = Vec::new();
        for (j, re) in resource_errors.into_iter().enumerate() {
            let name = canonical_name(re.resource_name.map(|n| n.name).unwrap_or_default());
            let status = re
                .error_detail
                .map(|s| Status::new(Code(s.code), s.message));
            if name.is_empty() {
                decoded
                    .errors
                    .push(format!("resource_errors[{j}]: empty resource name"));
                continue;
            }
            let present = decoded
                .item_of(&self.resources[cx.t], &name, cx.stamp)
                .is_some_and(|k| !matches!(decoded.items[k].1, Outcome::Invalid(_)));
            let error = match status {
                None => format!("resource_errors[{j}]: {name}: missing error_detail"),
                Some(s) if s.code == Code::OK => {
                    format!("resource_errors[{j}]: {name}: error_detail has status OK")
                }
                Some(_) if present => {
                    format!("resource_errors[{j}]: {name}: resource is also present in resources")
                }
                Some(s) => {
                    server_errors.push((self.intern(cx.t, name), s));
                    continue;
                }
            };
            decoded.errors.push(error);
        }
        server_errors
    }

    /// Applies the items to the watched resources this server serves: new values are
    /// cached and told, invalid ones NACKed, and their does-not-exist timers stop.
    /// Returns how many watched resources of this server the response named.
    pub(super) fn apply_items(&mut self, cx: &ResponseContext, decoded: &mut Decoded) -> usize {
        let items = std::mem::take(&mut decoded.items);
        let versions = std::mem::take(&mut decoded.versions);
        let table = &mut self.resources[cx.t];
        let mut present_here = 0usize;
        for (k, (slot, outcome)) in items.into_iter().enumerate() {
            let Some(entry) = slot.and_then(|slot| table.at_mut(slot)) else {
                continue; // not subscribed: ignored
            };
            let authority = &self.authorities[entry.authority];
            if authority.active() != Some(cx.server) {
                continue; // served by another server of its authority (A71)
            }
            let named = !entry.watchers.is_empty();
            debug_assert!(
                !named
                    || self.servers[cx.server].types[cx.t]
                        .subscribed
                        .contains(&entry.name),
                "the active server's subscription names every watched resource it serves"
            );
            present_here += usize::from(named);
            entry.disarm_timers(&mut self.timers, None);
            let update = match outcome {
                Outcome::Invalid(message) => {
                    tracing::trace!(name = %entry.name, %message, "resource rejected");
                    let uri = &cx.config.server_uri;
                    let error = XdsError::invalid(
                        &cx.node,
                        cx.type_url,
                        &entry.name,
                        uri,
                        &cx.version_info,
                        &message,
                    );
                    entry.rare_mut().nack = Some(UpdateFailure {
                        details: message,
                        version: cx.version_info.clone(),
                        at: cx.now,
                    });
                    // A88: a NACK is a data error; it drops the cached value only
                    // under fail_on_data_errors.
                    let drop_cached = cx.config.server_features.fail_on_data_errors;
                    entry.fail(&mut self.actions, cx.type_url, error, drop_cached);
                    continue;
                }
                Outcome::Unchanged => None,
                Outcome::Changed(value, raw) => Some((value, raw)),
            };
            let version = versions.get(k).unwrap_or(&cx.version);
            let source = (version, cx.server);
            entry.fill(&mut self.actions, cx.type_url, update, source, cx.now);
        }
        present_here
    }

    /// Applies the server-reported errors (TP3) to the resources this server serves.
    pub(super) fn apply_server_errors(
        &mut self,
        cx: &ResponseContext,
        server_errors: &[(Arc<str>, Status)],
    ) {
        let features = cx.config.server_features;
        let table = &mut self.resources[cx.t];
        for (name, status) in server_errors {
            let Some(entry) = table.get_mut(name) else {
                continue;
            };
            let authority = &self.authorities[entry.authority];
            if authority.active() != Some(cx.server) {
                continue; // served by another server of its authority (A71)
            }
            tracing::trace!(name = %name, %status, "server reported an error");
            entry.disarm_timers(&mut self.timers, None);
            let failure = UpdateFailure {
                details: status.to_string(),
                version: cx.version_info.clone(),
                at: cx.now,
            };
            let data_error =
                status.code == Code::NOT_FOUND || status.code == Code::PERMISSION_DENIED;
            let drop_cached = data_error && features.fail_on_data_errors;
            if status.code == Code::NOT_FOUND && (entry.cached.is_none() || drop_cached) {
                entry.rare_mut().does_not_exist = Some(failure.clone());
            }
            entry.rare_mut().server_error = Some(failure);
            let uri = &cx.config.server_uri;
            let error = XdsError::server_reported(&cx.node, cx.type_url, name, uri, status);
            entry.fail(&mut self.actions, cx.type_url, error, drop_cached);
        }
    }

    /// SotW deletions (LDS, CDS): a cached resource the response omits, with no
    /// server-reported error standing for it, was deleted. The active server's
    /// subscription covers every watched name of the authorities it serves, so a count
    /// of present resources equal to the subscription means none is missing.
    fn apply_deletions(
        &mut self,
        cx: &ResponseContext,
        present_here: usize,
        server_errors: &[(Arc<str>, Status)],
    ) {
        let subscription = &mut self.servers[cx.server].types[cx.t].subscribed;
        if present_here >= subscription.len() {
            return;
        }
        let subscription = subscription.names();
        let table = &mut self.resources[cx.t];
        let missing: Vec<Arc<str>> = subscription
            .iter()
            .filter(|n| {
                table.seen(n).is_some_and(|s| s.response != cx.stamp)
                    && !server_errors.iter().any(|(e, _)| e == *n)
            })
            .cloned()
            .collect();
        for name in missing {
            let Some(entry) = table.get_mut(&name) else {
                continue;
            };
            if self.authorities[entry.authority].active() != Some(cx.server)
                || entry.cached.is_none()
                || entry.rare().server_error.is_some()
            {
                continue; // uncached: the timer decides; TP3 error: counts as present
            }
            entry.delete(
                &mut self.actions,
                cx.type_url,
                (&cx.config, &cx.node),
                &cx.version_info,
                cx.now,
            );
        }
    }
}

impl Decoded {
    /// Records the decoded (or rejected) resource at position `i`; returns its slot
    /// for the next response's fast path, `None` unless it was valid and watched.
    pub(super) fn note(
        &mut self,
        table: &mut ResourceTable,
        i: usize,
        result: Result<(String, ResourceValue, Bytes), resource::DecodeError>,
        stamp: u64,
    ) -> Option<Slot> {
        match result {
            Ok((name, value, raw)) => {
                let name = canonical_name(name);
                match self.see(table, &name, stamp) {
                    Seen::First(slot) => {
                        self.valid += 1;
                        self.items.push((slot, Outcome::Changed(value, raw)));
                        slot
                    }
                    Seen::Again(k) => {
                        self.errors.push(format!(
                            "resource index {i}: {name}: duplicate resource name in response"
                        ));
                        self.items[k].1 =
                            Outcome::Invalid("duplicate resource name in response".to_string());
                        None
                    }
                }
            }
            Err(e) => {
                let label = e.name.as_deref().unwrap_or("<unknown name>");
                self.errors
                    .push(format!("resource index {i}: {label}: {}", e.message));
                match e.name.map(canonical_name) {
                    Some(name) => match self.see(table, &name, stamp) {
                        Seen::First(slot) => self.items.push((slot, Outcome::Invalid(e.message))),
                        Seen::Again(k) => self.items[k].1 = Outcome::Invalid(e.message),
                    },
                    None => self.unnamed_error = true,
                }
                None
            }
        }
    }

    /// Records that the next item names `name`, or finds the earlier item that did.
    fn see(&mut self, table: &mut ResourceTable, name: &str, stamp: u64) -> Seen {
        let position = self.items.len();
        if let Some(slot) = table.slot_of(name) {
            return match table.mark_seen(slot, stamp, position as u32) {
                Some(earlier) => Seen::Again(earlier as usize),
                None => Seen::First(Some(slot)),
            };
        }
        match self.unwatched.get(name) {
            Some(&k) => Seen::Again(k),
            None => {
                self.unwatched.insert(name.to_string(), position);
                Seen::First(None)
            }
        }
    }

    /// The item a name had in this response, if any.
    pub(super) fn item_of(&self, table: &ResourceTable, name: &str, stamp: u64) -> Option<usize> {
        match table.seen(name) {
            Some(seen) => (seen.response == stamp).then_some(seen.position as usize),
            None => self.unwatched.get(name).copied(),
        }
    }
}

/// The canonical spelling of a name a server sent (xdstp context parameters sorted).
pub(super) fn canonical_name(name: String) -> String {
    if !name.starts_with("xdstp:") {
        return name;
    }
    match names::canonicalize(&name) {
        Ok(std::borrow::Cow::Owned(canonical)) => canonical,
        _ => name,
    }
}

/// Joins NACK reasons, keeping the result under [`MAX_NACK_DETAIL_BYTES`].
pub(super) fn nack_detail(errors: &[String]) -> String {
    let mut out = String::new();
    for (i, e) in errors.iter().enumerate() {
        let sep = if out.is_empty() { "" } else { "; " };
        let remaining = errors.len() - i;
        let tail = format!("; ... and {remaining} more errors");
        if out.len() + sep.len() + e.len() + tail.len() > MAX_NACK_DETAIL_BYTES {
            if out.is_empty() {
                let mut cut = MAX_NACK_DETAIL_BYTES - tail.len();
                while !e.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.push_str(&e[..cut]);
                if remaining > 1 {
                    out.push_str(&format!("; ... and {} more errors", remaining - 1));
                }
            } else {
                out.push_str(&tail);
            }
            return out;
        }
        out.push_str(sep);
        out.push_str(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nack_detail_stays_under_the_limit_and_counts_what_it_drops() {
        let errors: Vec<String> = (0..500)
            .map(|i| format!("resource index {i}: r{i}: {}", "x".repeat(40)))
            .collect();
        let detail = nack_detail(&errors);
        assert!(detail.len() <= MAX_NACK_DETAIL_BYTES, "{}", detail.len());
        assert!(detail.starts_with("resource index 0: r0: "));
        let kept = detail.matches("resource index").count();
        assert!(
            detail.ends_with(&format!("; ... and {} more errors", 500 - kept)),
            "{detail}"
        );
        let huge = vec!["é".repeat(10_000), "second".to_string()];
        let detail = nack_detail(&huge);
        assert!(detail.len() <= MAX_NACK_DETAIL_BYTES);
        assert!(detail.ends_with("; ... and 1 more errors"));
        assert_eq!(nack_detail(&["a".into(), "b".into()]), "a; b");
    }
}
