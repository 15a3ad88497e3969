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

use px_gateway::{Engine, Port, RxCsum, RxMeta, Transmit, Verdict};
use px_io::{Checksum, GsoKind, PacketMeta, PacketSocket, Poller, RxBatch, TxBatch, TxFrame};

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
            Out::Made(t) => tx_meta(t.gso),
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

fn rx_meta(m: &PacketMeta) -> RxMeta {
    RxMeta {
        csum: match m.csum {
            Checksum::Partial { .. } => RxCsum::Partial,
            Checksum::Valid => RxCsum::Verified,
            Checksum::Unknown => RxCsum::Unverified,
        },
        gso_size: m.gso.filter(|g| g.kind != GsoKind::UdpL4).map(|g| g.size),
    }
}

fn tx_meta(g: Option<px_gateway::Gso>) -> PacketMeta {
    match g {
        Some(g) => PacketMeta::tcp_gso(g.version == px_wire::IpVersion::V6, g.segment_size, g.csum_start, g.header_len),
        None => PacketMeta::PLAIN,
    }
}

impl Worker {
    /// Runs until `stop` is set, then flushes everything held and returns.
    pub fn run(mut self, stop: Arc<AtomicBool>, shared: Shared) {
        let mut poller = Poller::new();
        let outer_i = poller.add(self.outer.as_fd());
        let inner_i = poller.add(self.inner.as_fd());
        let mut rx = RxBatch::new(self.batch, px_io::MAX_FRAME);
        let mut txb = TxBatch::new(self.batch * 4);
        let mut made: Vec<Transmit> = Vec::with_capacity(self.batch * 8);
        let mut steps: [Vec<Step>; 2] = [Vec::with_capacity(self.batch * 8), Vec::with_capacity(self.batch * 8)];
        let mut extra = WorkerSnapshot::default();
        let mut last_publish = Instant::now();
        loop {
            let now = Instant::now();
            let stopping = stop.load(Ordering::Relaxed);
            if stopping {
                self.engine.flush_all(now);
                self.drain(&mut made, &mut steps);
                self.send_all(&mut txb, &rx, &mut made, &mut steps, &mut extra);
                self.publish(&shared, &mut extra);
                return;
            }
            let wait =
                self.engine.poll_timeout().map_or(IDLE_WAKE, |d| d.saturating_duration_since(now)).min(IDLE_WAKE);
            if poller.wait(Some(wait)).is_err() {
                // EINTR from a signal: loop to look at `stop`.
                continue;
            }
            for (port, idx) in [(Port::Outer, outer_i), (Port::Inner, inner_i)] {
                if !poller.is_ready(idx) {
                    continue;
                }
                let sock = match port {
                    Port::Outer => &self.outer,
                    Port::Inner => &self.inner,
                };
                let n: usize = sock.recv_batch(&mut rx).unwrap_or_default();
                let now = Instant::now();
                for i in 0..n {
                    let (meta, frame) = match rx.get_mut(i) {
                        Ok(x) => x,
                        Err(_) => {
                            extra.rx_errors += 1;
                            continue;
                        }
                    };
                    let v = self.engine.handle_packet(now, port, frame, rx_meta(&meta));
                    self.drain(&mut made, &mut steps);
                    if let Verdict::Forward { gso } = v {
                        let m = match gso {
                            Some(_) => tx_meta(gso),
                            None => PacketMeta::PLAIN,
                        };
                        steps[port.other() as usize].push(Step::Fwd(i, m));
                    }
                }
                self.send_all(&mut txb, &rx, &mut made, &mut steps, &mut extra);
            }
            let now = Instant::now();
            if self.engine.poll_timeout().is_some_and(|d| d <= now) {
                self.engine.handle_timeout(now);
                self.drain(&mut made, &mut steps);
                self.send_all(&mut txb, &rx, &mut made, &mut steps, &mut extra);
            }
            if now.duration_since(last_publish) >= PUBLISH_EVERY {
                last_publish = now;
                self.publish(&shared, &mut extra);
            }
        }
    }

    /// Moves the engine's queued frames into `made`, in order, per port.
    fn drain(&mut self, made: &mut Vec<Transmit>, steps: &mut [Vec<Step>; 2]) {
        while let Some(t) = self.engine.poll_transmit() {
            steps[t.port as usize].push(Step::Made(made.len()));
            made.push(t);
        }
    }

    fn send_all(
        &mut self,
        txb: &mut TxBatch,
        rx: &RxBatch,
        made: &mut Vec<Transmit>,
        steps: &mut [Vec<Step>; 2],
        extra: &mut WorkerSnapshot,
    ) {
        for port in [Port::Inner, Port::Outer] {
            let list = &steps[port as usize];
            if list.is_empty() {
                continue;
            }
            let frames: Vec<Out<'_>> = list
                .iter()
                .filter_map(|s| match *s {
                    Step::Made(k) => Some(Out::Made(&made[k])),
                    Step::Fwd(i, m) => rx.get(i).ok().map(|p| Out::Fwd(m, p.frame)),
                })
                .collect();
            let sock = match port {
                Port::Outer => &self.outer,
                Port::Inner => &self.inner,
            };
            let mut sent = 0;
            let mut tries = 0;
            while sent < frames.len() {
                match sock.send_batch(txb, &frames[sent..]) {
                    Ok(k) => sent += k,
                    Err(px_io::SendError::Refused { sent: k, .. }) => {
                        // A frame the kernel refuses (e.g. too big for the
                        // device) is skipped and counted, not retried.
                        extra.send_errors += 1;
                        sent += k + 1;
                    }
                    Err(_) => {
                        extra.send_errors += 1;
                        sent += 1;
                    }
                }
                if sent < frames.len() {
                    tries += 1;
                    if tries > 1000 {
                        extra.send_errors += (frames.len() - sent) as u64;
                        break;
                    }
                    // Send buffer full: wait for room briefly.
                    std::thread::sleep(Duration::from_micros(20));
                }
            }
            drop(frames);
            steps[port as usize].clear();
        }
        for t in made.drain(..) {
            self.engine.recycle(t.buf);
        }
    }

    fn publish(&mut self, shared: &Shared, extra: &mut WorkerSnapshot) {
        for s in [&self.inner, &self.outer] {
            if let Ok(st) = s.take_stats() {
                extra.socket_drops += st.drops as u64;
            }
        }
        shared.publish(
            self.index,
            WorkerSnapshot {
                counters: self.engine.counters().clone(),
                flows: self.engine.flow_count(),
                held_bytes: self.engine.held_bytes(),
                socket_drops: extra.socket_drops,
                send_errors: extra.send_errors,
                rx_errors: extra.rx_errors,
            },
        );
    }
}
