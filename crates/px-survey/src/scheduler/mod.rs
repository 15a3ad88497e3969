//! The survey's run without its sockets: which targets are in progress,
//! which job's packet leaves next under the rate limits, which job an
//! arriving packet is for, and the records of the finished ones. Sans-I/O,
//! time passed in; [`crate::run`] drives it with raw sockets, and the tests
//! drive it with a model of a network.
//!
//! Packets in ([`Scheduler::handle_packet`]), timers
//! ([`Scheduler::handle_timeout`], [`Scheduler::poll_timeout`]), packets
//! out ([`Scheduler::poll_transmit`], each one a token of the global and
//! the per-destination bucket of [`RateLimiter`], and a hop test's probe
//! a token of its TTL's bucket too), records out
//! ([`Scheduler::poll_record`]).
//!
//! Routers rate-limit the ICMP they send: Linux answers one "time
//! exceeded" a second to a host after a burst of six (`icmp_ratelimit`).
//! The routers near us are on every target's path, so the hop tests of all
//! targets share one budget per TTL ([`ROUTER_PACE`]): a probe a router
//! would not answer is a probe wasted, and its silence would be read as
//! "fragments do not get there".
//!
//! A segment from a target that matches no exchange of ours (a SYN-ACK
//! after its test gave up) is answered with an RST, so the server keeps
//! no half-open connection: the kernel cannot do it, the survey's
//! nftables rule drops its RSTs for our ports.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::job::{ConnKey, Context, JobConfig, Prior, TargetJob};
use crate::packet::{Incoming, Seg, TcpIn, parse, tcp_packet};
use crate::rate::{RateLimiter, TokenBucket};
use crate::record::Record;
use crate::target::Target;

/// How the scheduler runs its jobs.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// What each job does.
    pub job: JobConfig,
    /// Targets in progress at once.
    pub concurrency: usize,
    /// Global packets per second and burst.
    pub rate: (f64, f64),
    /// Packets per second and burst toward one address.
    pub per_destination: (f64, f64),
    /// Our source ports.
    pub ports: (u16, u16),
}

/// Probes per second and burst toward the routers at one TTL: under
/// Linux's default ICMP rate limit (one a second, a burst of six) with a
/// margin for clocks that do not agree.
pub const ROUTER_PACE: (f64, f64) = (0.9, 4.0);

/// Targets not started, jobs in progress, records not yet taken.
#[derive(Debug)]
pub struct Scheduler {
    queue: VecDeque<Target>,
    jobs: Vec<Option<TargetJob>>,
    free: Vec<usize>,
    active: usize,
    by_conn: HashMap<ConnKey, usize>,
    ctx: Context,
    concurrency: usize,
    limiter: RateLimiter,
    /// One bucket per TTL for the hop tests' probes.
    hop_pace: HashMap<u8, TokenBucket>,
    /// RSTs for segments of connections we no longer have.
    strays: VecDeque<(Ipv4Addr, Vec<u8>)>,
    strays_reset: u64,
    /// Where the next transmit sweep starts (round robin over the jobs).
    cursor: usize,
    /// The earliest time a refused packet may leave.
    send_wake: Option<Duration>,
    /// A job finished while sending: collect it at the next timeout.
    collect_now: bool,
    last_forget: Duration,
    records: VecDeque<Record>,
    done: usize,
    total: usize,
    packets: u64,
}

impl Scheduler {
    /// A run over `targets` (in order). `seed`: the run's random seed;
    /// `prior`: what a previous run of the same output measured.
    pub fn new(cfg: SchedulerConfig, targets: Vec<Target>, seed: u64, prior: Prior) -> Scheduler {
        Scheduler {
            total: targets.len(),
            queue: targets.into(),
            jobs: Vec::new(),
            free: Vec::new(),
            active: 0,
            by_conn: HashMap::new(),
            ctx: Context::new(cfg.job, cfg.ports, seed, prior),
            concurrency: cfg.concurrency,
            limiter: RateLimiter::new(cfg.rate, cfg.per_destination),
            hop_pace: HashMap::new(),
            strays: VecDeque::new(),
            strays_reset: 0,
            cursor: 0,
            send_wake: None,
            collect_now: false,
            last_forget: Duration::ZERO,
            records: VecDeque::new(),
            done: 0,
            packets: 0,
        }
    }

    /// Targets finished and targets in all.
    pub fn progress(&self) -> (usize, usize) {
        (self.done, self.total)
    }

    /// Packets handed out by [`Self::poll_transmit`].
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// RSTs sent for segments of connections we no longer had.
    pub fn strays_reset(&self) -> u64 {
        self.strays_reset
    }

    /// Every target is finished and its record taken.
    pub fn is_done(&self) -> bool {
        self.queue.is_empty() && self.active == 0 && self.records.is_empty()
    }

    /// Whether targets are started or waiting (an interruption now loses them).
    pub fn has_unfinished(&self) -> bool {
        !self.queue.is_empty() || self.active > 0
    }

    /// A packet that arrived: a TCP segment of one of our connections, an
    /// ICMP destination unreachable quoting one, or an ICMP "time exceeded"
    /// quoting a hop test's probe. Anything else is ignored.
    pub fn handle_packet(&mut self, now: Duration, packet: &[u8]) {
        match parse(packet) {
            Incoming::Tcp(t) => match self.job_for(&(t.src, t.sport, t.dport)) {
                Some(job) => job.handle_tcp(now, &t),
                None => self.reset_stray(&t),
            },
            Incoming::Unreachable { code, quoted_dst, quoted_sport, quoted_dport, .. } => {
                if let Some(job) = self.job_for(&(quoted_dst, quoted_dport, quoted_sport)) {
                    job.handle_unreachable(code);
                }
            }
            Incoming::TimeExceeded { from, quoted_dst, quoted_ident, quoted_sport: Some(sport) } => {
                if let Some(job) = self.job_for(&(quoted_dst, 0, sport)) {
                    job.handle_time_exceeded(from, quoted_dst, quoted_ident);
                }
            }
            _ => {}
        }
    }

    /// An RST for a segment to one of our ports that no exchange of ours
    /// has (an RST itself gets none).
    fn reset_stray(&mut self, t: &TcpIn) {
        if t.flags & px_wire::tcp::flags::RST != 0 || !self.ctx.is_ours(t.dport) {
            return;
        }
        let (seq, ack, fl) = if t.flags & px_wire::tcp::flags::ACK != 0 {
            (t.ack, 0, px_wire::tcp::flags::RST)
        } else {
            let len = t.payload.len() as u32 + u32::from(t.flags & px_wire::tcp::flags::SYN != 0);
            (0, t.seq.wrapping_add(len), px_wire::tcp::flags::RST | px_wire::tcp::flags::ACK)
        };
        let rst = tcp_packet(&Seg {
            src: t.dst,
            dst: t.src,
            sport: t.dport,
            dport: t.sport,
            seq,
            ack,
            flags: fl,
            mss: None,
            payload: &[],
            ident: 0,
            ttl: 64,
        });
        self.strays.push_back((t.src, rst));
    }

    fn job_for(&mut self, key: &ConnKey) -> Option<&mut TargetJob> {
        let id = *self.by_conn.get(key)?;
        self.jobs[id].as_mut()
    }

    /// Starts targets up to the concurrency (`route` gives a target's
    /// source address, or why there is none), runs every job's timers,
    /// and collects the records of the jobs that are done.
    pub fn handle_timeout(&mut self, now: Duration, route: &mut dyn FnMut(&Target) -> Result<Ipv4Addr, String>) {
        while self.active < self.concurrency
            && let Some(t) = self.queue.pop_front()
        {
            let src = route(&t);
            let job = TargetJob::new(now, t, src, &mut self.ctx);
            let id = self.free.pop().unwrap_or_else(|| {
                self.jobs.push(None);
                self.jobs.len() - 1
            });
            self.jobs[id] = Some(job);
            self.active += 1;
            self.rekey(id, None);
        }
        for id in 0..self.jobs.len() {
            let Some(job) = self.jobs[id].as_mut() else { continue };
            let before = job.conn_key();
            job.handle_timeout(now, &mut self.ctx);
            self.rekey(id, before);
        }
        if now.saturating_sub(self.last_forget) >= Duration::from_secs(5) {
            self.last_forget = now;
            self.limiter.forget_idle(now);
        }
        self.collect(now);
    }

    /// Keeps [`Self::by_conn`] pointing at each job's exchange in progress.
    fn rekey(&mut self, id: usize, before: Option<ConnKey>) {
        let after = self.jobs[id].as_ref().and_then(TargetJob::conn_key);
        if before != after {
            if let Some(k) = before {
                self.by_conn.remove(&k);
            }
            if let Some(k) = after {
                self.by_conn.insert(k, id);
            }
        }
    }

    fn collect(&mut self, now: Duration) {
        self.collect_now = false;
        let fragments = self.ctx.config().fragments;
        for id in 0..self.jobs.len() {
            if !self.jobs[id].as_ref().is_some_and(TargetJob::is_done) {
                continue;
            }
            let Some(mut job) = self.jobs[id].take() else { continue };
            let before = job.conn_key();
            job.release(&mut self.ctx);
            if let Some(k) = before {
                self.by_conn.remove(&k);
            }
            self.records.push_back(job.record(now, fragments));
            self.free.push(id);
            self.active -= 1;
            self.done += 1;
        }
    }

    /// The next packet to send now, if the rate limits allow one: the
    /// RSTs for stray segments first, then the jobs in turn.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Duration) -> Option<Vec<u8>> {
        let mut wake: Option<Duration> = None;
        let mut later = |w: Duration| wake = Some(wake.map_or(now + w, |x: Duration| x.min(now + w)));
        if let Some((dst, _)) = self.strays.front() {
            match self.limiter.try_send(now, *dst) {
                Ok(()) => {
                    self.packets += 1;
                    self.strays_reset += 1;
                    self.send_wake = None;
                    return self.strays.pop_front().map(|(_, p)| p);
                }
                Err(w) => later(w),
            }
        }
        let n = self.jobs.len();
        for k in 0..n {
            let id = (self.cursor + k) % n;
            let Some(job) = self.jobs[id].as_mut() else { continue };
            let Some(ready) = job.ready() else { continue };
            let pace = ready.hop.map(|ttl| {
                self.hop_pace.entry(ttl).or_insert_with(|| TokenBucket::starting(ROUTER_PACE.0, ROUTER_PACE.1, now))
            });
            if let Some(w) = pace.as_ref().map(|b| b.peek_wait(now)).filter(|w| !w.is_zero()) {
                later(w);
                continue;
            }
            match self.limiter.try_send(now, ready.dst) {
                Ok(()) => {
                    if let Some(b) = pace {
                        b.take(now);
                    }
                    // The next sweep starts after this job: each takes its turn.
                    self.cursor = id + 1;
                    self.packets += 1;
                    self.send_wake = None;
                    let before = job.conn_key();
                    let p = job.poll_transmit(now, &mut self.ctx);
                    self.collect_now |= job.is_done();
                    self.rekey(id, before);
                    return p;
                }
                Err(w) => later(w),
            }
        }
        self.send_wake = wake;
        None
    }

    /// When to call [`Self::handle_timeout`] (a job's timer, a finished
    /// job to collect) or [`Self::poll_transmit`] (a refused packet's
    /// tokens) next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        if self.collect_now {
            return Some(Duration::ZERO);
        }
        let jobs = self.jobs.iter().flatten().filter_map(TargetJob::poll_timeout);
        jobs.chain(self.send_wake).min()
    }

    /// A finished target's record.
    pub fn poll_record(&mut self) -> Option<Record> {
        self.records.pop_front()
    }

    /// Gives up every target in progress (the survey is stopping): the RSTs
    /// that close its open connections, to send at once.
    pub fn abort(&mut self, now: Duration) -> Vec<Vec<u8>> {
        self.jobs.iter_mut().flatten().flat_map(|j| j.abort(now)).collect()
    }
}

#[cfg(test)]
mod tests;
