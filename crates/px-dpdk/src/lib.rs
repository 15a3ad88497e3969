//! `px-dpdk`: the part of DPDK 22.11 PacketExpress's DPDK datapath uses —
//! the EAL, ethdev ports and their queues, mbuf pools, and bursts of
//! frames in and out — as a safe Rust API over a small C shim
//! (`csrc/shim.c`, `csrc/px_dpdk.h`).
//!
//! Why a shim and no bindgen: the functions a datapath calls per packet
//! (`rte_eth_rx_burst`, `rte_eth_tx_burst`, mbuf allocation and freeing,
//! the `rte_pktmbuf_mtod` family) are static inline in DPDK's headers and
//! exist only as C, and `struct rte_mbuf`'s layout is DPDK's business. The
//! shim is compiled against the installed headers; Rust sees only a dozen
//! functions over fixed-width descriptors of our own, checked against the C
//! compiler's layout by a test ([`abi_matches`]). No libclang is needed to
//! build.
//!
//! What crosses per burst: one call receives up to a burst and describes
//! each frame (where its bytes are, the port's checksum verdict, LRO);
//! frames are read and rewritten in place in the mbufs; one call prepares a
//! burst to send (offsets, lengths, offload flags) and one sends it.
//!
//! Built only where `pkg-config` finds libdpdk ([`BUILT`]). Elsewhere the
//! crate compiles all the same and [`Eal::init`] refuses with
//! [`NOT_BUILT`], which says what to install.
//!
//! Memory: mbufs come from pools made here ([`Pool`]); an mbuf is owned by
//! exactly one of: a pool, an [`RxBurst`] slot, an [`Mbuf`], a
//! [`TxBurst`], or the port's transmit ring. Everything owned here is
//! freed on drop.

mod sys;

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

pub use sys::px_port_stats as PortStats;

/// Whether this build has DPDK (pkg-config found libdpdk at build time).
pub const BUILT: bool = cfg!(px_dpdk);

/// What a build without DPDK says when asked for it.
pub const NOT_BUILT: &str = "this px was built without DPDK: install libdpdk-dev and pkg-config (Debian 12: apt-get install libdpdk-dev pkg-config) and build it again";

/// Why a DPDK call failed.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    #[error("{NOT_BUILT}")]
    NotBuilt,
    /// The embedded shim (and DPDK's libraries it needs) could not be
    /// loaded: dlerror's text.
    #[error("{}", load_error_text(.0))]
    Load(String),
    /// The EAL can be set up once per process.
    #[error("the DPDK EAL was already set up in this process (it cannot be set up twice)")]
    AlreadyInitialised,
    #[error("DPDK EAL arguments {args:?}: rte_eal_init failed: {reason}")]
    Eal { args: Vec<String>, reason: String },
    #[error("an EAL argument holds a NUL byte: {0:?}")]
    Argument(String),
    #[error("no DPDK port named {name:?} (ports the EAL probed: {known})")]
    NoPort { name: String, known: String },
    #[error("DPDK port {port} ({name}): {step}: {reason}")]
    Port { port: u16, name: String, step: String, reason: String },
    #[error("mbuf pool {name} ({mbufs} buffers of {data_room} bytes): {reason}")]
    Pool { name: String, mbufs: u32, data_room: u16, reason: String },
}

/// What to install when DPDK's libraries are missing at run time.
pub const INSTALL_HINT: &str = "install DPDK's runtime libraries (Debian 12: apt-get install librte-meta-all, or dpdk with its recommended librte-* packages; libdpdk-dev brings them too), or use the default AF_PACKET datapath";

fn load_error_text(detail: &str) -> String {
    format!("cannot load DPDK for the DPDK datapath ({detail}): {INSTALL_HINT}")
}

fn strerror(err: i32) -> String {
    // SAFETY: rte_strerror returns a static or thread-local string.
    let p = unsafe { sys::px_strerror(err.abs()) };
    if p.is_null() { format!("error {err}") } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() }
}

/// The C compiler's layout of the shim's descriptors against the one
/// declared in Rust: `Ok` if every size and offset agrees (or without
/// DPDK, where there is nothing to compare).
pub fn abi_matches() -> Result<(), String> {
    if !BUILT {
        return Ok(());
    }
    sys::load().map_err(|e| load_error_text(&e))?;
    let mut c = sys::px_abi::default();
    // SAFETY: writes one plain struct.
    unsafe { sys::px_dpdk_abi(&mut c) };
    use std::mem::{offset_of, size_of};
    let rust = sys::px_abi {
        rx_desc_size: size_of::<sys::px_rx_desc>() as u32,
        rx_desc_len: offset_of!(sys::px_rx_desc, len) as u32,
        rx_desc_flags: offset_of!(sys::px_rx_desc, flags) as u32,
        rx_desc_gso: offset_of!(sys::px_rx_desc, gso_size) as u32,
        tx_desc_size: size_of::<sys::px_tx_desc>() as u32,
        tx_desc_start: offset_of!(sys::px_tx_desc, start) as u32,
        tx_desc_flags: offset_of!(sys::px_tx_desc, flags) as u32,
        tx_desc_tso: offset_of!(sys::px_tx_desc, tso_segsz) as u32,
        info_size: size_of::<sys::px_port_info>() as u32,
        info_capa: offset_of!(sys::px_port_info, capa) as u32,
        info_mac: offset_of!(sys::px_port_info, mac) as u32,
        conf_size: size_of::<sys::px_port_conf>() as u32,
        conf_pool: offset_of!(sys::px_port_conf, pool) as u32,
        stats_size: size_of::<sys::px_port_stats>() as u32,
        ext_size: size_of::<sys::px_ext>() as u32,
        ext_done: offset_of!(sys::px_ext, done) as u32,
    };
    if c == rust { Ok(()) } else { Err(format!("C {c:?}\nRust {rust:?}")) }
}

/// The DPDK version the build links (`rte_version`); loads DPDK first.
pub fn version() -> Result<String, DpdkError> {
    if !BUILT {
        return Err(DpdkError::NotBuilt);
    }
    sys::load().map_err(DpdkError::Load)?;
    // SAFETY: a static string.
    Ok(unsafe { CStr::from_ptr(sys::px_version()) }.to_string_lossy().into_owned())
}

static EAL_UP: AtomicBool = AtomicBool::new(false);

/// The EAL: set up once per process, cleaned up on drop (its runtime
/// directory removed, and `/var/run/dpdk` if that leaves it empty: 22.11
/// creates the directory even with `--no-shconf` and never removes it).
#[derive(Debug)]
pub struct Eal {
    runtime_dir: Option<PathBuf>,
}

impl Eal {
    /// `rte_eal_init` with `args` (without the program name). The calling
    /// thread's CPU affinity is kept (the EAL pins it to its main lcore;
    /// the gateway pins its workers itself).
    pub fn init(args: &[String]) -> Result<Eal, DpdkError> {
        if !BUILT {
            return Err(DpdkError::NotBuilt);
        }
        sys::load().map_err(DpdkError::Load)?;
        if EAL_UP.swap(true, Ordering::SeqCst) {
            return Err(DpdkError::AlreadyInitialised);
        }
        let argv: Vec<CString> = std::iter::once("px".to_string())
            .chain(args.iter().cloned())
            .map(|a| CString::new(a.clone()).map_err(|_| DpdkError::Argument(a)))
            .collect::<Result<_, _>>()?;
        // rte_eal_init may reorder argv: give it pointers to our strings.
        let mut ptrs: Vec<*mut c_char> = argv.iter().map(|a| a.as_ptr() as *mut c_char).collect();
        let affinity = affinity();
        // SAFETY: argc/argv describe live NUL-terminated strings that outlive
        // the call; the EAL keeps no pointer into them after init.
        let r = unsafe { sys::px_eal_init(ptrs.len() as i32, ptrs.as_mut_ptr()) };
        if let Some(set) = affinity {
            set_affinity(&set);
        }
        if r < 0 {
            // SAFETY: reads rte_errno.
            let reason = strerror(unsafe { sys::px_errno() });
            return Err(DpdkError::Eal { args: args.to_vec(), reason });
        }
        // SAFETY: a static string owned by the EAL, valid after init.
        let dir = unsafe { sys::px_runtime_dir() };
        let runtime_dir =
            (!dir.is_null()).then(|| PathBuf::from(unsafe { CStr::from_ptr(dir) }.to_string_lossy().into_owned()));
        Ok(Eal { runtime_dir })
    }

    /// The EAL's runtime directory (`/var/run/dpdk/PREFIX` as root),
    /// removed on drop.
    pub fn runtime_dir(&self) -> Option<&std::path::Path> {
        self.runtime_dir.as_deref()
    }

    /// The port the EAL made for device `name` (a vdev's name, e.g.
    /// `net_memif0`, or a PCI address).
    pub fn port(&self, name: &str) -> Result<u16, DpdkError> {
        let c = CString::new(name).map_err(|_| DpdkError::Argument(name.into()))?;
        let mut id = 0u16;
        // SAFETY: a NUL-terminated name and a place for the id.
        if unsafe { sys::px_port_by_name(c.as_ptr(), &mut id) } != 0 {
            let known: Vec<String> =
                (0..64u16).filter_map(|p| port_info(p).ok()).map(|i| format!("{} ({})", i.id, i.driver)).collect();
            let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            return Err(DpdkError::NoPort { name: name.into(), known });
        }
        Ok(id)
    }

    /// Registers the calling thread with the EAL, so that mbuf pools use
    /// their per-lcore caches in it (false if no lcore id is free). The
    /// same thread must [`Eal::unregister_thread`] before it ends.
    pub fn register_thread(&self) -> bool {
        // SAFETY: the EAL is up (self exists).
        unsafe { sys::px_thread_register() == 0 }
    }

    /// Gives the calling thread's lcore id back ([`Eal::register_thread`]).
    pub fn unregister_thread(&self) {
        // SAFETY: the EAL is up; a thread that is not registered is ignored.
        unsafe { sys::px_thread_unregister() };
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        // SAFETY: once, after every port and pool of this process is gone
        // (their owners hold the Eal by reference or are dropped first).
        unsafe { sys::px_eal_cleanup() };
        if let Some(dir) = &self.runtime_dir {
            let _ = std::fs::remove_dir_all(dir);
            if let Some(parent) = dir.parent() {
                // Only if empty: another DPDK process may use it.
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

fn affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    (r == 0).then_some(set)
}

fn set_affinity(set: &libc::cpu_set_t) {
    // SAFETY: a valid set for the calling thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
}

/// Pins the calling thread to `cpu`; false if the kernel refused.
pub fn pin_thread(cpu: usize) -> bool {
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

/// What a port can do (from `rte_eth_dev_info`), in the gateway's terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities(pub u32);

impl Capabilities {
    pub const TX_IP_CSUM: Capabilities = Capabilities(sys::PX_CAPA_TX_IP_CSUM);
    pub const TX_TCP_CSUM: Capabilities = Capabilities(sys::PX_CAPA_TX_TCP_CSUM);
    pub const TX_UDP_CSUM: Capabilities = Capabilities(sys::PX_CAPA_TX_UDP_CSUM);
    pub const TSO: Capabilities = Capabilities(sys::PX_CAPA_TX_TSO);
    pub const RX_CSUM: Capabilities = Capabilities(sys::PX_CAPA_RX_CSUM);
    pub const LRO: Capabilities = Capabilities(sys::PX_CAPA_RX_LRO);
    pub const RSS: Capabilities = Capabilities(sys::PX_CAPA_RSS);

    pub fn has(self, c: Capabilities) -> bool {
        self.0 & c.0 == c.0
    }

    pub fn with(self, c: Capabilities, on: bool) -> Capabilities {
        if on { Capabilities(self.0 | c.0) } else { Capabilities(self.0 & !c.0) }
    }

    /// The names of what is set, for logs.
    pub fn names(self) -> Vec<&'static str> {
        [
            (Self::TX_IP_CSUM, "tx-ipv4-checksum"),
            (Self::TX_TCP_CSUM, "tx-tcp-checksum"),
            (Self::TX_UDP_CSUM, "tx-udp-checksum"),
            (Self::TSO, "tso"),
            (Self::RX_CSUM, "rx-checksum"),
            (Self::LRO, "lro"),
            (Self::RSS, "rss"),
        ]
        .into_iter()
        .filter(|(c, _)| self.has(*c))
        .map(|(_, n)| n)
        .collect()
    }
}

/// A port as the EAL probed it.
#[derive(Debug, Clone)]
pub struct PortInfo {
    pub id: u16,
    pub driver: String,
    pub max_rx_queues: u16,
    pub max_tx_queues: u16,
    /// Its MTU now (DPDK's default 1500 for most virtual devices).
    pub mtu: u16,
    pub max_rx_pktlen: u32,
    /// NUMA socket (-1: any).
    pub socket: i32,
    pub capabilities: Capabilities,
    pub mac: [u8; 6],
}

/// What the EAL knows of port `id`.
pub fn port_info(id: u16) -> Result<PortInfo, DpdkError> {
    let mut i = sys::px_port_info::default();
    // SAFETY: fills one plain struct.
    let r = unsafe { sys::px_port_info(id, &mut i) };
    if r != 0 {
        return Err(DpdkError::Port { port: id, name: String::new(), step: "info".into(), reason: strerror(r) });
    }
    let end = i.driver.iter().position(|b| *b == 0).unwrap_or(i.driver.len());
    Ok(PortInfo {
        id,
        driver: String::from_utf8_lossy(&i.driver[..end]).into_owned(),
        max_rx_queues: i.max_rx_queues,
        max_tx_queues: i.max_tx_queues,
        mtu: i.mtu,
        max_rx_pktlen: i.max_rx_pktlen,
        socket: i.socket,
        capabilities: Capabilities(i.capa),
        mac: i.mac,
    })
}

/// Port `id`'s counters (zeros if it has none).
pub fn port_stats(id: u16) -> PortStats {
    let mut s = PortStats::default();
    // SAFETY: fills one plain struct.
    unsafe { sys::px_port_stats(id, &mut s) };
    s
}

/// A pool of single-segment mbufs.
#[derive(Debug)]
pub struct Pool {
    ptr: NonNull<c_void>,
    /// Bytes of data each mbuf holds after its headroom.
    room: u32,
}

// SAFETY: a DPDK mempool is made for use from many threads (its per-lcore
// caches are per registered thread).
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

/// Headroom DPDK keeps in front of each mbuf's data (RTE_PKTMBUF_HEADROOM).
pub const HEADROOM: u32 = 128;

impl Pool {
    /// `mbufs` buffers of `room` data bytes each (plus DPDK's headroom), on
    /// NUMA `socket` (-1: any), with a per-thread cache of `cache`.
    pub fn new(name: &str, mbufs: u32, cache: u32, room: u16, socket: i32) -> Result<Pool, DpdkError> {
        let data_room = room.saturating_add(HEADROOM as u16);
        let err = |reason: String| DpdkError::Pool { name: name.into(), mbufs, data_room, reason };
        let c = CString::new(name).map_err(|_| err("a NUL byte in the name".into()))?;
        // SAFETY: a NUL-terminated name; the EAL is up (the caller holds it).
        let p = unsafe { sys::px_pool_create(c.as_ptr(), mbufs, cache, data_room, socket) };
        let ptr = NonNull::new(p).ok_or_else(|| err(strerror(unsafe { sys::px_errno() })))?;
        Ok(Pool { ptr, room: u32::from(room) })
    }

    /// Data bytes one mbuf holds.
    pub fn room(&self) -> u32 {
        self.room
    }

    /// Mbufs taken out of the pool now (by ports, bursts, anything).
    pub fn in_use(&self) -> u32 {
        // SAFETY: a live pool.
        unsafe { sys::px_pool_in_use(self.ptr.as_ptr()) }
    }

    /// A fresh mbuf, to write a frame into ([`Mbuf::room_mut`]).
    pub fn alloc(&self) -> Option<Mbuf> {
        let (mut m, mut data, mut room) = (std::ptr::null_mut(), std::ptr::null_mut(), 0u32);
        // SAFETY: one slot of each out array.
        if unsafe { sys::px_alloc(self.ptr.as_ptr(), &mut m, &mut data, &mut room, 1) } != 0 {
            return None;
        }
        Some(Mbuf { m, data, room })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: nothing uses the pool any more (ports stopped first).
        unsafe { sys::px_pool_free(self.ptr.as_ptr()) };
    }
}

/// One mbuf owned by Rust (freed on drop unless sent), and its data:
/// `room` bytes from `data` (a received frame's bytes, or a fresh mbuf's
/// whole room).
#[derive(Debug)]
pub struct Mbuf {
    m: *mut c_void,
    data: *mut u8,
    room: u32,
}

// SAFETY: an mbuf has one owner at a time; its pool is thread-safe.
unsafe impl Send for Mbuf {}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: ours; freed once.
        unsafe { sys::px_free(&mut self.m, 1) };
    }
}

impl Mbuf {
    /// Its data bytes, to write.
    pub fn room_mut(&mut self) -> &mut [u8] {
        // SAFETY: `room` bytes at `data` inside the mbuf, which is ours
        // alone and alive while `self` is.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.room as usize) }
    }

    fn into_raw(self) -> *mut c_void {
        let p = self.m;
        std::mem::forget(self);
        p
    }
}

/// Buffers of the caller's sent without a copy: each frame's mbuf points
/// into the caller's `Vec<u8>` (DPDK's external buffers), and the buffer
/// comes back ([`Lender::reclaim`]) after the driver's last free of that
/// mbuf. Only for drivers that copy a frame's bytes or read them on the
/// CPU (`net_memif` in copy mode, `net_af_packet`, `net_pcap`): heap memory
/// has no IOVA for a NIC's DMA.
#[derive(Debug, Default)]
pub struct Lender {
    lent: Vec<Loan>,
    /// States of finished loans, reused: boxed, because a loan needs its
    /// state at an address that does not move while the driver holds it.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<sys::px_ext>>,
}

#[derive(Debug)]
struct Loan {
    buf: Vec<u8>,
    /// At a fixed address while lent: the driver's free writes `done`.
    ext: Box<sys::px_ext>,
}

impl Loan {
    fn done(&self) -> bool {
        self.ext.done.load(Ordering::Acquire) == 1
    }
}

/// At most this many buffers lent at once; past it the caller copies.
pub const MAX_LENT: usize = 1024;

impl Lender {
    /// An mbuf of `pool` whose data is `buf[range]`, `buf` lent until the
    /// driver lets go of it; `Err(buf)` if the range is empty, outside
    /// `buf` or longer than an mbuf can point at (65535 bytes), if
    /// [`MAX_LENT`] are out, or if the pool has no mbuf free.
    pub fn lend(&mut self, pool: &Pool, mut buf: Vec<u8>, range: std::ops::Range<usize>) -> Result<Mbuf, Vec<u8>> {
        let Ok(len) = u16::try_from(range.len()) else { return Err(buf) };
        if len == 0 || range.end > buf.len() || self.lent.len() >= MAX_LENT {
            return Err(buf);
        }
        let mut ext = self.spare.pop().unwrap_or_default();
        // SAFETY: `range` is inside `buf`, whose heap memory stays put while
        // the loan holds it (moving a Vec does not move its buffer) and is
        // not touched again until the driver's free sets `done`; `ext`
        // lives at a fixed address (boxed) at least as long.
        let data = unsafe { buf.as_mut_ptr().add(range.start) };
        let m = unsafe { sys::px_attach(pool.ptr.as_ptr(), data, len, &mut *ext) };
        if m.is_null() {
            self.spare.push(ext);
            return Err(buf);
        }
        self.lent.push(Loan { buf, ext });
        Ok(Mbuf { m, data, room: u32::from(len) })
    }

    /// Buffers lent now.
    pub fn lent(&self) -> usize {
        self.lent.len()
    }

    /// Gives every buffer the drivers are done with to `give`.
    pub fn reclaim(&mut self, mut give: impl FnMut(Vec<u8>)) {
        let mut i = 0;
        while i < self.lent.len() {
            if self.lent[i].done() {
                let Loan { buf, ext } = self.lent.swap_remove(i);
                self.spare.push(ext);
                give(buf);
            } else {
                i += 1;
            }
        }
    }
}

impl Drop for Lender {
    fn drop(&mut self) {
        // A loan a driver still holds (a frame in a ring) stays allocated:
        // its free may still read the bytes and write `done`.
        for loan in self.lent.drain(..) {
            if !loan.done() {
                std::mem::forget(loan);
            }
        }
    }
}

/// How to set a port up.
#[derive(Debug)]
pub struct PortConf<'a> {
    /// Receive and transmit queue pairs (one per worker).
    pub queues: u16,
    pub rx_descriptors: u16,
    pub tx_descriptors: u16,
    /// 0: leave the port's MTU.
    pub mtu: u16,
    /// Offloads to turn on (what the port has of them).
    pub offloads: Capabilities,
    /// Take frames to every MAC address (a NIC). DPDK's AF_PACKET driver
    /// would set the kernel interface's flag and leave it set: a packet
    /// socket sees every frame of a veth without it.
    pub promiscuous: bool,
    /// Where received frames go.
    pub pool: &'a Pool,
}

/// A started port; stopped and closed on drop.
#[derive(Debug)]
pub struct Port {
    pub info: PortInfo,
    pub name: String,
    /// Offloads turned on.
    pub offloads: Capabilities,
}

impl Port {
    /// Configures port `id` (`name` for messages) and starts it.
    pub fn start(id: u16, name: &str, conf: &PortConf<'_>) -> Result<Port, DpdkError> {
        let info = port_info(id)?;
        let offloads = Capabilities(conf.offloads.0 & info.capabilities.0);
        let c = sys::px_port_conf {
            queues: conf.queues,
            rx_desc: conf.rx_descriptors,
            tx_desc: conf.tx_descriptors,
            mtu: conf.mtu,
            offloads: offloads.0,
            promiscuous: u32::from(conf.promiscuous),
            pool: conf.pool.ptr.as_ptr(),
        };
        let mut step: *const c_char = std::ptr::null();
        // SAFETY: plain configuration; the pool outlives the port (the
        // caller drops ports first).
        let r = unsafe { sys::px_port_start(id, &c, &mut step) };
        if r != 0 {
            let step =
                if step.is_null() { "start".into() } else { unsafe { CStr::from_ptr(step) }.to_string_lossy().into() };
            // Whatever got configured goes again.
            unsafe { sys::px_port_stop(id) };
            return Err(DpdkError::Port { port: id, name: name.into(), step, reason: strerror(r) });
        }
        Ok(Port { info, name: name.into(), offloads })
    }

    /// Receive queue `q` and transmit queue `q` of this port.
    pub fn queue(&self, q: u16) -> Queue {
        Queue { port: self.info.id, queue: q }
    }

    /// The port's counters.
    pub fn stats(&self) -> PortStats {
        port_stats(self.info.id)
    }

    /// Whether the link is up now (a memif peer connected, a NIC's cable).
    pub fn link_up(&self) -> bool {
        // SAFETY: reads the port's link state.
        unsafe { sys::px_port_link_up(self.info.id) == 1 }
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        // SAFETY: no queue of it is used any more (workers joined first).
        unsafe { sys::px_port_stop(self.info.id) };
    }
}

/// One queue pair of a port: what a worker polls. Each queue is used by
/// one thread at a time (the worker that owns this handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    pub port: u16,
    pub queue: u16,
}

/// What the port said about a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxInfo {
    /// The port verified the TCP/UDP checksum: good (`Some(true)`) or bad.
    pub l4_checksum: Option<bool>,
    pub ip_checksum_bad: bool,
    /// A segment the port merged (LRO), of segments of this size.
    pub lro_mss: Option<u16>,
    /// A chained frame that fit no single buffer (its bytes are not given).
    pub unusable: bool,
}

/// The mbufs of one receive burst, read and rewritten in place, each
/// either moved out ([`RxBurst::take`], to be sent) or freed with the
/// burst.
#[derive(Debug)]
pub struct RxBurst {
    m: Box<[*mut c_void]>,
    d: Box<[sys::px_rx_desc]>,
    len: usize,
}

// SAFETY: the mbufs are owned by the burst alone.
unsafe impl Send for RxBurst {}

impl RxBurst {
    /// Room for `capacity` frames per receive (at most 65535).
    pub fn new(capacity: usize) -> RxBurst {
        let capacity = capacity.clamp(1, u16::MAX as usize);
        RxBurst {
            m: vec![std::ptr::null_mut(); capacity].into_boxed_slice(),
            d: vec![sys::px_rx_desc::default(); capacity].into_boxed_slice(),
            len: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.m.len()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Receives up to the capacity from `q` (what the burst held is freed
    /// first). Chained frames are copied into one mbuf of `large`.
    pub fn receive(&mut self, q: Queue, large: &Pool) -> usize {
        self.clear();
        let cap = self.capacity() as u16;
        // SAFETY: arrays of `cap` slots; the queue is this thread's.
        let n =
            unsafe { sys::px_rx(q.port, q.queue, self.m.as_mut_ptr(), self.d.as_mut_ptr(), cap, large.ptr.as_ptr()) };
        self.len = usize::from(n);
        self.len
    }

    fn present(&self, i: usize) -> Option<&sys::px_rx_desc> {
        (i < self.len && !self.m[i].is_null()).then(|| &self.d[i])
    }

    /// Frame `i`'s bytes (`None` if beyond the burst or moved out).
    pub fn frame(&self, i: usize) -> Option<&[u8]> {
        let d = self.present(i)?;
        // SAFETY: `len` bytes at `data` inside mbuf i, owned by the burst.
        Some(unsafe { std::slice::from_raw_parts(d.data, d.len as usize) })
    }

    /// Frame `i`'s bytes to rewrite in place.
    pub fn frame_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let d = *self.present(i)?;
        // SAFETY: as above, and a received mbuf is not shared (refcount 1).
        Some(unsafe { std::slice::from_raw_parts_mut(d.data, d.len as usize) })
    }

    /// What the port said about frame `i`.
    pub fn info(&self, i: usize) -> RxInfo {
        let Some(d) = self.present(i) else { return RxInfo::default() };
        let f = d.flags;
        RxInfo {
            l4_checksum: if f & sys::PX_RX_L4_CSUM_GOOD != 0 {
                Some(true)
            } else if f & sys::PX_RX_L4_CSUM_BAD != 0 {
                Some(false)
            } else {
                None
            },
            ip_checksum_bad: f & sys::PX_RX_IP_CSUM_BAD != 0,
            lro_mss: (f & sys::PX_RX_LRO != 0 && d.gso_size > 0).then_some(d.gso_size),
            unusable: f & sys::PX_RX_UNUSABLE != 0,
        }
    }

    /// Moves mbuf `i` out of the burst (to send it); `None` if already
    /// moved.
    pub fn take(&mut self, i: usize) -> Option<Mbuf> {
        if i >= self.len || self.m[i].is_null() {
            return None;
        }
        let (data, room) = (self.d[i].data, self.d[i].len);
        Some(Mbuf { m: std::mem::replace(&mut self.m[i], std::ptr::null_mut()), data, room })
    }

    /// Frees every mbuf still in the burst.
    pub fn clear(&mut self) {
        let mut kept = 0;
        for i in 0..self.len {
            if !self.m[i].is_null() {
                self.m[kept] = self.m[i];
                kept += 1;
            }
        }
        if kept > 0 {
            // SAFETY: `kept` mbufs owned by the burst, freed once.
            unsafe { sys::px_free(self.m.as_mut_ptr(), kept as u16) };
        }
        self.len = 0;
    }
}

impl Drop for RxBurst {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Offloads asked of the port for one frame, with the header lengths
/// they need.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxOffload {
    pub flags: u32,
    pub l2_len: u16,
    pub l3_len: u16,
    pub l4_len: u16,
    pub tso_segsz: u16,
}

impl TxOffload {
    pub const IPV4: u32 = sys::PX_TX_IPV4;
    pub const IPV6: u32 = sys::PX_TX_IPV6;
    pub const IP_CSUM: u32 = sys::PX_TX_IP_CSUM;
    pub const TCP_CSUM: u32 = sys::PX_TX_TCP_CSUM;
    pub const UDP_CSUM: u32 = sys::PX_TX_UDP_CSUM;
    pub const TCP_SEG: u32 = sys::PX_TX_TCP_SEG;
}

/// Frames queued in order for one transmit queue: each an mbuf with the
/// range of its data to send and its offloads. Unsent frames are freed on
/// drop (or by [`TxBurst::discard`]).
#[derive(Debug)]
pub struct TxBurst {
    d: Vec<sys::px_tx_desc>,
    m: Vec<*mut c_void>,
    /// `d[..prepared]` are prepared (their mbufs in `m`).
    prepared: usize,
    /// `m[..sent]` were sent.
    sent: usize,
}

// SAFETY: the mbufs are owned by the burst alone.
unsafe impl Send for TxBurst {}

impl TxBurst {
    pub fn new(capacity: usize) -> TxBurst {
        let capacity = capacity.clamp(1, u16::MAX as usize);
        TxBurst { d: Vec::with_capacity(capacity), m: vec![std::ptr::null_mut(); capacity], prepared: 0, sent: 0 }
    }

    pub fn is_full(&self) -> bool {
        self.d.len() == self.m.len()
    }

    /// Frames queued and not sent.
    pub fn pending(&self) -> usize {
        self.d.len() - self.sent
    }

    /// Queues `m`'s bytes `start..start + len` with `offload`; gives the
    /// mbuf back if the burst is full.
    pub fn push(&mut self, m: Mbuf, start: u32, len: u32, offload: TxOffload) -> Result<(), Mbuf> {
        if self.is_full() {
            return Err(m);
        }
        self.d.push(sys::px_tx_desc {
            m: m.into_raw(),
            start,
            len,
            flags: offload.flags,
            l2_len: offload.l2_len,
            l3_len: offload.l3_len,
            l4_len: offload.l4_len,
            tso_segsz: offload.tso_segsz,
            pad: 0,
        });
        Ok(())
    }

    /// One attempt to send what waits on `q`; returns how many the port
    /// took (fewer than waiting: its ring is full). Once all are sent the
    /// burst is empty again.
    pub fn send(&mut self, q: Queue) -> usize {
        let n = self.d.len();
        if self.prepared < n {
            let p = self.prepared;
            // SAFETY: descriptors of mbufs this burst owns, each prepared
            // once, their pointers written into `m[p..n]`.
            unsafe { sys::px_tx_prepare(self.d[p..].as_ptr(), self.m[p..].as_mut_ptr(), (n - p) as u16) };
            self.prepared = n;
        }
        let waiting = (n - self.sent) as u16;
        // SAFETY: prepared mbufs; the port owns those it takes.
        let took = unsafe { sys::px_tx_burst(q.port, q.queue, self.m[self.sent..].as_mut_ptr(), waiting) };
        self.sent += usize::from(took);
        if self.sent == n {
            self.d.clear();
            (self.prepared, self.sent) = (0, 0);
        }
        usize::from(took)
    }

    /// Frees what was not sent; returns how many.
    pub fn discard(&mut self) -> usize {
        let n = self.pending();
        let (p, s) = (self.prepared, self.sent);
        if p > s {
            // SAFETY: prepared, unsent mbufs this burst owns.
            unsafe { sys::px_free(self.m[s..p].as_mut_ptr(), (p - s) as u16) };
        }
        for d in &mut self.d[p..] {
            // SAFETY: unprepared mbufs this burst owns.
            unsafe { sys::px_free(&mut d.m, 1) };
        }
        self.d.clear();
        (self.prepared, self.sent) = (0, 0);
        n
    }
}

impl Drop for TxBurst {
    fn drop(&mut self) {
        self.discard();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_and_rust_agree_on_the_descriptors() {
        abi_matches().unwrap();
    }

    #[test]
    fn without_dpdk_the_eal_refuses_with_what_to_install() {
        if BUILT {
            return;
        }
        let e = Eal::init(&[]).unwrap_err();
        assert!(e.to_string().contains("apt-get install libdpdk-dev"), "{e}");
    }

    #[cfg(px_dpdk)]
    #[test]
    fn a_shim_that_cannot_be_loaded_is_an_error_with_what_to_install() {
        let detail = sys::open_shim_for_test(b"this is not an ELF object").unwrap_err();
        assert!(detail.contains("/proc/self/fd/"), "dlerror's text names the object: {detail}");
        let e = DpdkError::Load(detail).to_string();
        assert!(e.contains("apt-get install librte-meta-all") && e.contains("AF_PACKET"), "{e}");
        // The real shim loads, and the EAL's first entry points work.
        assert!(version().unwrap().starts_with("DPDK"), "{:?}", version());
    }

    /// A lent buffer is the mbuf's data itself, and it comes back only
    /// after the mbuf's last free; loans the lender cannot make hand the
    /// buffer back. (The only test here with an EAL: it can be set up
    /// once per process.)
    #[cfg(px_dpdk)]
    #[test]
    fn a_lent_buffer_comes_back_only_after_the_mbufs_last_free() {
        let prefix = format!("px-dpdk-lend-test-{}", std::process::id());
        let args = ["--no-huge", "--no-shconf", "--no-pci", "--no-telemetry", "--log-level=1", "-m", "64", "-l", "0"];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["--file-prefix".to_string(), prefix]);
        let eal = Eal::init(&args).unwrap();
        let pool = Pool::new("px-lend-test", 7, 0, 256, -1).unwrap();
        let mut lender = Lender::default();
        let buf: Vec<u8> = (0..100u8).collect();
        let at = buf.as_ptr();
        let mut m = lender.lend(&pool, buf, 10..60).unwrap();
        let data = m.room_mut();
        assert_eq!(data.as_ptr(), at.wrapping_add(10), "the engine's bytes, not a copy");
        assert_eq!(data, &(10..60u8).collect::<Vec<_>>()[..]);
        assert_eq!(lender.lent(), 1);
        let mut back = Vec::new();
        lender.reclaim(|b| back.push(b));
        assert!(back.is_empty(), "given back while its mbuf lives");
        drop(m);
        lender.reclaim(|b| back.push(b));
        assert_eq!(back.len(), 1, "given back after the mbuf's free");
        assert_eq!((back[0].as_ptr(), back[0].len()), (at, 100), "the same buffer, whole");
        assert_eq!(lender.lent(), 0);
        // Loans it cannot make: the buffer comes straight back.
        assert_eq!(lender.lend(&pool, vec![1; 10], 5..20).unwrap_err(), vec![1; 10]);
        assert!(lender.lend(&pool, vec![1; 10], 3..3).is_err());
        // The pool's mbufs all out: the next loan is refused, not waited for.
        let out: Vec<Mbuf> = (0..7).filter_map(|_| lender.lend(&pool, vec![2; 64], 0..64).ok()).collect();
        assert!(!out.is_empty() && lender.lend(&pool, vec![3; 64], 0..64).is_err());
        drop(out);
        lender.reclaim(drop);
        assert_eq!(lender.lent(), 0);
        drop((lender, pool, eal));
    }

    #[test]
    fn capabilities_name_what_is_set() {
        let c = Capabilities::TSO.with(Capabilities::RX_CSUM, true);
        assert!(c.has(Capabilities::TSO) && c.has(Capabilities::RX_CSUM) && !c.has(Capabilities::LRO));
        assert_eq!(c.names(), ["tso", "rx-checksum"]);
        assert_eq!(c.with(Capabilities::TSO, false).names(), ["rx-checksum"]);
    }
}
