//! `px bench engine --vs dpdk`: PacketExpress's engine and DPDK 22.11's GRO
//! and GSO libraries (the C harness in `bench/dpdk/`) on the same frames,
//! alternating run by run on one core.
//!
//! The frames are generated once: the inbound trace's 1448-byte segments and
//! the outbound trace's 8948-byte segments, with their arrival times. They
//! are written as two classic pcaps (nanosecond timestamps) for the harness,
//! and the engine is fed fresh copies of the very same bytes on each run
//! (the copy is not timed, as the harness's load into mbufs is not).
//!
//! Same work on both sides: the engine completes every checksum inline
//! (merge: from the received segments' checksums; split: summed while
//! copying); DPDK leaves them stale and the harness recomputes them inside
//! its timed section. Both take the received checksums as already verified
//! (a NIC's `CHECKSUM_UNNECESSARY`; the engine's `rx_csum` is
//! [`Checksum::Valid`] here). Both merge to the inner MTU: DPDK's 64 KB
//! merges are cut back with `rte_gso_segment`, timed, as the harness's fair
//! default does.
//!
//! The harness is optional: where `bench/dpdk/build.sh` exits 3 (no
//! `libdpdk-dev`, no C compiler), the DPDK side is reported absent with the
//! line it printed, and the engine side still runs.
//!
//! [`compare`] is the whole experiment (trace, harness, alternating runs)
//! and its result; this module holds the two sides it alternates.

pub mod compare;
pub mod gateway;
pub mod paced;

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{Endianness, TsResolution};
use px_gateway::{Config, Engine, Port};
use px_wire::offload::Checksum;

use crate::drive::{drain, feed, open_flows, open_windows};
use crate::trace::{Chunk, Direction, Trace, TraceConfig};

/// What DPDK 22.11's GRO/GSO do differently, printed beside the figures.
pub const DPDK_SEMANTICS: &str = "DPDK 22.11 heavyweight GRO (rte_gro_reassemble + rte_gro_timeout_flush every hold \
period, flushing all) and rte_gso_segment: PSH (and any flag but a bare ACK) segments are never merged and overtake \
their flow's held data; TCP options must be byte-identical (a TSval or TSecr tick stops a merge); the ACK number is \
part of the flow key; merges reach 64 KB and are cut back to the inner MTU with rte_gso_segment (timed), as the \
harness's fair default does; checksums are left stale by DPDK and recomputed inside the timed section \
(rte_ipv4_cksum + the loop of rte_ipv4_udptcp_cksum_mbuf, fixed to fold before its odd-offset byte swap); GSO \
pieces are header mbufs chained to indirect mbufs into the original (no payload copy: it needs scatter-gather TX), \
where px's software split writes contiguous frames (copy and checksum in one pass); received checksums are taken as verified on both sides (NIC \
CHECKSUM_UNNECESSARY; engine rx_csum = valid).";

/// Writes `chunk`'s frames as a classic little-endian pcap with nanosecond
/// timestamps (magic `0xa1b23c4d`), the format the harness reads.
pub fn write_pcap(path: &Path, chunk: &Chunk) -> std::io::Result<()> {
    let file = BufWriter::new(std::fs::File::create(path)?);
    let header = PcapHeader {
        snaplen: 65_535,
        ts_resolution: TsResolution::NanoSecond,
        endianness: Endianness::Little,
        ..PcapHeader::default()
    };
    let err = |e: pcap_file::PcapError| std::io::Error::other(e.to_string());
    let mut w = PcapWriter::with_header(file, header).map_err(err)?;
    for f in &chunk.frames {
        let data = &chunk.data[f.offset..f.offset + f.len];
        w.write_packet(&PcapPacket::new(Duration::from_nanos(f.t_ns), f.len as u32, data)).map_err(err)?;
    }
    w.into_writer().flush()
}

/// A whole trace in memory: its data frames, and the bulk flows' opening
/// handshakes ([`Trace::handshakes`]).
#[derive(Debug, Default)]
pub struct TraceFrames {
    pub data: Chunk,
    /// The senders' SYNs and the receivers' SYN-ACKs.
    pub syns: Chunk,
    pub synacks: Chunk,
}

/// Generates `packets` frames of a trace in one chunk (the whole trace),
/// with the handshakes: each side announces its link's MSS (`mtu - 40`),
/// the sender's link being the one whose segments the trace carries.
pub fn trace_frames(tc: &TraceConfig, packets: usize, imtu: u16, emtu: u16) -> TraceFrames {
    let (inner, outer) = (imtu - 40, emtu - 40);
    let (sender, receiver) = match tc.direction {
        Direction::Inbound => (outer, inner),
        Direction::Outbound => (inner, outer),
    };
    let mut trace = Trace::new(tc.clone(), imtu as usize - 52);
    let [syns, synacks] = trace.handshakes(sender, receiver);
    let mut data = Chunk::default();
    trace.fill(&mut data, packets, usize::MAX);
    TraceFrames { data, syns, synacks }
}

/// One engine run over a whole chunk (a fresh copy of it).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SideRun {
    pub seconds: f64,
    pub gbps: f64,
    pub mpps: f64,
}

impl SideRun {
    fn of(payload: u64, frames: usize, seconds: f64) -> SideRun {
        let s = seconds.max(1e-12);
        SideRun { seconds, gbps: payload as f64 * 8.0 / s / 1e9, mpps: frames as f64 / s / 1e6 }
    }
}

/// Feeds a copy of `frames` through a fresh engine from `from`, after its
/// handshakes (untimed: the engine then knows both ends' MSS); returns the
/// timed run and the engine's counters.
pub fn engine_run(
    frames: &TraceFrames,
    work: &mut Chunk,
    from: Port,
    ecfg: &Config,
    rx_csum: Checksum,
) -> (SideRun, px_gateway::Counters) {
    let mut engine = Engine::new(ecfg.clone()).expect("benchmark engine configuration is valid");
    let (mut syns, mut synacks) = (Chunk::default(), Chunk::default());
    copy_chunk(&frames.syns, &mut syns);
    copy_chunk(&frames.synacks, &mut synacks);
    open_flows(&mut engine, [&mut syns, &mut synacks], from, rx_csum);
    let base = Instant::now();
    if from == Port::Outer {
        open_windows(&mut engine, &frames.data, from, rx_csum, base);
    }
    let primed = engine.counters().clone();
    copy_chunk(&frames.data, work);
    let t0 = Instant::now();
    let mut sent = feed(&mut engine, work, from, rx_csum, base);
    let last_ns = frames.data.frames.last().map_or(0, |f| f.t_ns);
    engine.flush_all(base + Duration::from_nanos(last_ns) + ecfg.merge_timeout);
    sent += drain(&mut engine);
    let seconds = t0.elapsed().as_secs_f64();
    std::hint::black_box(sent);
    let mut c = engine.counters().clone();
    // The handshakes are not part of the measured traffic.
    c.inner_tcp_data_out -= primed.inner_tcp_data_out;
    c.inner_tcp_full_out -= primed.inner_tcp_full_out;
    (SideRun::of(frames.data.payload_bytes, frames.data.frames.len(), seconds), c)
}

fn copy_chunk(from: &Chunk, to: &mut Chunk) {
    to.data.clear();
    to.data.extend_from_slice(&from.data);
    to.frames.clone_from(&from.frames);
}

/// The harness's binary (`px_dpdk_bench`): see [`tool`].
pub fn harness(repo: &Path, target_dir: &Path) -> Result<PathBuf, String> {
    tool(repo, target_dir, "px_dpdk_bench")
}

/// One of the C tools of `bench/dpdk/` (`px_dpdk_bench`, `px_dpdk_fwd`,
/// `px_dpdk_gen`): built with `bench/dpdk/build.sh` into
/// `target/dpdk/NAME` when missing or older than its source, the shared
/// header or the build script. `Err` carries the reason it is absent
/// (build.sh's one line on exit 3, or the compiler's failure).
pub fn tool(repo: &Path, target_dir: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = repo.join("bench/dpdk");
    let script = dir.join("build.sh");
    let out = target_dir.join("dpdk").join(name);
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if !script.exists() {
        return Err(format!("DPDK tool source not found ({})", script.display()));
    }
    let sources = [dir.join(format!("{name}.c")), dir.join("px_dpdk_common.h"), script.clone()];
    if let Some(b) = mtime(&out)
        && sources.iter().all(|s| mtime(s).is_some_and(|s| b >= s))
    {
        return Ok(out);
    }
    let r = Command::new(&script).arg(&out).output().map_err(|e| format!("{}: {e}", script.display()))?;
    match r.status.code() {
        Some(0) => Ok(out),
        Some(3) => Err(String::from_utf8_lossy(&r.stderr).trim().to_string()),
        _ => Err(format!("building {name} failed: {}", String::from_utf8_lossy(&r.stderr).trim())),
    }
}

/// Where the repository (for `bench/dpdk/`) and `target/` are: the source
/// tree px was built from (else the current directory), and
/// `CARGO_TARGET_DIR` or the tree's `target/`.
pub fn repo_and_target() -> (PathBuf, PathBuf) {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let repo = match repo.canonicalize() {
        Ok(r) if r.join("bench/dpdk/build.sh").exists() => r,
        _ => PathBuf::from("."),
    };
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo.join("target"));
    (repo, target)
}

/// What one harness run (`--runs 1`) reported for GRO or GSO.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DpdkRun {
    pub merge: SideRun,
    pub split: SideRun,
    /// The checksum recomputation's share of `merge.seconds` / `split.seconds`.
    pub merge_csum_seconds: f64,
    pub split_csum_seconds: f64,
    pub merge_yield: f64,
    pub merge_out_max_ip_len: u64,
    pub merge_out_of_order: u64,
    pub split_out_max_ip_len: u64,
    pub dpdk_version: String,
}

/// Options of a harness run.
#[derive(Debug, Clone)]
pub struct HarnessArgs<'a> {
    pub exe: &'a Path,
    pub gro_pcap: &'a Path,
    pub gso_pcap: &'a Path,
    pub lcore: usize,
    pub hold_us: u64,
    pub mtu: u16,
    pub imtu: u16,
}

/// Runs the harness once, pinned to `lcore` (`taskset` and EAL `-l`).
pub fn dpdk_run(a: &HarnessArgs) -> Result<DpdkRun, String> {
    let lcore = a.lcore.to_string();
    let hold = a.hold_us.to_string();
    let (mtu, imtu) = (a.mtu.to_string(), a.imtu.to_string());
    let (inner_mss, outer_mss) = ((a.imtu - 52).to_string(), (a.mtu - 52).to_string());
    let mut args: Vec<&std::ffi::OsStr> = vec!["-c".as_ref(), lcore.as_ref(), a.exe.as_os_str()];
    for (k, v) in [
        ("--gro", a.gro_pcap.as_os_str()),
        ("--gso", a.gso_pcap.as_os_str()),
        ("--runs", "1".as_ref()),
        ("--lcore", lcore.as_ref()),
        ("--hold-us", hold.as_ref()),
        ("--mtu", mtu.as_ref()),
        ("--imtu", imtu.as_ref()),
        ("--inner-mss", inner_mss.as_ref()),
        ("--outer-mss", outer_mss.as_ref()),
    ] {
        args.push(k.as_ref());
        args.push(v);
    }
    let r = Command::new("taskset").args(&args).output().map_err(|e| format!("taskset {}: {e}", a.exe.display()))?;
    if !r.status.success() {
        return Err(format!(
            "DPDK harness exited with {}: {}",
            r.status,
            String::from_utf8_lossy(&r.stderr).lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&r.stdout).map_err(|e| format!("DPDK harness output is not JSON: {e}"))?;
    let f = |p: &str| v.pointer(p).and_then(serde_json::Value::as_f64).ok_or(format!("DPDK harness JSON lacks {p}"));
    let side = |k: &str| -> Result<SideRun, String> {
        let s = f(&format!("/{k}/runs/0/seconds"))?;
        Ok(SideRun::of(f(&format!("/{k}/in_payload_bytes"))? as u64, f(&format!("/{k}/in_frames"))? as usize, s))
    };
    Ok(DpdkRun {
        merge: side("gro")?,
        split: side("gso")?,
        merge_csum_seconds: f("/gro/runs/0/csum_seconds")?,
        split_csum_seconds: f("/gso/runs/0/csum_seconds")?,
        merge_yield: f("/gro/yield")?,
        merge_out_max_ip_len: f("/gro/out_max_ip_len")? as u64,
        merge_out_of_order: f("/gro/out_out_of_order")? as u64,
        split_out_max_ip_len: f("/gso/out_max_ip_len")? as u64,
        dpdk_version: v.get("dpdk_version").and_then(|x| x.as_str()).unwrap_or("?").to_string(),
    })
}

/// Median, lowest and highest of a set of measurements.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(mut v: Vec<f64>) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(|a, b| a.total_cmp(b));
        Spread { median: v[v.len() / 2], min: v[0], max: v[v.len() - 1] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pcap carries the frames byte for byte with their arrival times.
    #[test]
    fn pcap_round_trip() {
        let tc = TraceConfig { flows: 4, ..TraceConfig::inbound_default() };
        let chunk = trace_frames(&tc, 50, 9000, 1500).data;
        let path = std::env::temp_dir().join(format!("px-bench-pcap-{}.pcap", std::process::id()));
        write_pcap(&path, &chunk).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(&bytes[0..4], &0xa1b2_3c4du32.to_le_bytes());
        let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
        for f in &chunk.frames {
            let p = r.next_packet().unwrap().unwrap();
            assert_eq!(p.timestamp, Duration::from_nanos(f.t_ns));
            assert_eq!(&p.data[..], &chunk.data[f.offset..f.offset + f.len]);
        }
        assert!(r.next_packet().is_none());
    }

    #[test]
    fn engine_run_merges_the_frames() {
        let tc = TraceConfig { flows: 8, ..TraceConfig::inbound_default() };
        let frames = trace_frames(&tc, 5_000, 9000, 1500);
        assert_eq!((frames.syns.frames.len(), frames.synacks.frames.len()), (8, 8));
        let mut work = Chunk::default();
        let cfg = Config { max_flows: 1 << 10, ..Config::default() };
        let (run, c) = engine_run(&frames, &mut work, Port::Outer, &cfg, Checksum::Valid);
        assert!(run.gbps > 0.0 && c.merged_out > 0 && c.conversion_yield() > 0.5, "{c:?}");
        let spread = Spread::of(vec![3.0, 1.0, 2.0]);
        assert_eq!((spread.median, spread.min, spread.max), (2.0, 1.0, 3.0));
    }
}
