//! The earliest-deadline-first scheduler of weighted round robin (A58): each READY
//! endpoint is a job whose period is inversely proportional to its weight; a pick takes
//! the job with the earliest deadline (on a tie, the one listed first, as grpc-java's
//! EDF scheduler breaks ties by insertion order) and moves its deadline one period on.
//! Initial deadlines are drawn in `[0, period)` so that clients do not move in step.
//!
//! Weights are normalized when the scheduler is built: an endpoint without a usable
//! weight (0) gets the mean of the others', and with fewer than two usable weights
//! every endpoint gets the same one, so the scheduler is round robin (A58). Periods
//! are bounded to `[1, MAX_PERIOD]` (a weight below `max / MAX_PERIOD` counts as that),
//! so one huge report cannot starve every other endpoint to nothing or stall a pick.
//!
//! Built on every weight update and every change of the READY set, never on a pick: a
//! pick moves one deadline and sifts it down a binary heap kept in a `Vec`, allocating
//! nothing.

use std::cmp::Ordering;

/// The longest period, relative to the heaviest endpoint's 1: weights are clamped to
/// at least `1 / MAX_PERIOD` of the largest.
pub(super) const MAX_PERIOD: f64 = 65_536.0;

/// Deadlines beyond this are moved back toward 0 (all by the same amount, keeping
/// their order) so that adding a period never loses precision.
const REBASE_AT: f64 = (1u64 << 40) as f64;

#[derive(Clone, Copy, Debug)]
struct Job {
    deadline: f64,
    period: f64,
    index: u32,
}

impl Job {
    /// Earlier deadline first, then the lower index.
    fn before(&self, other: &Job) -> bool {
        match self.deadline.total_cmp(&other.deadline) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => self.index < other.index,
        }
    }
}

/// An EDF scheduler over endpoint indices `0..n`.
#[derive(Debug, Default)]
pub(super) struct EdfScheduler {
    /// A binary min-heap by [`Job::before`].
    heap: Vec<Job>,
}

impl EdfScheduler {
    /// Rebuilds the scheduler for these weights (one per endpoint; 0 or anything not
    /// finite and positive means no usable weight), drawing each initial deadline from
    /// `random`. Reuses its allocation.
    pub(super) fn rebuild(&mut self, weights: &[f64], mut random: impl FnMut() -> u64) {
        self.heap.clear();
        for (index, period) in periods(weights).enumerate() {
            let start = (random() >> 11) as f64 / (1u64 << 53) as f64;
            self.heap.push(Job {
                deadline: start * period,
                period,
                index: index as u32,
            });
        }
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// How many endpoints it schedules.
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    /// The next endpoint's index; `None` when there are none.
    pub(super) fn pick(&mut self) -> Option<usize> {
        let top = self.heap.first_mut()?;
        let index = top.index as usize;
        top.deadline += top.period;
        if top.deadline > REBASE_AT {
            self.rebase();
        }
        self.sift_down(0);
        Some(index)
    }

    /// Moves every deadline back by the earliest one's (order is kept: subtracting the
    /// same value is monotonic).
    #[cold]
    fn rebase(&mut self) {
        let base = self
            .heap
            .iter()
            .map(|j| j.deadline)
            .fold(f64::INFINITY, f64::min);
        for job in &mut self.heap {
            job.deadline -= base;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= n {
                return;
            }
            let right = left + 1;
            let child = if right < n && self.heap[right].before(&self.heap[left]) {
                right
            } else {
                left
            };
            if !self.heap[child].before(&self.heap[i]) {
                return;
            }
            self.heap.swap(i, child);
            i = child;
        }
    }
}

/// Each endpoint's period: `max / weight` over normalized weights (see the module
/// documentation), in `[1, MAX_PERIOD]`.
pub(super) fn periods(weights: &[f64]) -> impl Iterator<Item = f64> + '_ {
    let usable = |w: f64| w.is_finite() && w > 0.0;
    let max = weights
        .iter()
        .copied()
        .filter(|w| usable(*w))
        .fold(0.0, f64::max);
    let count = weights.iter().filter(|w| usable(**w)).count();
    // Means of weights relative to the largest: each term is at most 1, so the sum of
    // even many huge weights stays finite.
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
    weights.iter().map(move |&w| {
        if count < 2 {
            return 1.0;
        }
        let relative = if usable(w) { w / max } else { mean };
        (1.0 / relative).clamp(1.0, MAX_PERIOD)
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

    /// Each count within one pick of what is expected (a deadline's random start
    /// moves a job's count by at most one).
    fn assert_close(counts: &[usize], expected: &[usize]) {
        let close = counts
            .iter()
            .zip(expected)
            .all(|(c, e)| c.abs_diff(*e) <= 1);
        assert!(close, "{counts:?} vs {expected:?}");
    }

    fn shares(weights: &[f64], picks: usize) -> Vec<usize> {
        let mut s = EdfScheduler::default();
        s.rebuild(weights, counter());
        let mut counts = vec![0; weights.len()];
        for _ in 0..picks {
            counts[s.pick().unwrap()] += 1;
        }
        counts
    }

    #[test]
    fn picks_follow_the_weights_exactly_over_a_cycle() {
        // Periods 1, 2 and 4: in every 7 picks, 4, 2 and 1.
        assert_close(&shares(&[4.0, 2.0, 1.0], 7000), &[4000, 2000, 1000]);
    }

    #[test]
    fn endpoints_without_weight_get_the_mean() {
        // Relative weights 1 and 0.5: the mean is 0.75, a period of 4/3.
        let p: Vec<f64> = periods(&[2.0, 1.0, 0.0]).collect();
        assert_eq!(p, [1.0, 2.0, 4.0 / 3.0]);
        assert_close(&shares(&[2.0, 1.0, 0.0], 9000), &[4000, 2000, 3000]);
    }

    #[test]
    fn fewer_than_two_weights_is_round_robin() {
        for weights in [
            &[0.0, 0.0, 0.0][..],
            &[0.0, 5.0, 0.0],
            &[f64::NAN, 1.0, -1.0],
        ] {
            assert!(periods(weights).all(|p| p == 1.0), "{weights:?}");
            assert_close(&shares(weights, 300), &[100, 100, 100]);
        }
    }

    #[test]
    fn equal_deadlines_go_to_the_endpoint_listed_first() {
        let mut s = EdfScheduler::default();
        // Initial deadlines all 0 (random() = 0), equal periods.
        s.rebuild(&[1.0, 1.0, 1.0], || 0);
        let order: Vec<usize> = (0..6).map(|_| s.pick().unwrap()).collect();
        assert_eq!(order, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn a_thousand_equal_deadlines_go_in_listed_order() {
        let mut s = EdfScheduler::default();
        s.rebuild(&[1.0; 1000], || 0);
        for round in 0..3 {
            let order: Vec<usize> = (0..1000).map(|_| s.pick().unwrap()).collect();
            assert!(
                order.iter().copied().eq(0..1000),
                "round {round}: {order:?}"
            );
        }
    }

    #[test]
    fn extreme_weights_are_bounded() {
        let p: Vec<f64> = periods(&[f64::MAX, 1e-300, f64::INFINITY, 1.0]).collect();
        assert_eq!(p[0], 1.0);
        assert_eq!(p[1], MAX_PERIOD);
        assert!(p.iter().all(|p| (1.0..=MAX_PERIOD).contains(p)), "{p:?}");
        // The lightest endpoint still gets its bounded share.
        assert_close(&shares(&[1.0, 1e-12], 2 * 65_537), &[2 * 65_536, 2]);
    }

    #[test]
    fn deadlines_are_rebased_without_changing_the_order() {
        let mut s = EdfScheduler::default();
        s.rebuild(&[3.0, 1.0], || 0);
        for job in &mut s.heap {
            job.deadline += REBASE_AT;
        }
        let mut counts = [0, 0];
        counts[s.pick().unwrap()] += 1;
        assert!(s.heap.iter().all(|j| j.deadline < 10.0), "{:?}", s.heap);
        for _ in 1..4000 {
            counts[s.pick().unwrap()] += 1;
        }
        assert_close(&counts, &[3000, 1000]);
    }

    #[test]
    fn an_empty_scheduler_picks_nothing() {
        let mut s = EdfScheduler::default();
        s.rebuild(&[], || 0);
        assert_eq!((s.pick(), s.len()), (None, 0));
    }
}
