//! Per-RPC overhead of `XdsChannel` against a plain tonic channel to the same loopback
//! echo backend, side by side in one run (issue 14 item 5).
//!
//! Both channels call one `EchoBackend` on 127.0.0.1 through tonic's generic client;
//! the xDS channel resolves `xds:///bench.example.com` through the loopback control
//! plane to a one-endpoint round-robin cluster, so it adds routing (A31), the
//! balancer's pick and its call accounting, and deadline and retry bookkeeping.
//!
//! - **latency**: sequential unary RPCs; rounds alternate between the channels and the
//!   p50 of each side is taken over all its rounds;
//! - **throughput**: 32 concurrent callers for 1 s per round, 10 rounds per channel,
//!   alternating the same way; the median round.
//!
//! Run: `cargo bench -p xds-adapter-tokio --bench channel` (about a minute).

mod support;

use std::time::{Duration, Instant};

use support::{latencies, p50};
use tonic::transport::{Channel, Endpoint};
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_adapter_tokio::{Bootstrap, ClientPool, XdsChannel};
use xds_test_server::LoopbackServer;
use xds_test_server::echo::{EchoBackend, call_echo, echo_request};
use xds_test_server::resources::{cluster, endpoints, listener, route_config};

const ROUNDS: usize = 10;
const RPCS_PER_ROUND: usize = 2_000;
const CONCURRENCY: usize = 32;
const THROUGHPUT_WINDOW: Duration = Duration::from_millis(1_000);

/// RPCs completed by `CONCURRENCY` callers in `THROUGHPUT_WINDOW`, per second.
async fn throughput<C>(channel: &C) -> f64
where
    C: Clone + Send + Sync + 'static,
    C: tonic::client::GrpcService<tonic::body::Body>,
    C::Future: Send,
    C::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    C::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <C::ResponseBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let end = Instant::now() + THROUGHPUT_WINDOW;
    let callers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let channel = channel.clone();
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < end {
                    call_echo(channel.clone(), echo_request("bench"))
                        .await
                        .expect("an RPC");
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for caller in callers {
        total += caller.await.expect("a caller");
    }
    total as f64 / THROUGHPUT_WINDOW.as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let backend = EchoBackend::start("bench");
        let server = LoopbackServer::start();
        server.set_resources(
            type_url::LISTENER,
            "1",
            vec![listener("bench.example.com", "bench-routes")],
        );
        server.set_resources(
            type_url::ROUTE_CONFIGURATION,
            "1",
            vec![route_config("bench-routes", "bench")],
        );
        server.set_resources(type_url::CLUSTER, "1", vec![cluster("bench")]);
        server.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            "1",
            vec![endpoints("bench", &[u32::from(backend.port())])],
        );
        let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("bench", None))
            .expect("the loopback bootstrap");
        let pool = ClientPool::builder(bootstrap).build_pool().expect("a pool");
        let xds = XdsChannel::builder("xds:///bench.example.com")
            .pool(&pool)
            .seed(1)
            .build()
            .expect("an xDS channel");
        let plain: Channel = Endpoint::from_shared(format!("http://{}", backend.addr()))
            .expect("an endpoint")
            .connect()
            .await
            .expect("a plain tonic channel");

        // Warm both up (connections, the xDS configuration).
        latencies(&plain, 500).await;
        latencies(&xds, 500).await;

        let (mut plain_lat, mut xds_lat) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            plain_lat.extend(latencies(&plain, RPCS_PER_ROUND).await);
            xds_lat.extend(latencies(&xds, RPCS_PER_ROUND).await);
        }
        let (plain_p50, xds_p50) = (p50(plain_lat), p50(xds_lat));
        let (mut plain_tput, mut xds_tput) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            plain_tput.push(throughput(&plain).await);
            xds_tput.push(throughput(&xds).await);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (plain_tput, xds_tput) = (median(plain_tput), median(xds_tput));

        println!("per-RPC overhead of XdsChannel vs a plain tonic channel (same backend)");
        println!(
            "p50 latency   plain {:>8.1} µs   xds {:>8.1} µs   ratio {:.3}x (target <= 1.1x)",
            plain_p50.as_secs_f64() * 1e6,
            xds_p50.as_secs_f64() * 1e6,
            xds_p50.as_secs_f64() / plain_p50.as_secs_f64()
        );
        println!(
            "throughput    plain {plain_tput:>8.0} /s   xds {xds_tput:>8.0} /s   ratio {:.3}x (target >= 0.9x, {CONCURRENCY} callers)",
            xds_tput / plain_tput
        );
        println!(
            "backend served {} RPCs; xDS server saw {} connections",
            backend.served(),
            server.stats().connections
        );
    });
}
