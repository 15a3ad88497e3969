//! Differential test of the kernel fast path (issue 36 item 2): the
//! compiled TC program (`bpf/fast_path.c`, the object `build.rs` embeds)
//! against its Rust model (`px-gateway/tests/common/kernel.rs`, which the
//! engine's tests use as their kernel), packet by packet.
//!
//! The program is loaded but attached nowhere
//! ([`FastPath::load_by_index`]); its flow table is filled by the gateway's own install code
//! ([`KernelDatapath`]) from the [`Offload`] the engine would hand it, and
//! each packet runs through it with `BPF_PROG_TEST_RUN`, which sends
//! nothing anywhere: the kernel builds an skb of the bytes, runs the
//! program and reports its verdict. For every packet the test compares the
//! verdict (TC action), the packet after the program (bytes and segment
//! size), the counter it added to (`px_reasons`), what it added to the
//! ports' wire counts (`px_ports`) and the flow's entry (every field the
//! engine reads back) with what the model returns.
//! Proptest generates flows and packet sequences (a bounded number: a few
//! seconds); named cases reach every reason the harness can reach.
//!
//! What `BPF_PROG_TEST_RUN` cannot show (docs/fast-path.md, "What the
//! differential test cannot see"): where a redirect goes and what the
//! egress makes of it, a real GRO super-packet (its skb has a `gso_size`
//! but no `gso_type`, so `bpf_skb_adjust_room` refuses to resize it: the
//! model is told so), and a tag the kernel took off (`vlan_present`: the
//! last test here sends real tagged frames over a veth to the attached
//! program). The root lab tests in `crates/px/tests/fast_path_lab.rs`
//! cover the rest.
//!
//! Root only (loading a BPF program); skips with a message otherwise, or
//! when this build has no program (no clang). Nothing is pinned: the
//! program and its maps go when the test drops them.

#[path = "../../px-gateway/tests/common/kernel.rs"]
#[allow(dead_code)]
mod kernel;

use std::net::IpAddr;

use aya::TestRunOptions;
use kernel::{ACK, CWR, Decision, FIN, KernelModel, RST, Reason, SYN, URG, Verdict};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use px_gateway::fast_path::{Datapath, Direction, FlowProgress, Offload};
use px_gateway::{FlowKey, Port, PortCounters, ReceiveWindow};
use px_runtime::fast_path::{FastPath, FastPathStats, KernelDatapath, REASONS};
use px_wire::offload::{Checksum, Gso, GsoKind, PacketMeta};

/// `ingress_ifindex` of packets from the inner and the outer port (no
/// such devices are needed: the program only compares the numbers).
const IFINDEX: [u32; 2] = [4001, 4002];

/// TC actions (`linux/pkt_cls.h`).
const TC_ACT_OK: u32 = 0;
const TC_ACT_SHOT: u32 = 2;
const TC_ACT_REDIRECT: u32 = 7;

/// `struct __sk_buff` (`linux/bpf.h`), the context `BPF_PROG_TEST_RUN`
/// takes and gives back: of its fields the kernel lets a test set `mark`,
/// `priority`, `ingress_ifindex`, `ifindex`, `cb`, `tstamp`, `wire_len`,
/// `gso_segs`, `gso_size` and `hwtstamp`; the rest must be zero.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SkBuff {
    len: u32,
    pkt_type: u32,
    mark: u32,
    queue_mapping: u32,
    protocol: u32,
    vlan_present: u32,
    vlan_tci: u32,
    vlan_proto: u32,
    priority: u32,
    ingress_ifindex: u32,
    ifindex: u32,
    tc_index: u32,
    cb: [u32; 5],
    hash: u32,
    tc_classid: u32,
    data: u32,
    data_end: u32,
    napi_id: u32,
    family: u32,
    remote_ip4: u32,
    local_ip4: u32,
    remote_ip6: [u32; 4],
    local_ip6: [u32; 4],
    remote_port: u32,
    local_port: u32,
    data_meta: u32,
    flow_keys: u64,
    tstamp: u64,
    wire_len: u32,
    gso_segs: u32,
    sk: u64,
    gso_size: u32,
    tstamp_type: u8,
    pad: [u8; 3],
    hwtstamp: u64,
}

const _: () = assert!(std::mem::size_of::<SkBuff>() == 192);
const _: () = assert!(std::mem::offset_of!(SkBuff, ingress_ifindex) == 36);
const _: () = assert!(std::mem::offset_of!(SkBuff, gso_size) == 176);

impl SkBuff {
    fn bytes(&self) -> [u8; 192] {
        // SAFETY: repr(C) integers without implicit padding (asserted size).
        unsafe { std::mem::transmute(*self) }
    }

    fn from_bytes(b: [u8; 192]) -> SkBuff {
        // SAFETY: every bit pattern is a valid SkBuff.
        unsafe { std::mem::transmute(b) }
    }
}

/// The loaded program, its table through the gateway's own code, and its
/// counters.
struct Program {
    fp: FastPath,
    table: KernelDatapath,
    stats: FastPathStats,
}

/// What the program did with one packet.
#[derive(PartialEq, Eq)]
struct Ran {
    action: u32,
    packet: Vec<u8>,
    gso_size: u32,
    /// The counters that moved, by name, and by how much.
    counted: Vec<(&'static str, u64)>,
    /// What `px_ports` gained, by `Port as usize` (rx of the arrival port,
    /// tx of the other).
    ports: [PortCounters; 2],
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The packet's length and a hash of its bytes, not every byte.
        let fnv = self.packet.iter().fold(0x811c_9dc5u32, |h, b| (h ^ *b as u32).wrapping_mul(0x0100_0193));
        f.debug_struct("Ran")
            .field("action", &self.action)
            .field("packet", &format_args!("{} bytes, FNV-1a {fnv:08x}", self.packet.len()))
            .field("gso_size", &self.gso_size)
            .field("counted", &self.counted)
            .field("ports", &self.ports)
            .finish()
    }
}

impl Program {
    fn load() -> Program {
        let fp = FastPath::load_by_index(IFINDEX).expect("load the fast path (root, BPF)");
        let (table, stats) = (fp.datapath(), fp.stats());
        Program { fp, table, stats }
    }

    fn run(&self, frame: &[u8], gso_size: u16, from: Port) -> Ran {
        let ctx = SkBuff { ingress_ifindex: IFINDEX[from as usize], gso_size: gso_size as u32, ..SkBuff::default() };
        let ctx_in = ctx.bytes();
        let mut ctx_out = [0u8; 192];
        let mut out = vec![0u8; frame.len() + 4096];
        let (before, ports_before) = (self.stats.reasons(), self.stats.ports());
        let r = self
            .fp
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx_in),
                ctx_out: Some(&mut ctx_out),
                ..TestRunOptions::default()
            })
            .expect("BPF_PROG_TEST_RUN");
        out.truncate(r.data_size_out as usize);
        let (after, ports_after) = (self.stats.reasons(), self.stats.ports());
        let ports = [0, 1].map(|p| {
            let (a, b) = (ports_after[p], ports_before[p]);
            PortCounters {
                rx_packets: a.rx_packets - b.rx_packets,
                rx_bytes: a.rx_bytes - b.rx_bytes,
                tx_packets: a.tx_packets - b.tx_packets,
                tx_bytes: a.tx_bytes - b.tx_bytes,
            }
        });
        let counted = REASONS
            .iter()
            .zip(before.iter().zip(after.iter()))
            .filter(|(_, (b, a))| a != b)
            .map(|(n, (b, a))| (*n, a - b))
            .collect();
        Ran { action: r.return_value, packet: out, gso_size: SkBuff::from_bytes(ctx_out).gso_size, counted, ports }
    }
}

/// What the model says the program returns, in the program's terms.
fn expected(d: &Decision, frame: &[u8], gso_size: u16, from: Port) -> Ran {
    let (action, gso) = match d.verdict {
        Verdict::Redirect(m) => (TC_ACT_REDIRECT, m.gso.map_or(0, |g| g.size as u32)),
        Verdict::Pass => (TC_ACT_OK, gso_size as u32),
        Verdict::Drop => (TC_ACT_SHOT, gso_size as u32),
    };
    let counted = d.reason.iter().map(|r| (name_of(*r), 1)).collect();
    let mut ports = [PortCounters::default(); 2];
    if let Some(w) = d.wire {
        let (a, o) = (from as usize, from.other() as usize);
        (ports[a].rx_packets, ports[a].rx_bytes) = (w.rx_packets, w.rx_bytes);
        (ports[o].tx_packets, ports[o].tx_bytes) = (w.tx_packets, w.tx_bytes);
    }
    // The program never changes a byte (only a super-packet's segment size).
    Ran { action, packet: frame.to_vec(), gso_size: gso, counted, ports }
}

/// The program's counter of a model reason (the model names them as the
/// header does: a reason missing from the program fails here).
fn name_of(r: Reason) -> &'static str {
    REASONS.iter().find(|n| **n == r.name()).unwrap_or_else(|| panic!("the program has no counter {:?}", r.name()))
}

fn meta(v6: bool, gso_size: u16) -> PacketMeta {
    let kind = if v6 { GsoKind::TcpV6 } else { GsoKind::TcpV4 };
    PacketMeta {
        gso: (gso_size > 0).then_some(Gso { kind, size: gso_size, ecn: false }),
        csum: Checksum::Unknown,
        hdr_len: 0,
    }
}

// ---------------------------------------------------------------- frames

const PSH: u8 = 0x08;

/// TCP option layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opts {
    /// What the direction's segment size was made for: timestamps with
    /// a 32-byte header, none with 20 (resolved in [`Case::frame`]).
    Plain,
    None,
    /// NOP NOP timestamps (12 bytes).
    Ts,
    /// Timestamps, then NOP NOP SACK with n blocks.
    TsSack(u8),
    /// NOP NOP SACK with n blocks.
    Sack(u8),
    /// MSS (4 bytes): not one the fast path passes.
    Mss,
    /// NOP NOP SACK whose length is not whole blocks.
    BadSack,
}

impl Opts {
    fn bytes(self) -> Vec<u8> {
        let ts = [1, 1, 8, 10, 0, 0, 1, 0, 0, 0, 2, 0];
        let sack = |n: u8| {
            let mut v = vec![1, 1, 5, 2 + 8 * n];
            v.extend((0..8 * n).map(|i| i.wrapping_mul(7)));
            v
        };
        match self {
            Opts::Plain | Opts::None => vec![],
            Opts::Ts => ts.to_vec(),
            Opts::TsSack(n) => [ts.to_vec(), sack(n)].concat(),
            Opts::Sack(n) => sack(n),
            Opts::Mss => vec![2, 4, 5, 0xb4],
            Opts::BadSack => vec![1, 1, 5, 11, 0, 0, 0, 0, 0, 0, 0, 0],
        }
    }
}

/// What is wrong with a frame (or how it is dressed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Malform {
    None,
    /// IPv4: version 6 in the header; IPv6: version 5.
    Version,
    /// IPv4 header length 4 words (malformed) or 6 (options: not plain).
    Ihl(u8),
    /// IPv4 header checksum wrong.
    Checksum,
    /// IPv4 total length / IPv6 payload length set to this (checksum
    /// right).
    IpLen(u16),
    /// IPv4 length / IPv6 payload length one byte beyond the frame.
    IpLenOver,
    /// Bytes after the IP packet (beyond Ethernet's padding when the frame
    /// is longer than 60).
    Trailer(u8),
    /// Ethernet padding to 60 bytes (a short frame).
    Pad60,
    /// IPv4 more-fragments flag.
    Fragment,
    /// IPv4 protocol UDP / IPv6 next header hop-by-hop.
    NotTcp,
    /// An 802.1Q tag in the frame (the NIC did not take it off).
    VlanTag,
    /// ARP's EtherType.
    NotIp,
    /// TCP data offset of these many words.
    Doff(u8),
    /// Cut to this many bytes (at least the Ethernet and IP headers:
    /// `BPF_PROG_TEST_RUN` refuses less).
    Truncate(u16),
}

/// One crafted TCP frame.
#[derive(Debug, Clone)]
struct Frame {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    opts: Opts,
    payload: usize,
    malform: Malform,
}

fn ipv4_checksum(h: &mut [u8]) {
    h[10..12].fill(0);
    let mut sum: u32 = h.chunks_exact(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

impl Frame {
    fn bytes(&self) -> Vec<u8> {
        let v6 = self.src.is_ipv6();
        let opts = self.opts.bytes();
        let mut tcp = Vec::with_capacity(20 + opts.len() + self.payload);
        tcp.extend(self.sport.to_be_bytes());
        tcp.extend(self.dport.to_be_bytes());
        tcp.extend(self.seq.to_be_bytes());
        tcp.extend(self.ack.to_be_bytes());
        tcp.push((((20 + opts.len()) / 4) as u8) << 4);
        tcp.push(self.flags);
        tcp.extend(self.window.to_be_bytes());
        tcp.extend([0, 0, 0, 0]); // checksum (the program does not read it), urgent pointer
        tcp.extend(&opts);
        tcp.extend((0..self.payload).map(|i| (i % 251) as u8));
        if let Malform::Doff(w) = self.malform {
            tcp[12] = w << 4;
        }
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                f.extend(0x0800u16.to_be_bytes());
                let mut h = [0u8; 20];
                h[0] = 0x45;
                h[2..4].copy_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
                h[8] = 64;
                h[9] = 6;
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                match self.malform {
                    Malform::Version => h[0] = 0x65,
                    Malform::Ihl(w) => h[0] = 0x40 | w,
                    Malform::IpLen(n) => h[2..4].copy_from_slice(&n.to_be_bytes()),
                    Malform::IpLenOver => h[2..4].copy_from_slice(&((21 + tcp.len()) as u16).to_be_bytes()),
                    Malform::Fragment => h[6] = 0x20,
                    Malform::NotTcp => h[9] = 17,
                    _ => {}
                }
                ipv4_checksum(&mut h);
                if self.malform == Malform::Checksum {
                    h[10] ^= 0x10;
                }
                f.extend(h);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                f.extend(0x86ddu16.to_be_bytes());
                let mut h = [0u8; 40];
                h[0] = 0x60;
                h[4..6].copy_from_slice(&(tcp.len() as u16).to_be_bytes());
                h[6] = 6;
                h[7] = 64;
                h[8..24].copy_from_slice(&s.octets());
                h[24..40].copy_from_slice(&d.octets());
                match self.malform {
                    Malform::Version => h[0] = 0x50,
                    Malform::IpLen(n) => h[4..6].copy_from_slice(&n.to_be_bytes()),
                    Malform::IpLenOver => h[4..6].copy_from_slice(&((1 + tcp.len()) as u16).to_be_bytes()),
                    Malform::NotTcp => h[6] = 0,
                    _ => {}
                }
                f.extend(h);
            }
            _ => unreachable!("one family per flow"),
        }
        f.extend(tcp);
        match self.malform {
            Malform::Trailer(n) => f.extend(std::iter::repeat_n(0xee, n as usize)),
            Malform::Pad60 if f.len() < 60 => f.resize(60, 0),
            Malform::VlanTag => {
                f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
            }
            Malform::NotIp => f[12..14].copy_from_slice(&0x0806u16.to_be_bytes()),
            // BPF_PROG_TEST_RUN refuses a frame whose IP header is cut.
            Malform::Truncate(n) => f.truncate((n as usize).max(if v6 { 54 } else { 34 })),
            _ => {}
        }
        f
    }
}

// ----------------------------------------------------------------- cases

/// One packet of a generated case, relative to the flow's state when it
/// is sent.
#[derive(Debug, Clone)]
struct Pkt {
    from: Port,
    /// Addressed as the other direction's packets (arrives on the wrong
    /// port for its addresses), or another flow's port.
    wrong_way: bool,
    other_flow: bool,
    /// Sequence number: `anchor` plus this.
    seq: i64,
    anchor: Anchor,
    /// Acknowledgment: the other direction's furthest data plus this.
    ack: i32,
    window: u16,
    flags: u8,
    opts: Opts,
    payload: usize,
    gso_size: u16,
    malform: Malform,
}

/// What a packet's sequence number is counted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    /// The direction's furthest data.
    Next,
    /// The end of what the inner host allows (`ReceiveWindow::end`).
    WindowEnd,
    /// The oldest end a segment from outside may have and still be
    /// admitted: furthest data minus the largest window.
    Behind,
    /// Zero: the offset is the sequence number.
    Zero,
}

/// A flow the engine offloads, and its packets.
#[derive(Debug, Clone)]
struct Case {
    v6: bool,
    /// Segment size and TCP header length per direction (by arrival port),
    /// `None`: the engine keeps it.
    dirs: [Option<(u16, u8)>; 2],
    next_seq: [u32; 2],
    /// The inner host's window when offloaded: how far past the inbound
    /// next_seq it allows, its largest window, its window shift.
    allowed: u32,
    max_win: u32,
    shift: u8,
    pkts: Vec<Pkt>,
}

fn hosts(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        ("2001:db8:1::10".parse().unwrap(), "2001:db8:2::20".parse().unwrap())
    } else {
        ("198.51.100.10".parse().unwrap(), "203.0.113.20".parse().unwrap())
    }
}

const OUTER_PORT: u16 = 40_001;
const INNER_PORT: u16 = 443;

impl Case {
    fn key(&self) -> FlowKey {
        let (outer, inner) = hosts(self.v6);
        FlowKey::new(outer, inner, OUTER_PORT, INNER_PORT)
    }

    /// What the engine hands the datapath.
    fn offload(&self) -> Offload {
        let dir = |from: Port| {
            self.dirs[from as usize].map(|(segment, tcp_header_len)| Direction {
                from,
                segment,
                tcp_header_len,
                next_seq: self.next_seq[from as usize],
            })
        };
        let next_in = self.next_seq[Port::Outer as usize];
        Offload {
            key: self.key(),
            inbound: dir(Port::Outer),
            outbound: dir(Port::Inner),
            receiver: ReceiveWindow { end: next_in.wrapping_add(self.allowed), max_win: self.max_win },
            inner_shift: self.shift,
        }
    }

    /// The frame of `p`, with the sequence numbers taken from where the
    /// flow is now (`now`, the model's).
    fn frame(&self, p: &Pkt, now: &FlowProgress) -> Frame {
        let next = [0, 1].map(|d| now.dirs[d].map_or(self.next_seq[d], |d| d.next_seq));
        let (outer, inner) = hosts(self.v6);
        let from_outer = (p.from == Port::Outer) != p.wrong_way;
        let (src, dst, sport, dport) =
            if from_outer { (outer, inner, OUTER_PORT, INNER_PORT) } else { (inner, outer, INNER_PORT, OUTER_PORT) };
        let own = next[p.from as usize];
        let other = next[1 - p.from as usize];
        Frame {
            src,
            dst,
            sport: sport.wrapping_add(p.other_flow as u16),
            dport,
            seq: (p.seq as u32).wrapping_add(match p.anchor {
                Anchor::Next => own,
                Anchor::WindowEnd => now.receiver.end,
                Anchor::Behind => own.wrapping_sub(now.receiver.max_win).wrapping_sub(p.payload as u32),
                Anchor::Zero => 0,
            }),
            ack: other.wrapping_add(p.ack as u32),
            flags: p.flags,
            window: p.window,
            opts: match (p.opts, self.dirs[p.from as usize]) {
                (Opts::Plain, Some((_, 32))) => Opts::Ts,
                (Opts::Plain, _) => Opts::None,
                (o, _) => o,
            },
            payload: p.payload,
            malform: p.malform,
        }
    }
}

/// Runs a case through the program and the model, comparing each packet.
fn check(prog: &mut Program, case: &Case) -> Result<(), TestCaseError> {
    let model = {
        let mut m = KernelModel::default();
        m.adjust_refused = true;
        m
    };
    let key = case.key();
    let o = case.offload();
    prop_assert!(o.directions().next().is_some(), "a case offloads a direction");
    model.clone().install(&o).unwrap();
    prog.table.install(&o).map_err(|e| TestCaseError::fail(format!("install: {e}")))?;
    let result = (|| {
        prop_assert_eq!(prog.table.progress(&key), model.progress(&key), "after the install");
        for (i, p) in case.pkts.iter().enumerate() {
            let now = model.progress(&key).expect("the flow stays in the table");
            let frame = case.frame(p, &now);
            let bytes = frame.bytes();
            let want = model.decide(&bytes, &meta(case.v6, p.gso_size), p.from, false);
            let got = prog.run(&bytes, p.gso_size, p.from);
            prop_assert_eq!(
                &got,
                &expected(&want, &bytes, p.gso_size, p.from),
                "packet {} ({:?}, model {:?}): {:?}",
                i,
                p.from,
                want,
                frame
            );
            prop_assert_eq!(
                prog.table.progress(&key),
                model.progress(&key),
                "the flow's entry after packet {} ({:?}, {:?}): {:?}",
                i,
                p.from,
                want,
                frame
            );
        }
        Ok(())
    })();
    // The next case starts from an empty table (the gateway's withdraw).
    for from in [Port::Inner, Port::Outer] {
        prog.table.withdraw(&key, from);
    }
    if result.is_ok() {
        prop_assert_eq!(prog.table.progress(&key), None, "withdrawn");
    }
    result
}

/// Drops the program and sees the kernel free it and its maps (nothing
/// pinned, nothing left behind).
fn unload(prog: Program) {
    let info = prog.fp.program_info().expect("the program's info");
    let (id, maps) = (info.id(), info.map_ids().expect("its maps").unwrap_or_default());
    assert!(!maps.is_empty(), "the kernel names the program's maps");
    drop(prog);
    // The kernel frees them once the last reference goes (after an RCU
    // grace period).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let prog_left = aya::programs::loaded_programs().flatten().any(|p| p.id() == id);
        let maps_left: Vec<u32> =
            aya::maps::loaded_maps().flatten().map(|m| m.id()).filter(|m| maps.contains(m)).collect();
        if !prog_left && maps_left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left behind after 5 s: program {id}: {prog_left}, maps {maps_left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether the program can be loaded here; otherwise says why the test
/// skips.
fn can_load(test: &str) -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED {test}: loading a BPF program needs root");
        return false;
    }
    if !FastPath::built() {
        eprintln!("SKIPPED {test}: this build has no kernel fast path (clang, libbpf-dev at build time)");
        return false;
    }
    true
}

fn load_or_skip(test: &str) -> Option<Program> {
    can_load(test).then(Program::load)
}

// ------------------------------------------------------------ strategies

fn port() -> impl Strategy<Value = Port> {
    prop_oneof![Just(Port::Inner), Just(Port::Outer)]
}

fn opts() -> impl Strategy<Value = Opts> {
    prop_oneof![
        12 => Just(Opts::Plain),
        2 => Just(Opts::None),
        2 => Just(Opts::Ts),
        1 => (1u8..=3).prop_map(Opts::TsSack),
        1 => (1u8..=4).prop_map(Opts::Sack),
        1 => Just(Opts::Mss),
        1 => Just(Opts::BadSack),
    ]
}

fn flags() -> impl Strategy<Value = u8> {
    prop_oneof![
        24 => Just(ACK),
        8 => Just(ACK | PSH),
        1 => Just(ACK | FIN),
        1 => Just(RST),
        1 => Just(ACK | RST),
        1 => Just(SYN),
        1 => Just(SYN | ACK),
        1 => Just(ACK | URG),
        1 => Just(ACK | CWR),
        1 => Just(0),
        1 => any::<u8>(),
    ]
}

fn malform() -> impl Strategy<Value = Malform> {
    prop_oneof![
        24 => Just(Malform::None),
        1 => Just(Malform::Version),
        1 => prop_oneof![Just(4u8), Just(6), Just(0)].prop_map(Malform::Ihl),
        1 => Just(Malform::Checksum),
        1 => prop_oneof![Just(0u16), Just(19), Just(40), Just(60), any::<u16>()].prop_map(Malform::IpLen),
        1 => Just(Malform::IpLenOver),
        1 => (1u8..=40).prop_map(Malform::Trailer),
        1 => Just(Malform::Pad60),
        1 => Just(Malform::Fragment),
        1 => Just(Malform::NotTcp),
        1 => Just(Malform::VlanTag),
        1 => Just(Malform::NotIp),
        1 => (0u8..=15).prop_map(Malform::Doff),
        1 => (14u16..100).prop_map(Malform::Truncate),
    ]
}

fn pkt() -> impl Strategy<Value = Pkt> {
    (
        (port(), prop::bool::weighted(0.05), prop::bool::weighted(0.05)),
        prop_oneof![
            8 => (prop_oneof![3 => -64i64..=64, 1 => -3000i64..=3000], Just(Anchor::Next)),
            2 => (-3i64..=3, Just(Anchor::WindowEnd)),
            2 => (-3i64..=3, Just(Anchor::Behind)),
            1 => (0i64..(1i64 << 32), Just(Anchor::Zero)),
        ],
        (prop_oneof![-2000i32..=2000, any::<i32>()], any::<u16>(), flags(), opts()),
        (
            prop_oneof![0usize..=64, 0usize..=3000],
            prop_oneof![2 => Just(0u16), 1 => 1u16..=1600, 1 => prop_oneof![Just(536u16), Just(1448), Just(1460)]],
            malform(),
        ),
    )
        .prop_map(
            |(
                (from, wrong_way, other_flow),
                (seq, anchor),
                (ack, window, flags, opts),
                (payload, gso_size, malform),
            )| {
                Pkt { from, wrong_way, other_flow, seq, anchor, ack, window, flags, opts, payload, gso_size, malform }
            },
        )
}

fn dir() -> impl Strategy<Value = Option<(u16, u8)>> {
    prop_oneof![
        1 => Just(None),
        3 => (prop_oneof![Just(536u16), Just(1448), Just(1460), Just(8948), 1u16..=2000], prop_oneof![Just(20u8), Just(32)])
            .prop_map(Some),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        (dir(), dir()).prop_filter("a direction offloaded", |(a, b)| a.is_some() || b.is_some()),
        any::<[u32; 2]>(),
        (prop_oneof![0u32..=70_000, 0u32..=(1 << 30)], prop_oneof![0u32..=70_000, 0u32..=(1 << 30)], 0u8..=14),
        prop::collection::vec(pkt(), 1..=8),
    )
        .prop_map(|(v6, (a, b), next_seq, (allowed, max_win, shift), pkts)| Case {
            v6,
            dirs: [a, b],
            next_seq,
            allowed,
            max_win,
            shift,
            pkts,
        })
}

// ----------------------------------------------------------------- tests

/// Generated flows and packet sequences: the program and the model agree
/// on every packet's verdict, output, counter and the flow's entry.
#[test]
fn the_program_does_what_its_model_does() {
    let Some(prog) = load_or_skip("the_program_does_what_its_model_does") else { return };
    let config = Config { cases: 600, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let prog = std::cell::RefCell::new(prog);
    let result = runner.run(&case(), |c| check(&mut prog.borrow_mut(), &c));
    if let Err(e) = result {
        panic!("{e}");
    }
    // What the generated packets reached (a strategy that stopped reaching
    // a reason would test less than it says).
    let counts = prog.borrow().stats.reasons();
    eprintln!("reasons reached: {:?}", REASONS.iter().zip(counts).collect::<Vec<_>>());
    for (name, n) in REASONS.iter().zip(counts) {
        assert!(n > 0 || ["resized", "vlan"].contains(name), "no generated packet reached {name}");
    }
    unload(prog.into_inner());
}

/// A flow of `v6` with both directions offloaded (segments of 1448, TCP
/// headers of 32 bytes: timestamps), the inner host allowing 64 KiB.
fn both(v6: bool, pkts: Vec<Pkt>) -> Case {
    Case {
        v6,
        dirs: [Some((1448, 32)), Some((1448, 32))],
        next_seq: [1_000_000, 4_000_000_000],
        allowed: 65_535,
        max_win: 65_535,
        shift: 7,
        pkts,
    }
}

/// An in-window data packet from `from` with timestamps.
fn data(from: Port, payload: usize, gso_size: u16) -> Pkt {
    Pkt {
        from,
        wrong_way: false,
        other_flow: false,
        seq: 0,
        anchor: Anchor::Next,
        ack: 0,
        window: 512,
        flags: ACK,
        opts: Opts::Ts,
        payload,
        gso_size,
        malform: Malform::None,
    }
}

/// The named cases: each reaches the reason it names (asserted, so the
/// cases keep covering every reason the harness can reach), on both
/// families, and the program and the model agree on it.
#[test]
fn every_reason_the_harness_can_reach_agrees() {
    let Some(mut prog) = load_or_skip("every_reason_the_harness_can_reach_agrees") else { return };
    use Malform as M;
    use Port::{Inner, Outer};
    let with = |p: Pkt, f: &dyn Fn(&mut Pkt)| {
        let mut p = p;
        f(&mut p);
        p
    };
    // (name, packets before, the packet, the reason it must reach)
    let named: Vec<(&str, Vec<Pkt>, Pkt, Option<Reason>)> = vec![
        ("a segment that fits, inbound", vec![], data(Outer, 1448, 0), Some(Reason::AsIs)),
        ("a segment that fits, outbound", vec![], data(Inner, 1000, 0), Some(Reason::AsIs)),
        ("a pure ACK", vec![], data(Inner, 0, 0), Some(Reason::AsIs)),
        ("a super-packet of the target size", vec![], data(Outer, 2896, 1448), Some(Reason::AsIs)),
        ("a super-packet of smaller segments", vec![], data(Outer, 1000, 500), Some(Reason::AsIs)),
        ("a super-packet to re-cut (resize refused here)", vec![], data(Outer, 3000, 1000), Some(Reason::Adjust)),
        ("a short super-packet of bigger segments", vec![], data(Outer, 1400, 2000), Some(Reason::Lone)),
        ("a lone segment too big", vec![], data(Outer, 1500, 0), Some(Reason::Lone)),
        ("FIN", vec![], with(data(Outer, 10, 0), &|p| p.flags = ACK | FIN), Some(Reason::Flags)),
        ("RST", vec![], with(data(Inner, 0, 0), &|p| p.flags = RST), Some(Reason::Flags)),
        ("SYN", vec![], with(data(Inner, 0, 0), &|p| p.flags = SYN | ACK), Some(Reason::Flags)),
        ("URG", vec![], with(data(Outer, 10, 0), &|p| p.flags = ACK | URG), Some(Reason::Flags)),
        ("CWR on a super-packet", vec![], with(data(Outer, 2896, 1448), &|p| p.flags = ACK | CWR), Some(Reason::Flags)),
        ("CWR on one segment", vec![], with(data(Outer, 100, 0), &|p| p.flags = ACK | CWR), Some(Reason::AsIs)),
        ("an MSS option", vec![], with(data(Outer, 10, 0), &|p| p.opts = Opts::Mss), Some(Reason::Options)),
        (
            "SACK blocks of a bad length",
            vec![],
            with(data(Outer, 0, 0), &|p| p.opts = Opts::BadSack),
            Some(Reason::Options),
        ),
        (
            "data without the timestamps",
            vec![],
            with(data(Outer, 10, 0), &|p| p.opts = Opts::None),
            Some(Reason::Options),
        ),
        ("an ACK with SACK blocks", vec![], with(data(Inner, 0, 0), &|p| p.opts = Opts::TsSack(3)), Some(Reason::AsIs)),
        (
            "after a hand-back",
            vec![with(data(Outer, 10, 0), &|p| p.flags = ACK | FIN)],
            data(Outer, 10, 0),
            Some(Reason::Returned),
        ),
        ("another flow", vec![], with(data(Outer, 10, 0), &|p| p.other_flow = true), Some(Reason::NoFlow)),
        (
            "the flow's packet on the other port",
            vec![],
            with(data(Outer, 10, 0), &|p| p.wrong_way = true),
            Some(Reason::NoFlow),
        ),
        (
            "beyond the inner host's window",
            vec![],
            with(data(Outer, 100, 0), &|p| p.seq = 70_000),
            Some(Reason::Foreign),
        ),
        (
            "at the end of the inner host's window",
            vec![],
            with(data(Outer, 100, 0), &|p| p.anchor = Anchor::WindowEnd),
            Some(Reason::AsIs),
        ),
        (
            "a byte past the inner host's window",
            vec![],
            with(data(Outer, 100, 0), &|p| {
                p.anchor = Anchor::WindowEnd;
                p.seq = 1
            }),
            Some(Reason::Foreign),
        ),
        (
            "ending a byte after the oldest admitted end",
            vec![],
            with(data(Outer, 100, 0), &|p| p.anchor = Anchor::Behind),
            Some(Reason::AsIs),
        ),
        (
            "ending at the oldest admitted end",
            vec![],
            with(data(Outer, 100, 0), &|p| {
                p.anchor = Anchor::Behind;
                p.seq = -1
            }),
            Some(Reason::Foreign),
        ),
        ("far behind the stream", vec![], with(data(Outer, 100, 0), &|p| p.seq = -200_000), Some(Reason::Foreign)),
        (
            "an RST from outside the window",
            vec![],
            with(data(Outer, 0, 0), &|p| {
                p.seq = 1 << 20;
                p.flags = RST
            }),
            Some(Reason::Foreign),
        ),
        (
            "a big segment outside the window",
            vec![],
            with(data(Outer, 1500, 0), &|p| p.seq = 70_000),
            Some(Reason::ForeignBig),
        ),
        (
            "a super-packet outside the window",
            vec![],
            with(data(Outer, 3000, 1500), &|p| p.seq = -200_000),
            Some(Reason::ForeignBig),
        ),
        (
            "total length 0 without GSO",
            vec![],
            with(data(Outer, 100, 0), &|p| p.malform = M::IpLen(0)),
            Some(Reason::Malformed),
        ),
        (
            "length 0 of a BIG TCP super-packet",
            vec![],
            with(data(Outer, 2896, 1448), &|p| p.malform = M::IpLen(0)),
            Some(Reason::AsIs),
        ),
        ("IP length below the header", vec![], with(data(Outer, 100, 0), &|p| p.malform = M::IpLen(19)), None),
        (
            "IP length beyond the frame",
            vec![],
            with(data(Outer, 100, 0), &|p| p.malform = M::IpLenOver),
            Some(Reason::Malformed),
        ),
        ("IP version", vec![], with(data(Outer, 100, 0), &|p| p.malform = M::Version), Some(Reason::Malformed)),
        (
            "a frame cut in its TCP header",
            vec![],
            with(data(Outer, 0, 0), &|p| p.malform = M::Truncate(0)),
            Some(Reason::Malformed),
        ),
        (
            "a trailer after the IP packet",
            vec![],
            with(data(Outer, 100, 0), &|p| p.malform = M::Trailer(8)),
            Some(Reason::NotTcp),
        ),
        (
            "Ethernet padding of a short frame",
            vec![],
            with(data(Inner, 0, 0), &|p| {
                p.opts = Opts::None;
                p.malform = M::Pad60
            }),
            Some(Reason::AsIs),
        ),
        ("not TCP", vec![], with(data(Outer, 100, 0), &|p| p.malform = M::NotTcp), Some(Reason::NotTcp)),
        (
            "a TCP data offset below 5",
            vec![],
            with(data(Outer, 100, 0), &|p| p.malform = M::Doff(4)),
            Some(Reason::NotTcp),
        ),
        (
            "a TCP header beyond the packet",
            vec![],
            with(data(Outer, 0, 0), &|p| p.malform = M::Doff(15)),
            Some(Reason::NotTcp),
        ),
        ("a VLAN tag in the frame", vec![], with(data(Outer, 100, 0), &|p| p.malform = M::VlanTag), None),
        ("ARP", vec![], with(data(Outer, 100, 0), &|p| p.malform = M::NotIp), None),
    ];
    // IPv4 only: the IPv6 header has no checksum, length below it, options
    // or fragment bits in the fixed header.
    let v4_only: Vec<(&str, Pkt, Reason)> = vec![
        ("IPv4 header checksum", with(data(Outer, 100, 0), &|p| p.malform = M::Checksum), Reason::Malformed),
        ("IPv4 header length 4", with(data(Outer, 100, 0), &|p| p.malform = M::Ihl(4)), Reason::Malformed),
        ("IPv4 options", with(data(Outer, 100, 0), &|p| p.malform = M::Ihl(6)), Reason::NotTcp),
        ("an IPv4 fragment", with(data(Outer, 100, 0), &|p| p.malform = M::Fragment), Reason::NotTcp),
    ];
    let mut engine_dir = both(false, vec![data(Inner, 10, 0)]);
    engine_dir.dirs[Port::Inner as usize] = None;
    let mut cases: Vec<(String, Case, Option<Reason>)> =
        vec![("a direction the engine carries".into(), engine_dir, Some(Reason::Engine))];
    for v6 in [false, true] {
        for (name, before, p, reason) in &named {
            // IPv4's length below its header; IPv6's payload length 19 is a
            // length beyond a 100-byte payload's end: not TCP.
            let reason = match (*name, v6) {
                ("IP length below the header", false) => Some(Reason::Malformed),
                ("IP length below the header", true) => Some(Reason::NotTcp),
                _ => *reason,
            };
            let pkts = before.iter().cloned().chain([p.clone()]).collect();
            cases.push((format!("{name} (IPv{})", if v6 { 6 } else { 4 }), both(v6, pkts), reason));
        }
    }
    for (name, p, reason) in v4_only {
        cases.push((format!("{name} (IPv4)"), both(false, vec![p]), Some(reason)));
    }
    for (name, case, reason) in &cases {
        if let Err(e) = check(&mut prog, case) {
            panic!("{name}: {e}");
        }
        // The last packet reached the reason the case is named for (the
        // model agrees with the program, checked above).
        let model = {
            let mut m = KernelModel::default();
            m.adjust_refused = true;
            m
        };
        model.clone().install(&case.offload()).unwrap();
        let mut last = None;
        for p in &case.pkts {
            let now = model.progress(&case.key()).unwrap();
            last = Some(model.decide(&case.frame(p, &now).bytes(), &meta(case.v6, p.gso_size), p.from, false).reason);
        }
        assert_eq!(last, Some(*reason), "{name}: the case does not reach its reason");
    }
    // A packet that arrived on neither port (the model has no such
    // packet: `from` is a port) goes on untouched and uncounted.
    let case = both(false, vec![]);
    let mut other = case.clone();
    other.pkts = vec![data(Port::Outer, 100, 0)];
    prog.table.install(&case.offload()).unwrap();
    let before = prog.table.progress(&case.key());
    let frame = case.frame(&other.pkts[0], &before.unwrap()).bytes();
    let ctx = SkBuff { ingress_ifindex: IFINDEX[1] + 1, ..SkBuff::default() }.bytes();
    let counted = prog.stats.reasons();
    let r = prog
        .fp
        .test_run(TestRunOptions { data_in: Some(&frame), ctx_in: Some(&ctx), ..TestRunOptions::default() })
        .expect("BPF_PROG_TEST_RUN");
    assert_eq!(r.return_value, TC_ACT_OK, "a packet of a third interface");
    assert_eq!(prog.stats.reasons(), counted, "a packet of a third interface was counted");
    assert_eq!(prog.table.progress(&case.key()), before, "a packet of a third interface changed the entry");
    for from in [Port::Inner, Port::Outer] {
        prog.table.withdraw(&case.key(), from);
    }
    // Every reason but two is reached: RESIZED needs a super-packet the
    // kernel can resize, VLAN a tag the NIC took off (neither can
    // BPF_PROG_TEST_RUN build; docs/fast-path.md).
    for r in REASONS {
        let reached = cases.iter().any(|(_, _, reason)| reason.map(|x| x.name()) == Some(r));
        assert!(reached || ["resized", "vlan"].contains(&r), "no named case reaches {r}");
    }
    unload(prog);
}

/// Frames of the test's sender (source MAC 02:00:00:00:00:01) that a
/// socket read within a second.
fn frames_from_the_sender(sock: &px_io::PacketSocket) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut batch = px_io::RxBatch::new(16, px_io::MAX_FRAME);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        sock.recv_batch(&mut batch).expect("receive");
        for p in batch.iter() {
            let p = p.expect("frame");
            if p.frame.get(6..12) == Some(&[2, 0, 0, 0, 0, 1][..]) {
                got.push(p.frame.to_vec());
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    got
}

/// What `BPF_PROG_TEST_RUN` cannot build: a frame whose VLAN tag the
/// kernel took off on receive (`vlan_present`). Real frames on a veth in a
/// namespace, the program attached to both ports as the gateway attaches
/// it: a tagged frame of an offloaded flow is dropped after the taps and
/// counted `vlan`, as the model says (the tap, which runs before TC, has it
/// with its tag; a socket bound to IPv4, served after TC, does not), while
/// an untagged frame goes on to that socket.
#[test]
fn a_frame_whose_tag_the_kernel_took_off_is_dropped_after_the_tap() {
    let test = "a_frame_whose_tag_the_kernel_took_off_is_dropped_after_the_tap";
    if !can_load(test) || !px_netns::require_root_or_skip(test) {
        return;
    }
    use px_io::{PacketSocket, Receive, SocketConfig};
    let mut t = px_netns::Topology::new().unwrap();
    let s = t.add_ns("kdsnd").unwrap();
    let g = t.add_ns("kdgw").unwrap();
    t.add_veth((s, "eth0"), (g, "outer"), 1500).unwrap();
    t.add_veth((s, "eth1"), (g, "inner"), 1500).unwrap();
    let fp = t.ns(g).run(|| FastPath::load("inner", "outer", true)).unwrap().expect("attach the fast path");
    let case = both(false, vec![data(Port::Outer, 100, 0)]);
    let mut table = fp.datapath();
    table.install(&case.offload()).unwrap();
    let model = KernelModel::default();
    model.clone().install(&case.offload()).unwrap();
    let open = |receive| {
        let cfg = SocketConfig { receive, ..SocketConfig::default() };
        t.ns(g).run(|| PacketSocket::open("outer", &cfg)).unwrap().expect("packet socket")
    };
    let (after_tc, tap) = (open(Receive::Ipv4), open(Receive::NotIp));
    let tx = t.ns(s).run(|| PacketSocket::open("eth0", &SocketConfig::default())).unwrap().expect("sender");

    let now = model.progress(&case.key()).unwrap();
    let mut frame = case.frame(&case.pkts[0], &now).bytes();
    frame[..6].fill(0xff);
    let mut tagged = frame.clone();
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    // Another flow's frame, untagged: not the fast path's, on to user space.
    let mut other = case.frame(&Pkt { other_flow: true, ..case.pkts[0].clone() }, &now).bytes();
    other[..6].fill(0xff);

    let before = fp.stats().reasons();
    px_netns::send_frame(&tx, &PacketMeta::PLAIN, &tagged).expect("send the tagged frame");
    px_netns::send_frame(&tx, &PacketMeta::PLAIN, &other).expect("send the untagged frame");
    let (got_after_tc, got_tap) = (frames_from_the_sender(&after_tc), frames_from_the_sender(&tap));
    let after = fp.stats().reasons();
    let moved = |name: &str| {
        let i = REASONS.iter().position(|n| *n == name).unwrap();
        after[i] - before[i]
    };

    // The kernel took the tag off before TC: the program saw the untagged
    // frame with `vlan_present`, which the model takes as `vlan`.
    let want = model.decide(&frame, &PacketMeta::PLAIN, Port::Outer, true);
    assert_eq!(want, Decision { verdict: Verdict::Drop, reason: Some(Reason::Vlan), wire: None });
    assert_eq!(moved(name_of(Reason::Vlan)), 1, "the tagged frame was not counted vlan: {after:?}");
    assert_eq!(moved(name_of(Reason::NoFlow)), 1, "the other flow's frame was not counted no_flow: {after:?}");
    assert_eq!(got_tap, vec![tagged], "the tap has the tagged frame, tag and all, and nothing else of ours");
    assert_eq!(got_after_tc, vec![other], "after TC only the untagged frame goes on");
    assert_eq!(table.progress(&case.key()), model.progress(&case.key()), "a dropped frame changed the entry");
    drop((after_tc, tap, tx, table));
    drop(fp);
}
