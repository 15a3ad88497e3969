//! `px bench gateway` (root): the gateway's real I/O path against Linux
//! forwarding, on the same frames, in one run.
//!
//! Topology: px-lab's gateway line (`legacy` — `gw` — `bnet`, eMTU 1500 /
//! iMTU 9000; the hosts send with TSO/GSO off and receive with GRO off, the
//! middle box's ports have GRO on and TSO off). One generator thread in this
//! process replays the benchmark trace (800 bulk flows plus small flows)
//! as pre-built wire frames from both ends at once: 1448-byte segments from
//! `legacy` into the outer port, 8948-byte segments from `bnet` into the
//! inner port, with `sendmmsg` batches of 64 (`PACKET_QDISC_BYPASS`), as
//! fast as it can (or paced with `--rate-gbps`). One sink thread counts what
//! arrives at each end (frames, sizes, TCP payload per flow). Generator and
//! sink are pinned to the other CPU; their interfaces' receive work is
//! steered there with RPS.
//!
//! Round 1: `px gateway` in the middle namespace, pinned with `taskset` to
//! the forwarding CPU, both ports' RPS to that CPU. Round 2: the middle
//! namespace becomes a Linux router (forwarding on, GRO on its receive
//! ports, RPS of both ports to the same CPU, static neighbours so no ARP is
//! involved). A router cannot cut DF 9000-byte segments to a 1500-byte
//! link, so its outbound frames are the same flows' bytes cut at 1448 (what
//! a b-network at MTU 1500 sends); the inbound frames are the same.
//!
//! CPU: `/proc/stat` of the forwarding CPU (user + nice + system + irq +
//! softirq + steal) over the round, divided by the TCP payload delivered.
//! Caveat: a veth runs its receiver's NAPI (GRO) on the CPU that sent the
//! frame, so the kernel's GRO work on the middle box's ports lands on the
//! generator's CPU in both rounds; everything after GRO (the gateway's
//! AF_PACKET receive, engine, send; or IP forwarding and GSO) is counted.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use px_bench::trace::Chunk;
use px_bench::vs_dpdk::{TraceFrames, trace_frames};
use px_bench::{Direction, TraceConfig};
use px_io::{PacketMeta, PacketSocket, RxBatch, SocketConfig, TxBatch};
use px_lab::exp::cpu::{CpuTimes, REST_CPU, pin_current_thread, steer_rx};
use px_lab::gateway::GatewayProcess;
use px_lab::line::{BNET_DEV, GW_INNER, GW_OUTER, LEGACY_DEV};
use px_lab::{Addressing, Line, LineSpec, Netns};
use px_wire::tcp::{self, TcpOption, TcpSegment};
use serde_json::json;

/// How long the middle box's ports let GRO hold frames across NAPI polls
/// (`gro_flush_timeout`, ns): a NIC's interrupt coalescing.
const GRO_FLUSH_NS: u32 = 50_000;

#[derive(Debug, Args)]
pub struct GatewayBenchArgs {
    /// Gateway workers (each a thread; with more than one, the gateway is
    /// pinned to every CPU).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// Seconds each round replays the trace (looping over it).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Bulk flows in the trace.
    #[arg(long, default_value_t = 800, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    flows: u32,
    /// Inbound frames (1448-byte segments) in the trace.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(100..=2_000_000))]
    packets: u64,
    /// Outbound frames (8948-byte segments) in the trace.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(10..=300_000))]
    split_packets: u64,
    /// Pace the generator to this many Gbps of frames (0: as fast as it can).
    #[arg(long, default_value_t = 0.0)]
    rate_gbps: f64,
    /// The forwarding CPU (default: the last one); the generator and sinks
    /// get CPU 0.
    #[arg(long)]
    cpu: Option<usize>,
    /// Skip the Linux router round.
    #[arg(long)]
    no_router: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The pre-built frames of one round and the flow of each.
struct Frames {
    inbound: TraceFrames,
    outbound: TraceFrames,
    /// Flow id (index into `Flows::keys`) of each inbound / outbound frame.
    in_flow: Vec<u32>,
    out_flow: Vec<u32>,
}

/// Flow keys (IPv4 src, dst, ports) of every frame in both directions.
#[derive(Default)]
struct Flows {
    ids: HashMap<u128, u32>,
}

/// The TCP/IPv4 flow key and payload length of a frame, if it is one.
fn tcp4(frame: &[u8]) -> Option<(u128, usize)> {
    if frame.len() < 54 || frame[12..14] != [0x08, 0x00] || frame[23] != 6 {
        return None;
    }
    let ihl = (frame[14] & 0x0f) as usize * 4;
    let ip_len = u16::from_be_bytes([frame[16], frame[17]]) as usize;
    let th = 14 + ihl;
    let doff = (*frame.get(th + 12)? >> 4) as usize * 4;
    let key = u128::from_be_bytes({
        let mut k = [0u8; 16];
        k[..12].copy_from_slice(frame.get(26..38)?);
        k
    });
    Some((key, ip_len.checked_sub(ihl + doff)?))
}

/// How one replay of a direction's frames moves its flows forward: the
/// payload each flow carries in one pass, and the pass's length on the
/// trace's 1 ms timestamp clock.
struct PassStep {
    seq: Vec<u32>,
    ts: u32,
}

impl PassStep {
    fn of(c: &Chunk, flow_of: &[u32], flows: usize) -> PassStep {
        let mut seq = vec![0u32; flows];
        for (f, id) in c.frames.iter().zip(flow_of) {
            seq[*id as usize] = seq[*id as usize].wrapping_add((f.len - f.payload_at as usize) as u32);
        }
        let ts = c.frames.last().map_or(0, |f| (f.t_ns / 1_000_000) as u32) + 1;
        PassStep { seq, ts }
    }

    /// Rewrites every TCP/IPv4 frame of `c` for the next pass, so that a
    /// replay continues each flow's byte stream instead of sending it
    /// again: the sequence number moves on by the flow's payload in one
    /// pass, TSval and TSecr by the pass's length (a gateway must see new
    /// in-order data with timestamps that do not go back, or it merges
    /// nothing: repeated sequence space is a retransmission). The TCP
    /// checksum is updated incrementally (RFC 1624).
    fn advance(&self, c: &mut Chunk, flow_of: &[u32]) {
        for (i, id) in flow_of.iter().enumerate().take(c.frames.len()) {
            let f = c.frame_mut(i);
            if f.len() < 54 || f[12..14] != [0x08, 0x00] || f[23] != 6 {
                continue;
            }
            let th = 14 + (f[14] & 0x0f) as usize * 4;
            let Ok(seg) = TcpSegment::new_checked(&f[th..]) else { continue };
            let ts_at = seg.options().filter_map(Result::ok).find_map(|(at, o)| {
                matches!(o, TcpOption::Timestamps { .. }).then_some(th + tcp::MIN_HEADER_LEN + at + 2)
            });
            let (seq, mut csum) = (seg.seq(), seg.checksum());
            let next = seq.wrapping_add(self.seq[*id as usize]);
            csum = px_wire::checksum::update_u32(csum, seq, next);
            if let Some(at) = ts_at {
                for at in [at, at + 4] {
                    let old = u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]]);
                    let new = old.wrapping_add(self.ts);
                    csum = px_wire::checksum::update_u32(csum, old, new);
                    f[at..at + 4].copy_from_slice(&new.to_be_bytes());
                }
            }
            let mut seg = TcpSegment::new_unchecked(&mut f[th..]);
            seg.set_seq(next);
            seg.set_checksum(csum);
        }
    }
}

impl Flows {
    fn ids_of(&mut self, c: &Chunk) -> Vec<u32> {
        c.frames
            .iter()
            .map(|f| {
                let key = tcp4(&c.data[f.offset..f.offset + f.len]).map_or(0, |k| k.0);
                let n = self.ids.len() as u32;
                *self.ids.entry(key).or_insert(n)
            })
            .collect()
    }
}

/// What the generator sent and the sinks received in one round.
#[derive(Default)]
struct Tally {
    frames_sent: u64,
    bytes_sent: u64,
    payload_sent: Vec<u64>,
    frames_in: [u64; 2],
    frames_recv: u64,
    bytes_recv: u64,
    payload_recv: Vec<u64>,
    /// Largest frame (Ethernet header on) at the legacy and bnet sinks.
    max_frame: [usize; 2],
    /// Frames above the link's MTU at either sink.
    oversize: u64,
    /// TCP data frames and full-iMSS ones at the bnet sink (the yield).
    bnet_data: u64,
    bnet_full: u64,
    other_frames: u64,
    seconds: f64,
}

fn open(ns: &Netns, dev: &str) -> Result<PacketSocket, String> {
    let cfg = SocketConfig {
        vnet_hdr: false,
        promiscuous: true,
        rcvbuf: 64 << 20,
        sndbuf: 16 << 20,
        qdisc_bypass: true,
        ..SocketConfig::default()
    };
    let d = dev.to_string();
    ns.run(move || PacketSocket::open(&d, &cfg)).map_err(|e| e.to_string())?.map_err(|e| e.to_string())
}

/// Replays the frames from both ends until `seconds` pass, counting what the
/// sinks see; the sinks stop 300 ms after the last frame arrives.
fn replay(
    line: &Line,
    frames: &mut Frames,
    ids: &HashMap<u128, u32>,
    a: &GatewayBenchArgs,
    gen_cpu: usize,
) -> Result<Tally, String> {
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
            at += sock.send_batch(&mut txb, &all[at..]).map_err(|e| e.to_string())?;
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let done = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let (seconds, rate) = (a.seconds, a.rate_gbps);
    let imss = (px_lab::line::IMTU - 52) as usize;
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
                        let mtu = (if k == 0 { px_lab::line::EMTU } else { px_lab::line::IMTU }) as usize;
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
            }
            let end = (next[d] + 64).min(chunk.frames.len());
            let pending: Vec<(PacketMeta, &[u8])> = chunk.frames[next[d]..end]
                .iter()
                .map(|f| (PacketMeta::PLAIN, &chunk.data[f.offset..f.offset + f.len]))
                .collect();
            let n = sock.send_batch(&mut txb, &pending).unwrap_or(0);
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
        let r = sink.join().map_err(|_| "sink thread panicked".to_string())?;
        Ok(Tally {
            frames_sent: g.frames_sent,
            bytes_sent: g.bytes_sent,
            payload_sent: g.payload_sent,
            frames_in: g.frames_in,
            ..r
        })
    })
}

/// The PID of CPU `cpu`'s `ksoftirqd` thread (where softirq work goes
/// when it outruns the interrupt exits).
fn ksoftirqd(cpu: usize) -> Option<u32> {
    let want = format!("ksoftirqd/{cpu}");
    std::fs::read_dir("/proc").ok()?.filter_map(Result::ok).find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        (std::fs::read_to_string(e.path().join("comm")).ok()?.trim() == want).then_some(pid)
    })
}

/// One round's figures. `own_s` is the forwarder's own CPU time (see
/// `own_cpu_s_per_gb`).
fn report(t: &Tally, cpu: &px_lab::exp::cpu::CpuUse, own_s: f64) -> serde_json::Value {
    let s = t.seconds.max(1e-9);
    let payload: u64 = t.payload_recv.iter().sum();
    let (sent, recv) = (&t.payload_sent, &t.payload_recv);
    let flows = sent.iter().filter(|b| **b > 0).count();
    let exact = sent.iter().zip(recv).filter(|(a, b)| **a > 0 && a == b).count();
    json!({
        "gbps": payload as f64 * 8.0 / s / 1e9,
        "mpps_in": t.frames_sent as f64 / s / 1e6,
        "mpps_out": t.frames_recv as f64 / s / 1e6,
        "frames_in": t.frames_sent, "frames_in_outer": t.frames_in[0], "frames_in_inner": t.frames_in[1],
        "frames_out": t.frames_recv, "payload_sent": sent.iter().sum::<u64>(), "payload_delivered": payload,
        "largest_frame_out_legacy": t.max_frame[0], "largest_frame_out_bnet": t.max_frame[1],
        "oversize_frames": t.oversize, "other_frames": t.other_frames,
        "yield": if t.bnet_data == 0 { 0.0 } else { t.bnet_full as f64 / t.bnet_data as f64 },
        "flows": flows, "flows_exact": exact,
        "seconds": t.seconds,
        "cpu_busy_s": cpu.busy_s, "cpu_softirq_irq_s": cpu.softirq_s,
        "cpu_s_per_gb": cpu.busy_s / (payload as f64 / 1e9).max(1e-12),
        "own_cpu_s": own_s,
        "own_cpu_s_per_gb": own_s / (payload as f64 / 1e9).max(1e-12),
    })
}

fn sh(ns: &Netns, script: &str) -> Result<(), String> {
    ns.exec("sh", &["-c", script]).map(drop).map_err(|e| e.to_string())
}

pub fn run(a: GatewayBenchArgs) -> Result<ExitCode, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("px bench gateway needs root (network namespaces, AF_PACKET)".into());
    }
    px_lab::install_signal_cleanup().map_err(|e| e.to_string())?;
    let ncpu = px_lab::exp::cpu::online_cpus();
    let cpu = a.cpu.unwrap_or(ncpu - 1);
    let gen_cpu = if cpu == REST_CPU { ncpu - 1 } else { REST_CPU };
    let say = |m: &str| {
        if !a.json {
            eprintln!("px bench gateway: {m}");
        }
    };
    let flows = a.flows as usize;
    let (imtu, emtu) = (px_lab::line::IMTU as u16, px_lab::line::EMTU as u16);
    let inbound_cfg = TraceConfig { flows, ..TraceConfig::inbound_default() };
    let outbound_cfg = TraceConfig { flows, ..TraceConfig::outbound_default() };
    say(&format!("generating {} inbound + {} outbound frames…", a.packets, a.split_packets));
    let mut keys = Flows::default();
    let inbound = trace_frames(&inbound_cfg, a.packets as usize, imtu, emtu);
    let outbound = trace_frames(&outbound_cfg, a.split_packets as usize, imtu, emtu);
    // The router's outbound: the same flows cut at the eMTU's MSS, as many
    // payload bytes.
    let recut_n = (outbound.data.payload_bytes / 1448).max(1) as usize;
    let recut_cfg = TraceConfig { segment: 1448, direction: Direction::Outbound, ..outbound_cfg.clone() };
    let recut = trace_frames(&recut_cfg, recut_n, imtu, emtu);
    let in_flow = keys.ids_of(&inbound.data);
    let out_flow = keys.ids_of(&outbound.data);
    let recut_flow = keys.ids_of(&recut.data);

    let line = Line::build(LineSpec::gateway_lab()).map_err(|e| e.to_string())?;
    for (ns, dev) in [(line.left_ns(), LEGACY_DEV), (line.right_ns(), BNET_DEV)] {
        steer_rx(ns, dev, gen_cpu)?;
        // No addresses, no IPv6 autoconfiguration chatter on the ends.
        let _ = ns.set_sysctl(&format!("net.ipv6.conf.{dev}.disable_ipv6"), "1");
    }
    for dev in [GW_OUTER, GW_INNER] {
        steer_rx(line.middle_ns(), dev, cpu)?;
        // Interrupt coalescing, as a NIC has: without it the generator's
        // every frame runs the port's NAPI poll on its own (veth polls at
        // the sender's bottom-half exit), and GRO never sees two frames.
        let s = format!(
            "echo {GRO_FLUSH_NS} > /sys/class/net/{dev}/gro_flush_timeout && \
             echo 2 > /sys/class/net/{dev}/napi_defer_hard_irqs"
        );
        sh(line.middle_ns(), &s)?;
    }
    let mut out = serde_json::Map::new();

    // Round 1: px gateway.
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let pin =
        if a.workers > 1 { (0..ncpu).map(|c| c.to_string()).collect::<Vec<_>>().join(",") } else { cpu.to_string() };
    let workers = a.workers.to_string();
    say(&format!("round 1: px gateway ({} worker(s), CPU {pin}) for {} s…", a.workers, a.seconds));
    let gw = GatewayProcess::start_wrapped(&line, &["taskset", "-c", &pin], &exe, &["--workers", &workers])?;
    let mut frames = Frames { inbound, outbound, in_flow, out_flow };
    let own = |pid: Option<u32>| pid.and_then(px_lab::exp::cpu::process_cpu_seconds).unwrap_or(0.0);
    let (c0, p0) = (CpuTimes::now(), own(Some(gw.pid)));
    let t = replay(&line, &mut frames, &keys.ids, &a, gen_cpu)?;
    let use_gw = c0.since(cpu);
    let p1 = own(Some(gw.pid));
    let exit = gw.stop()?;
    let mut g = report(&t, &use_gw, p1 - p0 + use_gw.softirq_s);
    g["stats"] = exit.stats.clone();
    g["engine_yield"] = json!({
        "inner_tcp_full_out": exit.counter("inner_tcp_full_out"), "inner_tcp_data_out": exit.counter("inner_tcp_data_out"),
    });
    out.insert("gateway_gbps".into(), g["gbps"].clone());
    out.insert("gateway_cpu_s_per_gb".into(), g["cpu_s_per_gb"].clone());
    out.insert("gateway_own_cpu_s_per_gb".into(), g["own_cpu_s_per_gb"].clone());
    out.insert("gateway_yield".into(), g["yield"].clone());
    out.insert("gateway".into(), g);

    // Round 2: Linux forwarding on the same line.
    if !a.no_router {
        say(&format!("round 2: Linux router (GRO on, RPS to CPU {cpu}) for {} s…", a.seconds));
        line.address(Addressing::Router).map_err(|e| e.to_string())?;
        let m = line.middle_ns();
        let mac = |dev: &str| {
            m.exec("cat", &[&format!("/sys/class/net/{dev}/address")])
                .map(|s| s.trim().to_string())
                .map_err(|e| e.to_string())
        };
        let (outer_mac, inner_mac) = (mac(GW_OUTER)?, mac(GW_INNER)?);
        // Static neighbours with MACs nobody owns: the ends' stacks ignore
        // the frames (other host), their packet sockets still count them.
        let mut script = String::new();
        for x in 1..=253 {
            script += &format!("neigh replace 198.51.100.{x} lladdr 02:00:00:00:00:fd dev {GW_OUTER} nud permanent\n");
            script += &format!("neigh replace 203.0.113.{x} lladdr 02:00:00:00:00:fe dev {GW_INNER} nud permanent\n");
        }
        let batch = std::env::temp_dir().join(format!("px-bench-neigh-{}", std::process::id()));
        std::fs::write(&batch, script).map_err(|e| e.to_string())?;
        let r = m.ip(&["-batch", &batch.to_string_lossy()]);
        let _ = std::fs::remove_file(&batch);
        r.map_err(|e| e.to_string())?;
        sh(m, "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0")?;
        let parse = |s: &str| -> Result<[u8; 6], String> {
            let v: Vec<u8> = s.split(':').filter_map(|h| u8::from_str_radix(h, 16).ok()).collect();
            v.try_into().map_err(|_| format!("bad MAC {s}"))
        };
        let (om, im) = (parse(&outer_mac)?, parse(&inner_mac)?);
        let mut inbound = frames.inbound;
        let mut outbound = recut;
        // Toward the router's port each frame enters by.
        for (c, dst) in [
            (&mut inbound.data, om),
            (&mut inbound.syns, om),
            (&mut inbound.synacks, im),
            (&mut outbound.data, im),
            (&mut outbound.syns, im),
            (&mut outbound.synacks, om),
        ] {
            for i in 0..c.frames.len() {
                c.frame_mut(i)[0..6].copy_from_slice(&dst);
            }
        }
        let mut frames = Frames { inbound, outbound, in_flow: frames.in_flow, out_flow: recut_flow };
        let ksoft = ksoftirqd(cpu);
        let (c0, k0) = (CpuTimes::now(), own(ksoft));
        let t = replay(&line, &mut frames, &keys.ids, &a, gen_cpu)?;
        let use_r = c0.since(cpu);
        let r = report(&t, &use_r, own(ksoft) - k0 + use_r.softirq_s);
        out.insert("router_gbps".into(), r["gbps"].clone());
        out.insert("router_cpu_s_per_gb".into(), r["cpu_s_per_gb"].clone());
        out.insert("router_own_cpu_s_per_gb".into(), r["own_cpu_s_per_gb"].clone());
        out.insert("router".into(), r);
    } else {
        out.insert("router_gbps".into(), serde_json::Value::Null);
        out.insert("router_cpu_s_per_gb".into(), serde_json::Value::Null);
    }
    drop(line);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    out.insert(
        "setup".into(),
        json!({
            "cpu": cpu, "generator_cpu": gen_cpu, "workers": a.workers, "seconds": a.seconds, "flows": a.flows,
            "inbound_frames": a.packets, "outbound_frames": a.split_packets, "rate_gbps": a.rate_gbps,
            "loadavg": load.trim(),
            "offloads": "hosts: TSO/GSO/GRO off; middle box ports: GRO on, TSO off, gro_flush_timeout 50 us with napi_defer_hard_irqs 2 (a NIC's interrupt coalescing)",
            "cpu_accounting": "cpu_s_per_gb: /proc/stat of the forwarding CPU, user+nice+system+irq+softirq+steal over \
                               the round (includes any other process on that CPU); own_cpu_s_per_gb: the forwarder's own \
                               time, robust to other processes there: the gateway process's user+system (all threads) plus \
                               the CPU's softirq+irq, or for the router ksoftirqd/CPU's time plus the CPU's softirq+irq; \
                               veth GRO runs on the sender's (generator's) CPU in both rounds",
            "router_outbound": "the same flows cut at 1448 B (a router cannot cut DF 9000-byte segments)",
            "gbps": "TCP payload delivered at both sinks / seconds until the last frame arrived",
        }),
    );
    let o = serde_json::Value::Object(out);
    if a.json {
        println!("{o}");
    } else {
        let row = |name: &str, v: &serde_json::Value| {
            println!(
                "  {name:<8} {:>8.3} Gbps  {:>6.3} Mpps in  {:>6.3} Mpps out  largest out {:>5} / {:>5} B  yield {:.3}  \
                 {:.3} CPU-s/GB (own {:.3})  flows exact {}/{}",
                v["gbps"].as_f64().unwrap_or(0.0),
                v["mpps_in"].as_f64().unwrap_or(0.0),
                v["mpps_out"].as_f64().unwrap_or(0.0),
                v["largest_frame_out_legacy"],
                v["largest_frame_out_bnet"],
                v["yield"].as_f64().unwrap_or(0.0),
                v["cpu_s_per_gb"].as_f64().unwrap_or(0.0),
                v["own_cpu_s_per_gb"].as_f64().unwrap_or(0.0),
                v["flows_exact"],
                v["flows"],
            )
        };
        println!(
            "px bench gateway — forwarding CPU {cpu}, generator CPU {gen_cpu}, {} s per round, load {}",
            a.seconds,
            load.trim()
        );
        row("gateway", &o["gateway"]);
        if !a.no_router {
            row("router", &o["router"]);
        }
        println!(
            "  (largest out: legacy side / b-network side; CPU-s/GB from /proc/stat of CPU {cpu}, softirq included)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use px_wire::checksum::{Sum, fold, pseudo_v4};

    /// Sequence number, TSval and payload length of a trace frame (IPv4,
    /// no IP options, NOP NOP TS first in the TCP options).
    fn fields(f: &[u8]) -> (u32, u32, u32) {
        let at = |i: usize| u32::from_be_bytes([f[i], f[i + 1], f[i + 2], f[i + 3]]);
        (at(38), at(34 + 24), tcp4(f).unwrap().1 as u32)
    }

    fn tcp_checksum_ok(f: &[u8]) -> bool {
        let ip_len = u16::from_be_bytes([f[16], f[17]]) as usize;
        let src = std::net::Ipv4Addr::new(f[26], f[27], f[28], f[29]);
        let dst = std::net::Ipv4Addr::new(f[30], f[31], f[32], f[33]);
        let l4 = &f[34..14 + ip_len];
        fold(pseudo_v4(src, dst, 6, l4.len() as u16).plus(Sum::of(l4))) == 0xffff
    }

    #[test]
    fn a_second_pass_continues_every_flow() {
        let cfg = TraceConfig { flows: 5, small_share: 0.0, ..TraceConfig::inbound_default() };
        let mut t = trace_frames(&cfg, 600, 9000, 1500);
        let mut keys = Flows::default();
        let ids = keys.ids_of(&t.data);
        let step = PassStep::of(&t.data, &ids, keys.ids.len());
        // Where each flow's stream ends in the first pass, and its last TSval.
        let mut end: HashMap<u32, (u32, u32)> = HashMap::new();
        for (i, id) in ids.iter().enumerate() {
            let (seq, tsval, len) = fields(t.data.frame_mut(i));
            end.insert(*id, (seq.wrapping_add(len), tsval));
        }
        step.advance(&mut t.data, &ids);
        let mut seen = std::collections::HashSet::new();
        for (i, id) in ids.iter().enumerate() {
            let f = t.data.frame_mut(i);
            assert!(tcp_checksum_ok(f), "frame {i}: checksum after the shift");
            let (seq, tsval, _) = fields(f);
            if seen.insert(*id) {
                let (want_seq, last_ts) = end[id];
                assert_eq!(seq, want_seq, "flow {id} continues where the first pass ended");
                assert!(tsval >= last_ts, "flow {id}: TSval {tsval} went back from {last_ts}");
            }
        }
        assert_eq!(seen.len(), 5);
    }
}
