//! Support code for the integration tests: the deterministic simulator ([`sim`]), and
//! the testing kit's scripted ADS peer and resource builders (`xds-proto-testing`)
//! under the names the tests use: the peer at the crate root, the builders as
//! [`fixtures`] and [`fixtures_routes`].

pub mod sim;

pub use xds_proto_testing::peer::*;

/// The kit's resource builders.
pub mod fixtures {
    /// An EDS cluster with this max requests (the kit's `cluster_with`).
    pub use xds_proto_testing::resources::cluster_with as cluster_v;
    pub use xds_proto_testing::resources::*;
}

/// The kit's resource builders with the config selector's helpers: the dependency
/// manager driver and the random sources.
pub mod fixtures_routes {
    pub use xds_proto_testing::peer::{DmDriver, Scripted, SplitMix};
    pub use xds_proto_testing::resources::*;
}
