//! The DPDK datapath against the engine as the AF_PACKET worker drives
//! it, without root: `px gateway --datapath dpdk` on two `net_pcap` ports
//! (DPDK reads the trace from pcap files and writes what leaves into
//! others; no hugepages, no NIC), and the same engine in this process fed
//! the same frames in the same order. What leaves each port must be the
//! same, frame for frame and byte for byte, per flow.
//!
//! The order the gateway takes the frames in is its worker's: one receive
//! batch from the outer port, then one from the inner port, round after
//! round (`batch` frames each; the pcap driver fills a batch while its
//! file lasts); the reference takes them in that order too. Time is the
//! one thing the two runs do not share, and a worker reads the clock once
//! per batch: so the trace is laid out in batches of 1024 (the largest)
//! such that no merge is open across two batches — round 1: the inbound
//! flows' SYNs (then forwarded UDP filling the batch) and their SYN-ACKs,
//! the outbound flows' handshake and data (cut at once); round 2: every
//! inbound data segment. What is held at the end leaves by its timer, in
//! both runs.
//!
//! Skips with a message where this `px` was built without DPDK.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::net::Ipv4Addr;

use px_bench::trace::{Chunk, Direction, Trace, TraceConfig};
use px_gateway::{Engine, Port};
use px_io::PacketMeta;
use px_runtime::gateway::GatewayConfig;
use px_wire::checksum::{Sum, pseudo_v4};

/// Frames per receive batch, the gateway's and the reference's: the
/// largest, so that a round takes a whole part of the trace.
const BATCH: usize = 1024;

/// A scratch directory removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(what: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("px-dpdk-test-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if std::env::var_os("PX_KEEP").is_some() {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `frames` as a classic pcap (microseconds, Ethernet).
fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&262_144u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).unwrap();
}

/// Reads a classic pcap (either byte order, µs or ns).
fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(b.len() >= 24, "{}: no pcap header", path.display());
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    let le = matches!(magic, 0xa1b2_c3d4 | 0xa1b2_3c4d);
    assert!(le || matches!(magic.swap_bytes(), 0xa1b2_c3d4 | 0xa1b2_3c4d), "{}: magic {magic:x}", path.display());
    let u32_at = |o: usize| {
        let v: [u8; 4] = b[o..o + 4].try_into().unwrap();
        if le { u32::from_le_bytes(v) } else { u32::from_be_bytes(v) }
    };
    let (mut at, mut frames) = (24, Vec::new());
    while at + 16 <= b.len() {
        let (incl, orig) = (u32_at(at + 8) as usize, u32_at(at + 12) as usize);
        assert_eq!(incl, orig, "a frame was cut");
        frames.push(b[at + 16..at + 16 + incl].to_vec());
        at += 16 + incl;
    }
    frames
}

fn chunk_frames(c: &Chunk) -> Vec<Vec<u8>> {
    c.frames.iter().map(|f| c.data[f.offset..f.offset + f.len].to_vec()).collect()
}

/// A UDP/IPv4 datagram from an outer host to an inner one (forwarded as
/// it is: no caravan prefix is configured).
fn udp_in(n: u16) -> Vec<u8> {
    let payload = [n as u8; 100];
    let (src, dst) = (Ipv4Addr::new(198, 51, 100, 9), Ipv4Addr::new(203, 0, 113, 9));
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let ip_len = 20 + 8 + payload.len() as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[4..6].copy_from_slice(&n.to_be_bytes());
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let c = Sum::of(&ip).checksum();
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut udp = vec![0x30, 0x39, 0x11, 0x5c, 0, 0, 0, 0];
    udp[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    udp.extend_from_slice(&payload);
    let c = pseudo_v4(src, dst, 17, ip_len - 20).plus(Sum::of(&udp)).checksum();
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&udp);
    f
}

/// The trace each port receives, [inner, outer], laid out in batches as
/// the module docs say.
fn traces() -> [Vec<Vec<u8>>; 2] {
    let flows = |dir: Direction, seed: u64, segments: usize| {
        let base = match dir {
            Direction::Inbound => TraceConfig::inbound_default(),
            Direction::Outbound => TraceConfig::outbound_default(),
        };
        let cfg = TraceConfig { flows: 12, seed, small_share: 0.0, ..base };
        let mut t = Trace::new(cfg, 8948);
        let [syns, synacks] = t.handshakes(1460, 8960);
        let mut data = Chunk::default();
        t.fill(&mut data, segments, usize::MAX);
        (chunk_frames(&syns), chunk_frames(&synacks), chunk_frames(&data))
    };
    let (in_syns, in_synacks, in_data) = flows(Direction::Inbound, 7, 900);
    let (out_syns, out_synacks, out_data) = flows(Direction::Outbound, 11, 300);
    let mut outer = in_syns;
    let filler = BATCH - outer.len();
    outer.extend((0..filler as u16).map(udp_in));
    outer.extend(out_synacks);
    outer.extend(in_data);
    let mut inner = in_synacks;
    inner.extend(out_syns);
    inner.extend(out_data);
    assert!(outer.len() <= 2 * BATCH && inner.len() <= BATCH, "the layout's rounds");
    [inner, outer]
}

/// The 5-tuple of a frame's flow as text ("other" for what is not TCP/UDP
/// over IP), the same for both directions' frames of one flow.
fn flow_of(frame: &[u8]) -> String {
    match px_wire::FrameInfo::parse(frame) {
        Ok(Some(i)) => {
            let ports = match i.transport {
                px_wire::Transport::Tcp { src_port, dst_port, .. }
                | px_wire::Transport::Udp { src_port, dst_port, .. } => (src_port, dst_port),
                _ => (0, 0),
            };
            let (a, b) = ((i.src, ports.0), (i.dst, ports.1));
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            format!("{} {lo:?} {hi:?}", i.protocol)
        }
        _ => "other".into(),
    }
}

/// Frames of each port, by flow, in the order they left.
type ByFlow = [BTreeMap<String, Vec<Vec<u8>>>; 2];

fn by_flow(frames: [Vec<Vec<u8>>; 2]) -> ByFlow {
    frames.map(|list| {
        let mut m: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        for f in list {
            m.entry(flow_of(&f)).or_default().push(f);
        }
        m
    })
}

/// What the engine emits for the trace in this process, fed as the worker
/// feeds it, per port; also how many holds left by their timer and the
/// engine's (merged_out, split_out) counts.
fn reference(cfg: &GatewayConfig, [inner, outer]: &[Vec<Vec<u8>>; 2]) -> ([Vec<Vec<u8>>; 2], u64, (u64, u64)) {
    // Ports without TSO (pcap has none): everything is cut in software, as
    // an AF_PACKET gateway with `gro_gso = false` does.
    let ecfg =
        px_gateway::Config { inner_gso: false, outer_gso: false, ..cfg.engine_config(cfg.imtu, cfg.emtu, 1).unwrap() };
    let mut engine = Engine::new(ecfg).unwrap();
    let now = Instant::now();
    let mut out: [Vec<Vec<u8>>; 2] = Default::default();
    let drain = |e: &mut Engine, out: &mut [Vec<Vec<u8>>; 2]| {
        while let Some(t) = e.poll_transmit() {
            out[t.port as usize].push(t.frame().to_vec());
            e.recycle(t.buf);
        }
    };
    let (mut i, mut o) = (0, 0);
    while i < inner.len() || o < outer.len() {
        for (port, list, at) in [(Port::Outer, outer, &mut o), (Port::Inner, inner, &mut i)] {
            let end = (*at + BATCH).min(list.len());
            for f in &list[*at..end] {
                let mut frame = f.clone();
                let v = engine.handle_packet(now, port, &mut frame, PacketMeta::PLAIN);
                drain(&mut engine, &mut out);
                if let Some((_, range)) = v.forwarded(frame.len()) {
                    out[port.other() as usize].push(frame[range].to_vec());
                }
            }
            *at = end;
        }
    }
    // The gateway runs on after the trace: what is held leaves by its timer.
    engine.handle_timeout(now + Duration::from_secs(1));
    drain(&mut engine, &mut out);
    engine.flush_all(now + Duration::from_secs(1));
    drain(&mut engine, &mut out);
    let c = engine.counters();
    (out, c.flush[px_gateway::FlushReason::Timeout as usize], (c.merged_out, c.split_out))
}

/// What left each port (inner, outer), the final counters, and the log.
type GatewayRun = ([Vec<Vec<u8>>; 2], serde_json::Value, String);

/// Runs `px gateway --datapath dpdk` on pcap ports over `dir`'s traces;
/// `None` if it had not read the whole trace when stopped.
fn run_gateway(dir: &Dir, toml: &str, frames_in: usize) -> Option<GatewayRun> {
    let config = dir.path("gateway.toml");
    std::fs::write(&config, toml).unwrap();
    let stats = dir.path("stats.json");
    let child = Command::new(env!("CARGO_BIN_EXE_px"))
        .args(["gateway", "--config"])
        .arg(&config)
        .arg("--stats-file")
        .arg(&stats)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The trace is read in milliseconds; the EAL takes longer to start.
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "px gateway --datapath dpdk failed:\n{log}");
    // Nothing left behind: the EAL's runtime directory went with it.
    let runtime = PathBuf::from(format!("/var/run/dpdk/px-gateway-{pid}"));
    assert!(!runtime.exists(), "{} left behind", runtime.display());
    let stats: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let received =
        stats["wire"]["inner"]["rx_packets"].as_u64().unwrap() + stats["wire"]["outer"]["rx_packets"].as_u64().unwrap();
    if received != frames_in as u64 {
        eprintln!("run again: received {received} of {frames_in} frames");
        return None;
    }
    let sent = [read_pcap(&dir.path("inner_out.pcap")), read_pcap(&dir.path("outer_out.pcap"))];
    Some((sent, stats, log.into_owned()))
}

fn gateway_toml(dir: &Dir) -> String {
    let p = |n: &str| dir.path(n).display().to_string();
    format!(
        r#"datapath = "dpdk"
imtu = 9000
emtu = 1500
batch = {BATCH}
log_interval_s = 0
control_socket = "{ctl}"
[engine]
merge_timeout_us = 10000
icmp_source_v6 = "2001:db8::fe"
[dpdk]
inner = "net_pcap0,rx_pcap={ii},tx_pcap={io}"
outer = "net_pcap1,rx_pcap={oi},tx_pcap={oo}"
"#,
        ctl = p("ctl.sock"),
        ii = p("inner_in.pcap"),
        io = p("inner_out.pcap"),
        oi = p("outer_in.pcap"),
        oo = p("outer_out.pcap"),
    )
}

#[test]
fn the_dpdk_datapath_emits_what_the_engine_emits_frame_for_frame() {
    if !px_runtime::gateway::dpdk_built() {
        eprintln!("skipped: {}", px_dpdk_not_built());
        return;
    }
    let dir = Dir::new("pcap");
    let trace = traces();
    write_pcap(&dir.path("inner_in.pcap"), &trace[0]);
    write_pcap(&dir.path("outer_in.pcap"), &trace[1]);
    let toml = gateway_toml(&dir);
    let cfg = GatewayConfig::from_toml(&toml).unwrap();
    let (want, want_timeouts, (want_merged, want_split)) = reference(&cfg, &trace);
    // The trace exercises what it is for: merging, software splitting.
    assert!(want_merged > 50 && want_split > 1000, "merged {want_merged}, split {want_split}");
    let want = by_flow(want);
    let frames_in = trace[0].len() + trace[1].len();
    let mut tries = 0;
    let stats = loop {
        tries += 1;
        let Some((sent, stats, log)) = run_gateway(&dir, &toml, frames_in) else {
            assert!(tries < 3, "the gateway did not read the whole trace in three runs");
            continue;
        };
        // pcap copies what it sends: the engine's frames leave in the
        // engine's own buffers, not copied into mbufs.
        for port in ["net_pcap0", "net_pcap1"] {
            let lent = format!("DPDK port {port}: the engine's frames are lent");
            assert!(log.contains(&lent), "no {lent:?} in:\n{log}");
        }
        let timeouts = stats["flushes"]["timeout"].as_u64().unwrap();
        match differences(&by_flow(sent), &want) {
            None => break stats,
            Some(d) if timeouts != want_timeouts && tries < 3 => {
                eprintln!(
                    "run again: {timeouts} holds left by their timer (the reference: {want_timeouts}): {d}; busy {} ns",
                    stats["busy_ns"]
                );
            }
            Some(d) => panic!("{d} ({timeouts} holds left by their timer, the reference {want_timeouts})"),
        }
    };
    // The gateway merged and split as the engine does.
    let c = &stats["counters"];
    assert_eq!(c["merged_out"].as_u64(), Some(want_merged), "{stats}");
    assert_eq!(c["split_out"].as_u64(), Some(want_split), "{stats}");
    assert!(stats["send_errors"].as_u64() == Some(0), "{stats}");
}

/// The first difference between what left the ports and what should have.
fn differences(got: &ByFlow, want: &ByFlow) -> Option<String> {
    for (port, name) in [(Port::Inner, "inner"), (Port::Outer, "outer")] {
        let (g, w) = (&got[port as usize], &want[port as usize]);
        if g.keys().ne(w.keys()) {
            let only = |a: &BTreeMap<String, _>, b: &BTreeMap<String, _>| {
                a.keys().filter(|k| !b.contains_key(*k)).cloned().collect::<Vec<_>>()
            };
            return Some(format!(
                "flows out of the {name} port: {:?} only from DPDK, {:?} only from the engine",
                only(g, w),
                only(w, g)
            ));
        }
        for (flow, frames) in w {
            let mine = &g[flow];
            if mine.len() != frames.len() {
                return Some(format!("{name} port, flow {flow}: {} frames against {}", mine.len(), frames.len()));
            }
            if let Some(k) = mine.iter().zip(frames).position(|(a, b)| a != b) {
                return Some(format!(
                    "{name} port, flow {flow}: frame {k} differs ({} against {} bytes)",
                    mine[k].len(),
                    frames[k].len()
                ));
            }
        }
    }
    None
}

fn px_dpdk_not_built() -> &'static str {
    "this px was built without DPDK (install libdpdk-dev and pkg-config)"
}
