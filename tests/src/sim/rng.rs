//! The simulator's only source of randomness: a seeded xoshiro256++ with the few draws
//! the simulator needs (bounded integers, chances, picks, exponential gaps). Everything
//! a run does is a function of the one `u64` seed it starts from.

use std::time::Duration;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// A seeded random stream.
#[derive(Clone, Debug)]
pub struct SimRng(Xoshiro256PlusPlus);

impl SimRng {
    /// The stream for `seed`.
    pub fn new(seed: u64) -> SimRng {
        SimRng(Xoshiro256PlusPlus::seed_from_u64(seed))
    }

    /// A fresh 64-bit draw.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniform draw in `0..n` (`n` must be positive).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniform draw in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// A uniform index into a collection of `len` items (`len` must be positive).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// One item of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    /// A uniform span of `lo..=hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }

    /// An exponentially distributed gap with the given mean (a Poisson process's
    /// inter-arrival time), at least one millisecond.
    pub fn exp_millis(&mut self, mean_ms: u64) -> Duration {
        let u = ((self.next_u64() >> 11) as f64 + 1.0) / ((1u64 << 53) as f64 + 1.0);
        let ms = (-u.ln() * mean_ms as f64).clamp(1.0, 1e9);
        Duration::from_millis(ms as u64)
    }

    /// An index drawn with the given relative weights (not all zero).
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut x = self.below(total.max(1));
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_draws_stay_in_range() {
        let (mut a, mut b) = (SimRng::new(9), SimRng::new(9));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let r = a.range(3, 7);
            assert!((3..=7).contains(&r));
            b.range(3, 7);
            assert!(a.exp_millis(100) >= Duration::from_millis(1));
            b.exp_millis(100);
            assert_eq!(a.weighted(&[0, 5, 0]), 1);
            b.weighted(&[0, 5, 0]);
        }
    }
}
