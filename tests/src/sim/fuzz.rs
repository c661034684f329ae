//! The library side of the cargo-fuzz targets in `fuzz/`. Each target is a one-liner
//! into a function here (as str0m does it), so `cargo test` replays the committed
//! regression inputs through exactly the same code (`tests/tests/fuzz_regressions.rs`).
//!
//! - [`interleave`]: arbitrary sequences of watches, cancels, transport events (for
//!   live, stale and unknown streams), hand-built or raw responses (delta ones on the
//!   delta bootstraps), and time advances into one client under the invariant checker.
//! - [`decode_response`]: the bytes as a `DiscoveryResponse` of every built-in type, as
//!   one resource of every type, and through each type's decoder, into a client with
//!   watches on a connected stream; then the same as a `DeltaDiscoveryResponse` into a
//!   client on a delta stream; then as the `LoadStatsResponse` of a client's LRS
//!   stream, bounded input (`lrs`).
//! - [`bootstrap`]: the bytes as bootstrap JSON; whatever parses must round-trip through
//!   [`bootstrap_json::to_json`] and take watches.
//! - [`lb`]: arbitrary CDS and EDS resources through the decoders, then subchannel
//!   states, call outcomes, picks and time into a `LoadBalancer` (in `fuzz/lb.rs`).
//! - [`rbac`]: an RBAC filter config (A41), built rule by rule or raw, through the
//!   parser, then arbitrary requests through the engine (in `fuzz/rbac.rs`).
//!
//! Every function panics, with the broken rule, when an invariant fails.

use std::time::Duration;

use arbitrary::Unstructured;
use bytes::Bytes;
use prost::Message;
use xds_proto_core::client::{Event, ServerId, StreamId, WatcherId, XdsClientConfig};
use xds_proto_core::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, Resource, ResourceError, ResourceName,
};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::{builtin_types, type_url};
use xds_proto_core::{Bootstrap, Code, Instant, Status};

mod lrs;

use super::check::{CheckOptions, CheckedClient, Violation};
use super::server::{SIM_TYPES, garbage_any, invalid_any, valid_any};
use super::{bootstrap_json, rng::SimRng};
use crate::{CDS, EDS, LDS, ONE_SERVER_BOOTSTRAP, RDS};

mod lb;
pub use lb::{LIVE_BYTES_LIMIT, lb};
mod rbac;
pub use rbac::rbac;

const UNKNOWN_TYPE: &str = "type.googleapis.com/fuzz.Unknown";
const NAMES: [&str; 5] = [
    "a",
    "b",
    "c",
    "xdstp://auth.example/envoy.config.cluster.v3.Cluster/x",
    "xdstp://unknown.example/envoy.config.cluster.v3.Cluster/x",
];
const STEP_LIMIT: usize = 400;

fn bootstraps() -> [String; 5] {
    let delta = ONE_SERVER_BOOTSTRAP.replace(
        r#""channel_creds": [{"type": "insecure"}]"#,
        r#""channel_creds": [{"type": "insecure"}], "api_type": "AGGREGATED_DELTA_GRPC""#,
    );
    [
        ONE_SERVER_BOOTSTRAP.to_string(),
        ONE_SERVER_BOOTSTRAP.replace(
            r#""channel_creds": [{"type": "insecure"}]"#,
            r#""channel_creds": [{"type": "insecure"}], "server_features": ["fail_on_data_errors"]"#,
        ),
        r#"{
          "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}],
                           "server_features": ["resource_timer_is_transient_error"]}],
          "node": {"id": "fuzz"},
          "authorities": {"auth.example": {"xds_servers": [
              {"server_uri": "auth.example:443", "channel_creds": [{"type": "insecure"}]}]}}
        }"#
        .to_string(),
        delta,
        // Delta with fail_on_data_errors at the top, SotW for the authority.
        r#"{
          "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}],
                           "server_features": ["fail_on_data_errors"],
                           "api_type": "AGGREGATED_DELTA_GRPC"}],
          "node": {"id": "fuzz"},
          "authorities": {"auth.example": {"xds_servers": [
              {"server_uri": "auth.example:443", "channel_creds": [{"type": "insecure"}]}]}}
        }"#
        .to_string(),
    ]
}

fn client(json: &str, timeout: Duration, seed: u64) -> CheckedClient {
    let bootstrap = Bootstrap::from_json_str(json).expect("fuzz bootstrap parses");
    let mut config = XdsClientConfig::new(bootstrap);
    config.resource_timeout = timeout;
    CheckedClient::new(config, seed, CheckOptions::default())
}

fn check(result: Result<impl Sized, Violation>) {
    if let Err(v) = result {
        panic!("{v}");
    }
}

/// Target `interleave`.
pub fn interleave(data: &[u8]) {
    let mut u = Unstructured::new(data);
    check(run_interleave(&mut u, &mut |_| {}));
}

/// [`interleave`], returning each step it took (for debugging a crash) and the broken
/// rule, if any, instead of panicking.
pub fn interleave_steps(data: &[u8]) -> (Vec<String>, Option<Violation>) {
    let mut u = Unstructured::new(data);
    let mut steps = Vec::new();
    let outcome = run_interleave(&mut u, &mut |line| steps.push(line));
    (steps, outcome.err())
}

fn pick_stream(u: &mut Unstructured<'_>, cc: &CheckedClient) -> arbitrary::Result<StreamId> {
    let live = cc.live_streams();
    let all = cc.all_streams();
    Ok(match u.int_in_range(0..=5)? {
        0..=3 if !live.is_empty() => *u.choose(&live)?,
        4 if !all.is_empty() => *u.choose(&all)?,
        _ => StreamId::from_raw(u.int_in_range(0..=20)?),
    })
}

/// A resource name to watch: one of [`NAMES`], or now and then an arbitrary one. Never
/// the wildcard `*`: the checker holds every watcher to the one resource it names and
/// does not model a `*` watcher, which hears of every resource of its type (the
/// wildcard's rules are asserted by the scenario tests in `tests/tests/delta.rs` and
/// `scenarios.rs`).
fn arb_name(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    if u.ratio(1, 8)? {
        let name = String::arbitrary_short(u)?;
        if name != "*" {
            return Ok(name);
        }
    }
    Ok(u.choose(&NAMES)?.to_string())
}

trait ShortString {
    fn arbitrary_short(u: &mut Unstructured<'_>) -> arbitrary::Result<String>;
}

impl ShortString for String {
    fn arbitrary_short(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
        let len = u.int_in_range(0..=12)?;
        let bytes = u.bytes(len)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

fn arb_any(u: &mut Unstructured<'_>, t: &'static str) -> arbitrary::Result<Any> {
    let name = arb_name(u)?;
    let other = *u.choose(&SIM_TYPES)?;
    let generation = u.int_in_range(0..=3)?;
    Ok(match u.int_in_range(0..=7)? {
        0..=2 => valid_any(t, &name, generation),
        3 => invalid_any(t, &name).unwrap_or_else(|| garbage_any(t)),
        4 => garbage_any(t),
        5 => {
            let inner = if u.arbitrary()? {
                Some(valid_any(t, &name, generation))
            } else {
                None
            };
            let wrapper = Resource {
                name,
                resource: inner,
                ..Default::default()
            };
            Any {
                type_url: type_url::RESOURCE_WRAPPER.to_string(),
                value: wrapper.encode_to_vec().into(),
            }
        }
        6 => valid_any(other, &name, generation),
        _ => {
            let len = u.int_in_range(0..=64)?;
            Any {
                type_url: t.to_string(),
                value: Bytes::copy_from_slice(u.bytes(len)?),
            }
        }
    })
}

fn arb_response(u: &mut Unstructured<'_>) -> arbitrary::Result<DiscoveryResponse> {
    let t = if u.ratio(1, 16)? {
        UNKNOWN_TYPE
    } else {
        *u.choose(&SIM_TYPES)?
    };
    let rt = if t == UNKNOWN_TYPE { CDS } else { t };
    let mut resources = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        resources.push(arb_any(u, rt)?);
    }
    let mut resource_errors = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        let name = if u.ratio(1, 8)? {
            String::new()
        } else {
            arb_name(u)?
        };
        let code = *u.choose(&[0, 5, 7, 13, 14, 99])?;
        let detail = u
            .arbitrary::<bool>()?
            .then(|| xds_proto_core::pb::google::rpc::Status {
                code,
                message: "fuzz".to_string(),
                details: Vec::new(),
            });
        resource_errors.push(ResourceError {
            resource_name: Some(ResourceName {
                name,
                ..Default::default()
            }),
            error_detail: detail,
        });
    }
    Ok(DiscoveryResponse {
        version_info: u.choose(&["", "1", "2", "3"])?.to_string(),
        nonce: u.choose(&["", "n1", "n2", "n3"])?.to_string(),
        type_url: t.to_string(),
        resources,
        resource_errors,
        ..Default::default()
    })
}

fn arb_delta_response(u: &mut Unstructured<'_>) -> arbitrary::Result<DeltaDiscoveryResponse> {
    // The resources, TP3 errors, type, nonce and version of a SotW response, each
    // resource in a delta Resource named by its payload or another name, or without one.
    let sotw = arb_response(u)?;
    let rt = if sotw.type_url == UNKNOWN_TYPE {
        CDS
    } else {
        SIM_TYPES
            .into_iter()
            .find(|t| *t == sotw.type_url)
            .unwrap_or(CDS)
    };
    let ty = builtin_types().into_iter().find(|t| t.type_url() == rt);
    let mut resources = Vec::new();
    for any in sotw.resources {
        let own = ty
            .as_ref()
            .and_then(|ty| ty.decode(&any.value).ok())
            .map(|(n, _)| n);
        let name = match (own, u.int_in_range(0..=5)?) {
            (_, 0) => String::new(),
            (_, 1) => arb_name(u)?,
            (Some(own), _) => own,
            (None, _) => arb_name(u)?,
        };
        let resource = (!u.ratio(1, 12)?).then_some(any);
        resources.push(Resource {
            name,
            version: u.choose(&["", "1", "2", "3"])?.to_string(),
            resource,
            ..Default::default()
        });
    }
    let mut removed_resources = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        removed_resources.push(arb_name(u)?);
    }
    let mut removed_resource_names = Vec::new();
    if u.ratio(1, 6)? {
        removed_resource_names.push(ResourceName {
            name: arb_name(u)?,
            ..Default::default()
        });
    }
    Ok(DeltaDiscoveryResponse {
        system_version_info: sotw.version_info,
        resources,
        type_url: sotw.type_url,
        removed_resources,
        removed_resource_names,
        nonce: sotw.nonce,
        resource_errors: sotw.resource_errors,
        ..Default::default()
    })
}

fn run_interleave(u: &mut Unstructured<'_>, log: &mut dyn FnMut(String)) -> Result<(), Violation> {
    let Ok(setup) = (|| -> arbitrary::Result<(usize, u64, u64)> {
        Ok((u.choose_index(5)?, u.int_in_range(1..=20)?, u.arbitrary()?))
    })() else {
        return Ok(());
    };
    let (which, timeout_s, seed) = setup;
    log(format!(
        "bootstrap #{which}, resource timeout {timeout_s}s, jitter seed {seed}"
    ));
    let mut cc = client(&bootstraps()[which], Duration::from_secs(timeout_s), seed);
    let mut now = Instant::from_secs(1_000);
    let mut watchers: Vec<WatcherId> = Vec::new();
    for _ in 0..STEP_LIMIT {
        if u.is_empty() {
            break;
        }
        let Ok(step) = next_step(u, &cc, &watchers, which >= 3) else {
            break;
        };
        log(format!("{now} {step:?}"));
        let actions = match step {
            Step::Watch(t, name) => {
                let (result, actions) = cc.watch(now, t, &name)?;
                if let Ok(w) = result {
                    watchers.push(w);
                }
                actions
            }
            Step::Cancel(w) => cc.cancel(now, w)?,
            Step::Event(e) => cc.event(now, e)?,
            Step::Advance(by) => {
                now += by;
                cc.timeout(now)?
            }
            Step::FireNext => match cc.poll_timeout() {
                Some(t) => {
                    now = now.max(t);
                    cc.timeout(now)?
                }
                None => Vec::new(),
            },
        };
        for a in actions {
            log(format!("    -> {a:?}"));
        }
    }
    Ok(())
}

#[derive(Debug)]
enum Step {
    Watch(&'static str, String),
    Cancel(WatcherId),
    Event(Event),
    Advance(Duration),
    FireNext,
}

fn next_step(
    u: &mut Unstructured<'_>,
    cc: &CheckedClient,
    watchers: &[WatcherId],
    delta: bool,
) -> arbitrary::Result<Step> {
    Ok(match u.int_in_range(0..=11)? {
        0 | 1 => {
            let t = if u.ratio(1, 16)? {
                UNKNOWN_TYPE
            } else {
                *u.choose(&[LDS, RDS, CDS, EDS])?
            };
            Step::Watch(t, arb_name(u)?)
        }
        2 => Step::Cancel(if watchers.is_empty() || u.ratio(1, 8)? {
            WatcherId::from_raw(u.int_in_range(0..=40)?)
        } else {
            *u.choose(watchers)?
        }),
        3 => Step::Event(Event::StreamStarted {
            stream: pick_stream(u, cc)?,
        }),
        4 | 5 => Step::Event(Event::RequestSent {
            stream: pick_stream(u, cc)?,
        }),
        6 | 7 => {
            let stream = pick_stream(u, cc)?;
            let bytes = if u.ratio(1, 10)? {
                let len = u.int_in_range(0..=32)?;
                Bytes::copy_from_slice(u.bytes(len)?)
            } else if delta && !u.ratio(1, 8)? {
                arb_delta_response(u)?.encode_to_vec().into()
            } else {
                arb_response(u)?.encode_to_vec().into()
            };
            Step::Event(Event::ResponseReceived { stream, bytes })
        }
        8 => {
            let stream = pick_stream(u, cc)?;
            let code = Code(*u.choose(&[0, 1, 4, 13, 14])?);
            Step::Event(Event::StreamClosed {
                stream,
                status: Status::new(code, "fuzz"),
            })
        }
        9 => Step::Event(Event::ConnectivityFailure {
            server: ServerId::from_raw(u.int_in_range(0..=2)?),
            reason: "fuzz".to_string(),
        }),
        10 => Step::Advance(Duration::from_millis(
            *u.choose(&[0, 1, 500, 1_000, 5_000, 15_000, 60_000, 200_000])?,
        )),
        _ => Step::FireNext,
    })
}

/// Watches a few names of every type and brings the stream up: started, and every
/// request reported sent.
fn connected_client(json: &str) -> Result<(CheckedClient, Instant), Violation> {
    let mut cc = client(json, Duration::from_secs(15), 7);
    let now = Instant::from_secs(1_000);
    for t in SIM_TYPES {
        for name in ["a", "b"] {
            if let Err(e) = cc.watch(now, t, name)?.0 {
                panic!("watch({t}, {name}): {e}");
            }
        }
    }
    let stream = *cc.live_streams().last().expect("a stream");
    cc.event(now, Event::StreamStarted { stream })?;
    settle(&mut cc, now)?;
    Ok((cc, now))
}

/// Reports every outstanding request sent.
fn settle(cc: &mut CheckedClient, now: Instant) -> Result<(), Violation> {
    while let Some(stream) = cc
        .live_streams()
        .into_iter()
        .find(|s| cc.has_outstanding(*s))
    {
        cc.event(now, Event::RequestSent { stream })?;
    }
    Ok(())
}

fn feed(cc: &mut CheckedClient, now: Instant, bytes: Bytes) -> Result<(), Violation> {
    if let Some(stream) = cc.live_streams().last().copied() {
        cc.event(now, Event::ResponseReceived { stream, bytes })?;
        settle(cc, now)?;
    }
    Ok(())
}

/// Target `decode_response`.
pub fn decode_response(data: &[u8]) {
    for ty in builtin_types() {
        let _ = ty.decode(data);
    }
    check(run_decode_response(data));
    lrs::decode_load_stats_response(data);
}

fn run_decode_response(data: &[u8]) -> Result<(), Violation> {
    let (mut cc, now) = connected_client(ONE_SERVER_BOOTSTRAP)?;
    let parsed = DiscoveryResponse::decode(data).ok();
    let raw = Bytes::copy_from_slice(data);
    for (i, t) in SIM_TYPES.into_iter().enumerate() {
        if let Some(r) = &parsed {
            let typed = DiscoveryResponse {
                type_url: t.to_string(),
                ..r.clone()
            };
            feed(&mut cc, now, typed.encode_to_vec().into())?;
        }
        let one = Any {
            type_url: t.to_string(),
            value: raw.clone(),
        };
        let wrapped = Resource {
            name: "a".to_string(),
            resource: Some(one.clone()),
            ..Default::default()
        };
        let wrapped = Any {
            type_url: type_url::RESOURCE_WRAPPER.to_string(),
            value: wrapped.encode_to_vec().into(),
        };
        let response = crate::response(t, &format!("{i}"), &format!("n{i}"), vec![one, wrapped]);
        feed(&mut cc, now, response.encode_to_vec().into())?;
    }
    feed(&mut cc, now, raw.clone())?;
    run_decode_delta_response(&raw)
}

/// The bytes on a delta stream: as a `DeltaDiscoveryResponse` of every type, as one
/// delta resource of every type, and raw.
fn run_decode_delta_response(raw: &Bytes) -> Result<(), Violation> {
    let (mut cc, now) = connected_client(&bootstraps()[3])?;
    let parsed = DeltaDiscoveryResponse::decode(raw.clone()).ok();
    for (i, t) in SIM_TYPES.into_iter().enumerate() {
        if let Some(r) = &parsed {
            let typed = DeltaDiscoveryResponse {
                type_url: t.to_string(),
                ..r.clone()
            };
            feed(&mut cc, now, typed.encode_to_vec().into())?;
        }
        let one = Any {
            type_url: t.to_string(),
            value: raw.clone(),
        };
        let response = crate::delta_response(
            t,
            &format!("d{i}"),
            vec![("a", "1", one.clone()), ("", "2", one)],
            &["b"],
        );
        feed(&mut cc, now, response.encode_to_vec().into())?;
    }
    feed(&mut cc, now, raw.clone())
}

/// Target `bootstrap`.
pub fn bootstrap(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = Bootstrap::from_json_str(text) else {
        return;
    };
    let json = bootstrap_json::to_json(&parsed);
    let again = Bootstrap::from_json_str(&json)
        .unwrap_or_else(|e| panic!("the serialized bootstrap does not parse: {e}\n{json}"));
    assert!(
        again == parsed,
        "the bootstrap does not round-trip through {json}\nwas: {parsed:?}\nnow: {again:?}"
    );
    let mut names = vec!["l0".to_string()];
    names.extend(
        parsed
            .authorities
            .keys()
            .map(|a| format!("xdstp://{a}/envoy.config.listener.v3.Listener/l0")),
    );
    let mut cc = CheckedClient::new(XdsClientConfig::new(parsed), 0, CheckOptions::default());
    let now = Instant::from_secs(1);
    for name in names {
        check(cc.watch(now, LDS, &name));
    }
}

/// `LoadStatsResponse`s: the cluster by name with a 2 s interval, every cluster with
/// none (zero), and a list of 20,000 names with an interval of ten thousand years.
fn lrs_seeds() -> Vec<Vec<u8>> {
    use xds_proto_core::pb::envoy::service::load_stats::v3::LoadStatsResponse;
    use xds_proto_core::pb::google::protobuf::Duration as PbDuration;
    let interval = |seconds| Some(PbDuration { seconds, nanos: 0 });
    let named = LoadStatsResponse {
        clusters: vec!["c".into(), "d".into()],
        load_reporting_interval: interval(2),
        ..Default::default()
    };
    let all = LoadStatsResponse {
        send_all_clusters: true,
        ..Default::default()
    };
    let huge = LoadStatsResponse {
        clusters: (0..20_000).map(|i| format!("cluster-{i}")).collect(),
        load_reporting_interval: interval(315_576_000_000),
        ..Default::default()
    };
    [named, all, huge]
        .iter()
        .map(|r| r.encode_to_vec())
        .collect()
}

/// Starting inputs for each target (`(target, bytes)`), written to `fuzz/corpus/` by
/// the ignored test `write_seed_corpus` and replayed by `cargo test`.
pub fn seed_inputs() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rng = SimRng::new(0x5eed);
    for len in [64usize, 256, 1024, 4096] {
        out.push((
            "interleave",
            (0..len).map(|_| rng.next_u64() as u8).collect(),
        ));
    }
    for (i, t) in SIM_TYPES.into_iter().enumerate() {
        let valid = valid_any(t, "a", 1);
        out.push(("decode_response", valid.value.to_vec()));
        let mut both = crate::response(t, "1", "n1", vec![valid, valid_any(t, "b", 2)]);
        if i % 2 == 0 {
            both.resource_errors
                .push(crate::resource_error("c", Code::NOT_FOUND, "gone"));
        }
        out.push(("decode_response", both.encode_to_vec()));
        if let Some(bad) = invalid_any(t, "a") {
            out.push((
                "decode_response",
                crate::response(t, "2", "n2", vec![bad]).encode_to_vec(),
            ));
        }
    }
    for t in SIM_TYPES {
        let delta = crate::delta_response(t, "d1", vec![("a", "7", valid_any(t, "a", 1))], &["b"]);
        out.push(("decode_response", delta.encode_to_vec()));
    }
    // A29: a cluster and a server listener with TLS contexts.
    let tls_cluster = xds_proto_testing::resources::mtls_cluster("t", "p", &["spiffe://td/s"]);
    out.push(("decode_response", tls_cluster.value.to_vec()));
    let tls_listener = xds_proto_testing::resources::mtls_server_listener("l", "::", 443, "p");
    out.push(("decode_response", tls_listener.value.to_vec()));
    for json in bootstraps() {
        out.push(("bootstrap", json.into_bytes()));
    }
    out.push((
        "bootstrap",
        br#"{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": "/ca", "certificate_file": "/c", "private_key_file": "/k", "refresh_interval": "1.5s"}}]}],
            "node": {"id": "n", "locality": {"zone": "z"}, "metadata": {"k": [1, 2.5, null, {"x": "y"}]}},
            "certificate_providers": {"p": {"plugin_name": "file_watcher", "config": {"certificate_file": "/c", "private_key_file": "/k", "spiffe_trust_bundle_map_file": "/b.json", "refresh_interval": "1.5s"}},
                                      "q": {"plugin_name": "other", "config": {"a": 1}}},
            "server_listener_resource_name_template": "grpc/server?addr=%s"}"#
            .to_vec(),
    ));
    let mut rng = SimRng::new(0x1b);
    for len in [32usize, 128, 512, 2048] {
        out.push(("lb", (0..len).map(|_| rng.next_u64() as u8).collect()));
    }
    out.extend(lrs_seeds().into_iter().map(|s| ("decode_response", s)));
    out.extend(rbac::seeds().into_iter().map(|s| ("rbac", s)));
    out
}
