//! px-io as the I/O of a bump in the wire, without any engine: frames
//! (with their GRO/GSO metadata) are forwarded unchanged between two ports
//! of a middle namespace, and bulk TCP between the outer hosts must arrive
//! byte-exact in both directions. This is the path `px gateway` uses for
//! everything the engine passes through. Root only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use px_io::{MAX_FRAME, PacketSocket, Poller, RxBatch, SocketConfig, TxBatch};
use px_netns::line::{LEFT_V4, LEFT_V6, RIGHT_V4, RIGHT_V6};
use px_netns::{Line, LineSpec, Offloads, require_root_or_skip, send_or_drop};

/// Deterministic test bytes (xorshift), so the receiver can check every
/// byte without a copy of the stream.
struct Pattern(u64);

impl Pattern {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *b = self.0 as u8;
        }
    }
}

#[derive(Default)]
struct Counters {
    frames: AtomicUsize,
    super_packets: AtomicUsize,
    dropped: AtomicUsize,
    /// Frames a port read back after sending them (must stay 0).
    looped: AtomicUsize,
}

/// Moves every frame that arrived on `from` to `to`, metadata included,
/// without copying or allocating.
fn forward(from: &PacketSocket, to: &PacketSocket, rx: &mut RxBatch, tx: &mut TxBatch, c: &Counters) {
    while from.recv_batch(rx).unwrap() > 0 {
        c.frames.fetch_add(rx.len(), Ordering::Relaxed);
        let looped = rx.iter().flatten().filter(|p| p.pkt_type == px_io::PacketType::Outgoing).count();
        c.looped.fetch_add(looped, Ordering::Relaxed);
        let supers = rx.iter().filter(|p| p.as_ref().is_ok_and(|p| p.meta.gso.is_some())).count();
        c.super_packets.fetch_add(supers, Ordering::Relaxed);
        let (_, dropped) = send_or_drop(to, tx, rx.iter().map(Result::unwrap).map(|p| (p.meta, p.frame)));
        c.dropped.fetch_add(dropped, Ordering::Relaxed);
    }
}

/// Moves every frame waiting in `from`'s receive ring to `to`, zero-copy:
/// the frames stay in their ring slots until sent.
fn forward_ring(from: &mut PacketSocket, to: &PacketSocket, tx: &mut TxBatch, c: &Counters) {
    while let Some(batch) = from.recv_ring_batch(64).filter(|b| !b.is_empty()) {
        c.frames.fetch_add(batch.len(), Ordering::Relaxed);
        let looped = batch.iter().flatten().filter(|p| p.pkt_type == px_io::PacketType::Outgoing).count();
        c.looped.fetch_add(looped, Ordering::Relaxed);
        let supers = batch.iter().flatten().filter(|p| p.meta.gso.is_some()).count();
        c.super_packets.fetch_add(supers, Ordering::Relaxed);
        let (_, dropped) = send_or_drop(to, tx, batch.iter().map(Result::unwrap).map(|p| (p.meta, p.frame)));
        c.dropped.fetch_add(dropped, Ordering::Relaxed);
    }
}

/// Forwards between the two ports until `stop`, as one gateway worker
/// (through the receive ring where the socket has one).
fn bridge(ports: &mut [PacketSocket; 2], stop: &AtomicBool, c: &Counters) {
    let (mut rx, mut tx) = (RxBatch::new(64, MAX_FRAME), TxBatch::new(64));
    let mut poller = Poller::new();
    let ids = [poller.add(ports[0].as_fd()), poller.add(ports[1].as_fd())];
    while !stop.load(Ordering::Relaxed) {
        poller.wait(Some(Duration::from_millis(2))).unwrap();
        for (dir, &id) in ids.iter().enumerate() {
            if poller.is_ready(id) {
                let [p0, p1] = ports;
                let (from, to) = if dir == 0 { (p0, &*p1) } else { (p1, &*p0) };
                if from.has_ring() {
                    forward_ring(from, to, &mut tx, c);
                } else {
                    forward(from, to, &mut rx, &mut tx, c);
                }
            }
        }
    }
}

const BYTES: usize = 24 << 20;

/// Accepts one connection and checks every byte against the pattern.
fn receive(lis: &TcpListener, seed: u64) -> usize {
    let (mut sock, _) = lis.accept().unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (mut got, mut want, mut pat) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16], Pattern(seed));
    let mut total = 0;
    loop {
        let n = sock.read(&mut got).unwrap();
        if n == 0 {
            break;
        }
        pat.fill(&mut want[..n]);
        assert_eq!(got[..n], want[..n], "stream differs at byte {total}..{}", total + n);
        total += n;
    }
    total
}

/// Connects and sends `BYTES` of the pattern.
fn send(to: SocketAddr, seed: u64) {
    let mut sock = TcpStream::connect(to).unwrap();
    let (mut buf, mut pat) = (vec![0u8; 1 << 16], Pattern(seed));
    for _ in 0..BYTES / buf.len() {
        pat.fill(&mut buf);
        sock.write_all(&buf).unwrap();
    }
}

/// left:eth0 <-> mid:p0 and mid:p1 <-> right:eth0 at MTU 1500, hosts on
/// one subnet, wire-like: hosts emit MTU-sized frames; the middle merges
/// with GRO on receive and cuts with software GSO on send (TSO off).
fn forwarding_line(roles: [&'static str; 3], v6: bool) -> Line {
    let spec = LineSpec {
        host_offloads: Offloads::WIRE_SENDER,
        middle_offloads: Offloads::WIRE_SENDER.with(Offloads::GRO_RECEIVER),
        ipv4: !v6,
        ipv6: v6,
        ..LineSpec::new(roles, [1500, 1500])
    };
    Line::build(spec).unwrap()
}

fn transfer(v6: bool) {
    let line = forwarding_line(["fwdl", "fwdg", "fwdr"], v6);
    let (t, l, g, r) = (&line.topo, line.left, line.middle, line.right);
    let (la, ra) = if v6 { (LEFT_V6, RIGHT_V6) } else { (LEFT_V4, RIGHT_V4) };
    let cfg = SocketConfig { promiscuous: true, ..SocketConfig::default() };
    let mut ports = ["p0", "p1"].map(|p| t.ns(g).run(|| PacketSocket::open(p, &cfg)).unwrap().unwrap());
    let addr = |a: &str, port| -> SocketAddr {
        let ip = a.split('/').next().unwrap();
        if v6 { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") }.parse().unwrap()
    };
    let (to_r, to_l) = (addr(ra, 5301), addr(la, 5302));
    let lis_r = t.ns(r).run(|| TcpListener::bind(to_r)).unwrap().unwrap();
    let lis_l = t.ns(l).run(|| TcpListener::bind(to_l)).unwrap().unwrap();
    let stop = AtomicBool::new(false);
    let c = Counters::default();
    std::thread::scope(|s| {
        s.spawn(|| bridge(&mut ports, &stop, &c));
        let rx_r = s.spawn(|| receive(&lis_r, 0x1234_5678));
        let rx_l = s.spawn(|| receive(&lis_l, 0x9abc_def0));
        let (nl, nr) = (t.ns(l), t.ns(r));
        let tx_l = s.spawn(move || nl.run(move || send(to_r, 0x1234_5678)).unwrap());
        let tx_r = s.spawn(move || nr.run(move || send(to_l, 0x9abc_def0)).unwrap());
        tx_l.join().unwrap();
        tx_r.join().unwrap();
        assert_eq!(rx_r.join().unwrap(), BYTES, "legacy -> b-network bytes");
        assert_eq!(rx_l.join().unwrap(), BYTES, "b-network -> legacy bytes");
        stop.store(true, Ordering::Relaxed);
    });
    let (frames, supers) = (c.frames.load(Ordering::Relaxed), c.super_packets.load(Ordering::Relaxed));
    eprintln!(
        "forwarded (v6={v6}): {frames} frames, {supers} GRO super-packets, {} dropped",
        c.dropped.load(Ordering::Relaxed)
    );
    assert!(supers > 0, "GRO super-packets were forwarded and cut again by GSO");
    assert_eq!(c.looped.load(Ordering::Relaxed), 0, "PACKET_IGNORE_OUTGOING");
}

#[test]
fn forwarding_keeps_tcp_streams_byte_exact_ipv4() {
    if !require_root_or_skip("forwarding_keeps_tcp_streams_byte_exact_ipv4") {
        return;
    }
    transfer(false);
}

#[test]
fn forwarding_keeps_tcp_streams_byte_exact_ipv6() {
    if !require_root_or_skip("forwarding_keeps_tcp_streams_byte_exact_ipv6") {
        return;
    }
    transfer(true);
}

#[test]
fn fanout_workers_forward_32_flows_exactly_without_loops() {
    if !require_root_or_skip("fanout_workers_forward_32_flows_exactly_without_loops") {
        return;
    }
    // The gateway's threading model without the engine: each worker owns one
    // socket per port (the gateway configuration: receive ring, promiscuous),
    // joined to that port's fan-out group in worker order, and forwards what
    // it receives out of its own socket on the other port, zero-copy.
    let line = forwarding_line(["fanfl", "fanfg", "fanfr"], false);
    let (t, l, g, r) = (&line.topo, line.left, line.middle, line.right);
    const WORKERS: usize = 2;
    let mut workers: Vec<[PacketSocket; 2]> = t
        .ns(g)
        .run(|| {
            (0..WORKERS)
                .map(|_| {
                    let open = |port, group| {
                        let cfg = SocketConfig::gateway_port(Some(px_io::Fanout { group, defrag: true }));
                        PacketSocket::open(port, &cfg).unwrap()
                    };
                    [open("p0", 0x0510), open("p1", 0x0511)]
                })
                .collect()
        })
        .unwrap();
    let stop = AtomicBool::new(false);
    let per_worker: Vec<Counters> = (0..WORKERS).map(|_| Counters::default()).collect();
    std::thread::scope(|s| {
        for (ports, c) in workers.iter_mut().zip(&per_worker) {
            let stop = &stop;
            s.spawn(move || bridge(ports, stop, c));
        }
        let spec = |server: &str| px_netns::BulkSpec::new(server.parse().unwrap(), 32, 1 << 20);
        let inbound = px_netns::bulk_tcp(t.ns(l), t.ns(r), &spec("198.51.100.2:5401")).unwrap();
        let outbound = px_netns::bulk_tcp(t.ns(r), t.ns(l), &spec("198.51.100.1:5402")).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(inbound.flows.iter().chain(&outbound.flows).all(|f| f.bytes == 1 << 20));
        eprintln!("32 flows each way through 2 fan-out workers: {:.2} / {:.2} Gbit/s", inbound.gbps(), outbound.gbps());
    });
    let frames: Vec<usize> = per_worker.iter().map(|c| c.frames.load(Ordering::Relaxed)).collect();
    let looped: usize = per_worker.iter().map(|c| c.looped.load(Ordering::Relaxed)).sum();
    eprintln!("frames per worker {frames:?}, looped back {looped}");
    assert_eq!(looped, 0, "a worker re-read frames sent out of its port");
    assert!(frames.iter().all(|&f| f > 100), "both workers carried flows: {frames:?}");
    let supers: usize = per_worker.iter().map(|c| c.super_packets.load(Ordering::Relaxed)).sum();
    assert!(supers > 0, "GRO super-packets came through the rings");
}
