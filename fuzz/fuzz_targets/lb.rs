//! Arbitrary CDS and EDS resources (through the decoders), then subchannel states, call
//! outcomes, picks and time into a LoadBalancer: rings within the cap, picks READY and
//! listed, the heap bounded.
#![no_main]

use std::alloc::{GlobalAlloc, Layout};

use xds_proto_testing::alloc::{CountingAlloc, live_bytes};

/// Counts the heap (the target checks it after every step) and refuses an allocation
/// that would take it past 1 GiB: a runaway loop aborts with "memory allocation of N
/// bytes failed" at once instead of taking the machine's memory.
struct Bounded;

const HARD_LIMIT: i64 = 1 << 30;

// SAFETY: forwards to CountingAlloc (the system allocator), or returns null, which
// GlobalAlloc allows for a failed allocation.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if live_bytes().saturating_add(layout.size() as i64) > HARD_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged.
        unsafe { CountingAlloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { CountingAlloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grows = new_size as i64 - layout.size() as i64;
        if live_bytes().saturating_add(grows) > HARD_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged.
        unsafe { CountingAlloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Bounded = Bounded;

libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_proto_tests::sim::fuzz::lb(data));
