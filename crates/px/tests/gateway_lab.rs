//! Root integration tests of `px gateway` on real Linux ports: the real
//! binary in a gateway namespace between a legacy host (MTU 1500) and a
//! b-network host (MTU 9000) on one subnet (the topology of `px lab demo`).
//! Each test skips with a message when not root, and tears down its
//! namespaces and processes on every path (guards). The tests take a
//! shared lock: they are CPU-bound on a 2-core machine.

mod common;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use common::*;
use px_gateway::FlushReason;
use px_lab::{FrameObserver, require_root_or_skip};

fn check_translated(exit: &GatewayExit) {
    exit.assert_clean();
    // The gateway did its job on this traffic, not merely forwarded it.
    assert!(exit.counter("mss_raised") >= 1, "{}", exit.stats);
    assert!(exit.counter("mss_clamped") >= 1, "{}", exit.stats);
    assert!(exit.counter("merged_out") > 0, "{}", exit.stats);
    // Outbound 9000-byte segments reach the legacy host cut to 1500 (the
    // observers of the MSS test count that; here the bytes are what matter).
}

#[test]
fn ipv4_transfers_are_sha256_exact_both_ways() {
    let Some((_serial, lab, gw)) = lab_with_gateway("ipv4_transfers_are_sha256_exact_both_ways") else {
        return;
    };
    transfers_both_ways(&lab, LEGACY_V4, BNET_V4, 5301);
    check_translated(&gw.stop());
}

/// As above over IPv6, with two gateway workers: the ports' fan-out keeps
/// both directions of a flow on one worker, whose engine saw its SYN.
#[test]
fn ipv6_transfers_are_sha256_exact_both_ways() {
    if !require_root_or_skip("ipv6_transfers_are_sha256_exact_both_ways") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    // Two workers, and the mmap receive ring (the default is recvmmsg), so
    // both receive paths carry a sha256-checked transfer.
    let gw = Gateway::start(&lab, &["--workers", "2", "--metrics", "127.0.0.1:9464", "--rx-ring"]);
    lab.ping_both();
    transfers_both_ways(&lab, LEGACY_V6, BNET_V6, 5311);
    // Both workers carried traffic (the Prometheus endpoint, read inside
    // the gateway's namespace after its workers' next publication).
    std::thread::sleep(Duration::from_millis(300));
    let text = metrics(&lab, "127.0.0.1:9464");
    for w in ["0", "1"] {
        let rx = metric(&text, &format!("px_gateway_packets_total{{worker=\"{w}\",port=\"outer\",direction=\"rx\"}}"));
        let raised = metric(&text, &format!("px_gateway_mss_raised_total{{worker=\"{w}\"}}"));
        assert!(rx > 100.0 && raised >= 1.0, "worker {w}: {rx} frames, {raised} SYNs:\n{text}");
    }
    check_translated(&gw.stop());
}

/// The b-network host's sockets use the large MSS while the legacy host's
/// use the small one, and independent observers in the hosts' namespaces
/// see no frame above 1500 bytes on the outer link and 9000-byte frames on
/// the inner link, in both directions, IPv4 and IPv6.
#[test]
fn bnet_host_uses_the_large_mss_and_links_carry_their_mtu() {
    let Some((_serial, lab, gw)) = lab_with_gateway("bnet_host_uses_the_large_mss_and_links_carry_their_mtu") else {
        return;
    };
    // MSS = MTU - IP header - TCP header - 12 bytes of timestamps (the
    // kernel's snd_mss excludes the options every segment carries).
    for (legacy, bnet, small, large, port) in
        [(LEGACY_V4, BNET_V4, 1448, 8948, 5321), (LEGACY_V6, BNET_V6, 1428, 8928, 5323)]
    {
        large_mss_inside_small_outside(&lab, legacy, bnet, [small, large], port);
    }
    let exit = gw.stop();
    exit.assert_clean();
    let y = exit.stats["yield"].as_f64().unwrap_or(0.0);
    eprintln!("gateway yield {y:.3}");
    assert!(y > 0.5, "conversion yield {y}: {}", exit.stats);
}

/// As above with both hosts' TCP set unlike Linux's defaults: no
/// timestamps (Windows' default), no SACK, no window scaling. Segments
/// carry no options at all, so a full one holds 12 bytes more than with
/// timestamps; the gateway must merge to that size and cut to it, and no
/// frame may exceed either link's MTU.
#[test]
fn hosts_without_timestamps_sack_or_window_scaling() {
    if !require_root_or_skip("hosts_without_timestamps_sack_or_window_scaling") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    for ns in [lab.legacy, lab.bnet] {
        for key in ["net.ipv4.tcp_timestamps", "net.ipv4.tcp_sack", "net.ipv4.tcp_window_scaling"] {
            lab.ns(ns).set_sysctl(key, "0").unwrap();
        }
    }
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    // MSS = MTU - IP header - 20 bytes of TCP header, no options.
    for (legacy, bnet, small, large, port) in
        [(LEGACY_V4, BNET_V4, 1460, 8960, 5325), (LEGACY_V6, BNET_V6, 1440, 8940, 5327)]
    {
        large_mss_inside_small_outside(&lab, legacy, bnet, [small, large], port);
    }
    let exit = gw.stop();
    exit.assert_clean();
    eprintln!("gateway yield {:.3}", exit.stats["yield"].as_f64().unwrap_or(0.0));
    assert!(exit.counter("merged_in") > 0 && exit.counter("split_in") + exit.counter("gso_out") > 0, "{}", exit.stats);
}

/// One 8 MB transfer each way between `legacy` and `bnet` (port, port + 1),
/// SHA-256 checked, with observers on both hosts' links: the legacy host
/// sends and receives segments of the `small` MSS, the b-network host of
/// the `large` one (merged inbound, cut outbound), and each link carries
/// frames up to its MTU and no larger.
fn large_mss_inside_small_outside(lab: &GwLab, legacy: &str, bnet: &str, [small, large]: [u32; 2], port: u16) {
    let obs_outer = FrameObserver::start(lab.ns(lab.legacy), LEGACY_DEV).unwrap();
    let obs_inner = FrameObserver::start(lab.ns(lab.bnet), BNET_DEV).unwrap();
    let (inbound, outbound) = exact_both_ways(lab, legacy, bnet, port, 1, 8 << 20);
    let (outer, inner) = (obs_outer.stop(), obs_inner.stop());
    let (i, o) = (&inbound[0], &outbound[0]);
    eprintln!("{legacy}: inbound sender {:?} receiver {:?}", i.sender, i.receiver);
    eprintln!("{legacy}: outbound sender {:?} receiver {:?}", o.sender, o.receiver);
    eprintln!("{legacy}: outer link {outer:?}\n{legacy}: inner link {inner:?}");
    // Inbound: the legacy host sends small segments, the b-network host
    // receives merged ones.
    assert_eq!(i.sender.snd_mss, small, "legacy sender");
    assert_eq!(i.receiver.rcv_mss, large, "b-network receiver: merged segments");
    // Outbound: the b-network host sends with the large MSS (its peer's
    // SYN MSS was raised), the legacy host receives split segments.
    assert_eq!(o.sender.snd_mss, large, "b-network sender");
    assert_eq!(o.receiver.rcv_mss, small, "legacy receiver: split segments");
    // The observers count what crosses each link in each direction.
    assert!(outer.tx.max_l3 <= EMTU as usize && outer.rx.max_l3 <= EMTU as usize, "{outer:?}");
    assert!(outer.tx.frames > 5000 && outer.rx.frames > 5000, "{outer:?}");
    assert_eq!(inner.rx.max_l3, IMTU as usize, "merged frames on the inner link: {inner:?}");
    assert_eq!(inner.tx.max_l3, IMTU as usize, "large frames sent by the b-network host: {inner:?}");
    // Most data frames on the inner link are full: ~8 MB in 9000-byte frames.
    assert!(inner.rx.up_to_9000 > 700 && inner.tx.up_to_9000 > 700, "{inner:?}");
}

/// A connection opened before the gateway starts: the gateway never sees
/// its SYN. Frames cannot pass a stopped gateway at all, so the connections
/// are opened (and carry data) through a Linux bridge joining the same two
/// ports; mid-transfer the bridge is removed and `px gateway` started on
/// the ports. Frames sent in between are lost and TCP retransmits them.
/// The transfers must complete byte-exact, and the gateway must have
/// tracked the inbound flow it picked up mid-stream without merging it
/// beyond the safe size (one outer-sized segment): it never saw what the
/// inner host announced, so the b-network receiver sees no segment above
/// 1448.
#[test]
fn connection_opened_before_the_gateway_starts() {
    if !require_root_or_skip("connection_opened_before_the_gateway_starts") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    lab.bridge();
    lab.ping_both();
    let progress = AtomicU64::new(0);
    let bytes = 12 << 20;
    // ~16 MB/s per flow: the switch-over happens a quarter of the way in.
    let pace = Pace { chunk: 16 << 10, gap: Duration::from_millis(1) };
    let stall = Duration::from_secs(15);
    let inbound = BulkSpec {
        server: sock(BNET_V4, 5331),
        flows: 1,
        bytes_per_flow: bytes,
        pace,
        stall_timeout: stall,
        sha256: true,
    };
    let outbound = BulkSpec { server: sock(LEGACY_V4, 5332), ..inbound };
    let (ends_in, ends_out, exit) = std::thread::scope(|s| {
        let i = s.spawn(|| transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), inbound, &progress));
        let o = s.spawn(|| transfer(lab.ns(lab.bnet), lab.ns(lab.legacy), outbound, &progress));
        let t0 = std::time::Instant::now();
        while progress.load(std::sync::atomic::Ordering::Relaxed) < 4 << 20 {
            assert!(t0.elapsed() < Duration::from_secs(10), "no progress through the bridge");
            std::thread::sleep(Duration::from_millis(5));
        }
        let before = progress.load(std::sync::atomic::Ordering::Relaxed);
        lab.unbridge();
        let gw = Gateway::start(&lab, &[]);
        eprintln!("gateway started after {before} bytes had crossed the bridge");
        let (ends_in, ends_out) = (i.join().unwrap(), o.join().unwrap());
        (ends_in, ends_out, gw.stop())
    });
    assert_exact(&ends_in, bytes);
    assert_exact(&ends_out, bytes);
    exit.assert_clean();
    let (i, o) = (&ends_in[0], &ends_out[0]);
    eprintln!("inbound {i:?}\noutbound {o:?}\n{}", exit.stats);
    // Negotiated through the bridge: both ends send with the legacy MSS.
    assert_eq!(i.sender.snd_mss, 1448);
    assert_eq!(o.sender.snd_mss, 1448);
    // The gateway saw no SYN, yet tracked the inbound flow; it merges it no
    // further than the safe size, one outer-sized segment (issue 10, item
    // 5), so its segments pass at their own size.
    assert_eq!(exit.counter("mss_raised") + exit.counter("mss_clamped"), 0, "{}", exit.stats);
    assert!(exit.counter("flows_created") >= 2, "{}", exit.stats);
    assert_eq!(i.receiver.rcv_mss, 1448, "the b-network receiver got nothing beyond the safe size");
}

/// 2 % loss on the legacy side (an impairment element between the legacy
/// host and the gateway's outer port): retransmissions and holes pass the
/// gateway without corruption or stall, both directions, several flows,
/// IPv4 and IPv6.
#[test]
fn loss_on_the_legacy_side_neither_corrupts_nor_stalls() {
    if !require_root_or_skip("loss_on_the_legacy_side_neither_corrupts_nor_stalls") {
        return;
    }
    let _serial = serialize();
    let mut lab = GwLab::build(Some(0.02));
    let gw = Gateway::start(&lab, &[]);
    // Neighbour resolution may lose a frame too: retry.
    assert!((0..5).any(|_| lab.ns(lab.legacy).ping(BNET_V4, 2).is_ok()), "no ping through the loss");
    let progress = AtomicU64::new(0);
    let bytes = 3 << 20;
    let t0 = std::time::Instant::now();
    let stall = Duration::from_secs(20);
    let inbound = BulkSpec {
        server: sock(BNET_V4, 5341),
        flows: 4,
        bytes_per_flow: bytes,
        pace: Pace::FULL,
        stall_timeout: stall,
        sha256: true,
    };
    let ends_in = transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), inbound, &progress);
    let outbound = BulkSpec { server: sock(LEGACY_V4, 5342), ..inbound };
    let ends_out = transfer(lab.ns(lab.bnet), lab.ns(lab.legacy), outbound, &progress);
    assert_exact(&ends_in, bytes);
    assert_exact(&ends_out, bytes);
    // IPv6 too, two flows each way.
    let inbound6 = BulkSpec { server: sock(BNET_V6, 5343), flows: 2, ..inbound };
    let ends_in6 = transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), inbound6, &progress);
    assert_exact(&ends_in6, bytes);
    let outbound6 = BulkSpec { server: sock(LEGACY_V6, 5344), ..inbound6 };
    let ends_out6 = transfer(lab.ns(lab.bnet), lab.ns(lab.legacy), outbound6, &progress);
    assert_exact(&ends_out6, bytes);
    assert!(ends_out6.iter().all(|e| e.sender.snd_mss == 8928));
    let took = t0.elapsed();
    let exit = gw.stop();
    exit.assert_clean();
    let imp = lab.line.impairment.take().unwrap().stop();
    let retrans_in: u32 = ends_in.iter().map(|e| e.sender.total_retrans).sum();
    let retrans_out: u32 = ends_out.iter().map(|e| e.sender.total_retrans).sum();
    eprintln!("{took:?}; impairment {imp:?}; retransmits in {retrans_in} out {retrans_out}\n{}", exit.stats);
    // The loss was real, in both directions, and TCP recovered from it.
    assert!(imp.lost[0] > 20 && imp.lost[1] > 20, "{imp:?}");
    assert!(retrans_in > 0 && retrans_out > 0);
    // The merge saw the holes and retransmissions: it flushed out of order.
    assert!(exit.flushes(FlushReason::OutOfOrder) > 0, "{}", exit.stats);
    assert!(exit.counter("merged_out") > 0, "{}", exit.stats);
    // Still the large MSS inside.
    assert!(ends_out.iter().all(|e| e.sender.snd_mss == 8948));
}

/// One stop of the gateway in the middle of 8 bulk flows (see
/// `sigterm_mid_transfer_flushes_what_was_held_and_restores_ports`). Checks
/// every invariant of the stop and returns how many holds it flushed.
fn stop_mid_transfer(lab: &GwLab, port: u16) -> u64 {
    use std::sync::atomic::{AtomicBool, Ordering};
    // Then mid-transfer, with every frame handled in software: GRO cuts
    // super-packets at PSH, so with it the engine seldom holds anything
    // between two packets (measured: all holds under 1 µs); frame by frame
    // it holds between PSHs, which is what this stop must find.
    // Counts every frame reaching the b-network host's link from now on.
    let inner_obs = FrameObserver::start(lab.ns(lab.bnet), BNET_DEV).unwrap();
    // PSH may ride (`--psh hold`): between full segments every flow then
    // holds a partial one until the 10 ms timeout, so the stop is sure to
    // find data held (with PSH flushing, all eight flows were sometimes
    // between holds at the instant of the stop, and the test could not
    // show the flush).
    let gw = Gateway::start(lab, &["--merge-timeout-us", "10000", "--no-gro-gso", "--psh", "hold"]);
    let flows = 8;
    let server = sock(BNET_V4, port);
    let listener = lab.ns(lab.bnet).run(|| std::net::TcpListener::bind(server)).unwrap().unwrap();
    let stall = Duration::from_secs(15);
    set_accept_timeout(&listener, stall);
    let (progress, stopped, finish) = (AtomicU64::new(0), AtomicBool::new(false), AtomicBool::new(false));
    let (ends, exit, inner) = std::thread::scope(|s| {
        let receivers = s.spawn(|| {
            let mut hs = Vec::new();
            for _ in 0..flows {
                let (c, _) = listener.accept().expect("accept");
                hs.push(s.spawn(|| receive_flow(c, stall, &progress, true).expect("receive")));
            }
            let mut r: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            r.sort_by_key(|x| x.flow);
            r
        });
        let senders: Vec<_> = (0..flows as u64)
            .map(|flow| {
                let (stopped, finish) = (&stopped, &finish);
                let legacy = lab.ns(lab.legacy);
                s.spawn(move || {
                    let _in = legacy.enter().unwrap();
                    let mut c = FlowSender::connect(server, flow, None, stall, true).unwrap();
                    // Phase 1: bulk writes until the gateway has exited.
                    while !stopped.load(Ordering::Relaxed) {
                        c.send(1 << 20).unwrap();
                    }
                    // Phase 2: once a bridge carries frames, a normal tail.
                    while !finish.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    c.send(64 << 10).unwrap();
                    c.finish().unwrap()
                })
            })
            .collect();
        let t0 = std::time::Instant::now();
        while progress.load(Ordering::Relaxed) < 8 << 20 {
            assert!(t0.elapsed() < Duration::from_secs(10), "no progress through the gateway");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Stop while data moves: flows that wait out a retransmit timeout
        // (a loaded machine, a debug build) hold nothing. Up to 2 s for
        // 64 KB to reach the receivers within 10 ms.
        let t1 = std::time::Instant::now();
        loop {
            let p0 = progress.load(Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(10));
            if progress.load(Ordering::Relaxed) - p0 >= 64 << 10 || t1.elapsed() > Duration::from_secs(2) {
                break;
            }
        }
        let exit = gw.stop();
        stopped.store(true, Ordering::Relaxed);
        let inner = inner_obs.stop();
        lab.bridge();
        finish.store(true, Ordering::Relaxed);
        let sent: Vec<_> = senders.into_iter().map(|h| h.join().unwrap()).collect();
        (sent.into_iter().zip(receivers.join().unwrap()).collect::<Vec<_>>(), exit, inner)
    });
    eprintln!("stopped in {:?}\n{}", exit.stop_time, exit.stats);
    exit.assert_clean();
    assert!(exit.stop_time < Duration::from_secs(1), "stop took {:?}", exit.stop_time);
    assert!(exit.counter("merged_out") > 0, "{}", exit.stats);
    // Every frame the gateway sent on its inner port, the shutdown flush
    // included, arrived at the b-network host (an observer there counted
    // at least as many; the host's kernel may add its own, e.g. MLD).
    let sent_inner = exit.stats["counters"]["inner"]["tx_packets"].as_u64().unwrap_or(u64::MAX);
    eprintln!("gateway inner tx {sent_inner}, observed at the b-network host {}", inner.rx.frames);
    assert!(inner.rx.frames >= sent_inner, "{sent_inner} frames sent, {} arrived", inner.rx.frames);
    for (flow, (sent, got)) in ends.iter().enumerate() {
        assert_eq!(sent.bytes, got.bytes, "flow {flow}");
        assert_eq!(sent.sha256, got.sha256, "flow {flow}: sha256 differs");
    }
    lab.unbridge();
    exit.flushes(FlushReason::Shutdown)
}

/// Stopping the gateway. First with offloads (the default), idle: it turns
/// GRO on and joins promiscuous mode, and puts both back at exit (GRO was
/// off before, promiscuity 0). Then mid-transfer, frame by frame
/// (`--no-gro-gso`, 10 ms merge timeout): 8 inbound bulk flows in 1 MiB
/// writes, so between two PSHs (set when a write ends or the sender waits
/// for buffer space) the gateway holds a partial merged segment. SIGTERM
/// arrives while the flows keep sending: it must exit 0 promptly, having
/// flushed what it held (shutdown flushes counted, nothing held or unsent
/// at exit), ports restored again. Then a Linux bridge takes its place and
/// the flows finish: SHA-256 equal at both ends shows nothing it flushed
/// was corrupt, lost for good or duplicated.
#[test]
fn sigterm_mid_transfer_flushes_what_was_held_and_restores_ports() {
    if !require_root_or_skip("sigterm_mid_transfer_flushes_what_was_held_and_restores_ports") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    lab.gateway_ports_gro_off();
    let before = lab.gateway_ports();
    // First with offloads (the default): the gateway turns GRO on and
    // joins promiscuous mode, and puts both back at exit.
    let gw = Gateway::start(&lab, &[]);
    let during = lab.gateway_ports();
    lab.ping_both();
    gw.stop().assert_clean();
    let after = lab.gateway_ports();
    for (b, d) in before.iter().zip(&during) {
        assert_eq!((b.gro, b.promiscuity), (Some(false), Some(0)), "{b:?}");
        // On DPDK's AF_PACKET driver, which reads frames and not the
        // kernel's super-packets, GRO stays off.
        assert_eq!(d.gro, Some(!dpdk_datapath()), "the gateway turns GRO on (AF_PACKET): {d:?}");
        assert!(d.promiscuity.unwrap_or(0) >= 1, "the gateway's sockets are promiscuous: {d:?}");
    }
    assert_eq!(before, after, "ports not restored");
    // Then mid-transfer. Whether data is held at the instant of the stop
    // depends on where the eight flows are (a flow stalled on a retransmit
    // timeout holds nothing), so the stop is tried up to six times; every
    // try must keep every invariant, and at least one must catch data held
    // and flush it (a single try missed in about one CI run in four; on the
    // DPDK datapath, which fills each merge within one burst, in 2 of 8
    // tries at a load of 4, and all three tries missed in 1 run of 5).
    let mut flushed = 0;
    for attempt in 0..6u16 {
        flushed = stop_mid_transfer(&lab, 5351 + 10 * attempt);
        if flushed >= 1 {
            break;
        }
        eprintln!("try {attempt}: nothing was held at the stop; trying again");
    }
    assert!(flushed >= 1, "in six tries, nothing was held at the stop");
    let after = lab.gateway_ports();
    assert_eq!(before, after, "ports not restored");
}
