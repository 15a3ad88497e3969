//! Fuzz target: arbitrary bytes as a received caravan payload. The Rust
//! parser and the C ABI's record walk must agree on every byte, whatever
//! the input: both accept it with the same records, or both refuse it.
//!
//! Input: 4 bytes of outer ports (used when the first bit of byte 0 is set),
//! then the payload. Run: `cargo +nightly fuzz run parse` from
//! `crates/px-caravan`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use px_caravan::Caravan;
use px_caravan::ffi::{px_caravan_next, px_caravan_record, px_caravan_validate};

fuzz_target!(|data: &[u8]| {
    let Some((head, payload)) = data.split_first_chunk::<4>() else { return };
    let ports = (head[0] & 1 == 1).then(|| (u16::from_be_bytes([head[0], head[1]]), u16::from_be_bytes([head[2], head[3]])));
    let rust = Caravan::parse(payload, ports);
    let (sp, dp) = ports.map_or((-1, -1), |(s, d)| (s as i32, d as i32));
    // SAFETY: the pointer and length come from a live slice.
    let c = unsafe { px_caravan_validate(payload.as_ptr(), payload.len(), sp, dp) };
    match rust {
        Ok(car) => {
            assert_eq!(c as usize, car.len());
            let mut off = 0usize;
            let mut rec = px_caravan_record { payload: core::ptr::null(), payload_len: 0, src_port: 0, dst_port: 0, checksum: 0 };
            for r in car.iter() {
                // SAFETY: as above; `off` and `rec` are live locals.
                assert_eq!(unsafe { px_caravan_next(payload.as_ptr(), payload.len(), &mut off, &mut rec) }, 1);
                // SAFETY: the record points into `payload`.
                let p = unsafe { core::slice::from_raw_parts(rec.payload, rec.payload_len) };
                assert_eq!(p, r.payload());
                assert_eq!((rec.src_port, rec.dst_port, rec.checksum), (r.src_port(), r.dst_port(), r.checksum()));
            }
            // SAFETY: as above.
            assert_eq!(unsafe { px_caravan_next(payload.as_ptr(), payload.len(), &mut off, &mut rec) }, 0);
            assert_eq!(off, payload.len());
        }
        Err(e) => {
            assert!(c < 0, "C accepted what Rust refused ({e})");
            let _ = e.reason().name();
        }
    }
});
