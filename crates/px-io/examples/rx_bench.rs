//! Receive-path benchmark: `recvmmsg` batches versus the `TPACKET_V2` ring.
//!
//! Builds two namespaces joined by a veth (px-netns), floods frames of a given
//! size from one end with `sendmmsg` for a few seconds, and receives them at
//! the other end with each method in turn. Reports packets/s and, more
//! telling on a shared 2-core machine, the receiver thread's CPU time per
//! packet (CLOCK_THREAD_CPUTIME_ID). Needs root.
//!
//! `cargo run --release -p px-io --example rx_bench -- [frame_bytes|gro|all] [seconds] [rounds]`
//!
//! `gro` receives the super-packets kernel GRO builds from a bulk TCP
//! transfer over a wire-like veth, which is what a gateway port sees.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_io::{MAX_FRAME, PacketMeta, PacketSocket, Poller, RingGeometry, RxBatch, SocketConfig, TxBatch};
use px_netns::{Topology, require_root_or_skip};

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time of the whole process (sender, receiver and the softirq work the
/// kernel charges to them), so the two methods are compared on the total
/// cost of the pipeline, not only on the receiving thread.
fn process_cpu() -> Duration {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage for getrusage to fill.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn udp_frame(len: usize) -> Vec<u8> {
    let payload = vec![0xa5u8; len.saturating_sub(42)];
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 51, 100, 1], [198, 51, 100, 2], 64)
        .udp(9, 9)
        .write(&mut f, &payload)
        .unwrap();
    f
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Batch,
    Ring,
}

struct Sample {
    pps: f64,
    rx_ns: f64,
    all_ns: f64,
    drops: u32,
}

/// Receives on `rx` for `secs` while `stop` is false; returns frames and
/// (elapsed, rx-thread CPU, process CPU).
fn measure(rx: &mut PacketSocket, mode: Mode, secs: u64) -> (u64, Duration, Duration, Duration) {
    let mut batch = RxBatch::new(64, MAX_FRAME);
    let mut poller = Poller::new();
    poller.add(rx.as_fd());
    let _ = rx.take_stats();
    let mut received = 0u64;
    let (t0, c0, p0) = (Instant::now(), thread_cpu(), process_cpu());
    while t0.elapsed() < Duration::from_secs(secs) {
        poller.wait(Some(Duration::from_millis(10))).unwrap();
        if mode == Mode::Ring {
            while rx.recv_ring(256, |p| received += u64::from(p.is_ok())) > 0 {}
        } else {
            while rx.recv_batch(&mut batch).is_ok_and(|n| n > 0) {
                received += batch.iter().filter(Result::is_ok).count() as u64;
            }
        }
    }
    (received, t0.elapsed(), thread_cpu() - c0, process_cpu() - p0)
}

fn sample(rx: &PacketSocket, (received, elapsed, cpu, all): (u64, Duration, Duration, Duration)) -> Sample {
    let drops = rx.take_stats().map(|s| s.drops).unwrap_or(0);
    let per_pkt = |d: Duration| d.as_nanos() as f64 / received.max(1) as f64;
    Sample { pps: received as f64 / elapsed.as_secs_f64(), rx_ns: per_pkt(cpu), all_ns: per_pkt(all), drops }
}

/// Flood of `frame_len`-byte UDP frames (`sendmmsg`) from one namespace.
fn run_flood(mode: Mode, frame_len: usize, secs: u64) -> Sample {
    let mut t = Topology::new().unwrap();
    let a = t.add_ns("bencha").unwrap();
    let b = t.add_ns("benchb").unwrap();
    t.add_veth((a, "eth0"), (b, "eth0"), 9000).unwrap();
    let plain = SocketConfig { vnet_hdr: false, ..SocketConfig::default() };
    let tx = t.ns(a).run(|| PacketSocket::open("eth0", &plain)).unwrap().unwrap();
    let geometry = RingGeometry { slots: 4096, slot_size: (frame_len + 128).max(2048) };
    let cfg = SocketConfig { rx_ring: (mode == Mode::Ring).then_some(geometry), ..SocketConfig::default() };
    let mut rx = t.ns(b).run(|| PacketSocket::open("eth0", &cfg)).unwrap().unwrap();
    let frame = udp_frame(frame_len);
    let stop = AtomicBool::new(false);
    let m = std::thread::scope(|s| {
        s.spawn(|| {
            let mut txb = TxBatch::new(64);
            while !stop.load(Ordering::Relaxed) {
                // A full queue of the same frame per sendmmsg; a full send
                // buffer or a refusal just means the next round.
                let mut q = tx.queue(&mut txb);
                while q.push(&PacketMeta::PLAIN, &frame) {}
                let _ = q.send();
            }
        });
        let m = measure(&mut rx, mode, secs);
        stop.store(true, Ordering::Relaxed);
        m
    });
    sample(&rx, m)
}

/// Bulk TCP over a wire-like veth with GRO at the receiver: what a gateway
/// port sees (64 KB super-packets).
fn run_gro(mode: Mode, secs: u64) -> Sample {
    let mut t = Topology::new().unwrap();
    let a = t.add_ns("bencha").unwrap();
    let b = t.add_ns("benchb").unwrap();
    let l = t.add_veth((a, "eth0"), (b, "eth0"), 1500).unwrap();
    t.link(l).wire_like(t.ns(a), t.ns(b)).unwrap();
    t.ns(a).add_addr("eth0", "198.51.100.1/24").unwrap();
    t.ns(b).add_addr("eth0", "198.51.100.2/24").unwrap();
    let cfg = SocketConfig {
        rx_ring: (mode == Mode::Ring).then_some(RingGeometry::SUPER_PACKETS),
        ..SocketConfig::default()
    };
    let mut rx = t.ns(b).run(|| PacketSocket::open("eth0", &cfg)).unwrap().unwrap();
    let server: std::net::SocketAddr = "198.51.100.2:5999".parse().unwrap();
    let listener = t.ns(b).run(|| std::net::TcpListener::bind(server)).unwrap().unwrap();
    let stop = AtomicBool::new(false);
    let m = std::thread::scope(|s| {
        s.spawn(|| {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 1 << 16];
            while std::io::Read::read(&mut c, &mut buf).is_ok_and(|n| n > 0) {}
        });
        s.spawn(|| {
            t.ns(a)
                .run(|| {
                    let mut c = std::net::TcpStream::connect(server).unwrap();
                    let buf = vec![0x5au8; 1 << 16];
                    while !stop.load(Ordering::Relaxed) {
                        if std::io::Write::write_all(&mut c, &buf).is_err() {
                            break;
                        }
                    }
                })
                .unwrap()
        });
        let m = measure(&mut rx, mode, secs);
        stop.store(true, Ordering::Relaxed);
        m
    });
    sample(&rx, m)
}

fn main() {
    if !require_root_or_skip("rx_bench") {
        return;
    }
    let mut args = std::env::args().skip(1);
    // 0 stands for GRO super-packets from a bulk TCP transfer.
    let sizes: Vec<usize> = match args.next().as_deref() {
        None | Some("all") => vec![64, 1514, 9014, 0],
        Some("gro") => vec![0],
        Some(s) => vec![s.parse().expect("frame size in bytes, or gro")],
    };
    let secs = args.next().map_or(3, |s| s.parse().expect("seconds"));
    let rounds = args.next().map_or(1, |s| s.parse().expect("rounds"));
    println!(
        "{:>5} {:>7} {:>6} {:>12} {:>14} {:>15} {:>10}",
        "round", "frame", "mode", "rx pkts/s", "rx-thread ns/p", "all-CPU ns/pkt", "drops"
    );
    // Alternate the methods so slow drifts in machine load hit both alike.
    for round in 0..rounds {
        for &len in &sizes {
            for mode in [Mode::Batch, Mode::Ring] {
                let s = if len == 0 { run_gro(mode, secs) } else { run_flood(mode, len, secs) };
                let frame = if len == 0 { "gro".to_owned() } else { len.to_string() };
                println!(
                    "{round:>5} {frame:>7} {:>6} {:>12.0} {:>14.0} {:>15.0} {:>10}",
                    format!("{mode:?}"),
                    s.pps,
                    s.rx_ns,
                    s.all_ns,
                    s.drops
                );
            }
        }
    }
}
