//! Arbitrary bytes as a DiscoveryResponse of every built-in type, and through each decoder.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_proto_tests::sim::fuzz::decode_response(data));
