//! The engine's side of the kernel fast path (`crate::fast_path`): when a
//! flow goes to the kernel, and how it comes back.
//!
//! **Going.** Every TCP segment a flow carries in user space counts toward
//! [`Config::fast_path_after`](crate::Config::fast_path_after). Once a flow
//! qualifies ([`Engine::fast_path_plan`]: handshake seen both ways with both
//! MSSs, established, not signed, not AccECN, no FIN or RST, nothing
//! held, its expected sequence known, not back from the kernel within its
//! backoff), it waits in a list, and goes at the next quiet moment the I/O
//! layer reports ([`Engine::fast_path_sync`]: every socket read, nothing
//! left to send), with the segment size each way that the engine itself
//! would cut to (`segment_limit`).
//!
//! **Ordering at the handover.** Nothing is held when a flow goes (it is
//! a condition), and the I/O layer calls `fast_path_sync` only after
//! sending everything and finding its sockets empty, so no byte of the
//! flow waits in user space when the kernel starts carrying it. A packet
//! that arrives in the microseconds between that last empty read and the
//! map update is read by user space later, possibly after the kernel
//! forwarded newer ones: it is counted (`fast_path.backlog`), and takes
//! the flow back.
//!
//! **Coming back.** The datapath hands a direction back on anything it
//! does not handle (flags, options, a lone segment too big for the egress,
//! ...): that packet and all later ones of the direction go to user space
//! in order. The first packet of an offloaded flow the engine sees in
//! user space therefore takes the whole flow back ([`Engine::reclaim`]):
//! both directions are withdrawn, the expected sequence and the ICMP
//! windows catch up with what the kernel carried, and the packet is
//! handled as any other. The engine also takes flows back itself: on a
//! reload, when it learns a smaller path MTU toward the flow's
//! destination, before an ICMP error quoting the flow is checked, and
//! when the flow leaves the table. A flow that came back waits a backoff
//! before going again, doubled for each quick return (`fast_path.rs`).
//!
//! **Off-path senders** cannot steer this: a segment from outside that
//! lies outside what the inner host allows (`ReceiveWindow::admits`, the
//! same rule as the engine's) is forwarded by the datapath unchanged (as
//! the engine forwards a `Track::Foreign` segment) without handing the
//! flow back; the datapath keeps the inner host's window up to date from
//! its packets, and a segment that arrives on the other port than its
//! direction's is not the flow's. Nothing from outside makes a flow
//! qualify that would not without it (the conditions are the conntrack's,
//! which believes from outside only what an end host would).
//!
//! **Catching up.** When a direction comes back, the engine adopts the
//! datapath's view: the furthest sequence if it moved at all (by the
//! datapath's 64-bit count, so a direction that carried more than 2 GiB,
//! where a 32-bit comparison wraps, still catches up), the inner host's
//! window (the datapath saw every packet of the inner host since the
//! install), and the ICMP windows.

use std::time::Instant;

use px_wire::tcp::flags;

use super::Engine;
use crate::fast_path::{Data, Direction, FlowFacts, FlowProgress, InstallError, Offload, ReturnReason};
use crate::port::Port;
use crate::segment::{Layout, Seg};

/// Whether a flow that holds data may qualify: while it waits for the
/// quiet moment (its hold is sent then), not at the install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    Allowed,
    Refused,
}

/// Why the engine took a flow back from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reclaim {
    /// A packet of it reached user space.
    Packet,
    /// A path MTU toward it changed (its segment size is stale).
    PathMtu,
    /// A reload, or the engine stops.
    Config,
    /// It leaves the flow table.
    Removed,
}

impl Engine {
    /// Gives the engine a datapath to offload flows to (`None`: none, the
    /// default). Flows it carried before are taken back first.
    pub fn set_datapath(&mut self, d: Option<Box<dyn crate::fast_path::Datapath>>, now: Instant) {
        self.reclaim_all(now, Reclaim::Config);
        self.datapath = d;
    }

    /// Whether a datapath is attached and the configuration lets flows go
    /// to it.
    #[inline]
    pub(crate) fn fast_path_on(&self) -> bool {
        self.datapath.is_some() && self.cfg.fast_path
    }

    /// Flows carried by the datapath now.
    pub fn flows_in_kernel(&self) -> usize {
        self.in_kernel
    }

    /// Before a TCP segment of flow `idx` that arrived on `from` is
    /// handled in user space. If the kernel carries that direction: a
    /// segment it handed back takes the direction back first (the whole
    /// flow, for SYN, FIN, RST or URG), and is handled as any other
    /// (`false`); a segment it did not hand back (read from a socket queue
    /// filled before the install, or one the kernel passes on as a router
    /// would: far from the stream and too big to forward whole) is to be
    /// forwarded as a router would, the direction staying in the kernel
    /// (`true`), unless it is a control segment.
    #[inline]
    pub(crate) fn before_user_space(&mut self, idx: u32, seg: &Seg, from: Port, now: Instant) -> bool {
        let Some(f) = self.flows.get(idx).filter(|f| f.fast.in_kernel()) else { return false };
        match f.fast.dir(from).copied() {
            Some(dir) => self.kernel_still_carries(idx, &dir, seg, now),
            None => {
                // This direction is the engine's; the other is the kernel's
                // until the connection's state changes.
                if seg.flags & (flags::SYN | flags::FIN | flags::RST | flags::URG) != 0 {
                    if let Some(f) = self.flows.get_mut(idx) {
                        f.stats.hand_back("flags");
                    }
                    self.reclaim(idx, now, Reclaim::Packet);
                }
                false
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn kernel_still_carries(&mut self, idx: u32, dir: &Direction, seg: &Seg, now: Instant) -> bool {
        let control = seg.flags & (flags::SYN | flags::FIN | flags::RST | flags::URG) != 0;
        let key = self.flows.get(idx).map(|f| f.key);
        let progress = key.and_then(|k| self.datapath.as_ref()?.progress(&k)).and_then(|p| p.dirs[dir.from as usize]);
        let returned = progress.and_then(|p| p.returned);
        if progress.is_some() && returned.is_none() && !control {
            self.counters.fast_path.passed_on += 1;
            return true;
        }
        match returned {
            Some(r) => self.counters.fast_path.returned[r as usize] += 1,
            // The kernel still carried it: a control segment read from a
            // socket queue filled before the install.
            None => self.counters.fast_path.backlog += 1,
        }
        if let Some(f) = self.flows.get_mut(idx) {
            f.stats.hand_back(returned.map_or("backlog", ReturnReason::name));
        }
        if control || returned == Some(ReturnReason::Flags) {
            self.reclaim(idx, now, Reclaim::Packet);
        } else {
            self.reclaim_direction(idx, dir.from, now, returned == Some(ReturnReason::Lone));
        }
        false
    }

    /// A TCP segment of flow `idx` that arrived on `from`, handled in user
    /// space, and that connection tracking took as the connection's
    /// (`Track::Plain`: nothing off-path counts): counts it toward the
    /// offload, and queues the flow for the next quiet moment once a
    /// direction of it qualifies.
    #[inline]
    pub(crate) fn count_for_fast_path(&mut self, idx: u32, seg: &Seg, from: Port, gso: Option<u16>, now: Instant) {
        if !self.fast_path_on() {
            return;
        }
        let len = seg.payload_len();
        // One segment too big for the egress: the kernel would hand it back.
        let lone = from == Port::Inner
            && len > 0
            && gso.is_none_or(|g| g == 0)
            && len > self.segment_limit(now, Port::Outer, seg, Some(idx));
        let Some(f) = self.flows.get_mut(idx) else { return };
        if len > 0 {
            let unit = gso.filter(|g| *g > 0).map_or(len, |g| g as usize);
            let segments = len.div_ceil(unit.max(1)) as u32;
            f.fast.on_data(&Data { from, payload: len, segments, layout: Layout::of(seg), lone });
        }
        if !f.fast.due(self.cfg.fast_path_after) {
            return;
        }
        if self.fast_path_plan(idx, now, Held::Allowed).is_some()
            && let Some(f) = self.flows.get_mut(idx)
        {
            f.fast.on_queued();
            self.fast_path_queue.push((idx, f.id));
        }
    }

    /// What the kernel would be asked to take of flow `idx` now
    /// ([`FastState::plan`](crate::fast_path::FastState::plan), with the
    /// engine's segment sizes).
    pub(crate) fn fast_path_plan(&self, idx: u32, now: Instant, held: Held) -> Option<Offload> {
        self.fast_path_plan_or_why(idx, now, held).ok()
    }

    /// [`Engine::fast_path_plan`], or why nothing of the flow qualifies
    /// (what `px status` says of a flow the kernel does not carry).
    pub(crate) fn fast_path_plan_or_why(&self, idx: u32, now: Instant, held: Held) -> Result<Offload, &'static str> {
        if !self.fast_path_on() {
            return Err(if self.datapath.is_none() { "no kernel fast path" } else { "the fast path is off" });
        }
        let f = self.flows.get(idx).ok_or("gone")?;
        // What the engine holds is inbound data: only the inbound
        // direction waits for it to be sent.
        let holds = held == Held::Refused && f.merge.held.is_some();
        let facts = FlowFacts { key: &f.key, conn: &f.conn, after: self.cfg.fast_path_after, holds };
        f.fast.plan(now, &facts, |from, layout| self.kernel_segment(idx, from, layout, now))
    }

    /// The segment size the engine cuts the direction arriving on `from`
    /// of flow `idx` to (its `segment_limit` toward the other port), for
    /// that direction's header layout and destination.
    fn kernel_segment(&self, idx: u32, from: Port, layout: &Layout, now: Instant) -> usize {
        let Some(f) = self.flows.get(idx) else { return 0 };
        self.segment_limit_for(now, from.other(), layout, f.key.destination(from).ip(), Some(idx))
    }

    /// Whether flows wait for [`Engine::fast_path_sync`].
    pub fn fast_path_pending(&self) -> bool {
        !self.fast_path_queue.is_empty()
    }

    /// The first half of a quiet moment: what the flows waiting to go to
    /// the kernel hold is sent (queued for [`Engine::poll_transmit`],
    /// counted as [`FlushReason::FastPath`](crate::FlushReason::FastPath)).
    /// The I/O layer sends it, then calls [`Engine::fast_path_sync`] if its
    /// sockets are still empty.
    pub fn fast_path_prepare(&mut self, now: Instant) {
        for i in 0..self.fast_path_queue.len() {
            let (idx, id) = self.fast_path_queue[i];
            let holds = self.flows.get(idx).is_some_and(|f| f.id == id && f.merge.held.is_some());
            // Only a flow whose inbound direction is about to move.
            if holds && self.fast_path_plan(idx, now, Held::Allowed).is_some_and(|p| p.inbound.is_some()) {
                self.flush_flow(idx, crate::FlushReason::FastPath, now);
            }
        }
    }

    /// A quiet moment (the I/O layer sent everything, the frames of
    /// [`Engine::fast_path_prepare`] included, and its sockets were
    /// empty): the flows that qualified since the last one go to the
    /// kernel, if they still qualify and hold nothing.
    pub fn fast_path_sync(&mut self, now: Instant) {
        if self.fast_path_queue.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.fast_path_queue);
        for &(idx, id) in &pending {
            let Some(f) = self.flows.get_mut(idx).filter(|f| f.id == id) else { continue };
            f.fast.on_dequeued();
            let Some(plan) = self.fast_path_plan(idx, now, Held::Refused) else { continue };
            let Some(d) = self.datapath.as_mut() else { break };
            match d.install(&plan) {
                Ok(()) => {
                    let Some(f) = self.flows.get_mut(idx) else { continue };
                    if f.fast.on_installed(&plan, now) {
                        self.in_kernel += 1;
                    }
                    self.counters.fast_path.installed += 1;
                }
                Err(InstallError::Full) => self.counters.fast_path.table_full += 1,
                Err(InstallError::Failed(_)) => self.counters.fast_path.install_failed += 1,
            }
        }
        let mut pending = pending;
        pending.clear();
        self.fast_path_queue = pending;
    }

    /// Withdraws the direction arriving on `from` of flow `idx`; returns
    /// what the kernel did with it, and counts that.
    fn withdraw_direction(&mut self, idx: u32, from: Port) -> Option<crate::fast_path::Progress> {
        let key = self.flows.get(idx).filter(|f| f.fast.dir(from).is_some())?.key;
        let fp = self.datapath.as_mut().and_then(|d| d.withdraw(&key, from))?;
        let p = fp.dirs[from as usize];
        if let Some(p) = &p {
            let c = &mut self.counters.fast_path;
            c.kernel_packets += p.packets;
            c.kernel_segs_in += p.segs_in;
            c.kernel_segs_out += p.segs_out;
            c.kernel_bytes += p.bytes;
            if from == Port::Outer {
                c.kernel_full_out += p.full_out;
                c.kernel_data_in += p.data_out;
            }
        }
        if let Some(f) = self.flows.get_mut(idx) {
            catch_up(&mut f.conn, &fp);
            f.stats.kernel_bytes[from as usize] += p.map_or(0, |p| p.bytes);
        }
        p
    }

    /// Takes back the direction arriving on `from` of flow `idx`, the
    /// other staying in the kernel (`lone`: it came back for a lone
    /// segment too big for the egress).
    fn reclaim_direction(&mut self, idx: u32, from: Port, now: Instant, lone: bool) {
        self.withdraw_direction(idx, from);
        let Some(f) = self.flows.get_mut(idx) else { return };
        f.last_seen = now;
        if !f.fast.on_returned(from, now, lone) {
            self.in_kernel = self.in_kernel.saturating_sub(1);
        }
    }

    /// Takes flow `idx` back from the kernel: every direction withdrawn,
    /// the flow's expected sequence and ICMP windows brought up to what
    /// the kernel carried.
    #[cold]
    #[inline(never)]
    pub(crate) fn reclaim(&mut self, idx: u32, now: Instant, why: Reclaim) {
        if !self.flows.get(idx).is_some_and(|f| f.fast.in_kernel()) {
            return;
        }
        let inb = self.withdraw_direction(idx, Port::Outer);
        let outb = self.withdraw_direction(idx, Port::Inner);
        self.in_kernel = self.in_kernel.saturating_sub(1);
        let c = &mut self.counters.fast_path;
        let named = match why {
            // Counted (and named) by the caller, from the segment's direction.
            Reclaim::Packet => None,
            Reclaim::PathMtu => {
                c.reclaimed_pmtu += 1;
                Some("path_mtu")
            }
            Reclaim::Config => {
                c.reclaimed_config += 1;
                Some("config")
            }
            Reclaim::Removed => {
                c.reclaimed_removed += 1;
                Some("removed")
            }
        };
        let lone = why == Reclaim::Packet
            && [inb, outb].iter().flatten().any(|p| p.returned == Some(ReturnReason::Lone))
            && ![inb, outb].iter().flatten().any(|p| p.returned.is_some_and(|r| r != ReturnReason::Lone));
        let Some(f) = self.flows.get_mut(idx) else { return };
        f.last_seen = now;
        f.fast.on_reclaimed(now, lone);
        if let Some(why) = named {
            f.stats.hand_back(why);
        }
    }

    /// Brings flow `idx`'s expected sequence and ICMP windows up to what
    /// the kernel carried, leaving the flow there.
    pub(crate) fn catch_up_with_kernel(&mut self, idx: u32) {
        let Some(key) = self.flows.get(idx).filter(|f| f.fast.in_kernel()).map(|f| f.key) else { return };
        let Some(fp) = self.datapath.as_ref().and_then(|d| d.progress(&key)) else { return };
        self.counters.fast_path.icmp_catch_ups += 1;
        if let Some(f) = self.flows.get_mut(idx) {
            catch_up(&mut f.conn, &fp);
        }
    }

    /// A segment from outside of flow `idx` lay beyond what the engine
    /// last knew the inner host to allow: if the kernel carries the inner
    /// host's packets (so the engine did not see its latest ACKs), the
    /// window is read from the kernel, at most once per
    /// [`WINDOW_READ_EVERY`](crate::fast_path::WINDOW_READ_EVERY). Whether it was read.
    #[cold]
    #[inline(never)]
    pub(crate) fn window_from_kernel(&mut self, idx: u32, now: Instant) -> bool {
        let Some(f) = self.flows.get(idx).filter(|f| f.fast.window_read_due(now)) else { return false };
        let key = f.key;
        let Some(fp) = self.datapath.as_ref().and_then(|d| d.progress(&key)) else { return false };
        let Some(f) = self.flows.get_mut(idx) else { return false };
        f.fast.on_window_read(now);
        f.conn.receiver = Some(fp.receiver);
        self.counters.fast_path.window_reads += 1;
        true
    }

    /// Takes every flow back (a reload, a stop).
    pub(crate) fn reclaim_all(&mut self, now: Instant, why: Reclaim) {
        if self.in_kernel == 0 {
            return;
        }
        let idxs: Vec<u32> = self.flows.indices().collect();
        for idx in idxs {
            if self.flows.get(idx).is_some_and(|f| f.fast.in_kernel()) {
                self.reclaim(idx, now, why);
            }
        }
    }

    /// Takes back the flows whose segment size the kernel was given is no
    /// longer what the engine would cut to (a path MTU learned).
    pub(crate) fn reclaim_resized(&mut self, now: Instant) {
        if self.in_kernel == 0 {
            return;
        }
        let idxs: Vec<u32> = self.flows.indices().collect();
        for idx in idxs {
            let stale =
                self.flows.get(idx).is_some_and(|f| f.fast.stale(|from, l| self.kernel_segment(idx, from, l, now)));
            if stale {
                self.reclaim(idx, now, Reclaim::PathMtu);
            }
        }
    }

    /// Whether flow `idx`, idle in user space, still moves in the kernel;
    /// if so its last-seen time is brought to `now`.
    pub(crate) fn busy_in_kernel(&mut self, idx: u32, now: Instant) -> bool {
        let Some(key) = self.flows.get(idx).filter(|f| f.fast.in_kernel()).map(|f| f.key) else { return false };
        let Some(fp) = self.datapath.as_ref().and_then(|d| d.progress(&key)) else { return false };
        let packets: u64 = fp.dirs.iter().flatten().map(|p| p.packets).sum();
        let Some(f) = self.flows.get_mut(idx) else { return false };
        if f.fast.on_kernel_packets(packets) {
            f.last_seen = now;
            return true;
        }
        false
    }
}

/// What the kernel did with a flow brings the connection's state up to
/// date, for each direction it carried: the expected inbound sequence
/// (adopted whenever the kernel moved it: by its 64-bit count, never by a
/// 32-bit comparison that wraps after 2 GiB) and the sequence windows that
/// ICMP errors are checked against; and the inner host's window, which the
/// kernel kept from every packet of the inner host since the install.
fn catch_up(c: &mut crate::conntrack::Conn, fp: &FlowProgress) {
    c.receiver = Some(fp.receiver);
    for from in [Port::Outer, Port::Inner] {
        let Some(p) = fp.dir(from) else { continue };
        if p.advanced == 0 {
            continue;
        }
        if from == Port::Outer {
            c.next_in = Some(px_wire::tcp::SeqNumber(p.next_seq));
        }
        let data = if from == Port::Outer { &mut c.windows.seq_in } else { &mut c.windows.seq_out };
        data.catch_up(p.next_seq, p.advanced);
    }
    // Then what each direction's last ACK acknowledged of the other's data.
    for from in [Port::Outer, Port::Inner] {
        let Some(p) = fp.dir(from).filter(|p| p.packets > 0) else { continue };
        let acked = if from == Port::Outer { &mut c.windows.seq_out } else { &mut c.windows.seq_in };
        acked.on_ack(p.ack);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use px_wire::offload::PacketMeta;
    use px_wire::tcp::flags;

    use super::*;
    use crate::buf::Verdict;
    use crate::config::Config;
    use crate::conntrack::ReceiveWindow;
    use crate::fast_path::{Datapath, Progress};
    use crate::flow::FlowKey;
    use crate::test_frames::Tcp;

    /// What a fake datapath holds: each direction installed (by flow and
    /// the port its packets arrive on), with what the "kernel" did since,
    /// and the inner host's window per flow.
    #[derive(Debug, Default)]
    pub struct Table {
        pub dirs: HashMap<(FlowKey, Port), (Direction, Progress)>,
        pub receivers: HashMap<FlowKey, ReceiveWindow>,
        pub installs: u64,
        pub withdrawals: u64,
    }

    impl Table {
        fn flow(&self, key: &FlowKey) -> Option<FlowProgress> {
            let dir = |from| self.dirs.get(&(*key, from)).map(|(_, p)| *p);
            let dirs = [dir(Port::Inner), dir(Port::Outer)];
            dirs.iter().any(Option::is_some).then(|| FlowProgress { dirs, receiver: self.receivers[key] })
        }
    }

    /// A datapath in memory; the test plays the kernel through `table`.
    #[derive(Debug, Clone, Default)]
    pub struct Fake {
        pub table: Arc<Mutex<Table>>,
    }

    impl Datapath for Fake {
        fn install(&mut self, o: &Offload) -> Result<(), InstallError> {
            let mut t = self.table.lock().unwrap();
            t.installs += 1;
            t.receivers.entry(o.key).or_insert(o.receiver);
            for d in o.directions() {
                t.dirs.insert((o.key, d.from), (*d, Progress { next_seq: d.next_seq, ..Progress::default() }));
            }
            Ok(())
        }
        fn progress(&self, key: &FlowKey) -> Option<FlowProgress> {
            self.table.lock().unwrap().flow(key)
        }
        fn withdraw(&mut self, key: &FlowKey, from: Port) -> Option<FlowProgress> {
            let mut t = self.table.lock().unwrap();
            t.withdrawals += 1;
            let fp = t.flow(key)?;
            t.dirs.remove(&(*key, from))?;
            if t.flow(key).is_none() {
                t.receivers.remove(key);
            }
            Some(fp)
        }
    }

    pub const MSS_IN: usize = 1448;

    pub fn engine(v6: bool) -> (Engine, Fake, Instant) {
        let _ = v6;
        let cfg = Config { fast_path: true, fast_path_after: 8, inner_gso: true, outer_gso: true, ..Config::default() };
        let mut e = Engine::new(cfg).unwrap();
        let fake = Fake::default();
        let now = Instant::now();
        e.set_datapath(Some(Box::new(fake.clone())), now);
        (e, fake, now)
    }

    /// [`send`], for inputs that must not be dropped.
    pub fn feed(e: &mut Engine, now: Instant, t: &Tcp) {
        let v = send(e, now, t);
        assert!(!matches!(v, Verdict::Dropped(_)), "{v:?}");
    }

    pub fn send(e: &mut Engine, now: Instant, t: &Tcp) -> Verdict {
        let v = e.handle_packet(now, t.from, &mut t.build(), PacketMeta::PLAIN);
        while let Some(x) = e.poll_transmit() {
            e.recycle(x.buf);
        }
        v
    }

    /// A GRO super-packet of `segs` full segments from outside at `seq`;
    /// returns the sequence after it.
    pub fn super_packet(e: &mut Engine, now: Instant, v6: bool, seq: u32, segs: u32) -> u32 {
        let t = Tcp::data(v6, Port::Outer, seq, MSS_IN * segs as usize);
        let kind = if v6 { px_wire::offload::GsoKind::TcpV6 } else { px_wire::offload::GsoKind::TcpV4 };
        let meta = PacketMeta {
            gso: Some(px_wire::offload::Gso { kind, size: MSS_IN as u16, ecn: false }),
            ..PacketMeta::PLAIN
        };
        let v = e.handle_packet(now, Port::Outer, &mut t.build(), meta);
        assert!(!matches!(v, Verdict::Dropped(_)), "{v:?}");
        while let Some(x) = e.poll_transmit() {
            e.recycle(x.buf);
        }
        seq + MSS_IN as u32 * segs
    }

    /// SYN (MSS 1460) from outside, SYN-ACK (MSS 8960) from inside, the
    /// handshake's ACK, then `n` full segments from outside from seq 1, as
    /// one GRO super-packet (a bulk flow's, which the fast path takes).
    pub fn established(e: &mut Engine, now: Instant, v6: bool, n: u32) -> u32 {
        let mut syn = Tcp::data(v6, Port::Outer, 0, 0);
        syn.flags = flags::SYN;
        syn.opts = vec![2, 4, 0x05, 0xb4];
        feed(e, now, &syn);
        let mut sa = Tcp::data(v6, Port::Inner, 0, 0);
        sa.flags = flags::SYN | flags::ACK;
        sa.opts = vec![2, 4, 0x23, 0x00];
        sa.ack = 1;
        feed(e, now, &sa);
        let ack = Tcp::data(v6, Port::Outer, 1, 0);
        feed(e, now, &ack);
        if n == 0 { 1 } else { super_packet(e, now, v6, 1, n) }
    }

    fn quiet(e: &mut Engine, now: Instant) {
        e.fast_path_prepare(now);
        while let Some(x) = e.poll_transmit() {
            e.recycle(x.buf);
        }
        e.fast_path_sync(now);
    }

    #[test]
    fn a_bulk_flow_goes_to_the_kernel_at_a_quiet_moment_with_the_engines_sizes() {
        for v6 in [false, true] {
            let (mut e, fake, now) = engine(v6);
            let next = established(&mut e, now, v6, 7);
            assert!(!e.fast_path_pending(), "7 segments: below fast_path_after");
            let next = super_packet(&mut e, now, v6, next, 7) - 7 * MSS_IN as u32;
            assert!(e.fast_path_pending());
            assert_eq!(fake.table.lock().unwrap().installs, 0, "only at a quiet moment");
            quiet(&mut e, now);
            assert_eq!(e.flows_in_kernel(), 1);
            assert_eq!(e.held_bytes(), 0, "what it held was sent first");
            assert_eq!(e.counters().flushes(crate::FlushReason::FastPath), 1);
            let t = fake.table.lock().unwrap();
            let ip = if v6 { 40 } else { 20 };
            let (inb, _) = t.dirs.values().find(|(d, _)| d.from == Port::Outer).unwrap();
            let (outb, _) = t.dirs.values().find(|(d, _)| d.from == Port::Inner).unwrap();
            // 9000 less headers with timestamps; toward outside: MSS 1460 less 12.
            assert_eq!(inb.segment as usize, 9000 - ip - 32, "v6={v6}");
            assert_eq!(outb.segment as usize, 1500 - ip - 32);
            assert_eq!(inb.next_seq, next + 7 * MSS_IN as u32);
            assert_eq!((inb.tcp_header_len, outb.tcp_header_len), (32, 32));
            // The flow as the engine keys it, with what the inner host's
            // SYN-ACK allowed (65,535 bytes past its ACK, unscaled).
            let (key, receiver) = t.receivers.iter().next().unwrap();
            assert_eq!(key.outer().port(), crate::test_frames::OUTER_PORT);
            assert_eq!(*receiver, ReceiveWindow { end: 1 + 65_535, max_win: 65_535 });
        }
    }

    /// Issue 38 item 1: a flow's bytes in `px status` count what the
    /// kernel carried, while it carries the flow (read from the datapath)
    /// and after the flow came back.
    #[test]
    fn a_flows_bytes_count_what_the_kernel_carried_then_and_now() {
        let (mut e, fake, now) = engine(false);
        let next = established(&mut e, now, false, 7);
        let why = |e: &Engine| e.largest_flows(1, now)[0].not_offloaded.clone();
        assert_eq!(why(&e).as_deref(), Some("fewer segments than fast_path_after so far"));
        let next = super_packet(&mut e, now, false, next, 7);
        assert_eq!(why(&e).as_deref(), Some("waiting for a quiet moment"));
        quiet(&mut e, now);
        assert_eq!(e.flows_in_kernel(), 1);
        assert_eq!(why(&e), None, "in the kernel");
        let user = 14 * MSS_IN as u64;
        let v = &e.largest_flows(1, now)[0];
        assert_eq!((v.bytes_in, v.kernel_bytes_in), (user, 0));
        let key = *fake.table.lock().unwrap().receivers.keys().next().unwrap();
        let carried = |e: &mut Engine, bytes: u64| {
            let mut t = fake.table.lock().unwrap();
            t.dirs.get_mut(&(key, Port::Outer)).unwrap().1.bytes = bytes;
            t.dirs.get_mut(&(key, Port::Inner)).unwrap().1.bytes = 7;
            drop(t);
            e.largest_flows(1, now)[0].clone()
        };
        let v = carried(&mut e, 5_000_000);
        assert_eq!((v.bytes_in, v.kernel_bytes_in), (user + 5_000_000, 5_000_000));
        assert_eq!((v.bytes_out, v.kernel_bytes_out), (7, 7));
        // Taken back (a reload): what the kernel carried stays the flow's.
        let cfg = e.config().clone();
        e.set_config(now, Config { merge_timeout: cfg.merge_timeout * 2, ..cfg }).unwrap();
        assert_eq!(e.flows_in_kernel(), 0);
        let v = &e.largest_flows(1, now)[0];
        assert_eq!((v.bytes_in, v.kernel_bytes_in, v.kernel_bytes_out), (user + 5_000_000, 5_000_000, 7));
        assert_eq!((v.hand_backs, v.last_hand_back.as_deref()), (1, Some("config")));
        assert_eq!(v.not_offloaded.as_deref(), Some("waiting after a hand-back"));
        super_packet(&mut e, now, false, next, 2);
        assert_eq!(e.largest_flows(1, now)[0].bytes_in, user + 5_000_000 + 2 * MSS_IN as u64);
        // Handed back by the kernel (a FIN): named by its reason.
        // Past any backoff (at most 2 s).
        let later = now + std::time::Duration::from_secs(3);
        let next = super_packet(&mut e, later, false, next + 2 * MSS_IN as u32, 20);
        quiet(&mut e, later);
        assert!(fake.table.lock().unwrap().dirs.contains_key(&(key, Port::Outer)), "inbound in the kernel");
        for (_, p) in fake.table.lock().unwrap().dirs.values_mut() {
            p.returned = Some(ReturnReason::Flags);
        }
        let mut fin = Tcp::data(false, Port::Outer, next, 0);
        fin.flags = flags::FIN | flags::ACK;
        feed(&mut e, later, &fin);
        let v = &e.largest_flows(1, later)[0];
        assert_eq!((v.hand_backs, v.last_hand_back.as_deref()), (2, Some("flags")));
        assert_eq!(v.not_offloaded.as_deref(), Some("closing"));
        // Offload off.
        let mut cfg = e.config().clone();
        cfg.fast_path = false;
        e.set_config(later, cfg).unwrap();
        assert_eq!(e.largest_flows(1, later)[0].not_offloaded.as_deref(), Some("the fast path is off"));
    }

    #[test]
    fn flows_that_must_stay_with_the_engine_never_qualify() {
        // No handshake seen (a connection older than the gateway).
        let (mut e, _, now) = engine(false);
        for i in 0..20 {
            feed(&mut e, now, &Tcp::data(false, Port::Outer, 1 + i * MSS_IN as u32, MSS_IN));
        }
        assert!(!e.fast_path_pending(), "handshake not seen");
        // Small GRO batches inbound: the engine merges them better (only
        // the ACKs going out move to the kernel).
        let (mut e, fake, now) = engine(false);
        let mut next = established(&mut e, now, false, 0);
        for _ in 0..30 {
            next = super_packet(&mut e, now, false, next, 2);
        }
        quiet(&mut e, now);
        let dirs: Vec<Port> = fake.table.lock().unwrap().dirs.values().map(|(d, _)| d.from).collect();
        assert_eq!(dirs, [Port::Inner], "super-packets of 2 segments stay with the engine");
        // A FIN from inside.
        let (mut e, _, now) = engine(false);
        let next = established(&mut e, now, false, 2);
        let mut fin = Tcp::data(false, Port::Inner, 1, 0);
        fin.flags = flags::FIN | flags::ACK;
        feed(&mut e, now, &fin);
        super_packet(&mut e, now, false, next, 16);
        assert!(!e.fast_path_pending(), "half closed");
        // No datapath, or the configuration says off.
        let mut e = Engine::new(Config { fast_path: true, fast_path_after: 8, ..Config::default() }).unwrap();
        established(&mut e, now, false, 20);
        assert!(!e.fast_path_pending(), "no datapath");
        let (mut e, fake, now) = engine(false);
        let mut cfg = e.config().clone();
        cfg.fast_path = false;
        e.set_config(now, cfg).unwrap();
        established(&mut e, now, false, 20);
        quiet(&mut e, now);
        assert_eq!(fake.table.lock().unwrap().installs, 0, "offload off");
        // An AccECN connection (its SYN-ACK chose AccECN: AE, CWR, ECE =
        // 0, 1, 0), and a TCP-MD5 one (its SYN signed).
        for (what, synack_flags, syn_opts) in [
            ("AccECN", flags::SYN | flags::ACK | flags::CWR, vec![2, 4, 0x05, 0xb4]),
            ("TCP-MD5", flags::SYN | flags::ACK, [vec![2, 4, 0x05, 0xb4], vec![19, 18], vec![7; 16]].concat()),
        ] {
            let (mut e, fake, now) = engine(false);
            let mut syn = Tcp::data(false, Port::Outer, 0, 0);
            syn.flags = flags::SYN;
            syn.opts = syn_opts;
            while syn.opts.len() % 4 != 0 {
                syn.opts.push(1);
            }
            feed(&mut e, now, &syn);
            let mut sa = Tcp::data(false, Port::Inner, 0, 0);
            sa.flags = synack_flags;
            sa.opts = vec![2, 4, 0x23, 0x00];
            sa.ack = 1;
            feed(&mut e, now, &sa);
            feed(&mut e, now, &Tcp::data(false, Port::Outer, 1, 0));
            for i in 0..40 {
                feed(&mut e, now, &Tcp::data(false, Port::Outer, 1 + i * MSS_IN as u32, MSS_IN));
            }
            quiet(&mut e, now);
            assert_eq!(fake.table.lock().unwrap().installs, 0, "{what}: never goes to the kernel");
        }
    }

    /// The kernel carried `moved` bytes of the inbound direction (the
    /// inner host acknowledging them as they went) and handed it back for
    /// a FIN: what the fake reports.
    fn carried_then_fin(fake: &Fake, next: u32, moved: u64) -> u32 {
        let mut t = fake.table.lock().unwrap();
        let end = next.wrapping_add(moved as u32);
        let ((k, _), (_, p)) = t.dirs.iter_mut().find(|(_, (d, _))| d.from == Port::Outer).unwrap();
        let k = *k;
        p.next_seq = end;
        p.advanced = moved;
        p.returned = Some(ReturnReason::Flags);
        p.packets = 100;
        p.bytes = moved;
        t.receivers.insert(k, ReceiveWindow { end: end.wrapping_add(65_535), max_win: 65_535 });
        end
    }

    #[test]
    fn a_handed_back_segment_takes_the_flow_back_and_catches_the_stream_up() {
        let (mut e, fake, now) = engine(false);
        let next = established(&mut e, now, false, 8);
        quiet(&mut e, now);
        assert_eq!(e.flows_in_kernel(), 1);
        // The kernel carried 10 MB, then handed a FIN back.
        let moved = 10_000_000u32;
        let end = carried_then_fin(&fake, next, moved as u64);
        let mut fin = Tcp::data(false, Port::Outer, end, 0);
        fin.flags = flags::FIN | flags::ACK;
        assert!(matches!(send(&mut e, now, &fin), Verdict::Forward { .. }));
        assert_eq!(e.flows_in_kernel(), 0);
        let t = fake.table.lock().unwrap();
        assert!(t.dirs.is_empty(), "both directions withdrawn");
        let c = &e.counters().fast_path;
        assert_eq!(c.returned[ReturnReason::Flags as usize], 1);
        assert_eq!(c.kernel_bytes, moved as u64);
        // The FIN was taken at the expected sequence: the stream caught up.
        let f = e.flows.get(e.flows.indices().next().unwrap()).unwrap();
        assert!(f.conn.life.fin_outer, "FIN at the caught-up sequence counts");
        assert_eq!(f.conn.next_in.map(|s| s.0), Some(end + 1));
    }

    /// Issue 35 item 2: after more than 2 GiB in the kernel (here 3 GiB,
    /// where a 32-bit comparison takes the kernel's sequence for an old
    /// one), the engine still continues from the kernel's: by its 64-bit
    /// count of how far the stream moved.
    #[test]
    fn after_more_than_2_gib_in_the_kernel_the_stream_catches_up_by_the_64_bit_count() {
        for moved in [3u64 << 30, (4u64 << 30) + 1000, 5_000_000_000] {
            let (mut e, fake, now) = engine(false);
            let next = established(&mut e, now, false, 8);
            quiet(&mut e, now);
            let end = carried_then_fin(&fake, next, moved);
            let mut fin = Tcp::data(false, Port::Outer, end, 0);
            fin.flags = flags::FIN | flags::ACK;
            assert!(matches!(send(&mut e, now, &fin), Verdict::Forward { .. }));
            let f = e.flows.get(e.flows.indices().next().unwrap()).unwrap();
            assert_eq!(f.conn.next_in.map(|s| s.0), Some(end.wrapping_add(1)), "{moved} bytes in the kernel");
            assert!(f.conn.life.fin_outer, "{moved}: the FIN is at the stream");
            assert!(f.conn.windows.seq_in.contains(end), "{moved}: the ICMP window is at the stream");
        }
    }

    #[test]
    fn a_segment_the_kernel_did_not_hand_back_passes_and_the_flow_stays() {
        let (mut e, fake, now) = engine(false);
        let next = established(&mut e, now, false, 8);
        quiet(&mut e, now);
        // Read from a socket queue filled before the install.
        let v = send(&mut e, now, &Tcp::data(false, Port::Outer, next - MSS_IN as u32, MSS_IN));
        assert!(matches!(v, Verdict::Forward { .. }), "{v:?}");
        assert_eq!(e.flows_in_kernel(), 1);
        assert_eq!(e.counters().fast_path.passed_on, 1);
        assert_eq!(fake.table.lock().unwrap().withdrawals, 0);
        // ... unless it is a control segment.
        let mut rst = Tcp::data(false, Port::Outer, next, 0);
        rst.flags = flags::RST;
        feed(&mut e, now, &rst);
        assert_eq!(e.flows_in_kernel(), 0);
        assert_eq!(e.counters().fast_path.backlog, 1);
    }

    #[test]
    fn the_engine_takes_flows_back_on_reload_removal_and_a_smaller_path_mtu() {
        let (mut e, fake, now) = engine(false);
        established(&mut e, now, false, 8);
        quiet(&mut e, now);
        let mut cfg = e.config().clone();
        cfg.merge_timeout = std::time::Duration::from_micros(100);
        e.set_config(now, cfg).unwrap();
        assert_eq!((e.flows_in_kernel(), e.counters().fast_path.reclaimed_config), (0, 1));
        assert!(fake.table.lock().unwrap().dirs.is_empty());
        // Idle in user space but moving in the kernel: kept.
        let (mut e, fake, now) = engine(false);
        established(&mut e, now, false, 8);
        quiet(&mut e, now);
        for (_, p) in fake.table.lock().unwrap().dirs.values_mut() {
            p.packets = 5;
        }
        let later = now + e.config().flow_idle_timeout + std::time::Duration::from_secs(1);
        e.handle_timeout(later);
        assert_eq!((e.flow_count(), e.flows_in_kernel()), (1, 1), "busy in the kernel");
        let much_later = later + e.config().flow_idle_timeout + std::time::Duration::from_secs(1);
        e.handle_timeout(much_later);
        assert_eq!((e.flow_count(), e.flows_in_kernel()), (0, 0), "idle everywhere: forgotten and withdrawn");
        assert!(fake.table.lock().unwrap().dirs.is_empty());
        assert_eq!(e.counters().fast_path.reclaimed_removed, 1);
    }

    #[test]
    fn a_direction_that_comes_back_quickly_waits_before_it_goes_again_unless_it_was_a_lone_segment() {
        let (mut e, fake, now) = engine(false);
        let mut next = established(&mut e, now, false, 8);
        quiet(&mut e, now);
        let carried = |fake: &Fake| {
            let mut v: Vec<Port> = fake.table.lock().unwrap().dirs.values().map(|(d, _)| d.from).collect();
            v.sort_by_key(|p| *p as u8);
            v
        };
        assert_eq!(carried(&fake), [Port::Inner, Port::Outer]);
        let hand_back = |fake: &Fake, from: Port, r: ReturnReason| {
            for (d, p) in fake.table.lock().unwrap().dirs.values_mut() {
                if d.from == from {
                    p.returned = Some(r);
                }
            }
        };
        // Inbound handed back for an option: that direction comes back,
        // the ACKs going out stay in the kernel.
        hand_back(&fake, Port::Outer, ReturnReason::Options);
        let mut odd = Tcp::data(false, Port::Outer, next, MSS_IN);
        odd.opts = vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];
        feed(&mut e, now, &odd);
        next += MSS_IN as u32;
        assert_eq!(carried(&fake), [Port::Inner]);
        assert_eq!(e.flows_in_kernel(), 1);
        for _ in 0..3 {
            next = super_packet(&mut e, now, false, next, 8);
        }
        quiet(&mut e, now);
        assert_eq!(carried(&fake), [Port::Inner], "within the backoff");
        let later = now + crate::fast_path::MIN_BACKOFF;
        next = super_packet(&mut e, later, false, next, 8);
        quiet(&mut e, later);
        assert_eq!(carried(&fake), [Port::Inner, Port::Outer], "after it");
        // Outbound handed back for a lone jumbo segment: it comes back
        // without a backoff, and goes again once its lone segments are rare.
        hand_back(&fake, Port::Inner, ReturnReason::Lone);
        let mut lone = Tcp::data(false, Port::Inner, 1, 8948);
        lone.ack = next;
        feed(&mut e, later, &lone);
        assert_eq!(carried(&fake), [Port::Outer]);
        quiet(&mut e, later);
        assert_eq!(carried(&fake), [Port::Outer], "1 lone segment in 1 outbound data packet");
        let mut off = 1 + 8948;
        for _ in 0..100 {
            let mut small = Tcp::data(false, Port::Inner, off, 1000);
            small.ack = next;
            feed(&mut e, later, &small);
            off += 1000;
        }
        quiet(&mut e, later);
        assert_eq!(carried(&fake), [Port::Inner, Port::Outer], "1 in 101");
        assert_eq!(e.counters().fast_path.returned[ReturnReason::Lone as usize], 1);
        // A FIN from outside takes the whole flow back.
        hand_back(&fake, Port::Outer, ReturnReason::Flags);
        let mut fin = Tcp::data(false, Port::Outer, next, 0);
        fin.flags = flags::FIN | flags::ACK;
        feed(&mut e, later, &fin);
        assert!(carried(&fake).is_empty());
        assert_eq!(e.flows_in_kernel(), 0);
    }
}
