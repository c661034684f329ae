//! The small trait through which the shared code uses a runtime: spawning a task,
//! reading the clock, sleeping, and opening a TCP connection. Everything else (TLS,
//! HTTP/2, gRPC, the drive loop) is written once on top of it. `WallClock` maps the
//! runtime's instants back to wall-clock times for what must show them (CSDS).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::io::{AsyncRead, AsyncWrite};
use xds_proto_core::Instant;
use xds_proto_core::pb::google::protobuf::Timestamp;

/// A boxed, sendable future, as the runtime trait passes them around.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What an adapter implements to run the shared client on its runtime.
///
/// The clock is the runtime's own (so a runtime with virtual time, such as tokio's
/// paused clock, drives the core's timers virtually); `now` maps it onto the core's
/// [`Instant`], counted from an origin the implementation picks once.
pub trait Runtime: Clone + Send + Sync + Unpin + 'static {
    /// A connected TCP stream.
    type TcpStream: AsyncRead + AsyncWrite + Send + Unpin + 'static;

    /// The runtime of the calling context, or why there is none (for example: not
    /// called from inside a tokio runtime).
    fn current() -> Result<Self, String>;

    /// Runs a task in the background until it completes.
    fn spawn(&self, task: BoxFuture<()>);

    /// The current time on the runtime's clock.
    fn now(&self) -> Instant;

    /// A future that completes after `duration` on the runtime's clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<()>;

    /// Opens a TCP connection to `host:port`, resolving `host` if it is a name.
    fn connect_tcp(&self, host: &str, port: u16) -> BoxFuture<io::Result<Self::TcpStream>>;
}

/// Lets hyper spawn its connection tasks on a [`Runtime`].
#[derive(Clone, Debug)]
pub(crate) struct HyperExecutor<R>(pub(crate) R);

impl<R: Runtime, F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F>
    for HyperExecutor<R>
{
    fn execute(&self, fut: F) {
        self.0.spawn(Box::pin(fut));
    }
}

/// Lets hyper's HTTP/2 keepalive read the time and sleep on a [`Runtime`]'s clock (so
/// that it runs in virtual time under a paused clock, as the core's timers do). hyper
/// counts in `std::time::Instant`s: the runtime's time since the timer was made is
/// added to the system instant read then.
#[derive(Clone, Debug)]
pub(crate) struct HyperTimer<R> {
    rt: R,
    origin: Instant,
    origin_std: std::time::Instant,
}

impl<R: Runtime> HyperTimer<R> {
    pub(crate) fn new(rt: R) -> HyperTimer<R> {
        HyperTimer {
            origin: rt.now(),
            origin_std: std::time::Instant::now(),
            rt,
        }
    }
}

impl<R: Runtime> hyper::rt::Timer for HyperTimer<R> {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(std::sync::Mutex::new(self.rt.sleep(duration))))
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep(deadline.saturating_duration_since(self.now()))
    }

    fn now(&self) -> std::time::Instant {
        self.origin_std + self.rt.now().saturating_duration_since(self.origin)
    }
}

/// A runtime sleep as hyper wants it: `Sync` too (the mutex is never locked: polling
/// takes it by `&mut`).
struct HyperSleep(std::sync::Mutex<BoxFuture<()>>);

impl Future for HyperSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let sleep = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        sleep.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for HyperSleep {}

/// Which wall-clock time a runtime [`Instant`] is: the runtime's instant and the system
/// time read together when a client starts, so that an instant maps to the system time
/// at the start plus the runtime time elapsed since (virtual time, under a paused
/// clock). The core keeps no clock; an adapter may read the system's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WallClock {
    start: Instant,
    start_wall: SystemTime,
}

impl WallClock {
    /// The mapping anchored at `start` on the runtime's clock, read now.
    pub(crate) fn starting_at(start: Instant) -> WallClock {
        WallClock::anchored(start, SystemTime::now())
    }

    /// The mapping in which `start` is `start_wall`.
    pub(crate) fn anchored(start: Instant, start_wall: SystemTime) -> WallClock {
        WallClock { start, start_wall }
    }

    /// The wall-clock time of `at`.
    pub(crate) fn system_time(&self, at: Instant) -> SystemTime {
        if at >= self.start {
            self.start_wall + (at - self.start)
        } else {
            self.start_wall - (self.start - at)
        }
    }

    /// The protobuf `Timestamp` of `at` (as CSDS reports it).
    pub(crate) fn timestamp(&self, at: Instant) -> Timestamp {
        match self.system_time(at).duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp {
                seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
            },
            Err(before) => {
                // Before 1970: whole seconds down, nanoseconds forward (as protobuf's).
                let d = before.duration();
                let mut seconds = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                let mut nanos = -i32::try_from(d.subsec_nanos()).unwrap_or(0);
                if nanos < 0 {
                    seconds -= 1;
                    nanos += 1_000_000_000;
                }
                Timestamp { seconds, nanos }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_is_the_start_time_plus_the_runtime_time_since() {
        let start_wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let clock = WallClock::anchored(Instant::from_secs(5), start_wall);
        let later = clock.timestamp(Instant::from_millis(7_250));
        assert_eq!((later.seconds, later.nanos), (1_700_000_002, 250_000_000));
        let earlier = clock.timestamp(Instant::from_millis(4_500));
        assert_eq!(
            (earlier.seconds, earlier.nanos),
            (1_699_999_999, 500_000_000)
        );
    }

    #[test]
    fn times_before_1970_count_nanoseconds_forward() {
        let clock = WallClock::anchored(Instant::from_secs(10), UNIX_EPOCH);
        let t = clock.timestamp(Instant::from_millis(8_750));
        assert_eq!((t.seconds, t.nanos), (-2, 750_000_000), "-1.25 s");
    }
}
