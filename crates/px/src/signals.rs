//! SIGINT/SIGTERM as a flag: long-running subcommands poll [`stopped`] and
//! shut down cleanly (flush, restore, exit 0) instead of dying mid-way.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handler (once); later signals only set the flag.
pub fn install() {
    INSTALL.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction with a handler that only stores
            // to an atomic is a valid, async-signal-safe disposition.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
}

/// Whether SIGINT or SIGTERM has arrived since [`install`].
pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}
