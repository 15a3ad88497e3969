//! Whatever the bytes, a checked constructor either refuses them or yields a
//! view none of whose accessors panics. Frames are random but biased toward
//! valid-looking headers so that the deep layers are reached.

use proptest::prelude::*;
use px_wire::checksum::Sum;
use px_wire::icmp::IcmpMessage;
use px_wire::ipv4::Ipv4Packet;
use px_wire::ipv6::Ipv6Packet;
use px_wire::tcp::TcpSegment;
use px_wire::udp::UdpDatagram;
use px_wire::{FrameInfo, Transport};

fn exercise(frame: &[u8]) {
    if let Ok(Some(info)) = FrameInfo::parse(frame) {
        let ip = &frame[info.l3..info.end];
        let l4 = &frame[info.l4..info.end];
        if let Ok(p) = Ipv4Packet::new_checked(ip) {
            let _ = (p.options(), p.payload(), p.verify_checksum(), p.frag_offset(), p.src(), p.dst());
        }
        if let Ok(p) = Ipv6Packet::new_checked(ip) {
            let _ = (p.payload(), p.upper_layer(), p.flow_label(), p.traffic_class(), p.final_dst());
        }
        let _ = info.pseudo_header(frame, info.protocol, l4.len());
        // Any bytes may be quoted by an ICMP error.
        let _ = px_wire::icmp::parse_quoted(ip);
        let _ = px_wire::icmp::parse_quoted_as_host(ip, false);
        let _ = px_wire::icmp::parse_quoted_as_host(ip, true);
        let _ = px_wire::icmp::parse_quoted(l4);
        match info.transport {
            Transport::Tcp { .. } => {
                let t = TcpSegment::new_checked(l4).expect("FrameInfo said TCP");
                for o in t.options() {
                    let _ = o;
                }
                let _ = (t.payload(), t.mss(), t.seq_len(), t.verify_checksum(Sum(0)));
                let mut copy = l4.to_vec();
                let mut m = TcpSegment::new_checked(&mut copy[..]).unwrap();
                let _ = m.rewrite_mss(9000);
                m.fill_checksum(Sum(1));
            }
            Transport::Udp { .. } if !info.fragment => {
                let u = UdpDatagram::new_checked(l4).expect("FrameInfo said UDP");
                let _ = (u.payload(), u.verify_checksum(Sum(0), true));
            }
            Transport::Icmp => {
                if let Ok(m) = IcmpMessage::new_checked(l4) {
                    let _ = (m.v4_next_hop_mtu(), m.v6_mtu(), m.quoted(), m.verify_checksum(Sum(0)));
                    let _ = px_wire::icmp::parse_quoted(m.quoted());
                }
            }
            _ => {}
        }
    }
}

fn frame_strategy() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![Just(0x0800u16), Just(0x86dd), Just(0x8100), any::<u16>()],
        prop_oneof![Just(0x45u8), Just(0x46), Just(0x60), any::<u8>()],
        prop_oneof![Just(6u8), Just(17), Just(1), Just(58), Just(0), Just(44), any::<u8>()],
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(et, vihl, proto, mut rest)| {
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&et.to_be_bytes());
            if et == 0x8100 {
                f.extend_from_slice(&[0, 5, 0x08, 0x00]);
            }
            f.push(vihl);
            if rest.len() > 8 {
                rest[8] = proto; // IPv4 protocol position (offset 9 from l3)
                rest[5] = proto; // IPv6 next header position (offset 6 from l3)
            }
            f.extend_from_slice(&rest);
            f
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]
    #[test]
    fn no_accessor_panics(frame in frame_strategy()) {
        exercise(&frame);
    }

    #[test]
    fn no_accessor_panics_raw(frame in proptest::collection::vec(any::<u8>(), 0..120)) {
        exercise(&frame);
    }
}
