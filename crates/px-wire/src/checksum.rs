//! Internet checksum (RFC 1071) arithmetic: full sums, pseudo-headers and
//! incremental updates (RFC 1624).
//!
//! Sums are carried unfolded in a `u64` so that long buffers and many pieces
//! can be added without folding after every step; [`fold`] reduces to 16 bits.
//! A piece that starts at an odd byte offset of the checksummed data must be
//! byte-swapped before it is added ([`Sum::at_offset`]); this is what lets the
//! gateway combine the sums of payload pieces it never re-reads.

use core::net::{Ipv4Addr, Ipv6Addr};

/// An unfolded ones'-complement accumulator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum(pub u64);

impl Sum {
    /// The sum of `data`, as if it started at an even offset.
    #[inline]
    pub fn of(data: &[u8]) -> Sum {
        Sum(raw_sum(data))
    }

    /// Adds another sum.
    #[inline]
    #[must_use]
    pub fn plus(self, other: Sum) -> Sum {
        let (s, carry) = self.0.overflowing_add(other.0);
        Sum(s + carry as u64)
    }

    /// Adds one 16-bit word.
    #[inline]
    #[must_use]
    pub fn add_u16(self, w: u16) -> Sum {
        self.plus(Sum(w as u64))
    }

    /// The ones'-complement negation of the folded sum, as a sum: adding
    /// `x.negate()` to a sum containing `x` removes `x`.
    #[inline]
    #[must_use]
    pub fn negate(self) -> Sum {
        Sum(!fold(self) as u64)
    }

    /// The sum as it counts when its data starts at byte `offset` of the
    /// checksummed range: an odd offset swaps the bytes of every word.
    #[inline]
    #[must_use]
    pub fn at_offset(self, offset: usize) -> Sum {
        if offset % 2 == 1 { Sum(fold(self).swap_bytes() as u64) } else { self }
    }

    /// The 16-bit checksum field value for data whose total sum is `self`.
    #[inline]
    pub fn checksum(self) -> u16 {
        !fold(self)
    }
}

/// Folds an unfolded sum to 16 bits (end-around carry).
///
/// Each halving adds a word to itself rotated by half its width: the top
/// half of that sum is the two halves' sum, and the carry out of the bottom
/// half, which is the same sum's overflow, lands in it as the end-around
/// carry. Two rotations and two additions, instead of five add-and-carry
/// steps.
#[inline]
pub fn fold(sum: Sum) -> u16 {
    let s = sum.0;
    let s = (s.wrapping_add(s.rotate_left(32)) >> 32) as u32;
    (s.wrapping_add(s.rotate_left(16)) >> 16) as u16
}

/// Sum of big-endian 16-bit words of `data`, a trailing odd byte padded with
/// zero, as the native-endian sum ([`native_sum`]) with the byte order fixed
/// once at the end, which is valid because ones'-complement addition
/// commutes with byte swapping (RFC 1071 §2(B)). One fold for the whole
/// buffer. Always inlined, so that a header's length known at the call
/// site picks its unrolled sum there.
#[inline(always)]
fn raw_sum(data: &[u8]) -> u64 {
    from_native(native_sum(data))
}

/// The sum of `data` in native byte order: a plain word loop for headers,
/// [`long_sum`] for longer data.
#[inline]
fn native_sum(data: &[u8]) -> Sum {
    if data.len() < SHORT {
        return Sum(header_sum(data));
    }
    long_sum(data)
}

/// [`words_sum`] with the common header lengths unrolled, their length
/// known to the compiler: 20 (an IPv4 or option-less TCP header), 28 and
/// 40 (IPv4 addresses and such a TCP header, as a pseudo-header's start),
/// 32 (TCP with timestamps).
#[inline(always)]
fn header_sum(data: &[u8]) -> u64 {
    match data.len() {
        20 => data.first_chunk::<20>().map(array_sum),
        28 => data.first_chunk::<28>().map(array_sum),
        32 => data.first_chunk::<32>().map(array_sum),
        40 => data.first_chunk::<40>().map(array_sum),
        _ => None,
    }
    .unwrap_or_else(|| words_sum(data))
}

/// [`words_sum`] of an array: no loop over a tail of unknown length.
#[inline(always)]
fn array_sum<const N: usize>(data: &[u8; N]) -> u64 {
    let mut words = data.chunks_exact(8);
    let mut acc = 0u64;
    for w in &mut words {
        acc += halves(u64::from_ne_bytes(w.try_into().expect("8-byte chunk")));
    }
    let tail = words.remainder();
    let mut last = [0u8; 8];
    last[..tail.len()].copy_from_slice(tail);
    acc + halves(u64::from_ne_bytes(last))
}

/// The sum of [`Sum::of`] for payloads, out of line (so that every caller
/// inlines only the short path): the widest loop this CPU runs.
#[inline(never)]
fn long_sum(data: &[u8]) -> Sum {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked on the line above); no copy,
        // so no destination.
        return unsafe { madd_pass::<false>(core::ptr::null_mut(), data, 0) };
    }
    sum_words::<4>(data)
}

/// Copies `src` into `dst` (same length) and returns the sum of the bytes,
/// in one pass over memory: each block is loaded once, stored, and added
/// to the accumulators (as in [`Sum::of`]), instead of a `memcpy` followed
/// by a second read. Used where the gateway must both move and sum payload
/// (split pieces, merged segments, caravan records). With AVX2, in cache,
/// it runs at 0.47–0.68 of a plain `memcpy` of a 1448-byte piece and
/// 0.53–0.92 (mostly 0.75) of an 8948-byte segment, where the word loop
/// it replaced ran at 0.44–0.49 and 0.60–0.65; [`Sum::of`] alone at
/// 0.59–0.75 and 0.89–1.15 of `memcpy`, 1.5–2× and 2–2.4× the SSE2 word
/// loop it had (five runs of `cargo bench -p px-wire --bench checksum`,
/// against the same bench before). Panics if the lengths differ, as
/// `copy_from_slice` does.
#[inline]
pub fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> Sum {
    let n = src.len();
    copy_and_sum_in(dst, src, 0..n)
}

/// [`copy_and_sum`] of `src[range]` into `dst`, asking the CPU on the way
/// for the cache lines of `src` that follow (up to [`PREFETCH_AHEAD`]
/// bytes ahead, never past the end of `src`): a split copies a segment
/// piece by piece, and the next pieces then arrive while this one is
/// copied. Panics if `range` is out of `src` or its length differs from
/// `dst`'s.
#[inline]
pub fn copy_and_sum_in(dst: &mut [u8], src: &[u8], range: core::ops::Range<usize>) -> Sum {
    let ahead_end = src.as_ptr_range().end as usize;
    let src = &src[range];
    assert_eq!(dst.len(), src.len(), "copy_and_sum: lengths differ");
    if src.len() < SHORT {
        return Sum(from_native(copy_sum_words::<4>(dst, src, 0)));
    }
    Sum(from_native(long_copy_sum(dst, src, ahead_end)))
}

/// The copy and sum of [`copy_and_sum`] for payloads, out of line: the
/// widest loop this CPU runs.
#[inline(never)]
fn long_copy_sum(dst: &mut [u8], src: &[u8], ahead_end: usize) -> Sum {
    assert_eq!(dst.len(), src.len(), "copy_and_sum: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked on the line above); `dst`
        // takes all of `src` (asserted), and a `&mut` overlaps nothing.
        return unsafe { madd_pass::<true>(dst.as_mut_ptr(), src, ahead_end) };
    }
    copy_sum_words::<4>(dst, src, ahead_end)
}

/// Below this many bytes (headers) a sum is a plain word loop, inlined
/// ([`header_sum`]): choosing and calling a vector loop would cost more
/// than it saves.
const SHORT: usize = 128;

/// The sum of [`sum_words`], and with `COPY` the copy of
/// [`copy_sum_words`] too, in AVX2 instructions: three vector operations
/// per 32 bytes where the word loops need four. Each 16-bit word is biased
/// by `0x8000` (an exclusive or), so that `vpmaddwd` against ones, which
/// adds neighbouring words as signed numbers, adds them exactly (a biased
/// word is its value less 32 768); the bias of every word is added back at
/// the end. Blocks of 128 bytes (two cache lines, four loads), at most
/// three 32-byte steps, then the last 1..=31 bytes a word at a time (and,
/// copying, one 32-byte load and store that overlaps the last step). The
/// 32-bit lanes are emptied every [`LANE_BLOCKS`] blocks, before they can
/// overflow. Prefetches as [`copy_sum_words`] does, up to `ahead_end`.
///
/// # Safety
/// The CPU has AVX2; with `COPY`, `dst` is valid for writes of
/// `src.len()` bytes and overlaps no byte of `src`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn madd_pass<const COPY: bool>(dst: *mut u8, src: &[u8], ahead_end: usize) -> Sum {
    use core::arch::x86_64::*;
    const BLOCK: usize = 128;
    const STEP: usize = 32;
    let n = src.len();
    let sp = src.as_ptr();
    let bias = _mm256_set1_epi16(i16::MIN);
    let ones = _mm256_set1_epi16(1);
    let add = |acc: __m256i, x: __m256i| _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_xor_si256(x, bias), ones));
    // One 32-byte step at byte `i`.
    let step = |i: usize, acc: __m256i| -> __m256i {
        // SAFETY: every caller has `i + STEP <= n`, within `src` and (the
        // caller's contract) `dst`; unaligned loads and stores.
        unsafe {
            let x = _mm256_loadu_si256(sp.add(i).cast());
            if COPY {
                _mm256_storeu_si256(dst.add(i).cast(), x);
            }
            add(acc, x)
        }
    };
    // Block `k`: its four loads, then its four stores, then the sums. (A
    // load, store and sum per step is what LLVM's loop idiom pass turns
    // into a `memcpy` call and a second pass to sum.)
    let block = |k: usize, a: &mut [__m256i; 4]| {
        // SAFETY: every caller has `k < n / BLOCK`, so the block lies
        // within `src` and `dst`; unaligned loads and stores.
        unsafe {
            let p = sp.add(k * BLOCK).cast::<__m256i>();
            let x = [
                _mm256_loadu_si256(p),
                _mm256_loadu_si256(p.add(1)),
                _mm256_loadu_si256(p.add(2)),
                _mm256_loadu_si256(p.add(3)),
            ];
            if COPY {
                let q = dst.add(k * BLOCK).cast::<__m256i>();
                for (j, x) in x.iter().enumerate() {
                    _mm256_storeu_si256(q.add(j), *x);
                }
            }
            for (acc, x) in a.iter_mut().zip(x) {
                *acc = add(*acc, x);
            }
        }
    };
    let room = ahead_end.saturating_sub(sp as usize).saturating_sub(PREFETCH_AHEAD);
    let blocks = n / BLOCK;
    let ahead = room.div_ceil(BLOCK).min(blocks);
    let mut total = Sum(0);
    let mut b = 0;
    while b < blocks {
        let end = blocks.min(b + LANE_BLOCKS);
        let mut a = [_mm256_setzero_si256(); 4];
        // The blocks whose lines `PREFETCH_AHEAD` bytes on are still the
        // source's come first: counted once, no test in either loop.
        for k in b..end.min(ahead) {
            prefetch(sp.wrapping_add(k * BLOCK + PREFETCH_AHEAD));
            prefetch(sp.wrapping_add(k * BLOCK + PREFETCH_AHEAD + 64));
            block(k, &mut a);
        }
        for k in end.min(ahead).max(b)..end {
            block(k, &mut a);
        }
        total = total.plus(Sum(lanes_total(a, (end - b) * BLOCK)));
        b = end;
    }
    // At most three steps, written out: as a loop, LLVM would make the
    // copying ones a `memcpy` call and a second pass again.
    let mut i = blocks * BLOCK;
    let mut acc = _mm256_setzero_si256();
    if i + STEP <= n {
        acc = step(i, acc);
        i += STEP;
        if i + STEP <= n {
            acc = step(i, acc);
            i += STEP;
            if i + STEP <= n {
                acc = step(i, acc);
                i += STEP;
            }
        }
    }
    total = total.plus(Sum(lanes_total([acc], i - blocks * BLOCK)));
    if i == n {
        return total;
    }
    if n < STEP {
        if COPY {
            // SAFETY: the caller's contract: `dst` takes `n` bytes, apart
            // from `src`.
            unsafe { core::ptr::copy_nonoverlapping(sp, dst, n) };
        }
        return total.plus(Sum(words_sum(src)));
    }
    if COPY {
        // SAFETY: `n - STEP .. n` lies within `src` and `dst` (n >= STEP);
        // the bytes it writes again before `i` are the same bytes.
        unsafe {
            let x = _mm256_loadu_si256(sp.add(n - STEP).cast());
            _mm256_storeu_si256(dst.add(n - STEP).cast(), x);
        }
    }
    // Whole words, then the rest as the top bytes of the word that ends
    // with the data (little-endian: shifted down, they are the word padded
    // with zeros, as `words_sum` pads it).
    let mut rest = 0u64;
    while i + 8 <= n {
        rest += halves(u64::from_le_bytes(src[i..i + 8].try_into().expect("8 bytes")));
        i += 8;
    }
    if i < n {
        let last = u64::from_le_bytes(src[n - 8..].try_into().expect("8 bytes"));
        rest += halves(last >> (8 * (8 - (n - i))));
    }
    total.plus(Sum(rest))
}

/// Blocks of [`madd_pass`] between two empties of its 32-bit lanes: each
/// lane gains less than 2^16 in magnitude a block, the four accumulators
/// are added lane by lane and the eight lanes of that summed, so 2^9
/// blocks stay under 2^16 · 2^9 · 4 · 8 = 2^30.
#[cfg(target_arch = "x86_64")]
const LANE_BLOCKS: usize = 512;

/// The native-endian sum of the words that `accs` collected from `bytes`
/// bytes, biased as [`madd_pass`] biases them: the lanes added, and
/// 32 768 added back for every word.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn lanes_total<const K: usize>(accs: [core::arch::x86_64::__m256i; K], bytes: usize) -> u64 {
    use core::arch::x86_64::*;
    let mut acc = _mm256_setzero_si256();
    for a in accs {
        acc = _mm256_add_epi32(acc, a);
    }
    let mut lanes = [0i32; 8];
    // SAFETY: `lanes` is 32 bytes long; an unaligned store.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc) };
    let signed: i64 = lanes.iter().map(|&l| i64::from(l)).sum();
    (signed + (bytes / 2) as i64 * 32_768) as u64
}

/// How far ahead of its loads [`copy_and_sum_in`] asks for the source's
/// cache lines. A split copies 1448-byte pieces of a 9000-byte segment,
/// one call each, and the hardware prefetcher follows a stream within a
/// 4 KiB page only: with the segment in DRAM (frames a NIC wrote without
/// DDIO, or the DPDK comparison's trace) asking ahead keeps the next
/// pieces coming. Data in the cache does not notice.
pub const PREFETCH_AHEAD: usize = 2048;

/// Asks the CPU for every cache line of `bytes` (a hint; returns at once).
#[inline]
pub fn prefetch_lines(bytes: &[u8]) {
    for line in bytes.chunks(64) {
        prefetch(line.as_ptr());
    }
}

/// Asks the CPU to bring the cache line of `p` in (a hint: any address).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Bytes summed between two folds of the accumulators: each gains under
/// 2^33 per word, so a span of 2^13 words can never overflow them.
const SPAN: usize = 64 * 1024;

/// The native-endian sum of `data`: `N` independent accumulators over
/// blocks of `N` 64-bit words, each word split into its two 32-bit halves
/// so that the carries collect in the upper half of its accumulator. The
/// accumulators are added plainly (no end-around carry) once per [`SPAN`],
/// which keeps the loop in vector lanes (`N` = 4: two SSE2 registers, the
/// loop of CPUs without AVX2; [`madd_pass`] is the AVX2 one); index loops
/// are what the vectoriser recognises.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn sum_words<const N: usize>(data: &[u8]) -> Sum {
    let mut total = Sum(0);
    for span in data.chunks(SPAN) {
        let mut acc = [0u64; N];
        let mut blocks = span.chunks_exact(N * 8);
        for b in &mut blocks {
            let w = block_words::<N>(b);
            for k in 0..N {
                acc[k] += halves(w[k]);
            }
        }
        let mut t = 0;
        for a in acc {
            t += a;
        }
        total = total.plus(Sum(t)).plus(Sum(words_sum(blocks.remainder())));
    }
    total
}

/// [`sum_words`] that also stores every word it loads into `dst`, and
/// prefetches the cache line [`PREFETCH_AHEAD`] bytes past each block while
/// that line lies before the address `ahead_end` (0: no prefetch).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn copy_sum_words<const N: usize>(dst: &mut [u8], src: &[u8], ahead_end: usize) -> Sum {
    let mut total = Sum(0);
    for (d, s) in dst.chunks_mut(SPAN).zip(src.chunks(SPAN)) {
        let mut acc = [0u64; N];
        let mut out = d.chunks_exact_mut(N * 8);
        let mut inp = s.chunks_exact(N * 8);
        // The blocks whose lines `PREFETCH_AHEAD` bytes on still lie before
        // `ahead_end` are a prefix: counted once, so that neither loop
        // tests each block.
        let room = ahead_end.saturating_sub(s.as_ptr() as usize).saturating_sub(PREFETCH_AHEAD);
        let ahead = room.div_ceil(N * 8);
        let mut block = |o: &mut [u8], i: &[u8]| {
            let w = block_words::<N>(i);
            for k in 0..N {
                o[k * 8..k * 8 + 8].copy_from_slice(&w[k].to_ne_bytes());
            }
            for k in 0..N {
                acc[k] += halves(w[k]);
            }
        };
        for (o, i) in (&mut out).zip(&mut inp).take(ahead) {
            for line in (0..N * 8).step_by(64) {
                prefetch(i.as_ptr().wrapping_add(PREFETCH_AHEAD + line));
            }
            block(o, i);
        }
        for (o, i) in (&mut out).zip(&mut inp) {
            block(o, i);
        }
        let rest = inp.remainder();
        out.into_remainder().copy_from_slice(rest);
        let mut t = 0;
        for a in acc {
            t += a;
        }
        total = total.plus(Sum(t)).plus(Sum(words_sum(rest)));
    }
    total
}

/// The `N` native-endian words of an `N * 8`-byte block.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn block_words<const N: usize>(b: &[u8]) -> [u64; N] {
    let mut w = [0u64; N];
    for k in 0..N {
        let mut c = [0u8; 8];
        c.copy_from_slice(&b[k * 8..k * 8 + 8]);
        w[k] = u64::from_ne_bytes(c);
    }
    w
}

/// A word's two 32-bit halves, added.
#[inline(always)]
fn halves(w: u64) -> u64 {
    (w & 0xffff_ffff) + (w >> 32)
}

/// The native-endian sum of fewer than a block's bytes (any length works),
/// a trailing partial word padded with zeros.
#[inline(always)]
fn words_sum(data: &[u8]) -> u64 {
    let mut acc = 0u64;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        acc += halves(u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
    }
    // A byte loop, not `copy_from_slice`: for 0..7 bytes a `memcpy` call
    // costs more than the bytes.
    let mut tail = [0u8; 8];
    for (t, b) in tail.iter_mut().zip(chunks.remainder()) {
        *t = *b;
    }
    acc + halves(u64::from_ne_bytes(tail))
}

/// A native-endian sum as the big-endian words' sum (one fold).
#[inline]
fn from_native(s: Sum) -> u64 {
    u16::from_be(fold(s)) as u64
}

/// Completes a partial checksum (`CHECKSUM_PARTIAL`) in place, as the
/// kernel's `skb_checksum_help` does: the field at `start + offset` already
/// holds the pseudo-header sum, so the one's complement sum over
/// `data[start..]` (field included) is folded, complemented and stored
/// (RFC 1071). For a UDP field (`offset` 6) a computed zero is stored as
/// all ones (RFC 768: zero means "no checksum"). False, and nothing
/// written, if the field lies outside `data`.
pub fn finish_partial(data: &mut [u8], start: usize, offset: usize) -> bool {
    let field = start + offset;
    if field + 2 > data.len() {
        return false;
    }
    let mut c = Sum::of(&data[start..]).checksum();
    if c == 0 && offset == 6 {
        c = 0xffff;
    }
    data[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// Sum of the IPv4 pseudo-header (RFC 793 §3.1).
#[inline]
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4_len: u16) -> Sum {
    let (s, d) = (u32::from(src) as u64, u32::from(dst) as u64);
    Sum((s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + protocol as u64 + l4_len as u64)
}

/// Sum of the IPv6 pseudo-header (RFC 8200 §8.1).
#[inline]
pub fn pseudo_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, l4_len: u32) -> Sum {
    let mut acc: u64 = 0;
    for w in src.segments().iter().chain(dst.segments().iter()) {
        acc += *w as u64;
    }
    acc += (l4_len >> 16) as u64 + (l4_len & 0xffff) as u64 + next_header as u64;
    Sum(acc)
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit word of the covered data
/// changes from `old` to `new`.
#[inline]
pub fn update_u16(checksum: u16, old: u16, new: u16) -> u16 {
    // HC' = ~(~HC + ~m + m')
    !fold(Sum(!checksum as u64 + !old as u64 + new as u64))
}

/// RFC 1624 for a 32-bit field (two words).
#[inline]
pub fn update_u32(checksum: u16, old: u32, new: u32) -> u16 {
    let c = update_u16(checksum, (old >> 16) as u16, (new >> 16) as u16);
    update_u16(c, old as u16, new as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Straightforward reference: 16-bit big-endian words, fold at the end.
    fn reference(data: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], 0]) };
            s += w as u64;
        }
        fold(Sum(s))
    }

    /// Buffers longer than a span and than the vector pass's lane period,
    /// of the words that carry most in the word loops (all ones) and that
    /// push the vector pass's signed lanes furthest either way (all ones,
    /// all zeros: the largest and smallest biased words), in both loops.
    #[test]
    fn long_buffers_of_extreme_words_fold_like_the_reference() {
        #[cfg(target_arch = "x86_64")]
        let lanes = LANE_BLOCKS * 128;
        #[cfg(not(target_arch = "x86_64"))]
        let lanes = SPAN;
        for len in [SPAN - 1, SPAN, SPAN + 7, 3 * SPAN + 65, lanes - 1, lanes, lanes + 33, 5 * lanes + 127] {
            for byte in [0xffu8, 0x00, 0x80, 0x7f] {
                let data = vec![byte; len];
                let want = reference(&data);
                assert_eq!(fold(Sum::of(&data)), want, "len {len}, {byte:#x}");
                assert_eq!(from_native(sum_words::<4>(&data)) as u16, want);
                let mut dst = vec![1u8; len];
                assert_eq!(fold(copy_and_sum(&mut dst, &data)), want);
                assert!(dst == data);
                assert_eq!(from_native(copy_sum_words::<4>(&mut dst, &data, 0)) as u16, want);
            }
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(Sum::of(&d)), 0xddf2);
    }

    #[test]
    fn ipv4_header_checksum_known_value() {
        // A real IPv4 header with checksum 0xb861 (Wikipedia example).
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
            0x00, 0xc7,
        ];
        assert_eq!(Sum::of(&h).checksum(), 0xb861);
    }

    /// The fold by repeated add-and-carry steps.
    fn fold_by_steps(s: u64) -> u16 {
        let mut s = s;
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn fold_edges() {
        for s in [0, 1, 0xfffe, 0xffff, 0x1_0000, 0x1_fffe, 0xffff_ffff, 0x1_0000_0000, u64::MAX - 1, u64::MAX, 1 << 63]
        {
            assert_eq!(fold(Sum(s)), fold_by_steps(s), "{s:#x}");
        }
    }

    proptest! {
        #[test]
        fn fold_is_the_end_around_carry(s in any::<u64>(), shift in 0u32..64) {
            prop_assert_eq!(fold(Sum(s)), fold_by_steps(s));
            prop_assert_eq!(fold(Sum(s >> shift)), fold_by_steps(s >> shift));
        }

        #[test]
        fn matches_reference(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            prop_assert_eq!(fold(Sum::of(&data)), reference(&data));
        }

        /// Every header length, the unrolled ones and the rest, and two
        /// odd array lengths (a tail of 1 and 7 bytes).
        #[test]
        fn header_sums_match_reference(data in proptest::collection::vec(any::<u8>(), 0..130)) {
            prop_assert_eq!(fold(Sum::of(&data)), reference(&data));
            if let Some(a) = data.first_chunk::<9>() {
                prop_assert_eq!(fold(Sum(from_native(Sum(array_sum(a))))), reference(a));
            }
            if let Some(a) = data.first_chunk::<39>() {
                prop_assert_eq!(fold(Sum(from_native(Sum(array_sum(a))))), reference(a));
            }
        }

        #[test]
        fn pieces_combine_at_any_split(data in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..600) {
            let cut = cut.min(data.len());
            let whole = fold(Sum::of(&data));
            let parts = Sum::of(&data[..cut]).plus(Sum::of(&data[cut..]).at_offset(cut));
            prop_assert_eq!(fold(parts), whole);
        }

        #[test]
        fn negate_removes(a in proptest::collection::vec(any::<u8>(), 2..200), b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut a = a; if a.len() % 2 == 1 { a.pop(); }
            let mut ab = a.clone(); ab.extend_from_slice(&b);
            let total = Sum::of(&ab);
            let only_b = total.plus(Sum::of(&a).negate());
            // Equal as ones'-complement numbers (0 and 0xffff are the same value).
            let x = fold(only_b); let y = fold(Sum::of(&b));
            prop_assert!(x == y || (x == 0xffff && y == 0) || (x == 0 && y == 0xffff));
        }

        #[test]
        fn incremental_equals_recompute(mut data in proptest::collection::vec(any::<u8>(), 4..100), idx in 0usize..50, new in any::<u16>()) {
            if data.len() % 2 == 1 { data.push(0); }
            let i = (idx * 2) % data.len();
            let before = Sum::of(&data).checksum();
            let old = u16::from_be_bytes([data[i], data[i + 1]]);
            data[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let after = Sum::of(&data).checksum();
            let inc = update_u16(before, old, new);
            // RFC 1624: equal up to the +0/-0 ambiguity.
            prop_assert!(inc == after || (inc ^ after) == 0xffff && (inc == 0 || after == 0));
        }

        #[test]
        fn copy_and_sum_copies(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let mut dst = vec![0u8; data.len()];
            let s = copy_and_sum(&mut dst, &data);
            prop_assert_eq!(&dst, &data);
            prop_assert_eq!(fold(s), reference(&data));
        }

        /// A piece of a larger buffer: only `range` is copied and summed.
        #[test]
        fn copy_and_sum_in_takes_the_range(data in proptest::collection::vec(any::<u8>(), 0..6000), a in 0usize..6000, n in 0usize..3000) {
            let a = a.min(data.len());
            let b = (a + n).min(data.len());
            let mut dst = vec![0u8; b - a];
            let s = copy_and_sum_in(&mut dst, &data, a..b);
            prop_assert_eq!(&dst[..], &data[a..b]);
            prop_assert_eq!(fold(s), reference(&data[a..b]));
        }

        /// Both loops: the portable word loop and the one this CPU
        /// dispatches payloads to (the AVX2 `vpmaddwd` pass where it has
        /// AVX2), for every length from empty to several blocks and a
        /// tail, at any alignment.
        #[test]
        fn every_loop_sums_alike(data in proptest::collection::vec(any::<u8>(), 0..1200), skip in 0usize..32) {
            let data = &data[skip.min(data.len())..];
            let want = reference(data);
            let ahead = data.as_ptr_range().end as usize;
            for (name, sum, copied) in [
                ("words", sum_words::<4>(data), copy_sum_words::<4> as fn(&mut [u8], &[u8], usize) -> Sum),
                ("dispatched", long_sum(data), long_copy_sum),
            ] {
                prop_assert_eq!(from_native(sum) as u16, want, "sum, {}", name);
                // No prefetch, none past the data's end, for the first
                // half of the blocks (the prefetching loop hands over to
                // the other midway), for all of them.
                let half = data.as_ptr() as usize + PREFETCH_AHEAD + data.len() / 2;
                for end in [0, ahead, half, usize::MAX] {
                    let mut dst = vec![0u8; data.len()];
                    prop_assert_eq!(from_native(copied(&mut dst, data, end)) as u16, want, "copy, {}", name);
                    prop_assert_eq!(&dst[..], data);
                }
            }
        }

        /// A finished partial checksum verifies: with the field holding a
        /// pseudo-header sum P, P plus the covered bytes afterwards sum to
        /// all ones. A field outside the data is refused, nothing written.
        #[test]
        fn finish_partial_verifies(mut data in proptest::collection::vec(any::<u8>(), 9..600), start in 0usize..2, p in any::<u16>()) {
            let field = start + 6;
            data[field..field + 2].copy_from_slice(&p.to_be_bytes());
            prop_assert!(finish_partial(&mut data, start, 6));
            prop_assert_eq!(fold(Sum::of(&data[start..]).add_u16(p)), 0xffff);
            let (len, copy) = (data.len(), data.clone());
            prop_assert!(!finish_partial(&mut data, len - 1, 0));
            prop_assert_eq!(data, copy);
        }
    }
}
