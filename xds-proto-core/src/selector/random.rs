//! The selector's random source: [`RandomSource`], a trait of the core's own, so that
//! no random-number crate appears in the selector's public API (the core's semver is
//! its own), and [`Seeded`], which expands one number per RPC the way the load
//! balancer expands [`PickArgs::random`](crate::lb::PickArgs::random).

/// Where routing one RPC draws its random numbers: one `next_u32` per
/// `runtime_fraction` evaluated and one per weighted-cluster draw, so the count
/// varies with the route table.
///
/// Implemented for closures (`&mut || rng.next_u32()` adapts any generator) and for
/// [`Seeded`]; a test implements it to script each draw.
pub trait RandomSource {
    /// A uniformly distributed `u32`.
    fn next_u32(&mut self) -> u32;
}

impl<F: FnMut() -> u32> RandomSource for F {
    fn next_u32(&mut self) -> u32 {
        self()
    }
}

/// The draws of one RPC from one number the embedder supplies (SplitMix64 from the
/// seed), as [`PickArgs::random`](crate::lb::PickArgs::random) is one number per
/// pick: `selector.select(path, &headers, &mut Seeded(rng_u64))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seeded(pub u64);

impl Seeded {
    /// The next 64 bits of the stream (one SplitMix64 step), for a caller that needs
    /// more than the selector's `u32` draws from the same seed.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl RandomSource for Seeded {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}
