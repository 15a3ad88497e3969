//! The iMTU follower (issue 30): reads the neighbour b-networks' advertised
//! iMTUs from a kernel routing table (the `mtu` metric that BIRD's
//! `krt_mtu` writes from the BGP large community `(ASN, 1, iMTU)`, see
//! `docs/border.md`), **verifies each one** toward the neighbour's
//! responder before trusting it, and publishes the verified prefixes to
//! every worker's engine ([`px_gateway::SharedImtu`]).
//!
//! - A prefix enters the engines' table only after DF-set probes of the
//!   size to trust, each session with a fresh nonce, toward
//!   `<prefix's first address + responder_host>:<responder_port>` were
//!   confirmed whole (`px_pmtud::session::ConfirmSession`, RFC 8899 §4.1;
//!   [`px_gateway::imtu::verdict`]). The size asked is the advertised one
//!   within the gateway's outer port's MTU: nothing larger is ever passed.
//!   If it is not confirmed, a path-MTU measurement (F-PMTUD on IPv4,
//!   DPLPMTUD on IPv6) tells a **lie** (the path carries less) from a
//!   responder that is **not believed** (it says the size arrived, the
//!   DF-set probe says otherwise) and from silence; each is logged and the
//!   prefix stays out (translated as any legacy destination).
//! - Routes of the forwarding table (`forwarding_table`, the main table)
//!   more specific than a verified prefix and not verified themselves are
//!   published as exclusions: a more-specific route through a legacy path
//!   does not inherit the covering prefix's iMTU; and a prefix that the
//!   forwarding table sends through another next hop than the claim's is
//!   not published.
//! - This checks the claim. Each destination's own path is confirmed by
//!   the engine before its packets pass untouched (`px_gateway`'s
//!   `confirm.rs`): a verified prefix may hold hosts behind smaller hops.
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
use px_gateway::imtu::{Evidence, ImtuTable, SharedImtu, Trust, verdict};
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
    /// The size to confirm: the advertised one, within the outer port's MTU.
    pub target: u16,
    /// Where the neighbour's responder answers.
    pub responder: SocketAddr,
}

/// The follower's decisions, with time passed in.
#[derive(Debug)]
pub struct Follower {
    cfg: ImtuFollowConfig,
    /// The outer port's own MTU: nothing larger is ever trusted.
    outer_mtu: u16,
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
    /// A follower that knows nothing yet, for a gateway whose outer port
    /// sends at most `outer_mtu`.
    pub fn new(cfg: ImtuFollowConfig, outer_mtu: u16) -> Follower {
        Follower { cfg, outer_mtu, known: HashMap::new() }
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
                due.push(Probe { prefix, advertised, target: advertised.min(self.outer_mtu), responder });
            }
        }
        due.sort_by_key(|p| (p.prefix.addr, p.prefix.len));
        (withdrawn, due)
    }

    /// Records what was found for a probe [`Follower::update`] returned;
    /// the verdict.
    pub fn record(&mut self, probe: &Probe, gateway: Option<IpAddr>, found: Evidence, now: Instant) -> Trust {
        let trust = verdict(probe.advertised, probe.target, found, 8);
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
    /// beyond it, the rest stay translated), checked against the routes
    /// of the forwarding table (`forwarding`): a verified prefix that it
    /// sends through another next hop than the claim's is left out, and
    /// its more-specific routes that are not verified claims themselves
    /// are excluded.
    pub fn table(&self, forwarding: &[MtuRoute]) -> ImtuTable {
        let mut t = ImtuTable::new(self.cfg.max_prefixes);
        let mut keys: Vec<_> = self.known.iter().collect();
        keys.sort_by_key(|(k, _)| **k);
        let mut verified = Vec::new();
        for ((addr, len), k) in keys {
            let Trust::Verified(m) = k.trust else { continue };
            let p = Prefix { addr: *addr, len: *len };
            let elsewhere = forwarding.iter().any(|r| r.dst == p.addr && r.len == p.len && r.gateway != k.gateway);
            if !elsewhere && t.insert(p, m).is_ok() {
                verified.push(p);
            }
        }
        for r in forwarding {
            let q = Prefix { addr: r.dst, len: r.len };
            let inside = verified.iter().any(|p| p.len < q.len && p.contains(q.addr));
            if inside && t.get(q).is_none() {
                let _ = t.exclude(q);
            }
        }
        t
    }
}

/// What this host's own stack finds toward `probe.responder`: whether a
/// DF-set probe of `probe.target` with a fresh nonce arrives whole (then,
/// if the path carries a little less than asked, within the 8 bytes of
/// F-PMTUD's alignment, whether that size does), and otherwise what a
/// measurement reports. Nothing found when the probes could not be sent
/// (no route, no address).
fn find(probe: &Probe, timeout: Duration) -> Evidence {
    use crate::pmtud::probe::{Method, Path, ProbeOptions, confirm, measure};
    let opts = |size: u16| ProbeOptions {
        target: probe.responder,
        max_size: Some(size),
        timeout,
        probe_timer: Duration::from_millis(25),
        initial_rtt: Duration::from_millis(20),
        search: px_pmtud::search::SearchStrategy::lsquic(),
        legacy: false,
    };
    let carries = |size: u16| {
        let o = opts(size);
        let path = Path::open(&o).ok()?;
        // The local link may be smaller than asked: then it is not carried.
        (path.iface_mtu() >= size).then_some(())?;
        confirm(&path, &o).ok()?.pmtu.filter(|c| *c == size)
    };
    let mut found = Evidence { confirmed: carries(probe.target), measured: None };
    if found.confirmed.is_none() {
        let o = opts(probe.target);
        found.measured = Path::open(&o).ok().and_then(|path| {
            let method = if path.is_v6() { Method::Dplpmtud } else { Method::Fpmtud };
            measure(&path, &o, method).ok()?.pmtu
        });
        if let Some(m) = found.measured.filter(|m| *m < probe.target && probe.target - *m <= 8) {
            found.confirmed = carries(m);
        }
    }
    found
}

/// Whether the follower can work here: it reads `cfg.table` once (the
/// gateway refuses to start when it cannot: a unit without netlink, a
/// seccomp filter).
pub fn check(cfg: &ImtuFollowConfig) -> Result<(), px_io::route_table::RouteError> {
    px_io::route_table::dump_table(cfg.table).map(|_| ())
}

/// Starts the follower thread: follows `cfg.table`, verifies (never above
/// `outer_mtu`, the outer port's own MTU), publishes to `shared`, logs what
/// it finds, ends when `stop` is set.
pub fn spawn(
    cfg: ImtuFollowConfig,
    outer_mtu: u16,
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
        let mut forwarding_unreadable = false;
        let mut f = Follower::new(cfg.clone(), outer_mtu);
        let mut published = ImtuTable::new(0);
        let mut first = true;
        // The tables as last read: read again only after a route change
        // (the monitor sees every table's) or a failed read, not at every
        // wake-up (the forwarding table may hold a full BGP table).
        let (mut routes, mut forwarding) = (Vec::new(), Vec::new());
        let (mut routes_fresh, mut forwarding_fresh) = (false, false);
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
            if changed {
                (routes_fresh, forwarding_fresh) = (false, false);
            }
            if !routes_fresh {
                match px_io::route_table::dump_table(cfg.table) {
                    Ok(r) => (routes, routes_fresh) = (r, true),
                    Err(e) => {
                        if !std::mem::replace(&mut unreadable, true) {
                            error!(
                                "px gateway: imtu: cannot read kernel table {}: {e}; nothing new is verified until it can (said once)",
                                cfg.table
                            );
                        }
                        continue;
                    }
                }
            }
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
                verify(&mut f, probe, gateway, Duration::from_millis(cfg.probe_timeout_ms));
            }
            if !forwarding_fresh {
                match px_io::route_table::dump_all(cfg.forwarding_table) {
                    Ok(r) => (forwarding, forwarding_fresh) = (r, true),
                    Err(e) => {
                        if !std::mem::replace(&mut forwarding_unreadable, true) {
                            error!(
                                "px gateway: imtu: cannot read forwarding table {}: {e}; nothing verified is published until it can (said once)",
                                cfg.forwarding_table
                            );
                        }
                        continue;
                    }
                }
            }
            if std::mem::replace(&mut forwarding_unreadable, false) {
                info!("px gateway: imtu: forwarding table {} can be read again", cfg.forwarding_table);
            }
            let table = f.table(&forwarding);
            if first || !same(&table, &published, &routes, &forwarding) {
                shared.publish(table.clone());
                published = table;
                first = false;
            }
        }
    })
}

/// Verifies one due claim and says what was found (a lie, a report not
/// believed and no answer are warnings).
fn verify(f: &mut Follower, probe: &Probe, gateway: Option<IpAddr>, timeout: Duration) {
    let found = find(probe, timeout);
    let bound = if probe.target < probe.advertised {
        format!(" (the outer port sends at most {})", probe.target)
    } else {
        String::new()
    };
    match f.record(probe, gateway, found, Instant::now()) {
        Trust::Verified(m) => info!(
            "px gateway: imtu: {} advertises {}, path to {} carries {m} (DF set, fresh nonce, arrived whole): verified at {m}{bound}",
            probe.prefix,
            probe.advertised,
            probe.responder.ip(),
        ),
        Trust::Lie { advertised, measured } => warn!(
            "px gateway: imtu: {} advertises {advertised} but the path to {} carries only {measured}: lie detected, not trusted (translated)",
            probe.prefix,
            probe.responder.ip()
        ),
        Trust::NotBelieved { advertised, reported } => warn!(
            "px gateway: imtu: {} advertises {advertised}; the responder {} reports {reported} arrived, but no DF-set probe of {} \
             with a fresh nonce was confirmed whole: not believed, not trusted (translated)",
            probe.prefix,
            probe.responder.ip(),
            probe.target
        ),
        Trust::Unverified => warn!(
            "px gateway: imtu: {} advertises {}, no answer from {}: not trusted (translated) until a measurement succeeds",
            probe.prefix, probe.advertised, probe.responder
        ),
    }
}

/// Whether two tables hold the same entries for the prefixes of `routes`
/// and `forwarding` (the only prefixes either can hold).
fn same(a: &ImtuTable, b: &ImtuTable, routes: &[MtuRoute], forwarding: &[MtuRoute]) -> bool {
    a.len() == b.len()
        && routes.iter().chain(forwarding).all(|r| {
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

    fn confirmed(size: u16) -> Evidence {
        Evidence { confirmed: Some(size), measured: None }
    }

    fn measured(size: Option<u16>) -> Evidence {
        Evidence { confirmed: None, measured: size }
    }

    #[test]
    fn only_confirmed_prefixes_are_published_and_a_lie_never_is() {
        let mut f = Follower::new(ImtuFollowConfig::default(), 9000);
        let t0 = Instant::now();
        let routes =
            [route("203.0.113.64", 26, 9000), route("203.0.113.128", 26, 9000), route("203.0.113.192", 26, 9000)];
        let (gone, due) = f.update(&routes, t0);
        assert!(gone.is_empty());
        assert_eq!(due.len(), 3);
        assert_eq!(due[0].responder, "203.0.113.65:9999".parse().unwrap());
        assert!(f.table(&[]).is_empty(), "nothing is trusted before it is measured");
        let gw = routes[0].gateway;
        assert_eq!(f.record(&due[0], gw, confirmed(9000), t0), Trust::Verified(9000));
        assert_eq!(f.record(&due[1], gw, measured(Some(1500)), t0), Trust::Lie { advertised: 9000, measured: 1500 });
        // A responder behind a smaller hop that says 9000 arrived (it saw
        // the DF-clear round in fragments): no DF-set 9000 was confirmed.
        assert_eq!(
            f.record(&due[2], gw, measured(Some(9000)), t0),
            Trust::NotBelieved { advertised: 9000, reported: 9000 }
        );
        let t = f.table(&[]);
        assert_eq!(t.lookup("203.0.113.70".parse().unwrap()), Some((26, 9000)));
        assert_eq!(t.lookup("203.0.113.130".parse().unwrap()), None, "the liar must stay translated");
        assert_eq!(t.lookup("203.0.113.200".parse().unwrap()), None, "so must the one not believed");
        // Nothing changed: nothing to measure until reverify_s.
        assert!(f.update(&routes, t0 + Duration::from_secs(1)).1.is_empty());
        assert_eq!(f.update(&routes, t0 + Duration::from_secs(301)).1.len(), 3);
    }

    #[test]
    fn nothing_above_the_outer_port_is_asked_or_trusted() {
        let mut f = Follower::new(ImtuFollowConfig::default(), 1500);
        let t0 = Instant::now();
        let (_, due) = f.update(&[route("203.0.113.64", 26, 9000)], t0);
        assert_eq!((due[0].advertised, due[0].target), (9000, 1500));
        // A measurement from another port of the host says 9000: trusted
        // only at what was asked.
        assert_eq!(f.record(&due[0], None, confirmed(9000), t0), Trust::Unverified);
        assert_eq!(f.record(&due[0], None, confirmed(1500), t0), Trust::Verified(1500));
        assert_eq!(f.table(&[]).lookup("203.0.113.65".parse().unwrap()), Some((26, 1500)));
    }

    /// Issue 35 item 5: the forwarding decision's route, not only the iMTU
    /// table: a more-specific route that is not itself a verified claim is
    /// excluded, and a prefix forwarded through another next hop than the
    /// claim's is not published.
    #[test]
    fn the_forwarding_table_carves_out_more_specific_routes() {
        let mut f = Follower::new(ImtuFollowConfig::default(), 9000);
        let t0 = Instant::now();
        let routes = [route("203.0.113.0", 24, 9000), route("203.0.113.64", 26, 9000)];
        let (_, due) = f.update(&routes, t0);
        for p in &due {
            f.record(p, routes[0].gateway, confirmed(9000), t0);
        }
        let legacy = MtuRoute {
            dst: "203.0.113.192".parse().unwrap(),
            len: 26,
            mtu: 0,
            gateway: Some("198.51.100.13".parse().unwrap()),
        };
        let forwarding = [route("203.0.113.0", 24, 0), route("203.0.113.64", 26, 0), legacy];
        let t = f.table(&forwarding);
        assert_eq!(t.lookup("203.0.113.10".parse().unwrap()), Some((24, 9000)));
        assert_eq!(t.lookup("203.0.113.70".parse().unwrap()), Some((26, 9000)), "a verified claim of its own");
        assert_eq!(t.lookup("203.0.113.200".parse().unwrap()), None, "the legacy /26 must not inherit the /24's 9000");
        // The forwarding table sends the /24 elsewhere: not published.
        let mut other = forwarding;
        other[0].gateway = Some("198.51.100.13".parse().unwrap());
        let t = f.table(&other);
        assert_eq!(t.lookup("203.0.113.10".parse().unwrap()), None);
        assert_eq!(t.lookup("203.0.113.70".parse().unwrap()), Some((26, 9000)));
    }

    #[test]
    fn a_changed_or_withdrawn_advertisement_is_acted_on() {
        let mut f = Follower::new(ImtuFollowConfig::default(), 9000);
        let t0 = Instant::now();
        let (_, due) = f.update(&[route("203.0.113.64", 26, 9000)], t0);
        f.record(&due[0], Some("198.51.100.11".parse().unwrap()), confirmed(9000), t0);
        // A new iMTU is measured again.
        let (_, due) = f.update(&[route("203.0.113.64", 26, 4000)], t0);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].advertised, 4000);
        // Withdrawn: gone from the table at once.
        let (gone, due) = f.update(&[], t0);
        assert_eq!(gone, vec!["203.0.113.64/26".parse().unwrap()]);
        assert!(due.is_empty());
        assert!(f.table(&[]).is_empty());
        // No answer: measured again soon, then less and less often.
        let r = [route("203.0.113.64", 26, 9000)];
        let (_, due) = f.update(&r, t0);
        assert_eq!(f.record(&due[0], r[0].gateway, measured(None), t0), Trust::Unverified);
        assert!(f.update(&r, t0 + Duration::from_millis(500)).1.is_empty());
        let (_, due) = f.update(&r, t0 + Duration::from_millis(1100));
        assert_eq!(due.len(), 1, "an unanswered prefix must be retried within seconds");
        f.record(&due[0], r[0].gateway, measured(None), t0 + Duration::from_millis(1100));
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
            ImtuFollowConfig { forwarding_table: 30, ..Default::default() },
            ImtuFollowConfig { forwarding_table: 0, ..Default::default() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
