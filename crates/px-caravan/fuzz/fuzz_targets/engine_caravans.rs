//! Fuzz target: the engine with every destination caravan-capable, so that
//! every UDP frame from outside goes through the packer and every UDP frame
//! from inside marked with the caravan DSCP through the unpacker. Frames
//! are arbitrary bytes with metadata and time steps, as in px-gateway's
//! `engine` target; the engine must never panic, and every frame it sends
//! must fit its port's MTU.
//!
//! Input layout, repeated: one control byte (bit 0: port, bits 1-2:
//! checksum state, bits 4-7: time step in 64 µs units), a 2-byte frame
//! length, the frame. Run: `cargo +nightly fuzz run engine_caravans`.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use px_gateway::{Config, Engine, Port};
use px_wire::offload::{Checksum, PacketMeta};

fuzz_target!(|data: &[u8]| {
    let cfg = Config {
        max_flows: 4,
        max_held_bytes: 65_536,
        icmp_source_v4: Some([203, 0, 113, 254].into()),
        caravan_prefixes: vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
        ..Config::default()
    };
    let (imtu, emtu) = (cfg.imtu as usize, cfg.emtu as usize);
    let mut eng = Engine::new(cfg).unwrap();
    let mut now = Instant::now();
    let mut rest = data;
    let check = |eng: &mut Engine| {
        while let Some(t) = eng.poll_transmit() {
            let f = t.frame();
            // Frames may carry a 14-byte Ethernet header (and VLAN tags).
            let mtu = if t.port == Port::Inner { imtu } else { emtu };
            assert!(t.meta.gso.is_some() || f.len() <= mtu + 22, "{} bytes out of {:?}", f.len(), t.port);
            let buf = t.buf;
            eng.recycle(buf);
        }
    };
    while let Some((&ctl, r)) = rest.split_first() {
        let Some((l, r)) = r.split_first_chunk::<2>() else { break };
        let len = (u16::from_be_bytes(*l) as usize).min(r.len());
        let mut frame = r[..len].to_vec();
        rest = &r[len..];
        let port = if ctl & 1 == 0 { Port::Outer } else { Port::Inner };
        let csum = match (ctl >> 1) & 3 {
            0 => Checksum::Unknown,
            1 => Checksum::Valid,
            _ => Checksum::Partial { start: 0, offset: 0 },
        };
        let _ = eng.handle_packet(now, port, &mut frame, PacketMeta { csum, ..PacketMeta::PLAIN });
        check(&mut eng);
        now += Duration::from_micros(64 * (ctl >> 4) as u64);
        if eng.poll_timeout().is_some_and(|t| t <= now) {
            eng.handle_timeout(now);
            check(&mut eng);
        }
    }
    eng.flush_all(now);
    check(&mut eng);
});
