//! quickcheck properties of the pure parts of the client:
//! - a generated bootstrap survives serializing to JSON and parsing back unchanged;
//! - request coalescing: whatever watches and cancels happen while a request is
//!   outstanding, once it is sent each changed type is requested exactly once, with its
//!   final subscription.
//!
//! (Backoff bounds are a property in `xds-proto-core/src/backoff.rs`.)

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use xds_proto_core::Cds;

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use serde_json::{Map, Number, Value};
use xds_proto_core::Bootstrap;
use xds_proto_core::bootstrap::{
    ApiType, AuthorityConfig, CertificateProviderConfig, ChannelCredentials, FILE_WATCHER_PLUGIN,
    FileWatcherConfig, LocalityConfig, NodeConfig, ServerConfig, ServerFeatures, TlsCredentials,
};
use xds_proto_core::client::{Action, WatcherId};
use xds_proto_tests::sim::bootstrap_json;
use xds_proto_tests::{CDS, EDS, Harness, LDS, Req};

// ----- bootstrap round trip -----

fn non_empty(g: &mut Gen) -> String {
    let s = String::arbitrary(g);
    if s.is_empty() { "x".to_string() } else { s }
}

fn json_value(g: &mut Gen, depth: u32) -> Value {
    let choices = if depth == 0 { 5 } else { 7 };
    match u8::arbitrary(g) % choices {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(g)),
        2 => Value::from(i64::arbitrary(g)),
        3 => {
            Number::from_f64(f64::from(i32::arbitrary(g)) / 8.0).map_or(Value::Null, Value::Number)
        }
        4 => Value::String(String::arbitrary(g)),
        5 => Value::Array(
            (0..u8::arbitrary(g) % 3)
                .map(|_| json_value(g, depth - 1))
                .collect(),
        ),
        _ => Value::Object(json_object(g, depth - 1)),
    }
}

fn json_object(g: &mut Gen, depth: u32) -> Map<String, Value> {
    (0..u8::arbitrary(g) % 3)
        .map(|_| (String::arbitrary(g), json_value(g, depth)))
        .collect()
}

/// A `file_watcher` (valid: a certificate and key together, at least one file, at least
/// a second between reads) or another plugin with any config object.
fn certificate_provider(g: &mut Gen) -> CertificateProviderConfig {
    if bool::arbitrary(g) {
        // Any other plugin keeps its config, an object (anything else is refused).
        let mut plugin_name = non_empty(g);
        if plugin_name == FILE_WATCHER_PLUGIN {
            plugin_name.push('x');
        }
        let depth = 1 + u32::from(bool::arbitrary(g));
        return CertificateProviderConfig::Other {
            plugin_name,
            config: json_object(g, depth),
        };
    }
    let identity = bool::arbitrary(g);
    let ca = !identity || bool::arbitrary(g);
    CertificateProviderConfig::FileWatcher(FileWatcherConfig {
        certificate_file: identity.then(|| non_empty(g)),
        private_key_file: identity.then(|| non_empty(g)),
        ca_certificate_file: ca.then(|| non_empty(g)),
        spiffe_trust_bundle_map_file: bool::arbitrary(g).then(|| non_empty(g)),
        refresh_interval: Duration::new(
            1 + u64::from(u32::arbitrary(g)),
            u32::arbitrary(g) % 1_000_000_000,
        ),
    })
}

fn server(g: &mut Gen) -> ServerConfig {
    let channel_creds = match u8::arbitrary(g) % 3 {
        0 => ChannelCredentials::Insecure,
        1 => ChannelCredentials::GoogleDefault,
        _ => {
            let identity = bool::arbitrary(g);
            ChannelCredentials::Tls(TlsCredentials {
                ca_certificate_file: bool::arbitrary(g).then(|| non_empty(g)),
                certificate_file: identity.then(|| non_empty(g)),
                private_key_file: identity.then(|| non_empty(g)),
                refresh_interval: bool::arbitrary(g).then(|| {
                    Duration::new(
                        u64::from(u32::arbitrary(g)),
                        u32::arbitrary(g) % 1_000_000_000,
                    )
                }),
            })
        }
    };
    ServerConfig {
        server_uri: server_uri(g),
        channel_creds,
        server_features: ServerFeatures {
            ignore_resource_deletion: bool::arbitrary(g),
            fail_on_data_errors: bool::arbitrary(g),
            resource_timer_is_transient_error: bool::arbitrary(g),
            trusted_xds_server: bool::arbitrary(g),
        },
        api_type: if bool::arbitrary(g) {
            ApiType::Delta
        } else {
            ApiType::Sotw
        },
    }
}

/// A server URI the bootstrap accepts: a host name or IP literal, with or without a
/// port and a `dns:` prefix.
fn server_uri(g: &mut Gen) -> String {
    let letters: String = (0..1 + usize::from(u8::arbitrary(g) % 8))
        .map(|_| char::from(b'a' + u8::arbitrary(g) % 26))
        .collect();
    let host = match u8::arbitrary(g) % 3 {
        0 => format!("{letters}.example"),
        1 => std::net::Ipv4Addr::from(u32::arbitrary(g)).to_string(),
        _ => format!("[{}]", std::net::Ipv6Addr::from(u128::arbitrary(g))),
    };
    let port = u16::arbitrary(g).max(1);
    match u8::arbitrary(g) % 4 {
        0 => host,
        1 => format!("{host}:{port}"),
        2 => format!("dns:///{host}:{port}"),
        _ => format!("dns:{host}:{port}"),
    }
}

fn servers(g: &mut Gen, min: usize) -> Vec<ServerConfig> {
    (0..min + usize::from(u8::arbitrary(g) % 3))
        .map(|_| server(g))
        .collect()
}

/// A valid bootstrap with every field drawn at random.
#[derive(Clone, Debug)]
struct GenBootstrap(Bootstrap);

impl Arbitrary for GenBootstrap {
    fn arbitrary(g: &mut Gen) -> GenBootstrap {
        let authorities = (0..u8::arbitrary(g) % 3)
            .map(|_| {
                let name = String::arbitrary(g);
                let template = if bool::arbitrary(g) {
                    AuthorityConfig::default_listener_template(&name)
                } else {
                    format!("xdstp://{name}/{}", String::arbitrary(g))
                };
                let config = AuthorityConfig {
                    client_listener_resource_name_template: template,
                    xds_servers: servers(g, 0),
                };
                (name, config)
            })
            .collect();
        let certificate_providers = (0..u8::arbitrary(g) % 3)
            .map(|_| (String::arbitrary(g).into(), certificate_provider(g)))
            .collect();
        GenBootstrap(Bootstrap {
            xds_servers: servers(g, 1),
            node: NodeConfig {
                id: String::arbitrary(g),
                cluster: String::arbitrary(g),
                locality: bool::arbitrary(g).then(|| LocalityConfig {
                    region: String::arbitrary(g),
                    zone: String::arbitrary(g),
                    sub_zone: String::arbitrary(g),
                }),
                metadata: json_object(g, 3),
            },
            authorities,
            client_default_listener_resource_name_template: String::arbitrary(g),
            server_listener_resource_name_template: bool::arbitrary(g)
                .then(|| String::arbitrary(g)),
            certificate_providers,
        })
    }
}

#[test]
fn bootstrap_round_trips_through_json() {
    fn prop(b: GenBootstrap) -> bool {
        let json = bootstrap_json::to_json(&b.0);
        match Bootstrap::from_json_str(&json) {
            Ok(parsed) if parsed == b.0 => true,
            Ok(parsed) => panic!(
                "round trip changed the bootstrap\nwas: {:?}\nnow: {parsed:?}\njson: {json}",
                b.0
            ),
            Err(e) => panic!("serialized bootstrap does not parse: {e}\njson: {json}"),
        }
    }
    QuickCheck::new()
        .tests(300)
        .quickcheck(prop as fn(GenBootstrap) -> bool);
}

// ----- request coalescing -----

const TYPES: [&str; 3] = [LDS, CDS, EDS];
const NAMES: [&str; 3] = ["n0", "n1", "n2"];

/// A watch or a cancel, by index into small pools.
#[derive(Clone, Debug)]
enum Op {
    Watch(usize, usize),
    Cancel(usize),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Op {
        if bool::arbitrary(g) {
            Op::Watch(
                usize::arbitrary(g) % TYPES.len(),
                usize::arbitrary(g) % NAMES.len(),
            )
        } else {
            Op::Cancel(usize::arbitrary(g))
        }
    }
}

/// Subscribed names by type.
type Subscriptions = BTreeMap<&'static str, Vec<String>>;

/// Runs `ops` while a CDS request is outstanding, then reports it sent. Returns the
/// requests that follow (each reported sent in turn), the final subscriptions, and the
/// subscriptions last sent before the ops.
fn coalesce(ops: &[Op]) -> (Vec<Req>, Subscriptions, Subscriptions) {
    let mut h = Harness::new();
    // An anchor watch that is never cancelled keeps the stream open.
    h.watch::<Cds>("anchor");
    let s = h.connect_first(CDS, &["anchor"]);
    let mut active: Vec<(WatcherId, &'static str, &'static str)> = Vec::new();
    active.push((h.watch::<Cds>("n0"), CDS, "n0"));
    let first = h.expect_request(s);
    let mut last_sent = Subscriptions::new();
    last_sent.insert(CDS, first.names);
    for op in ops {
        match *op {
            Op::Watch(t, n) => {
                active.push((h.watch_by_type_url(TYPES[t], NAMES[n]), TYPES[t], NAMES[n]))
            }
            Op::Cancel(i) if !active.is_empty() => {
                let (w, _, _) = active.remove(i % active.len());
                h.cancel(w);
            }
            Op::Cancel(_) => {}
        }
        assert!(
            h.take()
                .iter()
                .all(|a| !matches!(a, Action::SendRequest { .. })),
            "a request was emitted while another was outstanding"
        );
    }
    let mut fin = Subscriptions::new();
    for t in TYPES {
        let mut names: BTreeSet<String> = active
            .iter()
            .filter(|(_, ty, _)| *ty == t)
            .map(|(_, _, n)| n.to_string())
            .collect();
        if t == CDS {
            names.insert("anchor".to_string());
        }
        fin.insert(t, names.into_iter().collect());
    }
    let mut requests = Vec::new();
    h.sent(s);
    while let Some(Action::SendRequest { request, .. }) = h
        .take()
        .into_iter()
        .find(|a| matches!(a, Action::SendRequest { .. }))
    {
        requests.push(Req::of(&request));
        h.sent(s);
        assert!(
            requests.len() <= TYPES.len() + 1,
            "requests keep coming: {requests:?}"
        );
    }
    (requests, fin, last_sent)
}

#[test]
fn changes_while_a_request_is_outstanding_coalesce_into_one_request_per_type() {
    fn prop(ops: Vec<Op>) -> TestResult {
        let (requests, fin, last_sent) = coalesce(&ops);
        let mut seen = BTreeSet::new();
        for r in &requests {
            let t = TYPES
                .iter()
                .copied()
                .find(|t| *t == r.type_url)
                .expect("a known type");
            if !seen.insert(t) {
                return TestResult::error(format!("{t} requested twice: {requests:?}"));
            }
            if r.names != fin[t] {
                return TestResult::error(format!(
                    "{t} requested {:?}, final subscription {:?}",
                    r.names, fin[t]
                ));
            }
        }
        for t in TYPES {
            let before = last_sent.get(t).cloned().unwrap_or_default();
            if fin[t] != before && !seen.contains(t) {
                return TestResult::error(format!(
                    "{t} changed from {before:?} to {:?} but was not requested",
                    fin[t]
                ));
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(300)
        .quickcheck(prop as fn(Vec<Op>) -> TestResult);
}
