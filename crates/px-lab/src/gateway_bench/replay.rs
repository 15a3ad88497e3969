//! The generator and the sinks of `px bench gateway`: one thread replays
//! the pre-built frames from both ends of the line through packet sockets
//! (`sendmmsg` batches of 64, `PACKET_QDISC_BYPASS`), as fast as it can or
//! paced; one thread counts what arrives at each end (frames, sizes, TCP
//! payload per flow). Both are pinned to the generator's CPU.
//!
//! At the end of its frames a direction starts over with every flow moved
//! on ([`PassStep`]), so the forwarder sees one long stream per flow, never
//! a retransmission. The sinks stop 300 ms after the last frame arrived.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_bench::replay::{PassStep, tcp4};
use px_bench::vs_dpdk::TraceFrames;
use px_io::{PacketMeta, PacketSocket, RxBatch, SendError, SocketConfig, TxBatch};

use super::GatewayBenchError;
use px_netns::cpu::pin_current_thread;
use px_netns::line::{BNET_DEV, EMTU, IMTU, LEGACY_DEV};
use px_netns::{Line, Netns};

/// The pre-built frames of one round and the flow of each.
pub(super) struct Frames {
    pub inbound: TraceFrames,
    pub outbound: TraceFrames,
    /// Flow id ([`px_bench::replay::FlowIds`]) of each inbound / outbound frame.
    pub in_flow: Vec<u32>,
    pub out_flow: Vec<u32>,
}

/// What the generator sent and the sinks received in one round.
#[derive(Default)]
pub(super) struct Tally {
    pub frames_sent: u64,
    pub bytes_sent: u64,
    pub payload_sent: Vec<u64>,
    pub frames_in: [u64; 2],
    pub frames_recv: u64,
    pub bytes_recv: u64,
    pub payload_recv: Vec<u64>,
    /// Largest frame (Ethernet header on) at the legacy and bnet sinks.
    pub max_frame: [usize; 2],
    /// Frames above the link's MTU at either sink.
    pub oversize: u64,
    /// TCP data frames and full-iMSS ones at the bnet sink (the yield).
    pub bnet_data: u64,
    pub bnet_full: u64,
    pub other_frames: u64,
    pub seconds: f64,
}

fn open(ns: &Netns, dev: &str) -> Result<PacketSocket, GatewayBenchError> {
    let cfg = SocketConfig {
        vnet_hdr: false,
        promiscuous: true,
        rcvbuf: 64 << 20,
        sndbuf: 16 << 20,
        qdisc_bypass: true,
        ..SocketConfig::default()
    };
    let d = dev.to_string();
    ns.run(move || PacketSocket::open(&d, &cfg))?.map_err(|e| GatewayBenchError::Socket(e.to_string()))
}

/// Replays the frames from both ends for `seconds` (paced to `rate_gbps`
/// when above 0), counting what the sinks see.
pub(super) fn replay(
    line: &Line,
    frames: &mut Frames,
    ids: &HashMap<u128, u32>,
    (seconds, rate): (f64, f64),
    gen_cpu: usize,
) -> Result<Tally, GatewayBenchError> {
    let flows = ids.len();
    let tx = [open(line.left_ns(), LEGACY_DEV)?, open(line.right_ns(), BNET_DEV)?];
    let rx = [open(line.left_ns(), LEGACY_DEV)?, open(line.right_ns(), BNET_DEV)?];
    // The bulk flows' handshakes first, so the gateway knows both ends' MSS:
    // inbound flows open from the legacy side, outbound ones from the bnet side.
    let mut txb = TxBatch::new(64);
    for (c, sock) in [
        (&frames.inbound.syns, &tx[0]),
        (&frames.outbound.syns, &tx[1]),
        (&frames.inbound.synacks, &tx[1]),
        (&frames.outbound.synacks, &tx[0]),
    ] {
        let all: Vec<(PacketMeta, &[u8])> =
            c.frames.iter().map(|f| (PacketMeta::PLAIN, &c.data[f.offset..f.offset + f.len])).collect();
        let mut at = 0;
        while at < all.len() {
            at += send_some(sock, &mut txb, &all[at..]).map_err(|e| GatewayBenchError::Socket(e.to_string()))?;
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The inbound flows' receivers acknowledge what came before each pass
    // and open their largest window (a gateway takes data from outside only
    // inside what the receiver allows), as frames from the bnet side toward
    // where the SYN-ACKs went.
    let to = frames.inbound.synacks.frames.first().map(|f| {
        let mut m = [0u8; 6];
        m.copy_from_slice(&frames.inbound.synacks.data[f.offset..f.offset + 6]);
        m
    });
    let send_acks = |data: &px_bench::trace::Chunk, txb: &mut TxBatch| -> Result<(), GatewayBenchError> {
        let mut acks = data.receiver_acks();
        for i in 0..acks.frames.len() {
            if let Some(m) = to {
                acks.frame_mut(i)[0..6].copy_from_slice(&m);
            }
        }
        let all: Vec<(PacketMeta, &[u8])> =
            acks.frames.iter().map(|f| (PacketMeta::PLAIN, &acks.data[f.offset..f.offset + f.len])).collect();
        let mut at = 0;
        while at < all.len() {
            at += send_some(&tx[1], txb, &all[at..]).map_err(|e| GatewayBenchError::Socket(e.to_string()))?;
            std::thread::yield_now();
        }
        Ok(())
    };
    send_acks(&frames.inbound.data, &mut txb)?;
    std::thread::sleep(Duration::from_millis(200));
    let done = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let imss = (IMTU - 52) as usize;
    std::thread::scope(|s| {
        let done_rx = done.clone();
        let sink = s.spawn(move || {
            let _ = pin_current_thread(gen_cpu);
            let mut t = Tally { payload_recv: vec![0; flows], ..Tally::default() };
            let mut batch = RxBatch::new(64, 16 << 10);
            let mut last = Instant::now();
            loop {
                let mut got = 0;
                for (k, sock) in rx.iter().enumerate() {
                    let n = sock.recv_batch(&mut batch).unwrap_or(0);
                    got += n;
                    for p in batch.iter().filter_map(Result::ok) {
                        let len = p.frame.len();
                        t.frames_recv += 1;
                        t.bytes_recv += len as u64;
                        t.max_frame[k] = t.max_frame[k].max(len);
                        let mtu = (if k == 0 { EMTU } else { IMTU }) as usize;
                        t.oversize += (len > mtu + 14) as u64;
                        match tcp4(p.frame).and_then(|(key, pl)| ids.get(&key).map(|id| (*id, pl))) {
                            Some((id, pl)) => {
                                t.payload_recv[id as usize] += pl as u64;
                                if k == 1 && pl > 0 {
                                    t.bnet_data += 1;
                                    t.bnet_full += (pl == imss) as u64;
                                }
                            }
                            None => t.other_frames += 1,
                        }
                    }
                }
                if got > 0 {
                    last = Instant::now();
                } else if done_rx.load(Ordering::Relaxed) && last.elapsed() > Duration::from_millis(300) {
                    break;
                } else {
                    std::thread::yield_now();
                }
            }
            t.seconds = last.duration_since(t0).as_secs_f64();
            t
        });
        let _ = pin_current_thread(gen_cpu);
        let mut g = Tally { payload_sent: vec![0; flows], ..Tally::default() };
        let steps = [
            PassStep::of(&frames.inbound.data, &frames.in_flow, flows),
            PassStep::of(&frames.outbound.data, &frames.out_flow, flows),
        ];
        let totals = [frames.inbound.data.data.len() as f64, frames.outbound.data.data.len() as f64];
        let (mut next, mut sent_bytes) = ([0usize; 2], [0f64; 2]);
        while t0.elapsed().as_secs_f64() < seconds {
            // The direction behind in its share of bytes goes next, so both
            // directions keep the trace's byte ratio.
            let d = if sent_bytes[0] / totals[0] <= sent_bytes[1] / totals[1] { 0 } else { 1 };
            let (chunk, ids, sock) = match d {
                0 => (&mut frames.inbound.data, &frames.in_flow, &tx[0]),
                _ => (&mut frames.outbound.data, &frames.out_flow, &tx[1]),
            };
            if next[d] == chunk.frames.len() {
                // The end of the trace: the next pass continues every flow.
                steps[d].advance(chunk, ids);
                next[d] = 0;
                if d == 0 {
                    send_acks(chunk, &mut txb)?;
                }
            }
            let end = (next[d] + 64).min(chunk.frames.len());
            let pending: Vec<(PacketMeta, &[u8])> = chunk.frames[next[d]..end]
                .iter()
                .map(|f| (PacketMeta::PLAIN, &chunk.data[f.offset..f.offset + f.len]))
                .collect();
            let n = send_some(sock, &mut txb, &pending).unwrap_or(0);
            for (f, id) in chunk.frames[next[d]..next[d] + n].iter().zip(&ids[next[d]..]) {
                g.payload_sent[*id as usize] += (f.len - f.payload_at as usize) as u64;
                g.bytes_sent += f.len as u64;
                sent_bytes[d] += f.len as f64;
            }
            g.frames_sent += n as u64;
            g.frames_in[d] += n as u64;
            next[d] += n;
            if n == 0 {
                std::thread::yield_now();
            }
            if rate > 0.0 {
                let ahead = g.bytes_sent as f64 * 8.0 / (rate * 1e9) - t0.elapsed().as_secs_f64();
                if ahead > 0.0 {
                    std::thread::sleep(Duration::from_secs_f64(ahead));
                }
            }
        }
        done.store(true, Ordering::Relaxed);
        let r = sink.join().map_err(|_| GatewayBenchError::SinkPanicked)?;
        Ok(Tally {
            frames_sent: g.frames_sent,
            bytes_sent: g.bytes_sent,
            payload_sent: g.payload_sent,
            frames_in: g.frames_in,
            ..r
        })
    })
}

/// Sends `frames` in order through px-io's send queue until the send buffer
/// fills; returns how many left (a frame the kernel refuses is an error).
fn send_some(sock: &PacketSocket, txb: &mut TxBatch, frames: &[(PacketMeta, &[u8])]) -> Result<usize, SendError> {
    let mut q = sock.queue(txb);
    let mut frames = frames.iter().copied();
    let mut sent = 0;
    while q.fill(&mut frames) > 0 {
        match q.send() {
            Ok(n) if n > 0 => sent += n,
            Ok(_) | Err(SendError::WouldBlock) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}
