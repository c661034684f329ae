//! gRPC's xDS interop test server: TestService on `--port`, XdsUpdateHealthService
//! and the health service on `--maintenance_port` (the same port by default). With
//! `--secure_mode=true` TestService is served by an xDS-enabled server (`XdsServer`,
//! gRFC A36: the Listener named after the listening address, mTLS from its filter
//! chain's DownstreamTlsContext and the bootstrap's certificate providers, A29), and
//! the maintenance port, which must then differ, serves CSDS of the server's xDS
//! client beside health in plaintext, as gRPC's test servers do. See the
//! `xds_interop` crate documentation.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use xds_adapter_tokio::server::{ServingMode, XdsServerBuilder, serve};
use xds_adapter_tokio::{ClientPool, CsdsService, load_bootstrap_from_env};
use xds_interop::flags::{FlagError, Flags};
use xds_interop::routes::Routes;
use xds_interop::server::{Identity, Serving, TestServer};

/// `--listen_host` is this server's own flag (gRPC's servers listen on every address,
/// its default): the local driver keeps its backends on 127.0.0.1.
const FLAGS: &[&str] = &[
    "port",
    "maintenance_port",
    "server_id",
    "secure_mode",
    "host_name_override",
    "listen_host",
];

/// gRPC-Go's default `--maintenance_port`, used in secure mode (where it must differ
/// from `--port`).
const SECURE_MAINTENANCE_PORT: u16 = 8081;

struct ServerFlags {
    host: IpAddr,
    port: u16,
    maintenance_port: u16,
    secure_mode: bool,
    identity: Identity,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<ServerFlags, FlagError> {
    let flags = Flags::parse(args, FLAGS)?;
    let secure_mode = flags.bool_or("secure_mode", false)?;
    let port = flags.port_or("port", 8080)?;
    let maintenance_port = if secure_mode {
        flags.port_or("maintenance_port", SECURE_MAINTENANCE_PORT)?
    } else {
        flags.port_or("maintenance_port", port)?
    };
    if secure_mode && maintenance_port == port {
        return Err(FlagError::new(
            "maintenance_port",
            "must differ from --port with --secure_mode=true (the maintenance services stay plaintext)",
        ));
    }
    let hostname = match flags.raw("host_name_override") {
        Some(name) if !name.is_empty() => name.to_string(),
        Some(_) => return Err(FlagError::new("host_name_override", "empty")),
        None => machine_hostname(),
    };
    Ok(ServerFlags {
        host: flags.get_or("listen_host", IpAddr::from(Ipv4Addr::UNSPECIFIED))?,
        port,
        maintenance_port,
        secure_mode,
        identity: Identity {
            hostname,
            server_id: flags.get_or("server_id", "rust_server".to_string())?,
        },
    })
}

fn machine_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Ends the server: exit code 2 for what the user gave (flags, bootstrap), 1 for the
/// rest (a port that cannot be bound).
fn exit(code: i32, message: impl std::fmt::Display) -> ! {
    eprintln!("xds-interop-server: {message}");
    std::process::exit(code);
}

fn fail(message: impl std::fmt::Display) -> ! {
    exit(1, message)
}

async fn listen(host: IpAddr, port: u16) -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind((host, port))
        .await
        .unwrap_or_else(|e| fail(format!("cannot listen on port {port}: {e}")))
}

/// Secure mode: TestService through an `XdsServer` on `--port`, the maintenance
/// services (with CSDS of the server's xDS client) in plaintext on
/// `--maintenance_port`.
async fn serve_secure(flags: &ServerFlags, test: Routes, serving: Serving) {
    let bootstrap =
        load_bootstrap_from_env().unwrap_or_else(|e| exit(2, format!("bootstrap: {e}")));
    let pool = ClientPool::builder(bootstrap)
        .build_pool()
        .unwrap_or_else(|e| exit(2, format!("xDS client: {e}")));
    let maintenance = listen(flags.host, flags.maintenance_port).await;
    let builder = XdsServerBuilder::new(pool.server_client()).on_serving_mode(
        |addr: SocketAddr, mode: &ServingMode| {
            eprintln!("xds-interop-server: {addr} is {mode:?}");
        },
    );
    let server = serve(builder, SocketAddr::new(flags.host, flags.port), test)
        .await
        .unwrap_or_else(|e| fail(format!("xDS-enabled server on port {}: {e}", flags.port)));
    eprintln!(
        "xds-interop-server: listener {} for port {}",
        server.listener_name(),
        flags.port
    );
    serving
        .routes(Routes::new().with(CsdsService::new(pool.clone())))
        .serve(maintenance)
        .await;
}

#[tokio::main]
async fn main() {
    xds_interop::init_logging();
    let flags = parse(std::env::args().skip(1)).unwrap_or_else(|e| exit(2, e));
    let test = Routes::new().with(TestServer::new(flags.identity.clone()).service());
    let serving = Serving::default();
    eprintln!(
        "xds-interop-server: {} ({}) on port {}{}, maintenance on {}",
        flags.identity.hostname,
        flags.identity.server_id,
        flags.port,
        if flags.secure_mode {
            " (xDS-enabled)"
        } else {
            ""
        },
        flags.maintenance_port
    );
    if flags.secure_mode {
        serve_secure(&flags, test, serving).await;
        return;
    }
    let test_listener = listen(flags.host, flags.port).await;
    if flags.maintenance_port == flags.port {
        serving.routes(test).serve(test_listener).await;
    } else {
        let maintenance = listen(flags.host, flags.maintenance_port).await;
        tokio::join!(
            test.serve(test_listener),
            serving.routes(Routes::new()).serve(maintenance),
        );
    }
}
