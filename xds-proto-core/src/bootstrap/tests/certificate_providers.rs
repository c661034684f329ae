//! Tests of `certificate_providers`: the `file_watcher` config (A29, A65's defaults,
//! A87's bundle map), every validation rule with its message, unknown plugins.

use super::*;

/// A bootstrap whose one provider `p` is a `file_watcher` with this config.
fn file_watcher(config: Value) -> Value {
    with(
        "certificate_providers",
        json!({"p": {"plugin_name": "file_watcher", "config": config}}),
    )
}

fn watcher_config(config: Value) -> FileWatcherConfig {
    let b = parse(file_watcher(config)).expect("a valid file_watcher config");
    b.certificate_providers["p"]
        .file_watcher()
        .expect("a file_watcher")
        .clone()
}

#[test]
fn file_watcher_reads_every_field() {
    let c = watcher_config(json!({
        "certificate_file": "/certs/cert.pem",
        "private_key_file": "/certs/key.pem",
        "ca_certificate_file": "/certs/ca.pem",
        "spiffe_trust_bundle_map_file": "/certs/bundles.json",
        "refresh_interval": "60s",
        "some_future_field": 1
    }));
    assert_eq!(
        c,
        FileWatcherConfig {
            certificate_file: Some("/certs/cert.pem".into()),
            private_key_file: Some("/certs/key.pem".into()),
            ca_certificate_file: Some("/certs/ca.pem".into()),
            spiffe_trust_bundle_map_file: Some("/certs/bundles.json".into()),
            refresh_interval: Duration::from_secs(60),
        }
    );
    assert_eq!(
        c.identity_files(),
        Some(("/certs/cert.pem", "/certs/key.pem"))
    );
    // A87: with a bundle map, the CA file is ignored.
    assert_eq!(
        c.roots_file(),
        Some(RootsFile::SpiffeBundleMap("/certs/bundles.json"))
    );
}

#[test]
fn file_watcher_accepts_each_minimal_combination() {
    let ca = watcher_config(json!({"ca_certificate_file": "/ca.pem"}));
    assert_eq!(ca.refresh_interval, DEFAULT_REFRESH_INTERVAL);
    assert_eq!(ca.identity_files(), None);
    assert_eq!(ca.roots_file(), Some(RootsFile::CaCertificates("/ca.pem")));

    let identity = watcher_config(json!({"certificate_file": "/c", "private_key_file": "/k"}));
    assert_eq!(identity.identity_files(), Some(("/c", "/k")));
    assert_eq!(identity.roots_file(), None);

    let spiffe = watcher_config(json!({"spiffe_trust_bundle_map_file": "/b.json"}));
    assert_eq!(
        spiffe.roots_file(),
        Some(RootsFile::SpiffeBundleMap("/b.json"))
    );
}

#[test]
fn file_watcher_refresh_interval_is_a_proto_duration_of_at_least_a_second() {
    let interval = |text: &str| {
        watcher_config(json!({"ca_certificate_file": "/ca", "refresh_interval": text}))
            .refresh_interval
    };
    assert_eq!(interval("1.5s"), Duration::from_millis(1500));
    assert_eq!(interval("900s"), Duration::from_secs(900));
    // Raised to the minimum, as C-core does: "0s" must not spin a reload loop.
    assert_eq!(interval("0s"), MIN_REFRESH_INTERVAL);
    assert_eq!(interval("0.25s"), MIN_REFRESH_INTERVAL);
}

#[test]
fn file_watcher_errors_name_the_field() {
    let cases = [
        (
            json!({"certificate_file": "/c"}),
            r#"certificate_providers["p"].config.private_key_file: must be set when certificate_file is set"#,
        ),
        (
            json!({"private_key_file": "/k", "ca_certificate_file": "/ca"}),
            r#"certificate_providers["p"].config.certificate_file: must be set when private_key_file is set"#,
        ),
        (
            json!({}),
            r#"certificate_providers["p"].config: at least one of certificate_file, ca_certificate_file and spiffe_trust_bundle_map_file must be set"#,
        ),
        (
            json!({"refresh_interval": "5s"}),
            r#"certificate_providers["p"].config: at least one of certificate_file, ca_certificate_file and spiffe_trust_bundle_map_file must be set"#,
        ),
        (
            json!({"ca_certificate_file": ""}),
            r#"certificate_providers["p"].config.ca_certificate_file: must not be empty"#,
        ),
        (
            json!({"certificate_file": 1, "private_key_file": "/k"}),
            r#"certificate_providers["p"].config.certificate_file: expected string, got number"#,
        ),
        (
            json!({"spiffe_trust_bundle_map_file": ["/b"]}),
            r#"certificate_providers["p"].config.spiffe_trust_bundle_map_file: expected string, got array"#,
        ),
        (
            json!({"ca_certificate_file": "/ca", "refresh_interval": "10m"}),
            r#"certificate_providers["p"].config.refresh_interval: invalid duration "10m": expected a protobuf JSON duration such as "600s""#,
        ),
        (
            json!({"ca_certificate_file": "/ca", "refresh_interval": "-1s"}),
            r#"certificate_providers["p"].config.refresh_interval: invalid duration "-1s": must not be negative"#,
        ),
        (
            json!({"ca_certificate_file": "/ca", "refresh_interval": 60}),
            r#"certificate_providers["p"].config.refresh_interval: expected string, got number"#,
        ),
    ];
    for (config, expected) in cases {
        assert_eq!(
            err(file_watcher(config.clone())),
            expected,
            "config: {config}"
        );
    }
    // Without `config` at all, a file_watcher names no file.
    assert_eq!(
        err(with(
            "certificate_providers",
            json!({"p": {"plugin_name": "file_watcher"}})
        )),
        r#"certificate_providers["p"].config: at least one of certificate_file, ca_certificate_file and spiffe_trust_bundle_map_file must be set"#
    );
}

#[test]
fn unknown_plugins_are_kept_and_refused_by_the_adapters_check() {
    let b = parse(with(
        "certificate_providers",
        json!({
            "files": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": "/ca"}},
            "sds": {"plugin_name": "example_sds", "config": {"socket": "/run/sds"}},
        }),
    ))
    .unwrap();
    let sds = &b.certificate_providers["sds"];
    assert_eq!(sds.plugin_name(), "example_sds");
    assert_eq!(sds.file_watcher(), None);
    assert_eq!(
        sds.to_json(),
        json!({"plugin_name": "example_sds", "config": {"socket": "/run/sds"}})
    );
    assert_eq!(
        b.check_certificate_provider_plugins(&[FILE_WATCHER_PLUGIN])
            .unwrap_err()
            .to_string(),
        r#"certificate_providers["sds"].plugin_name: unrecognized plugin name "example_sds" (supported: "file_watcher")"#
    );
    assert_eq!(
        b.check_certificate_provider_plugins(&[FILE_WATCHER_PLUGIN, "example_sds"]),
        Ok(())
    );
}

#[test]
fn a_file_watcher_round_trips_through_its_json() {
    for config in [
        json!({"ca_certificate_file": "/ca"}),
        json!({"certificate_file": "/c", "private_key_file": "/k", "refresh_interval": "2.5s"}),
        json!({"spiffe_trust_bundle_map_file": "/b", "ca_certificate_file": "/ca",
               "refresh_interval": "0.000000001s"}),
    ] {
        let parsed = watcher_config(config);
        assert_eq!(watcher_config(parsed.to_json()), parsed);
    }
}

#[test]
fn tls_channel_credentials_map_onto_a_file_watcher() {
    let creds = TlsCredentials {
        ca_certificate_file: Some("/ca".into()),
        certificate_file: Some("/c".into()),
        private_key_file: Some("/k".into()),
        refresh_interval: None,
    };
    let c = FileWatcherConfig::from_tls_credentials(&creds);
    assert_eq!(c.identity_files(), Some(("/c", "/k")));
    assert_eq!(c.roots_file(), Some(RootsFile::CaCertificates("/ca")));
    assert_eq!(c.refresh_interval, DEFAULT_REFRESH_INTERVAL);
    let fast = TlsCredentials {
        refresh_interval: Some(Duration::ZERO),
        ..creds
    };
    assert_eq!(
        FileWatcherConfig::from_tls_credentials(&fast).refresh_interval,
        MIN_REFRESH_INTERVAL
    );
}
