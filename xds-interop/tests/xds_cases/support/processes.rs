//! The interop binaries as child processes: backends (`xds-interop-server`, or
//! gRPC-Go's) that stop and restart on the same port, and the client
//! (`xds-interop-client`, or gRPC-Go's: [`ClientBinary`]) with clients of its stats
//! port.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tonic::transport::Channel;
use xds_interop::pb::testing::load_balancer_stats_service_client::LoadBalancerStatsServiceClient;
use xds_interop::pb::testing::xds_update_client_configure_service_client::XdsUpdateClientConfigureServiceClient;
use xds_interop::pb::testing::{
    ClientConfigureRequest, LoadBalancerAccumulatedStatsRequest,
    LoadBalancerAccumulatedStatsResponse, LoadBalancerStatsRequest, LoadBalancerStatsResponse,
};
use xds_test_server::ports::RefusingPort;

/// Where a child's stderr goes: the test's own when `XDS_INTEROP_LOGS` is set.
fn child_stderr() -> Stdio {
    if std::env::var_os("XDS_INTEROP_LOGS").is_some() {
        Stdio::inherit()
    } else {
        Stdio::null()
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A child killed when this is dropped, unless taken (a test that panics while a
/// child starts leaves no process behind).
struct Killed(Option<Child>);

impl Killed {
    fn take(&mut self) -> Child {
        self.0.take().expect("taken once")
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            kill(child);
        }
    }
}

/// Waits until something accepts connections on 127.0.0.1:`port`, `child` running
/// (a bad flag ends it at once).
async fn wait_listening(port: u16, what: &str, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening on port {port}: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "{what} does not listen on port {port}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Which interop server a [`Backend`] runs.
#[derive(Clone, Debug)]
pub enum ServerBinary {
    /// `xds-interop-server`.
    Ours,
    /// `xds-interop-server --secure_mode=true`: an `XdsServer` that fetches its
    /// Listener from the control plane of this bootstrap, and serves its maintenance
    /// services on a second port.
    OursXds { bootstrap: String },
    /// gRPC-Go's, plain (`--secure_mode=false`).
    GrpcGo(PathBuf),
    /// gRPC-Go's as an xDS-enabled server (`--secure_mode=true`): it fetches its
    /// Listener from the control plane of this bootstrap, and serves its maintenance
    /// services on a second port.
    GrpcGoXds { binary: PathBuf, bootstrap: String },
}

/// One interop server, whose hostname (`--host_name_override`) is its name.
pub struct Backend {
    name: String,
    binary: ServerBinary,
    port: u16,
    /// An xDS-enabled server's `--maintenance_port`.
    maintenance: Option<RefusingPort>,
    child: Option<Child>,
    /// While stopped, its port, kept from other tests.
    held: Option<RefusingPort>,
}

impl Backend {
    /// Starts an `xds-interop-server` named `name` on a free port.
    pub async fn start(name: &str) -> Backend {
        Backend::start_binary(name, ServerBinary::Ours).await
    }

    /// Starts `binary` named `name` on a free port.
    pub async fn start_binary(name: &str, binary: ServerBinary) -> Backend {
        let held = RefusingPort::new();
        let maintenance = matches!(
            binary,
            ServerBinary::GrpcGoXds { .. } | ServerBinary::OursXds { .. }
        )
        .then(RefusingPort::new);
        let mut backend = Backend {
            name: name.to_string(),
            binary,
            port: held.port(),
            maintenance,
            child: None,
            held: Some(held),
        };
        backend.resume().await;
        backend
    }

    /// Its name, the peer the client reports.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its port.
    pub fn port(&self) -> u32 {
        u32::from(self.port)
    }

    /// An xDS-enabled server's `--maintenance_port`.
    pub fn maintenance_port(&self) -> Option<u16> {
        self.maintenance.as_ref().map(RefusingPort::port)
    }

    /// Kills it (as a crashed server); its port refuses connections until
    /// [`resume`](Self::resume).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill(&mut child);
        }
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        self.held = Some(RefusingPort::at(addr).expect("the stopped backend's port"));
    }

    /// Starts it again on its port.
    pub async fn resume(&mut self) {
        assert!(self.child.is_none(), "{} runs already", self.name);
        // The port stays held (bound, not listening) until the server listens on it:
        // the server binds beside it (SO_REUSEADDR, as every listener here sets), and
        // no other test's `bind(0)` can be given it in between.
        let held = self.held.take();
        let maintenance = self.maintenance.as_ref().map(|m| m.port());
        let mut command = match &self.binary {
            ServerBinary::Ours => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_xds-interop-server"));
                command.arg("--listen_host=127.0.0.1");
                command
            }
            ServerBinary::OursXds { bootstrap } => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_xds-interop-server"));
                command
                    .arg("--listen_host=127.0.0.1")
                    .arg("--secure_mode=true")
                    .env_remove("GRPC_XDS_BOOTSTRAP")
                    .env("GRPC_XDS_BOOTSTRAP_CONFIG", bootstrap);
                command
            }
            // gRPC-Go's server has no such flag: its build listens on 127.0.0.1 only
            // (interop/grpc-go/build.sh).
            ServerBinary::GrpcGo(binary) => Command::new(binary),
            ServerBinary::GrpcGoXds { binary, bootstrap } => {
                let mut command = Command::new(binary);
                command
                    .arg("--secure_mode=true")
                    .env_remove("GRPC_XDS_BOOTSTRAP")
                    .env("GRPC_XDS_BOOTSTRAP_CONFIG", bootstrap);
                command
            }
        };
        if let Some(port) = maintenance {
            command.arg(format!("--maintenance_port={port}"));
        }
        let child = command
            .arg(format!("--port={}", self.port))
            .arg(format!("--host_name_override={}", self.name))
            .arg(format!("--server_id={}", self.name))
            .stdout(Stdio::null())
            .stderr(child_stderr())
            .spawn()
            .expect("the interop server starts");
        let child = self.child.insert(child);
        wait_listening(self.port, &self.name, child).await;
        drop(held);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            kill(child);
        }
    }
}

/// Which interop client a case runs.
#[derive(Clone, Debug)]
pub enum ClientBinary {
    /// `xds-interop-client`.
    Ours,
    /// gRPC-Go's (`google.golang.org/grpc/interop/xds/client`).
    GrpcGo(PathBuf),
}

impl ClientBinary {
    /// Its name in a case's name.
    pub fn label(&self) -> &'static str {
        match self {
            ClientBinary::Ours => "xds-interop-client",
            ClientBinary::GrpcGo(_) => "grpc-go client",
        }
    }

    /// Its command with `args`, written as the test descriptions and our client spell
    /// them, in its own spelling: gRPC-Go's client takes `--rpc_timeout` as a Go
    /// duration rather than `--rpc_timeout_sec`, and has no `--listen_host` (its stats
    /// port listens on every address).
    fn command(&self, args: &[&str]) -> Command {
        match self {
            ClientBinary::Ours => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_xds-interop-client"));
                command.arg("--listen_host=127.0.0.1").args(args);
                command
            }
            ClientBinary::GrpcGo(binary) => {
                let mut command = Command::new(binary);
                for arg in args {
                    match arg.strip_prefix("--rpc_timeout_sec=") {
                        Some(seconds) => command.arg(format!("--rpc_timeout={seconds}s")),
                        None => command.arg(arg),
                    };
                }
                command
            }
        }
    }
}

/// One interop client and clients of its stats port.
pub struct InteropClient {
    child: Child,
    channel: Channel,
    stats: LoadBalancerStatsServiceClient<Channel>,
    configure: XdsUpdateClientConfigureServiceClient<Channel>,
}

impl InteropClient {
    /// Starts `binary` with `bootstrap` (in `GRPC_XDS_BOOTSTRAP_CONFIG`) and `args`
    /// besides `--stats_port`.
    pub async fn start(binary: &ClientBinary, bootstrap: &str, args: &[&str]) -> InteropClient {
        // Held until the client listens on it (see `Backend::resume`).
        let held = RefusingPort::new();
        let port = held.port();
        let child = binary
            .command(args)
            .arg(format!("--stats_port={port}"))
            .env_remove("GRPC_XDS_BOOTSTRAP")
            .env("GRPC_XDS_BOOTSTRAP_CONFIG", bootstrap)
            .stdout(Stdio::null())
            .stderr(child_stderr())
            .spawn()
            .expect("the interop client starts");
        let mut child = Killed(Some(child));
        wait_listening(
            port,
            "the interop client",
            child.0.as_mut().expect("not taken"),
        )
        .await;
        drop(held);
        let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .expect("an endpoint")
            .connect()
            .await
            .expect("the stats port");
        InteropClient {
            child: child.take(),
            channel: channel.clone(),
            stats: LoadBalancerStatsServiceClient::new(channel.clone()),
            configure: XdsUpdateClientConfigureServiceClient::new(channel),
        }
    }

    /// The peers of the next `num_rpcs` RPCs the client sends (partial after
    /// `timeout`).
    pub async fn stats(&mut self, num_rpcs: i32, timeout: Duration) -> LoadBalancerStatsResponse {
        self.assert_running();
        let request = LoadBalancerStatsRequest {
            num_rpcs,
            timeout_sec: i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX),
            ..Default::default()
        };
        self.stats
            .get_client_stats(request)
            .await
            .expect("GetClientStats")
            .into_inner()
    }

    /// The client's counts since it started.
    pub async fn accumulated(&mut self) -> LoadBalancerAccumulatedStatsResponse {
        self.assert_running();
        self.stats
            .get_client_accumulated_stats(LoadBalancerAccumulatedStatsRequest {})
            .await
            .expect("GetClientAccumulatedStats")
            .into_inner()
    }

    /// A channel to its stats port (for CSDS).
    pub fn stats_channel(&self) -> Channel {
        self.channel.clone()
    }

    /// Changes what the client sends.
    pub async fn configure(&mut self, request: ClientConfigureRequest) {
        self.configure.configure(request).await.expect("Configure");
    }

    /// Panics when the client has exited (`--fail_on_failed_rpcs` makes it exit at a
    /// failed RPC).
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the interop client exited: {status}");
        }
    }
}

impl Drop for InteropClient {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}
