//! The test client: its flags ([`ClientFlags`]), what it sends ([`RpcConfig`],
//! changed by XdsUpdateClientConfigureService), and the loop sending RPCs at a
//! constant rate per channel over [`XdsChannel`] ([`send_forever`]).
//!
//! Every tick of a channel sends one RPC of each configured type, without waiting for
//! earlier ones (an RPC that stays open does not slow the rate). The peer of an RPC is
//! the `hostname` header of the response, else the `hostname` of a SimpleResponse.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::{Request, Response, Status};
use xds_adapter_tokio::XdsChannel;

use crate::flags::{FlagError, Flags};
use crate::pb::testing::client_configure_request::RpcType;
use crate::pb::testing::test_service_client::TestServiceClient;
use crate::pb::testing::xds_update_client_configure_service_server::{
    XdsUpdateClientConfigureService, XdsUpdateClientConfigureServiceServer,
};
use crate::pb::testing::{ClientConfigureRequest, ClientConfigureResponse, Empty, SimpleRequest};
use crate::stats::{Outcome, Stats};

/// The flags the client knows.
pub const CLIENT_FLAGS: &[&str] = &[
    "server",
    "num_channels",
    "qps",
    "rpc",
    "metadata",
    "rpc_timeout_sec",
    "stats_port",
    "fail_on_failed_rpc",
    "fail_on_failed_rpcs",
    "print_response",
    "secure_mode",
    "listen_host",
];

/// The client's command line.
#[derive(Clone, Debug)]
pub struct ClientFlags {
    /// `--server`: the target (`xds:///name`).
    pub server: String,
    /// `--num_channels`.
    pub num_channels: u32,
    /// `--qps`: per channel.
    pub qps: u32,
    /// `--stats_port`.
    pub stats_port: u16,
    /// `--listen_host`, this client's own flag: the address the stats port listens
    /// on (every address by default, as gRPC's clients).
    pub listen_host: std::net::IpAddr,
    /// `--fail_on_failed_rpc` (gRPC-Go's, grpc-java's and C++'s spelling, which gRPC's
    /// driver passes) or `--fail_on_failed_rpcs`: exit 1 at a failed RPC once one
    /// succeeded.
    pub fail_on_failed_rpcs: bool,
    /// `--print_response`.
    pub print_response: bool,
    /// `--secure_mode`: xDS credentials (gRFC A29: TLS as the cluster's
    /// UpstreamTlsContext says, plaintext without one).
    pub secure_mode: bool,
    /// `--rpc`, `--metadata`, `--rpc_timeout_sec`.
    pub rpcs: RpcConfig,
}

impl ClientFlags {
    /// Parses the client's command line (without the program name).
    ///
    /// # Errors
    /// The first bad flag.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<ClientFlags, FlagError> {
        let flags = Flags::parse(args, CLIENT_FLAGS)?;
        let server = flags.get_or("server", "localhost:8080".to_string())?;
        if !server.starts_with("xds:") {
            return Err(FlagError::new(
                "server",
                format!("{server:?}: this client only dials xds: targets"),
            ));
        }
        let num_channels: u32 = flags.get_or("num_channels", 1)?;
        if !(1..=1024).contains(&num_channels) {
            return Err(FlagError::new("num_channels", "from 1 to 1024"));
        }
        let qps: u32 = flags.get_or("qps", 1)?;
        if !(1..=100_000).contains(&qps) {
            return Err(FlagError::new("qps", "from 1 to 100000"));
        }
        let timeout: u64 = flags.get_or("rpc_timeout_sec", 20)?;
        if timeout == 0 {
            return Err(FlagError::new("rpc_timeout_sec", "at least 1"));
        }
        let types = parse_rpc_types(flags.raw("rpc").unwrap_or("UnaryCall"))?;
        let metadata = parse_metadata(flags.raw("metadata").unwrap_or(""))?;
        Ok(ClientFlags {
            server,
            num_channels,
            qps,
            stats_port: flags.port_or("stats_port", 8081)?,
            listen_host: flags.get_or("listen_host", std::net::Ipv4Addr::UNSPECIFIED.into())?,
            fail_on_failed_rpcs: flags.bool_or("fail_on_failed_rpc", false)?
                || flags.bool_or("fail_on_failed_rpcs", false)?,
            print_response: flags.bool_or("print_response", false)?,
            secure_mode: flags.bool_or("secure_mode", false)?,
            rpcs: RpcConfig {
                types,
                metadata,
                timeout: Duration::from_secs(timeout),
            },
        })
    }
}

fn rpc_type(name: &str) -> Option<RpcType> {
    match name {
        "UnaryCall" => Some(RpcType::UnaryCall),
        "EmptyCall" => Some(RpcType::EmptyCall),
        _ => None,
    }
}

/// `--rpc`: `UnaryCall,EmptyCall`.
fn parse_rpc_types(value: &str) -> Result<Vec<RpcType>, FlagError> {
    let mut types = Vec::new();
    for name in value.split(',').map(str::trim) {
        let rpc = rpc_type(name)
            .ok_or_else(|| FlagError::new("rpc", format!("{name:?}: UnaryCall or EmptyCall")))?;
        if !types.contains(&rpc) {
            types.push(rpc);
        }
    }
    Ok(types)
}

/// `--metadata`: `EmptyCall:key:value,UnaryCall:key:value`; as gRPC-Go's client, an
/// item may hold more pairs (`UnaryCall:k1:v1:k2:v2`), and a value holds no `:`.
fn parse_metadata(value: &str) -> Result<Vec<(RpcType, String, String)>, FlagError> {
    let mut metadata = Vec::new();
    for item in value.split(',').filter(|s| !s.is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        let [rpc, pairs @ ..] = parts.as_slice() else {
            unreachable!("split yields at least one part")
        };
        if pairs.is_empty() || pairs.len() % 2 != 0 {
            return Err(FlagError::new(
                "metadata",
                format!("{item:?}: not Method:key:value (or Method:key1:value1:key2:value2)"),
            ));
        }
        let rpc = rpc_type(rpc).ok_or_else(|| {
            FlagError::new("metadata", format!("{rpc:?}: UnaryCall or EmptyCall"))
        })?;
        for pair in pairs.chunks_exact(2) {
            let (key, value) = (pair[0], pair[1]);
            check_metadata(key, value).map_err(|e| FlagError::new("metadata", e))?;
            metadata.push((rpc, key.to_string(), value.to_string()));
        }
    }
    Ok(metadata)
}

fn check_metadata(key: &str, value: &str) -> Result<(), String> {
    MetadataKey::<tonic::metadata::Ascii>::from_bytes(key.as_bytes())
        .map_err(|_| format!("{key:?} is not a metadata key"))?;
    MetadataValue::try_from(value).map_err(|_| format!("{value:?} is not a metadata value"))?;
    Ok(())
}

/// What each tick sends.
#[derive(Clone, Debug)]
pub struct RpcConfig {
    /// One RPC of each type per tick.
    pub types: Vec<RpcType>,
    /// Metadata by RPC type.
    pub metadata: Vec<(RpcType, String, String)>,
    /// Each RPC's deadline.
    pub timeout: Duration,
}

impl RpcConfig {
    fn metadata_for(&self, rpc: RpcType) -> MetadataMap {
        let mut map = MetadataMap::new();
        for (_, key, value) in self.metadata.iter().filter(|(t, _, _)| *t == rpc) {
            if let (Ok(key), Ok(value)) = (
                MetadataKey::from_bytes(key.as_bytes()),
                MetadataValue::try_from(value.as_str()),
            ) {
                map.append(key, value);
            }
        }
        map
    }
}

/// The configuration the sending loops read and XdsUpdateClientConfigureService
/// replaces. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SharedConfig {
    config: Arc<RwLock<Arc<RpcConfig>>>,
    /// The command line's timeout, for a request without one.
    default_timeout: Duration,
}

impl SharedConfig {
    /// Starts with the command line's configuration.
    pub fn new(config: RpcConfig) -> SharedConfig {
        SharedConfig {
            default_timeout: config.timeout,
            config: Arc::new(RwLock::new(Arc::new(config))),
        }
    }

    /// The configuration now.
    pub fn current(&self) -> Arc<RpcConfig> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// XdsUpdateClientConfigureService over this configuration.
    pub fn service(self) -> XdsUpdateClientConfigureServiceServer<SharedConfig> {
        XdsUpdateClientConfigureServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl XdsUpdateClientConfigureService for SharedConfig {
    async fn configure(
        &self,
        request: Request<ClientConfigureRequest>,
    ) -> Result<Response<ClientConfigureResponse>, Status> {
        let request = request.into_inner();
        let mut types = Vec::new();
        for t in &request.types {
            let rpc = RpcType::try_from(*t)
                .map_err(|_| Status::invalid_argument(format!("types: unknown RpcType {t}")))?;
            if !types.contains(&rpc) {
                types.push(rpc);
            }
        }
        let mut metadata = Vec::new();
        for m in &request.metadata {
            let rpc = RpcType::try_from(m.r#type).map_err(|_| {
                Status::invalid_argument(format!("metadata: unknown RpcType {}", m.r#type))
            })?;
            check_metadata(&m.key, &m.value)
                .map_err(|e| Status::invalid_argument(format!("metadata: {e}")))?;
            metadata.push((rpc, m.key.clone(), m.value.clone()));
        }
        let timeout = match request.timeout_sec {
            n if n > 0 => Duration::from_secs(n as u64),
            _ => self.default_timeout,
        };
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(RpcConfig {
            types,
            metadata,
            timeout,
        });
        Ok(Response::new(ClientConfigureResponse {}))
    }
}

/// What the RPCs of every channel share.
#[derive(Clone, Debug)]
pub struct Sender {
    /// What to send.
    pub config: SharedConfig,
    /// Where outcomes go.
    pub stats: Stats,
    /// `--fail_on_failed_rpc`.
    pub fail_on_failed_rpcs: bool,
    /// `--print_response`.
    pub print_response: bool,
    /// Set once an RPC succeeded (for `fail_on_failed_rpcs`).
    pub succeeded_once: Arc<std::sync::atomic::AtomicBool>,
}

/// Sends on `channel` at `qps` ticks a second until the process ends.
pub async fn send_forever(sender: Sender, channel: XdsChannel, qps: u32) {
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / qps);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    loop {
        ticks.tick().await;
        let config = sender.config.current();
        for rpc in config.types.iter().copied() {
            let sender = sender.clone();
            let client = TestServiceClient::new(channel.clone());
            let config = config.clone();
            tokio::spawn(async move {
                // Numbered as the task sends it: on a busy machine spawned tasks may
                // start out of order, and a stats block is of RPCs as the channel
                // picked them.
                let number = sender.stats.start(rpc);
                let outcome = call(client, rpc, &config).await;
                sender.report(number, rpc, outcome);
            });
        }
    }
}

impl Sender {
    fn report(&self, number: u64, rpc: RpcType, outcome: Outcome) {
        use std::sync::atomic::Ordering;
        if self.print_response {
            println!("{} {number}: {outcome:?}", crate::stats::method_name(rpc));
        }
        self.stats.finish(number, rpc, &outcome);
        match outcome {
            Outcome::Ok(_) => self.succeeded_once.store(true, Ordering::Relaxed),
            Outcome::Failed(code)
                if self.fail_on_failed_rpcs && self.succeeded_once.load(Ordering::Relaxed) =>
            {
                eprintln!(
                    "RPC {number} ({}) failed with {code:?} after an RPC succeeded: exiting (--fail_on_failed_rpc)",
                    crate::stats::method_name(rpc)
                );
                std::process::exit(1);
            }
            Outcome::Failed(_) => {}
        }
    }
}

async fn call(
    mut client: TestServiceClient<XdsChannel>,
    rpc: RpcType,
    config: &RpcConfig,
) -> Outcome {
    fn request<T>(message: T, config: &RpcConfig, rpc: RpcType) -> Request<T> {
        let mut request = Request::new(message);
        *request.metadata_mut() = config.metadata_for(rpc);
        request.set_timeout(config.timeout);
        request
    }
    let result = match rpc {
        RpcType::EmptyCall => client
            .empty_call(request(Empty {}, config, rpc))
            .await
            .map(|r| peer(r.metadata(), String::new())),
        RpcType::UnaryCall => client
            .unary_call(request(
                SimpleRequest {
                    fill_server_id: true,
                    ..Default::default()
                },
                config,
                rpc,
            ))
            .await
            .map(|r| {
                let hostname = r.get_ref().hostname.clone();
                peer(r.metadata(), hostname)
            }),
    };
    match result {
        Ok(peer) => Outcome::Ok(peer),
        Err(status) => Outcome::Failed(status.code()),
    }
}

fn peer(headers: &MetadataMap, from_body: String) -> String {
    headers
        .get("hostname")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or(from_body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<ClientFlags, FlagError> {
        ClientFlags::parse(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn flags_as_the_description_gives_them() {
        let flags = parse(&[
            "--server=xds:///svc",
            "--qps=10",
            "--rpc=EmptyCall,UnaryCall",
            "--metadata=EmptyCall:xds_md:empty_ytpme,UnaryCall:xds_md_numeric:159",
            "--rpc_timeout_sec=3",
        ])
        .expect("valid");
        assert_eq!(
            flags.rpcs.types,
            vec![RpcType::EmptyCall, RpcType::UnaryCall]
        );
        assert_eq!(
            flags.rpcs.metadata[1],
            (RpcType::UnaryCall, "xds_md_numeric".into(), "159".into())
        );
        assert_eq!(flags.rpcs.timeout, Duration::from_secs(3));
        let map = flags.rpcs.metadata_for(RpcType::EmptyCall);
        assert_eq!(
            map.get("xds_md").and_then(|v| v.to_str().ok()),
            Some("empty_ytpme")
        );
        assert!(map.get("xds_md_numeric").is_none());
    }

    #[test]
    fn metadata_items_hold_pairs_as_grpc_go_reads_them() {
        let flags = parse(&[
            "--server=xds:///a",
            "--metadata=UnaryCall:k1:v1:k2:v2,EmptyCall:k:v",
        ])
        .expect("valid");
        assert_eq!(
            flags.rpcs.metadata,
            vec![
                (RpcType::UnaryCall, "k1".into(), "v1".into()),
                (RpcType::UnaryCall, "k2".into(), "v2".into()),
                (RpcType::EmptyCall, "k".into(), "v".into()),
            ]
        );
        // An even count of parts: gRPC-Go refuses it (a value with a colon, or a pair
        // missing its value).
        for bad in ["UnaryCall:k:v:w", "UnaryCall", "UnaryCall:"] {
            let e = parse(&["--server=xds:///a", &format!("--metadata={bad}")]).expect_err(bad);
            assert_eq!(e.flag, "metadata", "{bad}");
        }
    }

    #[test]
    fn fail_on_failed_rpc_in_either_spelling() {
        let fail = |args: &[&str]| parse(args).expect("valid").fail_on_failed_rpcs;
        assert!(!fail(&["--server=xds:///a"]));
        // gRPC's driver and gRPC-Go's client spell it without the s.
        assert!(fail(&["--server=xds:///a", "--fail_on_failed_rpc=true"]));
        assert!(fail(&["--server=xds:///a", "--fail_on_failed_rpcs=true"]));
        assert!(!fail(&["--server=xds:///a", "--fail_on_failed_rpc=false"]));
    }

    #[test]
    fn bad_flags_are_named() {
        assert_eq!(
            parse(&["--server=localhost:1"]).expect_err("target").flag,
            "server"
        );
        assert_eq!(
            parse(&["--server=xds:///a", "--rpc=Stream"])
                .expect_err("rpc")
                .flag,
            "rpc"
        );
        assert_eq!(
            parse(&["--server=xds:///a", "--metadata=UnaryCall:k"])
                .expect_err("md")
                .flag,
            "metadata"
        );
        assert_eq!(
            parse(&["--server=xds:///a", "--qps=0"])
                .expect_err("qps")
                .flag,
            "qps"
        );
        assert_eq!(
            parse(&["--server=xds:///a", "--secure_mode=maybe"])
                .expect_err("tls")
                .flag,
            "secure_mode"
        );
        assert!(
            parse(&["--server=xds:///a", "--secure_mode=true"])
                .expect("xDS credentials")
                .secure_mode
        );
    }
}
