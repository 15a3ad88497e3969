//! Root integration tests of px-io on real veth links in px-netns namespaces.
//! Each test builds its own topology (torn down on drop, also on failure)
//! and is skipped with a message when not root.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_wire::checksum::{Sum, fold};

fn ones_complement_sum(data: &[u8]) -> u16 {
    fold(Sum::of(data))
}
use px_io::{
    Checksum, Fanout, GsoKind, IfaceCtl, IfaceGuard, MAX_FRAME, Offload, PacketMeta, PacketSocket, PacketType, Poller,
    RingGeometry, RxBatch, SocketConfig,
};
use px_netns::{Line, LineSpec, NsId, Topology, require_root_or_skip, send_frame};

/// Two namespaces `snd` and `rcv` joined by `eth0 <-> eth0`.
fn pair(mtu: u32, v6: bool) -> (Topology, NsId, NsId) {
    let mut t = Topology::new().unwrap();
    let s = t.add_ns("iosnd").unwrap();
    let r = t.add_ns("iorcv").unwrap();
    t.add_veth((s, "eth0"), (r, "eth0"), mtu).unwrap();
    if v6 {
        t.ns(s).add_addr("eth0", "2001:db8:10::1/64").unwrap();
        t.ns(r).add_addr("eth0", "2001:db8:10::2/64").unwrap();
    } else {
        t.ns(s).add_addr("eth0", "198.51.100.1/24").unwrap();
        t.ns(r).add_addr("eth0", "198.51.100.2/24").unwrap();
    }
    (t, s, r)
}

#[derive(Debug, Default)]
struct Seen {
    frames: usize,
    super_packets: usize,
    max_len: usize,
    gso_sizes: Vec<u16>,
    partial: usize,
    valid: usize,
    outgoing: usize,
    errors: usize,
}

impl Seen {
    fn record(&mut self, p: Result<px_io::RxPacket<'_>, px_io::RxError>, v6: bool) {
        let Ok(p) = p else {
            self.errors += 1;
            return;
        };
        self.frames += 1;
        self.max_len = self.max_len.max(p.frame.len());
        self.outgoing += usize::from(p.pkt_type == PacketType::Outgoing);
        match p.meta.csum {
            Checksum::Partial { .. } => self.partial += 1,
            Checksum::Valid => self.valid += 1,
            Checksum::Unknown => {}
        }
        if let Some(g) = p.meta.gso {
            let want = if v6 { GsoKind::TcpV6 } else { GsoKind::TcpV4 };
            assert_eq!(g.kind, want);
            self.super_packets += 1;
            if !self.gso_sizes.contains(&g.size) {
                self.gso_sizes.push(g.size);
            }
        }
    }
}

/// Bulk TCP from `snd` to `rcv` while an AF_PACKET socket in `rcv` watches
/// (with `recvmmsg` batches, or through a `TPACKET_V2` ring).
fn observe_gro(v6: bool, ring: bool) -> Seen {
    let (t, s, r) = pair(1500, v6);
    let (snd, rcv) = (t.ns(s), t.ns(r));
    snd.set_offloads("eth0", px_netns::Offloads::WIRE_SENDER).unwrap();
    rcv.set_offloads("eth0", px_netns::Offloads::GRO_RECEIVER).unwrap();
    let server: SocketAddr = if v6 { "[2001:db8:10::2]:5201" } else { "198.51.100.2:5201" }.parse().unwrap();
    let cfg = SocketConfig { rx_ring: ring.then_some(RingGeometry::SUPER_PACKETS), ..SocketConfig::default() };
    let mut sock = rcv.run(|| PacketSocket::open("eth0", &cfg)).unwrap().unwrap();
    let listener = rcv.run(|| TcpListener::bind(server)).unwrap().unwrap();
    let done = AtomicBool::new(false);
    let total = 64usize << 20;
    let mut seen = Seen::default();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let mut got = 0;
            while got < total {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "early EOF at {got}");
                got += n;
            }
        });
        sc.spawn(|| {
            snd.run(|| {
                let mut c = TcpStream::connect(server).unwrap();
                let chunk = vec![0x5au8; 1 << 16];
                for _ in 0..total / chunk.len() {
                    c.write_all(&chunk).unwrap();
                }
            })
            .unwrap();
            done.store(true, Ordering::Relaxed);
        });
        let mut batch = RxBatch::new(64, MAX_FRAME);
        let mut poller = Poller::new();
        poller.add(std::os::fd::AsFd::as_fd(&sock));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
            poller.wait(Some(Duration::from_millis(5))).unwrap();
            if ring {
                while sock.recv_ring(64, |p| seen.record(p, v6)) > 0 {}
            } else {
                while sock.recv_batch(&mut batch).unwrap() > 0 {
                    for p in batch.iter() {
                        seen.record(p, v6);
                    }
                }
            }
        }
    });
    let stats = sock.take_stats().unwrap();
    eprintln!("socket counters (v6={v6}, ring={ring}): {stats:?}");
    // Drops are possible when the 2 cores are busy (tests run in parallel);
    // they only cost the observer frames, so they are reported, not failed.
    eprintln!("GRO observation (v6={v6}, ring={ring}, sender TSO/GSO off, receiver GRO on): {seen:?}");
    seen
}

#[test]
fn gro_super_packets_ipv4() {
    if !require_root_or_skip("gro_super_packets_ipv4") {
        return;
    }
    // MSS 1448 = 1500 - 20 (IPv4) - 20 (TCP) - 12 (timestamps).
    check_gro(&observe_gro(false, false), 1448);
}

#[test]
fn gro_super_packets_ipv6() {
    if !require_root_or_skip("gro_super_packets_ipv6") {
        return;
    }
    // MSS 1428 = 1500 - 40 (IPv6) - 20 (TCP) - 12 (timestamps).
    check_gro(&observe_gro(true, false), 1428);
}

#[test]
fn gro_super_packets_through_the_ring() {
    if !require_root_or_skip("gro_super_packets_through_the_ring") {
        return;
    }
    check_gro(&observe_gro(false, true), 1448);
}

/// What every GRO observation must show: super-packets larger than the
/// MTU cut at the sender's MSS, with partial checksums, no frame the
/// receiver sent itself, and no per-frame error (truncation, bad header).
fn check_gro(seen: &Seen, mss: u16) {
    assert_eq!(seen.errors, 0, "{seen:?}");
    assert_eq!(seen.outgoing, 0, "PACKET_IGNORE_OUTGOING: the receiver's ACKs must not be seen");
    assert!(seen.super_packets > 100, "{seen:?}");
    assert!(seen.max_len > 1514, "{seen:?}");
    assert!(seen.gso_sizes.contains(&mss), "{seen:?}");
    assert!(seen.partial >= seen.super_packets, "GRO output on veth carries partial checksums: {seen:?}");
}

const SRC4: [u8; 4] = [203, 0, 113, 1];
const DST4: [u8; 4] = [203, 0, 113, 2];

/// Ethernet + IPv4 + TCP with the timestamps option (NOP, NOP, TS).
const HDRS: usize = 14 + 20 + 32;

/// An Ethernet/IPv4/TCP super-packet with `payload`, its TCP checksum
/// field holding the pseudo-header sum (what NEEDS_CSUM expects).
fn tcp4_super_packet(dst_mac: [u8; 6], seq: u32, payload: &[u8]) -> Vec<u8> {
    let tcp_len = 32 + payload.len();
    let ip_len = 20 + tcp_len;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&0x1000u16.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&SRC4);
    ip[16..20].copy_from_slice(&DST4);
    let c = !ones_complement_sum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = [0u8; 32];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 8 << 4;
    tcp[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 3]);
    tcp[13] = 0x18; // PSH|ACK
    tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
    tcp[16..18].copy_from_slice(&pseudo_sum4(tcp_len).to_be_bytes());
    f.extend_from_slice(&tcp);
    f.extend_from_slice(payload);
    f
}

fn pseudo_sum4(tcp_len: usize) -> u16 {
    let mut p = Vec::new();
    p.extend_from_slice(&SRC4);
    p.extend_from_slice(&DST4);
    p.extend_from_slice(&[0, 6]);
    p.extend_from_slice(&(tcp_len as u16).to_be_bytes());
    ones_complement_sum(&p)
}

/// True if the TCP checksum of an Ethernet/IPv4/TCP frame verifies.
fn tcp4_checksum_ok(f: &[u8]) -> bool {
    let ip_len = usize::from(u16::from_be_bytes([f[16], f[17]]));
    let tcp = &f[34..14 + ip_len];
    let mut v = pseudo_sum4(tcp.len()).to_be_bytes().to_vec();
    v.extend_from_slice(tcp);
    ones_complement_sum(&v) == 0xffff
}

fn mac_of(t: &Topology, ns: NsId, dev: &str) -> [u8; 6] {
    let s = t.ns(ns).exec("cat", &[&format!("/sys/class/net/{dev}/address")]).unwrap();
    let mut mac = [0u8; 6];
    for (m, h) in mac.iter_mut().zip(s.trim().split(':')) {
        *m = u8::from_str_radix(h, 16).unwrap();
    }
    mac
}

/// Sends one GSO super-packet (3 full 8948-byte segments + 100 bytes) from
/// `snd` and returns the frames the receiver socket saw, with metadata.
fn gso_roundtrip(tx_csum: bool, rx_vnet: bool) -> (Vec<u8>, Vec<(PacketMeta, Vec<u8>)>) {
    let (t, s, r) = pair(9000, false);
    let (snd, rcv) = (t.ns(s), t.ns(r));
    // Wire-like sender; no GRO at the receiver, so it sees what the wire carries.
    snd.set_offloads("eth0", px_netns::Offloads::WIRE_SENDER).unwrap();
    rcv.set_offloads("eth0", px_netns::Offloads { gro: Some(false), ..Default::default() }).unwrap();
    if !tx_csum {
        snd.exec("ethtool", &["-K", "eth0", "tx", "off"]).unwrap();
    }
    let payload: Vec<u8> = (0..3 * 8948 + 100).map(|i: u32| (i % 251) as u8).collect();
    let frame = tcp4_super_packet(mac_of(&t, r, "eth0"), 1000, &payload);
    let rx_cfg = SocketConfig { vnet_hdr: rx_vnet, ..SocketConfig::default() };
    let rx = rcv.run(|| PacketSocket::open("eth0", &rx_cfg)).unwrap().unwrap();
    let tx = snd.run(|| PacketSocket::open("eth0", &SocketConfig::default())).unwrap().unwrap();
    // MSS 8948 = 9000 - 20 (IPv4) - 20 (TCP) - 12 (timestamps).
    let meta = PacketMeta::tcp_gso(false, 8948, 34, HDRS as u16);
    send_frame(&tx, &meta, &frame).unwrap();
    let mut batch = RxBatch::new(16, MAX_FRAME);
    let mut got = Vec::new();
    let mut poller = Poller::new();
    poller.add(std::os::fd::AsFd::as_fd(&rx));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut bytes = 0;
    while bytes < payload.len() && Instant::now() < deadline {
        poller.wait(Some(Duration::from_millis(50))).unwrap();
        sock_drain(&rx, &mut batch, &mut got, &mut bytes);
    }
    (payload, got)
}

fn sock_drain(rx: &PacketSocket, batch: &mut RxBatch, got: &mut Vec<(PacketMeta, Vec<u8>)>, bytes: &mut usize) {
    while rx.recv_batch(batch).unwrap() > 0 {
        for p in batch.iter() {
            let p = p.unwrap();
            // Only our TCP test flow (IPv6 neighbour discovery may also appear).
            if p.frame.len() > HDRS && p.frame[12..14] == [8, 0] && p.frame[23] == 6 {
                *bytes += p.frame.len() - HDRS;
                got.push((p.meta, p.frame.to_vec()));
            }
        }
    }
}

fn check_segments(payload: &[u8], got: &[(PacketMeta, Vec<u8>)]) {
    assert_eq!(got.len(), 4, "3 full segments and a 100-byte tail");
    let mut joined = Vec::new();
    let mut seq = 1000u32;
    for (_, f) in got {
        let ip_len = usize::from(u16::from_be_bytes([f[16], f[17]]));
        assert!(ip_len <= 9000, "IP packet of {ip_len} bytes on a 9000-byte link");
        assert_eq!(f.len(), 14 + ip_len);
        assert_eq!(u32::from_be_bytes([f[38], f[39], f[40], f[41]]), seq);
        assert_eq!(!ones_complement_sum(&f[14..34]), 0, "IPv4 header checksum");
        assert_eq!(f[54..66], [1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 3], "options copied to every segment");
        seq += (ip_len - 52) as u32;
        joined.extend_from_slice(&f[HDRS..]);
    }
    assert_eq!(got[0].1.len(), 14 + 9000, "full segments are exactly MTU-sized");
    assert_eq!(joined, payload);
}

#[test]
fn gso_tx_is_cut_to_the_mtu() {
    if !require_root_or_skip("gso_tx_is_cut_to_the_mtu") {
        return;
    }
    // TX checksum offload off: the kernel completes every segment's checksum
    // in software, so a plain receiver (no vnet header) sees final bytes.
    let (payload, got) = gso_roundtrip(false, false);
    check_segments(&payload, &got);
    for (meta, f) in &got {
        assert_eq!(*meta, PacketMeta::PLAIN);
        assert!(tcp4_checksum_ok(f), "segment checksum");
    }
}

#[test]
fn gso_tx_partial_checksum_is_reported_and_finishable() {
    if !require_root_or_skip("gso_tx_partial_checksum_is_reported_and_finishable") {
        return;
    }
    // TX checksum offload on (veth default): the segments cross the veth with
    // partial checksums, and the vnet header says so.
    let (payload, mut got) = gso_roundtrip(true, true);
    check_segments(&payload, &got);
    for (meta, f) in &mut got {
        assert!(meta.gso.is_none());
        let Checksum::Partial { start, offset } = meta.csum else {
            panic!("expected a partial checksum, got {meta:?}");
        };
        assert_eq!((start, offset), (34, 16));
        px_wire::offload::complete_partial(f, px_wire::offload::Checksum::Partial { start, offset }).unwrap();
        assert!(tcp4_checksum_ok(f));
    }
}

#[test]
fn promiscuous_and_offload_guard_restore() {
    if !require_root_or_skip("promiscuous_and_offload_guard_restore") {
        return;
    }
    let (t, s, _r) = pair(1500, false);
    let ns = t.ns(s);
    // The control socket is created inside the namespace; from then on it
    // works from this (test) thread.
    let ctl = ns.run(IfaceCtl::new).unwrap().unwrap();
    let before = ctl.offloads("eth0").unwrap();
    assert_eq!(ctl.mtu("eth0").unwrap(), 1500);
    assert_eq!(promiscuity(ns), 0);
    let guard = ns.run(|| IfaceGuard::capture("eth0")).unwrap().unwrap();
    assert_eq!(guard.original_offloads(), before);
    let g = guard.ctl();
    g.set_mtu("eth0", 1400).unwrap();
    g.set_offload("eth0", Offload::Gro, !before.gro).unwrap();
    g.set_offload("eth0", Offload::Tso, !before.tso).unwrap();
    g.set_offload("eth0", Offload::Gso, !before.gso).unwrap();
    let changed = ctl.offloads("eth0").unwrap();
    assert_eq!((changed.gro, changed.gso), (!before.gro, !before.gso));
    assert_eq!(ctl.mtu("eth0").unwrap(), 1400);
    // Dropped on this thread, which is not in the namespace: still restores
    // the namespace's eth0.
    drop(guard);
    assert_eq!(ctl.mtu("eth0").unwrap(), 1500);
    assert_eq!(ctl.offloads("eth0").unwrap(), before);
    // Promiscuous mode lasts exactly as long as the socket.
    let cfg = SocketConfig { promiscuous: true, ..SocketConfig::default() };
    let sock = ns.run(|| PacketSocket::open("eth0", &cfg)).unwrap().unwrap();
    assert_eq!(promiscuity(ns), 1);
    drop(sock);
    assert_eq!(promiscuity(ns), 0);
}

/// The kernel's promiscuity count of eth0 (`ip -d link`).
fn promiscuity(ns: &px_netns::Netns) -> u32 {
    let out = ns.ip(&["-d", "link", "show", "eth0"]).unwrap();
    let mut words = out.split_whitespace();
    words.find(|w| *w == "promiscuity").and_then(|_| words.next()).unwrap().parse().unwrap()
}

#[test]
fn guard_restores_on_panic() {
    if !require_root_or_skip("guard_restores_on_panic") {
        return;
    }
    let (t, s, _r) = pair(1500, false);
    let ctl = t.ns(s).run(IfaceCtl::new).unwrap().unwrap();
    let guard = t.ns(s).run(|| IfaceGuard::capture("eth0")).unwrap().unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        guard.ctl().set_mtu("eth0", 1280).unwrap();
        panic!("simulated failure while the port is modified");
    }));
    assert!(r.is_err());
    assert_eq!(ctl.mtu("eth0").unwrap(), 1500);
}

/// A minimal Ethernet/IPv4/UDP frame for flow placement tests.
fn udp4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [0xff; 6])
        .ipv4(src, dst, 64)
        .udp(sp, dp)
        .write(&mut out, b"px")
        .unwrap();
    out
}

#[test]
fn kernel_fanout_keeps_both_directions_on_one_worker() {
    if !require_root_or_skip("kernel_fanout_keeps_both_directions_on_one_worker") {
        return;
    }
    // left:eth0 <-> gw:p0 and gw:p1 <-> right:eth0; the gateway namespace has
    // two workers, each with one socket per port, joined in worker order.
    let line =
        Line::build(LineSpec { addressing: None, ..LineSpec::new(["fanl", "fang", "fanr"], [1500, 1500]) }).unwrap();
    let (t, l, g, r) = (&line.topo, line.left, line.middle, line.right);
    const WORKERS: usize = 2;
    let socks: Vec<[PacketSocket; 2]> = t
        .ns(g)
        .run(|| {
            (0..WORKERS)
                .map(|_| {
                    let open = |port, group| {
                        let cfg = SocketConfig {
                            vnet_hdr: false,
                            fanout: Some(Fanout { group, defrag: true }),
                            ..SocketConfig::default()
                        };
                        PacketSocket::open(port, &cfg).unwrap()
                    };
                    [open("p0", 0x7001), open("p1", 0x7002)]
                })
                .collect()
        })
        .unwrap();
    let inject_l = t.ns(l).run(|| PacketSocket::open("eth0", &SocketConfig::default())).unwrap().unwrap();
    let inject_r = t.ns(r).run(|| PacketSocket::open("eth0", &SocketConfig::default())).unwrap().unwrap();
    const FLOWS: u16 = 64;
    let (a, b) = ([198, 51, 100, 7], [203, 0, 113, 9]);
    for i in 0..FLOWS {
        send_frame(&inject_l, &PacketMeta::PLAIN, &udp4(a, b, 20000 + i, 53)).unwrap();
        send_frame(&inject_r, &PacketMeta::PLAIN, &udp4(b, a, 53, 20000 + i)).unwrap();
    }
    // worker_of[port][flow]
    let mut worker_of = [[usize::MAX; FLOWS as usize]; 2];
    let mut batch = RxBatch::new(64, 2048);
    let deadline = Instant::now() + Duration::from_secs(5);
    while worker_of.iter().flatten().any(|&w| w == usize::MAX) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        for (w, pair) in socks.iter().enumerate() {
            for (port, sock) in pair.iter().enumerate() {
                while sock.recv_batch(&mut batch).unwrap() > 0 {
                    for p in batch.iter() {
                        let f = p.unwrap().frame;
                        if f.len() < 42 || f[12..14] != [8, 0] || f[23] != 17 {
                            continue;
                        }
                        let (sp, dp) = (u16::from_be_bytes([f[34], f[35]]), u16::from_be_bytes([f[36], f[37]]));
                        let flow = usize::from(if port == 0 { sp } else { dp } - 20000);
                        assert_eq!(worker_of[port][flow], usize::MAX, "flow {flow} seen twice on port {port}");
                        worker_of[port][flow] = w;
                    }
                }
            }
        }
    }
    assert!(worker_of.iter().flatten().all(|&w| w < WORKERS), "every frame seen: {worker_of:?}");
    assert_eq!(worker_of[0], worker_of[1], "both directions of each flow on the same worker");
    for w in 0..WORKERS {
        assert!(worker_of[0].contains(&w), "worker {w} got no flow: {worker_of:?}");
    }
}
