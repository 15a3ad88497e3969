//! The kernel fast path (issue 28): the TC program `bpf/fast_path.c`,
//! built by `build.rs` and embedded, attached to the ingress of both ports
//! (TCX), and its flow table, through which the engines
//! ([`px_gateway::fast_path::Datapath`]) offload flows and take them back.
//!
//! Lifetime: the program is attached through links owned by this
//! process, not pinned. When `px gateway` stops or dies (even `kill -9`),
//! the kernel closes the links and frees the program and its maps: the
//! ports carry nothing, as without the fast path (fail closed; a watchdog
//! or a second gateway behind ECMP is the answer, `docs/fast-path.md`). No
//! flow outlives the engine that decided it.
//!
//! Each packet takes exactly one path: the program runs at TC ingress, and
//! with the fast path on the gateway's packet sockets are bound to
//! IPv4 and IPv6 (plus one for every other EtherType), which the kernel
//! serves after TC ingress; a packet the program redirects never reaches
//! them. (A socket bound to every protocol sees frames before TC.)

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use aya::Ebpf;
use aya::maps::{HashMap as BpfHashMap, MapData, MapError, PerCpuArray};
use aya::programs::{SchedClassifier, TcAttachType};
use px_gateway::Port;
use px_gateway::fast_path::{Datapath, DirKey, InstallError, Offload, Progress, ReturnReason};

/// The program, built by `build.rs` (empty without clang).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fast_path.o"));

/// Entries of the kernel's flow table (two per flow): `px_flows` in the C.
pub const TABLE_ENTRIES: usize = 65_536;

/// `px_key` in `bpf/fast_path.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Key {
    saddr: [u32; 4],
    daddr: [u32; 4],
    sport: u16,
    dport: u16,
    family: u8,
    pad: [u8; 3],
}

/// `px_flow` in `bpf/fast_path.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Value {
    state: u32,
    out_ifindex: u32,
    gso_target: u16,
    min_payload: u16,
    check_window: u8,
    tcp_hlen: u8,
    pad: [u8; 2],
    next_seq: u32,
    return_reason: u32,
    packets: u64,
    segs_in: u64,
    segs_out: u64,
    full_out: u64,
    bytes: u64,
    data_out: u64,
}

// SAFETY: plain `repr(C)` data of integers with every bit pattern valid,
// the layout the C program uses (sizes checked in the tests).
unsafe impl aya::Pod for Key {}
// SAFETY: as for `Key`.
unsafe impl aya::Pod for Value {}

const STATE_ON: u32 = 1;
const STATE_RETURNED: u32 = 2;

/// The C program's `px_reason`s, by index: what each packet that reached
/// it became.
pub const REASONS: [&str; 13] = [
    "resized",
    "as_is",
    "no_flow",
    "not_tcp",
    "flags",
    "options",
    "lone",
    "small",
    "adjust",
    "foreign",
    "foreign_big",
    "returned",
    "vlan",
];

fn return_reason(r: u32) -> ReturnReason {
    match r {
        4 => ReturnReason::Flags,
        5 => ReturnReason::Options,
        6 => ReturnReason::Lone,
        7 => ReturnReason::Small,
        8 => ReturnReason::Adjust,
        _ => ReturnReason::Other,
    }
}

impl Key {
    fn of(k: &DirKey) -> Key {
        let mut key = Key { sport: k.sport.to_be(), dport: k.dport.to_be(), ..Key::default() };
        let words = |a: IpAddr, out: &mut [u32; 4]| match a {
            // Network byte order in memory, as the program copies them.
            IpAddr::V4(v) => out[0] = u32::from_ne_bytes(v.octets()),
            IpAddr::V6(v) => {
                for (o, c) in out.iter_mut().zip(v.octets().chunks_exact(4)) {
                    *o = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        };
        key.family = if k.src.is_ipv4() { 4 } else { 6 };
        words(k.src, &mut key.saddr);
        words(k.dst, &mut key.daddr);
        key
    }
}

impl Value {
    fn progress(&self) -> Progress {
        Progress {
            next_seq: self.next_seq,
            returned: (self.state == STATE_RETURNED).then(|| return_reason(self.return_reason)),
            packets: self.packets,
            segs_in: self.segs_in,
            segs_out: self.segs_out,
            full_out: self.full_out,
            bytes: self.bytes,
            data_out: self.data_out,
        }
    }
}

/// Why the fast path could not start.
#[derive(Debug, thiserror::Error)]
pub enum FastPathError {
    /// This `px` was built without clang: there is no program to load.
    #[error(
        "this px was built without the kernel fast path (clang or libbpf-dev missing at build time: install both and rebuild, or set offload = \"off\")"
    )]
    NotBuilt,
    /// The kernel refused the program or its maps.
    #[error("loading the fast path's BPF program: {0}")]
    Load(#[from] aya::EbpfError),
    /// The program is not in the object (a build problem).
    #[error("the fast path's BPF object lacks {0}")]
    Missing(&'static str),
    /// The program could not be loaded or attached to a port.
    #[error("attaching the fast path to {port}: {source}")]
    Attach { port: String, source: aya::programs::ProgramError },
    /// A map could not be opened.
    #[error("the fast path's map {name}: {source}")]
    Map { name: &'static str, source: MapError },
    /// A port has no interface index.
    #[error("port {port}: {source}")]
    Port { port: String, source: px_io::IfaceError },
}

type Table = BpfHashMap<MapData, Key, Value>;

/// The attached program and its maps; dropping it detaches the program
/// from both ports.
pub struct FastPath {
    table: Arc<Mutex<Table>>,
    reasons: Arc<Mutex<PerCpuArray<MapData, u64>>>,
    ifindex: [u32; 2],
    // Last: the maps above close before the object that holds the links.
    _ebpf: Ebpf,
}

impl std::fmt::Debug for FastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPath").field("ifindex", &self.ifindex).finish_non_exhaustive()
    }
}

/// What the kernel carries now, summed over its table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Live {
    /// Directions in the table, and of those handed back (waiting for the
    /// engine to withdraw them).
    pub directions: u64,
    pub returned: u64,
    pub packets: u64,
    pub segs_in: u64,
    pub segs_out: u64,
    /// Full-sized data segments toward the inner port, and all data
    /// segments toward it (the yield's parts).
    pub full_in: u64,
    pub data_in: u64,
    pub bytes: u64,
}

impl FastPath {
    /// Whether this build carries the program.
    pub fn built() -> bool {
        !OBJECT.is_empty()
    }

    /// Loads the program and attaches it to the ingress of both ports (in
    /// the calling thread's network namespace).
    pub fn attach(inner: &str, outer: &str) -> Result<FastPath, FastPathError> {
        if !Self::built() {
            return Err(FastPathError::NotBuilt);
        }
        // The ELF parser wants the object aligned: a copy in u64 words.
        let mut words = vec![0u64; OBJECT.len().div_ceil(8)];
        // SAFETY: `words` has at least OBJECT.len() bytes; u8 has no
        // alignment, and every byte pattern is a valid u64.
        let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), OBJECT.len()) };
        bytes.copy_from_slice(OBJECT);
        let mut ebpf = Ebpf::load(bytes)?;
        let ifindex =
            |port: &str| px_io::ifindex(port).map_err(|source| FastPathError::Port { port: port.into(), source });
        let ifindex = [ifindex(inner)?, ifindex(outer)?];
        {
            let prog: &mut SchedClassifier = ebpf
                .program_mut("px_fast_path")
                .ok_or(FastPathError::Missing("px_fast_path"))?
                .try_into()
                .map_err(|source| FastPathError::Attach { port: inner.into(), source })?;
            prog.load().map_err(|source| FastPathError::Attach { port: inner.into(), source })?;
            for port in [inner, outer] {
                prog.attach(port, TcAttachType::Ingress)
                    .map_err(|source| FastPathError::Attach { port: port.into(), source })?;
            }
        }
        let table: Table = ebpf
            .take_map("px_flows")
            .ok_or(FastPathError::Missing("px_flows"))?
            .try_into()
            .map_err(|source| FastPathError::Map { name: "px_flows", source })?;
        let reasons: PerCpuArray<MapData, u64> = ebpf
            .take_map("px_reasons")
            .ok_or(FastPathError::Missing("px_reasons"))?
            .try_into()
            .map_err(|source| FastPathError::Map { name: "px_reasons", source })?;
        Ok(FastPath {
            table: Arc::new(Mutex::new(table)),
            reasons: Arc::new(Mutex::new(reasons)),
            ifindex,
            _ebpf: ebpf,
        })
    }

    /// A handle for one worker's engine.
    pub fn datapath(&self) -> KernelDatapath {
        KernelDatapath { table: self.table.clone(), ifindex: self.ifindex }
    }

    /// A handle for the metrics: the reasons and the live table.
    pub fn stats(&self) -> FastPathStats {
        FastPathStats { table: self.table.clone(), reasons: self.reasons.clone(), inner_ifindex: self.ifindex[0] }
    }
}

/// Reads what the kernel did (for metrics and status).
#[derive(Clone)]
pub struct FastPathStats {
    table: Arc<Mutex<Table>>,
    reasons: Arc<Mutex<PerCpuArray<MapData, u64>>>,
    inner_ifindex: u32,
}

impl std::fmt::Debug for FastPathStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPathStats").finish_non_exhaustive()
    }
}

impl FastPathStats {
    /// Packets by [`REASONS`] since the program was attached, all CPUs.
    pub fn reasons(&self) -> [u64; 13] {
        let mut out = [0u64; 13];
        let r = self.reasons.lock().unwrap_or_else(|p| p.into_inner());
        for (i, o) in out.iter_mut().enumerate() {
            if let Ok(v) = r.get(&(i as u32), 0) {
                *o = v.iter().sum();
            }
        }
        out
    }

    /// What the directions in the table carried so far.
    pub fn live(&self) -> Live {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut l = Live::default();
        for (_, v) in t.iter().flatten() {
            l.directions += 1;
            l.returned += (v.state == STATE_RETURNED) as u64;
            l.packets += v.packets;
            l.segs_in += v.segs_in;
            l.segs_out += v.segs_out;
            l.bytes += v.bytes;
            if v.out_ifindex == self.inner_ifindex {
                l.full_in += v.full_out;
                l.data_in += v.data_out;
            }
        }
        l
    }
}

/// One worker's handle on the kernel's flow table (a [`Datapath`]).
pub struct KernelDatapath {
    table: Arc<Mutex<Table>>,
    /// Interface index of the inner and the outer port.
    ifindex: [u32; 2],
}

impl std::fmt::Debug for KernelDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDatapath").field("ifindex", &self.ifindex).finish_non_exhaustive()
    }
}

impl KernelDatapath {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn out_ifindex(&self, from: Port) -> u32 {
        match from {
            Port::Outer => self.ifindex[0],
            Port::Inner => self.ifindex[1],
        }
    }
}

impl Datapath for KernelDatapath {
    fn install(&mut self, o: &Offload) -> Result<(), InstallError> {
        let mut t = self.lock();
        let mut done = Vec::with_capacity(2);
        for d in o.directions() {
            let v = Value {
                state: STATE_ON,
                out_ifindex: self.out_ifindex(d.from),
                gso_target: d.segment,
                min_payload: 0,
                check_window: d.check_window as u8,
                tcp_hlen: d.tcp_header_len,
                next_seq: d.next_seq,
                ..Value::default()
            };
            let key = Key::of(&d.key);
            if let Err(e) = t.insert(key, v, 0) {
                // Both directions or neither.
                for k in &done {
                    let _ = t.remove(k);
                }
                return Err(match &e {
                    MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::E2BIG) => InstallError::Full,
                    _ => InstallError::Failed(e.to_string()),
                });
            }
            done.push(key);
        }
        Ok(())
    }

    fn progress(&self, key: &DirKey) -> Option<Progress> {
        self.lock().get(&Key::of(key), 0).ok().map(|v| v.progress())
    }

    fn withdraw(&mut self, key: &DirKey) -> Option<Progress> {
        let mut t = self.lock();
        let k = Key::of(key);
        let v = t.get(&k, 0).ok()?;
        let _ = t.remove(&k);
        Some(v.progress())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_program() {
        // struct px_key: 4 + 4 address words, two ports, family, 3 pad.
        assert_eq!(size_of::<Key>(), 40);
        // struct px_flow: 24 bytes of fields, six u64 counters.
        assert_eq!(size_of::<Value>(), 72);
        assert_eq!(std::mem::offset_of!(Value, next_seq), 16);
        assert_eq!(std::mem::offset_of!(Value, packets), 24);
    }

    #[test]
    fn keys_hold_addresses_and_ports_as_on_the_wire() {
        let k = Key::of(&DirKey {
            src: "198.51.100.1".parse().unwrap(),
            dst: "203.0.113.2".parse().unwrap(),
            sport: 0x1234,
            dport: 80,
        });
        // SAFETY: reading a plain repr(C) struct's bytes.
        let b: [u8; 40] = unsafe { std::mem::transmute(k) };
        assert_eq!(&b[0..4], &[198, 51, 100, 1]);
        assert_eq!(&b[16..20], &[203, 0, 113, 2]);
        assert_eq!(&b[32..36], &[0x12, 0x34, 0, 80]);
        assert_eq!(b[36], 4);
        let k6 = Key::of(&DirKey {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            sport: 1,
            dport: 2,
        });
        // SAFETY: as above.
        let b6: [u8; 40] = unsafe { std::mem::transmute(k6) };
        assert_eq!(&b6[0..2], &[0x20, 0x01]);
        assert_eq!(b6[15], 1);
        assert_eq!(b6[31], 2);
        assert_eq!(b6[36], 6);
    }

    #[test]
    fn the_program_is_built_here() {
        // scripts/test installs clang and libbpf-dev: a build without the
        // program must not pass unnoticed there.
        if std::env::var_os("PX_ALLOW_NO_BPF").is_some() {
            return;
        }
        assert!(FastPath::built(), "bpf/fast_path.c was not built (clang, libbpf-dev); PX_ALLOW_NO_BPF=1 to skip");
        assert_eq!(&OBJECT[..4], b"\x7fELF");
    }
}
