//! Builders of Envoy resources for tests and the demo: the testing kit's
//! ([`xds_proto_testing::resources`]), under the path the CLI and the adapters' tests
//! use.

pub use xds_proto_testing::resources::*;
