//! Drives the sans-IO core through a scripted session against an in-memory control
//! plane and prints the trace: the LDS → RDS → CDS → EDS chain, an endpoint update, a
//! NACKed cluster, a stream failure with reconnect, and a does-not-exist timeout.
//!
//! Run: `cargo run -p xds-proto-tests --example scripted_session`

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use xds_proto_core::{Cds, Eds, Lds, Rds};

use bytes::Bytes;
use prost::Message;
use xds_proto_core::client::{Action, Event, WatchEvent, XdsClient, XdsClientConfig};
use xds_proto_core::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::{Bootstrap, Code, Instant, Status, StreamId};
use xds_proto_tests::fixtures;
use xds_proto_tests::{CDS, EDS, LDS, ONE_SERVER_BOOTSTRAP, RDS};

/// A control plane holding one snapshot per type; it answers each request whose
/// subscription or version differs from what the client last saw.
#[derive(Default)]
struct ControlPlane {
    snapshot: HashMap<&'static str, (u32, BTreeMap<String, Any>)>,
    nonce: u32,
}

impl ControlPlane {
    fn set(&mut self, type_url: &'static str, resources: Vec<(&str, Any)>) {
        let entry = self.snapshot.entry(type_url).or_default();
        entry.0 += 1;
        for (name, any) in resources {
            entry.1.insert(name.to_string(), any);
        }
    }

    fn answer(&mut self, req: &DiscoveryRequest, changed: bool) -> Option<DiscoveryResponse> {
        let (version, resources) = self.snapshot.get(req.type_url.as_str())?;
        let version = version.to_string();
        // Answer a new subscription, or a client that does not have this version yet;
        // a NACK gets no answer until the snapshot changes.
        if !changed && (req.version_info == version || req.error_detail.is_some()) {
            return None;
        }
        self.nonce += 1;
        Some(DiscoveryResponse {
            version_info: version,
            type_url: req.type_url.clone(),
            nonce: self.nonce.to_string(),
            resources: req
                .resource_names
                .iter()
                .filter_map(|n| resources.get(n).cloned())
                .collect(),
            ..Default::default()
        })
    }
}

struct Session {
    client: XdsClient,
    now: Instant,
    plane: ControlPlane,
    stream: Option<StreamId>,
    last_names: HashMap<String, Vec<String>>,
    outbox: Vec<DiscoveryResponse>,
}

impl Session {
    fn log(&self, line: &str) {
        println!(
            "[{:>8}] {line}",
            self.now
                .saturating_duration_since(Instant::ZERO)
                .as_secs_f64()
                .to_string()
                + "s"
        );
    }

    fn drain(&mut self) {
        while let Some(action) = self.client.poll_action() {
            match action {
                Action::StartStream { config, stream, .. } => {
                    self.log(&format!(
                        "-> start ADS stream {} to {}",
                        stream, config.server_uri
                    ));
                    self.stream = Some(stream);
                    self.last_names.clear();
                    self.client
                        .handle_event(self.now, Event::StreamStarted { stream });
                }
                Action::SendRequest { stream, request } => {
                    let request = request.to_proto();
                    let kind = if request.error_detail.is_some() {
                        "NACK"
                    } else {
                        "request"
                    };
                    self.log(&format!(
                        "-> {kind} {} names={:?} version={:?} nonce={:?}{}{}",
                        short(&request.type_url),
                        request.resource_names,
                        request.version_info,
                        request.response_nonce,
                        if request.node.is_some() { " +node" } else { "" },
                        request
                            .error_detail
                            .as_ref()
                            .map(|e| format!(" error={:?}", e.message))
                            .unwrap_or_default(),
                    ));
                    let changed =
                        self.last_names.get(&request.type_url) != Some(&request.resource_names);
                    self.last_names
                        .insert(request.type_url.clone(), request.resource_names.clone());
                    if let Some(resp) = self.plane.answer(&request, changed) {
                        self.outbox.push(resp);
                    }
                    self.client
                        .handle_event(self.now, Event::RequestSent { stream });
                }
                Action::CloseStream { stream } => self.log(&format!("-> close stream {stream}")),
                Action::DropChannel { server } => self.log(&format!("-> drop channel {server}")),
                Action::Notify(n) => {
                    let what = match &n.event {
                        WatchEvent::Changed(Ok(v)) => format!("update: {}", describe(v)),
                        WatchEvent::Changed(Err(e)) => format!("error: {e}"),
                        WatchEvent::AmbientError(e) => {
                            format!("ambient error (keeping value): {e}")
                        }
                        other => format!("{other:?}"),
                    };
                    self.log(&format!(
                        "<= watcher {} {} {:?} {what}",
                        n.watcher,
                        short(n.type_url),
                        &*n.name
                    ));
                    if let WatchEvent::Changed(Ok(v)) = &n.event {
                        self.follow(v);
                    }
                }
                other => self.log(&format!("-> {other:?}")),
            }
        }
    }

    /// Follows the chain: a listener's route config, a route's clusters, a cluster's endpoints.
    fn follow(&mut self, v: &xds_proto_core::ResourceValue) {
        let next: Vec<(&str, String)> = if let Some(l) = v.get::<Lds>() {
            l.route_config_name()
                .map(|r| vec![(RDS, r.to_string())])
                .unwrap_or_default()
        } else if let Some(r) = v.get::<Rds>() {
            r.cluster_names().into_iter().map(|c| (CDS, c)).collect()
        } else if let Some(c) = v.get::<Cds>() {
            c.eds_service_name()
                .map(|s| vec![(EDS, s.to_string())])
                .unwrap_or_default()
        } else {
            vec![]
        };
        for (ty, name) in next {
            if !self
                .client
                .resource_snapshot()
                .iter()
                .any(|r| r.type_url == ty && *r.name == name)
            {
                xds_proto_tests::watch_by_type_url(&mut self.client, ty, &name).expect("watch");
            }
        }
    }

    /// Delivers queued responses until the exchange settles.
    fn settle(&mut self) {
        self.drain();
        while !self.outbox.is_empty() {
            let batch: Vec<_> = self.outbox.drain(..).collect();
            for resp in batch {
                let Some(stream) = self.stream else { continue };
                self.log(&format!(
                    "<- response {} version={:?} nonce={:?} ({} resources)",
                    short(&resp.type_url),
                    resp.version_info,
                    resp.nonce,
                    resp.resources.len()
                ));
                self.client.handle_event(
                    self.now,
                    Event::ResponseReceived {
                        stream,
                        bytes: Bytes::from(resp.encode_to_vec()),
                    },
                );
                self.drain();
            }
        }
    }

    fn advance(&mut self, by: Duration) {
        let target = self.now + by;
        while let Some(at) = self.client.poll_timeout().filter(|at| *at <= target) {
            self.now = self.now.max(at);
            self.client.handle_timeout(self.now);
            self.settle();
        }
        self.now = target;
    }
}

fn short(type_url: &str) -> &str {
    type_url.rsplit('.').next().unwrap_or(type_url)
}

fn describe(v: &xds_proto_core::ResourceValue) -> String {
    if let Some(l) = v.get::<Lds>() {
        format!(
            "listener -> route config {:?}",
            l.route_config_name().unwrap_or("(inline)")
        )
    } else if let Some(r) = v.get::<Rds>() {
        format!(
            "{} virtual host(s), clusters {:?}",
            r.virtual_hosts.len(),
            r.cluster_names()
        )
    } else if let Some(c) = v.get::<Cds>() {
        format!("EDS cluster, max_requests {}", c.max_requests)
    } else if let Some(e) = v.get::<Eds>() {
        format!("{} endpoint(s)", e.endpoint_count())
    } else {
        format!("{v:?}")
    }
}

fn main() {
    let bootstrap = Bootstrap::from_json_str(ONE_SERVER_BOOTSTRAP).expect("bootstrap");
    let mut config = XdsClientConfig::new(bootstrap);
    config.resource_timeout = Duration::from_secs(15);
    let mut s = Session {
        client: XdsClient::new(config, 42),
        now: Instant::ZERO,
        plane: ControlPlane::default(),
        stream: None,
        last_names: HashMap::new(),
        outbox: Vec::new(),
    };
    s.plane.set(
        LDS,
        vec![(
            "demo.listener",
            fixtures::listener("demo.listener", "demo.routes"),
        )],
    );
    s.plane.set(
        RDS,
        vec![(
            "demo.routes",
            fixtures::route_config("demo.routes", "demo.cluster"),
        )],
    );
    s.plane.set(
        CDS,
        vec![("demo.cluster", fixtures::cluster("demo.cluster"))],
    );
    s.plane.set(
        EDS,
        vec![(
            "demo.cluster",
            fixtures::endpoints("demo.cluster", &[8080, 8081]),
        )],
    );

    println!("== follow the chain from listener \"demo.listener\"");
    s.client.watch::<Lds>("demo.listener").expect("watch");
    s.settle();

    println!("\n== the control plane adds an endpoint");
    s.advance(Duration::from_secs(5));
    s.plane.set(
        EDS,
        vec![(
            "demo.cluster",
            fixtures::endpoints("demo.cluster", &[8080, 8081, 8082]),
        )],
    );
    let names = vec!["demo.cluster".to_string()];
    s.outbox.push(
        s.plane
            .answer(
                &DiscoveryRequest {
                    type_url: EDS.into(),
                    resource_names: names.clone(),
                    ..Default::default()
                },
                true,
            )
            .unwrap(),
    );
    s.settle();

    println!("\n== the control plane pushes an invalid cluster (it is NACKed, the old one stays)");
    s.plane.set(
        CDS,
        vec![("demo.cluster", fixtures::invalid_cluster("demo.cluster"))],
    );
    s.outbox.push(
        s.plane
            .answer(
                &DiscoveryRequest {
                    type_url: CDS.into(),
                    resource_names: names,
                    ..Default::default()
                },
                true,
            )
            .unwrap(),
    );
    s.settle();

    println!("\n== the stream is reset after responses: reconnect at once, cache kept");
    if let Some(stream) = s.stream.take() {
        s.client.handle_event(
            s.now,
            Event::StreamClosed {
                stream,
                status: Status::new(Code::UNAVAILABLE, "connection reset"),
            },
        );
    }
    s.settle();

    println!("\n== watch a listener the control plane does not have");
    s.client.watch::<Lds>("missing.listener").expect("watch");
    s.settle();
    s.advance(Duration::from_secs(16));

    println!("\n== CSDS");
    for r in s.client.resource_snapshot() {
        println!(
            "{:<22} {:<18} {:?} version={:?}",
            short(r.type_url),
            &*r.name,
            r.status,
            &*r.version
        );
    }
}
