//! The explicit wildcard (`*`) watch of a type: every resource the server sends for it
//! is cached under its own name and told to the `*` watchers, until the last of them
//! goes and no named watch holds the resource. A named watch of such a resource also
//! subscribes its name, so that it outlives the wildcard. The `*` entry itself has no
//! value and no does-not-exist timer.

use std::sync::Arc;

use super::cache::ResourceEntry;
use super::response::{Decoded, ResponseContext};
use super::{Action, Notification, TypeIdx, WatcherId, XdsClient, XdsError};

/// The name that subscribes to every resource of a type.
pub(super) const WILDCARD: &str = "*";

impl XdsClient {
    /// Gives every resource of the response to the type's wildcard watchers, when the
    /// wildcard is watched and served by this server: a resource no watch names gets
    /// an entry of its own, held for them.
    pub(super) fn adopt_for_wildcard(&mut self, cx: &ResponseContext, decoded: &mut Decoded) {
        let table = &mut self.resources[cx.t];
        let Some(star) = table.get(WILDCARD) else {
            return;
        };
        if self.authorities[star.authority].active() != Some(cx.server) {
            return;
        }
        let (authority, watchers) = (star.authority, star.watchers.to_vec());
        let mut unwatched: Vec<(String, usize)> = decoded.unwatched.drain().collect();
        unwatched.sort_unstable_by_key(|(_, k)| *k);
        for (name, k) in unwatched {
            let entry = ResourceEntry::for_wildcard(Arc::from(name.as_str()), authority);
            let slot = table.insert(entry);
            table.mark_seen(slot, cx.stamp, k as u32);
            decoded.items[k].0 = Some(slot);
        }
        for (slot, _) in &decoded.items {
            if let Some(entry) = slot.and_then(|slot| table.at_mut(slot))
                && entry.authority == authority
                && entry.rare().wildcard_watchers.is_empty()
                && &*entry.name != WILDCARD
            {
                entry.rare_mut().wildcard_watchers.clone_from(&watchers);
            }
        }
    }

    /// SotW deletions (LDS, CDS) of the resources held only for the wildcard: one the
    /// response omits was deleted, as a named one would be.
    pub(super) fn apply_wildcard_deletions(&mut self, cx: &ResponseContext) {
        let table = &mut self.resources[cx.t];
        for (entry, seen) in table.values_seen_mut() {
            if !entry.watchers.is_empty()
                || entry.rare().wildcard_watchers.is_empty()
                || seen.response == cx.stamp
                || entry.cached.is_none()
                || entry.rare().server_error.is_some()
                || self.authorities[entry.authority].active() != Some(cx.server)
            {
                continue;
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

    /// A `*` watcher of type `t` starts: it hears at once of every resource of the
    /// type cached for the wildcard or by name, each under its own name.
    pub(super) fn join_wildcard(
        &mut self,
        t: TypeIdx,
        watcher: WatcherId,
        authority: usize,
        connectivity: Option<&XdsError>,
    ) {
        let type_url = self.types[t].type_url();
        let mut entries: Vec<&mut ResourceEntry> = self.resources[t]
            .values_mut()
            .filter(|e| e.authority == authority && &*e.name != WILDCARD)
            .filter(|e| e.cached.is_some() || !e.rare().wildcard_watchers.is_empty())
            .collect();
        entries.sort_by(|x, y| x.name.cmp(&y.name));
        for entry in entries {
            entry.rare_mut().wildcard_watchers.push(watcher);
            if entry.cached.is_none() {
                continue;
            }
            let events = entry.initial_events(connectivity);
            if events.len() > 1 {
                entry.rare_mut().ambient_holders.push(watcher);
            }
            for event in events {
                self.actions.push_back(Action::Notify(Notification {
                    watcher,
                    type_url,
                    name: entry.name.clone(),
                    event,
                }));
            }
        }
    }

    /// A `*` watcher of type `t` stops: the resources held only for the wildcard's
    /// watchers are forgotten once none is left.
    pub(super) fn leave_wildcard(&mut self, t: TypeIdx, watcher: WatcherId) {
        let table = &mut self.resources[t];
        let mut orphans = Vec::new();
        for entry in table.values_mut() {
            if let Some(rare) = entry.rare_if_any() {
                rare.wildcard_watchers.retain(|w| *w != watcher);
                rare.ambient_holders.retain(|w| *w != watcher);
            }
            if entry.watchers.is_empty() && entry.rare().wildcard_watchers.is_empty() {
                orphans.push(entry.name.clone());
            }
        }
        for name in orphans {
            if let Some(mut entry) = table.remove(&name) {
                entry.disarm_timers(&mut self.timers, None);
            }
        }
    }

    /// A resource held for the wildcard is now named by a watch as well: it counts
    /// for its authority and is subscribed by name.
    pub(super) fn name_wildcard_resource(&mut self, t: TypeIdx, name: &Arc<str>, authority: usize) {
        self.authorities[authority].resources += 1;
        for server in self.authorities[authority].in_use().to_vec() {
            if self.servers[server].subscribe(t, name) {
                self.subscription_changed(server, t);
            }
        }
    }

    /// The last named watch of a resource the wildcard still holds stopped: its name
    /// is unsubscribed, the entry stays for the `*` watchers.
    pub(super) fn unname_wildcard_resource(
        &mut self,
        t: TypeIdx,
        name: &Arc<str>,
        authority: usize,
    ) {
        for server in self.authorities[authority].remove_resource() {
            self.servers[server].unsubscribe(t, name);
            self.subscription_changed(server, t);
        }
    }
}
