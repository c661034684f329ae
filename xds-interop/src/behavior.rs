//! The `rpc-behavior` request metadata of gRPC's xDS test servers: what a test asks
//! one RPC to do on the server. Each value is a comma-separated list of behaviors:
//! `sleep-N` (answer after N seconds; a decimal N is this server's extension, for
//! scaled-down local runs), `keep-open` (never answer), `error-code-N` (fail with
//! status code N), `success-on-retry-attempt-N` (answer at once on retry attempt N,
//! as `grpc-previous-rpc-attempts` counts), and `hostname=H <behavior>` (only on the
//! server whose hostname is H).

use std::time::Duration;

/// The metadata key.
pub const RPC_BEHAVIOR: &str = "rpc-behavior";

/// What an RPC does on this server, from its metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Behavior {
    /// Wait this long before answering (the sum of the `sleep-N` that apply).
    pub sleep: Duration,
    /// Never answer.
    pub keep_open: bool,
    /// Fail with this status code.
    pub error_code: Option<i32>,
    /// Answer at once: a `success-on-retry-attempt-N` matched this attempt.
    pub succeed_now: bool,
}

/// A behavior that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BehaviorError(pub String);

impl std::fmt::Display for BehaviorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rpc-behavior: {}", self.0)
    }
}

impl Behavior {
    /// The behavior `values` (every `rpc-behavior` value of the request) ask of the
    /// server named `hostname`, on attempt `previous_attempts + 1`.
    ///
    /// # Errors
    /// A behavior it does not know, or a number that does not parse.
    pub fn parse<'a>(
        values: impl IntoIterator<Item = &'a str>,
        hostname: &str,
        previous_attempts: u32,
    ) -> Result<Behavior, BehaviorError> {
        let mut behavior = Behavior::default();
        for item in values.into_iter().flat_map(|v| v.split(',')) {
            let mut item = item.trim();
            if let Some(rest) = item.strip_prefix("hostname=") {
                let (host, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                if host != hostname {
                    continue;
                }
                item = rest.trim();
            }
            behavior.apply(item, previous_attempts)?;
        }
        Ok(behavior)
    }

    fn apply(&mut self, item: &str, previous_attempts: u32) -> Result<(), BehaviorError> {
        let bad = |what: &str| BehaviorError(format!("{item:?}: {what}"));
        if item.is_empty() {
        } else if item == "keep-open" {
            self.keep_open = true;
        } else if let Some(n) = item.strip_prefix("sleep-") {
            let seconds: f64 = n.parse().map_err(|_| bad("not a number of seconds"))?;
            if !(0.0..=3600.0).contains(&seconds) {
                return Err(bad("seconds out of 0..=3600"));
            }
            self.sleep += Duration::from_secs_f64(seconds);
        } else if let Some(n) = item.strip_prefix("error-code-") {
            let code: i32 = n.parse().map_err(|_| bad("not a status code"))?;
            if !(0..=16).contains(&code) {
                return Err(bad("status codes are 0 to 16"));
            }
            self.error_code = Some(code);
        } else if let Some(n) = item.strip_prefix("success-on-retry-attempt-") {
            let attempt: u32 = n.parse().map_err(|_| bad("not an attempt number"))?;
            if attempt == previous_attempts {
                self.succeed_now = true;
            }
        } else {
            return Err(bad("unknown behavior"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaviors_combine_and_hostname_selects() {
        let b = Behavior::parse(["sleep-1,error-code-14", "sleep-0.5"], "a", 0).expect("valid");
        assert_eq!(b.sleep, Duration::from_millis(1500));
        assert_eq!(b.error_code, Some(14));
        let b = Behavior::parse(["hostname=b keep-open,hostname=a error-code-3"], "a", 0)
            .expect("valid");
        assert!(!b.keep_open);
        assert_eq!(b.error_code, Some(3));
        let b = Behavior::parse(["success-on-retry-attempt-2,error-code-4"], "a", 2).expect("ok");
        assert!(b.succeed_now);
    }

    #[test]
    fn unknown_behaviors_and_bad_numbers_are_errors() {
        assert!(Behavior::parse(["jump"], "a", 0).is_err());
        assert!(Behavior::parse(["sleep-x"], "a", 0).is_err());
        assert!(Behavior::parse(["error-code-99"], "a", 0).is_err());
    }
}
