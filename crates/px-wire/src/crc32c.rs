//! CRC32c (Castagnoli, RFC 3720 §B.4): the checksum of SCTP (RFC 9260
//! §6.8 and Appendix A), which is not the Internet checksum and so cannot
//! be finished from a one's complement pseudo-header sum.
//!
//! Reflected polynomial 0x82F63B78, register preset to all ones and
//! complemented at the end; computed eight bytes a step with eight tables
//! built at compile time (slice-by-8), so no allocation and no dependency.

/// The reflected Castagnoli polynomial.
const POLY: u32 = 0x82F6_3B78;

/// `TABLES[0]` is the byte-at-a-time table; `TABLES[k][b]` is the CRC of
/// byte `b` followed by `k` zero bytes, which lets eight bytes be folded
/// into the register with eight independent look-ups.
static TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut c = b as u32;
        let mut i = 0;
        while i < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            i += 1;
        }
        t[0][b] = c;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
}

/// Folds `data` into a running CRC register (not complemented: start from
/// `!0` and complement the result, as [`crc32c`] does).
pub fn update(mut crc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        crc = TABLES[7][(lo & 0xff) as usize]
            ^ TABLES[6][((lo >> 8) & 0xff) as usize]
            ^ TABLES[5][((lo >> 16) & 0xff) as usize]
            ^ TABLES[4][(lo >> 24) as usize]
            ^ TABLES[3][(hi & 0xff) as usize]
            ^ TABLES[2][((hi >> 8) & 0xff) as usize]
            ^ TABLES[1][((hi >> 16) & 0xff) as usize]
            ^ TABLES[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ TABLES[0][((crc ^ u32::from(b)) & 0xff) as usize];
    }
    crc
}

/// The CRC32c of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    !update(!0, data)
}

/// Offset of the checksum field in the SCTP common header (RFC 9260 §3.1).
pub const SCTP_CHECKSUM: usize = 8;

/// Writes the checksum of the SCTP packet `sctp` (common header first,
/// ending where the IP packet ends) into its field: the CRC32c of the
/// packet with the field zeroed, stored least significant byte first, as
/// Linux stores it (`sctp_compute_cksum`: `cpu_to_le32(~crc32c(~0, …))`
/// with the field summed as zeros; RFC 9260 Appendix A). False, and
/// nothing written, if the packet is shorter than the common header.
pub fn finish_sctp(sctp: &mut [u8]) -> bool {
    if sctp.len() < 12 {
        return false;
    }
    let field = SCTP_CHECKSUM..SCTP_CHECKSUM + 4;
    sctp[field.clone()].fill(0);
    let c = crc32c(sctp);
    sctp[field].copy_from_slice(&c.to_le_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The bit-at-a-time definition the tables must agree with.
    fn bitwise(data: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in data {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            }
        }
        !c
    }

    #[test]
    fn check_values() {
        // The catalogue's check value of CRC-32C (iSCSI) and RFC 3720
        // §B.4's 32 bytes of zeros and of ones.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        assert_eq!(crc32c(&[]), 0);
    }

    #[test]
    fn a_short_packet_is_refused_untouched() {
        let mut p = [7u8; 11];
        assert!(!finish_sctp(&mut p));
        assert_eq!(p, [7u8; 11]);
    }

    proptest! {
        #[test]
        fn slice_by_8_equals_bitwise(data in proptest::collection::vec(any::<u8>(), 0..200), split in 0usize..200) {
            prop_assert_eq!(crc32c(&data), bitwise(&data));
            let s = split.min(data.len());
            prop_assert_eq!(!update(update(!0, &data[..s]), &data[s..]), bitwise(&data));
        }
    }
}
