//! The bodies an RPC's attempts carry: the request body, recorded so that a retry can
//! send it again ([`ReplayBody`]), and the response body handed to tonic
//! ([`ResponseBody`]), which enforces the deadline while the response streams and
//! reports the RPC's final status to the load balancer when it ends.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::FutureExt;
use http_body::{Body, Frame, SizeHint};

use super::balancer::CallEnd;
use super::wire;
use crate::runtime::BoxFuture;

/// How much of a request body is kept for retries (gRPC's per-RPC retry buffer). A
/// longer request commits to its first attempt.
pub(crate) const RETRY_BUFFER_LIMIT: usize = 256 * 1024;

/// The request body shared by an RPC's attempts: what the application's body yielded,
/// kept while it fits the retry buffer and the RPC has not committed.
struct Recording {
    source: tonic::body::Body,
    frames: Vec<Bytes>,
    size: usize,
    ended: bool,
    /// The body outgrew the buffer: no attempt after the current one can replay it.
    overflowed: bool,
    /// The RPC committed to an attempt: nothing more is recorded, nothing replayed.
    committed: bool,
}

impl Recording {
    fn replayable(&self) -> bool {
        !self.overflowed && !self.committed
    }
}

/// One attempt's view of the request body: the recorded frames first, then the rest of
/// the application's body (recorded as it is read). Every attempt of an RPC gets one.
pub(crate) struct ReplayBody {
    recording: Arc<Mutex<Recording>>,
    position: usize,
}

impl ReplayBody {
    /// The first attempt's body.
    pub(crate) fn new(source: tonic::body::Body) -> ReplayBody {
        ReplayBody {
            recording: Arc::new(Mutex::new(Recording {
                ended: source.is_end_stream(),
                source,
                frames: Vec::new(),
                size: 0,
                overflowed: false,
                committed: false,
            })),
            position: 0,
        }
    }

    /// The body for another attempt, or `None` when the request no longer fits the
    /// retry buffer (the RPC is committed to the attempt that read it).
    pub(crate) fn replay(&self) -> Option<ReplayBody> {
        self.lock().replayable().then(|| ReplayBody {
            recording: self.recording.clone(),
            position: 0,
        })
    }

    /// Whether another attempt can still replay the request.
    pub(crate) fn can_replay(&self) -> bool {
        self.lock().replayable()
    }

    /// The RPC committed to the attempt reading the body: what it reads from now on is
    /// passed through, not recorded (what was recorded stays for that attempt's
    /// replay).
    pub(crate) fn commit(&self) {
        self.lock().committed = true;
    }

    fn lock(&self) -> MutexGuard<'_, Recording> {
        self.recording.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        let mut recording = this.recording.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(frame) = recording.frames.get(this.position) {
            this.position += 1;
            return Poll::Ready(Some(Ok(Frame::data(frame.clone()))));
        }
        if recording.ended {
            return Poll::Ready(None);
        }
        let frame = ready!(Pin::new(&mut recording.source).poll_frame(cx));
        match frame {
            None => {
                recording.ended = true;
                Poll::Ready(None)
            }
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref()
                    && recording.replayable()
                {
                    recording.size += data.len();
                    if recording.size > RETRY_BUFFER_LIMIT {
                        recording.overflowed = true;
                        recording.frames = Vec::new();
                    } else {
                        recording.frames.push(data.clone());
                        this.position += 1;
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(status)) => {
                // The application's body failed: nothing after it can be replayed.
                recording.overflowed = true;
                Poll::Ready(Some(Err(status)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let recording = self.lock();
        recording.ended && self.position >= recording.frames.len()
    }

    fn size_hint(&self) -> SizeHint {
        let recording = self.lock();
        if recording.ended {
            let rest: usize = recording
                .frames
                .iter()
                .skip(self.position)
                .map(Bytes::len)
                .sum();
            SizeHint::with_exact(rest as u64)
        } else {
            SizeHint::default()
        }
    }
}

/// The response body of an RPC through the channel.
///
/// It streams the chosen attempt's response, ends it with DEADLINE_EXCEEDED trailers
/// when the RPC's deadline passes first (dropping the attempt's stream, which resets
/// it), and reports the final status to the load balancer: from the trailers, from a
/// failed stream, or as cancelled when the application drops the body early. Dropping
/// it also releases the RPC's cluster.
#[derive(Default)]
pub struct ResponseBody {
    inner: Option<hyper::body::Incoming>,
    deadline: Option<BoxFuture<()>>,
    end: Option<CallEnd>,
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("streaming", &self.inner.is_some())
            .field("deadline", &self.deadline.is_some())
            .finish_non_exhaustive()
    }
}

impl ResponseBody {
    /// The body of a committed attempt.
    pub(crate) fn streaming(
        inner: hyper::body::Incoming,
        deadline: Option<BoxFuture<()>>,
        end: CallEnd,
    ) -> ResponseBody {
        ResponseBody {
            inner: Some(inner),
            deadline,
            end: Some(end),
        }
    }

    fn finish(&mut self, code: tonic::Code, trailers: Option<&http::HeaderMap>) {
        self.inner = None;
        self.deadline = None;
        if let Some(end) = self.end.take() {
            end.finish(code, trailers);
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(deadline) = &mut self.deadline
            && deadline.poll_unpin(cx).is_ready()
        {
            self.finish(tonic::Code::DeadlineExceeded, None);
            let mut trailers = http::HeaderMap::new();
            let status = tonic::Status::deadline_exceeded("the RPC's deadline passed");
            let _ = status.add_header(&mut trailers);
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        let Some(inner) = &mut self.inner else {
            return Poll::Ready(None);
        };
        match ready!(Pin::new(inner).poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let code = wire::status_code(trailers).unwrap_or(tonic::Code::Unknown);
                    self.finish(code, Some(trailers));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => {
                self.finish(tonic::Code::Unavailable, None);
                Poll::Ready(Some(Err(e)))
            }
            None => {
                // A stream that ends without trailers carries no status: gRPC says
                // INTERNAL (tonic reports the missing status itself).
                self.finish(tonic::Code::Internal, None);
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    fn chunks(parts: &[&'static str]) -> tonic::body::Body {
        let frames: Vec<Result<Frame<Bytes>, tonic::Status>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        tonic::body::Body::new(http_body_util::StreamBody::new(futures::stream::iter(
            frames,
        )))
    }

    /// Reads a body whose frames are all ready (no executor needed).
    fn read(body: ReplayBody) -> Vec<u8> {
        let collected = body.collect().now_or_never().expect("ready frames");
        collected.unwrap().to_bytes().to_vec()
    }

    #[test]
    fn every_attempt_reads_the_whole_request() {
        let first = ReplayBody::new(chunks(&["he", "llo"]));
        let second = first.replay().unwrap();
        assert_eq!(read(first), b"hello");
        let third = second.replay().unwrap();
        assert_eq!(read(second), b"hello");
        assert_eq!(read(third), b"hello");
    }

    #[test]
    fn a_request_beyond_the_buffer_commits_to_its_attempt() {
        let big: &'static str = Box::leak("x".repeat(RETRY_BUFFER_LIMIT).into_boxed_str());
        let first = ReplayBody::new(chunks(&[big, "y"]));
        assert!(first.can_replay());
        let probe = first.replay().unwrap();
        assert_eq!(read(first).len(), RETRY_BUFFER_LIMIT + 1);
        assert!(!probe.can_replay(), "no attempt after the overflow");
        assert!(probe.replay().is_none());
    }

    /// Once the RPC commits, the attempt reading the body still gets all of it, but
    /// nothing more is recorded or replayed.
    #[test]
    fn a_committed_body_is_passed_through_and_no_longer_replayed() {
        let first = ReplayBody::new(chunks(&["he", "llo", " world"]));
        let mut reader = first.replay().unwrap();
        let head = reader.frame().now_or_never().unwrap().unwrap().unwrap();
        assert_eq!(head.into_data().unwrap(), "he");
        first.commit();
        assert!(!first.can_replay());
        assert!(first.replay().is_none());
        assert_eq!(read(reader), b"llo world");
        assert_eq!(
            first.lock().frames.len(),
            1,
            "only what came before the commit"
        );
    }
}
