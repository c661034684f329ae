//! The static stride scheduler of weighted round robin (A58 as gRPC C-core, gRPC-Go and
//! grpc-java ship it; A58's text describes an earliest-deadline-first scheduler, which
//! they all replaced). Weights are scaled to integers relative to the largest (which
//! becomes [`MAX_WEIGHT`]); a sequence runs over `seq = generation × n + index`, and a
//! pick takes the next position whose endpoint passes its generation's test,
//! `(weight × generation + index × OFFSET) mod MAX_WEIGHT ≥ MAX_WEIGHT − weight`. Over any
//! `MAX_WEIGHT` consecutive generations each endpoint passes exactly `weight` times,
//! spread evenly; the heaviest passes every generation, so a pick takes at most `n`
//! tries and on average `n × MAX_WEIGHT / Σ weight` (the largest weight over the mean).
//! The sequence starts at a position drawn from the caller's random source.
//!
//! Weights are normalized when the scheduler is built: an endpoint without a usable
//! weight (0, or anything not finite and positive) gets the mean of the others', a
//! scaled weight is at least 1 (so a light endpoint is never starved and one huge
//! report cannot stall every other to nothing), and with fewer than two usable weights
//! every endpoint gets [`MAX_WEIGHT`], which makes the scheduler round robin (A58).
//!
//! Built on every weight update and every change of the READY set, never on a pick: a
//! pick advances two counters and compares, with no heap and no allocation.

/// The scaled weight of the heaviest endpoint (C-core's and gRPC-Go's `kMaxWeight`).
pub(super) const MAX_WEIGHT: u16 = u16::MAX;

const MAX: u32 = MAX_WEIGHT as u32;

/// Shifts each endpoint's passing generations by half a cycle from its neighbour's, so
/// endpoints of equal weight do not pass in the same generations (C-core's `kOffset`).
const OFFSET: u32 = MAX / 2;

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The scaled weight, in `1..=MAX`.
    weight: u32,
    /// `index × OFFSET mod MAX`, precomputed.
    phase: u32,
}

/// A static stride scheduler over endpoint indices `0..n`.
#[derive(Debug, Default)]
pub(super) struct StrideScheduler {
    slots: Vec<Slot>,
    /// The next position of the sequence: `seq mod n`.
    index: usize,
    /// `(seq / n) mod MAX`: the test depends on the generation only modulo `MAX`, and
    /// this keeps `weight × generation + phase` below 2³².
    generation: u32,
}

impl StrideScheduler {
    /// Rebuilds the scheduler for these weights (one per endpoint; 0 or anything not
    /// finite and positive means no usable weight), starting the sequence at a position
    /// drawn from `random`. Reuses its allocation.
    pub(super) fn rebuild(&mut self, weights: &[f64], mut random: impl FnMut() -> u64) {
        self.slots.clear();
        let slots = scaled_weights(weights)
            .enumerate()
            .map(|(index, weight)| Slot {
                weight: u32::from(weight),
                phase: ((index as u64 * u64::from(OFFSET)) % u64::from(MAX)) as u32,
            });
        self.slots.extend(slots);
        let n = self.slots.len() as u64;
        let start = random();
        (self.index, self.generation) = match n {
            0 => (0, 0),
            n => ((start % n) as usize, ((start / n) % u64::from(MAX)) as u32),
        };
    }

    /// How many endpoints it schedules.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The next endpoint's index; `None` when there are none.
    pub(super) fn pick(&mut self) -> Option<usize> {
        self.pick_counting_tries().map(|(index, _)| index)
    }

    /// The next endpoint's index and how many positions of the sequence it took (at
    /// most `n`: the heaviest endpoint passes every generation).
    fn pick_counting_tries(&mut self) -> Option<(usize, u32)> {
        let n = self.slots.len();
        if n == 0 {
            return None;
        }
        let mut tries = 0;
        loop {
            let (index, generation) = (self.index, self.generation);
            self.advance(n);
            tries += 1;
            let slot = self.slots[index];
            // At most (MAX - 1) × MAX + MAX - 1 < 2³².
            let position = (slot.weight * generation + slot.phase) % MAX;
            if position >= MAX - slot.weight {
                return Some((index, tries));
            }
        }
    }

    fn advance(&mut self, n: usize) {
        self.index += 1;
        if self.index == n {
            self.index = 0;
            self.generation += 1;
            if self.generation == MAX {
                self.generation = 0;
            }
        }
    }
}

/// Each endpoint's scaled weight: `weight / max × MAX_WEIGHT` rounded, at least 1, over
/// normalized weights (see the module documentation).
pub(super) fn scaled_weights(weights: &[f64]) -> impl Iterator<Item = u16> + '_ {
    let usable = |w: f64| w.is_finite() && w > 0.0;
    let max = weights
        .iter()
        .copied()
        .filter(|w| usable(*w))
        .fold(0.0, f64::max);
    let count = weights.iter().filter(|w| usable(**w)).count();
    // The mean of weights relative to the largest: each term is at most 1, so the sum
    // of even many huge weights stays finite.
    let mean = if count >= 2 {
        weights
            .iter()
            .filter(|w| usable(**w))
            .map(|w| w / max)
            .sum::<f64>()
            / count as f64
    } else {
        1.0
    };
    let scale = |relative: f64| {
        (relative * f64::from(MAX_WEIGHT))
            .round()
            .clamp(1.0, f64::from(MAX_WEIGHT)) as u16
    };
    weights.iter().map(move |&w| {
        if count < 2 {
            return MAX_WEIGHT;
        }
        scale(if usable(w) { w / max } else { mean })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> impl FnMut() -> u64 {
        let mut state = 0x1234_5678_u64;
        move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state
        }
    }

    fn scheduler(weights: &[f64], start: u64) -> StrideScheduler {
        let mut s = StrideScheduler::default();
        s.rebuild(weights, || start);
        s
    }

    fn counts(s: &mut StrideScheduler, picks: u64) -> Vec<u64> {
        let mut counts = vec![0; s.len()];
        for _ in 0..picks {
            counts[s.pick().unwrap()] += 1;
        }
        counts
    }

    fn scaled(weights: &[f64]) -> Vec<u64> {
        scaled_weights(weights).map(u64::from).collect()
    }

    /// Each count within one pick of `picks × share` (a count over a part of a cycle).
    fn assert_close(counts: &[u64], expected: &[f64]) {
        let close = counts
            .iter()
            .zip(expected)
            .all(|(c, e)| (*c as f64 - e).abs() <= 1.0);
        assert!(close, "{counts:?} vs {expected:?}");
    }

    #[test]
    fn picks_follow_the_scaled_weights_exactly_over_a_cycle_and_closely_within_one() {
        let weights = [4.0, 2.0, 1.0];
        // 2 × 65535 / 4 = 32767.5 and 16383.75, rounded.
        assert_eq!(scaled(&weights), [65535, 32768, 16384]);
        let mut s = scheduler(&weights, 12_345);
        let cycle: u64 = scaled(&weights).iter().sum();
        let part = counts(&mut s, 7000);
        let share = |w: u64| 7000.0 * w as f64 / cycle as f64;
        assert_close(&part, &[share(65535), share(32768), share(16384)]);
        let rest = counts(&mut s, cycle - 7000);
        let whole: Vec<u64> = part.iter().zip(&rest).map(|(a, b)| a + b).collect();
        assert_eq!(whole, [65535, 32768, 16384]);
    }

    #[test]
    fn endpoints_without_weight_get_the_mean() {
        // Relative weights 1 and 0.5: the mean is 0.75, 49151.25 scaled.
        assert_eq!(scaled(&[2.0, 1.0, 0.0]), [65535, 32768, 49151]);
        let mut s = scheduler(&[2.0, 1.0, 0.0], 99);
        assert_eq!(counts(&mut s, 65535 + 32768 + 49151), [65535, 32768, 49151]);
    }

    #[test]
    fn fewer_than_two_weights_is_round_robin_from_the_random_start() {
        for weights in [
            &[0.0, 0.0, 0.0][..],
            &[0.0, 5.0, 0.0],
            &[f64::NAN, 1.0, -1.0],
            &[7.0, 7.0, 7.0],
        ] {
            assert!(
                scaled_weights(weights).all(|w| w == MAX_WEIGHT),
                "{weights:?}"
            );
            let mut s = scheduler(weights, 4);
            let order: Vec<usize> = (0..6).map(|_| s.pick().unwrap()).collect();
            assert_eq!(order, [1, 2, 0, 1, 2, 0], "{weights:?}");
        }
    }

    #[test]
    fn a_thousand_equal_weights_go_in_listed_order_from_the_start() {
        let mut s = scheduler(&[1.0; 1000], 1000 * 7 + 998);
        let order: Vec<usize> = (0..3000).map(|_| s.pick().unwrap()).collect();
        let expected: Vec<usize> = (0..3000).map(|k| (998 + k) % 1000).collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn extreme_weights_are_bounded() {
        let w = scaled(&[f64::MAX, 1e-300, f64::INFINITY, 1.0]);
        // The infinite weight is unusable and gets the mean, (1 + 0 + 0) / 3 relative.
        assert_eq!(w, [65535, 1, 21845, 1]);
        // The lightest endpoint still gets its bounded share, exactly, every cycle.
        let mut s = scheduler(&[1.0, 1e-12], 3);
        assert_eq!(counts(&mut s, 2 * 65536), [2 * 65535, 2]);
    }

    #[test]
    fn an_empty_scheduler_picks_nothing() {
        let mut s = scheduler(&[], 0);
        assert_eq!((s.pick(), s.len()), (None, 0));
    }

    /// The picks C-core's and gRPC-Go's rule gives from sequence number `start`, with
    /// the sequence never wrapped: the reference for the scheduler's counters.
    fn reference_picks(weights: &[u64], start: u64, picks: usize) -> Vec<usize> {
        let n = weights.len() as u128;
        let mut seq = u128::from(start);
        let mut out = Vec::with_capacity(picks);
        while out.len() < picks {
            let (index, generation) = (seq % n, seq / n);
            seq += 1;
            let weight = u128::from(weights[index as usize]);
            let m = u128::from(MAX);
            if (weight * generation + index * u128::from(OFFSET)) % m >= m - weight {
                out.push(index as usize);
            }
        }
        out
    }

    #[test]
    fn picks_are_the_documented_rule_across_the_generation_wrap() {
        fn prop(raw: Vec<u16>, start: u64, near_wrap: bool) -> quickcheck::TestResult {
            let weights: Vec<f64> = raw.iter().take(8).map(|w| f64::from(*w)).collect();
            if weights.is_empty() {
                return quickcheck::TestResult::discard();
            }
            let n = weights.len() as u64;
            // Near the end of a cycle of generations, so the counters wrap.
            let start = if near_wrap {
                (u64::from(MAX) - 1) * n + start % (2 * n)
            } else {
                start
            };
            let mut s = scheduler(&weights, start);
            let got: Vec<usize> = (0..500).map(|_| s.pick().unwrap()).collect();
            let want = reference_picks(&scaled(&weights), start, 500);
            if got == want {
                quickcheck::TestResult::passed()
            } else {
                quickcheck::TestResult::error(format!(
                    "{weights:?} from {start}: {got:?} vs {want:?}"
                ))
            }
        }
        quickcheck::QuickCheck::new()
            .tests(200)
            .quickcheck(prop as fn(Vec<u16>, u64, bool) -> quickcheck::TestResult);
    }

    #[test]
    fn every_cycle_of_picks_matches_the_scaled_weights_exactly() {
        fn prop(raw: Vec<u16>, start: u64) -> quickcheck::TestResult {
            let weights: Vec<f64> = raw.iter().take(5).map(|w| f64::from(*w)).collect();
            if weights.len() < 2 {
                return quickcheck::TestResult::discard();
            }
            let expected = scaled(&weights);
            let cycle: u64 = expected.iter().sum();
            let mut s = scheduler(&weights, start);
            for k in 0..2 {
                let got = counts(&mut s, cycle);
                if got != expected {
                    return quickcheck::TestResult::error(format!(
                        "{weights:?}, cycle {k}: {got:?}"
                    ));
                }
            }
            quickcheck::TestResult::passed()
        }
        quickcheck::QuickCheck::new()
            .tests(30)
            .quickcheck(prop as fn(Vec<u16>, u64) -> quickcheck::TestResult);
    }

    #[test]
    fn a_pick_takes_at_most_n_tries_and_a_cycle_about_n_generations() {
        // One endpoint at the largest weight, 999 at 1 / 65535 of it: the worst case, a
        // pick tries about 1,000 / (1 + 999 / 65535) positions on average.
        let mut weights = vec![1.0; 1000];
        weights[500] = 65535.0;
        let mut rng = counter();
        let mut s = StrideScheduler::default();
        s.rebuild(&weights, &mut rng);
        let cycle = 65535 + 999;
        let (mut most, mut total, mut light) = (0, 0u64, 0);
        for _ in 0..cycle {
            let (index, tries) = s.pick_counting_tries().unwrap();
            most = most.max(tries);
            total += u64::from(tries);
            light += u64::from(index != 500);
        }
        assert!(most <= 1000, "{most}");
        assert_eq!(light, 999);
        // A cycle of picks spans the positions of 65535 generations, less the
        // rejected ones after its last pick (fewer than n).
        assert!(
            (1000 * 65535 - 999..=1000 * 65535).contains(&total),
            "{total}"
        );
        // And the reverse: 999 endpoints at the largest weight, one at 1: at most 2.
        let mut weights = vec![65535.0; 1000];
        weights[0] = 1.0;
        s.rebuild(&weights, &mut rng);
        let most = (0..100_000)
            .map(|_| s.pick_counting_tries().unwrap().1)
            .max();
        assert_eq!(most, Some(2));
    }
}
