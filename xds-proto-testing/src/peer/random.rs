//! Random sources for the config selector: a seeded generator for many draws, a
//! scripted one for exact picks and a fixed one for the ends of every range.

use std::collections::VecDeque;

use xds_proto_core::selector::RandomSource;

/// SplitMix64, a tiny seeded generator for tests that need many draws: the core's
/// [`Seeded`](xds_proto_core::selector::Seeded) (`next_u64`, and `next_u32` as a
/// selector's [`RandomSource`]), so a test draws exactly what an embedder seeding the
/// selector the same way would.
pub use xds_proto_core::selector::Seeded as SplitMix;

/// A random source that returns scripted `u32` values, then panics; it counts draws.
#[derive(Clone, Debug, Default)]
pub struct Scripted {
    values: VecDeque<u32>,
    /// How many values were drawn.
    pub drawn: usize,
}

impl Scripted {
    /// A source returning `values` in order.
    pub fn new(values: &[u32]) -> Scripted {
        Scripted {
            values: values.iter().copied().collect(),
            drawn: 0,
        }
    }

    /// The `u32` that makes `runtime_fraction` draw `per_million` exactly (the selector
    /// maps `x` to `x * 1_000_000 >> 32`).
    pub fn fraction_value(per_million: u32) -> u32 {
        let v = (u64::from(per_million) << 32).div_ceil(1_000_000);
        u32::try_from(v).unwrap_or(u32::MAX)
    }
}

impl RandomSource for Scripted {
    fn next_u32(&mut self) -> u32 {
        self.drawn += 1;
        self.values
            .pop_front()
            .expect("the test scripted no more random values")
    }
}

/// A random source that always draws the same `u32`: 0 picks the first weighted cluster
/// and passes every non-zero runtime fraction, `u32::MAX` picks the last cluster and
/// passes only a full fraction.
#[derive(Clone, Copy, Debug)]
pub struct Fixed(pub u32);

impl RandomSource for Fixed {
    fn next_u32(&mut self) -> u32 {
        self.0
    }
}
