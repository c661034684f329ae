//! Fault injection (gRFC A33), a client filter: its config (`HTTPFault`, top-level and
//! per-route, the same message) validated once into [`FaultConfig`], and the per-RPC
//! decision: a delay before the RPC sends anything and an abort with a status, each
//! drawn with its own random number, from the config or from the RPC's
//! `x-envoy-fault-*` headers when the config says `header_delay` / `header_abort`.
//!
//! `max_active_faults` bounds the RPCs that are being faulted in the whole process
//! (A33: one gauge for every channel). The counting is [`ActiveFaults`], here, so that
//! the check and the increment are one atomic step whoever calls; the embedder owns the
//! one instance (the adapters keep a process-wide static) and the RPC holds its
//! [`InjectedFault`] (its place in the count) until the fault is over: after the
//! delay, or once aborted.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::client::{Code, Status};
use crate::pb::envoy::extensions::filters::common::fault::v3 as common_fault_pb;
use crate::pb::envoy::extensions::filters::http::fault::v3 as fault_pb;
use crate::pb::envoy::r#type::v3 as type_pb;
use crate::resource::validate::{FieldError, decode_message, duration};
use crate::selector::{Metadata, RandomSource};

/// Header that delays the RPC by this many milliseconds (with `header_delay`).
pub const DELAY_HEADER: &str = "x-envoy-fault-delay-request";
/// Header that lowers the delay percentage's numerator (capped by the config's).
pub const DELAY_PERCENTAGE_HEADER: &str = "x-envoy-fault-delay-request-percentage";
/// Header that aborts the RPC with this HTTP status, mapped to gRPC (with `header_abort`).
pub const ABORT_HTTP_HEADER: &str = "x-envoy-fault-abort-request";
/// Header that aborts the RPC with this gRPC status code (with `header_abort`).
pub const ABORT_GRPC_HEADER: &str = "x-envoy-fault-abort-grpc-request";
/// Header that lowers the abort percentage's numerator (capped by the config's).
pub const ABORT_PERCENTAGE_HEADER: &str = "x-envoy-fault-abort-request-percentage";

/// The message of an aborted RPC's status (gRPC-Go's).
pub const ABORT_MESSAGE: &str = "RPC terminated due to fault injection";

/// A validated `HTTPFault`. gRPC ignores `upstream_cluster`, `headers`,
/// `downstream_nodes`, `response_rate_limit` and the `*_runtime` fields (A33).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultConfig {
    /// `delay`, if set.
    pub delay: Option<FaultDelay>,
    /// `abort`, if set.
    pub abort: Option<FaultAbort>,
    /// `max_active_faults`: no fault is injected while this many RPCs of the process
    /// are being faulted. `None`: no limit.
    pub max_active_faults: Option<u32>,
}

/// A validated `FaultDelay`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultDelay {
    /// How long.
    pub source: DelaySource,
    /// Of how many RPCs.
    pub percentage: Fraction,
}

/// Where a delay's length comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelaySource {
    /// `fixed_delay`.
    Fixed(Duration),
    /// `header_delay`: the RPC's [`DELAY_HEADER`], in milliseconds; no header, no delay.
    Header,
}

/// A validated `FaultAbort`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultAbort {
    /// With which status.
    pub source: AbortSource,
    /// Of how many RPCs.
    pub percentage: Fraction,
}

/// Where an abort's status comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortSource {
    /// `grpc_status`, or `http_status` mapped to gRPC at decode time (A33).
    Code(Code),
    /// `header_abort`: the RPC's [`ABORT_GRPC_HEADER`], else its [`ABORT_HTTP_HEADER`];
    /// neither, no abort.
    Header,
}

/// A `FractionalPercent`: `numerator` out of `denominator` (100, 10,000 or 1,000,000).
/// A numerator above the denominator means always.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fraction {
    /// The numerator.
    pub numerator: u32,
    /// The denominator: 100, 10,000 or 1,000,000.
    pub denominator: u32,
}

impl Fraction {
    /// Whether one draw falls under the fraction: a uniform `u32` scaled into
    /// `[0, denominator)` is below the numerator. Takes exactly one number.
    pub fn draw<R: RandomSource + ?Sized>(self, rng: &mut R) -> bool {
        let point = (u64::from(rng.next_u32()) * u64::from(self.denominator)) >> 32;
        point < u64::from(self.numerator)
    }

    /// The fraction with its numerator lowered to `numerator` when that is smaller
    /// (the `*-percentage` headers may only lower the config's; A33).
    fn capped(self, numerator: Option<u32>) -> Fraction {
        Fraction {
            numerator: numerator.map_or(self.numerator, |n| n.min(self.numerator)),
            ..self
        }
    }

    /// An absent `percentage`: never (gRPC-Go reads the absent message's zero numerator).
    const NEVER: Fraction = Fraction {
        numerator: 0,
        denominator: 100,
    };

    fn parse(fp: Option<&type_pb::FractionalPercent>) -> Result<Fraction, FieldError> {
        use type_pb::fractional_percent::DenominatorType;
        let Some(fp) = fp else {
            return Ok(Fraction::NEVER);
        };
        let denominator = match DenominatorType::try_from(fp.denominator) {
            Ok(DenominatorType::Hundred) => 100,
            Ok(DenominatorType::TenThousand) => 10_000,
            Ok(DenominatorType::Million) => 1_000_000,
            Err(_) => {
                return Err(FieldError::new(
                    "denominator",
                    format!("unknown denominator type {}", fp.denominator),
                ));
            }
        };
        Ok(Fraction {
            numerator: fp.numerator,
            denominator,
        })
    }
}

impl FaultConfig {
    /// Parses a serialized `HTTPFault`; errors name fields relative to it.
    pub fn parse(bytes: &[u8]) -> Result<FaultConfig, FieldError> {
        let fault: fault_pb::HttpFault = decode_message(bytes, "", "HTTPFault")?;
        let delay = fault
            .delay
            .as_ref()
            .map(parse_delay)
            .transpose()
            .map_err(|e| e.at("delay"))?;
        let abort = fault
            .abort
            .as_ref()
            .map(parse_abort)
            .transpose()
            .map_err(|e| e.at("abort"))?;
        Ok(FaultConfig {
            delay,
            abort,
            max_active_faults: fault.max_active_faults.map(|m| m.value),
        })
    }

    /// The fault this filter injects into one RPC, if any: nothing (and no random
    /// number drawn) while `max_active_faults` RPCs are being faulted; else the delay
    /// (one draw, when it applies), then the abort (another draw), as A33 says. A
    /// fault is counted in `active` until the returned value is dropped.
    pub fn decide<'a, M, R>(
        &self,
        metadata: &M,
        rng: &mut R,
        active: &'a ActiveFaults,
    ) -> Option<InjectedFault<'a>>
    where
        M: Metadata + ?Sized,
        R: RandomSource + ?Sized,
    {
        if self
            .max_active_faults
            .is_some_and(|max| active.count() >= max)
        {
            return None;
        }
        let delay = self.delay.and_then(|d| d.decide(metadata, rng));
        let abort = self.abort.and_then(|a| a.decide(metadata, rng));
        if delay.is_none() && abort.is_none() {
            return None;
        }
        let guard = active.enter(self.max_active_faults)?;
        Some(InjectedFault {
            delay,
            abort,
            guard,
        })
    }
}

fn parse_delay(delay: &common_fault_pb::FaultDelay) -> Result<FaultDelay, FieldError> {
    use common_fault_pb::fault_delay::FaultDelaySecifier as Spec;
    let source = match &delay.fault_delay_secifier {
        Some(Spec::FixedDelay(d)) => {
            DelaySource::Fixed(duration(d).map_err(|e| e.at("fixed_delay"))?)
        }
        Some(Spec::HeaderDelay(_)) => DelaySource::Header,
        None => return Err(FieldError::missing("fixed_delay")),
    };
    let percentage = Fraction::parse(delay.percentage.as_ref()).map_err(|e| e.at("percentage"))?;
    Ok(FaultDelay { source, percentage })
}

fn parse_abort(abort: &fault_pb::FaultAbort) -> Result<FaultAbort, FieldError> {
    use fault_pb::fault_abort::ErrorType;
    let source = match &abort.error_type {
        Some(ErrorType::HttpStatus(s)) if (200..600).contains(s) => {
            AbortSource::Code(code_of_http_status(*s))
        }
        Some(ErrorType::HttpStatus(s)) => {
            return Err(FieldError::new(
                "http_status",
                format!("value {s} must be in the range [200, 600)"),
            ));
        }
        Some(ErrorType::GrpcStatus(s)) => {
            AbortSource::Code(Code(i32::try_from(*s).map_err(|_| {
                FieldError::new("grpc_status", format!("value {s} is not a status code"))
            })?))
        }
        Some(ErrorType::HeaderAbort(_)) => AbortSource::Header,
        None => return Err(FieldError::missing("error_type")),
    };
    let percentage = Fraction::parse(abort.percentage.as_ref()).map_err(|e| e.at("percentage"))?;
    Ok(FaultAbort { source, percentage })
}

/// The gRPC status of an HTTP status, as gRPC maps a response without `grpc-status`
/// (doc/http-grpc-status-mapping.md; A33: 200 is UNKNOWN).
pub fn code_of_http_status(status: u32) -> Code {
    match status {
        400 => Code::INTERNAL,
        401 => Code::UNAUTHENTICATED,
        403 => Code::PERMISSION_DENIED,
        404 => Code::UNIMPLEMENTED,
        429 | 502..=504 => Code::UNAVAILABLE,
        _ => Code::UNKNOWN,
    }
}

/// The first value of `name` that `parse` accepts (A33: invalid values are ignored;
/// of several valid ones any may be taken).
fn header<M: Metadata + ?Sized, T>(
    metadata: &M,
    name: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    let mut found = None;
    metadata.for_each_value(name, &mut |v| {
        if found.is_none() {
            found = parse(v.trim());
        }
    });
    found
}

fn parse_u32(v: &str) -> Option<u32> {
    v.parse().ok()
}

impl FaultDelay {
    fn decide<M: Metadata + ?Sized, R: RandomSource + ?Sized>(
        self,
        metadata: &M,
        rng: &mut R,
    ) -> Option<Duration> {
        let (delay, percentage) = match self.source {
            DelaySource::Fixed(d) => (d, self.percentage),
            DelaySource::Header => {
                let ms = header(metadata, DELAY_HEADER, |v| v.parse::<u64>().ok())?;
                let cap = header(metadata, DELAY_PERCENTAGE_HEADER, parse_u32);
                (Duration::from_millis(ms), self.percentage.capped(cap))
            }
        };
        percentage.draw(rng).then_some(delay)
    }
}

impl FaultAbort {
    fn decide<M: Metadata + ?Sized, R: RandomSource + ?Sized>(
        self,
        metadata: &M,
        rng: &mut R,
    ) -> Option<Code> {
        let (code, percentage) = match self.source {
            AbortSource::Code(code) => (code, self.percentage),
            AbortSource::Header => {
                let grpc = header(metadata, ABORT_GRPC_HEADER, |v| {
                    parse_u32(v).filter(|c| *c <= 16).map(|c| Code(c as i32))
                });
                let code = grpc.or_else(|| {
                    header(metadata, ABORT_HTTP_HEADER, |v| {
                        parse_u32(v)
                            .filter(|s| (200..600).contains(s))
                            .map(code_of_http_status)
                    })
                })?;
                let cap = header(metadata, ABORT_PERCENTAGE_HEADER, parse_u32);
                (code, self.percentage.capped(cap))
            }
        };
        percentage.draw(rng).then_some(code)
    }
}

/// The fault one RPC gets: first the delay, then the abort. While it lives the RPC
/// counts as faulted (`max_active_faults`); drop it once the delay is over and the
/// abort, if any, is returned.
#[derive(Debug)]
pub struct InjectedFault<'a> {
    /// Wait this long before the RPC sends anything (bounded by its deadline).
    pub delay: Option<Duration>,
    /// Then end it with this code and [`ABORT_MESSAGE`], without sending it.
    pub abort: Option<Code>,
    guard: ActiveFaultGuard<'a>,
}

impl InjectedFault<'_> {
    /// The status of the abort, if any.
    pub fn abort_status(&self) -> Option<Status> {
        self.abort.map(|code| Status::new(code, ABORT_MESSAGE))
    }

    /// Adds a later fault filter's fault to this one (their delays add up; the first
    /// abort wins), counting once for the RPC.
    pub(super) fn merge(&mut self, later: InjectedFault<'_>) {
        self.delay = match (self.delay, later.delay) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
        self.abort = self.abort.or(later.abort);
    }

    /// The counter the fault holds a place in.
    pub fn active_faults(&self) -> &ActiveFaults {
        self.guard.faults
    }
}

/// The number of RPCs being faulted (A33's gauge behind `max_active_faults`). One per
/// process: every channel's faults count against every fault filter's limit.
#[derive(Debug, Default)]
pub struct ActiveFaults {
    count: AtomicU32,
}

impl ActiveFaults {
    /// An empty gauge (`const`, for a process-wide `static`).
    pub const fn new() -> ActiveFaults {
        ActiveFaults {
            count: AtomicU32::new(0),
        }
    }

    /// The RPCs being faulted now.
    pub fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    /// Counts one more faulted RPC unless `max` are already counted: one atomic step,
    /// so two channels cannot both take the last place.
    fn enter(&self, max: Option<u32>) -> Option<ActiveFaultGuard<'_>> {
        let max = max.unwrap_or(u32::MAX);
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        Some(ActiveFaultGuard { faults: self })
    }
}

/// One faulted RPC's place in [`ActiveFaults`], given back on drop.
#[derive(Debug)]
struct ActiveFaultGuard<'a> {
    faults: &'a ActiveFaults,
}

impl Drop for ActiveFaultGuard<'_> {
    fn drop(&mut self) {
        self.faults.count.fetch_sub(1, Ordering::AcqRel);
    }
}
