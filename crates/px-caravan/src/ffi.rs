//! The C ABI (declared in `include/px_caravan.h`): the same parser and
//! builder as the Rust API, over plain pointers and lengths.
//!
//! Every function checks its pointers for null and never reads or writes
//! outside the `(pointer, length)` ranges it is given. Errors are negative
//! integers (`PX_CARAVAN_E_*`), one per [`CaravanError`] / [`BuildError`]
//! variant; [`px_caravan_strerror`] names them.

use core::ffi::c_char;
use core::net::{Ipv4Addr, Ipv6Addr};

use crate::{BuildError, Caravan, CaravanError, InnerChecksum, Pseudo, RECORD_HEADER_LEN, write_record};

pub const E_EMPTY: i32 = -1;
pub const E_TRUNCATED: i32 = -2;
pub const E_BAD_LENGTH: i32 = -3;
pub const E_OVERRUN: i32 = -4;
pub const E_PORT_MISMATCH: i32 = -5;
pub const E_NO_ROOM: i32 = -10;
pub const E_NULL: i32 = -11;

fn code(e: CaravanError) -> i32 {
    match e {
        CaravanError::Empty => E_EMPTY,
        CaravanError::TruncatedHeader { .. } => E_TRUNCATED,
        CaravanError::BadLength { .. } => E_BAD_LENGTH,
        CaravanError::Overrun { .. } => E_OVERRUN,
        CaravanError::PortMismatch { .. } => E_PORT_MISMATCH,
    }
}

/// One datagram of a caravan, pointing into the caller's buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct px_caravan_record {
    pub payload: *const u8,
    pub payload_len: usize,
    pub src_port: u16,
    pub dst_port: u16,
    pub checksum: u16,
}

/// A caravan being built in a caller's buffer. Fields are read-only for C.
#[repr(C)]
#[derive(Debug)]
pub struct px_caravan_builder {
    pub buf: *mut u8,
    /// Usable bytes of `buf` (already limited by the MTU if one was given).
    pub cap: usize,
    /// Bytes written so far: the payload to send is `buf[0..len]`.
    pub len: usize,
    pub count: u32,
    pub src_port: u16,
    pub dst_port: u16,
}

/// # Safety
/// `buf` must be null or point to `len` readable bytes.
unsafe fn slice<'a>(buf: *const u8, len: usize) -> Option<&'a [u8]> {
    if buf.is_null() {
        return (len == 0).then_some(&[]);
    }
    // SAFETY: non-null and, by the caller's contract, `len` readable bytes.
    Some(unsafe { core::slice::from_raw_parts(buf, len) })
}

/// Validates a received caravan payload. `src_port`/`dst_port` are the
/// outer ports (pass -1 for either to skip the flow check). Returns the
/// number of datagrams (>= 1) or a negative error.
///
/// # Safety
/// `buf` must point to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn px_caravan_validate(buf: *const u8, len: usize, src_port: i32, dst_port: i32) -> i32 {
    // SAFETY: forwarded caller contract.
    let Some(b) = (unsafe { slice(buf, len) }) else { return E_NULL };
    let ports = match (u16::try_from(src_port), u16::try_from(dst_port)) {
        (Ok(s), Ok(d)) => Some((s, d)),
        _ => None,
    };
    match Caravan::parse(b, ports) {
        Ok(c) => c.len().min(i32::MAX as usize) as i32,
        Err(e) => code(e),
    }
}

/// Reads the record at `*offset` into `out` and advances `*offset`.
/// Returns 1 for a record, 0 at the end, a negative error for bytes that are
/// not a record (call [`px_caravan_validate`] first to refuse such a caravan
/// whole).
///
/// # Safety
/// `buf` must point to `len` readable bytes; `offset` and `out` must be
/// valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn px_caravan_next(
    buf: *const u8,
    len: usize,
    offset: *mut usize,
    out: *mut px_caravan_record,
) -> i32 {
    // SAFETY: forwarded caller contract.
    let Some(b) = (unsafe { slice(buf, len) }) else { return E_NULL };
    if offset.is_null() || out.is_null() {
        return E_NULL;
    }
    // SAFETY: checked non-null; valid per the caller's contract.
    let off = unsafe { *offset };
    if off >= b.len() {
        return 0;
    }
    let rest = &b[off..];
    if rest.len() < RECORD_HEADER_LEN {
        return E_TRUNCATED;
    }
    let rl = u16::from_be_bytes([rest[4], rest[5]]) as usize;
    if rl < RECORD_HEADER_LEN {
        return E_BAD_LENGTH;
    }
    if rl > rest.len() {
        return E_OVERRUN;
    }
    let r = px_caravan_record {
        payload: rest[RECORD_HEADER_LEN..rl].as_ptr(),
        payload_len: rl - RECORD_HEADER_LEN,
        src_port: u16::from_be_bytes([rest[0], rest[1]]),
        dst_port: u16::from_be_bytes([rest[2], rest[3]]),
        checksum: u16::from_be_bytes([rest[6], rest[7]]),
    };
    // SAFETY: checked non-null; valid for writes per the caller's contract.
    unsafe {
        *out = r;
        *offset = off + rl;
    }
    1
}

/// Starts a caravan for `src_port -> dst_port` in `buf[0..cap]`. If `mtu` is
/// non-zero the payload is limited so that the IP packet (with an IP header
/// of `ip_header_len` bytes and the outer UDP header) fits it.
///
/// # Safety
/// `b` must be valid for writes; `buf` must point to `cap` writable bytes
/// that outlive the builder's use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn px_caravan_builder_init(
    b: *mut px_caravan_builder,
    buf: *mut u8,
    cap: usize,
    src_port: u16,
    dst_port: u16,
    mtu: usize,
    ip_header_len: usize,
) -> i32 {
    if b.is_null() || (buf.is_null() && cap > 0) {
        return E_NULL;
    }
    let mut usable = cap.min(crate::MAX_PAYLOAD);
    if mtu > 0 {
        usable = usable.min(mtu.saturating_sub(ip_header_len + crate::RECORD_HEADER_LEN));
    }
    // SAFETY: checked non-null; valid for writes per the caller's contract.
    unsafe { *b = px_caravan_builder { buf, cap: usable, len: 0, count: 0, src_port, dst_port } };
    0
}

/// # Safety
/// `b` must come from [`px_caravan_builder_init`]; `payload` must point to
/// `len` readable bytes.
unsafe fn push(b: *mut px_caravan_builder, payload: *const u8, len: usize, csum: InnerChecksum) -> i32 {
    if b.is_null() {
        return E_NULL;
    }
    // SAFETY: checked non-null; initialised by the caller.
    let b = unsafe { &mut *b };
    // SAFETY: forwarded caller contract.
    let Some(p) = (unsafe { slice(payload, len) }) else { return E_NULL };
    if b.buf.is_null() {
        return E_NO_ROOM;
    }
    // SAFETY: `buf` has `cap` writable bytes per the init contract.
    let out = unsafe { core::slice::from_raw_parts_mut(b.buf, b.cap) };
    match write_record(out, b.len, b.src_port, b.dst_port, p, csum) {
        Ok(end) => {
            b.len = end;
            b.count += 1;
            0
        }
        Err(BuildError::NoRoom { .. }) => E_NO_ROOM,
    }
}

/// [`push`] with the inner checksum computed over the pseudo-header that
/// `pseudo` builds from the `N`-byte `src` and `dst` (the shared body of
/// [`px_caravan_push_v4`] and [`px_caravan_push_v6`]); `E_NULL` when either
/// address pointer is null.
///
/// # Safety
/// As [`px_caravan_push`]; non-null `src` and `dst` must each point to `N`
/// readable bytes.
unsafe fn push_pseudo<const N: usize>(
    b: *mut px_caravan_builder,
    payload: *const u8,
    len: usize,
    src: *const u8,
    dst: *const u8,
    pseudo: fn([u8; N], [u8; N]) -> Pseudo,
) -> i32 {
    if src.is_null() || dst.is_null() {
        return E_NULL;
    }
    // SAFETY: non-null, `N` bytes each per the caller's contract; `[u8; N]`
    // has alignment 1.
    let (s, d) = unsafe { (*(src as *const [u8; N]), *(dst as *const [u8; N])) };
    // SAFETY: forwarded caller contract.
    unsafe { push(b, payload, len, InnerChecksum::Compute(pseudo(s, d))) }
}

/// Appends a datagram with a zero inner checksum (IPv4 only). Returns 0, or
/// `PX_CARAVAN_E_NO_ROOM` when it does not fit (send, reset, push again).
///
/// # Safety
/// See [`px_caravan_builder_init`]; `payload` must point to `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn px_caravan_push(b: *mut px_caravan_builder, payload: *const u8, len: usize) -> i32 {
    // SAFETY: forwarded caller contract.
    unsafe { push(b, payload, len, InnerChecksum::None) }
}

/// Appends a datagram with its inner checksum computed over the IPv4
/// pseudo-header of `src` -> `dst` (4 bytes each, network order).
///
/// # Safety
/// As [`px_caravan_push`]; `src` and `dst` must point to 4 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn px_caravan_push_v4(
    b: *mut px_caravan_builder,
    payload: *const u8,
    len: usize,
    src: *const u8,
    dst: *const u8,
) -> i32 {
    // SAFETY: forwarded caller contract (4-byte addresses).
    unsafe {
        push_pseudo::<4>(b, payload, len, src, dst, |s, d| Pseudo::V4 {
            src: Ipv4Addr::from(s),
            dst: Ipv4Addr::from(d),
        })
    }
}

/// As [`px_caravan_push_v4`] for IPv6 (16-byte addresses).
///
/// # Safety
/// As [`px_caravan_push`]; `src` and `dst` must point to 16 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn px_caravan_push_v6(
    b: *mut px_caravan_builder,
    payload: *const u8,
    len: usize,
    src: *const u8,
    dst: *const u8,
) -> i32 {
    // SAFETY: forwarded caller contract (16-byte addresses).
    unsafe {
        push_pseudo::<16>(b, payload, len, src, dst, |s, d| Pseudo::V6 {
            src: Ipv6Addr::from(s),
            dst: Ipv6Addr::from(d),
        })
    }
}

/// Empties the builder after its caravan was sent (the buffer is kept).
///
/// # Safety
/// `b` must come from [`px_caravan_builder_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn px_caravan_builder_reset(b: *mut px_caravan_builder) {
    if !b.is_null() {
        // SAFETY: checked non-null; initialised by the caller.
        unsafe {
            (*b).len = 0;
            (*b).count = 0;
        }
    }
}

/// The IPv4 TOS / IPv6 traffic class to send a caravan with.
#[unsafe(no_mangle)]
pub extern "C" fn px_caravan_tos(dscp: u8, ecn: u8) -> u8 {
    crate::tos(dscp, ecn)
}

/// A static, NUL-terminated name for an error code.
#[unsafe(no_mangle)]
pub extern "C" fn px_caravan_strerror(code: i32) -> *const c_char {
    let s: &'static [u8] = match code {
        E_EMPTY => b"caravan has no records\0",
        E_TRUNCATED => b"record header truncated\0",
        E_BAD_LENGTH => b"record length below 8\0",
        E_OVERRUN => b"record runs past the end\0",
        E_PORT_MISMATCH => b"record of another flow\0",
        E_NO_ROOM => b"datagram does not fit\0",
        E_NULL => b"null pointer\0",
        c if c >= 0 => b"ok\0",
        _ => b"unknown error\0",
    };
    s.as_ptr() as *const c_char
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_read_through_the_abi() {
        let mut buf = [0u8; 64];
        let mut b =
            px_caravan_builder { buf: core::ptr::null_mut(), cap: 0, len: 0, count: 0, src_port: 0, dst_port: 0 };
        unsafe {
            assert_eq!(px_caravan_builder_init(&mut b, buf.as_mut_ptr(), buf.len(), 7, 9, 0, 0), 0);
            assert_eq!(px_caravan_push(&mut b, b"one".as_ptr(), 3), 0);
            assert_eq!(
                px_caravan_push_v4(&mut b, b"two!".as_ptr(), 4, [198, 51, 100, 1].as_ptr(), [203, 0, 113, 1].as_ptr()),
                0
            );
            assert_eq!(px_caravan_push(&mut b, [0u8; 40].as_ptr(), 40), E_NO_ROOM);
            assert_eq!((b.len, b.count), (23, 2));
            assert_eq!(px_caravan_validate(buf.as_ptr(), b.len, 7, 9), 2);
            assert_eq!(px_caravan_validate(buf.as_ptr(), b.len, 7, 8), E_PORT_MISMATCH);
            assert_eq!(px_caravan_validate(buf.as_ptr(), 5, -1, -1), E_TRUNCATED);
            assert_eq!(px_caravan_validate(core::ptr::null(), 5, -1, -1), E_NULL);
            let mut off = 0usize;
            let mut r =
                px_caravan_record { payload: core::ptr::null(), payload_len: 0, src_port: 0, dst_port: 0, checksum: 0 };
            assert_eq!(px_caravan_next(buf.as_ptr(), b.len, &mut off, &mut r), 1);
            assert_eq!(core::slice::from_raw_parts(r.payload, r.payload_len), b"one");
            assert_eq!(px_caravan_next(buf.as_ptr(), b.len, &mut off, &mut r), 1);
            assert_eq!(core::slice::from_raw_parts(r.payload, r.payload_len), b"two!");
            assert_ne!(r.checksum, 0);
            assert_eq!(px_caravan_next(buf.as_ptr(), b.len, &mut off, &mut r), 0);
            assert!(!px_caravan_strerror(E_OVERRUN).is_null());
        }
    }
}
