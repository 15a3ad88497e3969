//! The start phase: everything a gateway sets up before it forwards, in
//! order, each step refused before the next touches anything — the
//! configuration and the ports' MTUs, the port locks, the datapath (ports
//! captured and set up, the kernel fast path), one engine and one
//! [`Ports`] per worker, the capture, the metrics endpoint, the control
//! socket, the start lines of the log, the worker threads and the iMTU
//! follower. What is set up lives in a [`Running`], which takes it down in
//! order however the start ends.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use px_gateway::Engine;

use crate::logging::{info, warn};

use super::capture::{self, Tap};
use super::datapath::Ports;
use super::datapath::af_packet::{AfPacket, AfPacketPorts};
use super::datapath::dpdk::{Dpdk, DpdkPorts};
use super::link_fault::LinkWatch;
use super::running::{Datapath, Running};
use super::worker::{LiveConfig, Worker};
use super::{
    DatapathKind, FastPathMode, GatewayConfig, GatewayError, LockError, PortLock, control, imtu, lock, metrics, status,
};

/// What every worker's engine shares with the others.
struct Common {
    config: px_gateway::Config,
    /// One path MTU cache for all workers: an ICMP error reaches one of
    /// them, and must apply to the flow on every one.
    pmtu: Arc<px_gateway::SharedPmtu>,
    /// Verified neighbour iMTUs (issue 30), published by the follower.
    imtu: Option<Arc<px_gateway::SharedImtu>>,
}

/// What the start phase needs of a datapath, once it is up.
pub(super) trait Setup: Sized {
    type Ports: Ports + Send + 'static;
    /// The port MTUs the engine runs with (imtu, emtu).
    fn mtus(&self) -> (u16, u16);
    /// What of the engine's configuration the datapath decides (which
    /// ports cut GSO frames themselves).
    fn engine_config(&self, _c: &mut px_gateway::Config) {}
    /// Gives a worker's engine what the datapath offers it.
    fn prepare(&self, _engine: &mut Engine) {}
    /// Worker `index`'s ports.
    fn open(&self, cfg: &GatewayConfig, index: usize) -> Result<Self::Ports, GatewayError>;
    /// The part the running gateway keeps and takes down after the workers.
    fn running(self) -> Datapath;
}

impl Setup for AfPacket {
    type Ports = AfPacketPorts;
    fn mtus(&self) -> (u16, u16) {
        AfPacket::mtus(self)
    }
    fn engine_config(&self, c: &mut px_gateway::Config) {
        AfPacket::engine_config(self, c);
    }
    fn prepare(&self, engine: &mut Engine) {
        AfPacket::prepare(self, engine);
    }
    fn open(&self, cfg: &GatewayConfig, _index: usize) -> Result<AfPacketPorts, GatewayError> {
        AfPacket::open(self, cfg, cfg.batch)
    }
    fn running(self) -> Datapath {
        Datapath::AfPacket(self)
    }
}

impl Setup for Dpdk {
    type Ports = DpdkPorts;
    fn mtus(&self) -> (u16, u16) {
        Dpdk::mtus(self)
    }
    fn engine_config(&self, c: &mut px_gateway::Config) {
        Dpdk::engine_config(self, c);
    }
    fn open(&self, cfg: &GatewayConfig, index: usize) -> Result<DpdkPorts, GatewayError> {
        Ok(Dpdk::open(self, index, cfg.batch))
    }
    fn running(self) -> Datapath {
        Datapath::Dpdk(self)
    }
}

impl Running {
    /// Sets the gateway up and starts its workers.
    pub(super) fn start(cfg: &GatewayConfig, stop: Arc<AtomicBool>) -> Result<Running, GatewayError> {
        let cfg = &cfg.clone().with_port_names();
        cfg.validate()?;
        // A configured feature that cannot work here is refused before
        // anything is touched.
        if let Some(f) = &cfg.imtu_follow {
            imtu::check(f).map_err(|source| GatewayError::ImtuFollow { table: f.table, source })?;
        }
        let mut r = Running::new(cfg, stop);
        // One gateway per port, refused before anything is touched.
        r.locks = lock_ports(cfg)?;
        match cfg.datapath {
            DatapathKind::AfPacket => {
                let af = AfPacket::start(cfg)?;
                if let Ok(fp) = af.fast_path() {
                    *r.shared.kernel.lock().unwrap_or_else(|p| p.into_inner()) = Some(fp.stats());
                }
                // Kernel ports: their carrier is watched (and passed on).
                let watch = LinkWatch::new(&cfg.inner, &cfg.outer, &cfg.link_fault, r.shared.process.clone());
                r.link = Some(watch.map_err(|source| GatewayError::Port {
                    key: "inner",
                    port: cfg.inner.clone(),
                    source,
                })?);
                r.start_with(cfg, af)?;
            }
            DatapathKind::Dpdk => {
                let dpdk = Dpdk::start(cfg)?;
                r.start_with(cfg, dpdk)?;
            }
        }
        Ok(r)
    }

    /// The rest of the start, the datapath up: engines, workers, capture,
    /// endpoints, log lines, threads.
    fn start_with<D: Setup>(&mut self, cfg: &GatewayConfig, dp: D) -> Result<(), GatewayError> {
        let (imtu, emtu) = dp.mtus();
        let mut ecfg = cfg.engine_config(imtu, emtu, os_random_seed())?;
        dp.engine_config(&mut ecfg);
        self.engine = ecfg.clone();
        self.live = Arc::new(LiveConfig::new(ecfg.clone()));
        *self.live_status.lock().unwrap_or_else(|p| p.into_inner()) = super::reload::status_config(cfg, &ecfg);
        let common = Common {
            pmtu: px_gateway::SharedPmtu::new(ecfg.pmtu_cache_size, ecfg.pmtu_lifetime),
            imtu: cfg.imtu_follow.as_ref().map(|f| px_gateway::SharedImtu::new(f.max_prefixes)),
            config: ecfg,
        };
        let taps = self.start_capture(cfg)?;
        let mut workers = Vec::new();
        for (index, tap) in taps.into_iter().enumerate() {
            let mut engine = common.engine()?;
            dp.prepare(&mut engine);
            let ports = dp.open(cfg, index)?;
            workers.push(self.worker(index, engine, ports, cfg.batch, tap));
        }
        self.datapath = Some(dp.running());
        self.serve(cfg, (imtu, emtu), &common)?;
        log_start(self, cfg, &common.config, (imtu, emtu));
        self.spawn(workers)?;
        self.follow_imtu(cfg, &common)
    }

    /// The capture writer, if configured; one tap per worker (`None`s
    /// without a capture).
    fn start_capture(&mut self, cfg: &GatewayConfig) -> Result<Vec<Option<Tap>>, GatewayError> {
        let Some(spec) = cfg.capture_spec() else { return Ok((0..cfg.workers).map(|_| None).collect()) };
        let (taps, h) = capture::start(&spec, cfg.workers, self.shared.process.clone())
            .map_err(|source| GatewayError::Capture { path: spec.path.display().to_string(), source })?;
        self.capture = Some((spec, h));
        Ok(taps.into_iter().map(Some).collect())
    }

    fn worker<P: Ports>(&self, index: usize, engine: Engine, ports: P, batch: usize, tap: Option<Tap>) -> Worker<P> {
        Worker { index, engine, ports, batch, live: self.live.clone(), tap }
    }

    /// The metrics endpoint and the control socket.
    fn serve(&mut self, cfg: &GatewayConfig, (imtu, emtu): (u16, u16), common: &Common) -> Result<(), GatewayError> {
        if let Some(addr) = cfg.metrics {
            let h = metrics::serve(addr, self.shared.clone(), self.stop.clone())
                .map_err(|source| GatewayError::Metrics { addr, source })?;
            self.metrics = Some(h);
        }
        let source = control::Source {
            id: status::Identity {
                version: env!("CARGO_PKG_VERSION").to_string(),
                pid: std::process::id(),
                outer: (cfg.outer.clone(), emtu),
                inner: (cfg.inner.clone(), imtu),
            },
            config: self.live_status.clone(),
            shared: self.shared.clone(),
            pmtu: common.pmtu.clone(),
            started: Instant::now(),
        };
        // A configured socket must work; the default one may be in a
        // directory this process cannot write (an unprivileged run outside
        // systemd): then the gateway runs without `px status`, saying so.
        match control::serve(&control_path(cfg), source, self.stop.clone()) {
            Ok(h) => self.control = Some(h),
            Err(e @ control::ControlError::Io { .. }) if cfg.control_socket.is_none() => {
                warn!("px gateway: {e}; running without a control socket: px status cannot reach this gateway");
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Starts one thread per worker.
    fn spawn<P: Ports + Send + 'static>(&mut self, workers: Vec<Worker<P>>) -> Result<(), GatewayError> {
        for w in workers {
            let (stop, shared) = (self.stop.clone(), self.shared.clone());
            let h = std::thread::Builder::new()
                .name(format!("px-worker-{}", w.index))
                .spawn(move || w.run(stop, shared))
                .map_err(GatewayError::Thread)?;
            self.workers.push(h);
        }
        Ok(())
    }

    /// The iMTU follower, if configured.
    fn follow_imtu(&mut self, cfg: &GatewayConfig, common: &Common) -> Result<(), GatewayError> {
        if let (Some(f), Some(s)) = (&cfg.imtu_follow, &common.imtu) {
            let outer_mtu = common.config.outer_port_mtu();
            self.follower =
                Some(imtu::spawn(f.clone(), outer_mtu, s.clone(), self.stop.clone()).map_err(GatewayError::Thread)?);
        }
        Ok(())
    }
}

impl Common {
    /// A worker's engine, sharing the path MTU cache and the verified
    /// neighbour iMTUs.
    fn engine(&self) -> Result<Engine, GatewayError> {
        let mut engine = Engine::with_shared_pmtu(self.config.clone(), self.pmtu.clone())
            .map_err(|e| GatewayError::Config(e.into()))?;
        if let Some(s) = &self.imtu {
            engine.follow_imtu(s.clone());
        }
        Ok(engine)
    }
}

fn control_path(cfg: &GatewayConfig) -> std::path::PathBuf {
    cfg.control_socket.clone().unwrap_or_else(|| control::default_path(&cfg.inner, &cfg.outer))
}

/// The start lines: ports and settings, ICMP sources, where `px status`
/// and the capture are, and the kernel fast path.
fn log_start(r: &Running, cfg: &GatewayConfig, ecfg: &px_gateway::Config, (imtu, emtu): (u16, u16)) {
    info!(
        "px gateway: inner {} (iMTU {imtu}) <-> outer {} (eMTU {emtu}), {} worker(s), GRO/GSO {}, merge timeout {} µs{}",
        cfg.inner,
        cfg.outer,
        cfg.workers,
        if cfg.gro_gso { "on" } else { "off (software)" },
        ecfg.merge_timeout.as_micros(),
        cfg.metrics.map(|a| format!(", metrics on http://{a}/metrics")).unwrap_or_default()
    );
    for (level, line) in cfg.icmp_notice() {
        crate::logging::log(level, &format!("px gateway: {line}"));
    }
    if r.control.is_some() {
        info!("px gateway: status: px status (control socket {})", control_path(cfg).display());
    }
    if let Some((spec, _)) = &r.capture {
        info!(
            "px gateway: capturing to {} (pcapng, snap length {} B, {} file(s) of at most {} B)",
            spec.path.display(),
            spec.snaplen,
            spec.files,
            spec.max_bytes
        );
    }
    let fast_path = r.datapath.as_ref().map_or(Err("not started"), Datapath::fast_path);
    match (fast_path, cfg.fast_path) {
        (Ok(()), FastPathMode::On) => info!(
            "px gateway: kernel fast path on: TC program on {} and {} ingress; established bulk TCP flows move to it",
            cfg.inner, cfg.outer
        ),
        (Ok(()), FastPathMode::Off) => {
            info!("px gateway: kernel fast path attached, off (a reload with fast_path = \"on\" turns it on)")
        }
        (Err(e), _) => info!("px gateway: kernel fast path unavailable ({e})"),
    }
}

/// Locks both ports ([`lock`]). A port another gateway serves is an
/// error; a lock directory this process may not write (an unprivileged
/// run outside systemd) is a warning, and the gateway runs unlocked.
///
/// With DPDK, what is locked is what another gateway could also take: the
/// interface of a `net_af_packet` device. (A PCI device is taken by one
/// process at a time by its driver; a memif socket by one server.)
fn lock_ports(cfg: &GatewayConfig) -> Result<Vec<PortLock>, GatewayError> {
    let dir = lock::lock_dir();
    let mut locks = Vec::new();
    let names: Vec<&str> = match (cfg.datapath, &cfg.dpdk) {
        (DatapathKind::Dpdk, Some(d)) => {
            [&d.inner, &d.outer].into_iter().filter_map(|s| super::datapath::keys::device(s).iface).collect()
        }
        _ => vec![&cfg.inner, &cfg.outer],
    };
    for name in names {
        match PortLock::acquire(&dir, name) {
            Ok(l) => locks.push(l),
            Err(e @ LockError::Held { .. }) => return Err(GatewayError::PortInUse(e)),
            Err(LockError::Iface { port, source }) => {
                return Err(GatewayError::Port { key: cfg.key_of(&port), port, source });
            }
            Err(e @ LockError::Io { .. }) => {
                warn!("px gateway: {e}; running without the lock: a second gateway on {name} would not be refused")
            }
        }
    }
    Ok(locks)
}

/// The key of the engine's flow hashes, from the OS random source
/// (`getrandom(2)`; std's `RandomState`, itself seeded from the OS, if that
/// fails): outside senders choose flow keys, so they must not be able to
/// predict the hash (time and PID were guessable).
fn os_random_seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        return u64::from_ne_bytes(b);
    }
    use std::hash::BuildHasher;
    std::hash::RandomState::new().hash_one(std::process::id())
}
