//! The gRPC-Go interop peer (`interop/grpc-go/peer`) as the tests drive it: getting
//! the binary, the bootstrap file both it and xds-proto read, a `server` process (an
//! xDS-enabled gRPC-Go server of the echo service) and a `client` run (gRPC-Go's xDS
//! client sending echo RPCs) with its JSON report.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedReceiver, unbounded};
use serde_json::{Value, json};
use xds_test_server::LoopbackServer;
use xds_test_server::interop_build::{interop_required, last_binary, run_build_script};
use xds_test_server::resources::SERVER_LISTENER_TEMPLATE;

/// How long a server may take to bind, and to serve once its Listener is there; generous
/// for a loaded 2-core CI machine.
const SERVER_TIMEOUT: Duration = Duration::from_secs(30);

// ---- the binary ----

/// The peer binary: `XDS_GRPC_GO_PEER` if set, else what `interop/grpc-go/build.sh`
/// prints (a no-op when up to date; a cold run fetches Go and gRPC-Go from Debian).
fn peer_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("XDS_GRPC_GO_PEER") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("XDS_GRPC_GO_PEER={} is not a file", path.display()))
        };
    }
    let stdout = run_build_script("interop/grpc-go/build.sh", &[])?;
    last_binary(&stdout)
}

/// The peer binary, built once per test binary; `None`: skip (the reason is printed),
/// unless `XDS_INTEROP_REQUIRED` is set (CI sets it), which makes it a failure.
pub fn binary_or_skip() -> Option<PathBuf> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BINARY.get_or_init(peer_binary) {
        Ok(binary) => Some(binary.clone()),
        Err(why) if !interop_required() => {
            eprintln!(
                "SKIPPED interop_grpc_go: the gRPC-Go peer is unavailable ({why}); \
                 set XDS_INTEROP_REQUIRED=1 to make this a failure"
            );
            None
        }
        Err(why) => {
            panic!("XDS_INTEROP_REQUIRED is set but the gRPC-Go peer is unavailable: {why}")
        }
    }
}

// ---- the bootstrap ----

/// A bootstrap for a client of `server` that both gRPC-Go (from the file, through
/// `GRPC_XDS_BOOTSTRAP`) and xds-proto ([`json`](Self::json)) read: plaintext to the
/// control plane, node `node_id`, the server listener template
/// [`SERVER_LISTENER_TEMPLATE`], and the `certificate_providers` given (A29: a map of
/// instance name to `{"plugin_name": "file_watcher", "config": {...}}`), which the
/// CDS and LDS security configs name. The file is removed on drop.
pub struct BootstrapFile {
    path: PathBuf,
    json: String,
}

impl BootstrapFile {
    pub fn new(
        server: &LoopbackServer,
        node_id: &str,
        certificate_providers: Option<Value>,
    ) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let mut bootstrap = json!({
            "xds_servers": [{
                "server_uri": server.uri(),
                "channel_creds": [{"type": "insecure"}],
                "server_features": ["xds_v3"],
            }],
            "node": {"id": node_id, "cluster": "grpc-go-interop"},
            "server_listener_resource_name_template": SERVER_LISTENER_TEMPLATE,
        });
        if let Some(providers) = certificate_providers {
            bootstrap["certificate_providers"] = providers;
        }
        let json = serde_json::to_string_pretty(&bootstrap).expect("a JSON bootstrap");
        let path = std::env::temp_dir().join(format!(
            "xds-grpc-go-bootstrap-{}-{}.json",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, &json).expect("write the bootstrap file");
        BootstrapFile { path, json }
    }

    pub fn json(&self) -> &str {
        &self.json
    }

    fn command(&self, binary: &Path) -> Command {
        let mut command = Command::new(binary);
        command
            .env("GRPC_XDS_BOOTSTRAP", &self.path)
            .env_remove("GRPC_XDS_BOOTSTRAP_CONFIG");
        command
    }
}

impl Drop for BootstrapFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

// ---- a server process ----

/// A `grpc-go-peer server` process, killed on drop. Its stdout events arrive on
/// `events`; its stderr (gRPC-Go's log) is kept for failure messages.
pub struct GoServer {
    name: String,
    child: Child,
    events: UnboundedReceiver<String>,
    stderr: Arc<Mutex<String>>,
    addr: SocketAddr,
}

impl GoServer {
    /// Starts a server answering as `name` on a free port, with `extra` flags (e.g.
    /// `-orca -qps 100`), and waits until it listens.
    pub async fn start(
        binary: &Path,
        bootstrap: &BootstrapFile,
        name: &str,
        extra: &[&str],
    ) -> Self {
        let mut child = bootstrap
            .command(binary)
            .args(["server", "-name", name, "-port", "0"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let (tx, events) = unbounded();
        let stdout = child.stdout.take().expect("the server's stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.unbounded_send(line);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("the server's stderr");
        let log = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]);
                log.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&text);
            }
        });
        let mut server = GoServer {
            name: name.to_string(),
            child,
            events,
            stderr,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let line = server.wait_for("LISTENING ").await;
        server.addr = line
            .parse()
            .unwrap_or_else(|e| panic!("LISTENING {line:?}: {e}"));
        server
    }

    /// The echo service's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until the server serves: its Listener resource arrived and was accepted.
    pub async fn wait_serving(&mut self) {
        let line = self.wait_for("SERVING ").await;
        assert_eq!(
            line,
            self.addr.to_string(),
            "{} serves another address",
            self.name
        );
    }

    /// The rest of the next event line starting with `prefix`; panics, with the lines
    /// skipped and the server's log, when the server exits or the time runs out first.
    async fn wait_for(&mut self, prefix: &str) -> String {
        let mut skipped = Vec::new();
        let found = tokio::time::timeout(SERVER_TIMEOUT, async {
            while let Some(line) = self.events.next().await {
                match line.strip_prefix(prefix) {
                    Some(rest) => return Some(rest.to_string()),
                    None => skipped.push(line),
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(rest)) => rest,
            _ => panic!(
                "{}: no {prefix:?} line ({}); lines: {skipped:?}; log:\n{}",
                self.name,
                if found.is_err() {
                    "timed out"
                } else {
                    "it exited"
                },
                self.stderr.lock().unwrap_or_else(|e| e.into_inner())
            ),
        }
    }
}

impl Drop for GoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- a client run ----

/// How many RPCs ended with one status code, and the first one's message.
#[derive(Debug, PartialEq)]
pub struct StatusCount {
    pub count: u64,
    pub first_message: String,
}

/// What `grpc-go-peer client` printed.
#[derive(Debug)]
pub struct ClientReport {
    pub rpcs: u64,
    /// Successful replies by the backend name they carry.
    pub backends: BTreeMap<String, u64>,
    /// Every RPC by status code.
    pub statuses: BTreeMap<i32, StatusCount>,
    /// From the client's start (before xDS resolution) to the first successful reply.
    pub first_success: Option<Duration>,
    pub elapsed: Duration,
    /// The last ORCA per-call load report of each backend that sent one, as proto JSON
    /// with the proto field names (`{"cpu_utilization": 0.25}`).
    pub orca: BTreeMap<String, Value>,
}

impl ClientReport {
    fn parse(line: &str) -> Result<ClientReport, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
        let ms = |v: &Value| v.as_f64().map(|ms| Duration::from_secs_f64(ms / 1000.0));
        let count = |v: &Value| v.as_u64().ok_or_else(|| format!("not a count: {v}"));
        let mut backends = BTreeMap::new();
        for (name, n) in v["backends"].as_object().ok_or("no backends")? {
            backends.insert(name.clone(), count(n)?);
        }
        let mut statuses = BTreeMap::new();
        for (code, s) in v["statuses"].as_object().ok_or("no statuses")? {
            let code = code
                .parse()
                .map_err(|e| format!("status code {code:?}: {e}"))?;
            let first_message = s["first_message"].as_str().unwrap_or_default().to_string();
            statuses.insert(
                code,
                StatusCount {
                    count: count(&s["count"])?,
                    first_message,
                },
            );
        }
        let orca = match v.get("orca") {
            Some(reports) => reports.as_object().ok_or("orca is not an object")?.clone(),
            None => Default::default(),
        };
        Ok(ClientReport {
            orca: orca.into_iter().collect(),
            rpcs: count(&v["rpcs"])?,
            backends,
            statuses,
            first_success: ms(&v["first_success_ms"]),
            elapsed: ms(&v["elapsed_ms"]).ok_or("no elapsed_ms")?,
        })
    }
}

/// Runs `grpc-go-peer client` with these flags (`-target` and the rest) to the end and
/// returns its report; panics with its stderr when it fails.
pub async fn run_client(binary: &Path, bootstrap: &BootstrapFile, args: &[&str]) -> ClientReport {
    let mut command = bootstrap.command(binary);
    command.arg("client").args(args).stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the client's runner")
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "grpc-go-peer client {args:?}: {}\n{stderr}",
        output.status
    );
    ClientReport::parse(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("grpc-go-peer client's report: {e}\n{stderr}"))
}
