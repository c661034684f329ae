//! One ADS stream on the server, whichever the variant: the task that reads requests,
//! watches the snapshot, and queues responses; what a variant decides (what a request
//! changes, what to send) is its [`Protocol`] (`sotw`, `delta`).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use futures::channel::mpsc;
use futures::{FutureExt, Stream};
use tonic::codec::Streaming;
use xds_proto_core::Status;

use crate::codec::{Outbound, UNDECODABLE};
use crate::server::{Shared, State};

/// What one ADS variant does on a stream.
pub(crate) trait Protocol: Default + Send + 'static {
    /// The request message.
    type Request: prost::Message + Default + Send + 'static;
    /// The response message.
    type Response: prost::Message + Send + 'static;

    /// Takes one request of stream `stream` (recording it in `state`).
    fn on_request(&mut self, state: &mut State, stream: u64, request: Self::Request);

    /// The snapshot (or the server's behaviour) may have changed.
    fn on_snapshot_change(&mut self, state: &State);

    /// What to send now (recording it in `state`).
    fn respond(&mut self, state: &mut State, stream: u64) -> Vec<Self::Response>;
}

type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<Outbound<T>, tonic::Status>> + Send>>;

/// Starts the logic of one stream of variant `P`.
pub(crate) struct StreamHandler<P> {
    shared: Arc<Shared>,
    _protocol: std::marker::PhantomData<fn() -> P>,
}

impl<P> StreamHandler<P> {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        StreamHandler {
            shared,
            _protocol: std::marker::PhantomData,
        }
    }
}

impl<P: Protocol> tower_service::Service<tonic::Request<Streaming<P::Request>>>
    for StreamHandler<P>
{
    type Response = tonic::Response<ResponseStream<P::Response>>;
    type Error = tonic::Status;
    type Future = futures::future::Ready<Result<Self::Response, tonic::Status>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), tonic::Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<Streaming<P::Request>>) -> Self::Future {
        let (tx, rx) = mpsc::unbounded();
        let id = self.shared.next_stream.fetch_add(1, Ordering::SeqCst);
        let undecodable_sent = {
            let mut state = self.shared.lock();
            state.stats.streams += 1;
            state.stats.open_streams += 1;
            state.undecodable
        };
        self.shared.bump();
        let session = Session {
            shared: self.shared.clone(),
            id,
            tx,
            protocol: P::default(),
            undecodable_sent,
        };
        tokio::spawn(session.run(request.into_inner()));
        let outbound = CountTaken {
            queue: rx,
            shared: self.shared.clone(),
        };
        futures::future::ready(Ok(tonic::Response::new(
            Box::pin(outbound) as ResponseStream<P::Response>
        )))
    }
}

/// A stream's response queue as tonic reads it: counts what HTTP/2 takes.
struct CountTaken<T> {
    queue: mpsc::UnboundedReceiver<Result<Outbound<T>, tonic::Status>>,
    shared: Arc<Shared>,
}

impl<T> Stream for CountTaken<T> {
    type Item = Result<Outbound<T>, tonic::Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = Pin::new(&mut self.queue).poll_next(cx);
        if let Poll::Ready(Some(Ok(Outbound::Response(_)))) = &next {
            self.shared.lock().stats.responses_taken += 1;
            self.shared.bump();
        }
        next
    }
}

struct Session<P: Protocol> {
    shared: Arc<Shared>,
    id: u64,
    tx: mpsc::UnboundedSender<Result<Outbound<P::Response>, tonic::Status>>,
    protocol: P,
    /// How many undecodable messages it has sent.
    undecodable_sent: u64,
}

impl<P: Protocol> Session<P> {
    async fn run(mut self, mut inbound: Streaming<P::Request>) {
        let mut changes = self.shared.generation.subscribe();
        loop {
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(request)) => {
                        self.on_request(request);
                        // Read the whole burst before answering: one response per type.
                        while let Some(Ok(Some(request))) = inbound.message().now_or_never() {
                            self.on_request(request);
                        }
                    }
                    _ => break,
                },
                changed = changes.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.protocol.on_snapshot_change(&self.shared.lock());
                },
            }
            if let Some(status) = self.close_status() {
                let code = tonic::Code::from_i32(status.code.0);
                let _ = self
                    .tx
                    .unbounded_send(Err(tonic::Status::new(code, status.message)));
                break;
            }
            self.send_undecodable();
            self.respond();
        }
        {
            let mut state = self.shared.lock();
            state.stats.open_streams -= 1;
        }
        self.shared.bump();
    }

    fn on_request(&mut self, request: P::Request) {
        self.protocol
            .on_request(&mut self.shared.lock(), self.id, request);
        self.shared.bump();
    }

    fn close_status(&self) -> Option<Status> {
        let state = self.shared.lock();
        (self.id < state.close_epoch)
            .then(|| state.close_status.clone())
            .flatten()
    }

    fn send_undecodable(&mut self) {
        let due = self.shared.lock().undecodable;
        while self.undecodable_sent < due {
            self.undecodable_sent += 1;
            let raw = Outbound::Raw(bytes::Bytes::from_static(UNDECODABLE));
            let _ = self.tx.unbounded_send(Ok(raw));
        }
    }

    fn respond(&mut self) {
        let responses = self.protocol.respond(&mut self.shared.lock(), self.id);
        if !responses.is_empty() {
            self.shared.bump();
        }
        for r in responses {
            let _ = self.tx.unbounded_send(Ok(Outbound::Response(r)));
        }
    }
}
