//! The DPDK datapath: each port is a DPDK device (a NIC's poll-mode
//! driver, or `net_memif`, `net_af_packet`, `net_pcap` for measuring and
//! testing), each worker one queue pair on both ports, polled without
//! sleeping (`docs/dpdk.md`).
//!
//! [`Dpdk`] is what the datapath sets up for the whole gateway (the EAL,
//! two mbuf pools, both ports started with one queue pair per worker and,
//! with several workers, RSS under a symmetric key so that both directions
//! of a flow reach the same worker) and [`DpdkPorts`] one worker's queues.
//! Frames are received into mbufs and rewritten there in place; a frame
//! passed on leaves in the very mbuf it came in (trimmed to the range the
//! engine names); the engine's own frames are lent to a port whose driver
//! copies what it sends (memif in copy mode, AF_PACKET, pcap: an mbuf
//! points into the engine's buffer, which comes back once the driver is
//! done with it) and copied into fresh mbufs from the pool their size fits
//! for any other (a NIC's DMA needs DPDK's memory). Offloads the port has
//! are used (TSO for a segment the engine hands to GSO, checksum offload
//! for a partial checksum); otherwise the work is done in software or, for
//! a GSO frame on a port without TSO (the engine is told which ports have
//! it, so this never happens), the frame is refused and counted.
//!
//! Fail closed: the ports forward only while a worker polls them. When the
//! process stops they are stopped and closed (and when it dies, nothing
//! polls them: a NIC's queues fill and drop, a memif peer sees the link go
//! down).

use std::sync::Arc;
use std::time::{Duration, Instant};

use px_dpdk::{Capabilities, Eal, Lender, Mbuf, Pool, Port as DpdkPort, PortConf, Queue, RxBurst, TxBurst, TxOffload};
use px_gateway::{Port, Transmit};
use px_io::{Checksum, Gso, GsoKind, PacketMeta, PacketType, RecvError, RxError, RxFrames, RxPacket};
use px_io::{IfaceGuard, Offload, PacketSocket, Receive, SocketConfig};

use super::keys::{DpdkConfig, TPACKET2_DATA, device};
use super::{Batch, Frame, Ports, Sink};
use crate::gateway::config::GatewayConfig;
use crate::gateway::error::GatewayError;
use crate::logging::{error, info, warn};

/// How long a worker keeps offering frames to a transmit ring that stays
/// full before it gives the rest up (counted as send errors): the port's
/// peer (a NIC's wire, a memif reader) takes a ring of 1024 frames in
/// well under this.
const TX_FULL_WAIT: Duration = Duration::from_millis(20);

/// Bytes a frame may take beyond its IP MTU: Ethernet and two VLAN tags.
const LINK_OVERHEAD: u32 = 14 + 8;
/// DPDK's `RTE_PKTMBUF_HEADROOM` (22.11's default build): a pool's data
/// room includes it.
const MBUF_HEADROOM: u32 = 128;

/// What the DPDK datapath sets up for the whole gateway. Field order is
/// drop order: the ports stop before the pools go, and the EAL last.
pub struct Dpdk {
    /// By `Port as usize`.
    ports: [DpdkPort; 2],
    pools: Arc<Pools>,
    /// The CPU of each worker (empty: not pinned).
    cores: Vec<usize>,
    /// By `Port as usize`: whether the engine's frames are lent to the
    /// port rather than copied ([`lends`]).
    lend: [bool; 2],
    /// The port MTUs the engine runs with (imtu, emtu).
    mtus: (u16, u16),
    /// The outer port's own MTU, whatever `emtu` says (the Linux
    /// interface's under `net_af_packet`, else what the driver reports;
    /// 0, no bound, on memif).
    outer_link: u16,
    /// The Linux interfaces under `net_af_packet` devices, restored after
    /// the ports stop (their GRO is turned off: DPDK's driver reads
    /// frames, not the kernel's super-packets).
    guards: Vec<Interface>,
    eal: Arc<Eal>,
}

/// The two pools: buffers for the inner MTU (the inner port receives into
/// them; chained frames and large engine frames go there) and for the
/// outer MTU.
#[derive(Debug)]
pub struct Pools {
    large: Pool,
    small: Pool,
}

impl Pools {
    /// The pool whose buffers hold `len` bytes.
    fn for_len(&self, len: usize) -> Option<&Pool> {
        [&self.small, &self.large].into_iter().find(|p| len <= p.room() as usize)
    }
}

fn dpdk_err(e: px_dpdk::DpdkError) -> GatewayError {
    GatewayError::Dpdk(e.to_string())
}

impl Dpdk {
    /// Sets up the EAL, the pools and both ports.
    pub fn start(cfg: &GatewayConfig) -> Result<Dpdk, GatewayError> {
        let (d, guards) = devices(cfg)?;
        let mbufs = if d.mbufs != 0 { d.mbufs } else { default_mbufs(&d, cfg.workers, cfg.batch) };
        // Memory for the largest pools the MTUs can ask for (they are known
        // for sure only once the EAL has probed the ports).
        // The Linux interfaces' MTUs under `net_af_packet` (read once).
        let ifaces = (iface_mtu(&d.inner), iface_mtu(&d.outer));
        let planned = (port_mtu(cfg.imtu, ifaces.0, 9216), port_mtu(cfg.emtu, ifaces.1, 1500));
        let rooms = room(&d.inner, planned.0, 9216) + room(&d.outer, planned.1, 2048);
        let args = eal_args(&d, mbufs, rooms);
        let eal = Arc::new(Eal::init(&args).map_err(dpdk_err)?);
        remove_stale_runtime_dirs(eal.runtime_dir());
        info!("px gateway: DPDK {} EAL up ({})", px_dpdk::version().unwrap_or_default(), args.join(" "));
        let ids =
            [eal.port(device(&d.inner).name).map_err(dpdk_err)?, eal.port(device(&d.outer).name).map_err(dpdk_err)?];
        let [ii, oi] = [px_dpdk::port_info(ids[0]).map_err(dpdk_err)?, px_dpdk::port_info(ids[1]).map_err(dpdk_err)?];
        // A Linux interface under `net_af_packet` has the MTU; the driver
        // reports a default.
        let mtus = (port_mtu(cfg.imtu, ifaces.0, ii.mtu), port_mtu(cfg.emtu, ifaces.1, oi.mtu));
        // memif enforces no MTU (it reports 1500 and carries 9014-byte
        // frames): no bound there.
        let outer_link = if oi.driver == "net_memif" { 0 } else { port_mtu(0, ifaces.1, oi.mtu) };
        for (label, i) in [(&cfg.inner, &ii), (&cfg.outer, &oi)] {
            if cfg.workers > 1 && !i.capabilities.has(Capabilities::RSS) && i.driver != "net_af_packet" {
                return Err(GatewayError::Dpdk(format!(
                    "port {label} ({}) cannot spread flows over {} queues by a symmetric hash (no RSS): use workers = 1",
                    i.driver, cfg.workers
                )));
            }
        }
        let pool = |name: &str, room: u32| {
            let room = u16::try_from(room).map_err(|_| {
                GatewayError::Dpdk(format!("buffers of {room} bytes for {name}: DPDK's buffers hold at most 65535"))
            })?;
            Pool::new(name, mbufs, 256, room, ii.socket).map_err(dpdk_err)
        };
        let pools = Arc::new(Pools {
            large: pool("px-large", room(&d.inner, mtus.0, 9216))?,
            small: pool("px-small", room(&d.outer, mtus.1, 2048))?,
        });
        let start = |id: u16, spec: &str, label: &str, pool: &Pool, lro: bool| {
            let offloads = Capabilities::default()
                .with(Capabilities::RSS, cfg.workers > 1)
                .with(Capabilities::LRO, lro)
                .with(Capabilities::TSO, d.offloads)
                .with(Capabilities::TX_IP_CSUM, d.offloads)
                .with(Capabilities::TX_TCP_CSUM, d.offloads)
                .with(Capabilities::TX_UDP_CSUM, d.offloads)
                .with(Capabilities::RX_CSUM, d.offloads);
            let conf = PortConf {
                queues: cfg.workers as u16,
                rx_descriptors: d.rx_descriptors,
                tx_descriptors: d.tx_descriptors,
                mtu: 0,
                offloads,
                promiscuous: device(spec).iface.is_none(),
                pool,
            };
            DpdkPort::start(id, label, &conf).map_err(dpdk_err)
        };
        let inner = start(ids[0], &d.inner, &cfg.inner, &pools.large, false)?;
        let outer = start(ids[1], &d.outer, &cfg.outer, &pools.small, d.lro)?;
        for p in [&inner, &outer] {
            let offloads = if p.offloads.0 == 0 { "none".to_string() } else { p.offloads.names().join(", ") };
            info!(
                "px gateway: DPDK port {} = {} (port {}, {}), offloads: {offloads}",
                p.name,
                p.info.driver,
                p.info.id,
                mac(p.info.mac)
            );
        }
        let lend = [lends(&inner.info.driver, &d.inner), lends(&outer.info.driver, &d.outer)];
        for (p, lent) in [&inner, &outer].into_iter().zip(lend) {
            let how = if lent { "lent to the driver (no copy)" } else { "copied into mbufs" };
            info!("px gateway: DPDK port {}: the engine's frames are {how}", p.name);
        }
        Ok(Dpdk { ports: [inner, outer], pools, cores: d.cores.clone(), lend, mtus, outer_link, guards, eal })
    }

    /// The MTUs the engine runs with (imtu, emtu).
    pub fn mtus(&self) -> (u16, u16) {
        self.mtus
    }

    /// Tells the engine which ports cut GSO frames themselves (TSO).
    pub fn engine_config(&self, c: &mut px_gateway::Config) {
        c.inner_gso = self.ports[Port::Inner as usize].offloads.has(Capabilities::TSO);
        c.outer_gso = self.ports[Port::Outer as usize].offloads.has(Capabilities::TSO);
        // Nothing passed untouched toward a verified neighbour may exceed
        // the outer link (issue 35), as on AF_PACKET.
        c.outer_link_mtu = self.outer_link;
    }

    /// Worker `index`'s queues.
    pub fn open(&self, index: usize, batch: usize) -> DpdkPorts {
        let q = index as u16;
        DpdkPorts {
            queues: [self.ports[0].queue(q), self.ports[1].queue(q)],
            offloads: [self.ports[0].offloads, self.ports[1].offloads],
            rx: RxBurst::new(batch),
            tx: TxBurst::new(batch.max(32)),
            pools: self.pools.clone(),
            lender: Lender::default(),
            lend: self.lend,
            eal: self.eal.clone(),
            core: self.cores.get(index).copied(),
            registered: false,
            started: false,
            // One worker reports the ports' own drop counts.
            counts_port_drops: index == 0,
            drops_seen: 0,
        }
    }

    /// Stops the ports, frees the pools, cleans the EAL up (its runtime
    /// files removed) and restores the interfaces.
    pub fn stop(self) {
        let drops = receive_drops(&[self.ports[0].info.id, self.ports[1].info.id]);
        if drops > 0 {
            warn!("px gateway: DPDK ports dropped {drops} frames on receive (queue full or no buffer)");
        }
        let Dpdk { ports, pools, guards, eal, .. } = self;
        drop((ports, pools, eal));
        for Interface { guard, .. } in &guards {
            if let Err(e) = guard.restore() {
                error!("px gateway: restoring {}: {e}; put it back by hand (ip link, ethtool)", guard.name());
            }
        }
    }
}

/// Frames the ports dropped on receive so far (missed: queue full; no
/// buffer).
fn receive_drops(ports: &[u16]) -> u64 {
    ports.iter().map(|p| px_dpdk::port_stats(*p)).map(|s| s.imissed + s.rx_nombuf).sum()
}

/// The devices: the `[dpdk]` table, or DPDK's AF_PACKET driver on the
/// interfaces `inner` and `outer`; each `net_af_packet` interface captured
/// and its GRO turned off (restored when the gateway stops).
fn devices(cfg: &GatewayConfig) -> Result<(DpdkConfig, Vec<Interface>), GatewayError> {
    let d = match &cfg.dpdk {
        Some(d) => d.clone(),
        None => {
            let mtu = |key: &'static str, name: &str, configured: u16| -> Result<u16, GatewayError> {
                if configured != 0 {
                    return Ok(configured);
                }
                let m =
                    px_io::iface::mtu(name).map_err(|source| GatewayError::Port { key, port: name.into(), source })?;
                Ok(u16::try_from(m).unwrap_or(u16::MAX))
            };
            let mtus = (mtu("inner", &cfg.inner, cfg.imtu)?, mtu("outer", &cfg.outer, cfg.emtu)?);
            DpdkConfig::on_interfaces(&cfg.inner, &cfg.outer, cfg.workers, mtus)
        }
    };
    let mut guards = Vec::new();
    for (key, spec) in [("inner", &d.inner), ("outer", &d.outer)] {
        let Some(iface) = device(spec).iface else { continue };
        let port_err = |source| GatewayError::Port { key, port: iface.into(), source };
        let guard = IfaceGuard::capture(iface).map_err(port_err)?;
        guard.ctl().set_offload(iface, Offload::Gro, false).map_err(port_err)?;
        // A bump in the wire takes frames for any address. The driver's
        // own switch sets the interface's flag, which outlives a killed
        // process; a socket's membership goes with the socket.
        let promiscuous = SocketConfig { promiscuous: true, receive: Receive::Nothing, ..SocketConfig::default() };
        let promiscuous = PacketSocket::open(iface, &promiscuous)
            .map_err(|source| GatewayError::Socket { port: iface.into(), source })?;
        guards.push(Interface { guard, _promiscuous: promiscuous });
    }
    Ok((d, guards))
}

/// A Linux interface under a `net_af_packet` device, for the gateway's
/// run: its settings to restore, and a socket holding it promiscuous.
struct Interface {
    guard: IfaceGuard,
    _promiscuous: PacketSocket,
}

/// The data room of the pool a port of device `spec` receives into, for
/// frames of an IP `mtu`: at least `least`, and for a `net_af_packet`
/// device what its driver copies a ring frame into (the frame less its
/// header, behind the mbuf's headroom).
fn room(spec: &str, mtu: u16, least: u32) -> u32 {
    let ring = device(spec).ring_frame.map_or(0, |f| f.saturating_sub(TPACKET2_DATA) + MBUF_HEADROOM);
    (u32::from(mtu) + LINK_OVERHEAD + MBUF_HEADROOM).max(least).max(ring)
}

/// The MTU of the Linux interface under a `net_af_packet` device.
fn iface_mtu(spec: &str) -> Option<u16> {
    let m = px_io::iface::mtu(device(spec).iface?).ok()?;
    Some(u16::try_from(m).unwrap_or(u16::MAX))
}

/// The EAL arguments: the user's, then what they leave out — a file
/// prefix of this process's own (the EAL's runtime directory is removed at
/// exit), memory (hugepages when the machine has free ones, `--in-memory`;
/// otherwise `--no-huge` with `-m` sized for the pools), a main lcore, no
/// PCI scan when both ports are virtual, no telemetry socket, warnings
/// only — and the two devices.
fn eal_args(d: &DpdkConfig, mbufs: u32, rooms: u32) -> Vec<String> {
    let has = |names: &[&str]| d.eal.iter().any(|a| names.iter().any(|n| a == n || a.starts_with(&format!("{n}="))));
    let mut args = d.eal.clone();
    let mut add = |a: &[&str]| args.extend(a.iter().map(|s| s.to_string()));
    if !has(&["--file-prefix"]) {
        add(&["--file-prefix", &format!("px-gateway-{}", std::process::id())]);
    }
    let memory = ["--in-memory", "--no-huge", "-m", "--socket-mem", "--huge-dir", "--legacy-mem"];
    let no_huge = if has(&memory) {
        has(&["--no-huge"])
    } else if free_hugepages() > 0 {
        add(&["--in-memory"]);
        false
    } else {
        add(&["--no-huge", "--no-shconf"]);
        true
    };
    if no_huge && !has(&["-m", "--socket-mem"]) {
        // Every mbuf with its headroom and DPDK's header, plus room for the
        // rings and the drivers.
        let mb = ((u64::from(mbufs) * u64::from(rooms + 2 * 256)) >> 20) + 128;
        add(&["-m", &mb.to_string()]);
    }
    if !has(&["-l", "--lcores", "-c"]) {
        add(&["-l", &d.cores.first().copied().unwrap_or(0).to_string()]);
    }
    let virtual_only = [&d.inner, &d.outer].iter().all(|s| device(s).virtual_device);
    if virtual_only && !has(&["--no-pci", "-a", "--allow", "-b", "--block"]) {
        add(&["--no-pci"]);
    }
    if !has(&["--no-telemetry", "--telemetry"]) {
        add(&["--no-telemetry"]);
    }
    if !has(&["--log-level"]) {
        add(&["--log-level=4"]);
    }
    for spec in [&d.inner, &d.outer] {
        add(&[if device(spec).virtual_device { "--vdev" } else { "-a" }, spec]);
    }
    args
}

/// Removes the EAL runtime directories (`px-gateway-PID`, the default
/// file prefix) that gateways killed before their cleanup left beside
/// `ours`: those whose process is gone.
fn remove_stale_runtime_dirs(ours: Option<&std::path::Path>) {
    let Some(parent) = ours.and_then(std::path::Path::parent) else { return };
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("px-gateway-")).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Free hugepages of the default size (0 if the kernel has none).
fn free_hugepages() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo.lines().find_map(|l| l.strip_prefix("HugePages_Free:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Buffers per pool: every queue's descriptors on both ports, what the
/// workers hold between receive and send, and the per-thread caches.
fn default_mbufs(d: &DpdkConfig, workers: usize, batch: usize) -> u32 {
    let per_worker = u32::from(d.rx_descriptors) + u32::from(d.tx_descriptors) + 8 * batch as u32 + 512;
    (per_worker * workers as u32).next_power_of_two().max(4096) - 1
}

/// The MTU a port runs with: configured, or its interface's, or what the
/// device reports.
fn port_mtu(configured: u16, iface: Option<u16>, device: u16) -> u16 {
    if configured != 0 { configured } else { iface.unwrap_or(device) }
}

fn mac(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// One worker's queue pair on each port, its bursts, and the pools.
pub struct DpdkPorts {
    /// By `Port as usize`.
    queues: [Queue; 2],
    offloads: [Capabilities; 2],
    rx: RxBurst,
    tx: TxBurst,
    pools: Arc<Pools>,
    /// The engine's buffers lent to the ports, and by port whether to lend.
    lender: Lender,
    lend: [bool; 2],
    /// Held until the worker's ports go (after the pools' last use).
    eal: Arc<Eal>,
    core: Option<usize>,
    /// Registered with the EAL (in the worker's thread).
    registered: bool,
    started: bool,
    /// Whether this worker reports the ports' receive drops (one does).
    counts_port_drops: bool,
    drops_seen: u64,
}

impl DpdkPorts {
    /// In the worker's own thread, before its first poll: pinned to its
    /// core, and registered with the EAL (mempool caches).
    fn start_thread(&mut self) {
        self.started = true;
        if let Some(c) = self.core {
            px_dpdk::pin_thread(c);
        }
        self.registered = self.eal.register_thread();
    }
}

impl Drop for DpdkPorts {
    fn drop(&mut self) {
        // Dropped in the worker's thread, at the end of its run.
        if self.registered {
            self.eal.unregister_thread();
        }
    }
}

impl Sink for DpdkPorts {
    fn received(&self) -> Option<&dyn RxFrames> {
        None
    }

    fn send(&mut self, port: Port, frames: &mut [Frame]) -> u64 {
        let (q, offloads) = (self.queues[port as usize], self.offloads[port as usize]);
        let lender = self.lend[port as usize].then_some(&mut self.lender);
        send_frames(&mut self.tx, q, offloads, &self.pools, frames, None, lender)
    }
}

impl Ports for DpdkPorts {
    type Batch<'a> = DpdkBatch<'a>;

    /// A polling datapath does not wait.
    fn wait(&mut self, _timeout: Duration) -> bool {
        if !self.started {
            self.start_thread();
        }
        true
    }

    fn queues(&self) -> usize {
        2
    }

    fn recv(&mut self, q: usize) -> Result<Option<DpdkBatch<'_>>, RecvError> {
        // The outer port first, as the AF_PACKET datapath serves it.
        let port = if q == 0 { Port::Outer } else { Port::Inner };
        let n = self.rx.receive(self.queues[port as usize], &self.pools.large);
        if n == 0 {
            return Ok(None);
        }
        let out = port.other() as usize;
        Ok(Some(DpdkBatch {
            port,
            full: n == self.rx.capacity(),
            rx: &mut self.rx,
            tx: &mut self.tx,
            queue: self.queues[out],
            offloads: self.offloads[out],
            pools: &self.pools,
            lender: self.lend[out].then_some(&mut self.lender),
        }))
    }

    fn idle(&mut self) -> bool {
        // Unknown without receiving; nothing of this datapath waits for it
        // (the kernel fast path runs on AF_PACKET ports only).
        false
    }

    fn take_drops(&mut self) -> u64 {
        if !self.counts_port_drops {
            return 0;
        }
        let total = receive_drops(&[self.queues[0].port, self.queues[1].port]);
        let new = total.saturating_sub(self.drops_seen);
        self.drops_seen = total;
        new
    }

    fn reclaim(&mut self, give: &mut dyn FnMut(Vec<u8>)) {
        self.lender.reclaim(give);
    }
}

/// A burst received on one port, with the other port's transmit queue.
pub struct DpdkBatch<'a> {
    port: Port,
    full: bool,
    rx: &'a mut RxBurst,
    tx: &'a mut TxBurst,
    queue: Queue,
    offloads: Capabilities,
    pools: &'a Pools,
    /// Where the other port's engine frames are lent (`None`: copied).
    lender: Option<&'a mut Lender>,
}

/// The offload metadata of a received frame: a segment the port merged
/// (LRO) is a TCP super-packet; a checksum the port verified is valid.
fn rx_meta(rx: &RxBurst, i: usize, frame: &[u8]) -> PacketMeta {
    let info = rx.info(i);
    let csum = if info.l4_checksum == Some(true) { Checksum::Valid } else { Checksum::Unknown };
    let gso = info.lro_mss.and_then(|size| {
        let v6 = px_wire::FrameInfo::parse(frame).ok()??.version == px_wire::IpVersion::V6;
        Some(Gso { kind: if v6 { GsoKind::TcpV6 } else { GsoKind::TcpV4 }, size, ecn: false })
    });
    PacketMeta { gso, csum, hdr_len: 0 }
}

impl RxFrames for DpdkBatch<'_> {
    fn len(&self) -> usize {
        self.rx.len()
    }

    fn get(&self, i: usize) -> Result<RxPacket<'_>, RxError> {
        if self.rx.info(i).unusable {
            return Err(RxError::Truncated { len: 0, cap: self.pools.large.room() as usize });
        }
        let frame = self.rx.frame(i).ok_or(RxError::Index(i))?;
        // No host stack behind a DPDK port: every frame is to pass.
        Ok(RxPacket { meta: rx_meta(self.rx, i, frame), frame, pkt_type: PacketType::OtherHost })
    }

    fn get_mut(&mut self, i: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
        let meta = self.get(i)?.meta;
        Ok((meta, self.rx.frame_mut(i).ok_or(RxError::Index(i))?))
    }
}

impl Sink for DpdkBatch<'_> {
    fn received(&self) -> Option<&dyn RxFrames> {
        Some(self)
    }

    fn send(&mut self, port: Port, frames: &mut [Frame]) -> u64 {
        debug_assert_eq!(port, self.port.other(), "a batch sends out of the other port only");
        send_frames(self.tx, self.queue, self.offloads, self.pools, frames, Some(self.rx), self.lender.as_deref_mut())
    }
}

impl Batch for DpdkBatch<'_> {
    fn port(&self) -> Port {
        self.port
    }

    fn is_full(&self) -> bool {
        self.full
    }
}

/// Sends `frames` on `q` in order: a forward leaves in its own mbuf
/// (taken out of `rx`), an engine frame in its own buffer if `lender` is
/// given (taken out of the frame), else copied into a fresh mbuf. Returns
/// how many could not be sent.
fn send_frames(
    tx: &mut TxBurst,
    q: Queue,
    offloads: Capabilities,
    pools: &Pools,
    frames: &mut [Frame],
    mut rx: Option<&mut RxBurst>,
    mut lender: Option<&mut Lender>,
) -> u64 {
    let mut errors = 0;
    for f in frames {
        let queued = match f {
            Frame::Forward { slot, meta, range } => rx.as_deref_mut().and_then(|rx| {
                let frame = rx.frame_mut(*slot)?.get_mut(range.clone())?;
                let offload = tx_offload(frame, meta, offloads)?;
                Some((rx.take(*slot)?, range.start as u32, range.len() as u32, offload))
            }),
            Frame::Made(t) => match lender.as_deref_mut() {
                Some(l) => lend(l, pools, t, offloads),
                None => made(pools, t.frame(), &t.meta, offloads),
            },
        };
        let Some((m, start, len, offload)) = queued else {
            errors += 1;
            continue;
        };
        if let Err(m) = tx.push(m, start, len, offload) {
            errors += flush(tx, q);
            // Empty now: it takes this one.
            let _ = tx.push(m, start, len, offload);
        }
    }
    errors + flush(tx, q)
}

/// An engine frame copied into an mbuf of the pool it fits.
fn made(pools: &Pools, frame: &[u8], meta: &PacketMeta, offloads: Capabilities) -> Option<Queued> {
    let mut m = copied(pools, frame)?;
    let offload = tx_offload(m.room_mut().get_mut(..frame.len())?, meta, offloads)?;
    Some((m, 0, frame.len() as u32, offload))
}

/// A fresh mbuf, of the pool `frame` fits, holding a copy of it.
fn copied(pools: &Pools, frame: &[u8]) -> Option<Mbuf> {
    let mut m = pools.for_len(frame.len())?.alloc()?;
    m.room_mut().get_mut(..frame.len())?.copy_from_slice(frame);
    Some(m)
}

/// An engine frame lent to the port in its own buffer (taken out of `t`),
/// or copied into an mbuf if it cannot be lent.
fn lend(lender: &mut Lender, pools: &Pools, t: &mut Transmit, offloads: Capabilities) -> Option<Queued> {
    let offload = tx_offload(t.buf.get_mut(t.start..t.end)?, &t.meta, offloads)?;
    let m = match lender.lend(&pools.small, std::mem::take(&mut t.buf), t.start..t.end) {
        Ok(m) => m,
        Err(buf) => {
            t.buf = buf;
            // Finished above (checksum, offload flags): copied as it is.
            copied(pools, t.frame())?
        }
    };
    Some((m, 0, (t.end - t.start) as u32, offload))
}

/// An mbuf to send, the range of its data, and its offloads.
type Queued = (Mbuf, u32, u32, TxOffload);

/// Whether the engine's frames are lent to a port of `driver` (device
/// `spec`): only where the driver copies the bytes it sends (memif in copy
/// mode, AF_PACKET, pcap); a NIC's DMA needs DPDK's own memory, and a
/// zero-copy memif client hands its buffers to the peer.
fn lends(driver: &str, spec: &str) -> bool {
    match driver {
        "net_af_packet" | "net_pcap" => true,
        "net_memif" => !spec.split(',').any(|kv| kv.trim() == "zero-copy=yes"),
        _ => false,
    }
}

/// What to ask of the port for a frame with `meta`: TSO for a GSO frame
/// (none without it: refused), checksum offload for a partial checksum
/// (completed here in software without it).
fn tx_offload(frame: &mut [u8], meta: &PacketMeta, offloads: Capabilities) -> Option<TxOffload> {
    let needs_tso = meta.tcp_gso_size().is_some();
    let partial = matches!(meta.csum, Checksum::Partial { .. });
    if !needs_tso && !partial {
        return Some(TxOffload::default());
    }
    if (needs_tso && !offloads.has(Capabilities::TSO)) || (meta.gso.is_some() && !needs_tso) {
        return None;
    }
    let info = px_wire::FrameInfo::parse(frame).ok()??;
    let v4 = info.version == px_wire::IpVersion::V4;
    // A GSO frame's checksum is partial by contract (PacketMeta::tcp_gso).
    let Checksum::Partial { start, offset } = meta.csum else { return None };
    // The port finishes a TCP or UDP checksum whose sum starts at the
    // transport header; anything else (SCTP's CRC, an inner header) is
    // finished here.
    let by_port = match offset {
        16 if offloads.has(Capabilities::TX_TCP_CSUM) => Some(TxOffload::TCP_CSUM),
        6 if offloads.has(Capabilities::TX_UDP_CSUM) => Some(TxOffload::UDP_CSUM),
        _ => None,
    }
    .filter(|_| usize::from(start) == info.l4);
    let l4_flag = match (needs_tso, by_port) {
        (true, _) => TxOffload::TCP_SEG,
        (false, Some(f)) => f,
        (false, None) => {
            px_wire::offload::complete_partial(frame.get_mut(..info.end)?, meta.csum).ok()?;
            return Some(TxOffload::default());
        }
    };
    let mut flags = l4_flag | if v4 { TxOffload::IPV4 } else { TxOffload::IPV6 };
    if v4 && needs_tso && offloads.has(Capabilities::TX_IP_CSUM) {
        flags |= TxOffload::IP_CSUM;
    }
    let l4_len = match info.transport {
        px_wire::Transport::Tcp { header_len, .. } => header_len,
        _ => 8,
    };
    Some(TxOffload {
        flags,
        l2_len: info.l3 as u16,
        l3_len: (info.l4 - info.l3) as u16,
        l4_len: l4_len as u16,
        tso_segsz: meta.tcp_gso_size().unwrap_or(0),
    })
}

/// Sends what waits in `tx`, offering it again while the ring is full, up
/// to [`TX_FULL_WAIT`]; returns how many were given up.
fn flush(tx: &mut TxBurst, q: Queue) -> u64 {
    let mut since: Option<Instant> = None;
    while tx.pending() > 0 {
        if tx.send(q) > 0 {
            since = None;
            continue;
        }
        let t = *since.get_or_insert_with(Instant::now);
        if t.elapsed() > TX_FULL_WAIT {
            return tx.discard() as u64;
        }
        std::hint::spin_loop();
    }
    0
}
