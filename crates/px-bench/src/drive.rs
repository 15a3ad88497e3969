//! What every benchmark loop does around the engine: drain its transmits
//! as an I/O loop would, and prefetch the next frames' headers. Shared by
//! the TCP ([`crate::engine_bench`]) and UDP ([`crate::udp_trace`]) runs.

use px_gateway::Engine;

/// Sends (counts and recycles) every transmit the engine has queued; returns
/// the bytes they carry.
#[inline(always)]
pub(crate) fn drain(engine: &mut Engine) -> u64 {
    let mut sent = 0;
    while let Some(t) = engine.poll_transmit() {
        sent += (t.end - t.start) as u64;
        engine.recycle(t.buf);
    }
    sent
}

/// Hints the CPU to load the cache line at the start of `bytes`.
#[inline(always)]
pub(crate) fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; the pointer comes from a live slice.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(bytes.as_ptr().cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}
