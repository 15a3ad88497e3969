//! quinn's transport and endpoint settings for the two ways the lab runs
//! it: the largest UDP payload fixed (the blog's scenarios: PMTUD off,
//! every packet that size from the first), or quinn's own PMTUD from a
//! chosen start up to a ceiling.

use std::sync::Arc;

use quinn::{EndpointConfig, MtuDiscoveryConfig, TransportConfig};

use crate::QuicError;

/// How a connection sizes its packets (UDP payload bytes, what quinn
/// calls the MTU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    /// Every packet up to this size from the start; no PMTUD, and black
    /// hole detection cannot lower it (the floor is the same size).
    Fixed(u16),
    /// quinn's PMTUD (binary search, RFC 8899 probes) from `initial` up to
    /// `ceiling`.
    Discover {
        /// Where it starts (quinn's default: 1200).
        initial: u16,
        /// The highest size its search tries.
        ceiling: u16,
    },
}

impl Sizing {
    /// The largest UDP payload a connection of this sizing may send.
    #[must_use]
    pub fn largest(self) -> u16 {
        match self {
            Sizing::Fixed(p) => p,
            Sizing::Discover { initial, ceiling } => initial.max(ceiling),
        }
    }
}

/// The transport settings for `sizing`; everything else is quinn's default
/// (Cubic, flow control windows).
#[must_use]
pub fn transport(sizing: Sizing) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    match sizing {
        Sizing::Fixed(p) => {
            t.initial_mtu(p).min_mtu(p).mtu_discovery_config(None);
        }
        Sizing::Discover { initial, ceiling } => {
            let mut d = MtuDiscoveryConfig::default();
            d.upper_bound(ceiling);
            t.initial_mtu(initial).mtu_discovery_config(Some(d));
        }
    }
    Arc::new(t)
}

/// The endpoint settings: accept UDP payloads up to `max_payload` (quinn's
/// default is 1472, which would cap a jumbo path through the peer's
/// `max_udp_payload_size` transport parameter).
pub fn endpoint(max_payload: u16) -> Result<EndpointConfig, QuicError> {
    let mut e = EndpointConfig::default();
    e.max_udp_payload_size(max_payload)
        .map_err(|_| QuicError::Config(format!("largest UDP payload {max_payload} is outside 1200..=65527")))?;
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_rejects_sizes_quic_cannot_use() {
        assert!(endpoint(1199).is_err());
        assert!(endpoint(8972).is_ok());
    }
}
