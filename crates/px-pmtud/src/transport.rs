//! What a transport (QUIC, any UDP protocol) takes from one path MTU
//! measurement: the UDP payload size to start at, and the ceiling its own
//! in-band search (RFC 8899 DPLPMTUD, quinn's `MtuDiscovery`) should not
//! go beyond.
//!
//! A QUIC stack starts at 1200 bytes (RFC 9000 §14) and climbs by probing,
//! one probe per round trip or slower. One F-PMTUD round trip before the
//! handshake gives the path MTU; [`TransportStart::from_measurement`]
//! turns it into the start. Guarantees: the start is a size the
//! measurement saw pass (its lower bound), never below the transport's
//! floor; `None` when there is nothing usable (no answer, or a path below
//! the floor), so the transport keeps its own default.

use crate::session::Measurement;

/// IPv4 + UDP header bytes in front of a UDP payload.
pub const IPV4_UDP_OVERHEAD: u16 = 28;
/// IPv6 + UDP header bytes in front of a UDP payload.
pub const IPV6_UDP_OVERHEAD: u16 = 48;
/// The smallest UDP payload a QUIC path must carry (RFC 9000 §14).
pub const QUIC_MIN_PAYLOAD: u16 = 1200;

/// Where a transport starts on a measured path (UDP payload sizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportStart {
    /// Largest UDP payload known to pass: send data packets this large
    /// from the start.
    pub initial_payload: u16,
    /// Largest UDP payload the path may carry as far as the measurement
    /// knows: the upper bound for the transport's own search (equal to
    /// `initial_payload` when the answer was exact).
    pub search_ceiling: u16,
    /// A probe of exactly the path MTU was acknowledged with this
    /// measurement's nonce (exact and authenticated): the transport may
    /// skip its own search.
    pub confirmed: bool,
}

impl TransportStart {
    /// The start for a transport whose smallest payload is `floor` (1200
    /// for QUIC), from measurement `m` of an IPv4 (`ipv6 = false`) or IPv6
    /// path.
    #[must_use]
    pub fn from_measurement(m: &Measurement, ipv6: bool, floor: u16) -> Option<TransportStart> {
        let overhead = if ipv6 { IPV6_UDP_OVERHEAD } else { IPV4_UDP_OVERHEAD };
        let initial_payload = m.pmtu?.checked_sub(overhead).filter(|&p| p >= floor)?;
        let high = m.pmtu_high.and_then(|h| h.checked_sub(overhead)).unwrap_or(initial_payload);
        Some(TransportStart {
            initial_payload,
            search_ceiling: high.max(initial_payload),
            confirmed: m.exact && m.authenticated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn m(pmtu: Option<u16>, high: Option<u16>, exact: bool) -> Measurement {
        Measurement {
            method: "fpmtud".into(),
            pmtu,
            exact,
            pmtu_high: high,
            round_trips: 1,
            probes: 1,
            elapsed: Duration::from_millis(2),
            link_mtu: 9000,
            note: String::new(),
            authenticated: true,
        }
    }

    #[test]
    fn exact_jumbo_path_starts_full_size() {
        let s = TransportStart::from_measurement(&m(Some(9000), Some(9000), true), false, QUIC_MIN_PAYLOAD);
        assert_eq!(s, Some(TransportStart { initial_payload: 8972, search_ceiling: 8972, confirmed: true }));
        let s6 = TransportStart::from_measurement(&m(Some(9000), Some(9000), true), true, QUIC_MIN_PAYLOAD);
        assert_eq!(s6.map(|s| s.initial_payload), Some(8952));
    }

    #[test]
    fn estimate_starts_at_lower_bound_and_searches_to_upper() {
        let s = TransportStart::from_measurement(&m(Some(1496), Some(1500), false), false, QUIC_MIN_PAYLOAD).unwrap();
        assert_eq!((s.initial_payload, s.search_ceiling, s.confirmed), (1468, 1472, false));
    }

    #[test]
    fn unauthenticated_answer_is_not_confirmed() {
        let mut x = m(Some(1500), Some(1500), true);
        x.authenticated = false;
        assert!(!TransportStart::from_measurement(&x, false, QUIC_MIN_PAYLOAD).unwrap().confirmed);
    }

    #[test]
    fn nothing_usable_keeps_the_default() {
        assert_eq!(TransportStart::from_measurement(&m(None, None, false), false, QUIC_MIN_PAYLOAD), None);
        // 1200 + 28 = 1228 is the smallest IPv4 path MTU QUIC can use.
        assert_eq!(TransportStart::from_measurement(&m(Some(1227), None, true), false, QUIC_MIN_PAYLOAD), None);
        assert!(TransportStart::from_measurement(&m(Some(1228), None, true), false, QUIC_MIN_PAYLOAD).is_some());
        // A bogus header-less size never underflows.
        assert_eq!(TransportStart::from_measurement(&m(Some(20), Some(10), true), false, 0), None);
    }

    #[test]
    fn ceiling_never_below_start() {
        let s = TransportStart::from_measurement(&m(Some(1500), Some(1400), false), false, QUIC_MIN_PAYLOAD).unwrap();
        assert_eq!(s.search_ceiling, 1472);
    }
}
