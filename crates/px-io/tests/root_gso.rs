//! GSO on transmit beyond TCP over IPv4: TCP over IPv6 and UDP
//! segmentation (`UDP_L4`, what caravans will use). A super-packet written
//! with a virtio-net header onto a veth with TSO off must arrive at the
//! peer as MTU-sized packets with valid checksums and the payload intact.
//! Root only.

use std::time::{Duration, Instant};

use px_wire::checksum::{Sum, fold};

fn ones_complement_sum(data: &[u8]) -> u16 {
    fold(Sum::of(data))
}
use px_io::{Checksum, Gso, GsoKind, MAX_FRAME, PacketMeta, PacketSocket, Poller, RxBatch, SocketConfig};
use px_netns::{Offloads, Topology, require_root_or_skip, send_frame};

const V6_SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_DST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const V4_SRC: [u8; 4] = [203, 0, 113, 10];
const V4_DST: [u8; 4] = [203, 0, 113, 20];

/// Folded sum of an IPv4 or IPv6 pseudo-header (RFC 793 / RFC 8200 8.1).
fn pseudo_sum(src: &[u8], dst: &[u8], proto: u8, l4_len: usize) -> u16 {
    let mut p = Vec::new();
    p.extend_from_slice(src);
    p.extend_from_slice(dst);
    if src.len() == 16 {
        p.extend_from_slice(&(l4_len as u32).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, proto]);
    } else {
        p.extend_from_slice(&[0, proto]);
        p.extend_from_slice(&(l4_len as u16).to_be_bytes());
    }
    ones_complement_sum(&p)
}

/// True if `l4` (transport header + payload) has a valid checksum.
fn l4_checksum_ok(src: &[u8], dst: &[u8], proto: u8, l4: &[u8]) -> bool {
    let mut v = pseudo_sum(src, dst, proto, l4.len()).to_be_bytes().to_vec();
    v.extend_from_slice(l4);
    ones_complement_sum(&v) == 0xffff
}

fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// Writes `frame` with `meta` from one end of a veth (TSO off, and TX
/// checksum off so segments carry final checksums) and collects the frames
/// of `proto` the other end receives until `payload_len` bytes arrived.
fn roundtrip(mtu: u32, meta: PacketMeta, frame: &[u8], proto: u8, payload_len: usize) -> Vec<Vec<u8>> {
    let mut t = Topology::new().unwrap();
    let s = t.add_ns("gsos").unwrap();
    let r = t.add_ns("gsor").unwrap();
    t.add_veth((s, "eth0"), (r, "eth0"), mtu).unwrap();
    t.ns(s).set_offloads("eth0", Offloads::WIRE_SENDER).unwrap();
    t.ns(s).exec("ethtool", &["-K", "eth0", "tx", "off"]).unwrap();
    t.ns(r).set_offloads("eth0", Offloads { gro: Some(false), ..Offloads::default() }).unwrap();
    let plain = SocketConfig { vnet_hdr: false, ..SocketConfig::default() };
    let rx = t.ns(r).run(|| PacketSocket::open("eth0", &plain)).unwrap().unwrap();
    let tx = t.ns(s).run(|| PacketSocket::open("eth0", &SocketConfig::default())).unwrap().unwrap();
    send_frame(&tx, &meta, frame).unwrap();
    let (mut batch, mut poller) = (RxBatch::new(16, MAX_FRAME), Poller::new());
    poller.add(std::os::fd::AsFd::as_fd(&rx));
    let (mut got, mut bytes) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while bytes < payload_len && Instant::now() < deadline {
        poller.wait(Some(Duration::from_millis(50))).unwrap();
        while rx.recv_batch(&mut batch).unwrap() > 0 {
            for p in batch.iter() {
                let f = p.unwrap().frame;
                let (is_v6, l3) = (f[12..14] == [0x86, 0xdd], if f[12..14] == [0x86, 0xdd] { 40 } else { 20 });
                let p_proto = if is_v6 { f[20] } else { f[23] };
                if p_proto == proto && f.len() > 14 + l3 + 8 {
                    let hdr = 14 + l3 + if proto == 6 { usize::from(f[14 + l3 + 12] >> 4) * 4 } else { 8 };
                    bytes += f.len() - hdr;
                    got.push(f.to_vec());
                }
            }
        }
    }
    got
}

#[test]
fn gso_tcpv6_is_cut_to_the_mtu() {
    if !require_root_or_skip("gso_tcpv6_is_cut_to_the_mtu") {
        return;
    }
    // MSS 8928 = 9000 - 40 (IPv6) - 20 (TCP) - 12 (timestamps).
    let payload: Vec<u8> = (0..2 * 8928 + 50).map(|i: u32| (i % 253) as u8).collect();
    let tcp_len = 32 + payload.len();
    let mut f = eth(0x86dd);
    let mut ip = [0u8; 40];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
    ip[6] = 6;
    ip[7] = 64;
    ip[8..24].copy_from_slice(&V6_SRC);
    ip[24..40].copy_from_slice(&V6_DST);
    f.extend_from_slice(&ip);
    let mut tcp = [0u8; 32];
    tcp[0..2].copy_from_slice(&443u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&50000u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&7u32.to_be_bytes());
    tcp[12] = 8 << 4;
    tcp[13] = 0x18;
    tcp[14..16].copy_from_slice(&1000u16.to_be_bytes());
    tcp[16..18].copy_from_slice(&pseudo_sum(&V6_SRC, &V6_DST, 6, tcp_len).to_be_bytes());
    tcp[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    f.extend_from_slice(&tcp);
    f.extend_from_slice(&payload);
    let got = roundtrip(9000, PacketMeta::tcp_gso(true, 8928, 54, 86), &f, 6, payload.len());
    assert_eq!(got.len(), 3, "two full segments and a 50-byte tail");
    let mut joined = Vec::new();
    let mut seq = 7u32;
    for s in &got {
        let plen = usize::from(u16::from_be_bytes([s[18], s[19]]));
        assert!(40 + plen <= 9000, "IPv6 packet of {} bytes", 40 + plen);
        assert_eq!(s.len(), 14 + 40 + plen);
        assert!(l4_checksum_ok(&V6_SRC, &V6_DST, 6, &s[54..]), "TCP checksum of a segment");
        assert_eq!(u32::from_be_bytes([s[58], s[59], s[60], s[61]]), seq);
        seq += (plen - 32) as u32;
        joined.extend_from_slice(&s[86..]);
    }
    assert_eq!(got[0].len(), 14 + 9000);
    assert_eq!(joined, payload);
}

#[test]
fn gso_udp_l4_makes_one_datagram_per_segment() {
    if !require_root_or_skip("gso_udp_l4_makes_one_datagram_per_segment") {
        return;
    }
    // 1472 = 1500 - 20 (IPv4) - 8 (UDP): five full datagrams and a short one.
    const SEG: usize = 1472;
    let payload: Vec<u8> = (0..5 * SEG + 10).map(|i| (i % 241) as u8).collect();
    let udp_len = 8 + payload.len();
    let mut f = eth(0x0800);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&V4_SRC);
    ip[16..20].copy_from_slice(&V4_DST);
    let c = !ones_complement_sum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&4433u16.to_be_bytes());
    udp[2..4].copy_from_slice(&4434u16.to_be_bytes());
    udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    udp[6..8].copy_from_slice(&pseudo_sum(&V4_SRC, &V4_DST, 17, udp_len).to_be_bytes());
    f.extend_from_slice(&udp);
    f.extend_from_slice(&payload);
    let meta = PacketMeta {
        gso: Some(Gso { kind: GsoKind::UdpL4, size: SEG as u16, ecn: false }),
        csum: Checksum::Partial { start: 34, offset: 6 },
        hdr_len: 42,
    };
    let got = roundtrip(1500, meta, &f, 17, payload.len());
    assert_eq!(got.len(), 6);
    let mut joined = Vec::new();
    for (i, d) in got.iter().enumerate() {
        let total = usize::from(u16::from_be_bytes([d[16], d[17]]));
        assert!(total <= 1500);
        let ulen = usize::from(u16::from_be_bytes([d[38], d[39]]));
        assert_eq!(ulen, total - 20, "each datagram has its own UDP length");
        assert_eq!(ulen - 8, if i < 5 { SEG } else { 10 });
        assert!(l4_checksum_ok(&V4_SRC, &V4_DST, 17, &d[34..14 + total]), "UDP checksum of datagram {i}");
        joined.extend_from_slice(&d[42..14 + total]);
    }
    assert_eq!(joined, payload);
}
