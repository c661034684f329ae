//! Tests of the bootstrap parser: every field, every error with its exact message.

use std::cell::RefCell;
use std::io;
use std::time::Duration;

use serde_json::json;

use super::server::parse_proto_duration;
use super::*;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::google::protobuf as pbuf;

const MINIMAL: &str = r#"{
    "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}]
}"#;

fn parse(value: Value) -> Result<Bootstrap, BootstrapError> {
    Bootstrap::from_json_str(&value.to_string())
}

fn err(value: Value) -> String {
    match parse(value) {
        Ok(b) => panic!("expected an error, parsed {b:?}"),
        Err(e) => e.to_string(),
    }
}

fn insecure(uri: &str) -> ServerConfig {
    ServerConfig {
        server_uri: uri.to_owned(),
        channel_creds: ChannelCredentials::Insecure,
        server_features: ServerFeatures::default(),
        api_type: ApiType::Sotw,
    }
}

/// A valid bootstrap with one field replaced, for error tests.
fn with(key: &str, value: Value) -> Value {
    let mut root = json!({
        "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}]
    });
    root[key] = value;
    root
}

/// A valid bootstrap whose only server is `server`.
fn with_server(server: Value) -> Value {
    json!({ "xds_servers": [server] })
}

/// A valid bootstrap whose only server has these `channel_creds`.
fn with_creds(creds: Value) -> Value {
    with_server(json!({"server_uri": "s", "channel_creds": creds}))
}

fn tls_with(config: Value) -> Value {
    with_creds(json!([{"type": "tls", "config": config}]))
}

#[test]
fn full_bootstrap_parses_every_field() {
    let text = r#"{
        "xds_servers": [
            {
                "server_uri": "primary.example:443",
                "channel_creds": [
                    {"type": "unknown_creds", "config": {"x": 1}},
                    {"type": "tls", "config": {
                        "ca_certificate_file": "/certs/ca.pem",
                        "certificate_file": "/certs/cert.pem",
                        "private_key_file": "/certs/key.pem",
                        "refresh_interval": "600s",
                        "unknown_field": true
                    }},
                    {"type": "insecure"}
                ],
                "server_features": ["ignore_resource_deletion", "trusted_xds_server", "xds_v3"]
            },
            {
                "server_uri": "fallback.example:443",
                "channel_creds": [{"type": "google_default"}],
                "server_features": [
                    "fail_on_data_errors", "resource_timer_is_transient_error"
                ]
            }
        ],
        "node": {
            "id": "projects/1/networks/default/nodes/abc",
            "cluster": "cluster-a",
            "locality": {"region": "us-east1", "zone": "us-east1-b", "sub_zone": "rack7"},
            "metadata": {"TRAFFICDIRECTOR_NETWORK_NAME": "default", "n": 3, "nested": {"k": [1, "two"]}},
            "user_agent_name": "ignored"
        },
        "authorities": {
            "a.example": {
                "client_listener_resource_name_template":
                    "xdstp://a.example/envoy.config.listener.v3.Listener/custom/%s",
                "xds_servers": [
                    {"server_uri": "a1.example:443", "channel_creds": [{"type": "insecure"}]},
                    {"server_uri": "a2.example:443", "channel_creds": [{"type": "insecure"}]}
                ]
            },
            "b.example": {}
        },
        "client_default_listener_resource_name_template": "xdstp://a.example/envoy.config.listener.v3.Listener/%s",
        "server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s",
        "certificate_providers": {
            "default": {"plugin_name": "file_watcher", "config": {"certificate_file": "/c.pem", "private_key_file": "/k.pem", "refresh_interval": "5s"}},
            "bare": {"plugin_name": "meshca"}
        },
        "some_future_field": [1, 2, 3]
    }"#;
    let b = Bootstrap::from_json_str(text).unwrap();

    let mut metadata = Map::new();
    metadata.insert("TRAFFICDIRECTOR_NETWORK_NAME".into(), json!("default"));
    metadata.insert("n".into(), json!(3));
    metadata.insert("nested".into(), json!({"k": [1, "two"]}));

    let expected = Bootstrap {
        xds_servers: vec![
            ServerConfig {
                server_uri: "primary.example:443".into(),
                channel_creds: ChannelCredentials::Tls(TlsCredentials {
                    ca_certificate_file: Some("/certs/ca.pem".into()),
                    certificate_file: Some("/certs/cert.pem".into()),
                    private_key_file: Some("/certs/key.pem".into()),
                    refresh_interval: Some(Duration::from_secs(600)),
                }),
                server_features: ServerFeatures {
                    ignore_resource_deletion: true,
                    fail_on_data_errors: false,
                    resource_timer_is_transient_error: false,
                    trusted_xds_server: true,
                },
                api_type: ApiType::Sotw,
            },
            ServerConfig {
                server_uri: "fallback.example:443".into(),
                channel_creds: ChannelCredentials::GoogleDefault,
                server_features: ServerFeatures {
                    ignore_resource_deletion: false,
                    fail_on_data_errors: true,
                    resource_timer_is_transient_error: true,
                    trusted_xds_server: false,
                },
                api_type: ApiType::Sotw,
            },
        ],
        node: NodeConfig {
            id: "projects/1/networks/default/nodes/abc".into(),
            cluster: "cluster-a".into(),
            locality: Some(LocalityConfig {
                region: "us-east1".into(),
                zone: "us-east1-b".into(),
                sub_zone: "rack7".into(),
            }),
            metadata,
        },
        authorities: BTreeMap::from([
            (
                "a.example".to_owned(),
                AuthorityConfig {
                    client_listener_resource_name_template:
                        "xdstp://a.example/envoy.config.listener.v3.Listener/custom/%s".into(),
                    xds_servers: vec![insecure("a1.example:443"), insecure("a2.example:443")],
                },
            ),
            (
                "b.example".to_owned(),
                AuthorityConfig {
                    client_listener_resource_name_template:
                        "xdstp://b.example/envoy.config.listener.v3.Listener/%s".into(),
                    xds_servers: vec![],
                },
            ),
        ]),
        client_default_listener_resource_name_template:
            "xdstp://a.example/envoy.config.listener.v3.Listener/%s".into(),
        server_listener_resource_name_template: Some(
            "grpc/server?xds.resource.listening_address=%s".into(),
        ),
        certificate_providers: BTreeMap::from([
            (
                "bare".into(),
                CertificateProviderConfig::Other {
                    plugin_name: "meshca".into(),
                    config: Map::new(),
                },
            ),
            (
                "default".into(),
                CertificateProviderConfig::FileWatcher(FileWatcherConfig {
                    certificate_file: Some("/c.pem".into()),
                    private_key_file: Some("/k.pem".into()),
                    ca_certificate_file: None,
                    spiffe_trust_bundle_map_file: None,
                    refresh_interval: Duration::from_secs(5),
                }),
            ),
        ]),
    };
    assert_eq!(b, expected);
}

#[test]
fn minimal_bootstrap_gets_defaults() {
    let b = Bootstrap::from_json_str(MINIMAL).unwrap();
    assert_eq!(b.xds_servers, vec![insecure("xds.example:443")]);
    assert_eq!(b.node, NodeConfig::default());
    assert_eq!(b.node.id, "");
    assert_eq!(b.node.cluster, "");
    assert_eq!(b.node.locality, None);
    assert!(b.node.metadata.is_empty());
    assert!(b.authorities.is_empty());
    assert_eq!(b.client_default_listener_resource_name_template, "%s");
    assert_eq!(b.server_listener_resource_name_template, None);
    assert!(b.certificate_providers.is_empty());
    assert_eq!(b.xds_servers[0].server_features, ServerFeatures::default());
}

#[test]
fn node_locality_fields_default_to_empty() {
    let b = parse(with("node", json!({"locality": {"zone": "z"}}))).unwrap();
    assert_eq!(
        b.node.locality,
        Some(LocalityConfig {
            region: String::new(),
            zone: "z".into(),
            sub_zone: String::new()
        })
    );
    let b = parse(with("node", json!({}))).unwrap();
    assert_eq!(b.node, NodeConfig::default());
}

#[test]
fn channel_creds_first_supported_type_wins() {
    let cases = [
        (
            json!([{"type": "insecure"}, {"type": "google_default"}]),
            ChannelCredentials::Insecure,
        ),
        (
            json!([{"type": "google_default"}, {"type": "insecure"}]),
            ChannelCredentials::GoogleDefault,
        ),
        (
            json!([{"type": "foo"}, {"type": "bar", "config": {}}, {"type": "google_default"}]),
            ChannelCredentials::GoogleDefault,
        ),
        (
            json!([{"type": "tls"}, {"type": "insecure"}]),
            ChannelCredentials::Tls(TlsCredentials::default()),
        ),
        (
            json!([{"type": "tls", "config": {}}]),
            ChannelCredentials::Tls(TlsCredentials::default()),
        ),
        (
            json!([{"type": "tls", "config": {"ca_certificate_file": "/ca.pem"}}]),
            ChannelCredentials::Tls(TlsCredentials {
                ca_certificate_file: Some("/ca.pem".into()),
                ..TlsCredentials::default()
            }),
        ),
        (
            json!([{"type": "tls", "config": {"certificate_file": "/c", "private_key_file": "/k", "refresh_interval": "1.5s"}}]),
            ChannelCredentials::Tls(TlsCredentials {
                ca_certificate_file: None,
                certificate_file: Some("/c".into()),
                private_key_file: Some("/k".into()),
                refresh_interval: Some(Duration::from_millis(1500)),
            }),
        ),
        // The config of an entry after the chosen one is not interpreted.
        (
            json!([{"type": "insecure"}, {"type": "tls", "config": {"certificate_file": "/c"}}]),
            ChannelCredentials::Insecure,
        ),
        // Unknown types' configs are not interpreted either.
        (
            json!([{"type": "foo", "config": {"certificate_file": 7}}, {"type": "insecure"}]),
            ChannelCredentials::Insecure,
        ),
    ];
    for (creds, expected) in cases {
        let b = parse(with_creds(creds.clone())).unwrap_or_else(|e| panic!("{creds}: {e}"));
        assert_eq!(b.xds_servers[0].channel_creds, expected, "{creds}");
    }
}

#[test]
fn api_type_chooses_sotw_or_delta_and_anything_else_names_the_field() {
    let server = |api_type: Value| {
        with_server(json!({
            "server_uri": "s", "channel_creds": [{"type": "insecure"}], "api_type": api_type
        }))
    };
    let b = parse(with_creds(json!([{"type": "insecure"}]))).unwrap();
    assert_eq!(b.xds_servers[0].api_type, ApiType::Sotw);
    assert!(!b.xds_servers[0].is_delta());
    let b = parse(server(json!("AGGREGATED_GRPC"))).unwrap();
    assert_eq!(b.xds_servers[0].api_type, ApiType::Sotw);
    let b = parse(server(json!("AGGREGATED_DELTA_GRPC"))).unwrap();
    assert!(b.xds_servers[0].is_delta());
    assert_eq!(
        err(server(json!("DELTA_GRPC"))),
        "xds_servers[0].api_type: unsupported API type \"DELTA_GRPC\": expected \
         \"AGGREGATED_GRPC\" (state of the world) or \"AGGREGATED_DELTA_GRPC\" (delta)"
    );
    assert_eq!(
        err(server(json!(true))),
        "xds_servers[0].api_type: expected string, got boolean"
    );
    // Inside an authority, the path says which list.
    let e = parse(json!({
        "xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}]}],
        "authorities": {"a": {"xds_servers": [
            {"server_uri": "s", "channel_creds": [{"type": "insecure"}], "api_type": 1}
        ]}}
    }))
    .unwrap_err();
    assert_eq!(e.path, "authorities[\"a\"].xds_servers[0].api_type");
    // The variant is part of the server's identity.
    let sotw = parse(server(json!("AGGREGATED_GRPC"))).unwrap().xds_servers[0].clone();
    let delta = parse(server(json!("AGGREGATED_DELTA_GRPC")))
        .unwrap()
        .xds_servers[0]
        .clone();
    assert_ne!(sotw, delta);
}

#[test]
fn server_features_recognised_and_unknown_ignored() {
    let b = parse(with_server(json!({
        "server_uri": "s",
        "channel_creds": [{"type": "insecure"}],
        "server_features": ["xds_v3", "fail_on_data_errors", "", "fail_on_data_errors"]
    })))
    .unwrap();
    assert_eq!(
        b.xds_servers[0].server_features,
        ServerFeatures {
            fail_on_data_errors: true,
            ..ServerFeatures::default()
        }
    );
    let b = parse(with_server(json!({
        "server_uri": "s",
        "channel_creds": [{"type": "insecure"}],
        "server_features": []
    })))
    .unwrap();
    assert_eq!(b.xds_servers[0].server_features, ServerFeatures::default());
}

#[test]
fn authority_defaults_and_empty_server_list() {
    let b = parse(with(
        "authorities",
        json!({"x.test": {"xds_servers": []}, "": {}, "y.test": {"unknown": 1}}),
    ))
    .unwrap();
    assert_eq!(b.authorities.len(), 3);
    assert_eq!(
        b.authorities["x.test"],
        AuthorityConfig {
            client_listener_resource_name_template:
                "xdstp://x.test/envoy.config.listener.v3.Listener/%s".into(),
            xds_servers: vec![],
        }
    );
    assert_eq!(
        b.authorities[""].client_listener_resource_name_template,
        "xdstp:///envoy.config.listener.v3.Listener/%s"
    );
    assert_eq!(
        b.authorities["y.test"].client_listener_resource_name_template,
        "xdstp://y.test/envoy.config.listener.v3.Listener/%s"
    );
}

#[test]
fn authority_template_with_matching_prefix_is_kept() {
    let b = parse(with(
        "authorities",
        json!({"a.example": {"client_listener_resource_name_template": "xdstp://a.example/%s"}}),
    ))
    .unwrap();
    assert_eq!(
        b.authorities["a.example"].client_listener_resource_name_template,
        "xdstp://a.example/%s"
    );
}

#[test]
fn every_error_path_has_an_exact_message() {
    let s = |uri: &str| json!({"server_uri": uri, "channel_creds": [{"type": "insecure"}]});
    let cases: Vec<(Value, &str)> = vec![
        // The document.
        (json!([]), "expected object, got array"),
        (json!(null), "expected object, got null"),
        (json!("x"), "expected object, got string"),
        // xds_servers.
        (json!({}), "xds_servers: missing"),
        (json!({"xds_servers": []}), "xds_servers: must not be empty"),
        (
            json!({"xds_servers": {}}),
            "xds_servers: expected array, got object",
        ),
        (
            json!({"xds_servers": [s("a"), 5]}),
            "xds_servers[1]: expected object, got number",
        ),
        // server_uri.
        (
            json!({"xds_servers": [s("a"), {"channel_creds": [{"type": "insecure"}]}]}),
            "xds_servers[1].server_uri: missing",
        ),
        (
            with_server(json!({"server_uri": "", "channel_creds": [{"type": "insecure"}]})),
            "xds_servers[0].server_uri: must not be empty",
        ),
        (
            with_server(json!({"server_uri": 1, "channel_creds": [{"type": "insecure"}]})),
            "xds_servers[0].server_uri: expected string, got number",
        ),
        // channel_creds.
        (
            with_server(json!({"server_uri": "s"})),
            "xds_servers[0].channel_creds: missing",
        ),
        (
            with_creds(json!([])),
            "xds_servers[0].channel_creds: must not be empty",
        ),
        (
            with_creds(json!({"type": "insecure"})),
            "xds_servers[0].channel_creds: expected array, got object",
        ),
        (
            with_creds(json!(["insecure"])),
            "xds_servers[0].channel_creds[0]: expected object, got string",
        ),
        (
            with_creds(json!([{"config": {}}])),
            "xds_servers[0].channel_creds[0].type: missing",
        ),
        (
            with_creds(json!([{"type": true}])),
            "xds_servers[0].channel_creds[0].type: expected string, got boolean",
        ),
        (
            with_creds(json!([{"type": "insecure"}, {"type": 3}])),
            "xds_servers[0].channel_creds[1].type: expected string, got number",
        ),
        (
            with_creds(json!([{"type": "insecure", "config": []}])),
            "xds_servers[0].channel_creds[0].config: expected object, got array",
        ),
        (
            with_creds(json!([{"type": "foo"}, {"type": "bar"}])),
            r#"xds_servers[0].channel_creds: no supported channel credentials type (saw: "foo", "bar")"#,
        ),
        (
            with_creds(json!([{"type": "we\"ird"}])),
            r#"xds_servers[0].channel_creds: no supported channel credentials type (saw: "we\"ird")"#,
        ),
        // tls config.
        (
            tls_with(json!("x")),
            "xds_servers[0].channel_creds[0].config: expected object, got string",
        ),
        (
            tls_with(json!({"ca_certificate_file": 1})),
            "xds_servers[0].channel_creds[0].config.ca_certificate_file: expected string, got number",
        ),
        (
            tls_with(json!({"ca_certificate_file": ""})),
            "xds_servers[0].channel_creds[0].config.ca_certificate_file: must not be empty",
        ),
        (
            tls_with(json!({"certificate_file": ["/c"], "private_key_file": "/k"})),
            "xds_servers[0].channel_creds[0].config.certificate_file: expected string, got array",
        ),
        (
            tls_with(json!({"certificate_file": "/c", "private_key_file": ""})),
            "xds_servers[0].channel_creds[0].config.private_key_file: must not be empty",
        ),
        (
            tls_with(json!({"certificate_file": "/c"})),
            "xds_servers[0].channel_creds[0].config.private_key_file: must be set when certificate_file is set",
        ),
        (
            tls_with(json!({"private_key_file": "/k", "ca_certificate_file": "/ca"})),
            "xds_servers[0].channel_creds[0].config.certificate_file: must be set when private_key_file is set",
        ),
        (
            tls_with(json!({"refresh_interval": 600})),
            "xds_servers[0].channel_creds[0].config.refresh_interval: expected string, got number",
        ),
        (
            tls_with(json!({"refresh_interval": "10m"})),
            r#"xds_servers[0].channel_creds[0].config.refresh_interval: invalid duration "10m": expected a protobuf JSON duration such as "600s""#,
        ),
        (
            tls_with(json!({"refresh_interval": "-5s"})),
            r#"xds_servers[0].channel_creds[0].config.refresh_interval: invalid duration "-5s": must not be negative"#,
        ),
        (
            tls_with(json!({"refresh_interval": "315576000001s"})),
            r#"xds_servers[0].channel_creds[0].config.refresh_interval: invalid duration "315576000001s": too large"#,
        ),
        (
            with_creds(
                json!([{"type": "foo"}, {"type": "tls", "config": {"certificate_file": "/c"}}]),
            ),
            "xds_servers[0].channel_creds[1].config.private_key_file: must be set when certificate_file is set",
        ),
        // server_features.
        (
            with_server(
                json!({"server_uri": "s", "channel_creds": [{"type": "insecure"}], "server_features": "ignore_resource_deletion"}),
            ),
            "xds_servers[0].server_features: expected array, got string",
        ),
        (
            with_server(
                json!({"server_uri": "s", "channel_creds": [{"type": "insecure"}], "server_features": ["ignore_resource_deletion", {"x": 1}]}),
            ),
            "xds_servers[0].server_features[1]: expected string, got object",
        ),
        // node.
        (
            with("node", json!("n")),
            "node: expected object, got string",
        ),
        (
            with("node", json!({"id": 1})),
            "node.id: expected string, got number",
        ),
        (
            with("node", json!({"cluster": null})),
            "node.cluster: expected string, got null",
        ),
        (
            with("node", json!({"locality": "us"})),
            "node.locality: expected object, got string",
        ),
        (
            with("node", json!({"locality": {"region": 1}})),
            "node.locality.region: expected string, got number",
        ),
        (
            with("node", json!({"locality": {"zone": false}})),
            "node.locality.zone: expected string, got boolean",
        ),
        (
            with("node", json!({"locality": {"sub_zone": []}})),
            "node.locality.sub_zone: expected string, got array",
        ),
        (
            with("node", json!({"metadata": [1]})),
            "node.metadata: expected object, got array",
        ),
        // authorities.
        (
            with("authorities", json!([])),
            "authorities: expected object, got array",
        ),
        (
            with("authorities", json!({"a.example": 1})),
            r#"authorities["a.example"]: expected object, got number"#,
        ),
        (
            with(
                "authorities",
                json!({"a.example": {"client_listener_resource_name_template": 5}}),
            ),
            r#"authorities["a.example"].client_listener_resource_name_template: expected string, got number"#,
        ),
        (
            with(
                "authorities",
                json!({"a.example": {"client_listener_resource_name_template": "xdstp://b.example/%s"}}),
            ),
            r#"authorities["a.example"].client_listener_resource_name_template: must start with "xdstp://a.example/""#,
        ),
        (
            with(
                "authorities",
                json!({"a.example": {"client_listener_resource_name_template": "xdstp://a.example"}}),
            ),
            r#"authorities["a.example"].client_listener_resource_name_template: must start with "xdstp://a.example/""#,
        ),
        (
            with(
                "authorities",
                json!({"a.example": {"client_listener_resource_name_template": "%s"}}),
            ),
            r#"authorities["a.example"].client_listener_resource_name_template: must start with "xdstp://a.example/""#,
        ),
        (
            with("authorities", json!({"a.example": {"xds_servers": "s"}})),
            r#"authorities["a.example"].xds_servers: expected array, got string"#,
        ),
        (
            with(
                "authorities",
                json!({"a.example": {"xds_servers": [s("a"), {"server_uri": "b"}]}}),
            ),
            r#"authorities["a.example"].xds_servers[1].channel_creds: missing"#,
        ),
        (
            with(
                "authorities",
                json!({"a.example": {"xds_servers": [{"server_uri": "b", "channel_creds": [{"type": "x"}]}]}}),
            ),
            r#"authorities["a.example"].xds_servers[0].channel_creds: no supported channel credentials type (saw: "x")"#,
        ),
        (
            with("authorities", json!({"q\"uote": 1})),
            r#"authorities["q\"uote"]: expected object, got number"#,
        ),
        // Templates.
        (
            with("client_default_listener_resource_name_template", json!(1)),
            "client_default_listener_resource_name_template: expected string, got number",
        ),
        (
            with("server_listener_resource_name_template", json!({})),
            "server_listener_resource_name_template: expected string, got object",
        ),
        // certificate_providers.
        (
            with("certificate_providers", json!([])),
            "certificate_providers: expected object, got array",
        ),
        (
            with("certificate_providers", json!({"p": "x"})),
            r#"certificate_providers["p"]: expected object, got string"#,
        ),
        (
            with("certificate_providers", json!({"p": {}})),
            r#"certificate_providers["p"].plugin_name: missing"#,
        ),
        (
            with("certificate_providers", json!({"p": {"plugin_name": ""}})),
            r#"certificate_providers["p"].plugin_name: must not be empty"#,
        ),
        (
            with("certificate_providers", json!({"p": {"plugin_name": 2}})),
            r#"certificate_providers["p"].plugin_name: expected string, got number"#,
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(err(input.clone()), expected, "input: {input}");
    }
}

#[test]
fn error_kinds_are_typed() {
    let e = parse(json!({})).unwrap_err();
    assert_eq!(
        e,
        BootstrapError {
            path: "xds_servers".into(),
            kind: BootstrapErrorKind::Missing
        }
    );
    let e = parse(with_creds(json!([{"type": "foo"}, {"type": "bar"}]))).unwrap_err();
    assert_eq!(
        e,
        BootstrapError {
            path: "xds_servers[0].channel_creds".into(),
            kind: BootstrapErrorKind::NoSupportedChannelCreds {
                seen: vec!["foo".into(), "bar".into()]
            },
        }
    );
    let e = parse(with("node", json!({"id": 1}))).unwrap_err();
    assert_eq!(
        e.kind,
        BootstrapErrorKind::WrongType {
            expected: "string",
            found: "number"
        }
    );
    let dyn_err: &dyn std::error::Error = &e;
    assert_eq!(dyn_err.to_string(), "node.id: expected string, got number");
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let e = Bootstrap::from_json_str("{\n  \"xds_servers\": [\n}").unwrap_err();
    assert_eq!(e.path, "");
    assert_eq!(
        e.kind,
        BootstrapErrorKind::Syntax("expected value at line 3 column 1".into())
    );
    assert_eq!(
        e.to_string(),
        "invalid JSON: expected value at line 3 column 1"
    );

    let e = Bootstrap::from_json_str("").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid JSON: EOF while parsing a value at line 1 column 0"
    );

    let e = Bootstrap::from_json_str(&format!("{MINIMAL} trailing")).unwrap_err();
    assert!(matches!(e.kind, BootstrapErrorKind::Syntax(_)), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("invalid JSON: trailing characters at line 3"),
        "{e}"
    );
}

#[test]
fn proto_durations() {
    let ok = [
        ("600s", Duration::from_secs(600)),
        ("0s", Duration::ZERO),
        ("1.5s", Duration::from_millis(1500)),
        ("1.000s", Duration::from_secs(1)),
        ("0.000000001s", Duration::from_nanos(1)),
        ("3.123456789s", Duration::new(3, 123_456_789)),
        ("315576000000s", Duration::from_secs(315_576_000_000)),
    ];
    for (text, expected) in ok {
        assert_eq!(parse_proto_duration(text), Ok(expected), "{text}");
    }
    let bad = [
        "",
        "s",
        "10",
        "10m",
        "1.s",
        ".5s",
        "1.0000000001s",
        "+1s",
        "1e3s",
        " 1s",
        "1s ",
        "1.5.5s",
        "١s",
        "99999999999999999999999s",
    ];
    for text in bad {
        let e = parse_proto_duration(text).unwrap_err();
        assert!(e.starts_with("invalid duration"), "{text}: {e}");
    }
    assert_eq!(
        parse_proto_duration("-0.5s"),
        Err(r#"invalid duration "-0.5s": must not be negative"#.into())
    );
    assert_eq!(
        parse_proto_duration("-10m"),
        Err(r#"invalid duration "-10m": expected a protobuf JSON duration such as "600s""#.into())
    );
    assert_eq!(
        parse_proto_duration("--1s"),
        Err(r#"invalid duration "--1s": expected a protobuf JSON duration such as "600s""#.into())
    );
    let many_dashes = format!("{}1s", "-".repeat(1_000_000));
    assert!(parse_proto_duration(&many_dashes).is_err());
    assert_eq!(
        parse_proto_duration("-315576000001s"),
        Err(r#"invalid duration "-315576000001s": too large"#.into())
    );
    assert_eq!(
        parse_proto_duration("99999999999999999999999s"),
        Err(r#"invalid duration "99999999999999999999999s": expected a protobuf JSON duration such as "600s""#.into())
    );
}

// -- from_env_with / from_file_with --------------------------------------

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

fn no_files(path: &str) -> io::Result<String> {
    panic!("unexpected read of {path}")
}

#[test]
fn from_env_reads_the_file_named_by_grpc_xds_bootstrap() {
    let reads = RefCell::new(Vec::new());
    let b = Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP", "/etc/xds.json")]), |p| {
        reads.borrow_mut().push(p.to_owned());
        Ok(MINIMAL.to_owned())
    })
    .unwrap();
    assert_eq!(reads.into_inner(), vec!["/etc/xds.json".to_owned()]);
    assert_eq!(b.xds_servers, vec![insecure("xds.example:443")]);
}

#[test]
fn from_env_uses_grpc_xds_bootstrap_config() {
    let b =
        Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP_CONFIG", MINIMAL)]), no_files).unwrap();
    assert_eq!(b.xds_servers, vec![insecure("xds.example:443")]);
}

#[test]
fn from_env_file_variable_takes_precedence() {
    let other = r#"{"xds_servers": [{"server_uri": "from-file", "channel_creds": [{"type": "insecure"}]}]}"#;
    let vars = [
        ("GRPC_XDS_BOOTSTRAP_CONFIG", MINIMAL),
        ("GRPC_XDS_BOOTSTRAP", "/f.json"),
    ];
    let b = Bootstrap::from_env_with(env(&vars), |_| Ok(other.to_owned())).unwrap();
    assert_eq!(b.xds_servers, vec![insecure("from-file")]);

    // Precedence holds even when the file cannot be read: no silent fallback.
    let e = Bootstrap::from_env_with(env(&vars), |_| {
        Err(io::Error::new(io::ErrorKind::NotFound, "no such file"))
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "/f.json: cannot read bootstrap file: no such file"
    );
}

#[test]
fn from_env_empty_variables_count_as_unset() {
    let vars = [
        ("GRPC_XDS_BOOTSTRAP", ""),
        ("GRPC_XDS_BOOTSTRAP_CONFIG", MINIMAL),
    ];
    let b = Bootstrap::from_env_with(env(&vars), no_files).unwrap();
    assert_eq!(b.xds_servers, vec![insecure("xds.example:443")]);

    let vars = [
        ("GRPC_XDS_BOOTSTRAP", ""),
        ("GRPC_XDS_BOOTSTRAP_CONFIG", ""),
    ];
    let e = Bootstrap::from_env_with(env(&vars), no_files).unwrap_err();
    assert_eq!(e.kind, BootstrapErrorKind::NotConfigured);
}

#[test]
fn from_env_neither_variable_set() {
    let e = Bootstrap::from_env_with(env(&[("UNRELATED", "x")]), no_files).unwrap_err();
    assert_eq!(
        e,
        BootstrapError {
            path: String::new(),
            kind: BootstrapErrorKind::NotConfigured
        }
    );
    assert_eq!(
        e.to_string(),
        "xDS bootstrap not configured: neither GRPC_XDS_BOOTSTRAP nor GRPC_XDS_BOOTSTRAP_CONFIG is set"
    );
}

#[test]
fn from_env_file_read_error() {
    let e = Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP", "/missing.json")]), |_| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "permission denied",
        ))
    })
    .unwrap_err();
    assert_eq!(
        e,
        BootstrapError {
            path: "/missing.json".into(),
            kind: BootstrapErrorKind::Io("permission denied".into()),
        }
    );
    assert_eq!(
        e.to_string(),
        "/missing.json: cannot read bootstrap file: permission denied"
    );
}

#[test]
fn from_env_propagates_content_errors() {
    let e = Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP_CONFIG", "{}")]), no_files)
        .unwrap_err();
    assert_eq!(e.to_string(), "xds_servers: missing");
    let e = Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP", "/b.json")]), |_| {
        Ok("{\"xds_servers\": 1}".to_owned())
    })
    .unwrap_err();
    assert_eq!(e.to_string(), "xds_servers: expected array, got number");
}

#[test]
fn from_file_with_reads_the_given_path() {
    let b = Bootstrap::from_file_with("/x/bootstrap.json", |p| {
        assert_eq!(p, "/x/bootstrap.json");
        Ok(MINIMAL.to_owned())
    })
    .unwrap();
    assert_eq!(b, Bootstrap::from_json_str(MINIMAL).unwrap());
    let e = Bootstrap::from_file_with("/x/b.json", |_| Ok("not json".to_owned())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid JSON: expected ident at line 1 column 2"
    );
}

// -- servers_for_authority -------------------------------------------------

#[test]
fn servers_for_authority_cases() {
    let b = parse(json!({
        "xds_servers": [
            {"server_uri": "top1", "channel_creds": [{"type": "insecure"}]},
            {"server_uri": "top2", "channel_creds": [{"type": "insecure"}]}
        ],
        "authorities": {
            "own.example": {"xds_servers": [
                {"server_uri": "own1", "channel_creds": [{"type": "insecure"}]},
                {"server_uri": "own2", "channel_creds": [{"type": "insecure"}]}
            ]},
            "empty.example": {"xds_servers": []},
            "absent.example": {}
        }
    }))
    .unwrap();
    let top = vec![insecure("top1"), insecure("top2")];
    assert_eq!(b.servers_for_authority(None).unwrap(), top.as_slice());
    assert_eq!(
        b.servers_for_authority(Some("own.example")).unwrap(),
        [insecure("own1"), insecure("own2")].as_slice()
    );
    assert_eq!(
        b.servers_for_authority(Some("empty.example")).unwrap(),
        top.as_slice()
    );
    assert_eq!(
        b.servers_for_authority(Some("absent.example")).unwrap(),
        top.as_slice()
    );

    let e = b.servers_for_authority(Some("nope.example")).unwrap_err();
    assert_eq!(
        e,
        BootstrapError {
            path: r#"authorities["nope.example"]"#.into(),
            kind: BootstrapErrorKind::UnknownAuthority,
        }
    );
    assert_eq!(
        e.to_string(),
        r#"authorities["nope.example"]: unknown authority"#
    );
    // The empty authority is only known if configured.
    assert_eq!(
        b.servers_for_authority(Some("")).unwrap_err().to_string(),
        r#"authorities[""]: unknown authority"#
    );
}

// -- Node ----------------------------------------------------------------

fn pv(kind: pbuf::value::Kind) -> pbuf::Value {
    pbuf::Value { kind: Some(kind) }
}

#[test]
fn node_to_proto_full() {
    use pbuf::value::Kind;
    let b = parse(with(
        "node",
        json!({
            "id": "node-1",
            "cluster": "cl",
            "locality": {"region": "r", "zone": "z", "sub_zone": "s"},
            "metadata": {
                "str": "v",
                "int": 42,
                "neg": -7,
                "float": 0.25,
                "bool": true,
                "null": null,
                "list": [1, "a", [false], {"k": null}],
                "nested": {"inner": {"deep": "x"}, "empty": {}}
            }
        }),
    ))
    .unwrap();
    let node = b.node.to_proto("grpc-rust-xds", "0.1.0");

    assert_eq!(node.id, "node-1");
    assert_eq!(node.cluster, "cl");
    assert_eq!(
        node.locality,
        Some(core_pb::Locality {
            region: "r".into(),
            zone: "z".into(),
            sub_zone: "s".into()
        })
    );
    assert_eq!(node.user_agent_name, "grpc-rust-xds");
    assert_eq!(
        node.user_agent_version_type,
        Some(core_pb::node::UserAgentVersionType::UserAgentVersion(
            "0.1.0".into()
        ))
    );
    assert_eq!(
        node.client_features,
        vec![
            "envoy.lb.does_not_support_overprovisioning".to_owned(),
            "xds.config.resource-in-sotw".to_owned()
        ]
    );
    assert!(node.extensions.is_empty());
    assert!(node.dynamic_parameters.is_empty());

    let fields = node.metadata.unwrap().fields;
    assert_eq!(fields.len(), 8);
    assert_eq!(fields["str"], pv(Kind::StringValue("v".into())));
    assert_eq!(fields["int"], pv(Kind::NumberValue(42.0)));
    assert_eq!(fields["neg"], pv(Kind::NumberValue(-7.0)));
    assert_eq!(fields["float"], pv(Kind::NumberValue(0.25)));
    assert_eq!(fields["bool"], pv(Kind::BoolValue(true)));
    assert_eq!(fields["null"], pv(Kind::NullValue(0)));
    assert_eq!(
        fields["list"],
        pv(Kind::ListValue(pbuf::ListValue {
            values: vec![
                pv(Kind::NumberValue(1.0)),
                pv(Kind::StringValue("a".into())),
                pv(Kind::ListValue(pbuf::ListValue {
                    values: vec![pv(Kind::BoolValue(false))]
                })),
                pv(Kind::StructValue(pbuf::Struct {
                    fields: [("k".to_owned(), pv(Kind::NullValue(0)))]
                        .into_iter()
                        .collect(),
                })),
            ],
        }))
    );
    let deep = pbuf::Struct {
        fields: [("deep".to_owned(), pv(Kind::StringValue("x".into())))]
            .into_iter()
            .collect(),
    };
    assert_eq!(
        fields["nested"],
        pv(Kind::StructValue(pbuf::Struct {
            fields: [
                ("inner".to_owned(), pv(Kind::StructValue(deep))),
                (
                    "empty".to_owned(),
                    pv(Kind::StructValue(pbuf::Struct::default()))
                ),
            ]
            .into_iter()
            .collect(),
        }))
    );
}

#[test]
fn node_to_proto_minimal() {
    let node = NodeConfig::default().to_proto("ua", "v9");
    assert_eq!(node.id, "");
    assert_eq!(node.cluster, "");
    assert_eq!(node.metadata, None);
    assert_eq!(node.locality, None);
    assert_eq!(node.user_agent_name, "ua");
    assert_eq!(
        node.user_agent_version_type,
        Some(core_pb::node::UserAgentVersionType::UserAgentVersion(
            "v9".into()
        ))
    );
    assert_eq!(node.client_features.len(), 2);

    // A present but empty locality is still sent.
    let cfg = NodeConfig {
        locality: Some(LocalityConfig::default()),
        ..NodeConfig::default()
    };
    assert_eq!(
        cfg.to_proto("ua", "v").locality,
        Some(core_pb::Locality::default())
    );
}

#[test]
fn node_to_proto_encodes() {
    use prost::Message;
    let b = parse(with(
        "node",
        json!({"id": "n", "metadata": {"a": {"b": [1, null]}}}),
    ))
    .unwrap();
    let node = b.node.to_proto("ua", "1");
    let bytes = node.encode_to_vec();
    assert_eq!(core_pb::Node::decode(bytes.as_slice()).unwrap(), node);
}

// -- No panics -------------------------------------------------------------

#[test]
fn truncated_documents_never_panic() {
    let full = json!({
        "xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "tls", "config": {"refresh_interval": "1.5s"}}], "server_features": ["x"]}],
        "node": {"id": "i", "locality": {"zone": "z"}, "metadata": {"a": [1, {"b": null}]}},
        "authorities": {"a": {"client_listener_resource_name_template": "xdstp://a/%s", "xds_servers": []}},
        "certificate_providers": {"p": {"plugin_name": "x", "config": {"k": 1}}}
    })
    .to_string();
    assert!(Bootstrap::from_json_str(&full).is_ok());
    for end in 0..full.len() {
        if full.is_char_boundary(end) {
            assert!(
                Bootstrap::from_json_str(&full[..end]).is_err(),
                "prefix of length {end}"
            );
        }
    }
}

#[test]
fn deeply_nested_input_is_an_error_not_a_crash() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let e = Bootstrap::from_json_str(&deep).unwrap_err();
    assert!(matches!(e.kind, BootstrapErrorKind::Syntax(_)), "{e:?}");
}

quickcheck::quickcheck! {
    fn arbitrary_text_never_panics(text: String) -> bool {
        let _ = Bootstrap::from_json_str(&text);
        true
    }

    fn arbitrary_durations_never_panic(text: String) -> bool {
        let _ = parse_proto_duration(&text);
        true
    }

    fn servers_for_any_authority_never_panics(name: String) -> bool {
        let b = Bootstrap::from_json_str(MINIMAL).unwrap();
        b.servers_for_authority(Some(&name)).is_err()
    }
}

/// `server_uri` is a gRPC target the transport can dial: `host:port`, `[v6]:port`,
/// `dns:///host:port`, `dns:host:port`, or a bare host (port 443).
#[test]
fn server_uris_are_grpc_targets() {
    let target = |host: &str, port| ServerTarget {
        host: host.into(),
        port,
    };
    let accepted = [
        ("127.0.0.1:18000", target("127.0.0.1", 18000)),
        ("xds.example:443", target("xds.example", 443)),
        ("xds.example", target("xds.example", 443)),
        ("dns:///xds.example:8443", target("xds.example", 8443)),
        ("dns:xds.example:8443", target("xds.example", 8443)),
        ("[::1]:18000", target("::1", 18000)),
        ("[::1]", target("::1", 443)),
        ("dns:///[2001:db8::1]:80", target("2001:db8::1", 80)),
        ("my_host-1.internal:1", target("my_host-1.internal", 1)),
    ];
    for (uri, expected) in accepted {
        assert_eq!(ServerTarget::parse(uri), Ok(expected), "{uri}");
        let b = parse(with_server(
            json!({"server_uri": uri, "channel_creds": [{"type": "insecure"}]}),
        ))
        .unwrap_or_else(|e| panic!("{uri}: {e}"));
        assert_eq!(b.xds_servers[0].server_uri, uri, "kept as written");
    }
}

#[test]
fn a_server_uri_the_transport_cannot_dial_is_a_bootstrap_error() {
    let s = |uri: &str| json!({"server_uri": uri, "channel_creds": [{"type": "insecure"}]});
    let cases = [
        (
            "http://127.0.0.1:18000",
            r#"xds_servers[0].server_uri: unsupported scheme "http" in "http://127.0.0.1:18000": a server URI is a gRPC target such as host:port or dns:///host:port"#,
        ),
        (
            "https://xds.example",
            r#"xds_servers[0].server_uri: unsupported scheme "https" in "https://xds.example": a server URI is a gRPC target such as host:port or dns:///host:port"#,
        ),
        (
            "unix:///tmp/xds.sock",
            r#"xds_servers[0].server_uri: unsupported scheme "unix" in "unix:///tmp/xds.sock": a server URI is a gRPC target such as host:port or dns:///host:port"#,
        ),
        (
            "dns://8.8.8.8/xds.example:443",
            r#"xds_servers[0].server_uri: a DNS authority ("8.8.8.8") is not supported in "dns://8.8.8.8/xds.example:443""#,
        ),
        (
            ":18000",
            r#"xds_servers[0].server_uri: empty host in ":18000""#,
        ),
        (
            "dns:///:443",
            r#"xds_servers[0].server_uri: empty host in "dns:///:443""#,
        ),
        (
            "xds.example:http",
            r#"xds_servers[0].server_uri: invalid port "http" in "xds.example:http": expected a number from 1 to 65535"#,
        ),
        (
            "xds.example:70000",
            r#"xds_servers[0].server_uri: invalid port "70000" in "xds.example:70000": expected a number from 1 to 65535"#,
        ),
        (
            "xds.example:0",
            r#"xds_servers[0].server_uri: invalid port "0" in "xds.example:0": expected a number from 1 to 65535"#,
        ),
        (
            "xds.example:",
            r#"xds_servers[0].server_uri: invalid port "" in "xds.example:": expected a number from 1 to 65535"#,
        ),
        (
            "xds example:443",
            r#"xds_servers[0].server_uri: invalid host "xds example" in "xds example:443""#,
        ),
        (
            "[::1:18000",
            r#"xds_servers[0].server_uri: unclosed "[" in "[::1:18000""#,
        ),
        (
            "[not-v6]:80",
            r#"xds_servers[0].server_uri: invalid IPv6 address "not-v6" in "[not-v6]:80""#,
        ),
        (
            "[::1]x",
            r#"xds_servers[0].server_uri: expected ":port" after "]" in "[::1]x""#,
        ),
        (
            "::1",
            r#"xds_servers[0].server_uri: invalid host ":" in "::1""#,
        ),
    ];
    for (uri, expected) in cases {
        assert_eq!(err(with_server(s(uri))), expected, "{uri}");
    }
    // In an authority's list too, with its path.
    let authority = with(
        "authorities",
        json!({"a.example": {"xds_servers": [s("ok:1"), s("http://x:1")]}}),
    );
    assert!(err(authority).starts_with(
        r#"authorities["a.example"].xds_servers[1].server_uri: unsupported scheme "http""#
    ),);
    let e = parse(with_server(s("http://x:1"))).unwrap_err();
    assert_eq!(e.path, "xds_servers[0].server_uri");
    assert!(matches!(e.kind, BootstrapErrorKind::Invalid(_)));
}

#[test]
fn a_certificate_provider_config_must_be_an_object() {
    let provider = |config: Value| {
        with(
            "certificate_providers",
            json!({"p": {"plugin_name": "file_watcher", "config": config}}),
        )
    };
    assert_eq!(
        err(provider(json!("/etc/certs"))),
        r#"certificate_providers["p"].config: expected object, got string"#
    );
    assert_eq!(
        err(provider(json!([1]))),
        r#"certificate_providers["p"].config: expected object, got array"#
    );
    let b = parse(provider(json!({"ca_certificate_file": "/ca.pem"}))).unwrap();
    assert_eq!(
        b.certificate_providers["p"].to_json(),
        json!({"plugin_name": "file_watcher",
               "config": {"ca_certificate_file": "/ca.pem", "refresh_interval": "600s"}})
    );
}

mod certificate_providers;
