//! No input panics the engine: mutated valid frames (bit flips, length
//! fields rewritten, truncations, extensions, splices) and random bytes, into
//! both ports, with random receive metadata, random timing and wake-ups, on
//! engines with small bounds so that eviction and memory pressure run too.
//!
//! Beyond not panicking, what the engine itself builds (queued transmits:
//! merges, pieces, fragments, ICMP errors) must still fit the egress MTU,
//! whatever it was fed, and every packet is accounted for by the counters.

mod common;

use std::time::Duration;

use common::*;
use etherparse::{Icmpv4Type, Icmpv6Type, PacketBuilder, TcpOptionElement, icmpv4::DestUnreachableHeader};
use proptest::prelude::*;
use px_gateway::{Config, Engine, Port};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Valid frames of every kind the engine handles, as mutation seeds.
fn corpus() -> Vec<(Port, Vec<u8>)> {
    let mut c = Vec::new();
    for v6 in [false, true] {
        for n in 0..3u16 {
            let seg = TcpSpec::inbound(v6, n, 1000, stream_bytes(1, 0, 1448)).ts(5, 6);
            c.push((Port::Outer, seg.build()));
            let mut s = seg.clone();
            s.seq += 1448;
            c.push((Port::Outer, s.build()));
            let mut s = TcpSpec::inbound(v6, n, 1, vec![]).with_opts(vec![
                TcpOptionElement::MaximumSegmentSize(1460),
                TcpOptionElement::SelectiveAcknowledgementPermitted,
                TcpOptionElement::WindowScale(7),
                TcpOptionElement::Timestamp(1, 0),
            ]);
            s.flags = Flags { syn: true, ..Flags::default() };
            c.push((Port::Outer, s.build()));
            s.flags.ack = true;
            c.push((
                Port::Inner,
                TcpSpec { src: s.dst, dst: s.src, sport: s.dport, dport: s.sport, ..s.clone() }.build(),
            ));
            c.push((Port::Inner, TcpSpec::outbound(v6, n, 9, stream_bytes(2, 0, 8948)).ts(1, 2).build()));
            let mut vl = TcpSpec::outbound(v6, n, 9, stream_bytes(2, 0, 3000));
            vl.vlan = Some(5);
            c.push((Port::Inner, vl.build()));
            c.push((
                Port::Inner,
                TcpSpec::outbound(v6, n, 9, vec![])
                    .with_opts(vec![TcpOptionElement::SelectiveAcknowledgement((1, 2), [Some((3, 4)), None, None])])
                    .build(),
            ));
        }
        let (src, dst) = (inner_addr(v6, 1), outer_addr(v6, 1));
        for (len, df) in [(3000, false), (3000, true), (100, true)] {
            c.push((
                Port::Inner,
                UdpSpec { src, dst, sport: 1, dport: 2, df, ip_id: 9, payload: vec![7; len] }.build(),
            ));
        }
        let q = TcpSpec::outbound(v6, 1, 1, vec![0; 1200]).build();
        let mut v = Vec::new();
        let b = PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER);
        if v6 {
            let oct = |a: std::net::IpAddr| match a {
                std::net::IpAddr::V6(a) => a.octets(),
                std::net::IpAddr::V4(_) => unreachable!(),
            };
            b.ipv6(oct(outer_addr(true, 9)), oct(inner_addr(true, 1)), 64)
                .icmpv6(Icmpv6Type::PacketTooBig { mtu: 1280 })
                .write(&mut v, &q[14..1000])
                .unwrap();
        } else {
            b.ipv4([198, 51, 100, 9], [203, 0, 113, 2], 64)
                .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: 1000,
                }))
                .write(&mut v, &q[14..42])
                .unwrap();
        }
        c.push((Port::Outer, v));
    }
    c
}

fn mutate(rng: &mut ChaCha8Rng, corpus: &[(Port, Vec<u8>)]) -> (Port, Vec<u8>) {
    let (mut port, mut f) = corpus[rng.gen_range(0..corpus.len())].clone();
    if rng.gen_bool(0.5) {
        port = port.other();
    }
    match rng.gen_range(0..10) {
        0 => {
            let n = rng.gen_range(0..200);
            f = (0..n).map(|_| rng.r#gen()).collect();
        }
        1 => f.truncate(rng.gen_range(0..=f.len())),
        2 => {
            let extra = rng.gen_range(0..3000);
            f.extend((0..extra).map(|_| rng.r#gen::<u8>()));
        }
        3 => {
            let (_, g) = &corpus[rng.gen_range(0..corpus.len())];
            let at = rng.gen_range(0..=f.len().min(g.len()));
            f.truncate(at);
            f.extend_from_slice(&g[at..]);
        }
        _ => {}
    }
    // Flips and rewrites, dense in the headers where lengths and offsets live.
    for _ in 0..rng.gen_range(0..6) {
        if f.is_empty() {
            break;
        }
        let hdr = f.len().min(120);
        let i = if rng.gen_bool(0.8) { rng.gen_range(0..hdr) } else { rng.gen_range(0..f.len()) };
        match rng.gen_range(0..3) {
            0 => f[i] ^= 1 << rng.gen_range(0..8),
            1 => f[i] = [0, 1, 0x7f, 0x80, 0xff, 5, 15, 40][rng.gen_range(0..8)],
            _ => f[i] = rng.r#gen(),
        }
    }
    (port, f)
}

fn meta(rng: &mut ChaCha8Rng) -> PacketMeta {
    let csum = [Checksum::Unknown, Checksum::Valid, PARTIAL][rng.gen_range(0..3)];
    let size = match rng.gen_range(0..6) {
        0 => Some(rng.r#gen()),
        1 => Some([0, 1, 7, 8, 536, 1448][rng.gen_range(0..6)]),
        _ => None,
    };
    // The kind follows from the size drawn, so that the draws stay those of
    // the seeds' history and UDP batches are covered too.
    let gso = size.map(|size: u16| {
        let kind = [GsoKind::TcpV4, GsoKind::TcpV6, GsoKind::UdpL4][usize::from(size % 3)];
        Gso { kind, size, ecn: false }
    });
    PacketMeta { gso, csum, hdr_len: 0 }
}

/// IP length of a frame as etherparse reads it (no checksums: cheap).
fn ip_len(frame: &[u8]) -> Option<usize> {
    match etherparse::SlicedPacket::from_ethernet(frame).ok()?.net? {
        etherparse::NetSlice::Ipv4(v) => Some(v.header().total_len() as usize),
        etherparse::NetSlice::Ipv6(v) => Some(40 + v.header().payload_length() as usize),
        etherparse::NetSlice::Arp(_) => None,
    }
}

/// Feeds `cases` mutated frames into one engine; returns the count fed.
fn hammer(seed: u64, cases: usize) -> u64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let corpus = corpus();
    let cfg = Config {
        max_flows: rng.gen_range(1..64),
        max_held_bytes: 65_536,
        bulk_after: rng.gen_range(0..3),
        inner_gso: rng.r#gen(),
        outer_gso: rng.r#gen(),
        verify_checksums: rng.r#gen(),
        pmtu_cache_size: 4,
        ..test_config()
    };
    let (imtu, emtu) = (cfg.imtu as usize, cfg.emtu as usize);
    let mut eng = Engine::new(cfg).unwrap();
    let t0 = std::time::Instant::now();
    let mut now = t0;
    let mut fed = 0u64;
    for _ in 0..cases {
        // Valid frames too, so that flows get bulk and hold data to disturb.
        let (port, mut f) =
            if rng.gen_bool(0.3) { corpus[rng.gen_range(0..corpus.len())].clone() } else { mutate(&mut rng, &corpus) };
        let m = meta(&mut rng);
        let v = eng.handle_packet(now, port, &mut f, m);
        fed += 1;
        let _ = v;
        while let Some(t) = eng.poll_transmit() {
            let fr = t.frame();
            // What the engine built itself must fit the egress.
            if let Some(len) = ip_len(fr) {
                let mtu = if t.port == Port::Inner { imtu } else { emtu };
                assert!(t.meta.gso.is_some() || len <= mtu, "built a {len}-byte packet for {:?}", t.port);
            }
            eng.recycle(t.buf);
        }
        now += Duration::from_micros(rng.gen_range(0..400));
        if rng.gen_bool(0.1) {
            eng.handle_timeout(now);
        }
        if rng.gen_bool(0.001) {
            eng.flush_all(now);
        }
        while let Some(t) = eng.poll_transmit() {
            eng.recycle(t.buf);
        }
    }
    let c = eng.counters();
    let rx = c.inner.rx_packets + c.outer.rx_packets;
    assert_eq!(rx, fed);
    assert_eq!(rx, c.received_accounted(), "{c:?}");
    fed
}

#[test]
fn fifty_thousand_mutated_frames_never_panic() {
    let mut n = 0;
    for seed in 0..10 {
        n += hammer(seed, 5_000);
    }
    assert_eq!(n, 50_000);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Arbitrary bytes straight in, one frame per engine (shrinks well).
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000), inner in any::<bool>(),
                                   gso in proptest::option::of((any::<u16>(), 0u8..3)), csum in 0u8..3) {
        let mut eng = Engine::new(test_config()).unwrap();
        let mut f = bytes;
        let port = if inner { Port::Inner } else { Port::Outer };
        let csum = [Checksum::Unknown, Checksum::Valid, PARTIAL][csum as usize];
        let gso = gso.map(|(size, k)| Gso { kind: [GsoKind::TcpV4, GsoKind::TcpV6, GsoKind::UdpL4][usize::from(k)], size, ecn: false });
        let _ = eng.handle_packet(std::time::Instant::now(), port, &mut f, PacketMeta { gso, csum, hdr_len: 0 });
        while let Some(t) = eng.poll_transmit() {
            let _ = t.frame();
        }
    }
}

/// The long version: `cargo test --release --test arbitrary_bytes -- --ignored`
/// (set `PX_FUZZ_CASES` for the number of frames; default 20 million).
#[test]
#[ignore]
fn mutated_frames_never_panic_long() {
    let total: u64 = std::env::var("PX_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000_000);
    let start = std::time::Instant::now();
    let mut n = 0;
    let mut seed = 1_000;
    while n < total {
        n += hammer(seed, 100_000);
        seed += 1;
    }
    println!("{n} mutated frames, {} engines, {:.1} s", seed - 1_000, start.elapsed().as_secs_f64());
}

/// Writes the valid frames above as seed inputs for the cargo-fuzz target
/// (`fuzz/fuzz_targets/engine.rs` format) into `$PX_FUZZ_SEED_DIR`:
/// `PX_FUZZ_SEED_DIR=fuzz/corpus/engine cargo test --test arbitrary_bytes -- --ignored write_fuzz_seeds`.
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let Ok(dir) = std::env::var("PX_FUZZ_SEED_DIR") else {
        println!("PX_FUZZ_SEED_DIR not set: nothing written");
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    let c = corpus();
    let record = |port: Port, f: &[u8], step: u8| {
        let mut v = vec![(port == Port::Inner) as u8 | (step << 4)];
        v.extend((f.len() as u16).to_be_bytes());
        v.extend_from_slice(f);
        v
    };
    for (i, (port, f)) in c.iter().enumerate() {
        std::fs::write(format!("{dir}/seed-{i}"), record(*port, f, 1)).unwrap();
    }
    // A bulk flow: its segments in order, so holds form.
    let mut all = Vec::new();
    for k in 0..8u32 {
        let s = TcpSpec::inbound(false, 1, 1 + k * 1448, stream_bytes(1, k * 1448, 1448)).ts(5, 6);
        all.extend(record(Port::Outer, &s.build(), 0));
    }
    std::fs::write(format!("{dir}/seed-bulk"), all).unwrap();
}
