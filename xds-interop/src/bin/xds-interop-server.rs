//! gRPC's xDS interop test server: TestService on `--port`, XdsUpdateHealthService
//! and the health service on `--maintenance_port` (the same port by default). See
//! the `xds_interop` crate documentation.

use std::net::{IpAddr, Ipv4Addr};

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

struct ServerFlags {
    host: IpAddr,
    port: u16,
    maintenance_port: u16,
    identity: Identity,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<ServerFlags, FlagError> {
    let flags = Flags::parse(args, FLAGS)?;
    if flags.bool_or("secure_mode", false)? {
        return Err(FlagError::new(
            "secure_mode",
            "true needs an xDS-enabled server (gRFC A36), which xds-proto does not have yet",
        ));
    }
    let port = flags.port_or("port", 8080)?;
    let hostname = match flags.raw("host_name_override") {
        Some(name) if !name.is_empty() => name.to_string(),
        Some(_) => return Err(FlagError::new("host_name_override", "empty")),
        None => machine_hostname(),
    };
    Ok(ServerFlags {
        host: flags.get_or("listen_host", IpAddr::from(Ipv4Addr::UNSPECIFIED))?,
        port,
        maintenance_port: flags.port_or("maintenance_port", port)?,
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

async fn listen(host: IpAddr, port: u16) -> tokio::net::TcpListener {
    match tokio::net::TcpListener::bind((host, port)).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("xds-interop-server: cannot listen on port {port}: {e}");
            std::process::exit(1);
        }
    }
}

#[tokio::main]
async fn main() {
    xds_interop::init_logging();
    let flags = match parse(std::env::args().skip(1)) {
        Ok(flags) => flags,
        Err(e) => {
            eprintln!("xds-interop-server: {e}");
            std::process::exit(2);
        }
    };
    let test = TestServer::new(flags.identity.clone()).service();
    let serving = Serving::default();
    let test_listener = listen(flags.host, flags.port).await;
    eprintln!(
        "xds-interop-server: {} ({}) on port {}, maintenance on {}",
        flags.identity.hostname, flags.identity.server_id, flags.port, flags.maintenance_port
    );
    if flags.maintenance_port == flags.port {
        serving
            .routes(Routes::new().with(test))
            .serve(test_listener)
            .await;
    } else {
        let maintenance = listen(flags.host, flags.maintenance_port).await;
        tokio::join!(
            Routes::new().with(test).serve(test_listener),
            serving.routes(Routes::new()).serve(maintenance),
        );
    }
}
