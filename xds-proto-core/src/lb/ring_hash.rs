//! `ring_hash` (gRFCs A42, A76): a ring of XXH64 hashes of `"<address>_<n>"`, each
//! endpoint owning entries in proportion to its weight; a pick takes the first entry at
//! or after the request hash. Endpoints connect only when a pick lands on them (or, in
//! TRANSIENT_FAILURE, one at a time to recover), and the aggregate state follows A42's
//! rules so that a single failed endpoint does not fail the whole policy.

use std::fmt::Write as _;

use super::api::{ConnectivityState, SubchannelId};
use super::pick_first::PickFirst;
use super::policy::{Ctx, EndpointSpec, Picked};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RingEntry {
    pub(super) hash: u64,
    pub(super) endpoint: u32,
}

/// The ring is kept as two parallel arrays, hashes apart, so that the binary search
/// touches half the memory; the READY endpoints' subchannels are kept apart too, so
/// that a pick landing on a READY endpoint reads one word.
#[derive(Debug)]
pub(super) struct RingHash {
    endpoints: Vec<PickFirst>,
    hashes: Vec<u64>,
    owners: Vec<u32>,
    /// `buckets[b]` is the first ring position whose hash has top bits `>= b`, with one
    /// more entry at the end: a pick searches only its bucket (one or two entries on
    /// average) instead of the whole ring.
    buckets: Vec<u32>,
    bucket_shift: u32,
    /// Per endpoint, its subchannel while READY.
    ready: Vec<Option<SubchannelId>>,
    state: ConnectivityState,
}

/// Builds the ring (A42): with normalized weights `w`, `scale = min(ceil(min(w) *
/// min_ring_size) / min(w), max_ring_size)`, and endpoint `i` gets entries until the
/// running count reaches the running sum of `scale * w[i]`; then sorted by hash.
///
/// A weight is locality weight × endpoint weight, each up to `u32::MAX`, so one is up
/// to about 2^64 and their sum is taken in `u128`; the ring never has more than
/// `max_size` entries (A42's clamp; the caller has capped `max_size`), whatever
/// rounding does to the running sums.
pub(super) fn build_ring(specs: &[EndpointSpec], min_size: u64, max_size: u64) -> Vec<RingEntry> {
    let total: u128 = specs.iter().map(|e| u128::from(e.weight)).sum();
    if specs.is_empty() || total == 0 || max_size == 0 {
        return Vec::new();
    }
    let total = total as f64;
    let min_weight = specs.iter().map(|e| e.weight).min().unwrap_or(1) as f64 / total;
    let scale = ((min_weight * min_size as f64).ceil() / min_weight).min(max_size as f64);
    let limit = usize::try_from(max_size).unwrap_or(usize::MAX);
    let mut ring = Vec::with_capacity((scale.ceil() as usize).min(limit));
    let mut key = String::with_capacity(64);
    let (mut current, mut target) = (0f64, 0f64);
    for (i, endpoint) in specs.iter().enumerate() {
        target += scale * endpoint.weight as f64 / total;
        let mut n = 0u64;
        while current < target && ring.len() < limit {
            key.clear();
            let _ = write!(key, "{}_{}", endpoint.address, n);
            ring.push(RingEntry {
                hash: xxhash_rust::xxh64::xxh64(key.as_bytes(), 0),
                endpoint: i as u32,
            });
            n += 1;
            current += 1.0;
        }
    }
    ring.sort_by_key(|e| e.hash);
    ring
}

impl RingHash {
    pub(super) fn new(
        ctx: &mut Ctx,
        specs: &[EndpointSpec],
        min_ring_size: u64,
        max_ring_size: u64,
    ) -> RingHash {
        let ring = build_ring(specs, min_ring_size, max_ring_size);
        let mut policy = RingHash {
            endpoints: specs
                .iter()
                .map(|e| PickFirst::new(ctx, e.subchannels.clone()))
                .collect(),
            hashes: ring.iter().map(|e| e.hash).collect(),
            owners: ring.iter().map(|e| e.endpoint).collect(),
            buckets: Vec::new(),
            bucket_shift: 64,
            ready: vec![None; specs.len()],
            state: ConnectivityState::Idle,
        };
        policy.index_buckets();
        policy.refresh(ctx);
        policy
    }

    fn index_buckets(&mut self) {
        let bits = self
            .hashes
            .len()
            .next_power_of_two()
            .trailing_zeros()
            .max(1);
        self.bucket_shift = 64 - bits;
        let count = 1usize << bits;
        self.buckets = Vec::with_capacity(count + 1);
        let mut position = 0;
        for bucket in 0..count as u64 {
            let start = bucket << self.bucket_shift;
            while position < self.hashes.len() && self.hashes[position] < start {
                position += 1;
            }
            self.buckets.push(position as u32);
        }
        self.buckets.push(self.hashes.len() as u32);
    }

    /// The first ring position at or after `hash`, wrapping to 0.
    fn position(&self, hash: u64) -> usize {
        let bucket = (hash >> self.bucket_shift) as usize;
        let (lo, hi) = (
            self.buckets[bucket] as usize,
            self.buckets[bucket + 1] as usize,
        );
        let at = lo + self.hashes[lo..hi].partition_point(|h| *h < hash);
        if at == self.hashes.len() { 0 } else { at }
    }

    /// `(endpoints, ring entries)`.
    pub(super) fn size(&self) -> (usize, usize) {
        (self.endpoints.len(), self.hashes.len())
    }

    pub(super) fn state(&self) -> ConnectivityState {
        self.state
    }

    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: SubchannelId) {
        let mut touched = false;
        for endpoint in &mut self.endpoints {
            if endpoint.addresses().contains(&id) {
                endpoint.on_state(ctx, id);
                touched = true;
            }
        }
        if touched {
            self.refresh(ctx);
        }
    }

    /// A42's aggregation: READY if any endpoint is; TRANSIENT_FAILURE if two are;
    /// CONNECTING if one is connecting, or one failed among several; IDLE if one is
    /// idle; else TRANSIENT_FAILURE. In TRANSIENT_FAILURE no pick triggers connections,
    /// so the policy keeps one endpoint connecting itself.
    fn refresh(&mut self, ctx: &mut Ctx) {
        for (ready, endpoint) in self.ready.iter_mut().zip(&self.endpoints) {
            *ready = endpoint.selected();
        }
        let count = |s| self.endpoints.iter().filter(|e| e.state() == s).count();
        let failed = count(ConnectivityState::TransientFailure);
        self.state = if count(ConnectivityState::Ready) > 0 {
            ConnectivityState::Ready
        } else if failed >= 2 {
            ConnectivityState::TransientFailure
        } else if count(ConnectivityState::Connecting) > 0
            || (failed == 1 && self.endpoints.len() > 1)
        {
            ConnectivityState::Connecting
        } else if count(ConnectivityState::Idle) > 0 {
            ConnectivityState::Idle
        } else {
            ConnectivityState::TransientFailure
        };
        if self.state == ConnectivityState::TransientFailure
            && count(ConnectivityState::Connecting) == 0
            && let Some(idle) = self
                .endpoints
                .iter_mut()
                .find(|e| e.state() == ConnectivityState::Idle)
        {
            idle.exit_idle(ctx);
        }
    }

    /// A42's picker: the entry at the hash decides when it is READY (pick), IDLE
    /// (connect and queue) or CONNECTING (queue); when it failed, the next distinct
    /// endpoint decides the same way, and past that the first READY endpoint on the
    /// ring is taken.
    pub(super) fn pick(&mut self, ctx: &mut Ctx, hash: u64) -> Picked {
        if self.hashes.is_empty() || self.state == ConnectivityState::TransientFailure {
            return Picked::Fail;
        }
        let len = self.hashes.len();
        let start = self.position(hash);
        if let Some(id) = self.ready[self.owners[start] as usize] {
            return Picked::Subchannel(id);
        }
        let mut previous = u32::MAX;
        let mut distinct = 0;
        for step in 0..len {
            let index = self.owners[(start + step) % len];
            if index == previous {
                continue;
            }
            previous = index;
            distinct += 1;
            let endpoint = &mut self.endpoints[index as usize];
            match (endpoint.state(), distinct) {
                (ConnectivityState::Ready, _) => {
                    if let Some(id) = endpoint.selected() {
                        return Picked::Subchannel(id);
                    }
                }
                (ConnectivityState::Idle, 1 | 2) => {
                    endpoint.exit_idle(ctx);
                    return Picked::Queue;
                }
                (ConnectivityState::Connecting, 1 | 2) => return Picked::Queue,
                _ => {}
            }
        }
        Picked::Fail
    }
}
