//! Generates the echo service's tonic client from `proto/echo.proto`, as a tonic user's
//! build script does, except that protox compiles the `.proto` file where tonic's
//! default would run `protoc`: the build needs neither `protoc` nor network.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["echo.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}
