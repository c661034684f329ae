//! Compiles the vendored Envoy/xDS `.proto` files (see `proto/README.md`) into prost
//! types with protox, so the build needs neither `protoc` nor network.

const ROOTS: &[&str] = &[
    "envoy/service/discovery/v3/discovery.proto",
    "envoy/service/status/v3/csds.proto",
    "envoy/config/listener/v3/listener.proto",
    "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto",
    "envoy/extensions/filters/http/router/v3/router.proto",
    "envoy/config/route/v3/route.proto",
    "envoy/config/cluster/v3/cluster.proto",
    "envoy/config/endpoint/v3/endpoint.proto",
    "envoy/extensions/clusters/aggregate/v3/cluster.proto",
    "envoy/extensions/transport_sockets/tls/v3/tls.proto",
    "envoy/extensions/load_balancing_policies/round_robin/v3/round_robin.proto",
    "envoy/extensions/load_balancing_policies/ring_hash/v3/ring_hash.proto",
    "envoy/extensions/load_balancing_policies/least_request/v3/least_request.proto",
    "envoy/extensions/load_balancing_policies/wrr_locality/v3/wrr_locality.proto",
    "envoy/extensions/load_balancing_policies/client_side_weighted_round_robin/v3/client_side_weighted_round_robin.proto",
    "envoy/extensions/load_balancing_policies/pick_first/v3/pick_first.proto",
    "google/rpc/status.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(ROOTS, ["proto"])?;
    prost_build::Config::new()
        .bytes(["."])
        .compile_well_known_types()
        // Envoy's proto comments hold RST and snippets that rustdoc would run as doctests.
        .disable_comments(["."])
        .include_file("_includes.rs")
        .compile_fds(descriptors)?;
    Ok(())
}
