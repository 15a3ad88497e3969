//! Unpacking: an outbound caravan is validated whole, then cut into its
//! datagrams with IP headers rebuilt (length, DSCP 0, a fresh IPv4 ID,
//! header checksum) and the records' own UDP checksums kept; a datagram
//! larger than the egress gets the router treatment, counted as the
//! datagram's own (`caravan.too_big_*`): the caravan is the received packet,
//! counted once, in `caravan.opened`. A malformed caravan is dropped whole
//! and counted by reason.

use std::time::Instant;

use px_wire::caravan::{Caravan, Malformed};
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::udp::UdpDatagram;
use px_wire::{FrameInfo, IpVersion};

use crate::buf::{Transmit, Verdict};
use crate::caravan::ip::{pseudo, set_ip_header};
use crate::counters::DropReason;
use crate::engine::Engine;
use crate::port::Port;

impl Engine {
    /// Unpacks an outbound caravan into its datagrams, or drops it whole.
    pub(super) fn unpack(
        &mut self,
        now: Instant,
        frame: &[u8],
        info: &FrameInfo,
        meta: PacketMeta,
        sp: u16,
        dp: u16,
    ) -> Verdict {
        let udp_bytes = &frame[info.l4..info.end];
        let outer = UdpDatagram::new_unchecked(udp_bytes);
        // The outer checksum covers every record: check it once, unless the
        // I/O layer did. IPv6 forbids a zero checksum (RFC 8200 §8.1).
        let zero_ok = info.version == IpVersion::V4;
        let check = meta.csum == Checksum::Unknown || outer.checksum() == 0;
        if check && !outer.verify_checksum(pseudo(info, udp_bytes.len()), zero_ok) {
            return self.malformed(Malformed::Checksum);
        }
        let caravan = match Caravan::parse(outer.payload(), Some((sp, dp))) {
            Ok(c) => c,
            Err(e) => return self.malformed(e.reason()),
        };
        let (l3, l4) = (info.l3, info.l4);
        // A record that a pool buffer cannot hold (a caravan larger than the
        // iMTU: `imtu` below the link MTU, or a frame through an I/O path
        // that reassembles) is larger than any caravan may carry: dropped whole,
        // before anything leaves, never a panic.
        if caravan.iter().any(|r| l4 + r.datagram().len() > self.pool.size()) {
            return self.drop(DropReason::TooBigUncuttable);
        }
        self.counters.caravan.opened += 1;
        self.counters.caravan.opened_datagrams += caravan.len() as u64;
        for rec in caravan.iter() {
            let d = rec.datagram();
            let end = l4 + d.len();
            let mut buf = self.pool.get(end);
            buf[..l4].copy_from_slice(&frame[..l4]);
            buf[l4..end].copy_from_slice(d);
            let ident = (info.version == IpVersion::V4).then_some(self.caravans.ident);
            self.caravans.ident = self.caravans.ident.wrapping_add(1);
            set_ip_header(&mut buf[l3..l4], 0, end - l3, ident);
            if info.version == IpVersion::V6 && rec.checksum() == 0 {
                // A zero inner checksum cannot leave over IPv6 (RFC 8200 §8.1).
                UdpDatagram::new_unchecked(&mut buf[l4..end]).fill_checksum(pseudo(info, d.len()));
            }
            self.send_unpacked(now, buf, end);
        }
        Verdict::Consumed
    }

    /// Sends one rebuilt datagram out of the outer port, as a router would.
    fn send_unpacked(&mut self, now: Instant, buf: Vec<u8>, end: usize) {
        let Ok(Some(info)) = FrameInfo::parse(&buf[..end]) else {
            // Cannot happen for a frame built from a parsed caravan; counted
            // rather than trusted.
            let _ = self.drop(DropReason::Malformed);
            self.pool.put(buf);
            return;
        };
        let mtu = self.egress_mtu(now, Port::Outer, info.dst) as usize;
        if info.ip_len() <= mtu {
            self.queue(Transmit { port: Port::Outer, buf, start: 0, end, meta: PacketMeta::PLAIN });
            return;
        }
        // The router's treatment, counted as the datagram's own: the caravan
        // it came in is the received packet, counted once (in `opened`).
        let fragmented = match info.version {
            IpVersion::V4 if !info.dont_frag => self.write_fragments(Port::Outer, &buf, &info, mtu),
            _ => {
                self.too_big(now, Port::Inner, &buf, &info, mtu as u16);
                false
            }
        };
        if fragmented {
            self.counters.caravan.too_big_fragmented += 1;
        } else {
            self.counters.caravan.too_big_dropped += 1;
        }
        self.pool.put(buf);
    }

    fn malformed(&mut self, r: Malformed) -> Verdict {
        self.counters.caravan.malformed[r as usize] += 1;
        self.drop(DropReason::Malformed)
    }
}
