//! Virtual time for the core. The core never reads a clock: every input carries `now`
//! as an [`Instant`], a count of nanoseconds from an origin the embedder chooses (a
//! runtime's start, or zero in a simulation). Spans are plain [`std::time::Duration`]s.

use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::time::Duration;

/// A point in time, in nanoseconds since an origin chosen by the embedder.
///
/// Adapters map their runtime clock onto it; tests and fuzzers build any value they like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);
    /// The latest representable instant; arithmetic saturates here.
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// An instant `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Instant {
        Instant(millis.saturating_mul(1_000_000))
    }

    /// An instant `secs` seconds after the origin.
    pub const fn from_secs(secs: u64) -> Instant {
        Instant(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time since the origin as a `Duration`.
    pub const fn since_origin(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// The span from `earlier` to `self`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        let nanos = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(nanos))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        let nanos = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(nanos))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl SubAssign<Duration> for Instant {
    fn sub_assign(&mut self, rhs: Duration) {
        *self = *self - rhs;
    }
}

/// `later - earlier` is the span between them, saturating at zero when `earlier` is
/// the later one (as [`Instant::saturating_duration_since`]).
impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl std::fmt::Display for Instant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{:03}s",
            self.0 / 1_000_000_000,
            (self.0 / 1_000_000) % 1000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_overflowing() {
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        let t = Instant::from_secs(2) + Duration::from_millis(500);
        assert_eq!(t.as_nanos(), 2_500_000_000);
        assert_eq!(
            t.saturating_duration_since(Instant::from_secs(3)),
            Duration::ZERO
        );
        assert_eq!(t.to_string(), "2.500s");
    }

    #[test]
    fn instants_subtract_to_durations_and_assign_in_place() {
        let mut t = Instant::from_secs(1);
        t += Duration::from_millis(250);
        assert_eq!(t - Instant::from_secs(1), Duration::from_millis(250));
        assert_eq!(Instant::from_secs(1) - t, Duration::ZERO);
        t -= Duration::from_secs(2);
        assert_eq!(t, Instant::ZERO);
    }
}
