//! gRPC's xDS interop test client: RPCs at `--qps` per channel to `--server`
//! (`xds:///name`, bootstrap from `GRPC_XDS_BOOTSTRAP` or `GRPC_XDS_BOOTSTRAP_CONFIG`),
//! LoadBalancerStatsService, XdsUpdateClientConfigureService and CSDS on
//! `--stats_port`. See the `xds_interop` crate documentation.

use xds_adapter_tokio::{
    ClientPool, CsdsService, FallbackCredentials, XdsChannel, load_bootstrap_from_env,
};
use xds_interop::client::{ClientFlags, Sender, SharedConfig, send_forever};
use xds_interop::routes::Routes;
use xds_interop::stats::Stats;

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("xds-interop-client: {message}");
    std::process::exit(2);
}

#[tokio::main]
async fn main() {
    xds_interop::init_logging();
    let flags = ClientFlags::parse(std::env::args().skip(1)).unwrap_or_else(|e| fail(e));
    let bootstrap = load_bootstrap_from_env().unwrap_or_else(|e| fail(format!("bootstrap: {e}")));
    let pool = ClientPool::builder(bootstrap)
        .build_pool()
        .unwrap_or_else(|e| fail(format!("xDS client: {e}")));
    let stats = Stats::default();
    let config = SharedConfig::new(flags.rpcs.clone());
    let listener = tokio::net::TcpListener::bind((flags.listen_host, flags.stats_port))
        .await
        .unwrap_or_else(|e| fail(format!("--stats_port={}: {e}", flags.stats_port)));
    let routes = Routes::new()
        .with(stats.clone().service())
        .with(config.clone().service())
        .with(CsdsService::new(pool.clone()));
    tokio::spawn(routes.serve(listener));
    let sender = Sender {
        config,
        stats,
        fail_on_failed_rpcs: flags.fail_on_failed_rpcs,
        print_response: flags.print_response,
        succeeded_once: Default::default(),
    };
    let mut channels = tokio::task::JoinSet::new();
    for _ in 0..flags.num_channels {
        let mut builder = XdsChannel::builder(&flags.server).pool(&pool);
        if flags.secure_mode {
            // As gRPC's clients: xDS credentials with a plaintext fallback.
            builder = builder.xds_credentials(FallbackCredentials::Insecure);
        }
        let channel = builder
            .build()
            .unwrap_or_else(|e| fail(format!("--server={}: {e}", flags.server)));
        channels.spawn(send_forever(sender.clone(), channel, flags.qps));
    }
    eprintln!(
        "xds-interop-client: {} channel(s) to {} at {} qps each; stats on port {}",
        flags.num_channels, flags.server, flags.qps, flags.stats_port
    );
    while channels.join_next().await.is_some() {}
}
