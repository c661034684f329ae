//! How long the tokio client's driver takes to absorb a burst of watches: 10,000
//! clusters and 10,000 endpoint sets registered one by one, as `xds-e2e`'s client
//! does, against a server that accepts connections and never answers (so neither a
//! response nor a failed connection interferes: the client waits for the server's
//! HTTP/2 SETTINGS for 20 s). Prints, per round, when the loop had queued them all and
//! when the driver answered a command queued behind them. No xDS server needed.
//!
//! `cargo run --release --manifest-path e2e/Cargo.toml --bin burst`

use std::time::{Duration, Instant};

use xds_adapter_tokio::{Bootstrap, Cds, Client, Eds};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let names: Vec<String> = (0..10_000).map(|i| format!("cluster-{i:05}")).collect();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = silent.local_addr().expect("its address").port();
    // Accepts and holds every connection, saying nothing.
    std::thread::spawn(move || {
        let held: Vec<_> = silent.incoming().collect();
        drop(held);
    });
    runtime.block_on(async {
        for _ in 0..8 {
            let bootstrap = Bootstrap::from_json_str(&format!(
                r#"{{"xds_servers": [{{"server_uri": "127.0.0.1:{port}", "channel_creds": [{{"type": "insecure"}}],
                    "server_features": ["xds_v3"]}}], "node": {{"id": "e2e-burst"}}}}"#
            ))
            .expect("a valid bootstrap");
            let client = Client::builder(bootstrap)
                .resource_timeout(Duration::from_secs(600))
                .build()
                .expect("the client starts");
            let start = Instant::now();
            let mut cds = Vec::with_capacity(names.len());
            let mut eds = Vec::with_capacity(names.len());
            for name in &names {
                cds.push(client.watch::<Cds>(name).await.expect("a valid watch"));
            }
            for name in &names {
                eds.push(client.watch::<Eds>(name).await.expect("a valid watch"));
            }
            let queued = start.elapsed();
            client.server_status().await.expect("the driver answers");
            let done = start.elapsed();
            println!(
                "20,000 watches: queued in {:.1} ms, taken by the driver in {:.1} ms",
                queued.as_secs_f64() * 1e3,
                done.as_secs_f64() * 1e3
            );
            client.shutdown().await;
        }
    });
}
