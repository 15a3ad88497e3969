//! `Engine::set_config` (a configuration reload): held data leaves first,
//! in order and intact, then the new values apply; what is fixed at start
//! is refused and the old configuration stays.

use std::time::{Duration, Instant};

use px_gateway::{Config, Engine, FlushReason, Port, PshPolicy, Verdict};
use px_wire::offload::PacketMeta;

/// An inbound TCP/IPv4 data segment (outer → inner) of `len` bytes at `seq`.
fn seg(seq: u32, len: usize) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 51, 100, 1], [203, 0, 113, 1], 64)
        .tcp(5000, 80, seq, 1000)
        .ack(7);
    let mut f = Vec::new();
    b.write(&mut f, &vec![(seq % 251) as u8; len]).unwrap();
    f
}

/// Sends segments through `e`, returning the TCP payload bytes that left
/// toward the inner port, in order.
fn feed(e: &mut Engine, now: Instant, segs: &mut [Vec<u8>], out: &mut Vec<u8>) {
    for f in segs.iter_mut() {
        let v = e.handle_packet(now, Port::Outer, f, PacketMeta::PLAIN);
        drain(e, out);
        if let Verdict::Forward { .. } = v {
            out.extend_from_slice(&f[14 + 40..]);
        }
    }
}

fn drain(e: &mut Engine, out: &mut Vec<u8>) {
    while let Some(t) = e.poll_transmit() {
        out.extend_from_slice(&t.frame()[14 + 40..]);
        e.recycle(t.buf);
    }
}

#[test]
fn reload_flushes_held_data_in_order_then_applies() {
    let cfg = Config { bulk_after: 0, merge_timeout: Duration::from_millis(5), ..Config::default() };
    let mut e = Engine::new(cfg.clone()).unwrap();
    let t0 = Instant::now();
    let mut out = Vec::new();
    let mut first: Vec<_> = (0..4).map(|i| seg(1 + i * 1448, 1448)).collect();
    let expected: Vec<u8> =
        first.iter().chain([seg(1 + 4 * 1448, 1448)].iter()).flat_map(|f| f[54..].to_vec()).collect();
    feed(&mut e, t0, &mut first, &mut out);
    assert!(e.held_bytes() > 0, "something is held before the reload");
    let new = Config { merge_timeout: Duration::from_micros(200), psh: PshPolicy::Hold, ..cfg.clone() };
    e.set_config(t0, new).unwrap();
    assert_eq!(e.held_bytes(), 0, "the reload flushed what was held");
    drain(&mut e, &mut out);
    assert_eq!(e.counters().flushes(FlushReason::Shutdown), 1);
    assert_eq!(e.config().merge_timeout, Duration::from_micros(200));
    // The next segment of the flow follows what was flushed: the stream is whole.
    feed(&mut e, t0, &mut [seg(1 + 4 * 1448, 1448)], &mut out);
    // The new timeout rules the new hold.
    let deadline = e.poll_timeout().unwrap();
    assert!(deadline <= t0 + Duration::from_micros(200), "{:?}", deadline - t0);
    e.handle_timeout(t0 + Duration::from_micros(200));
    drain(&mut e, &mut out);
    assert_eq!(out, expected);
}

#[test]
fn a_fixed_field_is_refused_and_the_old_configuration_stays() {
    let cfg = Config { bulk_after: 0, ..Config::default() };
    let mut e = Engine::new(cfg.clone()).unwrap();
    let t0 = Instant::now();
    let mut out = Vec::new();
    feed(&mut e, t0, &mut [seg(1, 1448), seg(1449, 1448)], &mut out);
    let held = e.held_bytes();
    let err = e.set_config(t0, Config { max_flows: 7, merge_timeout: Duration::ZERO, ..cfg.clone() }).unwrap_err();
    assert_eq!(err.field, "max_flows");
    assert_eq!(e.config(), &cfg);
    assert_eq!(e.held_bytes(), held, "nothing flushed by a refused reload");
    // The same configuration again changes nothing and flushes nothing.
    e.set_config(t0, cfg.clone()).unwrap();
    assert_eq!(e.held_bytes(), held);
}
