//! A model of the kernel fast path (`crates/px-runtime/bpf/fast_path.c`)
//! as a [`Datapath`], for the engine's tests: it takes the packets of the
//! flows the engine installed, as the TC program does, before the engine
//! sees them. The same decisions as the C program, in the same order; a
//! segment from outside is checked by the engine's own rule
//! ([`ReceiveWindow::admits`]). [`KernelModel::decide`] returns what the
//! program returns (its verdict, its reason, the packet's metadata) and
//! changes the table as the program changes its map: the root test
//! `crates/px-runtime/tests/fast_path_diff.rs` runs the compiled program
//! (`BPF_PROG_TEST_RUN`) on the same packets and compares, case by case.
//! The real program is tested end to end by
//! `crates/px/tests/fast_path_lab.rs`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use px_gateway::fast_path::{Datapath, FlowProgress, InstallError, Offload, Progress, ReturnReason};
use px_gateway::{FlowKey, Port, PortCounters, ReceiveWindow};
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

/// Why the program did what it did with a packet (`enum px_reason` of
/// `bpf/fast_path.h`; the index of its counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Resized,
    AsIs,
    NoFlow,
    NotTcp,
    Malformed,
    Flags,
    Options,
    Lone,
    Adjust,
    Foreign,
    ForeignBig,
    Returned,
    Engine,
    Vlan,
}

impl Reason {
    /// The name of its counter (`PX_R_AS_IS` is `as_is`).
    pub fn name(self) -> &'static str {
        match self {
            Reason::Resized => "resized",
            Reason::AsIs => "as_is",
            Reason::NoFlow => "no_flow",
            Reason::NotTcp => "not_tcp",
            Reason::Malformed => "malformed",
            Reason::Flags => "flags",
            Reason::Options => "options",
            Reason::Lone => "lone",
            Reason::Adjust => "adjust",
            Reason::Foreign => "foreign",
            Reason::ForeignBig => "foreign_big",
            Reason::Returned => "returned",
            Reason::Engine => "engine",
            Reason::Vlan => "vlan",
        }
    }

    /// What the engine reads of a hand-back.
    fn returned(self) -> ReturnReason {
        match self {
            Reason::Flags => ReturnReason::Flags,
            Reason::Options => ReturnReason::Options,
            Reason::Lone => ReturnReason::Lone,
            Reason::Adjust => ReturnReason::Adjust,
            _ => ReturnReason::Other,
        }
    }
}

/// The program's verdict (its TC action).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `bpf_redirect` to the other port (`TC_ACT_REDIRECT`), with this
    /// metadata (the segment size possibly changed; the bytes never).
    Redirect(PacketMeta),
    /// On to user space as without the program (`TC_ACT_OK`).
    Pass,
    /// Dropped (`TC_ACT_SHOT`): a VLAN-tagged frame, which user space has
    /// from its tap.
    Drop,
}

/// What the program did with one packet: its verdict, the counter it
/// added one to (`None`: none, for a frame that is not IP or arrived on
/// neither port), and for a redirected packet what it adds to `px_ports`
/// (rx of the port it arrived on, tx of the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: Option<Reason>,
    pub wire: Option<PortCounters>,
}

impl Decision {
    fn pass(reason: Reason) -> Decision {
        Decision { verdict: Verdict::Pass, reason: Some(reason), wire: None }
    }

    /// `frame` redirected with `meta` after arriving as `segs_in` wire
    /// frames and leaving as `segs_out` (0 counts as 1), each carrying the
    /// first `hdr` bytes of headers again.
    fn redirect(frame: &[u8], meta: PacketMeta, reason: Reason, hdr: usize, segs_in: u32, segs_out: u32) -> Decision {
        let bytes = |segs: u32| frame.len() as u64 + (segs.max(1) as u64 - 1) * hdr as u64;
        let wire = PortCounters {
            rx_packets: segs_in.max(1) as u64,
            rx_bytes: bytes(segs_in),
            tx_packets: segs_out.max(1) as u64,
            tx_bytes: bytes(segs_out),
        };
        Decision { verdict: Verdict::Redirect(meta), reason: Some(reason), wire: Some(wire) }
    }
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
    /// `bpf_skb_adjust_room` refuses to change a super-packet's segment
    /// size: so it does on the skbs `BPF_PROG_TEST_RUN` builds (a
    /// `gso_size` but no `gso_type`).
    pub adjust_refused: bool,
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
    /// GRO state in `meta`), and what it changes in the table; a frame the
    /// kernel does not send on goes to user space.
    pub fn offer(&self, frame: &[u8], meta: &PacketMeta, from: Port) -> Taken {
        match self.decide(frame, meta, from, false).verdict {
            Verdict::Redirect(m) => Taken::Kernel(m),
            Verdict::Pass | Verdict::Drop => Taken::User,
        }
    }

    /// The TC program's decision for a frame that arrived on `from` (its
    /// GRO state in `meta`; `vlan`: the NIC took a VLAN tag off it), in the
    /// program's order, and what it changes in the table.
    pub fn decide(&self, frame: &[u8], meta: &PacketMeta, from: Port, vlan: bool) -> Decision {
        if vlan {
            return Decision { verdict: Verdict::Drop, reason: Some(Reason::Vlan), wire: None };
        }
        let gso = meta.gso.filter(|g| g.size > 0).map(|g| g.size as u32);
        let p = match parse(frame, gso.is_some()) {
            Ok(p) => p,
            Err(reason) => return Decision { verdict: Verdict::Pass, reason, wire: None },
        };
        let key = match from {
            Port::Outer => FlowKey::new(p.src, p.dst, p.sport, p.dport),
            Port::Inner => FlowKey::new(p.dst, p.src, p.dport, p.sport),
        };
        let mut t = self.table.lock().unwrap();
        let Some(e) = t.get_mut(&key) else { return Decision::pass(Reason::NoFlow) };
        let end = p.seq.wrapping_add(p.payload + (p.flags & SYN != 0) as u32 + (p.flags & FIN != 0) as u32);
        if from == Port::Inner && p.flags & (ACK | SYN | RST) == ACK {
            let win = ((p.window as u32) << (e.shift & 15)).min(ReceiveWindow::MAX_WINDOW);
            e.receiver.on_ack(p.ack, win);
        }
        let receiver = e.receiver;
        let Some(d) = e.dirs[from as usize].as_mut() else { return Decision::pass(Reason::Engine) };
        if d.progress.returned.is_some() {
            return Decision::pass(Reason::Returned);
        }
        let target = d.segment;
        let hdr = if p.src.is_ipv4() { 34 } else { 54 } + p.tcp_len as usize;
        let segs_in = gso.map_or(1, |g| p.payload.div_ceil(g));
        if from == Port::Outer && !receiver.admits(d.progress.next_seq, p.seq, end) {
            // Not the connection's: a router's treatment.
            return if gso.unwrap_or(p.payload) > target {
                Decision::pass(Reason::ForeignBig)
            } else {
                Decision::redirect(frame, *meta, Reason::Foreign, hdr, segs_in, segs_in)
            };
        }
        let hand_back = |d: &mut Dir, r: Reason| {
            d.progress.returned = Some(r.returned());
            Decision::pass(r)
        };
        if p.flags & (SYN | FIN | RST | URG) != 0 {
            return hand_back(d, Reason::Flags);
        }
        if !plain_options(p.options) || (p.payload > 0 && p.tcp_len != d.tcp_hlen) {
            return hand_back(d, Reason::Options);
        }
        let mut out = *meta;
        let mut reason = Reason::AsIs;
        let size = match gso {
            Some(g) => {
                if p.flags & CWR != 0 {
                    return hand_back(d, Reason::Flags);
                }
                if g != target && p.payload > target {
                    if self.adjust_refused {
                        return hand_back(d, Reason::Adjust);
                    }
                    if let Some(x) = out.gso.as_mut() {
                        x.size = target as u16;
                    }
                    reason = Reason::Resized;
                    target
                } else if g > target {
                    return hand_back(d, Reason::Lone);
                } else {
                    g
                }
            }
            None if p.payload > target => return hand_back(d, Reason::Lone),
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
        let segs_out = if size == 0 { 1 } else { p.payload.div_ceil(size) };
        pr.segs_in += segs_in as u64;
        pr.segs_out += segs_out.max(1) as u64;
        if size == target && target > 0 {
            pr.full_out += (p.payload / target) as u64;
        }
        if p.payload > 0 {
            pr.data_out += p.payload.div_ceil(size.max(1)) as u64;
        }
        Decision::redirect(frame, out, reason, hdr, segs_in, segs_out)
    }
}

/// A super-packet the kernel sends on, in the convention the tests'
/// segmentation ([`super::soft_gso`]) reads, as the kernel's GSO treats it:
/// its checksum completed per segment (the field holds the pseudo-header
/// sum, CHECKSUM_PARTIAL at the TCP checksum).
pub fn as_partial(frame: &mut [u8], meta: PacketMeta) -> PacketMeta {
    use px_wire::checksum::{fold, pseudo_v4, pseudo_v6};
    use px_wire::offload::Checksum;
    let (Some(_), Ok(p)) = (meta.gso, parse(frame, true)) else { return meta };
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

/// TCP flags (the byte at offset 13 of the header).
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;
pub const URG: u8 = 0x20;
pub const CWR: u8 = 0x80;

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
/// Ethernet's padding) is user space's, counted as the program counts it
/// (`None`: not IP, not counted), with the program's checks in its order.
fn parse(f: &[u8], gso: bool) -> Result<Parsed<'_>, Option<Reason>> {
    const MALFORMED: Option<Reason> = Some(Reason::Malformed);
    const NOT_TCP: Option<Reason> = Some(Reason::NotTcp);
    let Some(et) = f.get(12..14) else { return Err(None) };
    let (src, dst, l4, ip_end): (IpAddr, IpAddr, usize, usize) = match u16::from_be_bytes([et[0], et[1]]) {
        0x0800 => {
            let ip = f.get(14..34).ok_or(MALFORMED)?;
            if ip[0] >> 4 != 4 || ip[0] & 0x0f < 5 {
                return Err(MALFORMED);
            }
            if ip[0] & 0x0f != 5 || ip[9] != 6 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
                return Err(NOT_TCP);
            }
            let mut sum: u32 = ip.chunks_exact(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
            sum = (sum & 0xffff) + (sum >> 16);
            sum = (sum & 0xffff) + (sum >> 16);
            if sum != 0xffff {
                return Err(MALFORMED);
            }
            let len = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            if (len == 0 && !gso) || (len != 0 && len < 20) {
                return Err(MALFORMED);
            }
            let ip_end = if len == 0 { f.len() } else { 14 + len };
            if ip_end > f.len() {
                return Err(MALFORMED);
            }
            let s: [u8; 4] = ip[12..16].try_into().unwrap();
            let d: [u8; 4] = ip[16..20].try_into().unwrap();
            (Ipv4Addr::from(s).into(), Ipv4Addr::from(d).into(), 34, ip_end)
        }
        0x86dd => {
            let ip = f.get(14..54).ok_or(MALFORMED)?;
            let len = u16::from_be_bytes([ip[4], ip[5]]) as usize;
            if ip[0] >> 4 != 6 || (len == 0 && !gso) {
                return Err(MALFORMED);
            }
            let ip_end = if len == 0 { f.len() } else { 54 + len };
            if ip_end > f.len() {
                return Err(MALFORMED);
            }
            if ip[6] != 6 {
                return Err(NOT_TCP);
            }
            let s: [u8; 16] = ip[8..24].try_into().unwrap();
            let d: [u8; 16] = ip[24..40].try_into().unwrap();
            (Ipv6Addr::from(s).into(), Ipv6Addr::from(d).into(), 54, ip_end)
        }
        _ => return Err(None),
    };
    if ip_end < f.len() && f.len() > 60 {
        return Err(NOT_TCP);
    }
    let th = f.get(l4..l4 + 20).ok_or(NOT_TCP)?;
    let tcp_len = ((th[12] >> 4) as u32) * 4;
    if tcp_len < 20 || l4 + tcp_len as usize > ip_end {
        return Err(NOT_TCP);
    }
    Ok(Parsed {
        src,
        dst,
        sport: u16::from_be_bytes([th[0], th[1]]),
        dport: u16::from_be_bytes([th[2], th[3]]),
        seq: u32::from_be_bytes(th[4..8].try_into().unwrap()),
        ack: u32::from_be_bytes(th[8..12].try_into().unwrap()),
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
