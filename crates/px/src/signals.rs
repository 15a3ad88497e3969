//! SIGINT/SIGTERM as a flag: long-running subcommands poll [`stopped`] (or
//! hand the flag [`install`] returns to a library loop, such as
//! `px_runtime::gateway::run`) and shut down cleanly (flush, restore,
//! exit 0) instead of dying mid-way. SIGHUP, where a command asks for it
//! ([`install_reload`]), sets a second flag: reload the configuration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
static RELOAD: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic load (the flag is set before the handler is installed)
    // and an atomic store: async-signal-safe.
    if let Some(stop) = STOP.get() {
        stop.store(true, Ordering::SeqCst);
    }
}

extern "C" fn on_hangup(_: libc::c_int) {
    // As on_signal: an atomic load and an atomic store.
    if let Some(reload) = RELOAD.get() {
        reload.store(true, Ordering::SeqCst);
    }
}

/// Installs the handler (once); later signals only set the flag, which is
/// returned (the same flag on every call).
pub fn install() -> Arc<AtomicBool> {
    flag(&STOP, &[libc::SIGINT, libc::SIGTERM], on_signal)
}

/// SIGHUP sets the returned flag (the same on every call) instead of
/// ending the process: the gateway reloads its configuration.
pub fn install_reload() -> Arc<AtomicBool> {
    flag(&RELOAD, &[libc::SIGHUP], on_hangup)
}

/// The flag in `cell`, created (and `handler` installed for `signals`)
/// on the first call.
fn flag(
    cell: &OnceLock<Arc<AtomicBool>>,
    signals: &[libc::c_int],
    handler: extern "C" fn(libc::c_int),
) -> Arc<AtomicBool> {
    let mut first = false;
    let f = cell.get_or_init(|| {
        first = true;
        Arc::new(AtomicBool::new(false))
    });
    if first {
        for &sig in signals {
            // SAFETY: a zeroed sigaction with a handler that only touches
            // atomics is a valid, async-signal-safe disposition.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    }
    f.clone()
}

/// Whether SIGINT or SIGTERM has arrived since [`install`].
pub fn stopped() -> bool {
    STOP.get().is_some_and(|s| s.load(Ordering::SeqCst))
}
