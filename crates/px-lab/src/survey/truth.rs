//! The lab's ground truth: which address behaves how, the targets
//! (address × port), and the comparison of the survey's records with it.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use px_survey::record::{Class, Pmtud, Record, Stop};
use serde::Serialize;

/// The ports the servers listen on.
pub const PORTS: [u16; 6] = [80, 8080, 8000, 8008, 8888, 8081];
/// Ports of the `closed` and `prohibited` addresses (nothing listens).
pub(super) const CLOSED_PORTS: [u16; 6] = [9, 13, 19, 21, 23, 25];

/// A target's behaviour in the lab: its ground truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Truth {
    Ok,
    Lossy,
    IcmpBlackhole,
    FragFilterLastHop,
    FragFilterInPath,
    /// r3 drops fragments with a non-zero offset (iptables `-f`): the
    /// first fragment passes every router.
    FragFilterNonFirst,
    PoorReassembly,
    /// Behind a fourth router with connection tracking (it holds lone first
    /// fragments), a server whose reassembly never completes.
    NatPoorReassembly,
    /// Behind the conntrack router, a server that answers fragments.
    NatOk,
    Dead,
    Closed,
    /// r3 answers every SYN with ICMP "administratively prohibited".
    Prohibited,
}

impl Truth {
    /// Shares of the addresses, in percent (the rest is `Ok`).
    pub const MIX: [(Truth, u32); 11] = [
        (Truth::Lossy, 8),
        (Truth::IcmpBlackhole, 8),
        (Truth::FragFilterLastHop, 4),
        (Truth::FragFilterInPath, 3),
        (Truth::FragFilterNonFirst, 2),
        (Truth::PoorReassembly, 3),
        (Truth::NatPoorReassembly, 2),
        (Truth::NatOk, 2),
        (Truth::Dead, 2),
        (Truth::Closed, 2),
        (Truth::Prohibited, 2),
    ];

    /// Routers between the client and the address.
    pub fn routers(self) -> u8 {
        if self.behind_nat() { 4 } else { 3 }
    }

    /// Served from behind the conntrack router.
    pub(super) fn behind_nat(self) -> bool {
        matches!(self, Truth::NatPoorReassembly | Truth::NatOk)
    }

    /// Nothing listens on its ports.
    pub(super) fn refuses(self) -> bool {
        matches!(self, Truth::Closed | Truth::Prohibited)
    }

    /// The class the survey must give.
    pub fn class(self) -> Class {
        match self {
            Truth::Ok | Truth::Lossy | Truth::IcmpBlackhole | Truth::NatOk => Class::FragmentsOk,
            Truth::FragFilterLastHop => Class::FilteredLastHop,
            Truth::FragFilterInPath => Class::FilteredInPath,
            // The first fragments reach every router: where the rest are
            // lost is not observable, and the survey must not claim it.
            Truth::FragFilterNonFirst | Truth::PoorReassembly | Truth::NatPoorReassembly => Class::FragmentsLost,
            Truth::Dead | Truth::Closed | Truth::Prohibited => Class::Unresponsive,
        }
    }

    /// The PMTUD verdict the address's one test must give.
    pub fn pmtud(self) -> Pmtud {
        match self {
            Truth::IcmpBlackhole => Pmtud::Fails,
            Truth::Dead | Truth::Closed | Truth::Prohibited => Pmtud::NotTested,
            _ => Pmtud::Works,
        }
    }

    /// Where fragments stop (hop number), for the filtering classes.
    fn stop_hop(self) -> Option<u8> {
        match self {
            Truth::FragFilterLastHop => Some(3),
            Truth::FragFilterInPath => Some(2),
            _ => None,
        }
    }
}

/// One target the survey got wrong.
#[derive(Clone, Debug, Serialize)]
pub struct Mismatch {
    pub target: String,
    pub truth: Truth,
    pub got: String,
}

/// The target addresses of the lab, in order.
pub fn addresses() -> Vec<Ipv4Addr> {
    let a = (1..=254).map(|i| Ipv4Addr::new(203, 0, 113, i));
    let b = (129..=254).map(|i| Ipv4Addr::new(198, 51, 100, i));
    a.chain(b).collect()
}

/// Gives each address a behaviour (seeded shuffle, the mix of
/// [`Truth::MIX`], at least one address of each when there are enough).
pub fn assign(addrs: &[Ipv4Addr], seed: u64) -> Vec<(Ipv4Addr, Truth)> {
    let mut order: Vec<usize> = (0..addrs.len()).collect();
    let mut s = seed | 1;
    for i in (1..order.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let mut truth = vec![Truth::Ok; addrs.len()];
    let mut k = 0;
    for (t, pct) in Truth::MIX {
        let n = ((addrs.len() as u32 * pct).div_ceil(100) as usize).max(usize::from(addrs.len() >= 16));
        for _ in 0..n {
            if k < order.len() {
                truth[order[k]] = t;
                k += 1;
            }
        }
    }
    addrs.iter().copied().zip(truth).collect()
}

/// The targets: address × port, round robin over the addresses, `n` in all.
pub fn targets(assigned: &[(Ipv4Addr, Truth)], n: usize) -> Vec<(Ipv4Addr, u16, Truth)> {
    let mut out = Vec::with_capacity(n);
    for round in 0.. {
        for &(a, t) in assigned {
            if out.len() == n {
                return out;
            }
            let ports = if t.refuses() { CLOSED_PORTS } else { PORTS };
            out.push((a, ports[round % ports.len()], t));
        }
        if round + 1 >= PORTS.len() {
            break;
        }
    }
    out
}

/// Compares the survey's records with the truth: every target must have
/// its class, the filtered ones their stop hop, those whose fragments pass
/// every router no position and the path's length, every answering address
/// exactly one PMTUD test with its verdict, and no probe sent after its
/// test decided; a refused connection is not retried.
pub fn compare(records: &[Record], truth: &HashMap<String, Truth>) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut tested: HashMap<Ipv4Addr, usize> = HashMap::new();
    let mut bad = |target: &str, t: Truth, got: String| out.push(Mismatch { target: target.into(), truth: t, got });
    for r in records {
        let Some(&t) = truth.get(&r.target) else {
            bad(&r.target, Truth::Ok, "a target the lab did not list".into());
            continue;
        };
        if r.class != t.class() {
            bad(&r.target, t, format!("class {}", r.class.name()));
        }
        let path = r.fragment_path.as_ref().map(|p| (p.stop, p.stop_hop, p.fragments_reach, p.routers));
        if let Some(hop) = t.stop_hop()
            && path.and_then(|p| p.1) != Some(hop)
        {
            bad(&r.target, t, format!("fragments stop at {path:?}"));
        }
        if t.class() == Class::FragmentsLost {
            let n = t.routers();
            if path != Some((Stop::Unknown, None, n, n)) {
                bad(&r.target, t, format!("fragments should reach all {n} routers, position unknown: {path:?}"));
            }
        }
        if t == Truth::Prohibited && r.plain.attempts != 1 {
            bad(&r.target, t, format!("a refusal retried: {} attempts", r.plain.attempts));
        }
        if r.late_probes != 0 {
            bad(&r.target, t, format!("{} probes sent after their test decided", r.late_probes));
        }
        match r.icmp_pmtud {
            Pmtud::SameAddress => {}
            v => {
                *tested.entry(r.addr).or_default() += usize::from(v != Pmtud::NotTested);
                if v != t.pmtud() {
                    bad(&r.target, t, format!("icmp_pmtud {v:?} ({})", r.pmtud_note.as_deref().unwrap_or("")));
                }
            }
        }
    }
    for r in records {
        let t = truth.get(&r.target).copied().unwrap_or(Truth::Ok);
        let n = tested.get(&r.addr).copied().unwrap_or(0);
        if t.pmtud() != Pmtud::NotTested && n != 1 {
            out.push(Mismatch { target: r.target.clone(), truth: t, got: format!("{n} PMTUD tests for its address") });
        }
    }
    if records.len() != truth.len() {
        out.push(Mismatch {
            target: "(all)".into(),
            truth: Truth::Ok,
            got: format!("{} records for {} targets", records.len(), truth.len()),
        });
    }
    out
}
