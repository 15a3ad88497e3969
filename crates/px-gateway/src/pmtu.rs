//! Path MTUs learned from ICMP "fragmentation needed" (RFC 1191) and
//! "packet too big" (RFC 8201) toward destinations outside: a bounded cache
//! whose entries expire (RFC 1191 §6.3: after about 10 minutes an estimate
//! should be raised again, here by forgetting it).

use core::net::IpAddr;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(crate) struct PmtuCache {
    /// Destination → (MTU, expiry, insertion number).
    map: HashMap<IpAddr, (u16, Instant, u64)>,
    /// Insertion order; entries whose number no longer matches the map's
    /// were superseded and are skipped.
    order: VecDeque<(IpAddr, u64)>,
    max: usize,
    lifetime: Duration,
    next: u64,
}

impl PmtuCache {
    pub fn new(max: usize, lifetime: Duration) -> PmtuCache {
        PmtuCache { map: HashMap::new(), order: VecDeque::new(), max, lifetime, next: 0 }
    }

    /// The learned MTU toward `dst`, if any and not expired.
    pub fn get(&self, dst: IpAddr, now: Instant) -> Option<u16> {
        self.map.get(&dst).filter(|(_, exp, _)| *exp > now).map(|(m, _, _)| *m)
    }

    /// Records `mtu` toward `dst` (only ever lowers a live entry). Returns
    /// whether anything changed.
    pub fn learn(&mut self, dst: IpAddr, mtu: u16, now: Instant) -> bool {
        if self.get(dst, now).is_some_and(|m| m <= mtu) {
            return false;
        }
        while self.map.len() >= self.max && !self.map.contains_key(&dst) {
            let Some((old, n)) = self.order.pop_front() else { break };
            if self.map.get(&old).is_some_and(|e| e.2 == n) {
                self.map.remove(&old);
            }
        }
        let n = self.next;
        self.next += 1;
        self.map.insert(dst, (mtu, now + self.lifetime, n));
        self.order.push_back((dst, n));
        if self.order.len() > 2 * self.max {
            let map = &self.map;
            self.order.retain(|(a, n)| map.get(a).is_some_and(|e| e.2 == *n));
        }
        true
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn a(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 51, 100, n))
    }

    #[test]
    fn lowers_only_expires_and_bounds() {
        let t0 = Instant::now();
        let mut c = PmtuCache::new(2, Duration::from_secs(600));
        assert!(c.learn(a(1), 1400, t0));
        assert!(!c.learn(a(1), 1450, t0));
        assert!(c.learn(a(1), 1300, t0));
        assert_eq!(c.get(a(1), t0), Some(1300));
        assert_eq!(c.get(a(1), t0 + Duration::from_secs(601)), None);
        c.learn(a(2), 1280, t0);
        c.learn(a(3), 1280, t0 + Duration::from_secs(1));
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(a(1), t0), None, "oldest evicted");
        assert_eq!(c.get(a(3), t0 + Duration::from_secs(1)), Some(1280));
        for i in 0..100 {
            c.learn(a(3), 1279 - i, t0);
        }
        assert!(c.order.len() <= 4);
    }
}
