//! A model of the kernel fast path (`crates/px-runtime/bpf/fast_path.c`)
//! as a [`Datapath`], for the engine's tests: it takes the packets of the
//! flows the engine installed, as the TC program does, before the engine
//! sees them. The same decisions as the C program, written again from its
//! comments, not translated line by line. Nothing checks the model
//! against the program case by case (`BPF_PROG_TEST_RUN` would): the real
//! program is tested end to end by `crates/px/tests/fast_path_lab.rs`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use px_gateway::fast_path::{Datapath, DirKey, Direction, InstallError, Offload, Progress, ReturnReason};
use px_wire::offload::PacketMeta;

/// How far from the expected sequence a segment from outside may start.
const MAX_AHEAD: i32 = 256 << 10;

/// What the model did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Sent on by the kernel, toward the other port, with this metadata
    /// (the segment size possibly changed).
    Kernel(PacketMeta),
    /// Up to user space (the engine).
    User,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    dir: Direction,
    progress: Progress,
}

/// The kernel's flow table, shared between the engine's handle and the
/// test's.
#[derive(Debug, Clone, Default)]
pub struct KernelModel {
    table: Arc<Mutex<HashMap<DirKey, Entry>>>,
    /// Every install and withdrawal, in order: (installed?, direction).
    pub log: Arc<Mutex<Vec<(bool, DirKey)>>>,
}

impl Datapath for KernelModel {
    fn install(&mut self, o: &Offload) -> Result<(), InstallError> {
        let mut t = self.table.lock().unwrap();
        for d in o.directions() {
            t.insert(d.key, Entry { dir: *d, progress: Progress { next_seq: d.next_seq, ..Progress::default() } });
            self.log.lock().unwrap().push((true, d.key));
        }
        Ok(())
    }

    fn progress(&self, key: &DirKey) -> Option<Progress> {
        self.table.lock().unwrap().get(key).map(|e| e.progress)
    }

    fn withdraw(&mut self, key: &DirKey) -> Option<Progress> {
        let e = self.table.lock().unwrap().remove(key)?;
        self.log.lock().unwrap().push((false, *key));
        Some(e.progress)
    }
}

impl KernelModel {
    /// Directions the kernel carries now (handed back ones included).
    pub fn entries(&self) -> usize {
        self.table.lock().unwrap().len()
    }

    /// The TC program's decision for a frame (its GRO state in `meta`),
    /// and what it changes in the table.
    pub fn offer(&self, frame: &[u8], meta: &PacketMeta) -> Taken {
        let Some(p) = parse(frame) else { return Taken::User };
        let mut t = self.table.lock().unwrap();
        let Some(e) = t.get_mut(&p.key) else { return Taken::User };
        if e.progress.returned.is_some() {
            return Taken::User;
        }
        let gso = meta.gso.filter(|g| g.size > 0).map(|g| g.size as u32);
        let target = e.dir.segment as u32;
        if e.dir.check_window {
            let d = p.seq.wrapping_sub(e.progress.next_seq) as i32;
            if !(-MAX_AHEAD..=MAX_AHEAD).contains(&d) {
                // Not the connection's: a router's treatment.
                return if gso.unwrap_or(p.payload) > target { Taken::User } else { Taken::Kernel(*meta) };
            }
        }
        let hand_back = |e: &mut Entry, r| {
            e.progress.returned = Some(r);
            Taken::User
        };
        if p.flags & (SYN | FIN | RST | URG) != 0 {
            return hand_back(e, ReturnReason::Flags);
        }
        if !plain_options(p.options) || (p.payload > 0 && p.tcp_len != e.dir.tcp_header_len as u32) {
            return hand_back(e, ReturnReason::Options);
        }
        let mut out = *meta;
        let size = match gso {
            Some(g) => {
                if p.flags & CWR != 0 {
                    return hand_back(e, ReturnReason::Flags);
                }
                if g != target && p.payload > target {
                    if let Some(x) = out.gso.as_mut() {
                        x.size = target as u16;
                    }
                    target
                } else if g > target {
                    return hand_back(e, ReturnReason::Lone);
                } else {
                    g
                }
            }
            None if p.payload > target => return hand_back(e, ReturnReason::Lone),
            None => p.payload,
        };
        let end = p.seq.wrapping_add(p.payload);
        if (end.wrapping_sub(e.progress.next_seq) as i32) > 0 {
            e.progress.next_seq = end;
        }
        let pr = &mut e.progress;
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
    let (Some(_), Some(p)) = (meta.gso, parse(frame)) else { return meta };
    let l4 = if p.key.src.is_ipv4() { 34 } else { 54 };
    let (l4_len, tcp_len) = (p.tcp_len + p.payload, p.tcp_len);
    let sum = match (p.key.src, p.key.dst) {
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
const URG: u8 = 0x20;
const CWR: u8 = 0x80;

struct Parsed<'a> {
    key: DirKey,
    seq: u32,
    flags: u8,
    tcp_len: u32,
    options: &'a [u8],
    payload: u32,
}

/// Plain IPv4 (no options, not a fragment) or IPv6 (TCP right after the
/// fixed header) TCP after an untagged Ethernet header; the payload
/// length from the IP header.
fn parse(f: &[u8]) -> Option<Parsed<'_>> {
    let et = u16::from_be_bytes(f.get(12..14)?.try_into().ok()?);
    let (src, dst, l4, ip_end): (IpAddr, IpAddr, usize, usize) = match et {
        0x0800 => {
            let ip = f.get(14..34)?;
            if ip[0] & 0x0f != 5 || ip[9] != 6 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
                return None;
            }
            let len = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            let s: [u8; 4] = ip[12..16].try_into().ok()?;
            let d: [u8; 4] = ip[16..20].try_into().ok()?;
            (Ipv4Addr::from(s).into(), Ipv4Addr::from(d).into(), 34, 14 + len)
        }
        0x86dd => {
            let ip = f.get(14..54)?;
            if ip[6] != 6 {
                return None;
            }
            let len = u16::from_be_bytes([ip[4], ip[5]]) as usize;
            let s: [u8; 16] = ip[8..24].try_into().ok()?;
            let d: [u8; 16] = ip[24..40].try_into().ok()?;
            (Ipv6Addr::from(s).into(), Ipv6Addr::from(d).into(), 54, 54 + len)
        }
        _ => return None,
    };
    let th = f.get(l4..l4 + 20)?;
    let tcp_len = ((th[12] >> 4) as u32) * 4;
    if !(20..=60).contains(&tcp_len) || ip_end < l4 + tcp_len as usize || ip_end > f.len() {
        return None;
    }
    Some(Parsed {
        key: DirKey { src, dst, sport: u16::from_be_bytes([th[0], th[1]]), dport: u16::from_be_bytes([th[2], th[3]]) },
        seq: u32::from_be_bytes(th[4..8].try_into().ok()?),
        flags: th[13],
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
