//! The iMTU follower (issue 30): reads the neighbour b-networks' advertised
//! iMTUs from a kernel routing table (the `mtu` metric that BIRD's
//! `krt_mtu` writes from the BGP large community `(ASN, 1, iMTU)`, see
//! `docs/border.md`), **verifies each one** with one path-MTU measurement
//! toward the neighbour's responder before trusting it, and publishes the
//! verified prefixes to every worker's engine ([`px_gateway::SharedImtu`]).
//!
//! - A prefix enters the engines' table only after a measurement toward
//!   `<prefix's first address + responder_host>:<responder_port>` (F-PMTUD
//!   on IPv4, DPLPMTUD on IPv6, from the gateway host's own address)
//!   carried the advertised size ([`px_gateway::imtu::verdict`]); a path
//!   that carries less is a **lie**, logged, and the prefix stays out
//!   (translated as any legacy destination): a lying neighbour can never
//!   make the gateway send a frame the path cannot carry.
//! - A route that changes (its iMTU or next hop) is measured again; one
//!   that is withdrawn leaves the table at once; every verified prefix is
//!   measured again every `reverify_s`.
//! - Route changes wake the follower through an rtnetlink subscription
//!   ([`px_io::route_table::RouteMonitor`]); it then reads the whole table
//!   again ([`px_io::route_table::dump_table`]).
//!
//! [`Follower`] holds the decisions (what to measure, what to publish) with
//! time passed in; [`spawn`] is the thread that does the I/O.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_gateway::Prefix;
use px_gateway::imtu::{ImtuTable, SharedImtu, Trust, verdict};
use px_io::route_table::MtuRoute;

use super::config::ImtuFollowConfig;
use crate::logging::{error, info, warn};

/// What the follower knows of one advertised prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Known {
    advertised: u16,
    gateway: Option<IpAddr>,
    trust: Trust,
    measured_at: Instant,
    /// Measurements in a row without an answer.
    failures: u32,
}

/// First retry after a measurement without an answer (no route yet, the
/// responder not up): doubled at each failure, up to `reverify_s`.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// A measurement the follower wants made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The advertised prefix.
    pub prefix: Prefix,
    /// Its advertised iMTU.
    pub advertised: u16,
    /// Where the neighbour's responder answers.
    pub responder: SocketAddr,
}

/// The follower's decisions, with time passed in.
#[derive(Debug)]
pub struct Follower {
    cfg: ImtuFollowConfig,
    known: HashMap<(IpAddr, u8), Known>,
}

/// The address `offset` after a prefix's first address.
fn nth_addr(p: Prefix, offset: u32) -> IpAddr {
    match p.addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(p.len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).wrapping_add(offset).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(p.len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).wrapping_add(u128::from(offset)).into())
        }
    }
}

impl Follower {
    /// A follower that knows nothing yet.
    pub fn new(cfg: ImtuFollowConfig) -> Follower {
        Follower { cfg, known: HashMap::new() }
    }

    /// Takes the routes of the table now: forgets withdrawn prefixes (their
    /// `Prefix`es returned in the first list) and returns the measurements
    /// due (new or changed routes, and verified ones past `reverify_s`).
    /// Routes with an iMTU outside 1280..=65535 are ignored.
    pub fn update(&mut self, routes: &[MtuRoute], now: Instant) -> (Vec<Prefix>, Vec<Probe>) {
        let mut seen = HashMap::new();
        for r in routes {
            if let Ok(m) = u16::try_from(r.mtu)
                && m >= 1280
            {
                seen.insert((r.dst, r.len), (m, r.gateway));
            }
        }
        let withdrawn: Vec<Prefix> = self
            .known
            .keys()
            .filter(|k| !seen.contains_key(*k))
            .map(|(addr, len)| Prefix { addr: *addr, len: *len })
            .collect();
        for p in &withdrawn {
            self.known.remove(&(p.addr, p.len));
        }
        let reverify = Duration::from_secs(self.cfg.reverify_s);
        let mut due = Vec::new();
        for (&(addr, len), &(advertised, gateway)) in &seen {
            let fresh = self.known.get(&(addr, len)).is_some_and(|k| {
                let wait = match k.trust {
                    Trust::Unverified => {
                        FIRST_RETRY.saturating_mul(1 << k.failures.saturating_sub(1).min(16)).min(reverify)
                    }
                    _ => reverify,
                };
                k.advertised == advertised
                    && k.gateway == gateway
                    && now.saturating_duration_since(k.measured_at) < wait
            });
            if !fresh {
                let prefix = Prefix { addr, len };
                let responder = SocketAddr::new(nth_addr(prefix, self.cfg.responder_host), self.cfg.responder_port);
                due.push(Probe { prefix, advertised, responder });
            }
        }
        due.sort_by_key(|p| (p.prefix.addr, p.prefix.len));
        (withdrawn, due)
    }

    /// Records a measurement (`measured`: the path MTU found, `None`: no
    /// answer) for a probe [`Follower::update`] returned; the verdict.
    pub fn record(&mut self, probe: &Probe, gateway: Option<IpAddr>, measured: Option<u16>, now: Instant) -> Trust {
        let trust = verdict(probe.advertised, measured, 8);
        let key = (probe.prefix.addr, probe.prefix.len);
        let failures = match (trust, self.known.get(&key)) {
            (Trust::Unverified, Some(k)) if k.advertised == probe.advertised => k.failures.saturating_add(1),
            (Trust::Unverified, _) => 1,
            _ => 0,
        };
        self.known.insert(key, Known { advertised: probe.advertised, gateway, trust, measured_at: now, failures });
        trust
    }

    /// The table of verified prefixes to publish (at most `max_prefixes`;
    /// beyond it, the rest stay translated).
    pub fn table(&self) -> ImtuTable {
        let mut t = ImtuTable::new(self.cfg.max_prefixes);
        let mut keys: Vec<_> = self.known.iter().collect();
        keys.sort_by_key(|(k, _)| **k);
        for ((addr, len), k) in keys {
            if let Trust::Verified(m) = k.trust {
                let _ = t.insert(Prefix { addr: *addr, len: *len }, m);
            }
        }
        t
    }
}

/// One measurement toward `probe.responder` from this host's own stack:
/// the path MTU, or `None` without an answer (or when the probe could not
/// be sent: no route, no address).
fn measure(probe: &Probe, timeout: Duration) -> Option<u16> {
    use crate::pmtud::probe::{Method, Path, ProbeOptions, measure};
    let opts = ProbeOptions {
        target: probe.responder,
        max_size: Some(probe.advertised),
        timeout,
        probe_timer: Duration::from_millis(25),
        initial_rtt: Duration::from_millis(20),
        search: px_pmtud::search::SearchStrategy::lsquic(),
        legacy: false,
    };
    let path = Path::open(&opts).ok()?;
    let method = if path.is_v6() { Method::Dplpmtud } else { Method::Fpmtud };
    measure(&path, &opts, method).ok()?.pmtu
}

/// Whether the follower can work here: it reads `cfg.table` once (the
/// gateway refuses to start when it cannot: a unit without netlink, a
/// seccomp filter).
pub fn check(cfg: &ImtuFollowConfig) -> Result<(), px_io::route_table::RouteError> {
    px_io::route_table::dump_table(cfg.table).map(|_| ())
}

/// Starts the follower thread: follows `cfg.table`, verifies, publishes to
/// `shared`, logs what it finds, ends when `stop` is set.
pub fn spawn(
    cfg: ImtuFollowConfig,
    shared: Arc<SharedImtu>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("px-imtu".into()).spawn(move || {
        let monitor = match px_io::route_table::RouteMonitor::open() {
            Ok(m) => Some(m),
            Err(e) => {
                warn!("px gateway: imtu: no route notifications ({e}); reading table {} every second", cfg.table);
                None
            }
        };
        info!(
            "px gateway: imtu: following kernel table {}; neighbours' responders at <prefix>+{} port {}",
            cfg.table, cfg.responder_host, cfg.responder_port
        );
        // A table that cannot be read is said once, and again when it can.
        let mut unreadable = false;
        let mut f = Follower::new(cfg.clone());
        let mut published = ImtuTable::new(0);
        let mut first = true;
        while !stop.load(Ordering::Relaxed) {
            // Wake at a route change, or every 200 ms to see `stop` and
            // the re-verification deadlines.
            let changed = match &monitor {
                Some(m) => m.wait(Duration::from_millis(200)).unwrap_or(true),
                None => {
                    std::thread::sleep(Duration::from_secs(1));
                    true
                }
            };
            let _ = changed;
            let routes = match px_io::route_table::dump_table(cfg.table) {
                Ok(r) => r,
                Err(e) => {
                    if !std::mem::replace(&mut unreadable, true) {
                        error!(
                            "px gateway: imtu: cannot read kernel table {}: {e}; nothing new is verified until it can (said once)",
                            cfg.table
                        );
                    }
                    continue;
                }
            };
            if std::mem::replace(&mut unreadable, false) {
                info!("px gateway: imtu: kernel table {} can be read again", cfg.table);
            }
            let (withdrawn, due) = f.update(&routes, Instant::now());
            for p in &withdrawn {
                info!("px gateway: imtu: {p} withdrawn: translated from now on");
            }
            for probe in &due {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let gateway = routes
                    .iter()
                    .find(|r| r.dst == probe.prefix.addr && r.len == probe.prefix.len)
                    .and_then(|r| r.gateway);
                let measured = measure(probe, Duration::from_millis(cfg.probe_timeout_ms));
                match f.record(probe, gateway, measured, Instant::now()) {
                    Trust::Verified(m) => info!(
                        "px gateway: imtu: {} advertises {}, path to {} carries {}: verified at {m}",
                        probe.prefix,
                        probe.advertised,
                        probe.responder.ip(),
                        measured.unwrap_or(0)
                    ),
                    Trust::Lie { advertised, measured } => warn!(
                        "px gateway: imtu: {} advertises {advertised} but the path to {} carries only {measured}: lie detected, not trusted (translated)",
                        probe.prefix,
                        probe.responder.ip()
                    ),
                    Trust::Unverified => warn!(
                        "px gateway: imtu: {} advertises {}, no answer from {}: not trusted (translated) until a measurement succeeds",
                        probe.prefix, probe.advertised, probe.responder
                    ),
                }
            }
            let table = f.table();
            if first || !same(&table, &published, &routes) {
                shared.publish(table.clone());
                published = table;
                first = false;
            }
        }
    })
}

/// Whether two tables hold the same entries for the prefixes of `routes`
/// (the only prefixes either can hold).
fn same(a: &ImtuTable, b: &ImtuTable, routes: &[MtuRoute]) -> bool {
    a.len() == b.len()
        && routes.iter().all(|r| {
            let p = Prefix { addr: r.dst, len: r.len };
            a.get(p) == b.get(p)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(dst: &str, len: u8, mtu: u32) -> MtuRoute {
        MtuRoute { dst: dst.parse().unwrap(), len, mtu, gateway: Some("198.51.100.11".parse().unwrap()) }
    }

    #[test]
    fn only_measured_prefixes_are_published_and_a_lie_never_is() {
        let mut f = Follower::new(ImtuFollowConfig::default());
        let t0 = Instant::now();
        let routes = [route("203.0.113.64", 26, 9000), route("203.0.113.128", 26, 9000)];
        let (gone, due) = f.update(&routes, t0);
        assert!(gone.is_empty());
        assert_eq!(due.len(), 2);
        assert_eq!(due[0].responder, "203.0.113.65:9999".parse().unwrap());
        assert!(f.table().is_empty(), "nothing is trusted before it is measured");
        let gw = routes[0].gateway;
        assert_eq!(f.record(&due[0], gw, Some(9000), t0), Trust::Verified(9000));
        assert_eq!(f.record(&due[1], gw, Some(1500), t0), Trust::Lie { advertised: 9000, measured: 1500 });
        let t = f.table();
        assert_eq!(t.lookup("203.0.113.70".parse().unwrap()), Some((26, 9000)));
        assert_eq!(t.lookup("203.0.113.130".parse().unwrap()), None, "the liar must stay translated");
        // Nothing changed: nothing to measure until reverify_s.
        assert!(f.update(&routes, t0 + Duration::from_secs(1)).1.is_empty());
        assert_eq!(f.update(&routes, t0 + Duration::from_secs(301)).1.len(), 2);
    }

    #[test]
    fn a_changed_or_withdrawn_advertisement_is_acted_on() {
        let mut f = Follower::new(ImtuFollowConfig::default());
        let t0 = Instant::now();
        let (_, due) = f.update(&[route("203.0.113.64", 26, 9000)], t0);
        f.record(&due[0], Some("198.51.100.11".parse().unwrap()), Some(9000), t0);
        // A new iMTU is measured again.
        let (_, due) = f.update(&[route("203.0.113.64", 26, 4000)], t0);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].advertised, 4000);
        // Withdrawn: gone from the table at once.
        let (gone, due) = f.update(&[], t0);
        assert_eq!(gone, vec!["203.0.113.64/26".parse().unwrap()]);
        assert!(due.is_empty());
        assert!(f.table().is_empty());
        // No answer: measured again soon, then less and less often.
        let r = [route("203.0.113.64", 26, 9000)];
        let (_, due) = f.update(&r, t0);
        assert_eq!(f.record(&due[0], r[0].gateway, None, t0), Trust::Unverified);
        assert!(f.update(&r, t0 + Duration::from_millis(500)).1.is_empty());
        let (_, due) = f.update(&r, t0 + Duration::from_millis(1100));
        assert_eq!(due.len(), 1, "an unanswered prefix must be retried within seconds");
        f.record(&due[0], r[0].gateway, None, t0 + Duration::from_millis(1100));
        assert!(f.update(&r, t0 + Duration::from_millis(2500)).1.is_empty(), "backoff doubles");
        assert_eq!(f.update(&r, t0 + Duration::from_millis(3200)).1.len(), 1);
        // Nonsense iMTUs are no advertisement.
        assert!(f.update(&[route("203.0.113.64", 26, 576), route("203.0.113.0", 26, 100_000)], t0).1.is_empty());
    }

    #[test]
    fn responder_addresses_and_validation() {
        let p: Prefix = "2001:db8:2::/48".parse().unwrap();
        assert_eq!(nth_addr(p, 1), "2001:db8:2::1".parse::<IpAddr>().unwrap());
        let p: Prefix = "203.0.113.77/26".parse().unwrap();
        assert_eq!(nth_addr(p, 1), "203.0.113.65".parse::<IpAddr>().unwrap());
        ImtuFollowConfig::default().validate().unwrap();
        for bad in [
            ImtuFollowConfig { table: 254, ..Default::default() },
            ImtuFollowConfig { responder_port: 0, ..Default::default() },
            ImtuFollowConfig { reverify_s: 1, ..Default::default() },
            ImtuFollowConfig { probe_timeout_ms: 5, ..Default::default() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
