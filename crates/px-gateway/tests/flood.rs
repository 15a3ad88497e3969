//! A flood of spoofed SYNs (issue 10 item 11): a million distinct 4-tuples
//! from outside, interleaved with a live connection. The flow table stays
//! at its configured bound, and the live connection keeps its state: the
//! MSS its inner host announced still caps what the gateway merges toward
//! it (a flow evicted and re-created would merge up to the full inner MTU).

mod common;

use common::*;
use etherparse::TcpOptionElement;
use px_gateway::{Config, Port, Verdict};

const ISN: u32 = 77_000;
const MSS_TS: usize = 1448;
/// The inner host's MSS (4000) less the 12 bytes of timestamps.
const CAP: usize = 4000 - 12;

fn seg(off: u32, len: usize) -> TcpSpec {
    TcpSpec::inbound(false, 1, ISN.wrapping_add(off), stream_bytes(1, off, len)).ts(1_000, 77)
}

/// Rewrites the template SYN to come from source address 198.51.100.`host`,
/// port `port`, checksums recomputed.
fn spoof(t: &mut [u8], host: u8, port: u16) {
    t[14 + 15] = host;
    t[34..36].copy_from_slice(&port.to_be_bytes());
    t[24..26].copy_from_slice(&[0, 0]);
    let c = !ones_complement(&t[14..34], 0);
    t[24..26].copy_from_slice(&c.to_be_bytes());
    t[34 + 16..34 + 18].copy_from_slice(&[0, 0]);
    let mut pseudo: u32 = t[26..34].chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
    pseudo += 6 + (t.len() - 34) as u32;
    let c = !ones_complement(&t[34..], pseudo);
    t[34 + 16..34 + 18].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn a_million_spoofed_syns_leave_a_live_flow_its_state_and_memory_bounded() {
    let max_flows = 4096;
    let mut h = Harness::new(Config { max_flows, ..test_config() });
    // The live connection, its inner host announcing MSS 4000.
    open_connection(&mut h, false, 1, ISN, Some(4000));

    let mut template = TcpSpec::inbound(false, 2, 1, vec![])
        .with_opts(vec![TcpOptionElement::MaximumSegmentSize(1460)])
        .flags(Flags { syn: true, ..Flags::default() })
        .build();
    let mut off = 0u32;
    let n_syn = 1_000_000u32;
    for n in 0..n_syn {
        // A bijection of 0..2^24: a million distinct (host, port) pairs.
        let x = n.wrapping_mul(0x9e_3779) & 0xff_ffff;
        spoof(&mut template, (x & 0xff) as u8, (x >> 8) as u16);
        let mut f = template.clone();
        let v = h.eng.handle_packet(h.now, Port::Outer, &mut f, PacketMeta::PLAIN);
        assert!(matches!(v, Verdict::Forward { .. }), "SYN {n}: {v:?}");
        while let Some(t) = h.eng.poll_transmit() {
            h.out.push(Out { port: t.port, frame: t.frame().to_vec(), meta: t.meta, at: h.now, forwarded: false });
            h.eng.recycle(t.buf);
        }
        if n % 2_000 == 0 {
            // The live flow keeps sending, one segment per 2000 new tuples.
            let _ = h.feed_tcp(Port::Outer, &seg(off, MSS_TS));
            off += MSS_TS as u32;
            h.advance(std::time::Duration::from_micros(50));
        }
        assert!(h.eng.flow_count() <= max_flows);
    }
    assert!(h.eng.counters().flows_evicted >= (n_syn as u64) - max_flows as u64);
    for _ in 0..10 {
        let _ = h.feed_tcp(Port::Outer, &seg(off, MSS_TS));
        off += MSS_TS as u32;
    }
    h.flush_all();
    let outs = h.take();
    let mut sizes = Vec::new();
    let mut bytes = 0usize;
    for o in outs.iter().filter(|o| o.port == Port::Inner) {
        let w = check_wire_frame(&o.frame).unwrap();
        if w.tcp().is_some_and(|t| t.source_port == 40_001) && !w.payload.is_empty() {
            sizes.push(w.payload.len());
            bytes += w.payload.len();
        }
    }
    assert_eq!(bytes, off as usize, "every byte of the live flow delivered");
    assert!(sizes.iter().all(|&s| s <= CAP), "the live flow lost its inner MSS (evicted): {sizes:?}");
    assert!(sizes.contains(&CAP), "still merged to the inner MSS: {sizes:?}");
}
