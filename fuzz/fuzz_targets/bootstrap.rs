//! Arbitrary bytes as bootstrap JSON: what parses must round-trip and take watches.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_proto_tests::sim::fuzz::bootstrap(data));
