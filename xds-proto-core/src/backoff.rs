//! Exponential backoff between failing ADS stream attempts, as gRPC's connection
//! backoff defines it (1 s initial, ×1.6, ±20 % jitter, 120 s cap). Jitter comes from
//! the client's seeded RNG, never from the OS.

use rand_core::RngCore;
use std::time::Duration;

/// Backoff parameters. The defaults are gRPC's connection-backoff constants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffConfig {
    /// Delay before the first retry.
    pub initial: Duration,
    /// Factor applied after each failed attempt.
    pub multiplier: f64,
    /// Relative jitter: each delay is drawn from `base × [1 − jitter, 1 + jitter]`.
    pub jitter: f64,
    /// Upper bound of the base delay.
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> BackoffConfig {
        BackoffConfig {
            initial: Duration::from_secs(1),
            multiplier: 1.6,
            jitter: 0.2,
            max: Duration::from_secs(120),
        }
    }
}

/// The backoff state of one server: the base delay of the next attempt.
#[derive(Clone, Debug)]
pub struct Backoff {
    config: BackoffConfig,
    next_base: Duration,
}

impl Backoff {
    /// A fresh backoff whose next delay is the initial one.
    pub fn new(config: BackoffConfig) -> Backoff {
        Backoff {
            config,
            next_base: config.initial,
        }
    }

    /// Forgets past failures: the next delay is the initial one again.
    pub fn reset(&mut self) {
        self.next_base = self.config.initial;
    }

    /// The base (unjittered) delay the next failure will use.
    pub fn next_base(&self) -> Duration {
        self.next_base
    }

    /// Draws the delay before the next attempt and grows the base for the one after.
    pub fn next_delay(&mut self, rng: &mut impl RngCore) -> Duration {
        let base = self.next_base.as_secs_f64();
        // A uniform draw in [-1, 1) from the top 53 bits of the RNG.
        let unit = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let factor = 1.0 + self.config.jitter * (unit * 2.0 - 1.0);
        let delay =
            Duration::try_from_secs_f64((base * factor).max(0.0)).unwrap_or(self.config.max);
        let grown = base * self.config.multiplier;
        self.next_base = Duration::try_from_secs_f64(grown)
            .unwrap_or(self.config.max)
            .min(self.config.max);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    #[test]
    fn delays_grow_by_the_multiplier_within_jitter_and_cap() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let mut backoff = Backoff::new(BackoffConfig::default());
        let mut base = 1.0f64;
        for _ in 0..30 {
            let delay = backoff.next_delay(&mut rng).as_secs_f64();
            assert!(
                delay >= base * 0.8 - 1e-9 && delay <= base * 1.2 + 1e-9,
                "{delay} vs {base}"
            );
            base = (base * 1.6).min(120.0);
        }
        assert_eq!(backoff.next_base(), Duration::from_secs(120));
        backoff.reset();
        assert_eq!(backoff.next_base(), Duration::from_secs(1));
    }

    quickcheck::quickcheck! {
        fn jittered_delay_stays_in_bounds(seed: u64, failures: u8) -> bool {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let mut backoff = Backoff::new(BackoffConfig::default());
            (0..failures).all(|_| {
                let base = backoff.next_base().as_secs_f64();
                let delay = backoff.next_delay(&mut rng).as_secs_f64();
                delay >= base * 0.8 - 1e-9 && delay <= base * 1.2 + 1e-9 && base <= 120.0
            })
        }
    }
}
