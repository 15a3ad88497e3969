//! Payload bytes for simulated UDP datagrams.
//!
//! Simulated packets carry sizes, not bytes, so that forwarding never
//! copies or allocates. Where a component needs real bytes — the F-PMTUD
//! probes and reports of `px-pmtud`'s wire format — the sender puts them in
//! a [`Datagrams`] store shared with the receiver, and the packet carries
//! the store index ([`crate::packet::Payload::Udp`]). Every fragment of a
//! datagram carries the index; a receiver that only got the first fragment
//! may look at only the bytes that fragment carried
//! ([`first_fragment_payload`]).

use std::cell::RefCell;
use std::rc::Rc;

use crate::packet::{IPV4_HEADER, Packet};

/// UDP header length.
pub const UDP_HEADER: u32 = 8;
/// IPv4 + UDP header bytes in front of a datagram's payload.
pub const UDP_OVERHEAD: u32 = IPV4_HEADER + UDP_HEADER;

/// A store of datagram payloads shared by the endpoints of one run.
#[derive(Clone, Debug, Default)]
pub struct Datagrams(Rc<RefCell<Vec<Vec<u8>>>>);

impl Datagrams {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `payload`; returns its handle.
    pub fn put(&self, payload: Vec<u8>) -> u32 {
        let mut v = self.0.borrow_mut();
        v.push(payload);
        u32::try_from(v.len() - 1).unwrap_or(u32::MAX)
    }

    /// Runs `f` on the payload behind `handle` (empty if unknown).
    pub fn with<R>(&self, handle: u32, f: impl FnOnce(&[u8]) -> R) -> R {
        let v = self.0.borrow();
        f(v.get(handle as usize).map_or(&[][..], Vec::as_slice))
    }

    /// Number of payloads stored.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.borrow().len()
    }

    /// True when nothing is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How many UDP payload bytes the first fragment `pkt` carries (the IP
/// payload minus the UDP header).
#[must_use]
pub fn first_fragment_payload(pkt: &Packet) -> usize {
    pkt.size.saturating_sub(UDP_OVERHEAD) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Payload, fragment};

    #[test]
    fn store_round_trip() {
        let d = Datagrams::new();
        let h = d.put(b"FPMT...".to_vec());
        assert_eq!(d.with(h, <[u8]>::to_vec), b"FPMT...".to_vec());
        assert_eq!(d.with(99, <[u8]>::len), 0);
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn first_fragment_carries_a_prefix() {
        let pkt = Packet::new(1500, false, Payload::Udp { handle: 0 });
        let mut pieces = Vec::new();
        fragment(&pkt, 1000, |p| pieces.push(p));
        // 976 IP payload bytes, of which 8 are the UDP header.
        assert_eq!(first_fragment_payload(&pieces[0]), 968);
    }
}
