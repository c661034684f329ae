//! Generates the grpc.testing and grpc.health.v1 services (clients and servers) from
//! `proto/`, compiled by protox: the build needs neither `protoc` nor network.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(
        ["grpc/testing/test.proto", "grpc/health/v1/health.proto"],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
