//! Cleanup on every exit path, including Ctrl-C.
//!
//! Drop guards ([`crate::Netns`], [`crate::LabChild`]) clean up on normal
//! returns, `?` and panics. A signal bypasses destructors, so every live
//! namespace and child process is also recorded in a process-wide registry,
//! and [`install_signal_cleanup`] arranges that SIGINT/SIGTERM empty it
//! (temporary files and directories of a run are registered too).
//!
//! How: the signal handler only writes the signal number into a pipe (the
//! one thing that is async-signal-safe here); a watcher thread reads it,
//! sets [`interrupted`], kills the registered children, deletes the
//! registered namespaces and exits with status 128 + signal, as a shell
//! expects of a process killed by that signal. Children go first because a
//! namespace with a process still inside outlives `ip netns del`.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::cmd;

static NAMESPACES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// Temporary files and directories (configurations, downloads) a run made.
static PATHS: Mutex<Vec<std::path::PathBuf>> = Mutex::new(Vec::new());
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Write end of the self-pipe; -1 until installed.
static PIPE_WR: AtomicI32 = AtomicI32::new(-1);
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// A poisoned registry is still a correct list of names: a panic elsewhere
/// must not stop cleanup.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn register_namespace(name: &str) {
    lock(&NAMESPACES).push(name.to_owned());
}

pub(crate) fn unregister_namespace(name: &str) {
    lock(&NAMESPACES).retain(|n| n != name);
}

pub(crate) fn register_child(pid: u32) {
    lock(&CHILDREN).push(pid);
}

pub(crate) fn unregister_child(pid: u32) {
    lock(&CHILDREN).retain(|p| *p != pid);
}

/// Records a temporary file or directory of a run, removed by the signal
/// cleanup (its owner removes it on drop and calls [`unregister_path`]).
pub fn register_path(p: &std::path::Path) {
    lock(&PATHS).push(p.to_owned());
}

/// Forgets a path [`register_path`] recorded (its owner removed it).
pub fn unregister_path(p: &std::path::Path) {
    lock(&PATHS).retain(|q| q != p);
}

/// True once SIGINT or SIGTERM arrived (after [`install_signal_cleanup`]).
/// Long loops (a demo's traffic phase) may poll it to stop early.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Kills every registered child process and deletes every registered
/// namespace now. Errors are reported on stderr, not returned: this runs
/// on the way out and must try everything.
pub fn cleanup_all() {
    let pids: Vec<u32> = std::mem::take(&mut *lock(&CHILDREN));
    for pid in pids {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill(2) has no memory effects; the pid is one we spawned
            // and registered, and it is unregistered only after being reaped,
            // so it cannot name someone else's process.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let names: Vec<String> = std::mem::take(&mut *lock(&NAMESPACES));
    for name in names {
        crate::runfiles::remove_files_of_namespace(&name);
        if let Err(e) = cmd::run_args("ip", &["netns", "del", &name]) {
            eprintln!("px-lab: cleanup of namespace {name} failed: {e}");
        }
    }
    let paths: Vec<std::path::PathBuf> = std::mem::take(&mut *lock(&PATHS));
    for p in paths {
        let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_WR.load(Ordering::Relaxed);
    let byte = u8::try_from(sig).unwrap_or(0);
    // SAFETY: write(2) is async-signal-safe; `byte` lives for the call. A
    // full pipe (the watcher is already busy) just drops the extra byte.
    unsafe { libc::write(fd, (&raw const byte).cast(), 1) };
}

/// Installs SIGINT/SIGTERM handlers that clean up the registry and exit.
/// Idempotent: later calls return the first call's result.
pub fn install_signal_cleanup() -> io::Result<()> {
    INSTALLED.get_or_init(|| install().map_err(|e| e.to_string())).clone().map_err(io::Error::other)
}

fn install() -> io::Result<()> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid 2-int array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [rd, wr] = fds;
    PIPE_WR.store(wr, Ordering::Relaxed);
    std::thread::Builder::new().name("px-lab-signals".into()).spawn(move || watch(rd))?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        set_handler(sig)?;
    }
    Ok(())
}

fn set_handler(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value;
    // we fill the handler with a function of the right C signature, which
    // only performs an async-signal-safe write.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn watch(rd: libc::c_int) {
    let mut byte = 0u8;
    loop {
        // SAFETY: reads at most 1 byte into `byte`, which outlives the call.
        let n = unsafe { libc::read(rd, (&raw mut byte).cast(), 1) };
        if n == 1 {
            break;
        }
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return; // pipe closed or broken: nothing more will come
    }
    INTERRUPTED.store(true, Ordering::Relaxed);
    eprintln!("px-lab: signal {byte}: removing lab namespaces and processes");
    cleanup_all();
    std::process::exit(128 + i32::from(byte));
}

/// A temporary file (a configuration for a lab process), removed on drop
/// and by the signal cleanup.
#[derive(Debug)]
pub struct TempFile(pub std::path::PathBuf);

impl TempFile {
    /// Writes `text` to `<tmp>/<stem>-<pid>.<ext>`.
    pub fn write(stem: &str, ext: &str, text: &str) -> Result<TempFile, String> {
        let p = std::env::temp_dir().join(format!("{stem}-{}.{ext}", std::process::id()));
        register_path(&p);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(TempFile(p))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        unregister_path(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_add_remove() {
        register_namespace("px-test-registry-1");
        assert!(lock(&NAMESPACES).iter().any(|n| n == "px-test-registry-1"));
        unregister_namespace("px-test-registry-1");
        assert!(!lock(&NAMESPACES).iter().any(|n| n == "px-test-registry-1"));
        register_child(u32::MAX);
        unregister_child(u32::MAX);
        assert!(!lock(&CHILDREN).contains(&u32::MAX));
        let p = std::path::Path::new("/nonexistent/px-test-registry");
        register_path(p);
        assert!(lock(&PATHS).iter().any(|q| q == p));
        unregister_path(p);
        assert!(!lock(&PATHS).iter().any(|q| q == p));
    }

    #[test]
    fn install_is_idempotent() {
        install_signal_cleanup().unwrap();
        install_signal_cleanup().unwrap();
        assert!(!interrupted());
    }
}
