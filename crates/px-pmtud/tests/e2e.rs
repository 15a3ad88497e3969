//! End to end, in simulated time: the F-PMTUD prober and responder talk over
//! a fake IPv4 path that fragments DF-clear packets at each hop's MTU (the
//! arithmetic of `px_pmtud::fpmtud::fragment`), drops DF-set packets that do
//! not fit, and optionally drops every fragment (a fragment-filtering
//! router) or a chosen set of packets (loss). When F-PMTUD falls back, the
//! RFC 8899 machine finishes the job with DF-set confirmation probes to the
//! same responder, as `px probe` does.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use px_pmtud::dplpmtud::{Dplpmtud, DplpmtudConfig, State};
use px_pmtud::fpmtud::fragment::traverse;
use px_pmtud::fpmtud::prober::{FallbackReason, Method, Outcome, ProbeTransmit, Prober, ProberConfig};
use px_pmtud::fpmtud::responder::{Arrival, Pieces, Responder, ResponderConfig};
use px_pmtud::fpmtud::wire::{self, ProbeKind, ProbeRepr, Reply};
use px_pmtud::rtt::{ClassicRtt, RttEstimator, RttSample};
use px_pmtud::search::SearchStrategy;

const ONE_WAY: Duration = Duration::from_millis(10);

fn prober_addr() -> SocketAddr {
    SocketAddr::from(([198, 51, 100, 1], 40000))
}

/// How the responder learns about fragments.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Packet socket: every fragment.
    PacketSocket,
    /// Ordinary UDP socket with IP_RECVFRAGSIZE: largest fragment only.
    RecvFragSize,
}

struct Path {
    /// Hop MTUs, the prober's own link first.
    hops: Vec<u16>,
    filter_fragments: bool,
    mode: Mode,
    /// Packets (probes and replies, in order of transmission) to drop.
    drop: Vec<bool>,
    sent: usize,
}

impl Path {
    fn new(hops: Vec<u16>) -> Self {
        Self { hops, filter_fragments: false, mode: Mode::PacketSocket, drop: Vec::new(), sent: 0 }
    }

    fn pmtu(&self) -> u16 {
        *self.hops.iter().min().expect("at least one hop")
    }

    fn lose(&mut self) -> bool {
        let lost = self.drop.get(self.sent).copied().unwrap_or(false);
        self.sent += 1;
        lost
    }
}

enum Event {
    ToResponder(ProbeTransmit),
    ToProber(Vec<u8>),
}

/// Runs one F-PMTUD measurement to completion; returns the prober.
fn measure(path: &mut Path, config: ProberConfig) -> (Prober, Responder) {
    let mut prober = Prober::new(config, 0xC0FFEE, ClassicRtt::default()).expect("valid config");
    let mut responder =
        Responder::new(ResponderConfig { link_mtu: *path.hops.last().expect("hop"), ..ResponderConfig::default() });
    let t0 = Instant::now();
    let mut now = t0;
    // FIFO per arrival time: same-time events keep their send order.
    let mut events: VecDeque<(Instant, Event)> = VecDeque::new();
    for _ in 0..10_000 {
        while let Some(t) = prober.poll_transmit(now) {
            if !path.lose() {
                events.push_back((now + ONE_WAY, Event::ToResponder(t)));
            }
        }
        if prober.is_done() {
            break;
        }
        let next_event = events.front().map(|e| e.0);
        now = match (next_event, prober.poll_timeout()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).expect("something pending while not done"),
        };
        while events.front().is_some_and(|e| e.0 <= now) {
            let Some((_, ev)) = events.pop_front() else {
                break;
            };
            match ev {
                Event::ToResponder(t) => deliver(path, &mut responder, now, &t),
                Event::ToProber(p) => {
                    let _ = prober.handle_reply(now, &p);
                }
            }
            while let Some(reply) = responder.poll_transmit() {
                assert_eq!(reply.destination, prober_addr());
                if !path.lose() {
                    events.push_back((now + ONE_WAY, Event::ToProber(reply.payload)));
                }
            }
        }
        prober.handle_timeout(now);
    }
    assert!(prober.is_done(), "measurement did not end");
    (prober, responder)
}

/// Carries a probe over the path and hands what arrives to the responder.
fn deliver(path: &Path, responder: &mut Responder, now: Instant, t: &ProbeTransmit) {
    let Some(pieces) = traverse(t.ip_len, t.dont_fragment, &path.hops) else {
        return;
    };
    if path.filter_fragments && pieces.len() > 1 {
        return;
    }
    let pieces = if pieces.len() == 1 {
        Pieces::Whole { ip_len: t.ip_len }
    } else {
        match path.mode {
            Mode::PacketSocket => Pieces::Fragments { records: &pieces, reassembled: true },
            Mode::RecvFragSize => {
                Pieces::Reassembled { largest_fragment: pieces.iter().map(|p| p.ip_len).max().unwrap_or(0) }
            }
        }
    };
    let _ = responder.handle_arrival(now, &Arrival { source: prober_addr(), payload: &t.payload, pieces });
}

/// DPLPMTUD over the same path and responder, with DF-set confirmation
/// probes as its probe packets (what `px probe` does after a fallback).
fn dplpmtud_fallback(path: &Path, base: u16) -> (u16, u64) {
    let mut config = DplpmtudConfig::new(path.hops[0]);
    config.base_plpmtu = base.min(path.hops[0]);
    config.min_plpmtu = config.base_plpmtu.min(1200);
    config.strategy = SearchStrategy::lsquic_exact();
    let mut m = Dplpmtud::new(config).expect("valid");
    m.enable();
    let mut responder = Responder::new(ResponderConfig::default());
    let mut rtt = ClassicRtt::default();
    let mut now = Instant::now();
    let mut id = 0u32;
    while m.state() != State::SearchComplete {
        assert!(m.stats().probes_sent < 200, "DPLPMTUD did not converge");
        if let Some(size) = m.poll_probe(now, &rtt) {
            id += 1;
            rtt.on_packet_sent(u64::from(id));
            let mut payload = vec![0; usize::from(size - 28)];
            ProbeRepr { kind: ProbeKind::Confirm, nonce: 7, probe_id: id, ip_len: size }
                .emit(&mut payload)
                .expect("fits");
            let t = ProbeTransmit { probe_id: id, ip_len: size, dont_fragment: true, payload };
            deliver(path, &mut responder, now + ONE_WAY, &t);
            if let Some(reply) = responder.poll_transmit() {
                now += ONE_WAY * 2;
                let Ok(Reply::Report(r)) = wire::parse_reply(&reply.payload) else {
                    panic!("report expected");
                };
                assert!(r.confirm && r.nonce == 7);
                rtt.on_ack(RttSample {
                    latest_rtt: ONE_WAY * 2,
                    ack_delay: Duration::ZERO,
                    acked_packet_number: u64::from(r.probe_id),
                });
                m.on_probe_acked(now, r.largest_ip_len);
            }
            continue;
        }
        now = m.poll_timeout().expect("timer");
        m.handle_timeout(now);
    }
    (m.plpmtu(), m.stats().probes_sent)
}

#[test]
fn paper_figure_4_path() {
    // A 9 KB probe across routers down to 1000 bytes (paper Fig. 4).
    let mut path = Path::new(vec![9000, 4000, 1500, 1000, 1500]);
    let (p, r) = measure(&mut path, ProberConfig::new(9000));
    let res = p.result().expect("done");
    assert_eq!(res.outcome, Outcome::Exact { pmtu: 1000, method: Method::Refined });
    assert_eq!(res.estimate, Some(996));
    assert_eq!(res.round_trips, 2);
    assert_eq!(res.elapsed, ONE_WAY * 4);
    assert_eq!(r.stats().probes, 1);
    assert_eq!(r.stats().confirms, 5);
}

#[test]
fn lab_topologies_are_exact() {
    for (hops, want, rtts) in [
        (vec![9000, 1500, 1400], 1400, 2),
        (vec![9000, 4000, 1280], 1280, 2),
        (vec![1500], 1500, 1),
        // 1492 - 20 is a multiple of 8: the fragment equals the responder's
        // link MTU, exact without round 2.
        (vec![1500, 1492], 1492, 1),
        (vec![1500, 1492, 1500], 1492, 2),
        (vec![9000, 9000], 9000, 1),
    ] {
        for mode in [Mode::PacketSocket, Mode::RecvFragSize] {
            let mut path = Path::new(hops.clone());
            path.mode = mode;
            let (p, _) = measure(&mut path, ProberConfig::new(hops[0]));
            let res = p.result().expect("done");
            assert_eq!(res.pmtu(), Some(want), "{hops:?} {mode:?}");
            assert!(matches!(res.outcome, Outcome::Exact { .. }));
            assert_eq!(res.round_trips, rtts, "{hops:?}");
        }
    }
}

#[test]
fn legacy_probes_against_our_responder() {
    let mut path = Path::new(vec![1500, 1403]);
    let mut c = ProberConfig::new(1500);
    c.legacy_probes = true;
    let (p, r) = measure(&mut path, c);
    let res = p.result().expect("done");
    assert_eq!(res.pmtu(), Some(1403));
    assert!(res.legacy_replies);
    // Round 1, then 1403 down to the control 1396 (1404 is dropped on the way).
    assert_eq!(r.stats().legacy_probes, 9);
}

#[test]
fn fragment_filtering_path_falls_back_to_dplpmtud() {
    let mut path = Path::new(vec![9000, 1500, 1400]);
    path.filter_fragments = true;
    let (p, r) = measure(&mut path, ProberConfig::new(9000));
    let res = p.result().expect("done");
    assert_eq!(res.outcome, Outcome::Fallback { reason: FallbackReason::NoReply, lower_bound: None });
    assert_eq!(res.round_trips, 3);
    assert_eq!(r.stats().replies, 0);
    // DPLPMTUD over DF-set probes finds the exact answer.
    let (pmtu, probes) = dplpmtud_fallback(&path, 1200);
    assert_eq!(pmtu, 1400);
    assert!(probes > res.probes_sent.into());
}

fn hop_mtu() -> impl Strategy<Value = u16> {
    prop_oneof![prop::sample::select(vec![9000u16, 4000, 1500, 1492, 1480, 1460, 1400, 1380, 1280]), 576u16..=9000,]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Exact path MTU within two round trips on any loss-free path.
    #[test]
    fn exact_in_two_round_trips(
        link in hop_mtu(),
        hops in prop::collection::vec(hop_mtu(), 0..6),
        recvfragsize in any::<bool>(),
    ) {
        let mut all = vec![link];
        all.extend(hops);
        let mut path = Path::new(all);
        if recvfragsize {
            path.mode = Mode::RecvFragSize;
        }
        let want = path.pmtu();
        let (p, _) = measure(&mut path, ProberConfig::new(link));
        let res = p.result().expect("done");
        prop_assert_eq!(res.pmtu(), Some(want), "{:?}", res);
        let exact = matches!(res.outcome, Outcome::Exact { .. });
        prop_assert!(exact);
        prop_assert!(res.round_trips <= 2);
        prop_assert!(res.probes_sent <= 10);
        prop_assert!(res.elapsed <= ONE_WAY * 4);
    }

    /// With arbitrary losses of probes and replies the prober never claims
    /// more than the path carries, and an exact claim is at least `L`.
    #[test]
    fn losses_never_overestimate(
        link in hop_mtu(),
        hops in prop::collection::vec(hop_mtu(), 0..4),
        drop in prop::collection::vec(prop::bool::weighted(0.3), 0..40),
    ) {
        let mut all = vec![link];
        all.extend(hops);
        let mut path = Path::new(all);
        path.drop = drop;
        let want = path.pmtu();
        let (p, _) = measure(&mut path, ProberConfig::new(link));
        let res = p.result().expect("done");
        match res.outcome {
            Outcome::Exact { pmtu, .. } => {
                prop_assert!(pmtu <= want && pmtu + 7 >= want, "{} vs {}", pmtu, want);
            }
            Outcome::Range { low, .. } => prop_assert!(low <= want, "{} vs {}", low, want),
            Outcome::Estimate { .. } => prop_assert!(false, "refinement is on"),
            Outcome::Fallback { lower_bound, .. } => {
                prop_assert!(lower_bound.is_none_or(|l| l <= want));
            }
        }
        prop_assert!(res.round_trips <= 6);
    }
}
