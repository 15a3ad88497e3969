//! Fuzz target: arbitrary bytes as a sequence of frames into both ports of
//! one engine, with receive metadata and time taken from the input too, so
//! that state (flows, holds, timers, learned MTUs) carries across frames.
//!
//! Input layout, repeated: one control byte (bit 0: port, bits 1-2:
//! checksum state, bit 3: GSO size present, bits 4-7: time step), then
//! [2-byte GSO size], a 2-byte frame length, and the frame.
//!
//! Run: `cargo +nightly fuzz run engine` from `crates/px-gateway`.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use px_gateway::{Config, Engine, Port};
use px_wire::offload::{Checksum, Gso, GsoKind, PacketMeta};

fuzz_target!(|data: &[u8]| {
    let cfg = Config {
        max_flows: 8,
        max_held_bytes: 65_536,
        bulk_after: 1,
        icmp_source_v4: Some([203, 0, 113, 254].into()),
        icmp_source_v6: Some("2001:db8::fe".parse().unwrap()),
        ..Config::default()
    };
    let mut eng = Engine::new(cfg).unwrap();
    let mut now = Instant::now();
    let mut rest = data;
    while let Some((&ctl, r)) = rest.split_first() {
        rest = r;
        let gso_size = if ctl & 8 != 0 {
            let Some((g, r)) = rest.split_first_chunk::<2>() else { break };
            rest = r;
            Some(u16::from_be_bytes(*g))
        } else {
            None
        };
        let Some((l, r)) = rest.split_first_chunk::<2>() else { break };
        let len = (u16::from_be_bytes(*l) as usize).min(r.len());
        let mut frame = r[..len].to_vec();
        rest = &r[len..];
        let port = if ctl & 1 == 0 { Port::Outer } else { Port::Inner };
        let csum = match (ctl >> 1) & 3 {
            0 => Checksum::Unknown,
            1 => Checksum::Valid,
            _ => Checksum::Partial { start: 0, offset: 0 },
        };
        // The kind from the size's top bits, so that every kind is tried
        // with every size up to 16383, 0 included (issue 27, item 10).
        let gso = gso_size.map(|g| Gso {
            kind: [GsoKind::TcpV4, GsoKind::TcpV6, GsoKind::UdpL4][usize::from(g >> 14) % 3],
            size: g & 0x3fff,
            ecn: false,
        });
        let _ = eng.handle_packet(now, port, &mut frame, PacketMeta { gso, csum, hdr_len: 0 });
        while let Some(t) = eng.poll_transmit() {
            let _ = t.frame();
            eng.recycle(t.buf);
        }
        now += Duration::from_micros(((ctl >> 4) as u64) << 6);
        if eng.poll_timeout().is_some_and(|d| d <= now) {
            eng.handle_timeout(now);
        }
    }
    eng.flush_all(now);
    while let Some(t) = eng.poll_transmit() {
        let _ = t.frame();
    }
});
