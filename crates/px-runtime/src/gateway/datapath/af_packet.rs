//! The default datapath: each port is a Linux interface, reached through
//! AF_PACKET sockets with `PACKET_VNET_HDR` (kernel GRO super-packets in,
//! GSO super-packets out), each in the port's `PACKET_FANOUT` hash group so
//! that both directions of a flow come to the same worker.
//!
//! [`AfPacket`] is what the datapath sets up for the whole gateway (GRO on
//! the ports, restored at the end; the kernel fast path) and
//! [`AfPacketPorts`] one worker's sockets, by role. Per batch: one
//! `recvmmsg` (or a look at the mapped ring) and as few `sendmmsg` calls per
//! port as the batch allows, frames borrowed from the receive slots and the
//! engine's buffers, never copied.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use px_gateway::{Engine, Port};
use px_io::{
    Fanout, IfaceGuard, Offload, PacketMeta, PacketSocket, Poller, Receive, RecvError, RingBatch, RxBatch, RxError,
    RxFrames, RxPacket, SendError, SocketConfig, TxBatch, TxQueue,
};

use super::{Batch, Frame, Ports, Sink};
use crate::fast_path::FastPath;
use crate::gateway::config::{FastPathMode, GatewayConfig};
use crate::gateway::error::GatewayError;
use crate::logging::{error, info};

/// Waits for room in a full send buffer before the rest of a port's frames
/// is given up (and counted as send errors)...
const SEND_TRIES: u32 = 1000;
/// ... this long each.
const SEND_RETRY_WAIT: Duration = Duration::from_micros(20);

/// What the AF_PACKET datapath sets up for the whole gateway: the ports
/// captured as they were (restored at the end), and the kernel fast path
/// when this build and kernel have it.
pub struct AfPacket {
    guards: Vec<IfaceGuard>,
    /// Attached whenever this build has it, so that `fast_path` can be
    /// turned on by a reload (paused while it is off: see
    /// [`FastPath::load`]); why not otherwise.
    fast_path: Result<FastPath, String>,
    /// The `PACKET_FANOUT` group id of the outer port's first socket kind;
    /// the others follow it.
    fanout_base: u16,
    /// The MTUs (imtu, emtu): as configured, or the interfaces'.
    mtus: (u16, u16),
    /// The outer interface's own MTU, whatever `emtu` says.
    outer_link: u16,
}

impl AfPacket {
    /// Captures both ports (restored on drop, on every return path of the
    /// caller), turns GRO on when configured, attaches the fast path.
    pub fn start(cfg: &GatewayConfig) -> Result<AfPacket, GatewayError> {
        let mtus = (port_mtu("inner", &cfg.inner, cfg.imtu)?, port_mtu("outer", &cfg.outer, cfg.emtu)?);
        let outer_link = port_mtu("outer", &cfg.outer, 0)?;
        let mut guards = Vec::new();
        for name in [&cfg.inner, &cfg.outer] {
            let key = cfg.key_of(name);
            let port_err = |source| GatewayError::Port { key, port: name.clone(), source };
            let g = IfaceGuard::capture(name).map_err(port_err)?;
            if cfg.gro_gso {
                // Kernel GRO hands us super-packets: the software LRO.
                g.ctl().set_offload(name, Offload::Gro, true).map_err(port_err)?;
            }
            guards.push(g);
        }
        let fast_path = match FastPath::load(&cfg.inner, &cfg.outer, cfg.fast_path == FastPathMode::On) {
            Ok(fp) => Ok(fp),
            Err(e) if cfg.fast_path == FastPathMode::On => return Err(GatewayError::FastPath(e)),
            Err(e) => {
                if FastPath::built() {
                    info!("px gateway: the kernel fast path is not available: {e}; it stays off");
                }
                Err(e.to_string())
            }
        };
        // One fan-out group per port and receiving socket kind; worker i
        // joins each as its i-th member.
        let fanout_base = (std::process::id() as u16 & 0x1fff) * 8;
        Ok(AfPacket { guards, fast_path, fanout_base, mtus, outer_link })
    }

    /// The port MTUs (imtu, emtu).
    pub fn mtus(&self) -> (u16, u16) {
        self.mtus
    }

    /// Tells the engine the outer port's own MTU: nothing passed untouched
    /// toward a verified neighbour may exceed it (issue 35).
    pub fn engine_config(&self, c: &mut px_gateway::Config) {
        c.outer_link_mtu = self.outer_link;
    }

    /// The kernel fast path, if attached; why not otherwise.
    pub fn fast_path(&self) -> Result<&FastPath, &str> {
        self.fast_path.as_ref().map_err(String::as_str)
    }

    /// Lets the fast path's program work (`on`) or pauses it (it stays
    /// attached: it keeps tagged frames from the IP sockets); a change is
    /// logged.
    pub fn set_fast_path(&mut self, on: bool) -> Result<(), String> {
        let fp = self.fast_path.as_mut().map_err(|why| why.clone())?;
        if fp.active() == on {
            return Ok(());
        }
        fp.set_active(on).map_err(|e| e.to_string())?;
        if on {
            info!("px gateway: the kernel fast path's program is active on the ports");
        } else {
            info!(
                "px gateway: the kernel fast path's program is paused (fast_path = \"off\"): it only keeps tagged frames from the IP sockets"
            );
        }
        Ok(())
    }

    /// Whether the fast path's program works (not paused).
    pub fn fast_path_active(&self) -> bool {
        self.fast_path.as_ref().is_ok_and(FastPath::active)
    }

    /// Gives a worker's engine the fast path to offload flows to.
    pub fn prepare(&self, engine: &mut Engine) {
        if let Ok(fp) = &self.fast_path {
            engine.set_datapath(Some(Box::new(fp.datapath())), Instant::now());
        }
    }

    /// The sockets of one worker, joined to the fan-out groups.
    pub fn open(&self, cfg: &GatewayConfig, batch: usize) -> Result<AfPacketPorts, GatewayError> {
        let open = |name: &str, group: Option<u16>, receive: Receive| open_socket(cfg, name, group, receive);
        let (base, split) = (self.fanout_base, self.fast_path.is_ok());
        let port = |name: &str, group: u16| -> Result<PortSockets, GatewayError> {
            if !split {
                return Ok(PortSockets::Shared(open(name, Some(group), Receive::All)?));
            }
            // Receiving sockets bound to IPv4 and IPv6 see only what the
            // fast path did not redirect (the kernel serves them after TC);
            // a third takes every other protocol; a fourth only sends.
            Ok(PortSockets::Split {
                send: open(name, None, Receive::Nothing)?,
                ipv4: open(name, Some(group), Receive::Ipv4)?,
                ipv6: open(name, Some(group + 1), Receive::Ipv6)?,
                other: open(name, Some(group + 2), Receive::NotIp)?,
            })
        };
        let outer = port(&cfg.outer, base)?;
        let inner = port(&cfg.inner, base + 3)?;
        Ok(AfPacketPorts::new(inner, outer, batch).with_busy_poll(cfg.busy_poll_us))
    }

    /// Takes the datapath down: the fast path goes (its counts kept and
    /// returned), then the ports go back as they were.
    pub fn stop(mut self) -> Option<[u64; crate::fast_path::REASONS.len()]> {
        let reasons = self.fast_path.as_ref().ok().map(|fp| fp.stats().reasons());
        self.fast_path = Err("stopped".into());
        for g in &self.guards {
            if let Err(e) = g.restore() {
                error!("px gateway: restoring {}: {e}; put it back by hand (ip link, ethtool)", g.name());
            }
        }
        reasons
    }
}

/// A port's MTU: as configured, or the interface's.
fn port_mtu(key: &'static str, name: &str, configured: u16) -> Result<u16, GatewayError> {
    if configured != 0 {
        return Ok(configured);
    }
    let mtu = px_io::iface::mtu(name).map_err(|source| GatewayError::Port { key, port: name.into(), source })?;
    u16::try_from(mtu).ok().filter(|m| *m >= 576).ok_or(GatewayError::Mtu { port: name.into(), mtu })
}

/// One packet socket of a gateway port.
fn open_socket(
    cfg: &GatewayConfig,
    name: &str,
    group: Option<u16>,
    receive: Receive,
) -> Result<PacketSocket, GatewayError> {
    let sc = SocketConfig {
        // Always: even with offloads off, the virtio-net header is the only
        // way to learn that a frame's checksum is partial (a sender's
        // checksum offload); forwarded as it is, such a frame is dropped by
        // the receiver as corrupt. What `gro_gso` turns off is GRO on the
        // ports and GSO on send.
        vnet_hdr: true,
        promiscuous: cfg.promiscuous,
        rcvbuf: cfg.socket_buffer_bytes,
        sndbuf: cfg.socket_buffer_bytes,
        // No defragmentation: a router forwards fragments as they come (and
        // must not spend the host's reassembly memory on a flood of them);
        // the kernel's symmetric hash keeps the fragments of a datagram
        // together without it, as it never reads a fragment's ports
        // (`__skb_get_hash_symmetric` dissects without
        // FLOW_DISSECTOR_F_PARSE_1ST_FRAG).
        receive,
        ..SocketConfig::gateway_port(group.filter(|_| cfg.workers > 1).map(|group| Fanout { group, defrag: false }))
    };
    // The ring only when configured (`rx_ring`): see GatewayConfig.
    let sc = if cfg.rx_ring && receive != Receive::Nothing { sc } else { SocketConfig { rx_ring: None, ..sc } };
    PacketSocket::open(name, &sc).map_err(|source| GatewayError::Socket { port: name.into(), source })
}

/// A port's sockets, by role. (Two per worker, made once: the size of
/// the larger variant costs nothing.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum PortSockets {
    /// Without the kernel fast path: one socket bound to every protocol
    /// receives and sends.
    Shared(PacketSocket),
    /// With it: one that only sends, and three that receive (IPv4, IPv6:
    /// only what the fast path did not redirect, `px_io::Receive`; every
    /// other EtherType).
    Split { send: PacketSocket, ipv4: PacketSocket, ipv6: PacketSocket, other: PacketSocket },
}

/// A receiving socket of [`PortSockets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Shared,
    Ipv4,
    Ipv6,
    Other,
}

impl PortSockets {
    fn send(&self) -> &PacketSocket {
        match self {
            PortSockets::Shared(s) | PortSockets::Split { send: s, .. } => s,
        }
    }

    fn receiving(&self) -> Vec<(Role, &PacketSocket)> {
        match self {
            PortSockets::Shared(s) => vec![(Role::Shared, s)],
            PortSockets::Split { ipv4, ipv6, other, .. } => {
                vec![(Role::Ipv4, ipv4), (Role::Ipv6, ipv6), (Role::Other, other)]
            }
        }
    }

    fn rx_mut(&mut self, role: Role) -> &mut PacketSocket {
        match (self, role) {
            (PortSockets::Split { ipv4, .. }, Role::Ipv4) => ipv4,
            (PortSockets::Split { ipv6, .. }, Role::Ipv6) => ipv6,
            (PortSockets::Split { other, .. }, Role::Other) => other,
            (PortSockets::Shared(s), _) | (PortSockets::Split { send: s, .. }, Role::Shared) => s,
        }
    }
}

/// One worker's sockets on both ports, the poller over those that
/// receive, and the receive and send scratch.
#[derive(Debug)]
pub struct AfPacketPorts {
    /// By `Port as usize`.
    ports: [PortSockets; 2],
    poller: Poller,
    /// The receive queues, in the order they are served (the outer port's
    /// first): port, socket role, index in the poller.
    queues: Vec<(Port, Role, usize)>,
    rx: RxBatch,
    txb: TxBatch,
    batch: usize,
    busy_poll: BusyPoll,
}

impl AfPacketPorts {
    pub fn new(inner: PortSockets, outer: PortSockets, batch: usize) -> AfPacketPorts {
        let mut poller = Poller::new();
        let mut queues = Vec::new();
        for (port, sockets) in [(Port::Outer, &outer), (Port::Inner, &inner)] {
            for (role, s) in sockets.receiving() {
                queues.push((port, role, poller.add(s.as_fd())));
            }
        }
        // Only sockets without a ring receive into this.
        let all_rings = [&inner, &outer].iter().all(|p| p.receiving().iter().all(|(_, s)| s.has_ring()));
        let rx = RxBatch::new(if all_rings { 1 } else { batch }, px_io::MAX_FRAME);
        let busy_poll = BusyPoll::new(Duration::ZERO);
        AfPacketPorts { ports: [inner, outer], poller, queues, rx, txb: TxBatch::new(batch * 4), batch, busy_poll }
    }

    /// Looks at the sockets without sleeping for `spin` after they last
    /// had frames ([`BusyPoll`]; `busy_poll_us`).
    pub fn with_busy_poll(self, spin: Duration) -> AfPacketPorts {
        AfPacketPorts { busy_poll: BusyPoll::new(spin), ..self }
    }
}

/// The wait of `busy_poll_us`: after the sockets last had frames (seen by
/// any wait, a sleeping one too), the next waits look at them without
/// sleeping (`ppoll` with a zero timeout, again and again) until `spin` has
/// passed since, and only then sleep for what is left of their timeout.
/// A frame that comes while the worker looks costs no thread wake-up (the
/// kernel's softirq queues it, the next look sees it); once traffic has
/// stopped for `spin`, the worker sleeps as without it. `spin` zero: every
/// wait sleeps at once.
#[derive(Debug, Clone, Copy)]
struct BusyPoll {
    spin: Duration,
    last_ready: Option<Instant>,
}

impl BusyPoll {
    fn new(spin: Duration) -> BusyPoll {
        BusyPoll { spin, last_ready: None }
    }

    /// Until when a wait starting at `now` for at most `timeout` looks
    /// without sleeping (none: it sleeps at once).
    fn spin_until(&self, now: Instant, timeout: Duration) -> Option<Instant> {
        let until = (self.last_ready? + self.spin).min(now + timeout);
        (until > now).then_some(until)
    }

    /// Waits up to `timeout` through `poll` (a timeout in, how many are
    /// ready out), spinning first as [`BusyPoll`] says.
    fn wait(
        &mut self,
        timeout: Duration,
        mut poll: impl FnMut(Duration) -> std::io::Result<usize>,
    ) -> std::io::Result<usize> {
        let start = Instant::now();
        if let Some(until) = self.spin_until(start, timeout) {
            loop {
                let n = poll(Duration::ZERO)?;
                let now = Instant::now();
                if n > 0 {
                    self.last_ready = Some(now);
                    return Ok(n);
                }
                if now >= until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let n = poll(timeout.saturating_sub(start.elapsed()))?;
        if n > 0 && !self.spin.is_zero() {
            self.last_ready = Some(Instant::now());
        }
        Ok(n)
    }
}

impl Sink for AfPacketPorts {
    fn received(&self) -> Option<&dyn RxFrames> {
        None
    }

    fn send(&mut self, port: Port, frames: &mut [Frame]) -> u64 {
        send_frames(self.ports[port as usize].send(), &mut self.txb, frames, None)
    }
}

impl Ports for AfPacketPorts {
    type Batch<'a> = AfBatch<'a>;

    fn wait(&mut self, timeout: Duration) -> bool {
        // EINTR from a signal is a wake-up with nothing ready.
        let poller = &mut self.poller;
        self.busy_poll.wait(timeout, |t| poller.wait(Some(t))).is_ok()
    }

    fn queues(&self) -> usize {
        self.queues.len()
    }

    fn recv(&mut self, q: usize) -> Result<Option<AfBatch<'_>>, RecvError> {
        let (port, role, pi) = self.queues[q];
        if !self.poller.is_ready(pi) {
            return Ok(None);
        }
        let [inner, outer] = &mut self.ports;
        let (rx_port, tx_port) = match port {
            Port::Inner => (inner, &*outer),
            Port::Outer => (outer, &*inner),
        };
        let sock = rx_port.rx_mut(role);
        let (batch, tx) = (self.batch, tx_port.send());
        if sock.has_ring() {
            let Some(ring) = sock.recv_ring_batch(batch) else { return Ok(None) };
            let full = ring.len() >= batch;
            return Ok(Some(AfBatch { port, frames: Received::Ring(ring), tx, txb: &mut self.txb, full }));
        }
        let n = sock.recv_batch(&mut self.rx)?;
        let full = n >= self.rx.capacity();
        Ok((n > 0).then_some(AfBatch { port, frames: Received::Calls(&mut self.rx), tx, txb: &mut self.txb, full }))
    }

    fn idle(&mut self) -> bool {
        self.poller.wait(Some(Duration::ZERO)).is_ok()
            && !self.queues.iter().any(|&(_, _, pi)| self.poller.is_ready(pi))
    }

    fn take_drops(&mut self) -> u64 {
        let mut drops = 0;
        for p in &self.ports {
            for (_, s) in p.receiving() {
                if let Ok(st) = s.take_stats() {
                    drops += st.drops as u64;
                }
            }
        }
        drops
    }
}

/// Frames received through `recvmmsg` or from the mapped ring.
enum Received<'a> {
    Calls(&'a mut RxBatch),
    Ring(RingBatch<'a>),
}

/// A batch from one receiving socket, with the socket that sends for the
/// other port. A ring batch gives its slots back when dropped.
pub struct AfBatch<'a> {
    port: Port,
    frames: Received<'a>,
    tx: &'a PacketSocket,
    txb: &'a mut TxBatch,
    full: bool,
}

impl RxFrames for AfBatch<'_> {
    fn len(&self) -> usize {
        match &self.frames {
            Received::Calls(b) => b.len(),
            Received::Ring(r) => r.len(),
        }
    }

    fn get(&self, i: usize) -> Result<RxPacket<'_>, RxError> {
        match &self.frames {
            Received::Calls(b) => b.get(i),
            Received::Ring(r) => r.get(i),
        }
    }

    fn get_mut(&mut self, i: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
        match &mut self.frames {
            Received::Calls(b) => b.get_mut(i),
            Received::Ring(r) => r.get_mut(i),
        }
    }
}

impl Sink for AfBatch<'_> {
    fn received(&self) -> Option<&dyn RxFrames> {
        Some(self)
    }

    fn send(&mut self, port: Port, frames: &mut [Frame]) -> u64 {
        debug_assert_eq!(port, self.port.other(), "a batch sends out of the other port only");
        let rx: &dyn RxFrames = match &self.frames {
            Received::Calls(b) => &**b,
            Received::Ring(r) => r,
        };
        send_frames(self.tx, self.txb, frames, Some(rx))
    }
}

impl Batch for AfBatch<'_> {
    fn port(&self) -> Port {
        self.port
    }

    fn is_full(&self) -> bool {
        self.full
    }
}

/// Sends `frames` through `sock` in order, with as few `sendmmsg` calls as
/// `txb` allows; returns how many could not be sent.
fn send_frames(sock: &PacketSocket, txb: &mut TxBatch, frames: &[Frame], rx: Option<&dyn RxFrames>) -> u64 {
    let frames = frames.iter().filter_map(|f| f.bytes(rx));
    send_in_order(&mut sock.queue(txb), frames, || {
        // Send buffer full: wait for room briefly.
        std::thread::sleep(SEND_RETRY_WAIT)
    })
}

/// What [`send_in_order`] needs of a send queue ([`TxQueue`]; a fake in
/// the tests).
trait SendQueue<'a> {
    /// Queues frames until full or none is left; returns how many wait.
    fn fill<I: Iterator<Item = (PacketMeta, &'a [u8])>>(&mut self, frames: &mut I) -> usize;
    /// One attempt to send what waits (see [`TxQueue::send`]).
    fn send(&mut self) -> Result<usize, SendError>;
    /// Frames waiting.
    fn pending(&self) -> usize;
    /// Drops what waits; returns how many.
    fn clear(&mut self) -> usize;
}

impl<'a> SendQueue<'a> for TxQueue<'a> {
    fn fill<I: Iterator<Item = (PacketMeta, &'a [u8])>>(&mut self, frames: &mut I) -> usize {
        TxQueue::fill(self, frames)
    }
    fn send(&mut self) -> Result<usize, SendError> {
        TxQueue::send(self)
    }
    fn pending(&self) -> usize {
        TxQueue::pending(self)
    }
    fn clear(&mut self) -> usize {
        TxQueue::clear(self)
    }
}

/// Sends `frames` through `q` in order; returns how many could not be sent.
///
/// A frame the kernel refuses (e.g. too big for the device) is skipped and
/// counted, not retried. A full send buffer is waited out (`wait`) up to
/// [`SEND_TRIES`] times for the whole list (a refusal with frames behind it
/// costs a try too); then the rest is given up and counted.
fn send_in_order<'a, Q: SendQueue<'a>>(
    q: &mut Q,
    frames: impl Iterator<Item = (PacketMeta, &'a [u8])>,
    mut wait: impl FnMut(),
) -> u64 {
    let mut frames = frames.peekable();
    let (mut errors, mut tries) = (0, 0);
    while q.fill(&mut frames) > 0 {
        match q.send() {
            Ok(n) if n > 0 => continue,
            Ok(_) | Err(SendError::WouldBlock) => {}
            Err(SendError::Refused { .. }) => {
                errors += 1;
                if q.pending() == 0 && frames.peek().is_none() {
                    break;
                }
            }
        }
        tries += 1;
        if tries > SEND_TRIES {
            errors += (q.clear() + frames.count()) as u64;
            break;
        }
        wait();
    }
    errors
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// What the fake kernel does with the next `send`.
    #[derive(Debug, Clone, Copy)]
    enum Kernel {
        /// Takes up to this many frames.
        Take(usize),
        /// Send buffer full.
        Full,
        /// Refuses the first waiting frame.
        Refuse,
    }

    /// A send queue of `cap` frames in front of a scripted kernel (after
    /// the script: takes everything); records what left, in order.
    struct FakeQueue<'a> {
        cap: usize,
        waiting: VecDeque<&'a [u8]>,
        script: VecDeque<Kernel>,
        left: Vec<u8>,
        sends: usize,
    }

    impl<'a> FakeQueue<'a> {
        fn new(cap: usize, script: &[Kernel]) -> Self {
            FakeQueue {
                cap,
                waiting: VecDeque::new(),
                script: script.iter().copied().collect(),
                left: Vec::new(),
                sends: 0,
            }
        }
    }

    impl<'a> SendQueue<'a> for FakeQueue<'a> {
        fn fill<I: Iterator<Item = (PacketMeta, &'a [u8])>>(&mut self, frames: &mut I) -> usize {
            while self.waiting.len() < self.cap {
                let Some((_, f)) = frames.next() else { break };
                self.waiting.push_back(f);
            }
            self.waiting.len()
        }
        fn send(&mut self) -> Result<usize, SendError> {
            self.sends += 1;
            match self.script.pop_front().unwrap_or(Kernel::Take(usize::MAX)) {
                Kernel::Take(n) => {
                    let n = n.min(self.waiting.len());
                    for f in self.waiting.drain(..n) {
                        self.left.push(f[0]);
                    }
                    Ok(n)
                }
                Kernel::Full => Err(SendError::WouldBlock),
                Kernel::Refuse => {
                    self.waiting.pop_front();
                    Err(SendError::Refused { sent: 0, source: std::io::Error::from_raw_os_error(libc::EMSGSIZE) })
                }
            }
        }
        fn pending(&self) -> usize {
            self.waiting.len()
        }
        fn clear(&mut self) -> usize {
            let n = self.waiting.len();
            self.waiting.clear();
            n
        }
    }

    /// Frames 0..n, each one byte naming itself.
    fn numbered(n: u8) -> Vec<[u8; 1]> {
        (0..n).map(|i| [i]).collect()
    }

    fn send<'a>(q: &mut FakeQueue<'a>, frames: &'a [[u8; 1]]) -> (u64, usize) {
        let mut waits = 0;
        let errors = send_in_order(q, frames.iter().map(|f| (PacketMeta::PLAIN, &f[..])), || waits += 1);
        (errors, waits)
    }

    #[test]
    fn frames_leave_in_order_across_partial_sends_and_full_buffers() {
        let frames = numbered(10);
        let mut q = FakeQueue::new(4, &[Kernel::Take(3), Kernel::Full, Kernel::Take(1), Kernel::Full, Kernel::Full]);
        let (errors, waits) = send(&mut q, &frames);
        assert_eq!(q.left, (0..10).collect::<Vec<u8>>());
        assert_eq!((errors, waits), (0, 3), "a wait per full buffer, none for a partial send");
    }

    #[test]
    fn a_refused_frame_is_skipped_and_counted() {
        let frames = numbered(6);
        // Frame 2 refused (a wait: frames are behind it); so is the last
        // one, which costs no wait.
        let mut q = FakeQueue::new(4, &[Kernel::Take(2), Kernel::Refuse, Kernel::Take(2), Kernel::Refuse]);
        let (errors, waits) = send(&mut q, &frames);
        assert_eq!(q.left, [0, 1, 3, 4]);
        assert_eq!((errors, waits), (2, 1));
    }

    #[test]
    fn a_buffer_that_stays_full_gives_up_and_counts_the_rest() {
        let frames = numbered(10);
        let script: Vec<Kernel> =
            [Kernel::Take(3)].into_iter().chain(std::iter::repeat_n(Kernel::Full, SEND_TRIES as usize + 5)).collect();
        let mut q = FakeQueue::new(4, &script);
        let (errors, waits) = send(&mut q, &frames);
        assert_eq!(q.left, [0, 1, 2]);
        assert_eq!(errors, 7, "the 7 frames not sent");
        assert_eq!(waits, SEND_TRIES as usize);
        assert_eq!(q.sends, 1 + SEND_TRIES as usize + 1);
        assert_eq!(q.pending(), 0);
    }

    #[test]
    fn nothing_to_send_makes_no_call() {
        let mut q = FakeQueue::new(4, &[]);
        assert_eq!(send(&mut q, &[]), (0, 0));
        assert_eq!(q.sends, 0);
    }

    /// Waits once through a scripted `ppoll` that answers `ready(call
    /// number)`; returns what the wait returned and each call's timeout.
    fn waits(bp: &mut BusyPoll, timeout: Duration, ready: impl Fn(usize) -> usize) -> (usize, Vec<Duration>) {
        let mut calls = Vec::new();
        let n = bp
            .wait(timeout, |t| {
                calls.push(t);
                Ok(ready(calls.len()))
            })
            .unwrap();
        (n, calls)
    }

    #[test]
    fn busy_poll_looks_without_sleeping_after_traffic() {
        let mut bp = BusyPoll::new(Duration::from_secs(30));
        bp.last_ready = Some(Instant::now());
        let (n, calls) = waits(&mut bp, Duration::from_secs(10), |call| usize::from(call == 4));
        assert_eq!(n, 1);
        assert_eq!(calls, [Duration::ZERO; 4], "four looks, no sleep");
    }

    #[test]
    fn busy_poll_off_sleeps_at_once() {
        let mut bp = BusyPoll::new(Duration::ZERO);
        bp.last_ready = Some(Instant::now());
        let (n, calls) = waits(&mut bp, Duration::from_secs(10), |_| 1);
        assert_eq!((n, calls.len()), (1, 1));
        assert!(calls[0] > Duration::from_secs(9), "slept with the timeout: {calls:?}");
        let (_, calls) = waits(&mut bp, Duration::from_secs(10), |_| 1);
        assert_eq!(calls.len(), 1, "a wake-up starts no looking either");
        assert!(calls[0] > Duration::from_secs(9));
    }

    #[test]
    fn busy_poll_sleeps_once_traffic_has_stopped_for_the_spin() {
        let mut bp = BusyPoll::new(Duration::from_millis(1));
        bp.last_ready = Some(Instant::now() - Duration::from_millis(5));
        let (_, calls) = waits(&mut bp, Duration::from_secs(10), |_| 0);
        assert_eq!(calls.len(), 1);
        assert!(calls[0] > Duration::from_secs(9), "{calls:?}");
    }

    #[test]
    fn a_wake_up_from_sleep_starts_the_looking() {
        let mut bp = BusyPoll::new(Duration::from_secs(30));
        let (n, calls) = waits(&mut bp, Duration::from_secs(10), |_| 1);
        assert_eq!((n, calls.len()), (1, 1), "no traffic yet: slept");
        assert!(calls[0] > Duration::from_secs(9));
        let (_, calls) = waits(&mut bp, Duration::from_secs(10), |call| usize::from(call == 2));
        assert_eq!(calls, [Duration::ZERO; 2], "traffic just now: looked");
    }

    #[test]
    fn busy_poll_looks_no_longer_than_the_timeout() {
        let mut bp = BusyPoll::new(Duration::from_secs(30));
        bp.last_ready = Some(Instant::now());
        let t0 = Instant::now();
        let (n, calls) = waits(&mut bp, Duration::from_millis(2), |_| 0);
        assert_eq!(n, 0);
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(calls.len() > 1 && calls[..calls.len() - 1].iter().all(|t| t.is_zero()), "{}", calls.len());
        assert!(*calls.last().unwrap() <= Duration::from_millis(2));
    }
}
