//! A model of the kernel fast path (`crates/px-runtime/bpf/fast_path.c`)
//! as a [`Datapath`], for the engine's tests: it takes the packets of the
//! flows the engine installed, as the TC program does, before the engine
//! sees them. The same decisions as the C program, in the same order; a
//! segment from outside is checked by the engine's own rule
//! ([`ReceiveWindow::admits`]). The real program is tested end to end by
//! `crates/px/tests/fast_path_lab.rs`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use px_gateway::fast_path::{Datapath, FlowProgress, InstallError, Offload, Progress, ReturnReason};
use px_gateway::{FlowKey, Port, ReceiveWindow};
use px_wire::offload::PacketMeta;

/// What the model did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Sent on by the kernel, toward the other port, with this metadata
    /// (the segment size possibly changed).
    Kernel(PacketMeta),
    /// Up to user space (the engine).
    User,
}

/// One direction of a flow in the table, as `struct px_dir`.
#[derive(Debug, Clone, Copy)]
struct Dir {
    segment: u32,
    tcp_hlen: u32,
    progress: Progress,
}

/// A flow in the table, as `struct px_flow`: its directions by the port
/// they arrive on (`None`: the engine's), and the inner host's window.
#[derive(Debug, Clone, Copy)]
struct Entry {
    dirs: [Option<Dir>; 2],
    receiver: ReceiveWindow,
    shift: u8,
}

/// The kernel's flow table, shared between the engine's handle and the
/// test's.
#[derive(Debug, Clone, Default)]
pub struct KernelModel {
    table: Arc<Mutex<HashMap<FlowKey, Entry>>>,
    /// Every install and withdrawal, in order: (installed?, flow, the port
    /// the direction's packets arrive on).
    pub log: Arc<Mutex<Vec<(bool, FlowKey, Port)>>>,
}

impl Entry {
    fn progress(&self) -> FlowProgress {
        FlowProgress { dirs: self.dirs.map(|d| d.map(|d| d.progress)), receiver: self.receiver }
    }
}

impl Datapath for KernelModel {
    fn install(&mut self, o: &Offload) -> Result<(), InstallError> {
        let mut t = self.table.lock().unwrap();
        let e = t.entry(o.key).or_insert(Entry { dirs: [None, None], receiver: o.receiver, shift: o.inner_shift });
        for d in o.directions() {
            let progress = Progress { next_seq: d.next_seq, ..Progress::default() };
            e.dirs[d.from as usize] =
                Some(Dir { segment: d.segment as u32, tcp_hlen: d.tcp_header_len as u32, progress });
            self.log.lock().unwrap().push((true, o.key, d.from));
        }
        Ok(())
    }

    fn progress(&self, key: &FlowKey) -> Option<FlowProgress> {
        self.table.lock().unwrap().get(key).map(Entry::progress)
    }

    fn withdraw(&mut self, key: &FlowKey, from: Port) -> Option<FlowProgress> {
        let mut t = self.table.lock().unwrap();
        let e = t.get_mut(key)?;
        let fp = e.progress();
        e.dirs[from as usize].take()?;
        if e.dirs.iter().all(Option::is_none) {
            t.remove(key);
        }
        self.log.lock().unwrap().push((false, *key, from));
        Some(fp)
    }
}

impl KernelModel {
    /// Flows the kernel carries now (in a direction or both, handed back
    /// ones included).
    pub fn entries(&self) -> usize {
        self.table.lock().unwrap().len()
    }

    /// The TC program's decision for a frame that arrived on `from` (its
    /// GRO state in `meta`), and what it changes in the table.
    pub fn offer(&self, frame: &[u8], meta: &PacketMeta, from: Port) -> Taken {
        let gso = meta.gso.filter(|g| g.size > 0).map(|g| g.size as u32);
        let Some(p) = parse(frame, gso.is_some()) else { return Taken::User };
        let key = match from {
            Port::Outer => FlowKey::new(p.src, p.dst, p.sport, p.dport),
            Port::Inner => FlowKey::new(p.dst, p.src, p.dport, p.sport),
        };
        let mut t = self.table.lock().unwrap();
        let Some(e) = t.get_mut(&key) else { return Taken::User };
        let end = p.seq.wrapping_add(p.payload + (p.flags & SYN != 0) as u32 + (p.flags & FIN != 0) as u32);
        if from == Port::Inner && p.flags & (ACK | SYN | RST) == ACK {
            let win = ((p.window as u32) << (e.shift & 15)).min(ReceiveWindow::MAX_WINDOW);
            e.receiver.on_ack(p.ack, win);
        }
        let receiver = e.receiver;
        let Some(d) = e.dirs[from as usize].as_mut() else { return Taken::User };
        if d.progress.returned.is_some() {
            return Taken::User;
        }
        let target = d.segment;
        if from == Port::Outer && !receiver.admits(d.progress.next_seq, p.seq, end) {
            // Not the connection's: a router's treatment.
            return if gso.unwrap_or(p.payload) > target { Taken::User } else { Taken::Kernel(*meta) };
        }
        let hand_back = |d: &mut Dir, r| {
            d.progress.returned = Some(r);
            Taken::User
        };
        if p.flags & (SYN | FIN | RST | URG) != 0 {
            return hand_back(d, ReturnReason::Flags);
        }
        if !plain_options(p.options) || (p.payload > 0 && p.tcp_len != d.tcp_hlen) {
            return hand_back(d, ReturnReason::Options);
        }
        let mut out = *meta;
        let size = match gso {
            Some(g) => {
                if p.flags & CWR != 0 {
                    return hand_back(d, ReturnReason::Flags);
                }
                if g != target && p.payload > target {
                    if let Some(x) = out.gso.as_mut() {
                        x.size = target as u16;
                    }
                    target
                } else if g > target {
                    return hand_back(d, ReturnReason::Lone);
                } else {
                    g
                }
            }
            None if p.payload > target => return hand_back(d, ReturnReason::Lone),
            None => p.payload,
        };
        let pr = &mut d.progress;
        let ahead = end.wrapping_sub(pr.next_seq) as i32;
        if ahead > 0 {
            pr.next_seq = end;
            pr.advanced += ahead as u64;
        }
        if p.flags & ACK != 0 {
            pr.ack = p.ack;
        }
        pr.packets += 1;
        pr.bytes += p.payload as u64;
        pr.segs_in += gso.map_or(1, |g| p.payload.div_ceil(g.max(1))) as u64;
        pr.segs_out += if size == 0 { 1 } else { p.payload.div_ceil(size).max(1) } as u64;
        if size == target && target > 0 {
            pr.full_out += (p.payload / target) as u64;
        }
        if p.payload > 0 {
            pr.data_out += p.payload.div_ceil(size.max(1)) as u64;
        }
        Taken::Kernel(out)
    }
}

/// A super-packet the kernel sends on, in the convention the tests'
/// segmentation ([`super::soft_gso`]) reads, as the kernel's GSO treats it:
/// its checksum completed per segment (the field holds the pseudo-header
/// sum, CHECKSUM_PARTIAL at the TCP checksum).
pub fn as_partial(frame: &mut [u8], meta: PacketMeta) -> PacketMeta {
    use px_wire::checksum::{fold, pseudo_v4, pseudo_v6};
    use px_wire::offload::Checksum;
    let (Some(_), Some(p)) = (meta.gso, parse(frame, true)) else { return meta };
    let l4 = if p.src.is_ipv4() { 34 } else { 54 };
    let (l4_len, tcp_len) = (p.tcp_len + p.payload, p.tcp_len);
    let sum = match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_v4(s, d, 6, l4_len as u16),
        (IpAddr::V6(s), IpAddr::V6(d)) => pseudo_v6(s, d, 6, l4_len),
        _ => return meta,
    };
    frame[l4 + 16..l4 + 18].copy_from_slice(&fold(sum).to_be_bytes());
    PacketMeta {
        csum: Checksum::Partial { start: l4 as u16, offset: 16 },
        hdr_len: (l4 as u32 + tcp_len) as u16,
        ..meta
    }
}

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;
const URG: u8 = 0x20;
const CWR: u8 = 0x80;

struct Parsed<'a> {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    tcp_len: u32,
    options: &'a [u8],
    payload: u32,
}

/// Plain IPv4 (no options, not a fragment, its header checksum right) or
/// IPv6 (TCP right after the fixed header) TCP after an untagged Ethernet
/// header; the payload length from the IP header (0: a BIG TCP
/// super-packet, to the end of the frame; on a packet that is not a GSO
/// one, malformed). Anything else (with bytes after the IP packet beyond
/// Ethernet's padding) is user space's.
fn parse(f: &[u8], gso: bool) -> Option<Parsed<'_>> {
    let et = u16::from_be_bytes(f.get(12..14)?.try_into().ok()?);
    let (src, dst, l4, ip_end): (IpAddr, IpAddr, usize, usize) = match et {
        0x0800 => {
            let ip = f.get(14..34)?;
            if ip[0] >> 4 != 4 || ip[0] & 0x0f != 5 || ip[9] != 6 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
                return None;
            }
            let mut sum: u32 = ip.chunks_exact(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
            sum = (sum & 0xffff) + (sum >> 16);
            sum = (sum & 0xffff) + (sum >> 16);
            if sum != 0xffff {
                return None;
            }
            let len = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            if (len == 0 && !gso) || (len != 0 && len < 20) {
                return None;
            }
            let s: [u8; 4] = ip[12..16].try_into().ok()?;
            let d: [u8; 4] = ip[16..20].try_into().ok()?;
            (Ipv4Addr::from(s).into(), Ipv4Addr::from(d).into(), 34, if len == 0 { f.len() } else { 14 + len })
        }
        0x86dd => {
            let ip = f.get(14..54)?;
            let len = u16::from_be_bytes([ip[4], ip[5]]) as usize;
            if ip[0] >> 4 != 6 || (len == 0 && !gso) || ip[6] != 6 {
                return None;
            }
            let s: [u8; 16] = ip[8..24].try_into().ok()?;
            let d: [u8; 16] = ip[24..40].try_into().ok()?;
            (Ipv6Addr::from(s).into(), Ipv6Addr::from(d).into(), 54, if len == 0 { f.len() } else { 54 + len })
        }
        _ => return None,
    };
    if ip_end > f.len() || (ip_end < f.len() && f.len() > 60) {
        return None;
    }
    let th = f.get(l4..l4 + 20)?;
    let tcp_len = ((th[12] >> 4) as u32) * 4;
    if tcp_len < 20 || l4 + tcp_len as usize > ip_end {
        return None;
    }
    Some(Parsed {
        src,
        dst,
        sport: u16::from_be_bytes([th[0], th[1]]),
        dport: u16::from_be_bytes([th[2], th[3]]),
        seq: u32::from_be_bytes(th[4..8].try_into().ok()?),
        ack: u32::from_be_bytes(th[8..12].try_into().ok()?),
        flags: th[13],
        window: u16::from_be_bytes([th[14], th[15]]),
        tcp_len,
        options: &f[l4 + 20..l4 + tcp_len as usize],
        payload: (ip_end - l4) as u32 - tcp_len,
    })
}

/// The option layouts Linux writes: none; NOP NOP TS; NOP NOP SACK (1 to
/// 4 blocks), after timestamps or alone.
fn plain_options(o: &[u8]) -> bool {
    let sack = |s: &[u8]| {
        s.len() >= 12 && s[0] == 1 && s[1] == 1 && s[2] == 5 && (s[3] as usize) + 2 == s.len() && (s[3] - 2) % 8 == 0
    };
    match o.len() {
        0 => true,
        12 if o[..4] == [1, 1, 8, 10] => true,
        n if n > 12 && o[..4] == [1, 1, 8, 10] => sack(&o[12..]),
        _ => sack(o),
    }
}
