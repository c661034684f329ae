//! One RPC through the channel: routing by the config selector (A31), the deadline
//! (the route's timeout capped by the application's `grpc-timeout`), the pick (queued
//! while nothing is ready), the attempts with the route's retry policy (A44) and the
//! hand-over of the committed attempt's response to tonic.
//!
//! An attempt is committed, as in gRPC, when its response headers arrive without a
//! status (a streaming response), when its status is not retryable, when the attempts
//! are used up, or when the request outgrew the retry buffer. Before that, a
//! Trailers-Only response with a retryable status (or a failed stream) is reported to
//! the load balancer and retried after the backoff, on a new pick.
//!
//! A6's transparent retries need no retry policy and count as no attempt. An attempt
//! whose request never left the client (hyper hands it back: its connection shut down,
//! at a GOAWAY say, before writing it) is retried at once on a new pick, every time. An
//! attempt the server's HTTP/2 library refused before its application saw it (its
//! stream reset with REFUSED_STREAM, or above the last stream id of a GOAWAY) is
//! retried at once on a new pick, once per RPC; after that the policy handles it. So
//! the request body is recorded for a replay even without a policy, until the RPC
//! commits (sharing the application's `Bytes`, not copying them).

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{Either, select};
use http::{HeaderMap, Method, Uri};
use xds_proto_core::Instant;
use xds_proto_core::filter::RpcFilters;
use xds_proto_core::filter::stateful_session::SessionAffinity;
use xds_proto_core::selector::Selection;

use super::balancer::{CallEnd, CallReporter, PickResult, Shared};
use super::body::{ReplayBody, ResponseBody};
use super::retry::RetryState;
use super::wire::{self, HeaderMetadata};
use crate::runtime::{BoxFuture, Runtime};

type Response = http::Response<ResponseBody>;

/// The parts of the application's request every attempt repeats.
struct RequestHead {
    uri: Uri,
    headers: HeaderMap,
}

impl RequestHead {
    /// An attempt's request: the head, the remaining timeout and the body. The last
    /// possible attempt (`last`) takes the headers instead of copying them.
    fn attempt(
        &mut self,
        remaining: Option<Duration>,
        body: tonic::body::Body,
        last: bool,
    ) -> http::Request<tonic::body::Body> {
        let mut request = http::Request::new(body);
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.version_mut() = http::Version::HTTP_2;
        *request.headers_mut() = if last {
            std::mem::take(&mut self.headers)
        } else {
            self.headers.clone()
        };
        if let Some(remaining) = remaining {
            request
                .headers_mut()
                .insert(wire::GRPC_TIMEOUT, wire::encode_grpc_timeout(remaining));
        }
        request
    }
}

/// The RPC's deadline on the runtime's clock, and the timer that fires at it.
struct Deadline {
    at: Option<Instant>,
    timer: Option<BoxFuture<()>>,
}

impl Deadline {
    fn new<R: Runtime>(rt: &R, start: Instant, timeout: Option<Duration>) -> Deadline {
        Deadline {
            at: timeout.map(|t| start + t),
            timer: timeout.map(|t| rt.sleep(t)),
        }
    }

    fn remaining<R: Runtime>(&self, rt: &R) -> Option<Duration> {
        let now = rt.now();
        self.at
            .map(|at| if at > now { at - now } else { Duration::ZERO })
    }

    /// Runs `work` until the deadline: `None` when the deadline passed first.
    async fn run<T>(&mut self, work: impl Future<Output = T>) -> Option<T> {
        match &mut self.timer {
            None => Some(work.await),
            Some(timer) => match select(pin!(work), timer).await {
                Either::Left((out, _)) => Some(out),
                Either::Right(_) => None,
            },
        }
    }
}

fn deadline_exceeded() -> Response {
    wire::trailers_only(tonic::Status::deadline_exceeded(
        "the RPC's deadline passed",
    ))
}

/// Waits until the picker's generation moves past `generation`.
struct PickerChanged<'a, R> {
    shared: &'a Shared<R>,
    generation: u64,
}

impl<R: Runtime> Future for PickerChanged<'_, R> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self
            .shared
            .picker_changed_since(self.generation, cx.waker())
        {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Runs one RPC to its response.
pub(crate) async fn run<R: Runtime>(
    shared: Arc<Shared<R>>,
    authority: Arc<str>,
    request: http::Request<tonic::body::Body>,
) -> Response {
    let start = shared.rt.now();
    let (parts, body) = request.into_parts();
    let app_timeout = parts
        .headers
        .get(wire::GRPC_TIMEOUT)
        .and_then(wire::parse_grpc_timeout);
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut deadline = Deadline::new(&shared.rt, start, app_timeout);
    let (mut selection, mut filters) =
        match deadline.run(route(&shared, path, &parts.headers)).await {
            None => return deadline_exceeded(),
            Some(Err(status)) => return wire::trailers_only(status),
            Some(Ok(routed)) => routed,
        };
    // A60: the session cookie's cluster keeps the RPC there when its route has it.
    if let Some(cluster) = filters.session.as_ref().and_then(|s| s.cluster.as_deref()) {
        selection.stick_to_cluster(cluster);
    }
    let session = filters.session.take();
    let timeout = selection.effective_timeout(app_timeout);
    if timeout != app_timeout {
        deadline = Deadline::new(&shared.rt, start, timeout);
    }
    if let Some(response) = inject_fault(&shared.rt, filters, &mut deadline).await {
        return response;
    }
    let uri = Uri::builder()
        .scheme("http")
        .authority(&*authority)
        .path_and_query(path)
        .build()
        .unwrap_or(parts.uri);
    let head = RequestHead {
        uri,
        headers: parts.headers,
    };
    attempts(shared, head, body, selection, session, deadline).await
}

/// The route of an RPC and its filters' decisions, waiting for the first
/// configuration.
async fn route<R: Runtime>(
    shared: &Shared<R>,
    path: &str,
    headers: &HeaderMap,
) -> Result<(Selection, RpcFilters<'static>), tonic::Status> {
    loop {
        match shared.route(path, &HeaderMetadata(headers))? {
            Ok(routed) => return Ok(routed),
            Err(generation) => PickerChanged { shared, generation }.await,
        }
    }
}

/// Fault injection (A33), before anything of the RPC is sent: the delay (within the
/// deadline), then the abort, whose Trailers-Only response ends the RPC. `None`: go
/// on. The RPC stops counting as faulted once this returns.
async fn inject_fault<R: Runtime>(
    rt: &R,
    filters: RpcFilters<'static>,
    deadline: &mut Deadline,
) -> Option<Response> {
    let fault = filters.fault?;
    if let Some(delay) = fault.delay
        && deadline.run(rt.sleep(delay)).await.is_none()
    {
        return Some(deadline_exceeded());
    }
    let status = fault.abort_status()?;
    Some(wire::trailers_only(wire::tonic_status(&status)))
}

/// A pick for an attempt, waiting while the balancer queues it.
async fn pick<R: Runtime>(
    shared: &Arc<Shared<R>>,
    cluster: &str,
    hash: Option<u64>,
    override_host: Option<std::net::SocketAddr>,
) -> PickResult {
    loop {
        match shared.pick(cluster, hash, override_host) {
            Ok(done) => return done,
            Err(generation) => {
                PickerChanged {
                    shared: &**shared,
                    generation,
                }
                .await;
            }
        }
    }
}

/// How an attempt ended before its body. One lives on the stack per attempt; boxing
/// the committed response to even the variants out would allocate per RPC.
#[allow(clippy::large_enum_variant)]
enum AttemptEnd {
    /// Committed: this is the RPC's response.
    Commit(Response),
    /// Failed with a status the policy may retry.
    Failed {
        status: tonic::Status,
        pushback: Option<Option<Duration>>,
    },
    /// The server refused the stream before its application saw it (A6): retried once
    /// at once, else failed with this UNAVAILABLE status.
    Unprocessed(tonic::Status),
}

async fn attempts<R: Runtime>(
    shared: Arc<Shared<R>>,
    mut head: RequestHead,
    body: tonic::body::Body,
    selection: Selection,
    session: Option<SessionAffinity>,
    mut deadline: Deadline,
) -> Response {
    let policy = selection
        .retry_policy()
        .filter(|p| !p.retryable_codes.is_empty());
    let mut retry = RetryState::new(policy);
    let cluster = selection.cluster().cluster().unwrap_or_default().to_owned();
    let hash = selection.request_hash(&HeaderMetadata(&head.headers), shared.settings.channel_id);
    let mut bodies = AttemptBodies::new(body);
    let reporter: Arc<dyn CallReporter> = shared.clone();
    let override_host = session.as_ref().and_then(|s| s.override_host);
    let mut picked = None;
    loop {
        let Some(attempt_body) = bodies.next() else {
            return wire::trailers_only(tonic::Status::unavailable(
                "the request was too long to retry",
            ));
        };
        let end = match deadline
            .run(pick(&shared, &cluster, hash, override_host))
            .await
        {
            None => return deadline_exceeded(),
            Some(PickResult::Dropped(status)) => return wire::trailers_only(status),
            Some(PickResult::Failed(status)) => AttemptEnd::Failed {
                status,
                pushback: None,
            },
            Some(PickResult::Ready(send, call, address)) => {
                picked = Some(address);
                let last = !retry.may_retry(policy);
                let remaining = deadline.remaining(&shared.rt);
                let request = head.attempt(remaining, attempt_body, last);
                let end = CallEnd::new(reporter.clone(), call, selection.clone());
                // A Trailers-Only failure ends the RPC as it is when no policy retries it.
                let committed = policy.is_none() || !bodies.can_replay();
                match send_attempt(send, request, end, &mut deadline, committed).await {
                    Sent::Ran(end) => end,
                    Sent::DeadlineExceeded => return deadline_exceeded(),
                    Sent::Unsent(request) => {
                        let (parts, request_body) = request.into_parts();
                        head.headers = parts.headers;
                        bodies.unsent = Some(request_body);
                        continue;
                    }
                }
            }
        };
        let (status, pushback) = match end {
            AttemptEnd::Commit(mut response) => {
                bodies.commit();
                set_session_cookie(&mut response, session.as_ref(), picked, &cluster);
                return response;
            }
            AttemptEnd::Failed { status, pushback } => (status, pushback),
            AttemptEnd::Unprocessed(status) => {
                if bodies.can_replay() && retry.take_transparent_retry() {
                    tracing::debug!(%status, "retrying an RPC the server refused unprocessed");
                    continue;
                }
                (status, None)
            }
        };
        let random = shared.random_u32();
        let Some(delay) = retry.next_attempt(policy, status.code(), pushback, random) else {
            return wire::trailers_only(status);
        };
        if !bodies.can_replay() {
            return wire::trailers_only(status);
        }
        tracing::debug!(attempt = retry.attempts(), ?delay, code = ?status.code(), "retrying an RPC");
        if deadline.run(shared.rt.sleep(delay)).await.is_none() {
            return deadline_exceeded();
        }
    }
}

/// A55: the response names the host (and A60 the cluster) that served the RPC in its
/// session cookie, when the request's cookie named another.
fn set_session_cookie(
    response: &mut Response,
    session: Option<&SessionAffinity>,
    picked: Option<std::net::SocketAddr>,
    cluster: &str,
) {
    let (Some(session), Some(host)) = (session, picked) else {
        return;
    };
    let Some(cookie) = session.set_cookie(host, cluster) else {
        return;
    };
    match http::HeaderValue::try_from(cookie) {
        Ok(value) => {
            response
                .headers_mut()
                .append(http::header::SET_COOKIE, value);
        }
        Err(e) => tracing::warn!(error = %e, "a session cookie that is no header value"),
    }
}

/// Where each attempt's request body comes from: the unsent body of the last attempt
/// (hyper handed it back), else a replay of the recording of the application's body.
/// Every RPC records its body, since a refused attempt is retried without a retry
/// policy too (A6); recording shares the body's `Bytes` and stops when the RPC
/// commits.
struct AttemptBodies {
    unsent: Option<tonic::body::Body>,
    recording: ReplayBody,
}

impl AttemptBodies {
    fn new(body: tonic::body::Body) -> AttemptBodies {
        AttemptBodies {
            unsent: None,
            recording: ReplayBody::new(body),
        }
    }

    /// The next attempt's body; `None` when the request no longer fits the retry
    /// buffer.
    fn next(&mut self) -> Option<tonic::body::Body> {
        if let Some(unsent) = self.unsent.take() {
            return Some(unsent);
        }
        self.recording.replay().map(tonic::body::Body::new)
    }

    /// Whether another attempt could still send the request again.
    fn can_replay(&self) -> bool {
        self.recording.can_replay()
    }

    /// The RPC committed to its attempt: nothing more of the body is recorded.
    fn commit(&self) {
        self.recording.commit();
    }
}

/// How sending one attempt on its picked connection ended.
enum Sent {
    /// The attempt ran (it may have failed).
    Ran(AttemptEnd),
    /// The request never left the client: it goes again, as it is, on a new pick.
    Unsent(http::Request<tonic::body::Body>),
    /// The RPC's deadline passed.
    DeadlineExceeded,
}

/// Sends an attempt's request and classifies what came back.
async fn send_attempt(
    mut send: hyper::client::conn::http2::SendRequest<tonic::body::Body>,
    request: http::Request<tonic::body::Body>,
    end: CallEnd,
    deadline: &mut Deadline,
    committed: bool,
) -> Sent {
    match deadline.run(send.try_send_request(request)).await {
        None => {
            end.finish(tonic::Code::DeadlineExceeded, None);
            Sent::DeadlineExceeded
        }
        Some(Err(mut error)) => match error.take_message() {
            // hyper gives the request back when it never wrote it (its connection
            // shut down first): A6's transparent retry. The balancer counts the pick
            // a failure, as gRPC-Go's does.
            Some(request) => {
                end.finish(tonic::Code::Unavailable, None);
                tracing::debug!(error = %error.error(), "retrying an RPC that never left the client");
                Sent::Unsent(request)
            }
            None => Sent::Ran(attempt_end(
                Err(error.into_error()),
                end,
                deadline,
                committed,
            )),
        },
        Some(Ok(response)) => Sent::Ran(attempt_end(Ok(response), end, deadline, committed)),
    }
}

/// Classifies an attempt's response headers (or its failure).
fn attempt_end(
    result: Result<http::Response<hyper::body::Incoming>, hyper::Error>,
    end: CallEnd,
    deadline: &mut Deadline,
    committed: bool,
) -> AttemptEnd {
    let response = match result {
        Ok(response) => response,
        Err(e) => {
            end.finish(tonic::Code::Unavailable, None);
            let status = tonic::Status::unavailable(format!(
                "the attempt failed: {}",
                crate::transport::error_chain(&e)
            ));
            if wire::refused_unprocessed(&e) {
                return AttemptEnd::Unprocessed(status);
            }
            return AttemptEnd::Failed {
                status,
                pushback: None,
            };
        }
    };
    let trailers_only =
        wire::status_code(response.headers()).or_else(|| wire::http_status_code(response.status()));
    match trailers_only {
        // A streaming response: committed; its body reports the end.
        None => {
            let timer = deadline.timer.take();
            let (parts, incoming) = response.into_parts();
            AttemptEnd::Commit(http::Response::from_parts(
                parts,
                ResponseBody::streaming(incoming, timer, end),
            ))
        }
        Some(code) => {
            // A Trailers-Only response: its headers are its trailers.
            end.finish(code, Some(response.headers()));
            if code == tonic::Code::Ok || committed {
                let (parts, _) = response.into_parts();
                return AttemptEnd::Commit(http::Response::from_parts(
                    parts,
                    ResponseBody::default(),
                ));
            }
            let status = tonic::Status::from_header_map(response.headers())
                .unwrap_or_else(|| tonic::Status::new(code, "HTTP error"));
            AttemptEnd::Failed {
                pushback: wire::retry_pushback(response.headers()),
                status,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderValue;
    use prost::Message;
    use xds_proto_core::pb::envoy::config::route::v3 as route_pb;
    use xds_proto_core::pb::envoy::r#type::matcher::v3 as matcher_pb;
    use xds_proto_core::selector::{ClusterRegistry, ConfigSelector};

    /// A route whose hash policy hashes `x-user` after stripping a `u-` prefix.
    fn selection() -> Selection {
        use route_pb::route_action::hash_policy::{Header, PolicySpecifier};
        let action = route_pb::RouteAction {
            cluster_specifier: Some(route_pb::route_action::ClusterSpecifier::Cluster(
                "c".into(),
            )),
            hash_policy: vec![route_pb::route_action::HashPolicy {
                policy_specifier: Some(PolicySpecifier::Header(Header {
                    header_name: "x-user".into(),
                    regex_rewrite: Some(matcher_pb::RegexMatchAndSubstitute {
                        pattern: Some(matcher_pb::RegexMatcher {
                            regex: "^u-(.*)$".into(),
                            ..Default::default()
                        }),
                        substitution: "\\1".into(),
                    }),
                })),
                terminal: false,
            }],
            ..Default::default()
        };
        let config = route_pb::RouteConfiguration {
            name: "r".into(),
            virtual_hosts: vec![route_pb::VirtualHost {
                name: "v".into(),
                domains: vec!["*".into()],
                routes: vec![route_pb::Route {
                    r#match: Some(route_pb::RouteMatch {
                        path_specifier: Some(route_pb::route_match::PathSpecifier::Prefix(
                            String::new(),
                        )),
                        ..Default::default()
                    }),
                    action: Some(route_pb::route::Action::Route(Box::new(action))),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let (_, routes) =
            xds_proto_core::resource::route::decode(&config.encode_to_vec()).expect("valid");
        let mut registry = ClusterRegistry::new();
        let selector =
            ConfigSelector::from_virtual_host(&routes.virtual_hosts[0], &[], None, &mut registry);
        let mut rng = xds_proto_core::selector::Seeded(1);
        let headers = HeaderMap::new();
        selector
            .select("/s/m", &HeaderMetadata(&headers), &mut rng)
            .expect("routed")
    }

    /// A42: a header hash policy's `regex_rewrite` applies before hashing, so users
    /// `u-alice` and `alice` land on the same endpoint (it was ignored).
    #[test]
    fn the_header_hash_applies_the_policys_regex_rewrite() {
        let selection = selection();
        let mut headers = HeaderMap::new();
        headers.insert("x-user", HeaderValue::from_static("u-alice"));
        let hash = selection.request_hash(&HeaderMetadata(&headers), 9);
        assert_eq!(hash, Some(xds_proto_core::lb::hash_header_value(b"alice")));
        assert_eq!(
            selection.request_hash(&HeaderMetadata(&HeaderMap::new()), 9),
            None
        );
    }
}
