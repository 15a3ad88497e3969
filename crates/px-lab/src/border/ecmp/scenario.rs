//! The ECMP run's scenario: the lab brought up (gateways, BGP with BFD,
//! two-path routes), the flow hash checked, then paced sha256-checked
//! flows both ways while gw1 is killed with SIGKILL and started again,
//! every flow's progress and each link's bytes sampled meanwhile. What it
//! saw goes to [`summarize`] as an [`Outcome`].

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use px_netns::gateway::GatewayProcess;
use px_netns::netns::Netns;
use px_netns::traffic::{FlowSender, ReceivedFlow, SentFlow, TrafficError, receive_flow, set_accept_timeout};

use super::config::{BFD_MULTIPLIER, HOST_A, HOST_L, Lab, PREFIX_A, PREFIX_L, bird_config};
use super::measure::{GwMetrics, Outcome, hash_symmetry, link_bytes, merged_share, scrape, summarize, wait_multipath};
use super::{EcmpOptions, EcmpResult, RawSample};
use crate::border::Scratch;
use crate::border::bird::Bird;
use crate::{RunError, exp};

/// Runs the ECMP failover experiment; `say` gets progress lines.
pub fn run(o: &EcmpOptions, say: &dyn Fn(&str)) -> Result<EcmpResult, RunError> {
    exp::require(
        "px lab border",
        &["bird", "birdc", "sha256sum", "ethtool"],
        1,
        "apt-get install bird2 (scripts/lib.sh)",
    )?;
    if o.flows == 0 || o.rate_mbps <= 0.0 {
        return Err(RunError::Step("ecmp: need at least one flow per direction and a positive rate".into()));
    }
    if ![1, 3].contains(&o.hash_policy) {
        return Err(RunError::Step(format!("ecmp: hash policy {} (1 or 3)", o.hash_policy)));
    }
    let Running { lab, scratch, mut gws, birds } = bring_up(o, say)?;
    say("ecmp: BGP established on both links, multipath routes installed; checking the flow hash");
    let hash = hash_symmetry(&lab, o.hash_tuples, o.hash_policy)?;
    say(&format!(
        "ecmp: hash symmetric for {:.0} % of tuples with equal seeds, {:.0} % with different seeds",
        hash.same_seed * 100.0,
        hash.different_seeds * 100.0
    ));

    // The transfers: flows 0..n from A to L, n..2n from L to A.
    let n = o.flows;
    let progress: Vec<AtomicU64> = (0..2 * n).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let srv_l: SocketAddr = format!("{HOST_L}:5001").parse().map_err(|e| format!("{e}"))?;
    let srv_a: SocketAddr = format!("{HOST_A}:5002").parse().map_err(|e| format!("{e}"))?;
    let stall_timeout = Duration::from_secs(30);
    let listen = |ns: &Netns, at: SocketAddr| -> Result<TcpListener, RunError> {
        let l = ns.run(|| TcpListener::bind(at))?.map_err(|e| format!("bind {at}: {e}"))?;
        set_accept_timeout(&l, Duration::from_secs(10)).map_err(|e| format!("accept timeout: {e}"))?;
        Ok(l)
    };
    let (l_l, l_a) = (listen(lab.ns(lab.host_l), srv_l)?, listen(lab.ns(lab.host_a), srv_a)?);
    let chunk = 64 * 1024;
    let gap = Duration::from_secs_f64(chunk as f64 * 8.0 / (o.rate_mbps * 1e6));
    let t0 = Instant::now();
    let mut samples_raw: Vec<RawSample> = Vec::new();
    let mut route_converged_ms = None;
    let (mut yield_before, mut yield_after, mut data_after) = (None, None, 0);
    let outcome = std::thread::scope(|sc| -> Result<_, RunError> {
        let (progress, stop) = (&progress, &stop);
        // Whatever way this closure leaves, the senders and the sampler stop
        // (the scope joins them before it returns).
        let _stop = StopOnDrop(stop);
        let recv = |l: &TcpListener, base: usize| {
            let l = l.try_clone().map_err(|e| TrafficError::Io { what: "listener".into(), source: e })?;
            Ok::<_, TrafficError>(sc.spawn(move || -> Result<Vec<ReceivedFlow>, TrafficError> {
                std::thread::scope(|inner| {
                    let mut hs = Vec::new();
                    for i in 0..n {
                        let (s, _) = l.accept().map_err(|e| TrafficError::Io { what: "accept".into(), source: e })?;
                        let p = &progress[base + i];
                        hs.push(inner.spawn(move || receive_flow(s, stall_timeout, p, true)));
                    }
                    hs.into_iter()
                        .map(|h| h.join().map_err(|_| px_netns::LabError::Panicked("receiver".into()))?)
                        .collect()
                })
            }))
        };
        let r_l = recv(&l_l, 0).map_err(|e| e.to_string())?;
        let r_a = recv(&l_a, n).map_err(|e| e.to_string())?;
        let plan: Vec<(&Netns, SocketAddr, u64)> = (0..n as u64)
            .map(|f| (lab.ns(lab.host_a), srv_l, f))
            .chain((0..n as u64).map(|f| (lab.ns(lab.host_l), srv_a, 100 + f)))
            .collect();
        let mut senders = Vec::new();
        for (client, server, flow) in plan {
            senders.push(sc.spawn(move || -> Result<SentFlow, TrafficError> {
                client.run(|| {
                    let mut s = FlowSender::connect(server, flow, None, stall_timeout, true)?;
                    while !stop.load(Ordering::Relaxed) {
                        s.send(chunk)?;
                        std::thread::sleep(gap);
                    }
                    s.finish()
                })?
            }));
        }
        // Sample until the end; kill and restart on the way.
        let ra_ns = lab.ns(lab.ra);
        let sampler = sc.spawn(move || -> Result<Vec<RawSample>, RunError> {
            let _in = ra_ns.enter()?;
            let mut out = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let links = link_bytes(&["g1", "g2"]);
                let p = progress.iter().map(|p| p.load(Ordering::Relaxed)).collect();
                out.push((t0.elapsed().as_secs_f64(), p, links));
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(out)
        });
        std::thread::sleep(o.before_kill);
        let merged = merged_share(lab.ns(lab.host_a), srv_a.port());
        let m0 = scrape(lab.ns(lab.gws[1]));
        let gw1 = gws[0].take().ok_or("gw1 gone")?;
        let k = Instant::now();
        gw1.kill()?;
        let kill_at = t0.elapsed().as_secs_f64();
        say(&format!("ecmp: kill -9 gw1 at {kill_at:.2} s"));
        let m1 = scrape(lab.ns(lab.gws[1]));
        route_converged_ms = wait_multipath(lab.ns(lab.ra), PREFIX_L, 1, Duration::from_secs(5))
            .ok()
            .map(|()| k.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(o.down.saturating_sub(k.elapsed()));
        let m2 = scrape(lab.ns(lab.gws[1]));
        gws[0] = Some(lab.start_gateway(0, o)?);
        let restart_at = t0.elapsed().as_secs_f64();
        say(&format!("ecmp: gw1 started again at {restart_at:.2} s"));
        if let (Ok(m0), Ok(m1), Ok(m2)) = (&m0, &m1, &m2) {
            yield_before = m1.yield_since(&GwMetrics::default());
            yield_after = m2.yield_since(m1);
            data_after = m2.data_out.saturating_sub(m1.data_out);
            let _ = m0;
        }
        // BGP over gw1 comes back after BFD and the error wait.
        let back = birds[0].wait_established(&["via1"], Duration::from_secs(20));
        std::thread::sleep(o.after_restart);
        stop.store(true, Ordering::Relaxed);
        back.map_err(|e| RunError::Step(format!("BGP over the restarted gw1: {e}")))?;
        let sent: Vec<Result<SentFlow, TrafficError>> = senders
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(px_netns::LabError::Panicked("sender".into()).into())))
            .collect();
        let got_l = r_l.join().map_err(|_| "receiver panicked")?;
        let got_a = r_a.join().map_err(|_| "receiver panicked")?;
        samples_raw = sampler.join().map_err(|_| "sampler panicked")??;
        Ok((sent, got_l, got_a, kill_at, restart_at, merged))
    })?;
    let (sent, got_l, got_a, kill_at, restart_at, merged) = outcome;
    let ra_log = std::fs::read_to_string(Bird::log_path(&scratch.0, "ra")).unwrap_or_default();
    summarize(
        o,
        Outcome {
            hash,
            merged,
            ra_log,
            sent,
            got_l,
            got_a,
            kill_at,
            restart_at,
            samples_raw,
            route_converged_ms,
            yield_before,
            yield_after,
            data_after,
        },
    )
}

/// What [`bring_up`] leaves running.
struct Running {
    lab: Lab,
    scratch: Scratch,
    gws: [Option<GatewayProcess>; 2],
    birds: Vec<Bird>,
}

/// The namespaces, both gateways and BIRD on both routers, until BGP and
/// BFD are up on both links, both routers hold a two-path route and the
/// hosts reach each other.
fn bring_up(o: &EcmpOptions, say: &dyn Fn(&str)) -> Result<Running, RunError> {
    let lab = Lab::build(o.hash_policy)?;
    let scratch = Scratch::new("ecmp")?;
    let gws = [Some(lab.start_gateway(0, o)?), Some(lab.start_gateway(1, o)?)];
    say(&format!(
        "ecmp: two gateways up; starting BIRD (eBGP over each gateway, BFD {} ms x {BFD_MULTIPLIER})",
        o.bfd_ms
    ));
    let birds = [lab.ra, lab.rx]
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let name = ["ra", "rx"][i];
            let log = Bird::log_path(&scratch.0, name);
            Bird::start(lab.ns(*ns), &scratch.0, name, &bird_config(&log.to_string_lossy(), i, o.bfd_ms))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RunError::Step(e.to_string()))?;
    for b in &birds {
        b.wait_established(&["via1", "via2"], Duration::from_secs(30)).map_err(|e| RunError::Step(e.to_string()))?;
    }
    // BFD up on both links on both routers: otherwise a dead gateway is
    // found only by the BGP hold timer.
    for b in &birds {
        b.wait_for("BFD sessions up on both links", Duration::from_secs(20), |b| {
            let out = b.birdc(&["show", "bfd", "sessions"])?;
            Ok((out.lines().filter(|l| l.contains(" Up ")).count() >= 2, out))
        })
        .map_err(|e| RunError::Step(e.to_string()))?;
    }
    wait_multipath(lab.ns(lab.ra), PREFIX_L, 2, Duration::from_secs(10))?;
    wait_multipath(lab.ns(lab.rx), PREFIX_A, 2, Duration::from_secs(10))?;
    lab.ns(lab.host_a).ping(HOST_L, 3)?;
    Ok(Running { lab, scratch, gws, birds })
}

/// Sets the flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
