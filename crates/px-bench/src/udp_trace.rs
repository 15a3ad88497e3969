//! A reproducible UDP bulk trace toward caravan-capable inner hosts, and the
//! caravan part of `px bench engine` (`caravan_gbps`, `caravan_yield`).
//!
//! The model: many UDP flows (QUIC-like bulk senders) from the legacy
//! network, each at its own rate, sending full-sized datagrams (1350 B of
//! payload, a common QUIC size) paced evenly, plus a share of small
//! datagrams (acknowledgements, 40–300 B) mixed into the same flows; IPv4
//! IDs increment per flow as a Linux sender's do. Same seed, same trace.
//!
//! Only the engine's own work is timed: building frames is not.

use core::net::Ipv4Addr;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use px_gateway::{Config, Engine, Port};
use px_wire::offload::{Checksum, PacketMeta};

use crate::drive::{drain, prefetch};
use px_wire::checksum::pseudo_v4;
use px_wire::{ipv4, udp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Parameters of the UDP trace.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UdpTraceConfig {
    pub flows: usize,
    /// Each flow's rate is drawn uniformly from this range (Gbps).
    pub rate_gbps: (f64, f64),
    /// Payload of a full-sized datagram.
    pub datagram: usize,
    /// Share of datagrams that are small (40–300 B).
    pub small_share: f64,
    pub packets: usize,
    pub seed: u64,
}

impl Default for UdpTraceConfig {
    /// The paper's UDP workload shape: 800 flows at up to 2 Gbps each.
    fn default() -> Self {
        UdpTraceConfig {
            flows: 800,
            rate_gbps: (1.0, 2.0),
            datagram: 1350,
            small_share: 0.05,
            packets: 500_000,
            seed: 1,
        }
    }
}

/// The inner prefix the trace's destinations live in (configure it as
/// caravan-capable).
pub const INNER_PREFIX: &str = "203.0.113.0/24";

/// What the caravan run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaravanResult {
    /// UDP payload bytes per second through the packer (Gbps).
    pub gbps: f64,
    pub mpps: f64,
    /// Share of caravans sent full (at the iMTU).
    pub caravan_yield: f64,
    pub datagrams_per_caravan: f64,
    pub datagrams: u64,
    pub caravans: u64,
}

struct Frames {
    data: Vec<u8>,
    /// (offset, len, arrival ns)
    refs: Vec<(usize, usize, u64)>,
    payload: u64,
}

struct Gen {
    cfg: UdpTraceConfig,
    rng: ChaCha8Rng,
    /// (next arrival ns, flow)
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Nanoseconds per byte of each flow (its pacing).
    ns_per_byte: Vec<f64>,
    ident: Vec<u16>,
}

impl Gen {
    fn new(cfg: UdpTraceConfig) -> Gen {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut heap = BinaryHeap::new();
        let mut ns_per_byte = Vec::new();
        for f in 0..cfg.flows {
            let gbps = rng.gen_range(cfg.rate_gbps.0..=cfg.rate_gbps.1);
            ns_per_byte.push(8.0 / gbps);
            heap.push(Reverse((rng.gen_range(0..10_000u64), f as u32)));
        }
        let ident = (0..cfg.flows).map(|_| rng.r#gen()).collect();
        Gen { cfg, rng, heap, ns_per_byte, ident }
    }

    /// Appends up to `max` frames (at most `bytes` of them) to `out`.
    fn fill(&mut self, out: &mut Frames, max: usize, bytes: usize) {
        out.data.clear();
        out.refs.clear();
        out.payload = 0;
        while out.refs.len() < max && out.data.len() < bytes {
            let Some(Reverse((t, f))) = self.heap.pop() else { break };
            let fi = f as usize;
            let len = if self.rng.r#gen::<f64>() < self.cfg.small_share {
                self.rng.gen_range(40..=300)
            } else {
                self.cfg.datagram
            };
            let off = out.data.len();
            let flen = 14 + 20 + 8 + len;
            out.data.resize(off + flen, 0);
            let fr = &mut out.data[off..];
            fr[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
            fr[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
            fr[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let src = Ipv4Addr::new(198, 51, 100, (fi % 250) as u8 + 1);
            let dst = Ipv4Addr::new(203, 0, 113, (fi / 250 % 250) as u8 + 1);
            ipv4::emit_header(&mut fr[14..], 0, (28 + len) as u16, self.ident[fi], false, 64, 17, src, dst);
            self.ident[fi] = self.ident[fi].wrapping_add(1);
            let (sp, dp) = (10_000 + (fi % 50_000) as u16, 4433);
            udp::emit_header(&mut fr[34..], sp, dp, (8 + len) as u16);
            for (i, b) in fr[42..42 + len].iter_mut().enumerate() {
                *b = (i as u8) ^ (f as u8);
            }
            udp::UdpDatagram::new_unchecked(&mut fr[34..42 + len]).fill_checksum(pseudo_v4(
                src,
                dst,
                17,
                (8 + len) as u16,
            ));
            out.refs.push((off, flen, t));
            out.payload += len as u64;
            let gap = ((len + 42) as f64 * self.ns_per_byte[fi]).max(1.0) as u64;
            self.heap.push(Reverse((t + gap, f)));
        }
    }
}

/// Runs the trace through one engine configured with [`INNER_PREFIX`] as
/// caravan-capable; times only `handle_packet`/`handle_timeout`.
pub fn run_caravans(tc: &UdpTraceConfig, engine: &Config, chunk_bytes: usize) -> CaravanResult {
    let ecfg = Config {
        caravan_prefixes: vec![INNER_PREFIX.parse().expect("a valid prefix")],
        caravan_ports: Vec::new(),
        ..engine.clone()
    };
    let mut eng = Engine::new(ecfg).expect("benchmark engine configuration is valid");
    let mut generator = Gen::new(tc.clone());
    let mut frames = Frames { data: Vec::new(), refs: Vec::new(), payload: 0 };
    let base = Instant::now();
    let (mut done, mut payload, mut sent, mut last) = (0usize, 0u64, 0u64, 0u64);
    let mut timed = Duration::ZERO;
    let meta = PacketMeta { csum: Checksum::Valid, ..PacketMeta::PLAIN };
    while done < tc.packets {
        generator.fill(&mut frames, tc.packets - done, chunk_bytes);
        if frames.refs.is_empty() {
            break;
        }
        done += frames.refs.len();
        payload += frames.payload;
        let t0 = Instant::now();
        for i in 0..frames.refs.len() {
            let (off, len, t) = frames.refs[i];
            last = t;
            let now = base + Duration::from_nanos(t);
            while let Some(d) = eng.poll_timeout().filter(|d| *d <= now) {
                eng.handle_timeout(d);
                sent += drain(&mut eng);
            }
            // As the TCP benchmark does (and any batched I/O loop): pull the
            // headers of a frame a few ahead into the cache.
            if let Some(&(next, _, _)) = frames.refs.get(i + 4) {
                prefetch(&frames.data[next..]);
            }
            let v = eng.handle_packet(now, Port::Outer, &mut frames.data[off..off + len], meta);
            sent += drain(&mut eng);
            if let Some((_, range)) = v.forwarded(len) {
                sent += range.len() as u64;
            }
        }
        timed += t0.elapsed();
    }
    eng.flush_all(base + Duration::from_nanos(last) + engine.merge_timeout);
    sent += drain(&mut eng);
    std::hint::black_box(sent);
    let c = &eng.counters().caravan;
    let secs = timed.as_secs_f64().max(1e-12);
    CaravanResult {
        gbps: payload as f64 * 8.0 / secs / 1e9,
        mpps: done as f64 / secs / 1e6,
        caravan_yield: c.caravan_yield(),
        datagrams_per_caravan: c.datagrams_per_caravan(),
        datagrams: done as u64,
        caravans: c.built,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_packs_and_accounts() {
        let tc = UdpTraceConfig { flows: 20, packets: 20_000, ..UdpTraceConfig::default() };
        let r = run_caravans(&tc, &Config::default(), 4 << 20);
        assert_eq!(r.datagrams, 20_000);
        // 1350-byte datagrams: 6 fit a 9000-byte caravan (28 + 6 * 1358).
        assert!(r.datagrams_per_caravan > 3.0 && r.datagrams_per_caravan <= 7.0, "{r:?}");
        assert!(r.caravan_yield > 0.0 && r.caravan_yield <= 1.0);
        assert!(r.gbps > 0.0 && r.caravans > 0);
    }

    #[test]
    fn same_seed_same_trace() {
        let tc = UdpTraceConfig { flows: 5, packets: 100, ..UdpTraceConfig::default() };
        let (mut a, mut b) = (Gen::new(tc.clone()), Gen::new(tc));
        let mut fa = Frames { data: Vec::new(), refs: Vec::new(), payload: 0 };
        let mut fb = Frames { data: Vec::new(), refs: Vec::new(), payload: 0 };
        a.fill(&mut fa, 100, 1 << 20);
        b.fill(&mut fb, 100, 1 << 20);
        assert_eq!(fa.data, fb.data);
        assert_eq!(fa.refs, fb.refs);
    }
}
