//! Runnable examples of xds-proto that need a build step of their own: `examples/`
//! holds them, and `build.rs` generates the tonic client they call (see the README's
//! "A tonic channel to an `xds:///` target").
//!
//! Run: `cargo run -p xds-examples --example xds_channel`.

#![forbid(unsafe_code)]
