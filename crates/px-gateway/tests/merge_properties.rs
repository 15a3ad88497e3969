//! Property tests of the merge policy of issue 11 (docs/merge.md) over
//! random flows: bulk writes whose PSH is followed at once by the next
//! write, request/response exchanges (the inner host asks, the outer host
//! answers with a PSH'd write, on short and long round trips), and mixes;
//! random PSH positions, TSval and TSecr that rise by random steps (or stay),
//! and every PSH policy. The flows' handshakes come first, so the gateway
//! knows the inner MSS and merges. Half the cases receive GRO super-packets
//! (runs of a write's segments with equal timestamps, PSH only last) with
//! inner GSO on, so whole inner-MSS multiples go on as GSO frames, checked
//! after a software cut. Checked for every case:
//!
//! - byte-exact and in order per flow (the harness's oracle);
//! - PSH is on exactly the inner segments that contain a PSH'd byte;
//! - TSval never decreases on a flow's inner segments, TSecr neither;
//! - no byte is held longer than the merge timeout (output time − arrival
//!   of the segment's first byte);
//! - a request/response flow's answers wait after their PSH at most the
//!   PSH grace (adaptive), not at all (flush).

mod common;

use std::time::{Duration, Instant};

use common::*;
use proptest::prelude::*;
use px_gateway::{Config, Port, PshPolicy};
use px_wire::offload::{Checksum, PacketMeta};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const MSS: usize = 1448;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Bulk,
    /// Request/response; the round trip in µs.
    Rr(u64),
    Mixed,
}

/// What one input segment was.
struct In {
    flow: u16,
    /// Stream offset of its first byte, its length, its arrival.
    off: u32,
    len: u32,
    at: Instant,
    psh: bool,
    /// Part of an answer of a request/response exchange.
    answer: bool,
}

struct Flow {
    n: u16,
    kind: Kind,
    off: u32,
    tsval: u32,
    tsecr: u32,
    req_seq: u32,
    writes_left: u32,
}

/// Segments of one write that arrive together as a GRO super-packet: same
/// flow, in order, equal timestamps, PSH only on the last (Linux GRO
/// flushes at PSH and at any option change).
struct Batch {
    n: u16,
    seq: u32,
    payload: Vec<u8>,
    ts: (u32, u32),
    segments: Vec<(u32, u32)>,
}

/// Feeds `b` as one frame: a super-packet of `MSS`-byte segments if it
/// holds more than one; records each segment as arrived now.
fn feed_batch(h: &mut Harness, b: Batch, psh: bool, answer: bool, ins: &mut Vec<In>) {
    let mut s = TcpSpec::inbound(false, b.n, b.seq, b.payload).ts(b.ts.0, b.ts.1);
    s.flags = Flags { psh, ..Flags::ack() };
    let meta = if b.segments.len() > 1 { gro_meta(Checksum::Unknown, MSS as u16) } else { PacketMeta::PLAIN };
    let _ = h.feed(Port::Outer, s.build(), meta);
    let last = b.segments.len() - 1;
    for (i, (off, len)) in b.segments.into_iter().enumerate() {
        ins.push(In { flow: b.n, off, len, at: h.now, psh: psh && i == last, answer });
    }
}

fn run(seed: u64, policy: PshPolicy, timeout_us: u64) -> Result<(), String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Half the cases receive GRO super-packets and may pass their whole
    // inner-MSS multiples on as GSO frames (inner GSO on).
    let gro = rng.gen_bool(0.5);
    let cfg = Config { psh: policy, merge_timeout: Duration::from_micros(timeout_us), inner_gso: gro, ..test_config() };
    let mut h = Harness::new(cfg);
    let isn = rng.r#gen::<u32>();
    let nflows = rng.gen_range(1..=3u16);
    let mut flows: Vec<Flow> = (1..=nflows)
        .map(|n| Flow {
            n,
            kind: match rng.gen_range(0..3) {
                0 => Kind::Bulk,
                1 => Kind::Rr(rng.gen_range(10..2_000)),
                _ => Kind::Mixed,
            },
            off: 0,
            tsval: rng.r#gen(),
            tsecr: rng.r#gen(),
            req_seq: INNER_ISN.wrapping_add(1),
            writes_left: rng.gen_range(3..12),
        })
        .collect();
    // The handshakes first: the gateway merges toward an inner host only
    // once it knows that host's MSS.
    for f in &flows {
        open_connection(&mut h, false, f.n, isn, Some(8960));
    }
    h.sent.clear();
    let mut ins: Vec<In> = Vec::new();
    while flows.iter().any(|f| f.writes_left > 0) {
        let live: Vec<usize> = (0..flows.len()).filter(|&i| flows[i].writes_left > 0).collect();
        let f = &mut flows[live[rng.gen_range(0..live.len())]];
        f.writes_left -= 1;
        let rr = match f.kind {
            Kind::Bulk => false,
            Kind::Rr(_) => true,
            Kind::Mixed => rng.gen_bool(0.5),
        };
        if rr {
            // The inner host asks; the answer comes a round trip later.
            let mut req = TcpSpec::outbound(false, f.n, f.req_seq, vec![9; 64]).ts(7, f.tsval);
            req.flags = Flags { psh: true, ..Flags::ack() };
            let _ = h.feed_tcp(Port::Inner, &req);
            f.req_seq += 64;
            let rtt = if let Kind::Rr(r) = f.kind { r } else { rng.gen_range(10..2_000) };
            h.advance(Duration::from_micros(rtt));
        }
        let write = rng.gen_range(1..if gro { 100_000usize } else { 40_000 });
        let mut done = 0;
        let mut batch: Option<Batch> = None;
        while done < write {
            let len = MSS.min(write - done);
            let last = done + len == write;
            // PSH ends the write; sometimes also a stray PSH mid-write.
            let psh = last || rng.gen_bool(0.02);
            let (old_tsval, old_tsecr) = (f.tsval, f.tsecr);
            // Timestamps tick less often under GRO, so super-packets form.
            let tick = |rng: &mut ChaCha8Rng| if gro { rng.gen_bool(0.03) as u32 } else { rng.gen_range(0..2) };
            f.tsval = f.tsval.wrapping_add(tick(&mut rng));
            f.tsecr = f.tsecr.wrapping_add(tick(&mut rng));
            // A super-packet ends where GRO would flush: a timestamp
            // change, 64 KB, or by chance (the receive batch ended).
            let full = batch.as_ref().is_some_and(|b| b.payload.len() + len > 65_000);
            if let Some(b) =
                batch.take_if(|_| (f.tsval, f.tsecr) != (old_tsval, old_tsecr) || full || rng.gen_bool(0.05))
            {
                feed_batch(&mut h, b, false, rr, &mut ins);
                h.advance(Duration::from_nanos(rng.gen_range(100..3_000)));
            }
            let bytes = stream_bytes(f.n as u32, f.off, len);
            if gro {
                let b = batch.get_or_insert_with(|| Batch {
                    n: f.n,
                    seq: isn.wrapping_add(f.off),
                    payload: Vec::new(),
                    ts: (f.tsval, f.tsecr),
                    segments: Vec::new(),
                });
                b.payload.extend_from_slice(&bytes);
                b.segments.push((f.off, len as u32));
                if psh {
                    let b = batch.take().expect("just filled");
                    feed_batch(&mut h, b, true, rr, &mut ins);
                    h.advance(Duration::from_nanos(rng.gen_range(100..3_000)));
                }
            } else {
                let mut s = TcpSpec::inbound(false, f.n, isn.wrapping_add(f.off), bytes).ts(f.tsval, f.tsecr);
                s.flags = Flags { psh, ..Flags::ack() };
                let _ = h.feed_tcp(Port::Outer, &s);
                ins.push(In { flow: f.n, off: f.off, len: len as u32, at: h.now, psh, answer: rr });
                h.advance(Duration::from_nanos(rng.gen_range(100..3_000)));
            }
            f.off += len as u32;
            done += len;
        }
        // Bulk: the next write follows at once; otherwise a pause.
        if !rr && rng.gen_bool(0.8) {
            h.advance(Duration::from_micros(rng.gen_range(0..20)));
        } else if !rr {
            h.advance(Duration::from_micros(rng.gen_range(0..3 * timeout_us)));
        }
    }
    h.advance(Duration::from_millis(5));
    h.flush_all();
    h.check_outputs()?;
    h.oracle.verify()?;
    h.check_accounting()?;
    let bound = Duration::from_micros(timeout_us);
    for fl in &flows {
        let mine: Vec<&In> = ins.iter().filter(|i| i.flow == fl.n).collect();
        let pushed: Vec<u32> = mine.iter().filter(|i| i.psh).map(|i| i.off + i.len - 1).collect();
        let (mut last_tsval, mut last_tsecr) = (None::<u32>, None::<u32>);
        let cut = |o: &Out| match o.meta.gso {
            Some(_) => soft_gso(&o.frame, &o.meta),
            None => Ok(vec![o.frame.clone()]),
        };
        let mut frames = Vec::new();
        for o in h.sent.iter().filter(|o| o.port == Port::Inner) {
            frames.extend(cut(o)?.into_iter().map(|f| (o.at, f)));
        }
        for (at, frame) in &frames {
            let w = check_wire_frame(frame)?;
            let Some(t) = w.tcp() else { continue };
            // The builders' ports: 40000 + n on the outer host, 80 inside.
            if t.source_port != 40_000 + fl.n || w.payload.is_empty() {
                continue;
            }
            let start = t.sequence_number.wrapping_sub(isn);
            let end = start + w.payload.len() as u32;
            let has_pushed = pushed.iter().any(|&p| (start..end).contains(&p));
            if t.psh != has_pushed {
                return Err(format!(
                    "flow {}: segment [{start}, {end}) psh={} but pushed byte inside={has_pushed}",
                    fl.n, t.psh
                ));
            }
            let (tsval, tsecr) = w.ts().ok_or("merged segment lost its timestamps")?;
            if last_tsval.is_some_and(|l| (tsval.wrapping_sub(l) as i32) < 0) {
                return Err(format!("flow {}: TSval went back to {tsval}", fl.n));
            }
            if last_tsecr.is_some_and(|l| (tsecr.wrapping_sub(l) as i32) < 0) {
                return Err(format!("flow {}: TSecr went back to {tsecr}", fl.n));
            }
            (last_tsval, last_tsecr) = (Some(tsval), Some(tsecr));
            let first = mine.iter().find(|i| (i.off..i.off + i.len).contains(&start)).ok_or("unknown bytes")?;
            let waited = at.saturating_duration_since(first.at);
            if waited > bound {
                return Err(format!("flow {}: [{start}, {end}) held {waited:?} > {bound:?}", fl.n));
            }
            // An answer of a request/response exchange waits after the
            // arrival of its PSH'd last byte: never under flush, at most
            // the PSH grace under adaptive.
            let grace = match policy {
                PshPolicy::Flush => Duration::ZERO,
                PshPolicy::Adaptive => Duration::from_micros(32).min(bound),
                PshPolicy::Hold => Duration::from_secs(3600),
            };
            if first.answer {
                // The segment's last pushed byte (data may keep coming
                // after an earlier PSH of the answer: the merge goes on).
                let p = mine.iter().rev().find(|i| i.psh && (start..end).contains(&(i.off + i.len - 1)));
                if let Some(p) = p.filter(|p| p.answer && *at > p.at + grace) {
                    return Err(format!(
                        "flow {}: answer bytes [{start}, {end}) waited {:?} after their PSH",
                        fl.n,
                        *at - p.at
                    ));
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn psh_and_timestamp_patterns_keep_the_merge_rules(
        seed in any::<u64>(),
        policy in prop_oneof![Just(PshPolicy::Adaptive), Just(PshPolicy::Flush), Just(PshPolicy::Hold)],
        timeout_us in prop_oneof![Just(32u64), Just(100), Just(500)],
    ) {
        run(seed, policy, timeout_us).map_err(TestCaseError::fail)?;
    }
}
