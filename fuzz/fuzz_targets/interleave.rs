//! Arbitrary interleavings of watches, cancels, transport events and time, under the invariant checker.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_proto_tests::sim::fuzz::interleave(data));
