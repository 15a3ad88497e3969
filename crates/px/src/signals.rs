//! SIGINT/SIGTERM as a flag: long-running subcommands poll [`stopped`] (or
//! hand the flag [`install`] returns to a library loop, such as
//! `px_runtime::gateway::run`) and shut down cleanly (flush, restore,
//! exit 0) instead of dying mid-way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic load (the flag is set before the handler is installed)
    // and an atomic store: async-signal-safe.
    if let Some(stop) = STOP.get() {
        stop.store(true, Ordering::SeqCst);
    }
}

/// Installs the handler (once); later signals only set the flag, which is
/// returned (the same flag on every call).
pub fn install() -> Arc<AtomicBool> {
    let mut first = false;
    let stop = STOP.get_or_init(|| {
        first = true;
        Arc::new(AtomicBool::new(false))
    });
    if first {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction with a handler that only touches
            // atomics is a valid, async-signal-safe disposition.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    }
    stop.clone()
}

/// Whether SIGINT or SIGTERM has arrived since [`install`].
pub fn stopped() -> bool {
    STOP.get().is_some_and(|s| s.load(Ordering::SeqCst))
}
