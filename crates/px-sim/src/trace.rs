//! Trace hash: a fingerprint of everything a run did.
//!
//! Every processed event folds its time and its facts (node, packet fields,
//! drop reason) into a 64-bit FNV-1a hash. Two runs with the same
//! configuration and seed must end with the same hash; a test that changes
//! the seed must see a different one. FNV-1a is written out here (rather
//! than `std::hash::DefaultHasher`) because its output is fixed by
//! definition and will not change with the Rust release.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// An FNV-1a accumulator over 64-bit words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceHash {
    state: u64,
    events: u64,
}

impl Default for TraceHash {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceHash {
    /// The hash of an empty trace.
    #[must_use]
    pub const fn new() -> Self {
        TraceHash { state: FNV_OFFSET, events: 0 }
    }

    /// Folds one word (little-endian bytes) into the hash.
    pub fn word(&mut self, w: u64) {
        for b in w.to_le_bytes() {
            self.state ^= u64::from(b);
            self.state = self.state.wrapping_mul(FNV_PRIME);
        }
    }

    /// Folds a whole event: a kind tag and its words.
    pub fn event(&mut self, kind: u8, words: &[u64]) {
        self.events += 1;
        self.word(u64::from(kind));
        for w in words {
            self.word(*w);
        }
    }

    /// The current hash value.
    #[must_use]
    pub const fn value(&self) -> u64 {
        self.state
    }

    /// Number of events folded in.
    #[must_use]
    pub const fn events(&self) -> u64 {
        self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_fnv1a_value() {
        // FNV-1a of the single byte 'a' is 0xaf63dc4c8601ec8c (published test vector).
        let mut h = TraceHash::new();
        h.state ^= u64::from(b'a');
        h.state = h.state.wrapping_mul(FNV_PRIME);
        assert_eq!(h.value(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn order_matters() {
        let mut a = TraceHash::new();
        a.event(1, &[1, 2]);
        let mut b = TraceHash::new();
        b.event(1, &[2, 1]);
        assert_ne!(a.value(), b.value());
        assert_eq!(a.events(), 1);
    }
}
