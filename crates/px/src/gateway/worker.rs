//! One gateway worker: its own engine, one socket per port (each in the
//! port's `PACKET_FANOUT` hash group, so both directions of a flow come to
//! the same worker), a receive batch, and the loop that ties them together.
//!
//! Per batch and not per packet: one `recvmmsg`, one clock read, one
//! `sendmmsg` per port. The engine's frames for a packet go out before the
//! packet itself (the engine's ordering contract).

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_gateway::{Engine, Port, Transmit, Verdict};
use px_io::{PacketMeta, PacketSocket, Poller, RingBatch, RxBatch, TxBatch, TxFrame};

use super::metrics::{Shared, WorkerSnapshot};

/// How often a worker publishes its counters.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// Longest a worker sleeps with nothing to do (to notice a stop request).
const IDLE_WAKE: Duration = Duration::from_millis(100);

pub struct Worker {
    pub index: usize,
    pub engine: Engine,
    pub inner: PacketSocket,
    pub outer: PacketSocket,
    pub batch: usize,
}

/// A frame to send: one the engine made, or a received one forwarded.
enum Out<'a> {
    Made(&'a Transmit),
    Fwd(PacketMeta, &'a [u8]),
}

impl TxFrame for Out<'_> {
    fn meta(&self) -> PacketMeta {
        match self {
            Out::Made(t) => t.meta,
            Out::Fwd(m, _) => *m,
        }
    }
    fn frame(&self) -> &[u8] {
        match self {
            Out::Made(t) => t.frame(),
            Out::Fwd(_, f) => f,
        }
    }
}

/// What to send for one received frame, in order: `made[range]` then,
/// for a forward, the frame itself.
#[derive(Clone, Copy)]
enum Step {
    Made(usize),
    Fwd(usize, PacketMeta),
}

/// The frames of one received batch, whichever way they were received.
trait Received {
    fn len(&self) -> usize;
    fn frame_mut(&mut self, i: usize) -> Option<(PacketMeta, &mut [u8])>;
    fn frame(&self, i: usize) -> Option<&[u8]>;
}

impl Received for RxBatch {
    fn len(&self) -> usize {
        RxBatch::len(self)
    }
    fn frame_mut(&mut self, i: usize) -> Option<(PacketMeta, &mut [u8])> {
        self.get_mut(i).ok()
    }
    fn frame(&self, i: usize) -> Option<&[u8]> {
        self.get(i).ok().map(|p| p.frame)
    }
}

impl Received for RingBatch<'_> {
    fn len(&self) -> usize {
        RingBatch::len(self)
    }
    fn frame_mut(&mut self, i: usize) -> Option<(PacketMeta, &mut [u8])> {
        self.get_mut(i).ok()
    }
    fn frame(&self, i: usize) -> Option<&[u8]> {
        self.get(i).ok().map(|p| p.frame)
    }
}

/// Scratch space reused for every batch (no allocation per packet).
struct Scratch {
    txb: TxBatch,
    made: Vec<Transmit>,
    /// What to send, per port, in order.
    steps: [Vec<Step>; 2],
    extra: WorkerSnapshot,
}

impl Worker {
    /// Runs until `stop` is set, then flushes everything held and returns.
    pub fn run(self, stop: Arc<AtomicBool>, shared: Shared) {
        let Worker { index, mut engine, mut inner, mut outer, batch } = self;
        let mut poller = Poller::new();
        let outer_i = poller.add(outer.as_fd());
        let inner_i = poller.add(inner.as_fd());
        // Only sockets without a ring receive into this.
        let mut rx = RxBatch::new(if inner.has_ring() && outer.has_ring() { 1 } else { batch }, px_io::MAX_FRAME);
        let mut sc = Scratch {
            txb: TxBatch::new(batch * 4),
            made: Vec::with_capacity(batch * 8),
            steps: [Vec::with_capacity(batch * 8), Vec::with_capacity(batch * 8)],
            extra: WorkerSnapshot::default(),
        };
        let mut last_publish = Instant::now();
        loop {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) {
                engine.flush_all(now);
                drain(&mut engine, &mut sc);
                send_engine_frames(&mut engine, &mut sc, &inner, &outer, &rx);
                publish(index, &engine, &shared, &mut sc.extra, &inner, &outer);
                return;
            }
            let wait = engine.poll_timeout().map_or(IDLE_WAKE, |d| d.saturating_duration_since(now)).min(IDLE_WAKE);
            if poller.wait(Some(wait)).is_err() {
                // EINTR from a signal: loop to look at `stop`.
                continue;
            }
            for (port, idx) in [(Port::Outer, outer_i), (Port::Inner, inner_i)] {
                if !poller.is_ready(idx) {
                    continue;
                }
                let (rx_sock, tx_sock) = match port {
                    Port::Outer => (&mut outer, &inner),
                    Port::Inner => (&mut inner, &outer),
                };
                if let Some(mut ring) = rx_sock.recv_ring_batch(batch) {
                    handle_batch(&mut engine, &mut sc, port, &mut ring);
                    // Forwards borrow the ring's slots: send them (and the
                    // engine's frames for the other port) before releasing it.
                    send_port(&mut sc, port.other(), tx_sock, &ring);
                    drop(ring);
                } else {
                    let n: usize = rx_sock.recv_batch(&mut rx).unwrap_or_default();
                    if n > 0 {
                        handle_batch(&mut engine, &mut sc, port, &mut rx);
                        send_port(&mut sc, port.other(), tx_sock, &rx);
                    }
                }
                // Frames back out of the receiving port (ICMP errors) are all
                // the engine's own.
                let back = match port {
                    Port::Outer => &outer,
                    Port::Inner => &inner,
                };
                send_port(&mut sc, port, back, &rx);
                recycle(&mut engine, &mut sc);
            }
            let now = Instant::now();
            if engine.poll_timeout().is_some_and(|d| d <= now) {
                engine.handle_timeout(now);
                drain(&mut engine, &mut sc);
                send_engine_frames(&mut engine, &mut sc, &inner, &outer, &rx);
            }
            if now.duration_since(last_publish) >= PUBLISH_EVERY {
                last_publish = now;
                publish(index, &engine, &shared, &mut sc.extra, &inner, &outer);
            }
        }
    }
}

/// Runs the engine over a received batch, recording what to send.
fn handle_batch(engine: &mut Engine, sc: &mut Scratch, port: Port, frames: &mut dyn Received) {
    let now = Instant::now();
    for i in 0..frames.len() {
        let Some((meta, frame)) = frames.frame_mut(i) else {
            sc.extra.rx_errors += 1;
            continue;
        };
        let v = engine.handle_packet(now, port, frame, meta);
        drain(engine, sc);
        if let Verdict::Forward { meta } = v {
            sc.steps[port.other() as usize].push(Step::Fwd(i, meta));
        }
    }
}

/// Moves the engine's queued frames into `made`, in order, per port.
fn drain(engine: &mut Engine, sc: &mut Scratch) {
    while let Some(t) = engine.poll_transmit() {
        sc.steps[t.port as usize].push(Step::Made(sc.made.len()));
        sc.made.push(t);
    }
}

/// Sends frames that are all the engine's own (timeouts, shutdown).
fn send_engine_frames(engine: &mut Engine, sc: &mut Scratch, inner: &PacketSocket, outer: &PacketSocket, rx: &RxBatch) {
    send_port(sc, Port::Inner, inner, rx);
    send_port(sc, Port::Outer, outer, rx);
    recycle(engine, sc);
}

fn recycle(engine: &mut Engine, sc: &mut Scratch) {
    if sc.steps.iter().all(Vec::is_empty) {
        for t in sc.made.drain(..) {
            engine.recycle(t.buf);
        }
    }
}

/// Sends everything recorded for `port`, in order, with as few `sendmmsg`
/// calls as the batch allows.
fn send_port(sc: &mut Scratch, port: Port, sock: &PacketSocket, rx: &dyn Received) {
    let list = &sc.steps[port as usize];
    if list.is_empty() {
        return;
    }
    let frames: Vec<Out<'_>> = list
        .iter()
        .filter_map(|s| match *s {
            Step::Made(k) => Some(Out::Made(&sc.made[k])),
            Step::Fwd(i, m) => rx.frame(i).map(|f| Out::Fwd(m, f)),
        })
        .collect();
    let mut sent = 0;
    let mut tries = 0;
    while sent < frames.len() {
        match sock.send_batch(&mut sc.txb, &frames[sent..]) {
            Ok(k) => sent += k,
            Err(px_io::SendError::Refused { sent: k, .. }) => {
                // A frame the kernel refuses (e.g. too big for the device)
                // is skipped and counted, not retried.
                sc.extra.send_errors += 1;
                sent += k + 1;
            }
            Err(_) => {
                sc.extra.send_errors += 1;
                sent += 1;
            }
        }
        if sent < frames.len() {
            tries += 1;
            if tries > 1000 {
                sc.extra.send_errors += (frames.len() - sent) as u64;
                break;
            }
            // Send buffer full: wait for room briefly.
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    drop(frames);
    sc.steps[port as usize].clear();
}

fn publish(
    index: usize,
    engine: &Engine,
    shared: &Shared,
    extra: &mut WorkerSnapshot,
    inner: &PacketSocket,
    outer: &PacketSocket,
) {
    for s in [inner, outer] {
        if let Ok(st) = s.take_stats() {
            extra.socket_drops += st.drops as u64;
        }
    }
    shared.publish(
        index,
        WorkerSnapshot {
            counters: engine.counters().clone(),
            flows: engine.flow_count(),
            held_bytes: engine.held_bytes(),
            socket_drops: extra.socket_drops,
            send_errors: extra.send_errors,
            rx_errors: extra.rx_errors,
        },
    );
}
