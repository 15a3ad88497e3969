//! F-PMTUD message formats: the legacy one of the paper authors' reference
//! tool, and PacketExpress's extended, versioned one (byte diagrams in
//! `docs/fpmtud.md`).
//!
//! * **Legacy**: a probe is any UDP payload that begins with ASCII `FPMT`
//!   (port [`DEFAULT_PORT`] by default); the reply is a 4-byte big-endian
//!   integer, the largest IP packet length received for the probe (the whole
//!   packet's length if it arrived unfragmented).
//! * **Extended (version 1)**: `FPMT` + `PX` + version + type, a 64-bit
//!   nonce that the reply must echo, a probe id, and then a type-specific
//!   body. Because it starts with `FPMT`, a legacy responder answers an
//!   extended probe with its 4-byte reply, so our prober still learns
//!   something from an old responder.
//!
//! Guarantees: parsing never panics and never reads out of bounds whatever
//! the bytes (property-tested); every parsed value is re-emitted to the same
//! bytes (round-trip property); emitting writes only inside the given buffer
//! and fails with an error, not a panic, when it is too small. Nothing here
//! allocates.

use std::fmt;

/// First four bytes of every F-PMTUD probe, legacy or extended.
pub const MAGIC: [u8; 4] = *b"FPMT";
/// Bytes 4..6 of an extended message.
pub const EXT_MARKER: [u8; 2] = *b"PX";
/// The extended version this crate speaks.
pub const VERSION: u8 = 1;
/// UDP port of the reference tool, and our default.
pub const DEFAULT_PORT: u16 = 9999;
/// Common header of extended messages: magic, marker, version, type, nonce,
/// probe id.
pub const HEADER_LEN: usize = 20;
/// Smallest extended probe or confirmation probe.
pub const PROBE_MIN_LEN: usize = 24;
/// Fixed part of an extended report, before the fragment records.
pub const REPORT_FIXED_LEN: usize = 32;
/// One fragment record in a report.
pub const FRAGMENT_RECORD_LEN: usize = 6;
/// Length of a legacy reply.
pub const LEGACY_REPLY_LEN: usize = 4;
/// Most fragment records a report can carry (the count is a `u16`).
pub const MAX_FRAGMENT_RECORDS: usize = u16::MAX as usize;

/// Byte ranges of the extended format (smoltcp-style field table).
mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const MARKER: Range<usize> = 4..6;
    pub const VERSION: usize = 6;
    pub const TYPE: usize = 7;
    pub const NONCE: Range<usize> = 8..16;
    pub const PROBE_ID: Range<usize> = 16..20;
    // Probe and confirmation probe.
    pub const IP_LEN: Range<usize> = 20..22;
    pub const PROBE_RESERVED: Range<usize> = 22..24;
    // Report.
    pub const FLAGS: usize = 20;
    pub const REPORT_RESERVED: usize = 21;
    pub const LINK_MTU: Range<usize> = 22..24;
    pub const PROBE_IP_LEN: Range<usize> = 24..26;
    pub const LARGEST: Range<usize> = 26..28;
    pub const FRAG_COUNT: Range<usize> = 28..30;
    pub const REPORT_RESERVED2: Range<usize> = 30..32;
    // Fragment record, relative to its start.
    pub const REC_OFFSET: std::ops::Range<usize> = 0..2;
    pub const REC_IP_LEN: std::ops::Range<usize> = 2..4;
    pub const REC_FLAGS: usize = 4;
}

/// Report flag: the whole datagram arrived (unfragmented, or reassembled).
pub const FLAG_REASSEMBLED: u8 = 0x01;
/// Report flag: the probe arrived in more than one IP fragment.
pub const FLAG_FRAGMENTED: u8 = 0x02;
/// Report flag: the fragment list was cut short to respect the reply budget.
pub const FLAG_TRUNCATED: u8 = 0x04;
/// Report flag: the report answers a DF-set confirmation probe.
pub const FLAG_CONFIRM: u8 = 0x08;
/// Fragment record flag: more fragments (MF) was set.
pub const RECORD_FLAG_MF: u8 = 0x01;

/// Type byte of an extended message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// Round-1 probe, sent with DF clear.
    Probe = 1,
    /// Round-2 confirmation probe, sent with DF set.
    Confirm = 2,
    /// Responder's answer to either.
    Report = 3,
}

impl MessageType {
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(MessageType::Probe),
            2 => Some(MessageType::Confirm),
            3 => Some(MessageType::Report),
            _ => None,
        }
    }
}

/// Why bytes were not a valid F-PMTUD message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The datagram ends before the part that names its kind or its body.
    #[error("message too short: need {needed} bytes, got {got}")]
    TooShort {
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// The datagram does not begin with `FPMT` (or, for replies, is neither a
    /// 4-byte legacy reply nor an extended report).
    #[error("not an F-PMTUD message")]
    NotFpmt,
    /// An extended reply of a version this crate does not speak.
    #[error("unsupported F-PMTUD version {0}")]
    UnsupportedVersion(u8),
    /// A type byte that is unknown or not valid in this direction.
    #[error("unexpected F-PMTUD message type {0}")]
    UnexpectedType(u8),
}

/// Why a message could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    /// The buffer cannot hold the message.
    #[error("buffer too small: need {needed} bytes, got {got}")]
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// More fragment records than the 16-bit count can describe.
    #[error("{0} fragment records exceed the format's limit")]
    TooManyFragments(usize),
}

/// Which of the two probe messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// Round 1: DF clear, sized to the prober's link MTU, meant to be fragmented.
    Probe,
    /// Round 2: DF set, meant to arrive whole or not at all.
    Confirm,
}

/// An extended probe or confirmation probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProbeRepr {
    /// Probe or confirmation.
    pub kind: ProbeKind,
    /// Secret of this measurement; the report must echo it.
    pub nonce: u64,
    /// Identifies the probe within the measurement.
    pub probe_id: u32,
    /// IP total length the prober sent the probe with.
    pub ip_len: u16,
}

impl ProbeRepr {
    /// Writes the probe into all of `buf` (header, then zero padding up to
    /// `buf.len()`, which is the UDP payload length the caller will send).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        check_room(buf, PROBE_MIN_LEN)?;
        let ty = match self.kind {
            ProbeKind::Probe => MessageType::Probe,
            ProbeKind::Confirm => MessageType::Confirm,
        };
        write_header(buf, ty, self.nonce, self.probe_id);
        buf[field::IP_LEN].copy_from_slice(&self.ip_len.to_be_bytes());
        buf[field::PROBE_RESERVED].fill(0);
        buf[PROBE_MIN_LEN..].fill(0);
        Ok(buf.len())
    }
}

/// Writes a legacy probe (`FPMT` then zeros) into all of `buf`.
pub fn emit_legacy_probe(buf: &mut [u8]) -> Result<usize, EmitError> {
    check_room(buf, MAGIC.len())?;
    buf[field::MAGIC].copy_from_slice(&MAGIC);
    buf[MAGIC.len()..].fill(0);
    Ok(buf.len())
}

/// What a responder received, as far as the format tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// A legacy probe: starts with `FPMT`, nothing else is known. Also any
    /// extended message of a version we do not speak: every version
    /// understands the legacy answer.
    Legacy,
    /// An extended probe or confirmation probe.
    Probe(ProbeRepr),
}

/// Parses the start of a UDP payload received by a responder. `bytes` may be
/// only the part carried by the first IP fragment.
pub fn parse_request(bytes: &[u8]) -> Result<Request, ParseError> {
    if bytes.get(field::MAGIC) != Some(&MAGIC[..]) {
        return Err(if bytes.len() < MAGIC.len() {
            ParseError::TooShort { needed: MAGIC.len(), got: bytes.len() }
        } else {
            ParseError::NotFpmt
        });
    }
    let extended = bytes.get(field::MARKER) == Some(&EXT_MARKER[..]) && bytes.get(field::VERSION) == Some(&VERSION);
    if !extended {
        return Ok(Request::Legacy);
    }
    let ty = bytes.get(field::TYPE).copied().unwrap_or(0);
    let kind = match MessageType::from_byte(ty) {
        Some(MessageType::Probe) => ProbeKind::Probe,
        Some(MessageType::Confirm) => ProbeKind::Confirm,
        _ => return Err(ParseError::UnexpectedType(ty)),
    };
    let b = need(bytes, PROBE_MIN_LEN)?;
    Ok(Request::Probe(ProbeRepr {
        kind,
        nonce: be_u64(&b[field::NONCE]),
        probe_id: be_u32(&b[field::PROBE_ID]),
        ip_len: be_u16(&b[field::IP_LEN]),
    }))
}

/// One IP fragment (or whole packet) as the responder saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FragmentRecord {
    /// Byte offset of the fragment's data in the original datagram
    /// (8 × the IP fragment-offset field).
    pub offset: u16,
    /// IP total length of the fragment.
    pub ip_len: u16,
    /// The IP "more fragments" flag.
    pub more_fragments: bool,
}

impl FragmentRecord {
    fn emit(&self, out: &mut [u8]) {
        out[field::REC_OFFSET].copy_from_slice(&self.offset.to_be_bytes());
        out[field::REC_IP_LEN].copy_from_slice(&self.ip_len.to_be_bytes());
        out[field::REC_FLAGS] = if self.more_fragments { RECORD_FLAG_MF } else { 0 };
        out[field::REC_FLAGS + 1] = 0;
    }

    fn parse(rec: &[u8]) -> Self {
        Self {
            offset: be_u16(&rec[field::REC_OFFSET]),
            ip_len: be_u16(&rec[field::REC_IP_LEN]),
            more_fragments: rec[field::REC_FLAGS] & RECORD_FLAG_MF != 0,
        }
    }
}

/// The fragment list of a report: borrowed records when building one,
/// a zero-copy view over the wire bytes after parsing.
#[derive(Clone, Copy)]
pub enum Fragments<'a> {
    /// Records to emit.
    Records(&'a [FragmentRecord]),
    /// Parsed wire bytes, a whole number of 6-byte records.
    Wire(&'a [u8]),
}

impl<'a> Fragments<'a> {
    /// An empty list.
    #[must_use]
    pub fn none() -> Self {
        Fragments::Records(&[])
    }

    /// Number of records.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Fragments::Records(r) => r.len(),
            Fragments::Wire(w) => w.len() / FRAGMENT_RECORD_LEN,
        }
    }

    /// Whether the list is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records, in wire order.
    pub fn iter(&self) -> impl Iterator<Item = FragmentRecord> + 'a {
        let (records, wire): (&'a [FragmentRecord], &'a [u8]) = match *self {
            Fragments::Records(r) => (r, &[]),
            Fragments::Wire(w) => (&[], w),
        };
        records.iter().copied().chain(wire.chunks_exact(FRAGMENT_RECORD_LEN).map(FragmentRecord::parse))
    }
}

impl fmt::Debug for Fragments<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Fragments<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Fragments<'_> {}

/// An extended report: the responder's answer to a probe or a confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportRepr<'a> {
    /// Echo of the probe's nonce.
    pub nonce: u64,
    /// Echo of the probe's id.
    pub probe_id: u32,
    /// Answers a DF-set confirmation probe.
    pub confirm: bool,
    /// The whole datagram arrived (unfragmented or reassembled).
    pub reassembled: bool,
    /// The probe arrived in more than one fragment.
    pub fragmented: bool,
    /// The fragment list was cut short to fit the reply budget.
    pub truncated: bool,
    /// MTU of the responder's receiving link, 0 when unknown.
    pub link_mtu: u16,
    /// Echo of the IP length the probe said it was sent with.
    pub probe_ip_len: u16,
    /// Largest IP packet length received for the probe: the whole packet's
    /// length if unfragmented, else the largest fragment's. The legacy reply
    /// carries only this number.
    pub largest_ip_len: u16,
    /// Every fragment seen, when the responder could see them individually.
    pub fragments: Fragments<'a>,
}

impl ReportRepr<'_> {
    /// Bytes needed to emit this report.
    #[must_use]
    pub fn buffer_len(&self) -> usize {
        REPORT_FIXED_LEN + FRAGMENT_RECORD_LEN * self.fragments.len()
    }

    /// Bytes a report with `n` fragment records takes.
    #[must_use]
    pub fn len_with(n: usize) -> usize {
        REPORT_FIXED_LEN + FRAGMENT_RECORD_LEN * n
    }

    /// Writes the report at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        let n = self.fragments.len();
        if n > MAX_FRAGMENT_RECORDS {
            return Err(EmitError::TooManyFragments(n));
        }
        let len = self.buffer_len();
        check_room(buf, len)?;
        write_header(buf, MessageType::Report, self.nonce, self.probe_id);
        let mut flags = 0;
        for (set, bit) in [
            (self.reassembled, FLAG_REASSEMBLED),
            (self.fragmented, FLAG_FRAGMENTED),
            (self.truncated, FLAG_TRUNCATED),
            (self.confirm, FLAG_CONFIRM),
        ] {
            if set {
                flags |= bit;
            }
        }
        buf[field::FLAGS] = flags;
        buf[field::REPORT_RESERVED] = 0;
        buf[field::LINK_MTU].copy_from_slice(&self.link_mtu.to_be_bytes());
        buf[field::PROBE_IP_LEN].copy_from_slice(&self.probe_ip_len.to_be_bytes());
        buf[field::LARGEST].copy_from_slice(&self.largest_ip_len.to_be_bytes());
        // n <= u16::MAX was checked above.
        let count = u16::try_from(n).map_err(|_| EmitError::TooManyFragments(n))?;
        buf[field::FRAG_COUNT].copy_from_slice(&count.to_be_bytes());
        buf[field::REPORT_RESERVED2].fill(0);
        for (rec, out) in self.fragments.iter().zip(buf[REPORT_FIXED_LEN..len].chunks_exact_mut(FRAGMENT_RECORD_LEN)) {
            rec.emit(out);
        }
        Ok(len)
    }
}

/// What a prober received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    /// A 4-byte legacy reply: the largest IP length received.
    Legacy(u32),
    /// An extended report.
    Report(ReportRepr<'a>),
}

/// The 4 bytes of a legacy reply.
#[must_use]
pub fn emit_legacy_reply(largest_ip_len: u32) -> [u8; LEGACY_REPLY_LEN] {
    largest_ip_len.to_be_bytes()
}

/// Parses a UDP payload received by a prober. Bytes after the last fragment
/// record are ignored (room for later versions to append fields).
pub fn parse_reply(bytes: &[u8]) -> Result<Reply<'_>, ParseError> {
    if let Ok(four) = <[u8; LEGACY_REPLY_LEN]>::try_from(bytes) {
        return Ok(Reply::Legacy(u32::from_be_bytes(four)));
    }
    let b = need(bytes, HEADER_LEN)?;
    if b[field::MAGIC] != MAGIC || b[field::MARKER] != EXT_MARKER {
        return Err(ParseError::NotFpmt);
    }
    if b[field::VERSION] != VERSION {
        return Err(ParseError::UnsupportedVersion(b[field::VERSION]));
    }
    if MessageType::from_byte(b[field::TYPE]) != Some(MessageType::Report) {
        return Err(ParseError::UnexpectedType(b[field::TYPE]));
    }
    let b = need(bytes, REPORT_FIXED_LEN)?;
    let count = usize::from(be_u16(&b[field::FRAG_COUNT]));
    let end = ReportRepr::len_with(count);
    let b = need(bytes, end)?;
    let flags = b[field::FLAGS];
    Ok(Reply::Report(ReportRepr {
        nonce: be_u64(&b[field::NONCE]),
        probe_id: be_u32(&b[field::PROBE_ID]),
        confirm: flags & FLAG_CONFIRM != 0,
        reassembled: flags & FLAG_REASSEMBLED != 0,
        fragmented: flags & FLAG_FRAGMENTED != 0,
        truncated: flags & FLAG_TRUNCATED != 0,
        link_mtu: be_u16(&b[field::LINK_MTU]),
        probe_ip_len: be_u16(&b[field::PROBE_IP_LEN]),
        largest_ip_len: be_u16(&b[field::LARGEST]),
        fragments: Fragments::Wire(&b[REPORT_FIXED_LEN..end]),
    }))
}

fn write_header(buf: &mut [u8], ty: MessageType, nonce: u64, probe_id: u32) {
    buf[field::MAGIC].copy_from_slice(&MAGIC);
    buf[field::MARKER].copy_from_slice(&EXT_MARKER);
    buf[field::VERSION] = VERSION;
    buf[field::TYPE] = ty as u8;
    buf[field::NONCE].copy_from_slice(&nonce.to_be_bytes());
    buf[field::PROBE_ID].copy_from_slice(&probe_id.to_be_bytes());
}

fn check_room(buf: &[u8], needed: usize) -> Result<(), EmitError> {
    if buf.len() < needed {
        return Err(EmitError::BufferTooSmall { needed, got: buf.len() });
    }
    Ok(())
}

/// The first `needed` bytes, or `TooShort`. Every fixed-offset read below
/// goes through a slice returned by this function, so it cannot go out of
/// bounds.
fn need(bytes: &[u8], needed: usize) -> Result<&[u8], ParseError> {
    bytes.get(..needed).ok_or(ParseError::TooShort { needed, got: bytes.len() })
}

fn be_u16(b: &[u8]) -> u16 {
    let mut a = [0; 2];
    a.copy_from_slice(&b[..2]);
    u16::from_be_bytes(a)
}

fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn legacy_probe_and_reply_bytes() {
        let mut buf = [0xAAu8; 12];
        assert_eq!(emit_legacy_probe(&mut buf), Ok(12));
        assert_eq!(&buf, b"FPMT\0\0\0\0\0\0\0\0");
        assert_eq!(parse_request(&buf), Ok(Request::Legacy));
        assert_eq!(parse_request(b"FPMT"), Ok(Request::Legacy));
        assert_eq!(emit_legacy_reply(1476), [0, 0, 0x05, 0xC4]);
        assert_eq!(parse_reply(&[0, 0, 0x05, 0xC4]), Ok(Reply::Legacy(1476)));
    }

    #[test]
    fn extended_probe_fixed_bytes() {
        let p =
            ProbeRepr { kind: ProbeKind::Confirm, nonce: 0x0102_0304_0506_0708, probe_id: 0x0A0B_0C0D, ip_len: 1500 };
        let mut buf = [0xFFu8; 28];
        assert_eq!(p.emit(&mut buf), Ok(28));
        let expected: [u8; 28] = [
            b'F', b'P', b'M', b'T', b'P', b'X', 1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 0x0A, 0x0B, 0x0C, 0x0D, 0x05, 0xDC, 0, 0,
            0, 0, 0, 0,
        ];
        assert_eq!(buf, expected);
        assert_eq!(parse_request(&buf), Ok(Request::Probe(p)));
    }

    #[test]
    fn extended_report_fixed_bytes() {
        let recs = [
            FragmentRecord { offset: 0, ip_len: 1396, more_fragments: true },
            FragmentRecord { offset: 1376, ip_len: 124, more_fragments: false },
        ];
        let r = ReportRepr {
            nonce: 7,
            probe_id: 1,
            confirm: false,
            reassembled: true,
            fragmented: true,
            truncated: false,
            link_mtu: 1500,
            probe_ip_len: 1500,
            largest_ip_len: 1396,
            fragments: Fragments::Records(&recs),
        };
        let mut buf = [0u8; 64];
        let n = r.emit(&mut buf).expect("fits");
        assert_eq!(n, 44);
        assert_eq!(&buf[..8], b"FPMTPX\x01\x03");
        assert_eq!(&buf[20..32], &[0x03, 0, 0x05, 0xDC, 0x05, 0xDC, 0x05, 0x74, 0, 2, 0, 0]);
        assert_eq!(&buf[32..44], &[0, 0, 0x05, 0x74, 1, 0, 0x05, 0x60, 0, 0x7C, 0, 0]);
        let Ok(Reply::Report(p)) = parse_reply(&buf[..n]) else {
            panic!("report expected");
        };
        assert_eq!(p, r);
        assert_eq!(p.fragments.iter().collect::<Vec<_>>(), recs);
        // Trailing bytes are tolerated; a short list is not.
        assert!(parse_reply(&buf[..n + 3]).is_ok());
        assert_eq!(parse_reply(&buf[..n - 1]), Err(ParseError::TooShort { needed: 44, got: 43 }));
    }

    #[test]
    fn malformed_inputs_are_errors() {
        assert_eq!(parse_request(b"FP"), Err(ParseError::TooShort { needed: 4, got: 2 }));
        assert_eq!(parse_request(b"XPMTxxxx"), Err(ParseError::NotFpmt));
        // Extended marker, known version, report type: not a request.
        assert_eq!(parse_request(b"FPMTPX\x01\x03"), Err(ParseError::UnexpectedType(3)));
        assert_eq!(parse_request(b"FPMTPX\x01\x01short"), Err(ParseError::TooShort { needed: 24, got: 13 }));
        // Unknown version: answered the legacy way.
        assert_eq!(parse_request(b"FPMTPX\x09\x01"), Ok(Request::Legacy));
        assert_eq!(parse_reply(b"FPM"), Err(ParseError::TooShort { needed: 20, got: 3 }));
        let mut v2 = [0u8; 40];
        v2[..8].copy_from_slice(b"FPMTPX\x02\x03");
        assert_eq!(parse_reply(&v2), Err(ParseError::UnsupportedVersion(2)));
        v2[6] = 1;
        v2[7] = 1;
        assert_eq!(parse_reply(&v2), Err(ParseError::UnexpectedType(1)));
    }

    #[test]
    fn emit_errors() {
        let p = ProbeRepr { kind: ProbeKind::Probe, nonce: 1, probe_id: 1, ip_len: 100 };
        assert_eq!(p.emit(&mut [0u8; 23]), Err(EmitError::BufferTooSmall { needed: 24, got: 23 }));
        assert_eq!(emit_legacy_probe(&mut [0u8; 3]), Err(EmitError::BufferTooSmall { needed: 4, got: 3 }));
    }

    fn arb_record() -> impl Strategy<Value = FragmentRecord> {
        (any::<u16>(), any::<u16>(), any::<bool>()).prop_map(|(offset, ip_len, mf)| FragmentRecord {
            offset,
            ip_len,
            more_fragments: mf,
        })
    }

    proptest! {
        #[test]
        fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_request(&bytes);
            if let Ok(Reply::Report(r)) = parse_reply(&bytes) {
                // Every accessor of a parsed report is safe too.
                prop_assert_eq!(r.fragments.iter().count(), r.fragments.len());
                prop_assert!(r.buffer_len() <= bytes.len());
            }
        }

        #[test]
        fn prefixed_garbage_never_panics(ty in any::<u8>(), tail in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut bytes = b"FPMTPX\x01".to_vec();
            bytes.push(ty);
            bytes.extend_from_slice(&tail);
            let _ = parse_request(&bytes);
            if let Ok(Reply::Report(r)) = parse_reply(&bytes) {
                prop_assert_eq!(r.fragments.iter().count(), r.fragments.len());
            }
        }

        #[test]
        fn probe_roundtrip(confirm in any::<bool>(), nonce in any::<u64>(), id in any::<u32>(),
                           ip_len in any::<u16>(), pad in 0usize..64) {
            let p = ProbeRepr {
                kind: if confirm { ProbeKind::Confirm } else { ProbeKind::Probe },
                nonce, probe_id: id, ip_len,
            };
            let mut buf = vec![0xEEu8; PROBE_MIN_LEN + pad];
            prop_assert_eq!(p.emit(&mut buf), Ok(buf.len()));
            prop_assert_eq!(parse_request(&buf), Ok(Request::Probe(p)));
        }

        #[test]
        fn report_roundtrip(nonce in any::<u64>(), id in any::<u32>(), flags in any::<u8>(),
                            link_mtu in any::<u16>(), probe_ip_len in any::<u16>(), largest in any::<u16>(),
                            recs in proptest::collection::vec(arb_record(), 0..40)) {
            let r = ReportRepr {
                nonce, probe_id: id,
                confirm: flags & 1 != 0, reassembled: flags & 2 != 0,
                fragmented: flags & 4 != 0, truncated: flags & 8 != 0,
                link_mtu, probe_ip_len, largest_ip_len: largest,
                fragments: Fragments::Records(&recs),
            };
            let mut buf = vec![0u8; r.buffer_len()];
            prop_assert_eq!(r.emit(&mut buf), Ok(buf.len()));
            let parsed = parse_reply(&buf);
            prop_assert_eq!(parsed, Ok(Reply::Report(r)));
            // Re-emitting the parsed view gives the same bytes.
            if let Ok(Reply::Report(p)) = parsed {
                let mut again = vec![0u8; p.buffer_len()];
                prop_assert_eq!(p.emit(&mut again), Ok(buf.len()));
                prop_assert_eq!(again, buf.clone());
            }
        }

        #[test]
        fn legacy_reply_roundtrip(v in any::<u32>()) {
            let bytes = emit_legacy_reply(v);
            prop_assert_eq!(parse_reply(&bytes), Ok(Reply::Legacy(v)));
        }
    }
}
