//! What the channel benches share: sequential RPC latencies and their median.

use std::time::{Duration, Instant};

use xds_test_server::echo::{call_echo, echo_request};

/// Sequential RPCs: each one's latency.
pub async fn latencies<C>(channel: &C, n: usize) -> Vec<Duration>
where
    C: Clone + Send + 'static,
    C: tonic::client::GrpcService<tonic::body::Body>,
    C::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    C::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <C::ResponseBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        call_echo(channel.clone(), echo_request("bench"))
            .await
            .expect("an RPC");
        out.push(start.elapsed());
    }
    out
}

/// The median of `samples`.
pub fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}
