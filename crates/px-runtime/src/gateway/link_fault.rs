//! Link faults: the ports' carrier, watched by the supervisor every
//! [`LinkWatch::EVERY`]. A port that loses its carrier is a WARN line and a
//! count (`px_gateway_carrier_lost_total`); with `[link_fault]
//! pass_through`, the gateway also takes the other port down, as
//! bump-in-the-wire appliances do, so that the router behind it sees its
//! own link fail and moves traffic to another path at once instead of
//! sending into a gateway that cannot deliver; once the carrier has been
//! back for `restore_after_ms`, the other port comes up again.
//!
//! [`LinkFault`] decides (sans-I/O, time passed in); [`LinkWatch`] reads
//! the flags (SIOCGIFFLAGS: `IFF_UP`, and `IFF_RUNNING` for the carrier)
//! and sets a port down or up (SIOCSIFFLAGS, CAP_NET_ADMIN).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use px_gateway::Port;
use px_io::IfaceCtl;

use super::config::LinkFaultConfig;
use super::metrics::{LINK_DOWN, LINK_NO_CARRIER, LINK_UP, ProcessCounters};
use crate::logging::{error, info, warn};

/// One port as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkState {
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Carrier (`IFF_RUNNING`: up and operationally up).
    pub carrier: bool,
}

/// What to do to a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Take `port` down: `cause` lost its carrier.
    TakeDown { port: Port, cause: Port },
    /// Bring `port` up again: `cause`'s carrier is back.
    BringUp { port: Port, cause: Port },
}

/// The port held down, and since when the cause's carrier is back.
#[derive(Debug, Clone, Copy)]
struct Held {
    port: Port,
    cause: Port,
    back_since: Option<Instant>,
}

/// Link-fault pass-through's decisions.
#[derive(Debug)]
pub(crate) struct LinkFault {
    restore_after: Duration,
    held: Option<Held>,
}

impl LinkFault {
    pub(crate) fn new(restore_after: Duration) -> LinkFault {
        LinkFault { restore_after, held: None }
    }

    /// The ports' states at `now` (indexed by `Port as usize`): what to do.
    /// A port that is up without carrier while the other has one makes the
    /// other go down; a port an operator took down (not up) is no fault;
    /// with both without carrier there is nothing to pass on. The held port
    /// comes up once the cause's carrier has been back `restore_after`
    /// (a flap starts the wait again).
    pub(crate) fn on_state(&mut self, now: Instant, s: [LinkState; 2]) -> Option<Action> {
        let st = |p: Port| s[p as usize];
        match &mut self.held {
            None => {
                for cause in [Port::Outer, Port::Inner] {
                    let port = cause.other();
                    if st(cause).up && !st(cause).carrier && st(port).up && st(port).carrier {
                        self.held = Some(Held { port, cause, back_since: None });
                        return Some(Action::TakeDown { port, cause });
                    }
                }
                None
            }
            Some(h) if st(h.cause).carrier => {
                let since = *h.back_since.get_or_insert(now);
                if now.saturating_duration_since(since) < self.restore_after {
                    return None;
                }
                let (port, cause) = (h.port, h.cause);
                self.held = None;
                Some(Action::BringUp { port, cause })
            }
            Some(h) => {
                h.back_since = None;
                None
            }
        }
    }

    /// The port held down, if any.
    pub(crate) fn held(&self) -> Option<Port> {
        self.held.map(|h| h.port)
    }

    /// Forgets the held port (the gateway stops): the port to bring up.
    fn release(&mut self) -> Option<Port> {
        self.held.take().map(|h| h.port)
    }
}

/// The supervisor's watch over the ports' carrier.
pub(crate) struct LinkWatch {
    ctl: IfaceCtl,
    /// Interface names, by `Port as usize`.
    names: [String; 2],
    /// With pass-through on.
    fault: Option<LinkFault>,
    restore_after: Duration,
    /// Carrier at the last look (None: not looked yet).
    carrier: [Option<bool>; 2],
    counters: Arc<ProcessCounters>,
}

impl LinkWatch {
    /// How often the supervisor looks.
    pub(crate) const EVERY: Duration = Duration::from_millis(20);

    /// For ports `inner` and `outer`. With pass-through on, a port found
    /// administratively down is brought up (a gateway that did not stop
    /// cleanly may have left it held down).
    pub(crate) fn new(
        inner: &str,
        outer: &str,
        cfg: &LinkFaultConfig,
        counters: Arc<ProcessCounters>,
    ) -> Result<LinkWatch, px_io::IfaceError> {
        let ctl = IfaceCtl::new()?;
        let mut names = [String::new(), String::new()];
        names[Port::Inner as usize] = inner.to_owned();
        names[Port::Outer as usize] = outer.to_owned();
        let restore_after = Duration::from_millis(cfg.restore_after_ms);
        let w = LinkWatch {
            ctl,
            names,
            fault: cfg.pass_through.then(|| LinkFault::new(restore_after)),
            restore_after,
            carrier: [None; 2],
            counters,
        };
        if cfg.pass_through {
            for name in &w.names {
                if w.ctl.flags(name).is_ok_and(|f| f & libc::IFF_UP as u32 == 0) {
                    match w.ctl.set_up(name, true) {
                        Ok(()) => warn!(
                            "px gateway: {name} was down at start (held down by a gateway that did not stop cleanly?): brought up ([link_fault] pass_through)"
                        ),
                        Err(e) => error!("px gateway: {name} is down and cannot be brought up: {e}"),
                    }
                }
            }
        }
        Ok(w)
    }

    fn name(&self, p: Port) -> &str {
        &self.names[p as usize]
    }

    fn state(&self, p: Port) -> Option<LinkState> {
        let f = self.ctl.flags(self.name(p)).ok()?;
        Some(LinkState { up: f & libc::IFF_UP as u32 != 0, carrier: f & libc::IFF_RUNNING as u32 != 0 })
    }

    /// One look at `now`: log and count carrier changes, pass a fault on.
    pub(crate) fn poll(&mut self, now: Instant) {
        let (Some(outer), Some(inner)) = (self.state(Port::Outer), self.state(Port::Inner)) else { return };
        let mut s = [outer; 2];
        s[Port::Inner as usize] = inner;
        let held = self.fault.as_ref().and_then(LinkFault::held);
        for p in [Port::Outer, Port::Inner] {
            let st = s[p as usize];
            let state = match (st.up, st.carrier) {
                (false, _) => LINK_DOWN,
                (true, false) => LINK_NO_CARRIER,
                (true, true) => LINK_UP,
            };
            self.counters.link_state[p as usize].store(state, Ordering::Relaxed);
            // The port held down has no carrier because of us; one an
            // operator took down is not a fault.
            if Some(p) == held || !st.up {
                self.carrier[p as usize] = None;
                continue;
            }
            let before = self.carrier[p as usize].replace(st.carrier);
            let port = if p == Port::Inner { "inner" } else { "outer" };
            match (before, st.carrier) {
                (Some(true) | None, false) => {
                    self.counters.carrier_lost[p as usize].fetch_add(1, Ordering::Relaxed);
                    warn!("px gateway: {port} {} has no carrier: nothing crosses the gateway", self.name(p));
                }
                (Some(false), true) => info!("px gateway: {port} {} has its carrier back", self.name(p)),
                _ => {}
            }
        }
        let Some(action) = self.fault.as_mut().and_then(|f| f.on_state(now, s)) else { return };
        match action {
            Action::TakeDown { port, cause } => {
                let (name, cause) = (self.name(port).to_owned(), self.name(cause).to_owned());
                match self.ctl.set_up(&name, false) {
                    Ok(()) => {
                        self.counters.link_fault_downs[port as usize].fetch_add(1, Ordering::Relaxed);
                        self.counters.held_down[port as usize].store(1, Ordering::Relaxed);
                        warn!(
                            "px gateway: link-fault pass-through: {name} taken down because {cause} lost its carrier; it comes up {} ms after {cause}'s carrier is back",
                            self.restore_after.as_millis()
                        );
                    }
                    Err(e) => error!("px gateway: link-fault pass-through: cannot take {name} down: {e}"),
                }
            }
            Action::BringUp { port, cause } => {
                let why = format!("{}'s carrier is back", self.name(cause));
                self.bring_up(port, &why);
            }
        }
    }

    fn bring_up(&self, port: Port, why: &str) {
        let name = self.name(port);
        match self.ctl.set_up(name, true) {
            Ok(()) => {
                self.counters.held_down[port as usize].store(0, Ordering::Relaxed);
                info!("px gateway: link-fault pass-through: {name} up again: {why}");
            }
            Err(e) => error!(
                "px gateway: link-fault pass-through: cannot bring {name} up ({why}): {e}; ip link set {name} up"
            ),
        }
    }

    /// At stop: the port held down comes up again.
    pub(crate) fn release(&mut self) {
        if let Some(port) = self.fault.as_mut().and_then(LinkFault::release) {
            self.bring_up(port, "the gateway stops");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UP: LinkState = LinkState { up: true, carrier: true };
    const NO_CARRIER: LinkState = LinkState { up: true, carrier: false };
    const ADMIN_DOWN: LinkState = LinkState { up: false, carrier: false };

    /// States by (outer, inner).
    fn st(outer: LinkState, inner: LinkState) -> [LinkState; 2] {
        let mut s = [outer; 2];
        s[Port::Inner as usize] = inner;
        s
    }

    #[test]
    fn a_lost_carrier_takes_the_other_port_down_until_it_is_back_long_enough() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut f = LinkFault::new(Duration::from_millis(500));
        assert_eq!(f.on_state(at(0), st(UP, UP)), None);
        // Outer loses its carrier: inner goes down.
        assert_eq!(
            f.on_state(at(10), st(NO_CARRIER, UP)),
            Some(Action::TakeDown { port: Port::Inner, cause: Port::Outer })
        );
        assert_eq!(f.held(), Some(Port::Inner));
        // Inner, taken down, has no carrier either: nothing more.
        assert_eq!(f.on_state(at(20), st(NO_CARRIER, ADMIN_DOWN)), None);
        // Outer's carrier back, then a flap: the wait starts again.
        assert_eq!(f.on_state(at(100), st(UP, ADMIN_DOWN)), None);
        assert_eq!(f.on_state(at(400), st(NO_CARRIER, ADMIN_DOWN)), None);
        assert_eq!(f.on_state(at(700), st(UP, ADMIN_DOWN)), None);
        assert_eq!(f.on_state(at(1199), st(UP, ADMIN_DOWN)), None, "back only 499 ms");
        assert_eq!(
            f.on_state(at(1200), st(UP, ADMIN_DOWN)),
            Some(Action::BringUp { port: Port::Inner, cause: Port::Outer })
        );
        assert_eq!(f.held(), None);
        // The other way round.
        assert_eq!(
            f.on_state(at(2000), st(UP, NO_CARRIER)),
            Some(Action::TakeDown { port: Port::Outer, cause: Port::Inner })
        );
        assert_eq!(f.release(), Some(Port::Outer));
        assert_eq!(f.held(), None);
    }

    #[test]
    fn no_fault_to_pass_on_when_both_are_down_or_an_operator_took_one_down() {
        let now = Instant::now();
        let mut f = LinkFault::new(Duration::ZERO);
        assert_eq!(f.on_state(now, st(NO_CARRIER, NO_CARRIER)), None);
        assert_eq!(f.on_state(now, st(ADMIN_DOWN, UP)), None);
        assert_eq!(f.on_state(now, st(UP, ADMIN_DOWN)), None);
        assert_eq!(f.held(), None);
    }
}
