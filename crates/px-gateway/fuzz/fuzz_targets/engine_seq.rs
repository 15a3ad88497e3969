//! Fuzz target: stateful sequences of timed events across both ports (SYN,
//! data, ICMP too-big, caravans, tunnels, VLANs, malformed frames), every
//! output checked after every call and per-flow byte-exactness at the end.
//! The driver is `tests/common/seq.rs`, shared with the stable test
//! `tests/engine_seq.rs`; the checkers are the integration tests' own
//! (`tests/common/mod.rs`, etherparse as the oracle).
//!
//! Run: `cargo +nightly fuzz run engine_seq` from `crates/px-gateway`.
#![no_main]

#[allow(dead_code, unused_imports)]
#[path = "../../tests/common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = common::seq::run(data) {
        panic!("invariant broken: {e}");
    }
});
