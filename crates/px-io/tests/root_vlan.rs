//! 802.1Q / 802.1ad tags through a packet socket (issue 10 item 6). On
//! receive the kernel moves the outer tag out of the frame into the packet's
//! metadata (`skb_vlan_untag`, whether or not a VLAN device exists; this
//! kernel has no `8021q` module), so a receive path that ignores
//! `PACKET_AUXDATA` forwards the frame untagged. px-io puts the tag back,
//! on the `recvmmsg` path (the auxdata control message) and on the ring
//! (`tp_vlan_tci`/`tp_vlan_tpid`), with the virtio-net checksum offsets
//! moved with it. Tagged frames are crafted and sent on a packet socket in
//! one namespace and received on the veth peer in another.

use std::time::{Duration, Instant};

use px_io::{Checksum, MAX_FRAME, PacketMeta, PacketSocket, RingGeometry, RxBatch, SocketConfig};
use px_netns::{NsId, Topology, require_root_or_skip, send_frame};

fn pair() -> (Topology, NsId, NsId) {
    let mut t = Topology::new().unwrap();
    let s = t.add_ns("vlsnd").unwrap();
    let r = t.add_ns("vlrcv").unwrap();
    t.add_veth((s, "eth0"), (r, "eth0"), 1500).unwrap();
    (t, s, r)
}

/// Broadcast Ethernet, `tags` (TPID, TCI), IPv4/UDP 198.51.100.1 →
/// 198.51.100.2 with `payload`. UDP checksum complete, or (`partial`) the
/// folded pseudo-header sum, as a sender with checksum offload leaves it.
fn tagged_udp(tags: &[(u16, u16)], payload: &[u8], partial: bool) -> (Vec<u8>, usize) {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 9]);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    let mut ip = Vec::new();
    etherparse::PacketBuilder::ipv4([198, 51, 100, 1], [198, 51, 100, 2], 64)
        .udp(4000, 5000)
        .write(&mut ip, payload)
        .unwrap();
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let l4 = f.len() + 20;
    f.extend_from_slice(&ip);
    if partial {
        let mut s: u32 = [0xc633u32, 0x6401, 0xc633, 0x6402].iter().sum::<u32>() + 17 + (8 + payload.len()) as u32;
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        f[l4 + 6..l4 + 8].copy_from_slice(&(s as u16).to_be_bytes());
    }
    (f, l4)
}

fn receive(sock: &mut PacketSocket, ring: bool, want: usize) -> Vec<(PacketMeta, Vec<u8>)> {
    let mut got = Vec::new();
    let mut batch = RxBatch::new(8, MAX_FRAME);
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < want && Instant::now() < deadline {
        if ring {
            sock.recv_ring(16, |p| {
                let p = p.expect("frame");
                if ours(p.frame) {
                    got.push((p.meta, p.frame.to_vec()));
                }
            });
        } else {
            sock.recv_batch(&mut batch).unwrap();
            for p in batch.iter() {
                let p = p.expect("frame");
                if ours(p.frame) {
                    got.push((p.meta, p.frame.to_vec()));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    got
}

/// Only the test's frames (IPv6 neighbour discovery may pass too).
fn ours(f: &[u8]) -> bool {
    f.get(6..12) == Some(&[2, 0, 0, 0, 0, 9][..])
}

#[test]
fn vlan_tags_survive_the_receive_path() {
    if !require_root_or_skip("vlan_tags_survive_the_receive_path") {
        return;
    }
    let (t, s, r) = pair();
    let cases: Vec<Vec<(u16, u16)>> = vec![
        vec![(0x8100, 0x2064)],                   // priority 1, VLAN 100
        vec![(0x8100, 0x0000)],                   // priority-tagged, VLAN 0
        vec![(0x88a8, 0x0123), (0x8100, 0x0064)], // QinQ: S-tag 291, C-tag 100
        vec![],                                   // untagged stays untagged
    ];
    for ring in [false, true] {
        let cfg = SocketConfig { rx_ring: ring.then_some(RingGeometry::SUPER_PACKETS), ..SocketConfig::default() };
        let mut rx = t.ns(r).run(|| PacketSocket::open("eth0", &cfg)).unwrap().unwrap();
        let tx = t.ns(s).run(|| PacketSocket::open("eth0", &SocketConfig::default())).unwrap().unwrap();
        let mut sent = Vec::new();
        for tags in &cases {
            let (f, l4) = tagged_udp(tags, b"tagged frame", false);
            send_frame(&tx, &PacketMeta::PLAIN, &f).unwrap();
            sent.push(f);
            // Checksum left to the receiver: the offsets must move with the tag.
            let (f, l4p) = tagged_udp(tags, b"partial sum", true);
            assert_eq!(l4, l4p);
            let meta = PacketMeta { csum: Checksum::Partial { start: l4 as u16, offset: 6 }, ..PacketMeta::PLAIN };
            send_frame(&tx, &meta, &f).unwrap();
            sent.push(f);
        }
        let got = receive(&mut rx, ring, sent.len());
        assert_eq!(got.len(), sent.len(), "ring={ring}: frames received");
        for (i, ((meta, g), f)) in got.iter().zip(&sent).enumerate() {
            let ctx = format!("ring={ring} frame {i} tags {:?}", cases[i / 2]);
            if i % 2 == 0 {
                assert_eq!(g, f, "{ctx}: the frame as it was sent, tags included");
            } else {
                let Checksum::Partial { start, offset } = meta.csum else {
                    panic!("{ctx}: expected a partial checksum, got {meta:?}")
                };
                let mut g = g.clone();
                px_wire::offload::complete_partial(&mut g, px_wire::offload::Checksum::Partial { start, offset })
                    .unwrap();
                let (mut want, l4) = tagged_udp(&cases[i / 2], b"partial sum", false);
                assert_eq!(start as usize, l4, "{ctx}: csum_start moved with the tag");
                want.truncate(g.len());
                assert_eq!(g, want, "{ctx}: tags back, checksum finishes right");
            }
        }
    }
}
