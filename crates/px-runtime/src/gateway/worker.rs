//! One gateway worker: its own engine, one socket per port (each in the
//! port's `PACKET_FANOUT` hash group, so both directions of a flow come to
//! the same worker), a receive batch, and the loop that ties them together.
//!
//! Per batch and not per packet: one `recvmmsg`, one clock read, one
//! `sendmmsg` per port. The engine's frames for a packet go out before the
//! packet itself (the engine's ordering contract): each port has one
//! ordered list of [`Frame`]s, engine-made or forwarded, kept in the
//! worker's scratch and handed to `px-io`'s [`TxQueue`] without a copy and
//! without allocating.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use px_gateway::{Engine, Port, Transmit};
use px_io::{PacketMeta, PacketSocket, PacketType, Poller, RxBatch, RxFrames, SendError, TxBatch, TxQueue};

use super::capture::{Direction, Tap};
use super::metrics::{Shared, WorkerSnapshot};

/// How often a worker publishes its counters.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// Longest a worker sleeps with nothing to do (to notice a stop request).
const IDLE_WAKE: Duration = Duration::from_millis(100);
/// Waits for room in a full send buffer before the rest of a port's frames
/// is given up (and counted as send errors)...
const SEND_TRIES: u32 = 1000;
/// ... this long each.
const SEND_RETRY_WAIT: Duration = Duration::from_micros(20);
/// Engine buffers a worker holds for sending before it sends them, in the
/// middle of a receive batch if need be (issue 27 item 9): what a whole
/// batch made the engine queue (each input's frames are bounded by the
/// input's size, `px_gateway`'s buffer classes) never waits all at once.
/// A batch holds at most this plus what its last input made.
pub(crate) const MAX_QUEUED_BYTES: usize = 4 << 20;

pub struct Worker {
    pub index: usize,
    pub engine: Engine,
    pub sockets: Sockets,
    pub batch: usize,
    pub live: Arc<LiveConfig>,
    /// The capture's end, if one runs.
    pub tap: Option<Tap>,
}

/// A worker's packet sockets: those it receives from, each with its port,
/// and which of them sends for each port. Without the kernel fast path,
/// one socket per port does both (bound to every protocol). With it, a
/// port has three receiving sockets (IPv4, IPv6, everything else: the
/// first two only see what the fast path did not redirect, `px_io::Receive`)
/// and one that only sends.
#[derive(Debug)]
pub struct Sockets {
    pub all: Vec<(Port, PacketSocket)>,
    /// Index in `all` of the socket that sends, by `Port as usize`.
    pub tx: [usize; 2],
    /// Index in `all` of the sockets that receive.
    pub rx: Vec<usize>,
}

impl Sockets {
    /// One socket per port that receives everything and sends.
    pub fn plain(inner: PacketSocket, outer: PacketSocket) -> Sockets {
        Sockets { all: vec![(Port::Inner, inner), (Port::Outer, outer)], tx: [0, 1], rx: vec![1, 0] }
    }

    fn tx(&self, port: Port) -> &PacketSocket {
        &self.all[self.tx[port as usize]].1
    }

    /// The receiving socket `i` of `all`, and the socket that sends for
    /// the other port (never the same socket).
    fn rx_and_tx(&mut self, i: usize) -> (Port, &mut PacketSocket, &PacketSocket) {
        let port = self.all[i].0;
        let t = self.tx[port.other() as usize];
        debug_assert_ne!(i, t);
        if i < t {
            let (a, b) = self.all.split_at_mut(t);
            (port, &mut a[i].1, &b[0].1)
        } else {
            let (a, b) = self.all.split_at_mut(i);
            (port, &mut b[0].1, &a[t].1)
        }
    }
}

/// The engine configuration a reload hands every worker: a generation
/// number that workers compare once per loop (one relaxed load), and the
/// configuration behind a lock taken only when the number moved.
#[derive(Debug)]
pub struct LiveConfig {
    generation: AtomicU64,
    config: Mutex<px_gateway::Config>,
}

impl LiveConfig {
    pub fn new(c: px_gateway::Config) -> LiveConfig {
        LiveConfig { generation: AtomicU64::new(0), config: Mutex::new(c) }
    }

    /// Makes `c` the configuration every worker takes at its next loop.
    pub fn publish(&self, c: px_gateway::Config) {
        *self.config.lock().unwrap_or_else(|p| p.into_inner()) = c;
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn get(&self) -> px_gateway::Config {
        self.config.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A frame to send on one port: one the engine made (kept until sent, then
/// its buffer goes back to the engine), or a received frame forwarded from
/// its slot of the current receive batch.
#[derive(Debug)]
enum Frame {
    Made(Transmit),
    /// A received frame passed on: the `range` of it the engine's verdict
    /// names (the whole frame, or the part a merge rewrote in place).
    Forward {
        slot: usize,
        meta: PacketMeta,
        range: core::ops::Range<usize>,
    },
}

impl Frame {
    /// Metadata and bytes to send; `None` for a slot the batch no longer
    /// yields (not seen: it was readable when the engine took it).
    fn bytes<'a>(&'a self, rx: &'a dyn RxFrames) -> Option<(PacketMeta, &'a [u8])> {
        match self {
            Frame::Made(t) => Some((t.meta, t.frame())),
            Frame::Forward { slot, meta, range } => {
                rx.get(*slot).ok().and_then(|p| p.frame.get(range.clone())).map(|f| (*meta, f))
            }
        }
    }
}

/// Scratch space reused for every batch (no allocation per packet).
struct Scratch {
    txb: TxBatch,
    /// What to send, per port (indexed by `Port as usize`), in order.
    out: [Vec<Frame>; 2],
    /// Buffer bytes of the engine's frames in `out`, per port.
    queued_bytes: [usize; 2],
    extra: WorkerSnapshot,
    tap: Option<Tap>,
}

impl Worker {
    /// Runs until `stop` is set, then flushes everything held and returns.
    pub fn run(self, stop: Arc<AtomicBool>, shared: Shared) {
        let Worker { index, mut engine, mut sockets, batch, live, tap } = self;
        let mut generation = live.generation();
        let mut poller = Poller::new();
        let polled: Vec<(usize, usize)> =
            sockets.rx.iter().map(|&i| (i, poller.add(sockets.all[i].1.as_fd()))).collect();
        // Only sockets without a ring receive into this.
        let all_rings = sockets.rx.iter().all(|&i| sockets.all[i].1.has_ring());
        let mut rx = RxBatch::new(if all_rings { 1 } else { batch }, px_io::MAX_FRAME);
        let mut sc = Scratch {
            txb: TxBatch::new(batch * 4),
            out: [Vec::with_capacity(batch * 8), Vec::with_capacity(batch * 8)],
            queued_bytes: [0; 2],
            extra: WorkerSnapshot::default(),
            tap,
        };
        let mut last_publish = Instant::now();
        loop {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) {
                engine.flush_all(now);
                drain(&mut engine, &mut sc);
                send_engine_frames(&mut engine, &mut sc, &sockets, &rx);
                publish(index, &engine, &shared, &mut sc.extra, &sockets);
                return;
            }
            if live.generation() != generation {
                // A reload, between two batches: the engine sends what it
                // holds (queued here, in order) and takes the new values.
                generation = live.generation();
                if engine.set_config(now, live.get()).is_ok() {
                    drain(&mut engine, &mut sc);
                    send_engine_frames(&mut engine, &mut sc, &sockets, &rx);
                    publish(index, &engine, &shared, &mut sc.extra, &sockets);
                }
            }
            let wait = engine.poll_timeout().map_or(IDLE_WAKE, |d| d.saturating_duration_since(now)).min(IDLE_WAKE);
            if poller.wait(Some(wait)).is_err() {
                // EINTR from a signal: loop to look at `stop`.
                continue;
            }
            if let Some(t) = &mut sc.tap {
                t.tick();
            }
            // Whether every socket was read empty this round (a batch
            // shorter than the most it could take).
            let mut quiet = true;
            for &(i, pi) in &polled {
                if !poller.is_ready(pi) {
                    continue;
                }
                let (port, rx_sock, tx_sock) = sockets.rx_and_tx(i);
                // Sends the frames for the other port so far, in the middle
                // of a batch when the engine's queued for it pass
                // MAX_QUEUED_BYTES (those back out of the receiving port,
                // ICMP errors, are few: rate-limited).
                let mut send_ahead = |e: &mut Engine, sc: &mut Scratch, rx: &dyn RxFrames| {
                    send_port(e, sc, port.other(), tx_sock, rx);
                };
                if let Some(mut ring) = rx_sock.recv_ring_batch(batch) {
                    quiet &= ring.len() < batch;
                    handle_batch(&mut engine, &mut sc, port, &mut ring, &mut send_ahead);
                    // Forwards borrow the ring's slots: send them (and the
                    // engine's frames for the other port) before releasing it.
                    send_port(&mut engine, &mut sc, port.other(), tx_sock, &ring);
                    drop(ring);
                } else {
                    let n = match rx_sock.recv_batch(&mut rx) {
                        Ok(n) => n,
                        Err(e) => {
                            sc.extra.rx_errors += counts_as_rx_error(&e) as u64;
                            0
                        }
                    };
                    quiet &= n < rx.capacity();
                    if n > 0 {
                        handle_batch(&mut engine, &mut sc, port, &mut rx, &mut send_ahead);
                        send_port(&mut engine, &mut sc, port.other(), tx_sock, &rx);
                    }
                }
                // Frames back out of the receiving port (ICMP errors) are all
                // the engine's own.
                send_port(&mut engine, &mut sc, port, sockets.tx(port), &rx);
            }
            let now = Instant::now();
            if engine.poll_timeout().is_some_and(|d| d <= now) {
                engine.handle_timeout(now);
                drain(&mut engine, &mut sc);
                send_engine_frames(&mut engine, &mut sc, &sockets, &rx);
            }
            // Everything sent and nothing waiting, as a last look confirms:
            // flows that qualified may go to the kernel without a byte of
            // theirs behind in user space (`px_gateway`'s engine/offload.rs).
            if quiet && engine.offload_pending() {
                // What those flows hold goes first, then the install.
                engine.fast_path_prepare(now);
                drain(&mut engine, &mut sc);
                send_engine_frames(&mut engine, &mut sc, &sockets, &rx);
                if poller.wait(Some(Duration::ZERO)).is_ok() && !polled.iter().any(|&(_, pi)| poller.is_ready(pi)) {
                    engine.fast_path_sync(now);
                }
            }
            if now.duration_since(last_publish) >= PUBLISH_EVERY {
                last_publish = now;
                publish(index, &engine, &shared, &mut sc.extra, &sockets);
            }
        }
    }
}

/// Runs the engine over a received batch, recording what to send; once
/// the engine's frames waiting for the other port pass
/// [`MAX_QUEUED_BYTES`], `send_ahead` sends that port's list (in order,
/// forwards of earlier slots included) before the batch goes on.
fn handle_batch(
    engine: &mut Engine,
    sc: &mut Scratch,
    port: Port,
    frames: &mut dyn RxFrames,
    send_ahead: &mut dyn FnMut(&mut Engine, &mut Scratch, &dyn RxFrames),
) {
    let now = Instant::now();
    for i in 0..frames.len() {
        // To this host's own MAC on the port: the host's stack takes it,
        // the bump in the wire does not pass it on.
        if let Ok(p) = frames.get(i) {
            // Everything that arrived on the port's wire, ours or not.
            sc.extra.count_wire_rx(port, p.frame, &p.meta);
            if p.pkt_type == PacketType::Host {
                let _ = engine.handle_for_host(port, p.frame.len());
                continue;
            }
        }
        let Ok((meta, frame)) = frames.get_mut(i) else {
            sc.extra.rx_errors += 1;
            continue;
        };
        // As received, before the engine rewrites anything in place.
        if let Some(t) = &mut sc.tap
            && !t.record(port, Direction::Rx, frame, meta.csum)
        {
            sc.extra.capture_dropped += 1;
        }
        let v = engine.handle_packet(now, port, frame, meta);
        drain(engine, sc);
        if let Some((meta, range)) = v.forwarded(frame.len()) {
            sc.out[port.other() as usize].push(Frame::Forward { slot: i, meta, range });
        }
        if sc.queued_bytes[port.other() as usize] > MAX_QUEUED_BYTES {
            send_ahead(engine, sc, &*frames);
        }
    }
}

/// A failed receive call is a receive error, except an interrupted one.
fn counts_as_rx_error(e: &px_io::RecvError) -> bool {
    !matches!(e, px_io::RecvError::Os(o) if o.kind() == std::io::ErrorKind::Interrupted)
}

/// Moves the engine's queued frames to their ports' lists, in order.
fn drain(engine: &mut Engine, sc: &mut Scratch) {
    while let Some(t) = engine.poll_transmit() {
        sc.queued_bytes[t.port as usize] += t.buf.len();
        sc.out[t.port as usize].push(Frame::Made(t));
    }
}

/// Sends frames that are all the engine's own (timeouts, shutdown).
fn send_engine_frames(engine: &mut Engine, sc: &mut Scratch, sockets: &Sockets, rx: &RxBatch) {
    send_port(engine, sc, Port::Inner, sockets.tx(Port::Inner), rx);
    send_port(engine, sc, Port::Outer, sockets.tx(Port::Outer), rx);
}

/// Sends everything recorded for `port`, in order, with as few `sendmmsg`
/// calls as the batch allows, then gives the engine's buffers back.
fn send_port(engine: &mut Engine, sc: &mut Scratch, port: Port, sock: &PacketSocket, rx: &dyn RxFrames) {
    let list = &mut sc.out[port as usize];
    if list.is_empty() {
        return;
    }
    if let Some(t) = &mut sc.tap {
        for (meta, frame) in list.iter().filter_map(|f| f.bytes(rx)) {
            if !t.record(port, Direction::Tx, frame, meta.csum) {
                sc.extra.capture_dropped += 1;
            }
        }
    }
    for (meta, frame) in list.iter().filter_map(|f| f.bytes(rx)) {
        sc.extra.count_wire_tx(port, frame, &meta);
    }
    let frames = list.iter().filter_map(|f| f.bytes(rx));
    sc.extra.send_errors += send_in_order(&mut sock.queue(&mut sc.txb), frames, || {
        // Send buffer full: wait for room briefly.
        std::thread::sleep(SEND_RETRY_WAIT)
    });
    for f in list.drain(..) {
        if let Frame::Made(t) = f {
            engine.recycle(t.buf);
        }
    }
    sc.queued_bytes[port as usize] = 0;
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

fn publish(index: usize, engine: &Engine, shared: &Shared, extra: &mut WorkerSnapshot, sockets: &Sockets) {
    for &i in &sockets.rx {
        if let Ok(st) = sockets.all[i].1.take_stats() {
            extra.socket_drops += st.drops as u64;
        }
    }
    let wanted = shared.process.flows_wanted.load(Ordering::Relaxed);
    if wanted != extra.flows_answered {
        extra.largest_flows = engine.largest_flows(super::status::LARGEST_FLOWS, Instant::now());
        extra.flows_answered = wanted;
    }
    shared.publish(
        index,
        WorkerSnapshot {
            counters: engine.counters().clone(),
            wire: extra.wire,
            flows: engine.flow_count(),
            held_bytes: engine.held_bytes(),
            socket_drops: extra.socket_drops,
            send_errors: extra.send_errors,
            rx_errors: extra.rx_errors,
            capture_dropped: extra.capture_dropped,
            merge_timeout_us: engine.config().merge_timeout.as_micros() as u64,
            in_kernel: engine.flows_in_kernel(),
            kernel_reasons: None,
            largest_flows: extra.largest_flows.clone(),
            flows_answered: extra.flows_answered,
        },
    );
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use etherparse::{IpHeaders, IpNumber, Ipv4Header, PacketBuilder};
    use px_io::{PacketType, RxError, RxPacket};

    use super::*;

    /// A received batch in plain buffers.
    struct Frames(Vec<Vec<u8>>);

    impl RxFrames for Frames {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn get(&self, i: usize) -> Result<RxPacket<'_>, RxError> {
            let frame = self.0.get(i).ok_or(RxError::Index(i))?;
            Ok(RxPacket { meta: PacketMeta::PLAIN, frame, pkt_type: PacketType::OtherHost })
        }
        fn get_mut(&mut self, i: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
            let frame = self.0.get_mut(i).ok_or(RxError::Index(i))?;
            Ok((PacketMeta::PLAIN, frame))
        }
    }

    /// UDP/IPv4 from an inner host to an outer one, `len` bytes of IP packet.
    fn udp_out(len: usize, df: bool, tag: u8) -> Vec<u8> {
        let payload = vec![tag; len - 28];
        let mut ip = Ipv4Header::new(0, 64, IpNumber::UDP, [203, 0, 113, 1], [198, 51, 100, 1]).unwrap();
        ip.dont_fragment = df;
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
            .ip(IpHeaders::Ipv4(ip, Default::default()))
            .udp(4000, 5000);
        let mut f = Vec::new();
        b.write(&mut f, &payload).unwrap();
        f
    }

    fn scratch() -> Scratch {
        Scratch {
            txb: TxBatch::new(4),
            out: [Vec::new(), Vec::new()],
            queued_bytes: [0; 2],
            extra: WorkerSnapshot::default(),
            tap: None,
        }
    }

    /// A `send_ahead` that must not be called.
    fn never(_: &mut Engine, _: &mut Scratch, _: &dyn RxFrames) {
        panic!("sent ahead in a small batch");
    }

    /// What a port's list holds, in order: `M` an engine-made frame,
    /// `F<slot>` a forward.
    fn shape(list: &[Frame]) -> Vec<String> {
        list.iter()
            .map(|f| match f {
                Frame::Made(_) => "M".to_string(),
                Frame::Forward { slot, .. } => format!("F{slot}"),
            })
            .collect()
    }

    /// A batch whose engine frames for the other port pass
    /// MAX_QUEUED_BYTES sends them in the middle of the batch, in order,
    /// and never holds much more than the bound.
    #[test]
    fn a_large_batch_is_sent_ahead_not_held_whole() {
        let mut engine = Engine::new(px_gateway::Config::default()).unwrap();
        let mut sc = scratch();
        // 9000-byte datagrams, DF clear: 7 fragments each.
        let mut rx = Frames((0..600).map(|i| udp_out(9000, false, i as u8)).collect());
        let (mut sends, mut most, mut frames) = (0, 0, 0);
        let mut send_ahead = |e: &mut Engine, sc: &mut Scratch, _: &dyn RxFrames| {
            sends += 1;
            most = most.max(sc.queued_bytes[Port::Outer as usize]);
            for f in sc.out[Port::Outer as usize].drain(..) {
                frames += 1;
                if let Frame::Made(t) = f {
                    e.recycle(t.buf);
                }
            }
            sc.queued_bytes[Port::Outer as usize] = 0;
        };
        handle_batch(&mut engine, &mut sc, Port::Inner, &mut rx, &mut send_ahead);
        assert!(sends >= 1, "never sent ahead");
        assert!(most <= MAX_QUEUED_BYTES + 7 * 2048, "held {most} bytes");
        assert_eq!(frames + sc.out[Port::Outer as usize].len(), 600 * 7, "every fragment, once");
    }

    #[test]
    fn engine_frames_go_before_later_forwards_and_to_their_own_port() {
        let cfg =
            px_gateway::Config { icmp_source_v4: Some([198, 51, 100, 254].into()), ..px_gateway::Config::default() };
        let mut engine = Engine::new(cfg).unwrap();
        let mut sc = scratch();
        // 0: too big for the outer MTU, DF clear: cut into fragments (the
        // engine's frames); 1: small, forwarded as it is; 2: too big with
        // DF: dropped, "fragmentation needed" back out of the inner port;
        // 3: small again.
        let mut rx =
            Frames(vec![udp_out(3000, false, 1), udp_out(200, true, 2), udp_out(3000, true, 3), udp_out(100, true, 4)]);
        handle_batch(&mut engine, &mut sc, Port::Inner, &mut rx, &mut never);
        assert_eq!(shape(&sc.out[Port::Outer as usize]), ["M", "M", "M", "F1", "F3"]);
        assert_eq!(shape(&sc.out[Port::Inner as usize]), ["M"]);
        // What would be sent: the fragments fit the outer MTU, the forwards
        // are the received frames themselves.
        let sent: Vec<_> = sc.out[Port::Outer as usize].iter().map(|f| f.bytes(&rx).unwrap().1.len()).collect();
        assert!(sent[..3].iter().all(|&n| n <= 1514), "{sent:?}");
        assert_eq!(&sent[3..], [214, 114]);
        let icmp = sc.out[Port::Inner as usize][0].bytes(&rx).unwrap().1;
        assert_eq!(icmp[14 + 9], 1, "ICMP");
        assert_eq!(sc.extra.rx_errors, 0);
    }

    /// TCP/IPv4 from an outer host to an inner one, `len` bytes of payload.
    fn tcp_in(seq: u32, len: usize) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([198, 51, 100, 1], [203, 0, 113, 1], 64)
            .tcp(5000, 80, seq, 1000)
            .ack(7);
        let mut f = Vec::new();
        b.write(&mut f, &vec![9u8; len]).unwrap();
        f
    }

    #[test]
    fn what_a_packet_flushes_goes_before_the_packet() {
        let cfg = px_gateway::Config { bulk_after: 0, ..px_gateway::Config::default() };
        let mut engine = Engine::new(cfg).unwrap();
        let mut sc = scratch();
        // The inner host's SYN-ACK announces its MSS (without a handshake
        // the engine merges only up to the safe size: docs/gateway-tcp.md).
        let mut syn_ack = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
            .ipv4([203, 0, 113, 1], [198, 51, 100, 1], 64)
            .tcp(80, 5000, 6, 65_535)
            .syn()
            .ack(1)
            .options(&[etherparse::TcpOptionElement::MaximumSegmentSize(8960)])
            .unwrap()
            .write(&mut syn_ack, &[])
            .unwrap();
        handle_batch(&mut engine, &mut sc, Port::Inner, &mut Frames(vec![syn_ack]), &mut never);
        sc.out.iter_mut().for_each(Vec::clear);
        // 0 passes (it starts the flow), 1 and 2 are held and merged, the
        // pure ACK 3 flushes them: the merged segment leaves before it.
        let mut rx = Frames(vec![tcp_in(1, 1460), tcp_in(1461, 1460), tcp_in(2921, 1460), tcp_in(4381, 0)]);
        handle_batch(&mut engine, &mut sc, Port::Outer, &mut rx, &mut never);
        assert_eq!(shape(&sc.out[Port::Inner as usize]), ["F0", "M", "F3"]);
        assert!(sc.out[Port::Outer as usize].is_empty());
        let merged = sc.out[Port::Inner as usize][1].bytes(&rx).unwrap().1;
        assert_eq!(merged.len(), 14 + 40 + 2 * 1460);
    }

    #[test]
    fn an_unreadable_frame_is_counted_not_forwarded() {
        struct Broken(Frames);
        impl RxFrames for Broken {
            fn len(&self) -> usize {
                self.0.len() + 1
            }
            fn get(&self, i: usize) -> Result<RxPacket<'_>, RxError> {
                self.0.get(i)
            }
            fn get_mut(&mut self, i: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
                self.0.get_mut(i)
            }
        }
        let mut engine = Engine::new(px_gateway::Config::default()).unwrap();
        let mut sc = scratch();
        let mut rx = Broken(Frames(vec![udp_out(200, true, 1)]));
        handle_batch(&mut engine, &mut sc, Port::Inner, &mut rx, &mut never);
        assert_eq!(shape(&sc.out[Port::Outer as usize]), ["F0"]);
        assert_eq!(sc.extra.rx_errors, 1);
    }

    #[test]
    fn frames_to_this_host_are_not_bridged_and_receive_errors_count() {
        struct ToHost(Frames);
        impl RxFrames for ToHost {
            fn len(&self) -> usize {
                self.0.len()
            }
            fn get(&self, i: usize) -> Result<RxPacket<'_>, RxError> {
                let p = self.0.get(i)?;
                Ok(RxPacket { pkt_type: if i == 0 { PacketType::Host } else { p.pkt_type }, ..p })
            }
            fn get_mut(&mut self, i: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
                self.0.get_mut(i)
            }
        }
        let mut engine = Engine::new(px_gateway::Config::default()).unwrap();
        let mut sc = scratch();
        let mut rx = ToHost(Frames(vec![udp_out(200, true, 1), udp_out(200, true, 2)]));
        handle_batch(&mut engine, &mut sc, Port::Inner, &mut rx, &mut never);
        assert_eq!(shape(&sc.out[Port::Outer as usize]), ["F1"]);
        assert_eq!(engine.counters().drops(px_gateway::DropReason::ForHost), 1);
        assert_eq!(engine.counters().port(Port::Inner).rx_packets, 2);
        let os = |k| px_io::RecvError::Os(std::io::Error::from(k));
        assert!(counts_as_rx_error(&os(std::io::ErrorKind::InvalidInput)));
        assert!(!counts_as_rx_error(&os(std::io::ErrorKind::Interrupted)));
    }

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
}
