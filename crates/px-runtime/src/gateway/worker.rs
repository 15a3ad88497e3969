//! One gateway worker: its own engine, its two ports (a [`Ports`] of the
//! datapath seam: packet sockets in the ports' fan-out groups, or DPDK
//! queues under symmetric RSS, so both directions of a flow come to the
//! same worker), and the loop that ties them together.
//!
//! Per batch and not per packet: one receive, one clock read, as few sends
//! per port as the batch allows. The engine's frames for a packet go out
//! before the packet itself (the engine's ordering contract): each port has
//! one ordered list of [`Frame`]s, engine-made or forwarded, kept in the
//! worker's scratch and handed to the ports without a copy and without
//! allocating.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use px_gateway::{Engine, Port};
use px_io::{PacketType, RxFrames};

use super::capture::{Direction, Tap};
use super::datapath::{Batch, Frame, Ports, Sink};
use super::metrics::{Shared, WorkerSnapshot};

/// How often a worker publishes its counters.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// Longest a worker sleeps with nothing to do (to notice a stop request).
const IDLE_WAKE: Duration = Duration::from_millis(100);
/// Engine buffers a worker holds for sending before it sends them, in the
/// middle of a receive batch if need be (issue 27 item 9): what a whole
/// batch made the engine queue (each input's frames are bounded by the
/// input's size, `px_gateway`'s buffer classes) never waits all at once.
/// A batch holds at most this plus what its last input made.
pub(crate) const MAX_QUEUED_BYTES: usize = 4 << 20;

pub struct Worker<P> {
    pub index: usize,
    pub engine: Engine,
    pub ports: P,
    /// Frames per receive batch (the lists' starting capacity).
    pub batch: usize,
    pub live: Arc<LiveConfig>,
    /// The capture's end, if one runs.
    pub tap: Option<Tap>,
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

/// Scratch space reused for every batch (no allocation per packet).
struct Scratch {
    /// What to send, per port (indexed by `Port as usize`), in order.
    out: [Vec<Frame>; 2],
    /// Buffer bytes of the engine's frames in `out`, per port.
    queued_bytes: [usize; 2],
    extra: WorkerSnapshot,
    tap: Option<Tap>,
}

impl<P: Ports> Worker<P> {
    /// Runs until `stop` is set, then flushes everything held and returns.
    pub fn run(self, stop: Arc<AtomicBool>, shared: Shared) {
        let Worker { index, mut engine, mut ports, batch, live, tap } = self;
        let mut generation = live.generation();
        let mut sc = Scratch {
            out: [Vec::with_capacity(batch * 8), Vec::with_capacity(batch * 8)],
            queued_bytes: [0; 2],
            extra: WorkerSnapshot::default(),
            tap,
        };
        let (mut last_publish, mut last_loop) = (Instant::now(), Instant::now());
        let mut last_beat = last_publish;
        let mut first_moved: Option<Instant> = None;
        loop {
            let now = Instant::now();
            sc.extra.loop_ns += now.duration_since(last_loop).as_nanos() as u64;
            last_loop = now;
            if now.duration_since(last_beat) >= super::metrics::BEAT_EVERY {
                last_beat = now;
                shared.beat(index);
            }
            if stop.load(Ordering::Relaxed) {
                engine.flush_all(now);
                send_engine_frames(&mut engine, &mut sc, &mut ports);
                publish(index, &engine, &shared, &mut sc.extra, &mut ports);
                return;
            }
            if live.generation() != generation {
                // A reload, between two batches: the engine sends what it
                // holds (queued here, in order) and takes the new values.
                generation = live.generation();
                if engine.set_config(now, live.get()).is_ok() {
                    send_engine_frames(&mut engine, &mut sc, &mut ports);
                    publish(index, &engine, &shared, &mut sc.extra, &mut ports);
                }
            }
            let wait = engine.poll_timeout().map_or(IDLE_WAKE, |d| d.saturating_duration_since(now)).min(IDLE_WAKE);
            if !ports.wait(wait) {
                continue;
            }
            if let Some(t) = &mut sc.tap {
                t.tick();
            }
            let round = Instant::now();
            let (quiet, moved) = receive_round(&mut engine, &mut sc, &mut ports);
            ports.reclaim(&mut |b| engine.recycle(b));
            let now = Instant::now();
            if moved {
                sc.extra.busy_ns += now.duration_since(round).as_nanos() as u64;
                let first = *first_moved.get_or_insert(round);
                sc.extra.active_ns = now.duration_since(first).as_nanos() as u64;
            }
            if engine.poll_timeout().is_some_and(|d| d <= now) {
                engine.handle_timeout(now);
                send_engine_frames(&mut engine, &mut sc, &mut ports);
            }
            // Everything sent and nothing waiting, as a last look confirms:
            // flows that qualified may go to the kernel without a byte of
            // theirs behind in user space (`px_gateway`'s engine/fast_path.rs).
            if quiet && engine.fast_path_pending() {
                // What those flows hold goes first, then the install.
                engine.fast_path_prepare(now);
                send_engine_frames(&mut engine, &mut sc, &mut ports);
                if ports.idle() {
                    engine.fast_path_sync(now);
                }
            }
            if now.duration_since(last_publish) >= PUBLISH_EVERY {
                last_publish = now;
                publish(index, &engine, &shared, &mut sc.extra, &mut ports);
            }
        }
    }
}

/// One batch from each receive queue that has frames, each handled and
/// sent; returns whether every queue was read empty (each batch shorter
/// than the most one receive takes), and whether any frame came.
fn receive_round<P: Ports>(engine: &mut Engine, sc: &mut Scratch, ports: &mut P) -> (bool, bool) {
    let (mut quiet, mut moved) = (true, false);
    for q in 0..ports.queues() {
        let port = match ports.recv(q) {
            Ok(Some(mut b)) => {
                quiet &= !b.is_full();
                moved |= !b.is_empty();
                handle_batch(engine, sc, &mut b);
                // Forwards borrow the batch's slots: send them (and the
                // engine's frames for the other port) before releasing it.
                send_port(engine, sc, b.port().other(), &mut b);
                b.port()
            }
            Ok(None) => continue,
            Err(e) => {
                sc.extra.rx_errors += counts_as_rx_error(&e) as u64;
                continue;
            }
        };
        // Frames back out of the receiving port (ICMP errors) are all the
        // engine's own.
        send_port(engine, sc, port, ports);
    }
    (quiet, moved)
}

/// Runs the engine over a received batch, recording what to send; once
/// the engine's frames waiting for the other port pass
/// [`MAX_QUEUED_BYTES`], that port's list is sent (in order, forwards of
/// earlier slots included) before the batch goes on.
fn handle_batch<B: Batch + ?Sized>(engine: &mut Engine, sc: &mut Scratch, frames: &mut B) {
    let now = Instant::now();
    let port = frames.port();
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
            send_port(engine, sc, port.other(), frames);
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

/// Sends what the engine queued, all of it its own (timeouts, a reload,
/// shutdown).
fn send_engine_frames<P: Ports>(engine: &mut Engine, sc: &mut Scratch, ports: &mut P) {
    drain(engine, sc);
    send_port(engine, sc, Port::Inner, ports);
    send_port(engine, sc, Port::Outer, ports);
}

/// Sends everything recorded for `port`, in order, through `sink` (the
/// capture and the wire counters see each frame first), then gives the
/// engine's buffers back.
fn send_port<S: Sink + ?Sized>(engine: &mut Engine, sc: &mut Scratch, port: Port, sink: &mut S) {
    let list = &mut sc.out[port as usize];
    if list.is_empty() {
        return;
    }
    let rx = sink.received();
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
    sc.extra.send_errors += sink.send(port, list);
    for f in list.drain(..) {
        if let Frame::Made(t) = f {
            engine.recycle(t.buf);
        }
    }
    sc.queued_bytes[port as usize] = 0;
}

fn publish<P: Ports>(index: usize, engine: &Engine, shared: &Shared, extra: &mut WorkerSnapshot, ports: &mut P) {
    extra.socket_drops += ports.take_drops();
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
            kernel_wire: Default::default(),
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
            busy_ns: extra.busy_ns,
            loop_ns: extra.loop_ns,
            active_ns: extra.active_ns,
        },
    );
}

#[cfg(test)]
mod tests {
    use etherparse::{IpHeaders, IpNumber, Ipv4Header, PacketBuilder};
    use px_io::{PacketMeta, RxError, RxPacket};

    use super::*;

    /// A batch received on `port` in plain buffers; what it is asked to
    /// send is checked and recorded, not sent.
    struct Frames {
        port: Port,
        frames: Vec<Vec<u8>>,
        /// One more frame than `frames`, which cannot be read.
        unreadable_tail: bool,
        /// The slot of a frame addressed to this host.
        to_host: Option<usize>,
        /// Per send: the frames, and the engine buffer bytes among them.
        sends: Vec<(usize, usize)>,
    }

    fn frames(port: Port, frames: Vec<Vec<u8>>) -> Frames {
        Frames { port, frames, unreadable_tail: false, to_host: None, sends: Vec::new() }
    }

    impl RxFrames for Frames {
        fn len(&self) -> usize {
            self.frames.len() + self.unreadable_tail as usize
        }
        fn get(&self, i: usize) -> Result<RxPacket<'_>, RxError> {
            let frame = self.frames.get(i).ok_or(RxError::Index(i))?;
            let pkt_type = if self.to_host == Some(i) { PacketType::Host } else { PacketType::OtherHost };
            Ok(RxPacket { meta: PacketMeta::PLAIN, frame, pkt_type })
        }
        fn get_mut(&mut self, i: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
            let frame = self.frames.get_mut(i).ok_or(RxError::Index(i))?;
            Ok((PacketMeta::PLAIN, frame))
        }
    }

    impl Sink for Frames {
        fn received(&self) -> Option<&dyn RxFrames> {
            Some(self)
        }
        fn send(&mut self, port: Port, frames: &mut [Frame]) -> u64 {
            assert_eq!(port, self.port.other());
            let made = frames.iter().map(|f| if let Frame::Made(t) = f { t.buf.len() } else { 0 }).sum();
            self.sends.push((frames.len(), made));
            0
        }
    }

    impl Batch for Frames {
        fn port(&self) -> Port {
            self.port
        }
        fn is_full(&self) -> bool {
            false
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
        Scratch { out: [Vec::new(), Vec::new()], queued_bytes: [0; 2], extra: WorkerSnapshot::default(), tap: None }
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
        let mut rx = frames(Port::Inner, (0..600).map(|i| udp_out(9000, false, i as u8)).collect());
        handle_batch(&mut engine, &mut sc, &mut rx);
        assert!(!rx.sends.is_empty(), "never sent ahead");
        let most = rx.sends.iter().map(|s| s.1).max().unwrap();
        assert!(most <= MAX_QUEUED_BYTES + 7 * 2048, "held {most} bytes");
        assert!(sc.queued_bytes[Port::Outer as usize] <= MAX_QUEUED_BYTES, "what is left is under the bound");
        let sent: usize = rx.sends.iter().map(|s| s.0).sum();
        assert_eq!(sent + sc.out[Port::Outer as usize].len(), 600 * 7, "every fragment, once");
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
        let mut rx = frames(
            Port::Inner,
            vec![udp_out(3000, false, 1), udp_out(200, true, 2), udp_out(3000, true, 3), udp_out(100, true, 4)],
        );
        handle_batch(&mut engine, &mut sc, &mut rx);
        assert!(rx.sends.is_empty(), "sent ahead in a small batch");
        assert_eq!(shape(&sc.out[Port::Outer as usize]), ["M", "M", "M", "F1", "F3"]);
        assert_eq!(shape(&sc.out[Port::Inner as usize]), ["M"]);
        // What would be sent: the fragments fit the outer MTU, the forwards
        // are the received frames themselves.
        let sent: Vec<_> = sc.out[Port::Outer as usize].iter().map(|f| f.bytes(Some(&rx)).unwrap().1.len()).collect();
        assert!(sent[..3].iter().all(|&n| n <= 1514), "{sent:?}");
        assert_eq!(&sent[3..], [214, 114]);
        let icmp = sc.out[Port::Inner as usize][0].bytes(Some(&rx)).unwrap().1;
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
        handle_batch(&mut engine, &mut sc, &mut frames(Port::Inner, vec![syn_ack]));
        sc.out.iter_mut().for_each(Vec::clear);
        // 0 passes (it starts the flow), 1 and 2 are held and merged, the
        // pure ACK 3 flushes them: the merged segment leaves before it.
        let mut rx =
            frames(Port::Outer, vec![tcp_in(1, 1460), tcp_in(1461, 1460), tcp_in(2921, 1460), tcp_in(4381, 0)]);
        handle_batch(&mut engine, &mut sc, &mut rx);
        assert!(rx.sends.is_empty(), "sent ahead in a small batch");
        assert_eq!(shape(&sc.out[Port::Inner as usize]), ["F0", "M", "F3"]);
        assert!(sc.out[Port::Outer as usize].is_empty());
        let merged = sc.out[Port::Inner as usize][1].bytes(Some(&rx)).unwrap().1;
        assert_eq!(merged.len(), 14 + 40 + 2 * 1460);
    }

    #[test]
    fn an_unreadable_frame_is_counted_not_forwarded() {
        let mut engine = Engine::new(px_gateway::Config::default()).unwrap();
        let mut sc = scratch();
        let mut rx = Frames { unreadable_tail: true, ..frames(Port::Inner, vec![udp_out(200, true, 1)]) };
        handle_batch(&mut engine, &mut sc, &mut rx);
        assert_eq!(shape(&sc.out[Port::Outer as usize]), ["F0"]);
        assert_eq!(sc.extra.rx_errors, 1);
    }

    #[test]
    fn frames_to_this_host_are_not_bridged_and_receive_errors_count() {
        let mut engine = Engine::new(px_gateway::Config::default()).unwrap();
        let mut sc = scratch();
        let mut rx =
            Frames { to_host: Some(0), ..frames(Port::Inner, vec![udp_out(200, true, 1), udp_out(200, true, 2)]) };
        handle_batch(&mut engine, &mut sc, &mut rx);
        assert_eq!(shape(&sc.out[Port::Outer as usize]), ["F1"]);
        assert_eq!(engine.counters().drops(px_gateway::DropReason::ForHost), 1);
        assert_eq!(engine.counters().port(Port::Inner).rx_packets, 2);
        let os = |k| px_io::RecvError::Os(std::io::Error::from(k));
        assert!(counts_as_rx_error(&os(std::io::ErrorKind::InvalidInput)));
        assert!(!counts_as_rx_error(&os(std::io::ErrorKind::Interrupted)));
    }
}
