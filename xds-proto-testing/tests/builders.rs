//! Every builder produces what its documentation promises, as the core's decoders see
//! it: valid resources decode to the intended values, invalid ones to an error that
//! names them.

use std::time::Duration;

use prost::Message;
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::{
    ClusterType, DecodeContext, HealthStatus, ListenerKind, RouteSource, cluster, endpoint,
    listener, route, type_url,
};
use xds_proto_core::security::{CertificateProviderInstance, RootCertificates};
use xds_proto_core::{Code, DecodeError};
use xds_proto_testing::resources::{self, Host, Locality, PrefixRoute, RouteTarget, mesh};

fn decode_listener(any: &Any) -> Result<listener::ListenerResource, DecodeError> {
    assert_eq!(any.type_url, type_url::LISTENER);
    listener::decode(&any.value).map(|(_, l)| l)
}

fn decode_cluster(any: &Any) -> Result<cluster::ClusterResource, DecodeError> {
    assert_eq!(any.type_url, type_url::CLUSTER);
    cluster::decode(&any.value).map(|(_, c)| c)
}

fn decode_endpoints(any: &Any) -> endpoint::EndpointsResource {
    assert_eq!(any.type_url, type_url::CLUSTER_LOAD_ASSIGNMENT);
    endpoint::decode(&any.value).expect("valid endpoints").1
}

fn client_hcm(any: &Any) -> listener::HttpConnectionManager {
    match decode_listener(any).expect("valid listener").kind {
        ListenerKind::Client(hcm) => hcm,
        other => panic!("expected a client listener, got {other:?}"),
    }
}

#[test]
fn listeners_decode_with_their_routes_and_the_router_last() {
    let hcm = client_hcm(&resources::listener("l", "rc"));
    assert_eq!(hcm.route_config, RouteSource::Rds("rc".into()));
    assert_eq!(hcm.http_filters.len(), 1);
    assert_eq!(hcm.max_stream_duration, None);

    let hcm = client_hcm(&resources::listener_rds(
        "l",
        "rc",
        Some(Duration::from_secs(3)),
    ));
    assert_eq!(hcm.route_config, RouteSource::Rds("rc".into()));
    assert_eq!(hcm.max_stream_duration, Some(Duration::from_secs(3)));

    let rc = resources::routes_config(
        "inline",
        vec![resources::to_cluster(resources::prefix("/"), "c")],
    );
    let hcm = client_hcm(&resources::listener_inline("l", rc, None));
    match hcm.route_config {
        RouteSource::Inline(rc) => assert_eq!(rc.name, "inline"),
        other => panic!("expected inline routes, got {other:?}"),
    }

    match decode_listener(&resources::server_listener("s"))
        .unwrap()
        .kind
    {
        ListenerKind::Server(xds_proto_core::resource::ServerListener {
            address, port, ..
        }) => {
            assert_eq!((address.as_str(), port), ("0.0.0.0", 8080))
        }
        other => panic!("expected a server listener, got {other:?}"),
    }
    let e = decode_listener(&resources::invalid_listener("bad")).unwrap_err();
    assert_eq!(e.name.as_deref(), Some("bad"));
}

#[test]
fn serving_listener_is_a_server_listener_on_its_address_with_non_forwarding_routes() {
    let addr: std::net::SocketAddr = "127.0.0.1:50051".parse().unwrap();
    let any = resources::serving_listener(resources::SERVER_LISTENER_TEMPLATE, addr);
    let decoded = decode_listener(&any).expect("a valid server listener");
    assert_eq!(
        decoded.name,
        "grpc/server?xds.resource.listening_address=127.0.0.1:50051"
    );
    match decoded.kind {
        ListenerKind::Server(xds_proto_core::resource::ServerListener {
            address,
            port,
            filter_chains,
            default_filter_chain,
        }) => {
            assert_eq!((address.as_str(), port), ("127.0.0.1", 50051));
            assert_eq!(filter_chains.len(), 1);
            assert_eq!(filter_chains[0].name, "serve-all");
            assert!(filter_chains[0].tls.is_none(), "plaintext");
            assert!(default_filter_chain.is_none());
        }
        other => panic!("expected a server listener, got {other:?}"),
    }
    let v6: std::net::SocketAddr = "[::1]:8080".parse().unwrap();
    assert_eq!(
        resources::server_listener_name("grpc/server?xds.resource.listening_address=%s", v6),
        "grpc/server?xds.resource.listening_address=[::1]:8080"
    );

    // The chain's one network filter is an HttpConnectionManager the core accepts, with
    // inline routes whose one route serves every path without forwarding.
    let listener =
        xds_proto_core::pb::envoy::config::listener::v3::Listener::decode(any.value.as_ref())
            .unwrap();
    let chain = &listener.filter_chains[0];
    assert!(chain.transport_socket.is_none(), "plaintext");
    let Some(xds_proto_core::pb::envoy::config::listener::v3::filter::ConfigType::TypedConfig(
        manager,
    )) = &chain.filters[0].config_type
    else {
        panic!("the filter has no typed_config")
    };
    assert_eq!(manager.type_url, resources::HCM_TYPE_URL);
    let manager = Message::decode(manager.value.as_ref()).unwrap();
    let hcm = client_hcm(&resources::listener_of("as-client", &manager));
    let RouteSource::Inline(rc) = hcm.route_config else {
        panic!("expected inline routes, got {:?}", hcm.route_config)
    };
    let route = &rc.virtual_hosts[0].routes[0];
    assert_eq!(route.action, route::RouteAction::NonForwarding);
}

#[test]
fn route_configurations_keep_prefixes_weights_and_vhost_names() {
    let rc = resources::route_config_msg("rc", "c");
    assert_eq!(rc.virtual_hosts[0].name, "rc-vhost");
    assert_eq!(rc.virtual_hosts[0].domains, ["*"]);
    let decoded = resources::decode_rc(&rc).expect("valid route configuration");
    assert_eq!(decoded.virtual_hosts[0].routes.len(), 1);

    let routes = [
        PrefixRoute {
            prefix: "/api".into(),
            target: RouteTarget::Weighted(vec![("v1".into(), 90), ("v2".into(), 10)]),
        },
        PrefixRoute {
            prefix: "/".into(),
            target: RouteTarget::Cluster("web".into()),
        },
    ];
    let any = resources::route_config_with("demo", &["demo.example.com"], &routes);
    assert_eq!(any.type_url, type_url::ROUTE_CONFIGURATION);
    let (name, decoded) = route::decode(&any.value).expect("valid route configuration");
    assert_eq!(name, "demo");
    assert_eq!(decoded.virtual_hosts[0].routes.len(), 2);

    // A weighted split summing to zero is a NACK.
    let zero = resources::routes_config(
        "z",
        vec![resources::forward(
            resources::prefix("/"),
            resources::weighted_action(&[("a", 0)]),
        )],
    );
    let e = resources::decode_rc(&zero).unwrap_err();
    assert!(e.contains("sum of weights is 0"), "{e}");
}

#[test]
fn clusters_decode_to_their_discovery_type() {
    let c = decode_cluster(&resources::cluster_with("c", 77)).unwrap();
    assert_eq!(c.cluster_type, ClusterType::Eds { service_name: None });
    assert_eq!(c.max_requests, 77);
    assert_eq!(
        decode_cluster(&resources::cluster("c"))
            .unwrap()
            .max_requests,
        1024
    );

    // An xdstp: cluster gets its own name as EDS service name, which gRPC requires.
    let xdstp = "xdstp://authority/envoy.config.cluster.v3.Cluster/c";
    let c = decode_cluster(&resources::cluster(xdstp)).unwrap();
    assert_eq!(
        c.cluster_type,
        ClusterType::Eds {
            service_name: Some(xdstp.into())
        }
    );
    let e = decode_cluster(&resources::eds_cluster(xdstp, None)).unwrap_err();
    assert!(e.message.contains("service_name"), "{e:?}");
    let c = decode_cluster(&resources::eds_cluster("c", Some("svc"))).unwrap();
    assert_eq!(
        c.cluster_type,
        ClusterType::Eds {
            service_name: Some("svc".into())
        }
    );

    let c = decode_cluster(&resources::aggregate_cluster("agg", &["a", "b"])).unwrap();
    assert_eq!(
        c.cluster_type,
        ClusterType::Aggregate {
            clusters: vec!["a".into(), "b".into()]
        }
    );
    let c = decode_cluster(&resources::logical_dns_cluster("dns", "example.com", 443)).unwrap();
    assert_eq!(
        c.cluster_type,
        ClusterType::LogicalDns {
            host: "example.com".into(),
            port: 443
        }
    );

    let padded = resources::padded_cluster("c", 10_000);
    assert!(padded.value.len() > 10_000);
    decode_cluster(&padded).unwrap();

    let e = decode_cluster(&resources::invalid_cluster("bad")).unwrap_err();
    assert_eq!(e.name.as_deref(), Some("bad"));
    assert!(e.message.contains("STATIC"), "{e:?}");
}

#[test]
fn the_wrr_cluster_decodes_to_weighted_round_robin_under_wrr_locality() {
    use xds_proto_core::pb::envoy::extensions::load_balancing_policies::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin;
    use xds_proto_core::pb::google::protobuf::{BoolValue, FloatValue};
    let config = ClientSideWeightedRoundRobin {
        enable_oob_load_report: Some(BoolValue { value: true }),
        oob_reporting_period: Some(resources::pb_duration(Duration::from_millis(200))),
        blackout_period: Some(resources::pb_duration(Duration::ZERO)),
        weight_update_period: Some(resources::pb_duration(Duration::from_millis(100))),
        error_utilization_penalty: Some(FloatValue { value: 0.5 }),
        ..Default::default()
    };
    let c = decode_cluster(&resources::wrr_cluster("w", config)).expect("a valid cluster");
    let cluster::LbPolicy::WrrLocality(child) = c.lb_policy else {
        panic!("wrr_locality: {:?}", c.lb_policy);
    };
    let cluster::LbPolicy::WeightedRoundRobin(wrr) = *child else {
        panic!("weighted round robin first: {child:?}");
    };
    assert!(wrr.enable_oob_load_report);
    assert_eq!(wrr.oob_reporting_period, Duration::from_millis(200));
    assert_eq!(wrr.blackout_period, Duration::ZERO);
    assert_eq!(wrr.weight_update_period, Duration::from_millis(100));
    assert_eq!(wrr.error_utilization_penalty, 0.5);
    assert_eq!(
        wrr.weight_expiration_period,
        Duration::from_secs(180),
        "A58's default"
    );
    // A negative penalty is refused (A58).
    let bad = ClientSideWeightedRoundRobin {
        error_utilization_penalty: Some(FloatValue { value: -1.0 }),
        ..Default::default()
    };
    let e = decode_cluster(&resources::wrr_cluster("bad", bad)).unwrap_err();
    assert!(e.to_string().contains("error_utilization_penalty"), "{e}");
}

#[test]
fn endpoints_keep_localities_priorities_health_and_weights() {
    let e = decode_endpoints(&resources::endpoints("c", &[8080, 8081]));
    assert_eq!(e.cluster_name, "c");
    let locality = &e.priorities[0].localities[0];
    assert_eq!(
        (locality.locality.region.as_str(), locality.weight),
        ("r1", 1)
    );
    let ports: Vec<u16> = locality
        .endpoints
        .iter()
        .map(|e| e.address.port())
        .collect();
    assert_eq!(ports, [8080, 8081]);

    let backup = Locality {
        priority: 1,
        weight: 3,
        sub_zone: "rack".into(),
        ..Locality::new(
            "r2",
            "z2",
            vec![Host {
                address: "10.0.0.2".into(),
                port: 9090,
                health: xds_proto_core::pb::envoy::config::core::v3::HealthStatus::Draining,
                weight: Some(5),
            }],
        )
    };
    let e = decode_endpoints(&resources::endpoints_with(
        "c",
        &[Locality::new("r1", "z1", vec![Host::healthy(80)]), backup],
    ));
    assert_eq!(e.priorities.len(), 2);
    let backup = &e.priorities[1].localities[0];
    assert_eq!(
        (backup.weight, backup.locality.sub_zone.as_str()),
        (3, "rack")
    );
    assert_eq!(backup.endpoints[0].health_status, HealthStatus::Draining);
    assert_eq!(backup.endpoints[0].weight, 5);
}

#[test]
fn the_mesh_is_valid_and_its_full_cluster_extends_the_lean_one() {
    let n = 3;
    let hcm = client_hcm(&mesh::listener(n));
    match hcm.route_config {
        RouteSource::Inline(rc) => assert_eq!(rc.virtual_hosts.len(), n),
        other => panic!("expected inline routes, got {other:?}"),
    }
    let lean = decode_cluster(&mesh::service_cluster(1)).unwrap();
    let name = mesh::cluster_name(1);
    assert_eq!(
        lean.cluster_type,
        ClusterType::Eds {
            service_name: Some(name.clone())
        }
    );
    // The mesh's TLS is istiod's proxyless form: valid with the mesh's providers.
    let tls = lean.tls.expect("an mTLS cluster");
    assert_eq!(
        tls.identity.map(|i| i.instance_name).as_deref(),
        Some(mesh::CERTIFICATE_PROVIDER)
    );
    assert_eq!(tls.match_subject_alt_names.len(), 1);
    let bootstrap = xds_proto_core::Bootstrap::from_json_str(&format!(
        r#"{{"xds_servers": [{{"server_uri": "x:1", "channel_creds": [{{"type": "insecure"}}]}}],
            "certificate_providers": {}}}"#,
        mesh::certificate_providers_json()
    ))
    .unwrap();
    let context = DecodeContext::new(&bootstrap);
    let service = mesh::service_cluster(1);
    assert!(cluster::decode_in(&context, &service.value).is_ok());
    let full = resources::any(type_url::CLUSTER, &mesh::istio_cluster(1, 7));
    let full_decoded = decode_cluster(&full).unwrap();
    assert_eq!(full_decoded.max_requests, 1024 + 7);
    assert!(full.value.len() > mesh::service_cluster(1).value.len());

    let e = decode_endpoints(&mesh::service_endpoints(1));
    assert_eq!(e.cluster_name, name);
    let count: usize = e.priorities[0]
        .localities
        .iter()
        .map(|l| l.endpoints.len())
        .sum();
    assert_eq!(count, mesh::ENDPOINTS_PER_SET);

    let big = mesh::istio_endpoints("big", 1000, 1);
    assert_eq!(big.endpoints.len(), 40);
    let e = decode_endpoints(&resources::any(type_url::CLUSTER_LOAD_ASSIGNMENT, &big));
    assert!(
        e.priorities[0]
            .localities
            .iter()
            .all(|l| l.endpoints.len() == 25 && l.weight == 100)
    );
    assert_eq!(
        e.priorities[0].localities[0].endpoints[0].address.port(),
        8081
    );
}

#[test]
fn wrapper_errors_and_names() {
    let wrapped = resources::wrap_resource("c", resources::cluster("c"));
    assert_eq!(wrapped.type_url, type_url::RESOURCE_WRAPPER);
    let inner =
        xds_proto_core::pb::envoy::service::discovery::v3::Resource::decode(wrapped.value.clone())
            .unwrap();
    assert_eq!(inner.resource, Some(resources::cluster("c")));

    let error = resources::resource_error("c", Code::NOT_FOUND, "gone");
    assert_eq!(error.resource_name.unwrap().name, "c");
    assert_eq!(error.error_detail.unwrap().code, Code::NOT_FOUND.0);

    assert_eq!(
        resources::resource_name(&resources::listener("l", "r")).as_deref(),
        Some("l")
    );
    assert_eq!(
        resources::resource_name(&resources::route_config("r", "c")).as_deref(),
        Some("r")
    );
    assert_eq!(
        resources::resource_name(&resources::cluster("c")).as_deref(),
        Some("c")
    );
    assert_eq!(
        resources::resource_name(&resources::endpoints("e", &[1])).as_deref(),
        Some("e")
    );
    assert_eq!(resources::resource_name(&wrapped), None);
}

/// A bootstrap defining the provider instances `mesh` (a certificate, its key and a CA
/// file) and `ca` (a CA file), from the kit's JSON builder.
fn tls_bootstrap() -> xds_proto_core::Bootstrap {
    let mesh = resources::file_watcher_provider_json(
        Some("/certs/cert.pem"),
        Some("/certs/key.pem"),
        Some("/certs/ca.pem"),
        Duration::from_millis(1500),
    );
    let ca = resources::file_watcher_provider_json(None, None, Some("/ca.pem"), Duration::ZERO);
    let b = xds_proto_core::Bootstrap::from_json_str(&format!(
        r#"{{"xds_servers": [{{"server_uri": "x:1", "channel_creds": [{{"type": "insecure"}}]}}],
            "certificate_providers": {{"mesh": {mesh}, "ca": {ca}}}}}"#
    ))
    .unwrap();
    let mesh = b.certificate_providers["mesh"].file_watcher().unwrap();
    assert_eq!(mesh.refresh_interval, Duration::from_millis(1500));
    assert_eq!(
        mesh.identity_files(),
        Some(("/certs/cert.pem", "/certs/key.pem"))
    );
    b
}

fn instance(name: &str) -> CertificateProviderInstance {
    CertificateProviderInstance {
        instance_name: name.into(),
        certificate_name: "".into(),
    }
}

#[test]
fn tls_clusters_decode_with_their_security_config() {
    let b = tls_bootstrap();
    let context = DecodeContext::new(&b);
    let c = resources::mtls_cluster("c", "mesh", &["server.example", "spiffe://td/server"]);
    let (_, decoded) = cluster::decode_in(&context, &c.value).unwrap();
    let tls = decoded.tls.expect("TLS");
    assert_eq!(tls.identity, Some(instance("mesh")));
    assert_eq!(tls.roots, RootCertificates::Provider(instance("mesh")));
    assert_eq!(tls.match_subject_alt_names.len(), 2);
    // Plain TLS: roots only.
    let plain = resources::tls_cluster("p", &resources::upstream_tls_context("ca", None, &[]));
    let tls = cluster::decode_in(&context, &plain.value)
        .unwrap()
        .1
        .tls
        .unwrap();
    assert_eq!(
        (tls.identity, tls.roots),
        (None, RootCertificates::Provider(instance("ca")))
    );
    // An instance the bootstrap lacks is a NACK naming it.
    let unknown = resources::mtls_cluster("u", "nope", &[]);
    let e = cluster::decode_in(&context, &unknown.value).unwrap_err();
    assert!(
        e.message
            .contains("unrecognized certificate provider instance name \"nope\""),
        "{e}"
    );
}

#[test]
fn tls_server_listeners_decode_with_their_security_config() {
    let b = tls_bootstrap();
    let context = DecodeContext::new(&b);
    let l = resources::mtls_server_listener(
        "grpc/server?addr=127.0.0.1:50051",
        "127.0.0.1",
        50051,
        "mesh",
    );
    let (_, decoded) = listener::decode_in(&context, &l.value).unwrap();
    let ListenerKind::Server(xds_proto_core::resource::ServerListener {
        port,
        filter_chains,
        ..
    }) = decoded.kind
    else {
        panic!("a server listener")
    };
    assert_eq!(port, 50051);
    let tls = filter_chains[0].tls.clone().expect("TLS");
    assert_eq!(tls.identity, instance("mesh"));
    assert_eq!(tls.client_roots, Some(instance("mesh")));
    assert!(tls.require_client_certificate);
    // TLS without client certificates, and plaintext.
    let server_tls = resources::downstream_tls_context("mesh", None, false);
    let msg = resources::tls_server_listener_msg("s", "0.0.0.0", 8443, Some(&server_tls));
    let (_, decoded) = listener::decode_in(&context, &msg.encode_to_vec()).unwrap();
    let ListenerKind::Server(xds_proto_core::resource::ServerListener { filter_chains, .. }) =
        decoded.kind
    else {
        panic!("a server listener")
    };
    let tls = filter_chains[0].tls.clone().unwrap();
    assert_eq!(
        (tls.client_roots, tls.require_client_certificate),
        (None, false)
    );
    let plain = resources::tls_server_listener_msg("s", "0.0.0.0", 8080, None);
    let (_, decoded) = listener::decode_in(&context, &plain.encode_to_vec()).unwrap();
    let ListenerKind::Server(xds_proto_core::resource::ServerListener { filter_chains, .. }) =
        decoded.kind
    else {
        panic!("a server listener")
    };
    assert_eq!(filter_chains[0].tls, None);
    // The chain's HttpConnectionManager is a valid one (A36 will read it): inline routes
    // with a non-forwarding action, the router last.
    let hcm_any = match &plain.filter_chains[0].filters[0].config_type {
        Some(xds_proto_core::pb::envoy::config::listener::v3::filter::ConfigType::TypedConfig(
            a,
        )) => a.clone(),
        other => panic!("expected a typed config, got {other:?}"),
    };
    let client_view = resources::listener_of(
        "as-client",
        &xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager::decode(hcm_any.value.as_ref()).unwrap(),
    );
    let hcm = client_hcm(&client_view);
    assert!(matches!(hcm.route_config, RouteSource::Inline(_)));
}
