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

use aya::maps::{HashMap as BpfHashMap, MapData, MapError, PerCpuArray};
use aya::programs::{SchedClassifier, TcAttachType};
use aya::{Ebpf, EbpfLoader};
use px_gateway::fast_path::{Datapath, FlowProgress, InstallError, Offload, Progress, ReturnReason};
use px_gateway::{FlowKey, Port, ReceiveWindow};

/// The program, built by `build.rs` (empty without clang), aligned for
/// the ELF parser as aya's own projects embed theirs.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fast_path.o"));

/// Entries of the kernel's flow table (one per flow): `PX_TABLE_ENTRIES`
/// in `bpf/fast_path.h`.
pub const TABLE_ENTRIES: usize = 65_536;

/// `struct px_key` in `bpf/fast_path.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Key {
    outer: [u32; 4],
    inner: [u32; 4],
    outer_port: u16,
    inner_port: u16,
    family: u8,
    pad: [u8; 3],
}

/// `struct px_dir` in `bpf/fast_path.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Dir {
    state: u32,
    return_reason: u32,
    next_seq: u32,
    ack: u32,
    gso_target: u16,
    tcp_hlen: u8,
    pad: [u8; 5],
    advanced: u64,
    packets: u64,
    segs_in: u64,
    segs_out: u64,
    full_out: u64,
    bytes: u64,
    data_out: u64,
}

/// `struct px_flow` in `bpf/fast_path.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Value {
    dir: [Dir; 2],
    rcv_end: u32,
    rcv_max_win: u32,
    rcv_shift: u8,
    pad: [u8; 7],
}

// SAFETY: plain `repr(C)` data of integers with every bit pattern valid,
// the layout the C program uses (sizes checked in the tests).
unsafe impl aya::Pod for Key {}
// SAFETY: as for `Key`.
unsafe impl aya::Pod for Value {}

const STATE_USER: u32 = 0;
const STATE_ON: u32 = 1;
const STATE_RETURNED: u32 = 2;

/// The C program's `px_reason`s, by index: what each packet that reached
/// it became.
pub const REASONS: [&str; 14] = [
    "resized",
    "as_is",
    "no_flow",
    "not_tcp",
    "malformed",
    "flags",
    "options",
    "lone",
    "adjust",
    "foreign",
    "foreign_big",
    "returned",
    "engine",
    "vlan",
];

fn return_reason(r: u32) -> ReturnReason {
    match r {
        5 => ReturnReason::Flags,
        6 => ReturnReason::Options,
        7 => ReturnReason::Lone,
        8 => ReturnReason::Adjust,
        _ => ReturnReason::Other,
    }
}

impl Key {
    fn of(k: &FlowKey) -> Key {
        let (outer, inner, outer_port, inner_port) = k.parts();
        let mut key = Key { outer_port: outer_port.to_be(), inner_port: inner_port.to_be(), ..Key::default() };
        let words = |a: IpAddr, out: &mut [u32; 4]| match a {
            // Network byte order in memory, as the program copies them.
            IpAddr::V4(v) => out[0] = u32::from_ne_bytes(v.octets()),
            IpAddr::V6(v) => {
                for (o, c) in out.iter_mut().zip(v.octets().chunks_exact(4)) {
                    *o = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        };
        key.family = if outer.is_ipv4() { 4 } else { 6 };
        words(outer, &mut key.outer);
        words(inner, &mut key.inner);
        key
    }
}

impl Dir {
    fn progress(&self) -> Option<Progress> {
        (self.state != STATE_USER).then(|| Progress {
            next_seq: self.next_seq,
            advanced: self.advanced,
            ack: self.ack,
            returned: (self.state == STATE_RETURNED).then(|| return_reason(self.return_reason)),
            packets: self.packets,
            segs_in: self.segs_in,
            segs_out: self.segs_out,
            full_out: self.full_out,
            bytes: self.bytes,
            data_out: self.data_out,
        })
    }
}

impl Value {
    fn progress(&self) -> FlowProgress {
        FlowProgress {
            dirs: [self.dir[Port::Inner as usize].progress(), self.dir[Port::Outer as usize].progress()],
            receiver: ReceiveWindow { end: self.rcv_end, max_win: self.rcv_max_win },
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
    /// Interface index of the inner and the outer port.
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
        let ifindex =
            |port: &str| px_io::ifindex(port).map_err(|source| FastPathError::Port { port: port.into(), source });
        let ifindex = [ifindex(inner)?, ifindex(outer)?];
        // Which port a packet arrived on says which way it goes.
        let mut ebpf = EbpfLoader::new()
            .override_global("px_inner_ifindex", &ifindex[0], true)
            .override_global("px_outer_ifindex", &ifindex[1], true)
            .load(OBJECT)?;
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
        KernelDatapath { table: self.table.clone() }
    }

    /// A handle for the metrics: the reasons and the live table.
    pub fn stats(&self) -> FastPathStats {
        FastPathStats { table: self.table.clone(), reasons: self.reasons.clone() }
    }
}

/// Reads what the kernel did (for metrics and status).
#[derive(Clone)]
pub struct FastPathStats {
    table: Arc<Mutex<Table>>,
    reasons: Arc<Mutex<PerCpuArray<MapData, u64>>>,
}

impl std::fmt::Debug for FastPathStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPathStats").finish_non_exhaustive()
    }
}

impl FastPathStats {
    /// Packets by [`REASONS`] since the program was attached, all CPUs.
    pub fn reasons(&self) -> [u64; REASONS.len()] {
        let mut out = [0u64; REASONS.len()];
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
            for (i, d) in v.dir.iter().enumerate().filter(|(_, d)| d.state != STATE_USER) {
                l.directions += 1;
                l.returned += (d.state == STATE_RETURNED) as u64;
                l.packets += d.packets;
                l.segs_in += d.segs_in;
                l.segs_out += d.segs_out;
                l.bytes += d.bytes;
                if i == Port::Outer as usize {
                    l.full_in += d.full_out;
                    l.data_in += d.data_out;
                }
            }
        }
        l
    }
}

/// One worker's handle on the kernel's flow table (a [`Datapath`]).
pub struct KernelDatapath {
    table: Arc<Mutex<Table>>,
}

impl std::fmt::Debug for KernelDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDatapath").finish_non_exhaustive()
    }
}

impl KernelDatapath {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn install_error(e: MapError) -> InstallError {
    match &e {
        MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::E2BIG) => InstallError::Full,
        _ => InstallError::Failed(e.to_string()),
    }
}

impl Datapath for KernelDatapath {
    fn install(&mut self, o: &Offload) -> Result<(), InstallError> {
        let mut t = self.lock();
        let key = Key::of(&o.key);
        // Another direction of a flow the kernel carries keeps what the
        // kernel saw of the inner host's window since; a new flow starts
        // from the engine's.
        let mut v = t.get(&key, 0).unwrap_or(Value {
            rcv_end: o.receiver.end,
            rcv_max_win: o.receiver.max_win,
            rcv_shift: o.inner_shift,
            ..Value::default()
        });
        for d in o.directions() {
            v.dir[d.from as usize] = Dir {
                state: STATE_ON,
                next_seq: d.next_seq,
                gso_target: d.segment,
                tcp_hlen: d.tcp_header_len,
                ..Dir::default()
            };
        }
        t.insert(key, v, 0).map_err(install_error)
    }

    fn progress(&self, key: &FlowKey) -> Option<FlowProgress> {
        self.lock().get(&Key::of(key), 0).ok().map(|v| v.progress())
    }

    fn withdraw(&mut self, key: &FlowKey, from: Port) -> Option<FlowProgress> {
        let mut t = self.lock();
        let k = Key::of(key);
        let mut v = t.get(&k, 0).ok()?;
        let fp = v.progress();
        v.dir[from as usize] = Dir::default();
        if v.dir.iter().all(|d| d.state == STATE_USER) {
            let _ = t.remove(&k);
        } else {
            // The other direction stays; counts it made between the read
            // and this write are lost (a few packets, for status only).
            let _ = t.insert(k, v, 0);
        }
        Some(fp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_program() {
        // struct px_key: 4 + 4 address words, two ports, family, 3 pad.
        assert_eq!(size_of::<Key>(), 40);
        // struct px_dir: 24 bytes of fields, seven u64 counters.
        assert_eq!(size_of::<Dir>(), 80);
        assert_eq!(std::mem::offset_of!(Dir, advanced), 24);
        // struct px_flow: two directions, the inner host's window.
        assert_eq!(size_of::<Value>(), 176);
        assert_eq!(std::mem::offset_of!(Value, rcv_end), 160);
    }

    #[test]
    fn keys_hold_the_flow_outer_host_first_as_on_the_wire() {
        let k = Key::of(&FlowKey::new("198.51.100.1".parse().unwrap(), "203.0.113.2".parse().unwrap(), 0x1234, 80));
        // SAFETY: reading a plain repr(C) struct's bytes.
        let b: [u8; 40] = unsafe { std::mem::transmute(k) };
        assert_eq!(&b[0..4], &[198, 51, 100, 1]);
        assert_eq!(&b[16..20], &[203, 0, 113, 2]);
        assert_eq!(&b[32..36], &[0x12, 0x34, 0, 80]);
        assert_eq!(b[36], 4);
        let k6 = Key::of(&FlowKey::new("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap(), 1, 2));
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
