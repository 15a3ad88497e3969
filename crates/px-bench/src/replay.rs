//! Replaying a trace's frames over and over on a real link (`px bench
//! gateway`): which flow each frame belongs to, and how to rewrite a
//! chunk so that its next pass continues every flow instead of sending
//! the same bytes again.
//!
//! Guarantees: after [`PassStep::advance`] every TCP/IPv4 frame's sequence
//! number follows on from where its flow's stream ended in the pass before,
//! its TSval and TSecr never go back, and its TCP checksum is still valid
//! (updated incrementally, RFC 1624). Frames that are not TCP/IPv4 are left
//! as they are.

use std::collections::HashMap;

use px_wire::tcp::{self, TcpOption, TcpSegment};

use crate::trace::Chunk;

/// The TCP/IPv4 flow key (IPv4 source, destination and ports, in one
/// number) and the TCP payload length of an Ethernet frame, if it is one.
pub fn tcp4(frame: &[u8]) -> Option<(u128, usize)> {
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

/// A small number for each flow key seen (in both directions of a bench),
/// so that per-flow counts can live in a `Vec`.
#[derive(Debug, Default)]
pub struct FlowIds {
    /// Flow key ([`tcp4`]) to id; frames that are not TCP/IPv4 share key 0.
    pub ids: HashMap<u128, u32>,
}

impl FlowIds {
    /// The id of each frame's flow, giving new flows the next ids.
    pub fn ids_of(&mut self, c: &Chunk) -> Vec<u32> {
        c.frames
            .iter()
            .map(|f| {
                let key = tcp4(&c.data[f.offset..f.offset + f.len]).map_or(0, |k| k.0);
                let n = self.ids.len() as u32;
                *self.ids.entry(key).or_insert(n)
            })
            .collect()
    }

    /// Flows seen.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no flow was seen.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// How one replay of a direction's frames moves its flows forward: the
/// payload each flow carries in one pass, and the pass's length on the
/// trace's 1 ms timestamp clock.
#[derive(Debug, Clone)]
pub struct PassStep {
    seq: Vec<u32>,
    ts: u32,
}

impl PassStep {
    /// The step of chunk `c`, whose frame `i` belongs to flow `flow_of[i]`
    /// of `flows`.
    pub fn of(c: &Chunk, flow_of: &[u32], flows: usize) -> PassStep {
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
    pub fn advance(&self, c: &mut Chunk, flow_of: &[u32]) {
        for (i, id) in flow_of.iter().enumerate().take(c.frames.len()) {
            self.advance_frame(c.frame_mut(i), *id);
        }
    }

    /// [`PassStep::advance`] for one frame `f` of flow `id`: moves it on
    /// by one pass (a frame that is not TCP/IPv4 is left as it is).
    pub fn advance_frame(&self, f: &mut [u8], id: u32) {
        if f.len() < 54 || f[12..14] != [0x08, 0x00] || f[23] != 6 {
            return;
        }
        let th = 14 + (f[14] & 0x0f) as usize * 4;
        let Ok(seg) = TcpSegment::new_checked(&f[th..]) else { return };
        let ts_at = seg
            .options()
            .filter_map(Result::ok)
            .find_map(|(at, o)| matches!(o, TcpOption::Timestamps { .. }).then_some(th + tcp::MIN_HEADER_LEN + at + 2));
        let (seq, mut csum) = (seg.seq(), seg.checksum());
        let next = seq.wrapping_add(self.seq[id as usize]);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TraceConfig;
    use crate::vs_dpdk::trace_frames;
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
        let mut keys = FlowIds::default();
        let ids = keys.ids_of(&t.data);
        let step = PassStep::of(&t.data, &ids, keys.len());
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
