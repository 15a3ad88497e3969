//! The scheduler over the network model: what the survey finds and how
//! politely it asks.

use super::*;
use crate::exchange::{HopConfig, TcpConfig};
use crate::model::{Net, ServerSpec, Service, Treatment, drive};
use crate::record::{Class, Pmtud, Stop};

/// The flags `px lab survey` gives `px survey`.
pub(crate) fn lab_flags() -> SchedulerConfig {
    SchedulerConfig {
        job: JobConfig {
            tcp: TcpConfig { timeout: Duration::from_secs(3), rto: Duration::from_millis(250), ..TcpConfig::default() },
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
        (6, Class::FragmentsLost, Pmtud::Works, None),
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
        assert_eq!(r.late_probes, 0, "{}: probes sent after their test decided", r.target);
        let &(_, class, pmtud, stop) = truth.iter().find(|t| t.0 == r.addr).expect("a known address");
        assert_eq!(r.class, class, "{}: {r:?}", r.target);
        if let Some(hop) = stop {
            assert_eq!(r.fragment_path.as_ref().and_then(|p| p.stop_hop), Some(hop), "{}", r.target);
        }
        if class == Class::FragmentsLost {
            // The fragments reach every router: where they are lost after
            // that is not observed.
            let p = r.fragment_path.as_ref().expect("a hop test");
            assert_eq!((p.stop, p.fragments_reach), (Stop::Unknown, p.routers), "{}", r.target);
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
    let mut s = Scheduler::new(lab_flags(), list.clone(), 1, Prior::default());
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
    let mut s = Scheduler::new(cfg, targets(&addrs, &[80, 8080, 8000, 8008]), 1, Prior::default());
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
    let mut s = Scheduler::new(cfg, list.clone(), 1, Prior::default());
    let (records, _) = drive(&mut s, &mut net, Duration::from_secs(600));
    assert_eq!(records.len(), list.len());
    check(&records, &truth);
}

#[test]
fn an_address_tested_before_is_not_tested_again() {
    let (mut net, truth) = lab_net();
    let list = targets(&[truth[0].0], &[80]);
    let before = HashMap::from([(truth[0].0, "203.0.113.1:8080".to_string())]);
    let mut s = Scheduler::new(lab_flags(), list, 1, Prior { pmtud_tested: before, ..Prior::default() });
    let (records, _) = drive(&mut s, &mut net, Duration::from_secs(60));
    assert_eq!(records[0].icmp_pmtud, Pmtud::SameAddress);
    assert_eq!(records[0].pmtud_note.as_deref(), Some("tested on 203.0.113.1:8080"));
}

#[test]
fn an_abort_resets_every_open_connection() {
    let (mut net, truth) = lab_net();
    let addrs: Vec<_> = truth.iter().map(|t| t.0).collect();
    let mut s = Scheduler::new(lab_flags(), targets(&addrs, &[80, 8080]), 1, Prior::default());
    let _ = drive(&mut s, &mut net, Duration::from_millis(40));
    assert!(s.has_unfinished());
    let rsts = s.abort(Duration::from_millis(40));
    assert!(!rsts.is_empty());
    for p in rsts {
        net.send(Duration::from_millis(40), p);
    }
    assert_eq!(net.open_connections(), 0);
}

// ---- Issue 39: the survey where routers rate-limit ICMP and hold fragments.

/// `px survey`'s defaults (what its `--help` says).
fn tool_defaults() -> SchedulerConfig {
    SchedulerConfig {
        job: JobConfig {
            tcp: TcpConfig::default(),
            retries: 2,
            fragments: 2,
            hops: HopConfig { max_hops: 20, rounds: 3, round_wait: Duration::from_secs(1), fragments: 2 },
            ptb_mtu: 1280,
            path: "/".into(),
        },
        concurrency: 32,
        rate: (200.0, 20.0),
        per_destination: (20.0, 20.0),
        ports: (61000, 65000),
    }
}

/// Three routers at Linux's default ICMP rate limits.
fn linux_routers() -> Net {
    let mut net = Net::new(3, 11);
    for r in &mut net.routers {
        r.rate_limited = true;
    }
    net
}

/// `n` addresses from `first` on, each with an HTTP server.
fn servers(net: &mut Net, first: u8, n: u8, spec: ServerSpec) -> Vec<Ipv4Addr> {
    (first..first + n)
        .map(|i| {
            net.add_server(addr(i), spec);
            addr(i)
        })
        .collect()
}

const PORTS: [u16; 6] = [80, 8080, 8000, 8008, 8888, 8081];

fn run_defaults(net: &mut Net, list: Vec<Target>) -> Vec<Record> {
    let n = list.len();
    let mut s = Scheduler::new(tool_defaults(), list, 3, Prior::default());
    let (records, took) = drive(&mut s, net, Duration::from_secs(3600));
    assert_eq!(records.len(), n, "every target finished");
    eprintln!("{n} targets in {took:?} of model time");
    records
}

fn filtered(net: &mut Net, hop: usize, addrs: &[Ipv4Addr]) {
    for &a in addrs {
        net.treat(hop, a, Treatment { drop_fragments: true, ..Treatment::default() });
    }
}

/// Item 1: the hop test against routers that answer one "time exceeded"
/// a second after a burst of six, with many filtered targets at once.
#[test]
fn routers_rate_limits_do_not_move_where_fragments_stop() {
    let mut net = linux_routers();
    let last = servers(&mut net, 1, 20, ServerSpec::default());
    let mid = servers(&mut net, 31, 10, ServerSpec::default());
    let ok = servers(&mut net, 51, 6, ServerSpec::default());
    filtered(&mut net, 3, &last);
    filtered(&mut net, 2, &mid);
    let all: Vec<_> = [&last[..], &mid[..], &ok[..]].concat();
    let records = run_defaults(&mut net, targets(&all, &PORTS));
    let truth: Vec<Truth> = all
        .iter()
        .map(|a| match () {
            () if last.contains(a) => (*a, Class::FilteredLastHop, Pmtud::Works, Some(3)),
            () if mid.contains(a) => (*a, Class::FilteredInPath, Pmtud::Works, Some(2)),
            () => (*a, Class::FragmentsOk, Pmtud::Works, None),
        })
        .collect();
    check(&records, &truth);
}

/// Item 1: silence is not an answer. A last router that never answers
/// cannot be where fragments stop, nor can fragments be said to pass it.
#[test]
fn a_silent_router_is_not_a_stop() {
    let mut net = Net::new(3, 5);
    net.routers[2].silent = true;
    let mut a = servers(&mut net, 1, 1, ServerSpec::default());
    filtered(&mut net, 3, &a);
    a.extend(servers(&mut net, 2, 1, ServerSpec { poor_reassembly: true, ..ServerSpec::default() }));
    let records = run_defaults(&mut net, targets(&a, &[80]));
    for r in &records {
        assert_eq!(r.class, Class::FragmentsLost, "{}: {:?}", r.target, r.fragment_path);
        assert_eq!(r.fragment_path.as_ref().map(|p| p.stop), Some(Stop::Unknown), "{}", r.target);
    }
}

/// Item 2: many targets of one address wait in its per-destination queue;
/// each test's deadline counts from when its probes left.
#[test]
fn every_target_of_a_busy_address_gets_its_class() {
    let mut net = Net::new(3, 9);
    let a = servers(&mut net, 1, 1, ServerSpec::default());
    filtered(&mut net, 3, &a);
    let ports: Vec<u16> = (0..40).map(|i| 8000 + i).collect();
    let mut cfg = tool_defaults();
    // Every packet waits about as long as a timeout in the queue.
    cfg.per_destination = (6.0, 6.0);
    let mut s = Scheduler::new(cfg, targets(&a, &ports), 3, Prior::default());
    let (records, _) = drive(&mut s, &mut net, Duration::from_secs(3600));
    assert_eq!(records.len(), ports.len());
    check(&records, &[(a[0], Class::FilteredLastHop, Pmtud::Works, Some(3))]);
}

/// Item 3: a last router with connection tracking holds a lone first
/// fragment (no "time exceeded"), but answers for the whole train.
#[test]
fn a_conntrack_router_is_seen_with_the_whole_train() {
    let mut net = Net::new(3, 13);
    net.routers[2].conntrack = true;
    let a = servers(&mut net, 1, 1, ServerSpec { poor_reassembly: true, ..ServerSpec::default() });
    let records = run_defaults(&mut net, targets(&a, &[80]));
    let p = records[0].fragment_path.as_ref().expect("a hop test");
    assert_eq!((p.fragments_reach, p.stop), (3, Stop::Unknown), "fragments reached every router: {p:?}");
    assert_eq!(records[0].class, Class::FragmentsLost);
}

/// Item 4: a router that drops only non-first fragments (iptables `-f`)
/// is invisible to a first-fragment probe: the position is unknown, not
/// "at the destination".
#[test]
fn a_non_first_fragment_filter_is_not_reported_as_a_position() {
    let mut net = Net::new(3, 17);
    let a = servers(&mut net, 1, 1, ServerSpec::default());
    net.treat(3, a[0], Treatment { drop_non_first: true, ..Treatment::default() });
    let records = run_defaults(&mut net, targets(&a, &[80]));
    let p = records[0].fragment_path.as_ref().expect("a hop test");
    assert_eq!((p.stop, p.stop_hop), (Stop::Unknown, None), "{p:?}");
    assert_eq!(records[0].class, Class::FragmentsLost);
}

/// Item 5: the hop test knows the path's length from the server's own
/// answers and sends nothing past the last router.
#[test]
fn the_hop_test_stops_at_the_last_router() {
    let mut net = Net::new(3, 19);
    let a = servers(&mut net, 1, 2, ServerSpec::default());
    filtered(&mut net, 3, &a[..1]);
    net.treat(3, a[1], Treatment { drop_non_first: true, ..Treatment::default() });
    let _ = run_defaults(&mut net, targets(&a, &[80, 8080]));
    for x in &a {
        assert_eq!(net.counts[x].strays_at_server, 0, "{x}: probes that reached the server");
    }
}

/// Item 5: a SYN is sent again only a retransmission timeout after its
/// previous copy left, however long the copies waited in the queue.
#[test]
fn no_syn_is_sent_again_while_its_first_copy_waits() {
    let mut net = Net::new(3, 23);
    let a = servers(&mut net, 1, 1, ServerSpec::default());
    let ports: Vec<u16> = (0..40).map(|i| 8000 + i).collect();
    let mut cfg = tool_defaults();
    cfg.per_destination = (4.0, 1.0);
    let mut s = Scheduler::new(cfg, targets(&a, &ports), 3, Prior::default());
    let (records, _) = drive(&mut s, &mut net, Duration::from_secs(3600));
    assert_eq!(records.len(), ports.len());
    let gap = net.counts[&a[0]].min_syn_gap;
    assert!(gap.is_none_or(|g| g >= Duration::from_secs(1)), "a SYN again after {gap:?}");
}

/// Item 5: a SYN-ACK that comes after its test gave up gets an RST: no
/// half-open connection is left at the server.
#[test]
fn a_late_syn_ack_is_reset() {
    let mut net = Net::new(3, 29);
    let slow = ServerSpec { syn_ack_delay: Duration::from_secs(6), ..ServerSpec::default() };
    let a = servers(&mut net, 1, 1, slow);
    let mut s = Scheduler::new(tool_defaults(), targets(&a, &[80]), 3, Prior::default());
    let (records, _) = crate::model::drive_on(&mut s, &mut net, Duration::from_secs(3600), Duration::from_secs(10));
    assert_eq!(records[0].class, Class::Unresponsive);
    assert_eq!(net.open_connections(), 0, "{:?}", net.open_connection_list());
}

/// Item 5: an ICMP "administratively prohibited" is an answer: no retry.
#[test]
fn administratively_prohibited_is_not_retried() {
    let mut net = Net::new(3, 31);
    let a = servers(&mut net, 1, 1, ServerSpec { service: Service::Prohibited, ..ServerSpec::default() });
    let records = run_defaults(&mut net, targets(&a, &[80, 8080]));
    for r in &records {
        assert_eq!(r.class, Class::Unresponsive);
        assert!(r.plain.failure.as_deref().is_some_and(|f| f.contains("prohibited")), "{:?}", r.plain);
    }
    assert_eq!(net.counts[&a[0]].syns, 2, "one SYN per target");
}

/// Item 5: every packet the survey sends is counted on its target (or as
/// the RST of a stray segment).
#[test]
fn probes_are_counted_per_target() {
    let (mut net, truth) = lab_net();
    let addrs: Vec<_> = truth.iter().map(|t| t.0).collect();
    let mut s = Scheduler::new(tool_defaults(), targets(&addrs, &[80, 8080]), 1, Prior::default());
    let (records, _) = drive(&mut s, &mut net, Duration::from_secs(3600));
    let counted: u64 = records.iter().map(|r| u64::from(r.probes)).sum::<u64>() + s.strays_reset();
    let sent: u64 = net.counts.values().map(|c| c.sent).sum();
    assert_eq!(counted, sent);
    assert!(records.iter().all(|r| r.probes > 0));
    let most = records.iter().map(|r| r.probes).max().unwrap_or(0);
    assert!(most < 80, "at most {most} packets for one target");
}

/// A resumed run takes an address's hop test from the earlier run's lines
/// and sends no probe for it again.
#[test]
fn a_hop_test_of_an_earlier_run_is_not_repeated() {
    let mut net = Net::new(3, 37);
    let a = servers(&mut net, 1, 1, ServerSpec::default());
    filtered(&mut net, 3, &a);
    let earlier = crate::record::FragmentPath::decide(3, Some(2), vec![]);
    let prior = Prior { paths: HashMap::from([(a[0], (earlier, "203.0.113.1:8080".to_string()))]), ..Prior::default() };
    let mut s = Scheduler::new(tool_defaults(), targets(&a, &[80]), 3, prior);
    let (records, _) = drive(&mut s, &mut net, Duration::from_secs(600));
    let p = records[0].fragment_path.as_ref().expect("the earlier result");
    assert_eq!((p.stop, p.tested_on.as_deref()), (Stop::LastHop, Some("203.0.113.1:8080")));
    let ttl_limited = net.routers.iter().map(|r| r.icmp_sent + r.icmp_limited).sum::<u64>();
    assert_eq!(ttl_limited, 0, "no hop probe sent");
}
