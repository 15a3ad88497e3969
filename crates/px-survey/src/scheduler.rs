//! The survey's run without its sockets: which targets are in progress,
//! which job's packet leaves next under the rate limits, which job an
//! arriving packet is for, and the records of the finished ones. Sans-I/O,
//! time passed in; [`crate::run`] drives it with raw sockets, and the tests
//! drive it with a model of a network.
//!
//! Packets in ([`Scheduler::handle_packet`]), timers
//! ([`Scheduler::handle_timeout`], [`Scheduler::poll_timeout`]), packets
//! out ([`Scheduler::poll_transmit`], each one a token of the global and
//! the per-destination bucket of [`RateLimiter`]), records out
//! ([`Scheduler::poll_record`]).

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::job::{ConnKey, Context, JobConfig, TargetJob};
use crate::packet::{Incoming, parse};
use crate::rate::RateLimiter;
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
    /// Where the next transmit sweep starts (round robin over the jobs).
    cursor: usize,
    /// The earliest time a refused packet may leave.
    send_wake: Option<Duration>,
    last_forget: Duration,
    records: VecDeque<Record>,
    done: usize,
    total: usize,
    packets: u64,
}

impl Scheduler {
    /// A run over `targets` (in order). `seed`: the run's random seed;
    /// `pmtud_tested`: addresses a previous run already tested.
    pub fn new(
        cfg: SchedulerConfig,
        targets: Vec<Target>,
        seed: u64,
        pmtud_tested: HashMap<Ipv4Addr, String>,
    ) -> Scheduler {
        Scheduler {
            total: targets.len(),
            queue: targets.into(),
            jobs: Vec::new(),
            free: Vec::new(),
            active: 0,
            by_conn: HashMap::new(),
            ctx: Context::new(cfg.job, cfg.ports, seed, pmtud_tested),
            concurrency: cfg.concurrency,
            limiter: RateLimiter::new(cfg.rate, cfg.per_destination),
            cursor: 0,
            send_wake: None,
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

    /// Every target is finished and its record taken.
    pub fn is_done(&self) -> bool {
        self.queue.is_empty() && self.active == 0 && self.records.is_empty()
    }

    /// Whether targets are started or waiting (an interruption now loses them).
    pub fn has_unfinished(&self) -> bool {
        !self.queue.is_empty() || self.active > 0
    }

    /// A packet that arrived: a TCP segment of one of our connections or an
    /// ICMP "time exceeded" quoting a hop test's probe. Anything else is
    /// ignored.
    pub fn handle_packet(&mut self, now: Duration, packet: &[u8]) {
        match parse(packet) {
            Incoming::Tcp(t) => {
                if let Some(job) = self.job_for(&(t.src, t.sport, t.dport)) {
                    job.handle_tcp(now, &t);
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

    /// The next packet to send now, if the rate limits allow one; the jobs
    /// take turns.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Duration) -> Option<Vec<u8>> {
        let n = self.jobs.len();
        let mut wake: Option<Duration> = None;
        for k in 0..n {
            let id = (self.cursor + k) % n;
            let Some(job) = self.jobs[id].as_mut() else { continue };
            let Some(dst) = job.next_destination() else { continue };
            match self.limiter.try_send(now, dst) {
                Ok(()) => {
                    self.cursor = id;
                    self.packets += 1;
                    self.send_wake = None;
                    let p = job.poll_transmit(now);
                    if job.is_done() {
                        self.collect(now);
                    }
                    return p;
                }
                Err(w) => wake = Some(wake.map_or(now + w, |x| x.min(now + w))),
            }
        }
        self.send_wake = wake;
        None
    }

    /// When to call [`Self::handle_timeout`] (a job's timer) or
    /// [`Self::poll_transmit`] (a refused packet's tokens) next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        let jobs = self.jobs.iter().flatten().filter_map(TargetJob::poll_timeout);
        jobs.chain(self.send_wake).min()
    }

    /// A finished target's record.
    pub fn poll_record(&mut self) -> Option<Record> {
        self.records.pop_front()
    }

    /// Gives up every target in progress (the survey is stopping): the RSTs
    /// that close its open connections, to send at once.
    pub fn abort(&mut self) -> Vec<Vec<u8>> {
        self.jobs.iter_mut().flatten().flat_map(TargetJob::abort).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{HopConfig, TcpConfig};
    use crate::model::{Net, ServerSpec, Service, Treatment, drive};
    use crate::record::{Class, Pmtud, Stop};

    /// The flags `px lab survey` gives `px survey`.
    pub(crate) fn lab_flags() -> SchedulerConfig {
        SchedulerConfig {
            job: JobConfig {
                tcp: TcpConfig {
                    timeout: Duration::from_secs(3),
                    rto: Duration::from_millis(250),
                    ..TcpConfig::default()
                },
                retries: 2,
                fragments: 2,
                hops: HopConfig { max_hops: 6, rounds: 3, round_wait: Duration::from_millis(300), fragments: 2 },
                ptb_mtu: 1280,
                path: "/".into(),
            },
            concurrency: 128,
            rate: (20000.0, 2000.0),
            per_destination: (1000.0, 20.0),
            ports: (61000, 65000),
        }
    }

    fn addr(i: u8) -> Ipv4Addr {
        Ipv4Addr::new(203, 0, 113, i)
    }

    fn targets(addrs: &[Ipv4Addr], ports: &[u16]) -> Vec<Target> {
        ports.iter().flat_map(|&port| addrs.iter().map(move |&addr| Target { addr, port, host: None })).collect()
    }

    /// An address's ground truth: class, PMTUD verdict, stop hop.
    type Truth = (Ipv4Addr, Class, Pmtud, Option<u8>);

    /// The behaviours of `px lab survey`, one address each, three routers.
    fn lab_net() -> (Net, Vec<Truth>) {
        let mut net = Net::new(3, 7);
        let mut truth = Vec::new();
        let http = ServerSpec::default();
        let cases: [(u8, Class, Pmtud, Option<u8>); 8] = [
            (1, Class::FragmentsOk, Pmtud::Works, None),
            (2, Class::FragmentsOk, Pmtud::Works, None),
            (3, Class::FragmentsOk, Pmtud::Fails, None),
            (4, Class::FilteredLastHop, Pmtud::Works, Some(3)),
            (5, Class::FilteredInPath, Pmtud::Works, Some(2)),
            (6, Class::DroppedAtDestination, Pmtud::Works, None),
            (7, Class::Unresponsive, Pmtud::NotTested, None),
            (8, Class::Unresponsive, Pmtud::NotTested, None),
        ];
        for (i, class, pmtud, stop) in cases {
            let a = addr(i);
            let spec = match i {
                6 => ServerSpec { poor_reassembly: true, ..http },
                8 => ServerSpec { service: Service::Closed, ..http },
                _ => http,
            };
            net.add_server(a, spec);
            match i {
                2 => net.treat(1, a, Treatment { loss_percent: 2, ..Treatment::default() }),
                3 => net.treat(2, a, Treatment { icmp_blackhole: true, ..Treatment::default() }),
                4 => net.treat(3, a, Treatment { drop_fragments: true, ..Treatment::default() }),
                5 => net.treat(2, a, Treatment { drop_fragments: true, ..Treatment::default() }),
                7 => net.treat(3, a, Treatment { dead: true, ..Treatment::default() }),
                _ => {}
            }
            truth.push((a, class, pmtud, stop));
        }
        (net, truth)
    }

    /// Every record has its address's class and stop hop, and each
    /// answering address exactly one PMTUD test with the right verdict.
    fn check(records: &[Record], truth: &[Truth]) {
        for r in records {
            let &(_, class, pmtud, stop) = truth.iter().find(|t| t.0 == r.addr).expect("a known address");
            assert_eq!(r.class, class, "{}: {r:?}", r.target);
            if let Some(hop) = stop {
                assert_eq!(r.fragment_path.as_ref().and_then(|p| p.stop_hop), Some(hop), "{}", r.target);
            }
            if class == Class::DroppedAtDestination {
                assert_eq!(r.fragment_path.as_ref().map(|p| p.stop), Some(Stop::Destination), "{}", r.target);
            }
            if r.icmp_pmtud != Pmtud::SameAddress {
                assert_eq!(r.icmp_pmtud, pmtud, "{}: {:?}", r.target, r.pmtud_note);
            }
        }
        for &(a, _, pmtud, _) in truth {
            let tests = records.iter().filter(|r| r.addr == a && r.icmp_pmtud != Pmtud::SameAddress).count();
            let want = if pmtud == Pmtud::NotTested { tests } else { 1 };
            assert_eq!(tests, want, "{a}: one PMTUD test per answering address");
        }
    }

    #[test]
    fn the_lab_behaviours_are_recovered_without_sockets() {
        let (mut net, truth) = lab_net();
        let addrs: Vec<_> = truth.iter().map(|t| t.0).collect();
        let list = targets(&addrs, &[80, 8080, 8000]);
        let mut s = Scheduler::new(lab_flags(), list.clone(), 1, HashMap::new());
        let (records, _) = drive(&mut s, &mut net, Duration::from_secs(300));
        assert_eq!(records.len(), list.len(), "every target once");
        check(&records, &truth);
        assert_eq!(s.progress(), (list.len(), list.len()));
        assert!(s.is_done());
        // Every connection ends with an RST (on the lossy path an RST
        // can be lost).
        let open: Vec<_> = net.open_connection_list().into_iter().filter(|(a, _)| *a != addr(2)).collect();
        assert!(open.is_empty(), "{open:?}");
    }

    #[test]
    fn no_destination_gets_more_than_its_rate() {
        let (mut net, truth) = lab_net();
        let addrs: Vec<_> = truth.iter().map(|t| t.0).collect();
        let mut cfg = lab_flags();
        cfg.per_destination = (50.0, 5.0);
        let mut s = Scheduler::new(cfg, targets(&addrs, &[80, 8080, 8000, 8008]), 1, HashMap::new());
        let _ = drive(&mut s, &mut net, Duration::from_secs(600));
        for (a, c) in &net.counts {
            // In any second: at most the burst plus the rate.
            for (i, t) in c.sent_at.iter().enumerate() {
                let in_window = c.sent_at[i..].iter().take_while(|u| **u < *t + Duration::from_secs(1)).count();
                assert!(in_window <= 55, "{a}: {in_window} packets in one second");
            }
        }
    }

    #[test]
    fn jobs_wait_for_a_free_source_port() {
        let (mut net, truth) = lab_net();
        let addrs: Vec<_> = truth.iter().map(|t| t.0).collect();
        let mut cfg = lab_flags();
        cfg.ports = (61000, 61001);
        let list = targets(&addrs, &[80]);
        let mut s = Scheduler::new(cfg, list.clone(), 1, HashMap::new());
        let (records, _) = drive(&mut s, &mut net, Duration::from_secs(600));
        assert_eq!(records.len(), list.len());
        check(&records, &truth);
    }

    #[test]
    fn an_address_tested_before_is_not_tested_again() {
        let (mut net, truth) = lab_net();
        let list = targets(&[truth[0].0], &[80]);
        let before = HashMap::from([(truth[0].0, "203.0.113.1:8080".to_string())]);
        let mut s = Scheduler::new(lab_flags(), list, 1, before);
        let (records, _) = drive(&mut s, &mut net, Duration::from_secs(60));
        assert_eq!(records[0].icmp_pmtud, Pmtud::SameAddress);
        assert_eq!(records[0].pmtud_note.as_deref(), Some("tested on 203.0.113.1:8080"));
    }

    #[test]
    fn an_abort_resets_every_open_connection() {
        let (mut net, truth) = lab_net();
        let addrs: Vec<_> = truth.iter().map(|t| t.0).collect();
        let mut s = Scheduler::new(lab_flags(), targets(&addrs, &[80, 8080]), 1, HashMap::new());
        let _ = drive(&mut s, &mut net, Duration::from_millis(40));
        assert!(s.has_unfinished());
        let rsts = s.abort();
        assert!(!rsts.is_empty());
        for p in rsts {
            net.send(Duration::from_millis(40), p);
        }
        assert_eq!(net.open_connections(), 0);
    }
}
