//! The resource cache: per type, a [`ResourceTable`] of [`ResourceEntry`]s. An entry
//! owns its state and the notifications it sends: it is filled with a value, fails
//! with an error, tells a new watcher where it stands, and knows which of its
//! does-not-exist timers are armed.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use smallvec::SmallVec;

use super::status::NodeTag;
use super::timer::{ArmedTimers, Timers};
use super::{
    Action, Notification, ResourceSnapshot, ResourceStatusKind, UpdateFailure, WatchEvent,
    WatcherId, XdsError,
};
use crate::DetHashMap as HashMap;
use crate::bootstrap::ServerConfig;
use crate::metrics::CacheState;
use crate::resource::ResourceValue;
use crate::time::Instant;

/// A value received and accepted, with what CSDS reports of it.
#[derive(Debug)]
pub(super) struct Cached {
    pub(super) value: ResourceValue,
    pub(super) raw: Bytes,
    /// The version it came with: the response's (SotW) or the resource's own (delta).
    pub(super) version: Arc<str>,
    pub(super) updated: Instant,
    /// The server that sent it (its index): only that server is told its version in a
    /// delta stream's `initial_resource_versions`.
    pub(super) source: usize,
}

/// One watched resource. What nearly every resource has sits inline; what few have
/// (errors, wildcard watchers, ambient-error holders) sits in one [`Rare`] box made on
/// first use: a client keeps one entry per watched name, and at 20,000 names the
/// inline size is megabytes a fresh process faults in.
#[derive(Debug)]
pub(super) struct ResourceEntry {
    pub(super) name: Arc<str>,
    /// The authority whose servers serve it.
    pub(super) authority: usize,
    /// The watchers that named it (nearly always one: inline, no allocation).
    pub(super) watchers: SmallVec<[WatcherId; 1]>,
    pub(super) cached: Option<Cached>,
    /// Its armed does-not-exist timers, one per server at most.
    pub(super) armed: ArmedTimers,
    /// The rarely set state; `None` while all of it is empty.
    rare: Option<Box<Rare>>,
}

/// A resource's rarely set state: its failures and its wildcard watchers.
#[derive(Debug, Default)]
pub(super) struct Rare {
    /// The watchers of the type's explicit wildcard (`*`) that hear of it: a resource
    /// the server sent for the wildcard, held while they are or a named watch is.
    pub(super) wildcard_watchers: Vec<WatcherId>,
    /// Known not to exist, and why (the timer fired, the server said NOT_FOUND, or it
    /// deleted the resource). With a value still cached, the deletion was ignored
    /// (A88's default): CSDS says DOES_NOT_EXIST and shows the cached config.
    pub(super) does_not_exist: Option<UpdateFailure>,
    /// The timer fired as a transient error (`resource_timer_is_transient_error`).
    pub(super) timed_out: bool,
    /// The last NACK of this resource, until a valid copy arrives.
    pub(super) nack: Option<UpdateFailure>,
    /// A TP3 error remembered until the resource or a new error arrives.
    pub(super) server_error: Option<UpdateFailure>,
    /// The error that stands for new watchers: ambient when cached, the state otherwise.
    pub(super) error: Option<XdsError>,
    /// The watchers that hold an ambient error beside the cached value: the next valid
    /// copy tells them that it cleared (see [`WatchEvent::Changed`]).
    pub(super) ambient_holders: Vec<WatcherId>,
}

/// What an entry without a [`Rare`] box reads.
static NO_RARE: Rare = Rare {
    wildcard_watchers: Vec::new(),
    does_not_exist: None,
    timed_out: false,
    nack: None,
    server_error: None,
    error: None,
    ambient_holders: Vec::new(),
};

impl ResourceEntry {
    /// A resource watched for the first time, by `watcher`.
    pub(super) fn new(name: Arc<str>, authority: usize, watcher: WatcherId) -> ResourceEntry {
        let mut entry = ResourceEntry::for_wildcard(name, authority);
        entry.watchers.push(watcher);
        entry
    }

    /// A resource held only for the wildcard's watchers: it is received because of the
    /// `*` subscription, never subscribed by name.
    pub(super) fn for_wildcard(name: Arc<str>, authority: usize) -> ResourceEntry {
        ResourceEntry {
            name,
            authority,
            watchers: SmallVec::new(),
            cached: None,
            armed: ArmedTimers::default(),
            rare: None,
        }
    }

    /// Its rarely set state (all empty when it has none).
    pub(super) fn rare(&self) -> &Rare {
        self.rare.as_deref().unwrap_or(&NO_RARE)
    }

    /// Its rarely set state, made on first use: for setting it. To clear or trim it,
    /// [`rare_if_any`](Self::rare_if_any) allocates nothing.
    pub(super) fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Its rarely set state, if it has any.
    pub(super) fn rare_if_any(&mut self) -> Option<&mut Rare> {
        self.rare.as_deref_mut()
    }

    /// Every failure clears (a valid copy arrived); returns the watchers that held an
    /// ambient error. The box goes unless wildcard watchers remain in it.
    fn clear_failures(&mut self) -> Vec<WatcherId> {
        let Some(rare) = self.rare.as_deref_mut() else {
            return Vec::new();
        };
        let holders = std::mem::take(&mut rare.ambient_holders);
        if rare.wildcard_watchers.is_empty() {
            self.rare = None;
        } else {
            *rare = Rare {
                wildcard_watchers: std::mem::take(&mut rare.wildcard_watchers),
                ..Rare::default()
            };
        }
        holders
    }

    /// Everyone who hears of it: its named watchers, then the wildcard's.
    fn all_watchers(&self) -> impl Iterator<Item = &WatcherId> {
        self.watchers.iter().chain(&self.rare().wildcard_watchers)
    }

    /// "Cached" in the A71 sense: a value, or known not to exist.
    pub(super) fn is_cached(&self) -> bool {
        self.cached.is_some() || self.rare().does_not_exist.is_some()
    }

    /// The A78 `grpc.xds.cache_state`.
    pub(super) fn cache_state(&self) -> CacheState {
        let cached = self.cached.is_some();
        let rare = self.rare();
        match () {
            _ if rare.server_error.is_some() && cached => CacheState::ReceivedErrorButCached,
            _ if rare.server_error.is_some() => CacheState::ReceivedError,
            _ if rare.nack.is_some() && cached => CacheState::NackedButCached,
            _ if rare.nack.is_some() => CacheState::Nacked,
            _ if rare.does_not_exist.is_some() && cached => CacheState::DoesNotExistButCached,
            _ if rare.does_not_exist.is_some() => CacheState::DoesNotExist,
            _ if cached => CacheState::Acked,
            _ if rare.timed_out => CacheState::Timeout,
            _ => CacheState::Requested,
        }
    }

    pub(super) fn status(&self) -> ResourceStatusKind {
        let rare = self.rare();
        if rare.server_error.is_some() {
            ResourceStatusKind::ReceivedError
        } else if rare.nack.is_some() {
            ResourceStatusKind::Nacked
        } else if rare.does_not_exist.is_some() {
            ResourceStatusKind::DoesNotExist
        } else if self.cached.is_some() {
            ResourceStatusKind::Acked
        } else if rare.timed_out {
            ResourceStatusKind::Timeout
        } else {
            ResourceStatusKind::Requested
        }
    }

    /// The version a delta stream to `server` may announce for it in
    /// `initial_resource_versions`: a value that server sent and has not deleted.
    pub(super) fn version_from(&self, server: usize) -> Option<&Arc<str>> {
        let cached = self.cached.as_ref()?;
        (cached.source == server && self.rare().does_not_exist.is_none()).then_some(&cached.version)
    }

    /// The CSDS view of it.
    pub(super) fn snapshot(&self, type_url: &'static str) -> ResourceSnapshot {
        let rare = self.rare();
        ResourceSnapshot {
            type_url,
            name: self.name.clone(),
            status: self.status(),
            version: self
                .cached
                .as_ref()
                .map_or_else(|| Arc::from(""), |c| c.version.clone()),
            last_updated: self.cached.as_ref().map(|c| c.updated),
            raw: self.cached.as_ref().map(|c| c.raw.clone()),
            value: self.cached.as_ref().map(|c| c.value.clone()),
            error_state: (rare.server_error.as_ref())
                .or(rare.nack.as_ref())
                .or(rare.does_not_exist.as_ref())
                .cloned(),
            watchers: self.watchers.len() + rare.wildcard_watchers.len(),
        }
    }

    /// Tells every watcher `event`.
    pub(super) fn notify_all(
        &self,
        actions: &mut VecDeque<Action>,
        type_url: &'static str,
        event: WatchEvent,
    ) {
        for w in self.all_watchers() {
            actions.push_back(Action::Notify(Notification {
                watcher: *w,
                type_url,
                name: self.name.clone(),
                event: event.clone(),
            }));
        }
    }

    /// The one failure path of a resource: `error` stands for it from now on, and the
    /// watchers are told it, as ambient while a value is cached (A88). A data error
    /// under `fail_on_data_errors` drops the cached value first (`drop_cached`).
    pub(super) fn fail(
        &mut self,
        actions: &mut VecDeque<Action>,
        type_url: &'static str,
        error: XdsError,
        drop_cached: bool,
    ) {
        if drop_cached {
            self.cached = None;
        }
        let holders = match self.cached {
            Some(_) => self.all_watchers().copied().collect(),
            None => Vec::new(),
        };
        let rare = self.rare_mut();
        rare.error = Some(error.clone());
        rare.ambient_holders = holders;
        let event = if self.cached.is_some() {
            WatchEvent::AmbientError(error)
        } else {
            WatchEvent::Changed(Err(error))
        };
        self.notify_all(actions, type_url, event);
    }

    /// The server deleted it (a SotW LDS/CDS response omitted it, or a delta response
    /// removed it): a data error (A88), reported once. Cached, the value is kept and
    /// the watchers get an ambient NOT_FOUND (CSDS: DOES_NOT_EXIST with the cached
    /// config), or under `fail_on_data_errors` it is dropped; uncached, it does not
    /// exist, at once. The deprecated `ignore_resource_deletion` (A53) changes nothing.
    /// The watchers' error ends with `node`'s tag; CSDS records it untagged.
    pub(super) fn delete(
        &mut self,
        actions: &mut VecDeque<Action>,
        type_url: &'static str,
        (server, node): (&ServerConfig, &NodeTag),
        version: &str,
        now: Instant,
    ) {
        if self.rare().does_not_exist.is_some() {
            return; // reported once, not on every response that omits it
        }
        let uri = &server.server_uri;
        let drop_cached = server.server_features.fail_on_data_errors && self.cached.is_some();
        tracing::trace!(name = %self.name, drop_cached, "resource deleted by the server");
        let error = if drop_cached {
            let why = format!("xDS server {uri:?} removed it (fail_on_data_errors)");
            XdsError::does_not_exist(&NodeTag::NONE, type_url, &self.name, &why)
        } else if self.cached.is_none() {
            XdsError::does_not_exist(
                &NodeTag::NONE,
                type_url,
                &self.name,
                &format!("xDS server {uri:?} removed it"),
            )
        } else {
            XdsError::deletion_ignored(&NodeTag::NONE, type_url, &self.name, uri)
        };
        let uncached = self.cached.is_none();
        let rare = self.rare_mut();
        if drop_cached || uncached {
            // Nothing is left of it: no earlier NACK or server error stands.
            rare.nack = None;
            rare.server_error = None;
            rare.timed_out = false;
        }
        rare.does_not_exist = Some(UpdateFailure {
            details: error.status.message.clone(),
            version: version.to_string(),
            at: now,
        });
        self.fail(actions, type_url, error.tagged(node), drop_cached);
    }

    /// Tells the watchers of a connectivity error of the server serving it: ambient
    /// when cached in the A71 sense (a value, or known not to exist).
    pub(super) fn notify_connectivity(
        &mut self,
        actions: &mut VecDeque<Action>,
        type_url: &'static str,
        error: &XdsError,
    ) {
        if self.cached.is_some() {
            let holders = self.all_watchers().copied().collect();
            self.rare_mut().ambient_holders = holders;
        }
        let event = if self.is_cached() {
            WatchEvent::AmbientError(error.clone())
        } else {
            WatchEvent::Changed(Err(error.clone()))
        };
        self.notify_all(actions, type_url, event);
    }

    /// A valid copy arrived from server `source` (`update` is `None` when its bytes are
    /// the cached ones): every error clears, and the watchers hear of the value if it
    /// changed; if not, those that hold an ambient error hear the value again, as the
    /// error cleared.
    pub(super) fn fill(
        &mut self,
        actions: &mut VecDeque<Action>,
        type_url: &'static str,
        update: Option<(ResourceValue, Bytes)>,
        (version, source): (&Arc<str>, usize),
        now: Instant,
    ) {
        let cleared = self.clear_failures();
        let unchanged = match (&update, self.cached.as_mut()) {
            (None, Some(c)) => Some(c),
            (Some((value, raw)), Some(c)) if c.raw == raw || c.value.equals(value) => {
                // Keep the newest bytes for CSDS, copied so that the response buffer
                // is not kept alive by one resource.
                if c.raw != raw {
                    c.raw = Bytes::copy_from_slice(raw);
                }
                Some(c)
            }
            _ => None,
        };
        if let Some(c) = unchanged {
            c.version = version.clone();
            c.source = source;
            for watcher in cleared {
                actions.push_back(Action::Notify(Notification {
                    watcher,
                    type_url,
                    name: self.name.clone(),
                    event: WatchEvent::Changed(Ok(c.value.clone())),
                }));
            }
            return;
        }
        let Some((value, raw)) = update else {
            return;
        };
        self.cached = Some(Cached {
            value: value.clone(),
            raw: Bytes::copy_from_slice(&raw),
            version: version.clone(),
            updated: now,
            source,
        });
        self.notify_all(actions, type_url, WatchEvent::Changed(Ok(value)));
    }

    /// What a new watcher is told at once.
    pub(super) fn initial_events(&self, connectivity: Option<&XdsError>) -> Vec<WatchEvent> {
        let mut events = Vec::new();
        let rare = self.rare();
        if let Some(c) = &self.cached {
            events.push(WatchEvent::Changed(Ok(c.value.clone())));
            if let Some(e) = rare.error.as_ref().or(connectivity) {
                events.push(WatchEvent::AmbientError(e.clone()));
            }
        } else if let Some(e) = &rare.error {
            events.push(WatchEvent::Changed(Err(e.clone())));
            if let Some(c) = connectivity.filter(|_| rare.does_not_exist.is_some()) {
                events.push(WatchEvent::AmbientError(c.clone()));
            }
        } else if let Some(c) = connectivity {
            events.push(WatchEvent::Changed(Err(c.clone())));
        }
        events
    }

    /// Stops its does-not-exist timers: server `only`'s, or all of them.
    pub(super) fn disarm_timers(&mut self, timers: &mut Timers, only: Option<usize>) {
        match only {
            Some(server) => {
                if let Some(ticket) = self.armed.take(server) {
                    timers.cancel_resource(server, ticket);
                }
            }
            None => {
                for (server, ticket) in self.armed.take_all() {
                    timers.cancel_resource(server, ticket);
                }
            }
        }
    }
}

/// Where a resource sits in its type's [`ResourceTable`]: a slot and the generation
/// of its occupant, so that a handle kept across responses never reaches a later
/// resource that reused the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Slot {
    index: u32,
    generation: u32,
}

#[cfg(test)]
impl Slot {
    pub(super) fn for_test(index: u32) -> Slot {
        Slot {
            index,
            generation: 0,
        }
    }
}

/// One resource type's watched resources: entries in a slab, found by name through an
/// index. A response's items and a server's last response refer to entries by
/// [`Slot`], so applying an unchanged SotW resend hashes no names.
///
/// Each slot's generation and [`Seen`] stamp sit apart from the entries, in one dense
/// vector: finding a response's resources and spotting duplicates touches a few bytes
/// per slot there, not a 300-byte entry (which, among ten thousand, is a cache miss).
#[derive(Debug, Default)]
pub(super) struct ResourceTable {
    entries: Chunks,
    meta: Vec<SlotMeta>,
    free: Vec<u32>,
    by_name: HashMap<Arc<str>, u32>,
}

/// A slot's generation (bumped when its resource is removed) and the last response
/// that named its resource.
#[derive(Clone, Copy, Debug, Default)]
struct SlotMeta {
    generation: u32,
    seen: Seen,
}

impl SlotMeta {
    /// `slot`'s metadata among `metas`, if the slot still holds the resource it was
    /// taken for.
    fn current(metas: &mut [SlotMeta], slot: Slot) -> Option<&mut SlotMeta> {
        metas
            .get_mut(slot.index as usize)
            .filter(|m| m.generation == slot.generation)
    }
}

/// The last response (by [`XdsClient`](super::XdsClient)'s response counter) that
/// named a resource, and the resource's position among that response's items:
/// duplicate detection without a name index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    pub(super) response: u64,
    pub(super) position: u32,
}

impl ResourceTable {
    pub(super) fn slot_of(&self, name: &str) -> Option<Slot> {
        let index = *self.by_name.get(name)?;
        Some(Slot {
            index,
            generation: self.meta[index as usize].generation,
        })
    }

    pub(super) fn get(&self, name: &str) -> Option<&ResourceEntry> {
        let index = *self.by_name.get(name)?;
        self.entries.at(index).as_ref()
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut ResourceEntry> {
        let index = *self.by_name.get(name)?;
        self.entries.at_mut(index).as_mut()
    }

    /// The entry at `slot`, if it still holds the resource the slot was taken for.
    pub(super) fn at_mut(&mut self, slot: Slot) -> Option<&mut ResourceEntry> {
        SlotMeta::current(&mut self.meta, slot)?;
        self.entries.at_mut(slot.index).as_mut()
    }

    /// Records that response `response` names the resource at `slot` as its item
    /// `position`; when the response named it before, returns that earlier position
    /// instead (and records nothing). `None` for a stale slot too.
    pub(super) fn mark_seen(&mut self, slot: Slot, response: u64, position: u32) -> Option<u32> {
        let meta = SlotMeta::current(&mut self.meta, slot)?;
        if meta.seen.response == response {
            return Some(meta.seen.position);
        }
        meta.seen = Seen { response, position };
        None
    }

    /// The SotW resend's fast path: when `slot` still holds its resource, the response
    /// has not named it yet, and its cached bytes are `raw`, records that the response
    /// names it as item `position` and returns true. One look at the slot's metadata
    /// and one at the entry, for each of a resend's unchanged resources.
    pub(super) fn see_unchanged(
        &mut self,
        slot: Slot,
        response: u64,
        position: u32,
        raw: &[u8],
    ) -> bool {
        let Some(meta) = SlotMeta::current(&mut self.meta, slot) else {
            return false;
        };
        if meta.seen.response == response {
            return false;
        }
        let unchanged = (self.entries.at(slot.index).as_ref())
            .and_then(|e| e.cached.as_ref())
            .is_some_and(|c| c.raw == raw);
        if unchanged {
            meta.seen = Seen { response, position };
        }
        unchanged
    }

    /// What the resource `name` was last seen in, if it is in the table.
    pub(super) fn seen(&self, name: &str) -> Option<Seen> {
        let index = *self.by_name.get(name)?;
        Some(self.meta[index as usize].seen)
    }

    /// The table's shared copy of a watched name.
    pub(super) fn shared_name(&self, name: &str) -> Option<&Arc<str>> {
        self.by_name.get_key_value(name).map(|(k, _)| k)
    }

    /// Adds a resource (its name not in the table); returns its slot.
    pub(super) fn insert(&mut self, entry: ResourceEntry) -> Slot {
        let name = entry.name.clone();
        let index = match self.free.pop() {
            Some(index) => {
                *self.entries.at_mut(index) = Some(entry);
                index
            }
            None => {
                self.meta.push(SlotMeta::default());
                self.entries.push(Some(entry))
            }
        };
        self.by_name.insert(name, index);
        Slot {
            index,
            generation: self.meta[index as usize].generation,
        }
    }

    pub(super) fn remove(&mut self, name: &str) -> Option<ResourceEntry> {
        let index = self.by_name.remove(name)?;
        let meta = &mut self.meta[index as usize];
        meta.generation = meta.generation.wrapping_add(1);
        meta.seen = Seen::default();
        self.free.push(index);
        self.entries.at_mut(index).take()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &ResourceEntry> {
        self.entries.iter().filter_map(Option::as_ref)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut ResourceEntry> {
        self.entries.iter_mut().filter_map(Option::as_mut)
    }

    /// Every entry with what it was last seen in.
    pub(super) fn values_seen_mut(&mut self) -> impl Iterator<Item = (&mut ResourceEntry, Seen)> {
        (self.entries.iter_mut().zip(&self.meta)).filter_map(|(e, m)| Some((e.as_mut()?, m.seen)))
    }
}

/// A table's entries in chunks of a fixed size: growing never moves an entry. An
/// entry is some 300 bytes; doubling one vector of ten thousand copied megabytes and
/// touched twice the memory it kept.
#[derive(Debug, Default)]
struct Chunks {
    chunks: Vec<Vec<Option<ResourceEntry>>>,
}

const CHUNK: usize = 256;

impl Chunks {
    /// The slot at `index`, which the table's name index or free list handed out.
    fn at(&self, index: u32) -> &Option<ResourceEntry> {
        let i = index as usize;
        &self.chunks[i / CHUNK][i % CHUNK]
    }

    fn at_mut(&mut self, index: u32) -> &mut Option<ResourceEntry> {
        let i = index as usize;
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }

    /// Appends a slot; returns its index.
    fn push(&mut self, slot: Option<ResourceEntry>) -> u32 {
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let full = (self.chunks.len() - 1) * CHUNK;
        let last = self.chunks.last_mut().expect("a chunk was just ensured");
        last.push(slot);
        u32::try_from(full + last.len() - 1).expect("fewer than 2^32 resources")
    }

    fn iter(&self) -> impl Iterator<Item = &Option<ResourceEntry>> {
        self.chunks.iter().flatten()
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Option<ResourceEntry>> {
        self.chunks.iter_mut().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: usize) -> ResourceEntry {
        ResourceEntry::new(Arc::from(format!("r{i}")), 0, WatcherId(i as u64))
    }

    /// A client keeps one entry per watched name (20,002 in the e2e replay): the
    /// rarely set state stays out of line, and a resource that fails and then gets a
    /// valid copy gives its box back.
    #[test]
    fn an_entry_keeps_its_rare_state_out_of_line() {
        let size = std::mem::size_of::<ResourceEntry>();
        eprintln!("ResourceEntry: {size} bytes");
        assert!(size <= 192, "ResourceEntry is {size} bytes");
        let mut e = entry(1);
        assert!(e.rare.is_none(), "a new entry has no rare state");
        let mut actions = VecDeque::new();
        let error = XdsError::does_not_exist(&NodeTag::NONE, "t", "r1", "gone");
        e.fail(&mut actions, "t", error, false);
        assert!(e.rare().error.is_some());
        use crate::resource::cluster::{ClusterResource, ClusterType, LbPolicy};
        let value = ResourceValue::new::<crate::Cds>(ClusterResource {
            name: "r1".into(),
            cluster_type: ClusterType::Eds { service_name: None },
            lb_policy: LbPolicy::RoundRobin,
            lrs_server: false,
            max_requests: 1024,
            tls: None,
            outlier_detection: None,
            override_host_status: Default::default(),
        });
        let version: Arc<str> = Arc::from("1");
        let raw = Bytes::from_static(b"x");
        e.fill(
            &mut actions,
            "t",
            Some((value, raw)),
            (&version, 0),
            Instant::ZERO,
        );
        assert!(e.rare.is_none(), "a valid copy clears every failure");
        e.rare_mut().wildcard_watchers.push(WatcherId(9));
        e.rare_mut().nack = Some(UpdateFailure {
            details: "bad".into(),
            version: "2".into(),
            at: Instant::ZERO,
        });
        e.fill(&mut actions, "t", None, (&version, 0), Instant::ZERO);
        assert_eq!(e.rare().wildcard_watchers, [WatcherId(9)]);
        assert!(e.rare().nack.is_none());
    }

    #[test]
    fn slots_across_chunks_keep_their_entries_and_refuse_stale_handles() {
        let mut table = ResourceTable::default();
        let n = 3 * CHUNK + 5;
        for i in 0..n {
            table.insert(entry(i));
        }
        let slots: Vec<Slot> = (0..n)
            .map(|i| table.slot_of(&format!("r{i}")).expect("inserted"))
            .collect();
        for (i, slot) in slots.iter().enumerate() {
            assert_eq!(&*table.at_mut(*slot).expect("live").name, format!("r{i}"));
        }
        // Freed slots are reused by new names; the old handles no longer reach them.
        let gone = [0, CHUNK - 1, CHUNK, 2 * CHUNK + 7];
        for i in gone {
            assert!(table.remove(&format!("r{i}")).is_some());
        }
        for i in 0..gone.len() {
            table.insert(entry(n + i));
        }
        for i in gone {
            assert!(table.at_mut(slots[i]).is_none(), "r{i}'s handle is stale");
            assert!(table.get(&format!("r{i}")).is_none());
        }
        assert_eq!(table.values().count(), n);
        let reused = table.slot_of(&format!("r{n}")).expect("inserted");
        assert!(gone.iter().any(|&i| slots[i].index == reused.index));
        assert_eq!(
            table.entries.chunks.len(),
            4,
            "no chunk added for reused slots"
        );
    }
}
