//! Retries of one RPC (gRFC A44, with gRFC A6's rules): which statuses are retried, how
//! many attempts are made, and the backoff between them.
//!
//! A44 maps the route's `retry_policy` onto gRPC's: `retry_on` gives the retryable
//! codes, `num_retries + 1` (at most 5) the attempts, `retry_back_off` the initial and
//! maximum backoff, with a multiplier of 2. The delay before retry `n` is drawn
//! uniformly from `[0, min(initial × 2^(n-1), max))` (A6's full jitter) with the random
//! draw the caller passes in, so a seeded channel replays. A server's
//! `grpc-retry-pushback-ms` overrides the delay (and resets the backoff), or forbids
//! the retry when it is negative or malformed.
//!
//! It also keeps A6's one transparent retry of an attempt the server refused before its
//! application saw it, which needs no policy and counts as no attempt.

use std::time::Duration;

use xds_proto_core::resource::route::RetryPolicy;

/// The retry multiplier gRPC uses for xDS retry policies (A44).
const BACKOFF_MULTIPLIER: u32 = 2;

/// Where one RPC stands in its retry policy.
#[derive(Debug)]
pub(crate) struct RetryState {
    attempts: u32,
    backoff: Duration,
    /// The transparent retry of a refused attempt is still to be had (once per RPC).
    transparent_retry: bool,
}

impl RetryState {
    /// Before the first attempt.
    pub(crate) fn new(policy: Option<&RetryPolicy>) -> RetryState {
        RetryState {
            attempts: 1,
            backoff: policy.map_or(Duration::ZERO, |p| p.base_interval),
            transparent_retry: true,
        }
    }

    /// After an attempt the server refused before its application saw it (A6): whether
    /// it is retried at once, which an RPC may do once. It counts as no attempt, and
    /// needs no policy. (gRPC-Go allows it for the first attempt only, which differs
    /// from once per RPC when an earlier attempt failed or was retried.)
    pub(crate) fn take_transparent_retry(&mut self) -> bool {
        std::mem::replace(&mut self.transparent_retry, false)
    }

    /// Whether an attempt may follow the current one: by the policy or as the
    /// transparent retry. When none may, the attempt can take what it would share.
    pub(crate) fn may_retry(&self, policy: Option<&RetryPolicy>) -> bool {
        self.transparent_retry || policy.is_some_and(|p| self.attempts < p.max_attempts)
    }

    /// The attempts made so far, the current one included.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether `policy` would retry an attempt that ended with `code`, attempts left
    /// aside: the code is one of its `retry_on` codes.
    pub(crate) fn retries_code(policy: Option<&RetryPolicy>, code: tonic::Code) -> bool {
        policy.is_some_and(|p| {
            p.retryable_codes
                .iter()
                .any(|c| i64::from(c.code()) == code as i64)
        })
    }

    /// After an attempt ended with `code`: the delay before the next attempt, or
    /// `None` when the RPC ends with this attempt's status. `pushback` is what the
    /// server's trailers said (see `wire::retry_pushback`); `random` is a uniform draw
    /// used for the jitter.
    pub(crate) fn next_attempt(
        &mut self,
        policy: Option<&RetryPolicy>,
        code: tonic::Code,
        pushback: Option<Option<Duration>>,
        random: u32,
    ) -> Option<Duration> {
        let policy = policy?;
        if !RetryState::retries_code(Some(policy), code) || self.attempts >= policy.max_attempts {
            return None;
        }
        let delay = match pushback {
            Some(None) => return None,
            Some(Some(delay)) => {
                self.backoff = policy.base_interval;
                delay
            }
            None => {
                let delay = self
                    .backoff
                    .mul_f64(f64::from(random) / (f64::from(u32::MAX) + 1.0));
                self.backoff = (self.backoff * BACKOFF_MULTIPLIER).min(policy.max_interval);
                delay
            }
        };
        self.attempts += 1;
        Some(delay)
    }
}

#[cfg(test)]
mod tests {
    use xds_proto_core::resource::route::RetryableCode;

    use super::*;

    fn policy(num_retries: u32) -> RetryPolicy {
        RetryPolicy {
            retryable_codes: vec![RetryableCode::Unavailable],
            http_conditions: Vec::new(),
            retriable_status_codes: Vec::new(),
            num_retries,
            max_attempts: (num_retries + 1).min(5),
            per_try_timeout: None,
            base_interval: Duration::from_millis(10),
            max_interval: Duration::from_millis(25),
        }
    }

    #[test]
    fn only_the_policy_codes_are_retried_and_attempts_are_capped() {
        let p = policy(2);
        let mut state = RetryState::new(Some(&p));
        let unavailable = tonic::Code::Unavailable;
        assert_eq!(
            state.next_attempt(Some(&p), tonic::Code::Internal, None, 0),
            None
        );
        assert_eq!(state.next_attempt(None, unavailable, None, 0), None);
        assert!(state.next_attempt(Some(&p), unavailable, None, 0).is_some());
        assert!(state.next_attempt(Some(&p), unavailable, None, 0).is_some());
        assert_eq!(state.attempts(), 3);
        assert_eq!(
            state.next_attempt(Some(&p), unavailable, None, 0),
            None,
            "3 attempts"
        );
        let many = policy(10);
        let mut state = RetryState::new(Some(&many));
        let made = (0..10)
            .filter(|_| {
                state
                    .next_attempt(Some(&many), unavailable, None, 0)
                    .is_some()
            })
            .count();
        assert_eq!(made, 4, "gRPC makes at most 5 attempts");
    }

    /// A6: one transparent retry per RPC, with or without a policy, and it takes none
    /// of the policy's attempts.
    #[test]
    fn the_transparent_retry_is_had_once_and_is_no_attempt() {
        let mut state = RetryState::new(None);
        assert!(state.may_retry(None));
        assert!(state.take_transparent_retry());
        assert!(!state.take_transparent_retry(), "once per RPC");
        assert!(!state.may_retry(None), "nothing follows without a policy");

        let p = policy(1);
        let mut state = RetryState::new(Some(&p));
        assert!(state.take_transparent_retry());
        let unavailable = tonic::Code::Unavailable;
        assert!(state.next_attempt(Some(&p), unavailable, None, 0).is_some());
        assert_eq!(state.attempts(), 2);
        assert!(!state.may_retry(Some(&p)));
        assert_eq!(state.next_attempt(Some(&p), unavailable, None, 0), None);
    }

    #[test]
    fn backoff_is_jittered_below_a_doubling_cap() {
        let p = policy(4);
        let mut state = RetryState::new(Some(&p));
        let top = u32::MAX;
        let code = tonic::Code::Unavailable;
        let delays: Vec<Duration> = (0..4)
            .map(|_| state.next_attempt(Some(&p), code, None, top).unwrap())
            .collect();
        // Just under 10, 20, 25 and 25 ms: the cap doubles up to max_interval.
        let caps = [10, 20, 25, 25].map(Duration::from_millis);
        for (delay, cap) in delays.iter().zip(caps) {
            assert!(
                *delay <= cap && *delay > cap * 99 / 100,
                "{delay:?} vs {cap:?}"
            );
        }
        let mut state = RetryState::new(Some(&p));
        assert_eq!(
            state.next_attempt(Some(&p), code, None, 0),
            Some(Duration::ZERO)
        );
        let half = state.next_attempt(Some(&p), code, None, 1 << 31).unwrap();
        assert_eq!(half, Duration::from_millis(10));
    }

    #[test]
    fn server_pushback_sets_the_delay_or_forbids_the_retry() {
        let p = policy(3);
        let code = tonic::Code::Unavailable;
        let mut state = RetryState::new(Some(&p));
        let pushback = Some(Some(Duration::from_millis(300)));
        assert_eq!(
            state.next_attempt(Some(&p), code, pushback, 0),
            Some(Duration::from_millis(300))
        );
        assert_eq!(state.next_attempt(Some(&p), code, Some(None), 0), None);
    }
}
