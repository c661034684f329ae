//! A29 through the client: the client decodes CDS and LDS with its bootstrap, so a
//! security config naming a certificate provider instance the bootstrap defines is
//! accepted, and one naming an instance it lacks is NACKed with the field named, over
//! state-of-the-world and delta streams alike.

use xds_proto_core::resource::ListenerKind;
use xds_proto_core::security::RootCertificates;
use xds_proto_core::{Cds, Lds};
use xds_proto_tests::fixtures::{mtls_cluster, mtls_server_listener};
use xds_proto_tests::{
    CDS, DELTA_BOOTSTRAP, DeltaReq, Harness, LDS, ONE_SERVER_BOOTSTRAP, Req, ambient_error,
    changed_error, delta_response, value_of,
};

/// `base` with the certificate provider instance `mesh` (a `file_watcher`).
fn with_mesh_provider(base: &str) -> String {
    let entry = xds_proto_tests::fixtures::file_watcher_provider_json(
        Some("/certs/cert.pem"),
        Some("/certs/key.pem"),
        Some("/certs/ca.pem"),
        std::time::Duration::from_secs(600),
    );
    base.replacen(
        r#""node""#,
        &format!(r#""certificate_providers": {{"mesh": {entry}}}, "node""#),
        1,
    )
}

#[test]
fn a_cluster_naming_a_bootstrap_instance_is_acked_and_one_naming_another_is_nacked() {
    let mut h = Harness::with_bootstrap(&with_mesh_provider(ONE_SERVER_BOOTSTRAP), |_| {});
    let good = h.watch::<Cds>("good");
    let s = h.connect_first(CDS, &["good"]);
    let bad = h.watch::<Cds>("bad");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["bad", "good"], "", ""));
    h.sent(s);
    h.respond(
        s,
        CDS,
        "1",
        "n1",
        vec![
            mtls_cluster("good", "mesh", &["spiffe://td/server"]),
            mtls_cluster("bad", "nope", &[]),
        ],
    );
    let n = h.expect_notify();
    assert_eq!(n.watcher, good);
    let tls = value_of(&n).get::<Cds>().unwrap().tls.clone().expect("TLS");
    assert!(matches!(tls.roots, RootCertificates::Provider(p) if &*p.instance_name == "mesh"));
    let n = h.expect_notify();
    assert_eq!(n.watcher, bad);
    let e = changed_error(&n);
    assert!(e.status.message.contains("nope"), "{}", e.status.message);
    let detail = h.expect_request(s).error.expect("a NACK");
    assert!(
        detail.starts_with(
            "resource index 1: bad: transport_socket.typed_config.value.common_tls_context.\
             tls_certificate_provider_instance.instance_name: unrecognized certificate \
             provider instance name \"nope\""
        ),
        "{detail}"
    );
    assert!(!detail.contains("good"), "{detail}");
}

#[test]
fn without_the_instance_in_the_bootstrap_even_a_valid_tls_cluster_is_nacked() {
    let mut h = Harness::new();
    let w = h.watch::<Cds>("c");
    let s = h.connect_first(CDS, &["c"]);
    h.respond(s, CDS, "1", "n1", vec![mtls_cluster("c", "mesh", &[])]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    changed_error(&n);
    let detail = h.expect_request(s).error.expect("a NACK");
    assert!(detail.contains("\"mesh\""), "{detail}");
}

#[test]
fn a_server_listener_is_checked_against_the_bootstrap_too() {
    let mut h = Harness::with_bootstrap(&with_mesh_provider(ONE_SERVER_BOOTSTRAP), |_| {});
    let w = h.watch::<Lds>("l");
    let s = h.connect_first(LDS, &["l"]);
    h.respond(
        s,
        LDS,
        "1",
        "n1",
        vec![mtls_server_listener("l", "0.0.0.0", 443, "mesh")],
    );
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    let ListenerKind::Server(xds_proto_core::resource::ServerListener { filter_chains, .. }) =
        &value_of(&n).get::<Lds>().unwrap().kind
    else {
        panic!("a server listener")
    };
    assert!(
        filter_chains[0]
            .tls
            .as_ref()
            .unwrap()
            .require_client_certificate
    );
    assert_eq!(h.expect_request(s), Req::new(LDS, &["l"], "1", "n1"));
    h.sent(s);
    h.respond(
        s,
        LDS,
        "2",
        "n2",
        vec![mtls_server_listener("l", "0.0.0.0", 443, "nope")],
    );
    let n = h.expect_notify();
    assert!(ambient_error(&n).status.message.contains("nope"));
    let detail = h.expect_request(s).error.expect("a NACK");
    assert!(
        detail.contains(
            "filter_chains[0].transport_socket.typed_config.value.common_tls_context.\
             tls_certificate_provider_instance.instance_name"
        ),
        "{detail}"
    );
}

#[test]
fn delta_streams_decode_with_the_bootstrap() {
    let mut h = Harness::with_bootstrap(&with_mesh_provider(DELTA_BOOTSTRAP), |_| {});
    let good = h.watch::<Cds>("good");
    let bad = h.watch::<Cds>("bad");
    let s = h.connect_first_delta(CDS, &["good"]);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["bad"])
    );
    h.sent(s);
    h.respond_delta(
        s,
        delta_response(
            CDS,
            "n1",
            vec![
                ("good", "v1", mtls_cluster("good", "mesh", &[])),
                ("bad", "v1", mtls_cluster("bad", "nope", &[])),
            ],
            &[],
        ),
    );
    let n = h.expect_notify();
    assert_eq!(n.watcher, good);
    value_of(&n);
    let n = h.expect_notify();
    assert_eq!(n.watcher, bad);
    assert!(changed_error(&n).status.message.contains("nope"));
    let req = h.expect_delta_request(s);
    let detail = req.error.expect("a NACK");
    assert!(
        detail.contains("unrecognized certificate provider instance name"),
        "{detail}"
    );
}
