//! Compiles the vendored Envoy/xDS `.proto` files listed in `proto/ROOTS` (see
//! `proto/README.md`) into prost types with protox, so the build needs neither
//! `protoc` nor network.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let listing = std::fs::read_to_string("proto/ROOTS")?;
    let roots: Vec<&str> = listing
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let descriptors = protox::compile(roots, ["proto"])?;
    prost_build::Config::new()
        .bytes(["."])
        .compile_well_known_types()
        // A `RouteAction` is some 1,600 bytes: inline in `Route`'s oneof, decoding a
        // route moved it three times (a route configuration of 10,000 routes, tens of
        // megabytes). Boxed, it is allocated once and never moved.
        .boxed(".envoy.config.route.v3.Route.action.route")
        // ORCA reports come from backends: their maps decode into ordered maps, so
        // that the core keeps no map seeded from OS randomness (std's HashMap).
        .btree_map([".xds.data.orca.v3"])
        // Envoy's proto comments hold RST and snippets that rustdoc would run as doctests.
        .disable_comments(["."])
        .include_file("_includes.rs")
        .compile_fds(descriptors)?;
    Ok(())
}
