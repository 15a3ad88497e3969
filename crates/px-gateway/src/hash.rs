//! The keyed hash of everything an outside sender chooses the key of
//! (flow keys, the handshake memory's slots, open caravans): SipHash-1-3
//! under a seed the runtime draws from the OS random source.

use core::hash::{BuildHasher, Hasher};
/// Keyed hash of flow keys: SipHash-1-3 (the hash of std's `HashMap`), with
/// a 128-bit key derived from `Config::hash_seed`, which the runtime draws
/// from the OS random source. Flow keys are chosen by outside senders; with
/// an unkeyed or weakly keyed hash they could aim a flood at one bucket
/// (hash flooding); SipHash is a PRF, so without the key they cannot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeededHash(pub u64);

/// SipHash-1-3 over the 64-bit words a key writes (keys are short: 2 or 5
/// words, so this is a handful of rounds per lookup).
pub(crate) struct KeyHasher {
    v: [u64; 4],
    len: u64,
}

#[inline(always)]
fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// SplitMix64: spreads one seed over the two key words.
pub(crate) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u64(&mut self, m: u64) {
        self.v[3] ^= m;
        sip_round(&mut self.v);
        self.v[0] ^= m;
        self.len += 8;
    }

    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64);
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        let mut v = self.v;
        let b = (self.len & 0xff) << 56;
        v[3] ^= b;
        sip_round(&mut v);
        v[0] ^= b;
        v[2] ^= 0xff;
        sip_round(&mut v);
        sip_round(&mut v);
        sip_round(&mut v);
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

impl BuildHasher for SeededHash {
    type Hasher = KeyHasher;
    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        let (k0, k1) = (splitmix(self.0), splitmix(self.0 ^ 0x6a09_e667_f3bc_c908));
        KeyHasher {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            len: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SipHash-c-d of one 8-byte word by the rounds and constants used here.
    fn sip(c: usize, d: usize, k0: u64, k1: u64, m: u64) -> u64 {
        let mut v = [
            k0 ^ 0x736f_6d65_7073_6575,
            k1 ^ 0x646f_7261_6e64_6f6d,
            k0 ^ 0x6c79_6765_6e65_7261,
            k1 ^ 0x7465_6462_7974_6573,
        ];
        for (w, rounds) in [(m, c), (8u64 << 56, c)] {
            v[3] ^= w;
            (0..rounds).for_each(|_| sip_round(&mut v));
            v[0] ^= w;
        }
        v[2] ^= 0xff;
        (0..d).for_each(|_| sip_round(&mut v));
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }

    #[test]
    fn the_hash_is_siphash() {
        // The round function and constants give std's SipHash-2-4 (the one
        // std exposes with explicit keys) with 2 and 4 rounds ...
        let (k0, k1, m) = (0x0706_0504_0302_0100u64, 0x0f0e_0d0c_0b0a_0908u64, 0x1122_3344_5566_7788u64);
        #[allow(deprecated)]
        let mut std24 = std::hash::SipHasher::new_with_keys(k0, k1);
        std24.write_u64(m);
        assert_eq!(sip(2, 4, k0, k1, m), std24.finish());
        // ... and the hasher is the same construction with 1 and 3.
        let mut h = SeededHash(5).build_hasher();
        let (hk0, hk1) = (splitmix(5), splitmix(5 ^ 0x6a09_e667_f3bc_c908));
        h.write_u64(m);
        assert_eq!(h.finish(), sip(1, 3, hk0, hk1, m));
    }
}
