//! One gateway per port: a lock per interface, taken before the gateway
//! touches a port, so that a second `px gateway` on a port one already
//! serves is refused (two would deliver every frame twice) with the port
//! and the first one's PID.
//!
//! The lock is a write lock on an open file description (`F_OFD_SETLK`,
//! `F_WRLCK`: two opens conflict even in one process) of a file named
//! after the interface — its network namespace, index and name, so equal
//! names in two namespaces (the lab's) are two ports — in [`lock_dir`]:
//! `$RUNTIME_DIRECTORY` when systemd gives one (the unit's
//! `RuntimeDirectory=px`, writable by the `px` user inside its sandbox),
//! otherwise `/run/px`. The kernel drops the lock when the file closes, so
//! it goes with the process however it ends (`kill -9` included). The
//! holder writes its PID and start time into the file for the refusal to
//! name, and removes the file when it lets go; a file left behind by a
//! killed holder is simply locked again by the next one.
//!
//! Nobody else can keep the port (issue 35 item 6): the file is mode 0600,
//! so another local user cannot open it, let alone lock it; and a lock
//! held on a file whose recorded holder is dead (its PID gone, or living
//! again in a process that started at another time) is not a gateway's:
//! whoever holds it (a reader that opened the file before, root), the
//! file is removed and the port locked on a new one. A fail-closed gateway
//! is never kept down by a lock it cannot explain.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a port could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the port's lock (its PID, as it wrote it).
    #[error(
        "port {port} is already served by another px gateway (PID {}): a second one would deliver every frame twice; stop it first (lock file {})",
        pid.map_or("unknown".to_string(), |p| p.to_string()),
        path.display()
    )]
    Held { port: String, pid: Option<u32>, path: PathBuf },
    /// The interface could not be named (it does not exist).
    #[error("port {port}: {source}")]
    Iface { port: String, source: px_io::IfaceError },
    /// The lock file could not be created, opened or locked.
    #[error("port {port}: lock file {}: {source}", path.display())]
    Io { port: String, path: PathBuf, source: io::Error },
}

/// Where port locks live: `$RUNTIME_DIRECTORY` (systemd; the first if it
/// lists several), else `/run/px`.
pub fn lock_dir() -> PathBuf {
    match std::env::var_os("RUNTIME_DIRECTORY") {
        Some(v) if !v.is_empty() => {
            let first = v.to_string_lossy().split(':').next().unwrap_or_default().to_string();
            PathBuf::from(first)
        }
        _ => PathBuf::from("/run/px"),
    }
}

/// The lock file of interface `port` (of the calling thread's network
/// namespace) in `dir`.
pub fn lock_path(dir: &Path, port: &str) -> Result<PathBuf, LockError> {
    let ifindex = px_io::iface::ifindex(port).map_err(|source| LockError::Iface { port: port.into(), source })?;
    Ok(dir.join(format!("port-net{}-{ifindex}-{port}.lock", netns_id())))
}

/// The inode of the calling thread's network namespace (0 if `/proc` does
/// not show it).
fn netns_id() -> u64 {
    ["/proc/thread-self/ns/net", "/proc/self/ns/net"]
        .iter()
        .find_map(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.ino())
}

/// A held port lock; released (and its file removed) on drop, or by the
/// kernel when the process ends.
#[derive(Debug)]
pub struct PortLock {
    file: File,
    path: PathBuf,
}

impl PortLock {
    /// Locks interface `port` in `dir` (created if missing) for this
    /// process.
    pub fn acquire(dir: &Path, port: &str) -> Result<PortLock, LockError> {
        let path = lock_path(dir, port)?;
        let io_err = |source| LockError::Io { port: port.into(), path: path.clone(), source };
        if !dir.is_dir() {
            std::fs::create_dir_all(dir).map_err(io_err)?;
        }
        // A few rounds at most: each retry follows a holder that let go
        // (and removed the file) while we opened it.
        for _ in 0..8 {
            let (file, writable) = match open(&path) {
                Ok(f) => f,
                // Another user's file we may not even read (a root gateway
                // killed, before a `px` one): the kernel's list of locks
                // tells whether anyone holds it.
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => match locked(&path) {
                    Some(false) => {
                        std::fs::remove_file(&path).map_err(io_err)?;
                        continue;
                    }
                    Some(true) => return Err(LockError::Held { port: port.into(), pid: None, path: path.clone() }),
                    None => return Err(io_err(e)),
                },
                Err(e) => return Err(io_err(e)),
            };
            match take(file, writable, &path).map_err(io_err)? {
                Taken::Locked(lock) => return Ok(lock),
                Taken::Held(file) => {
                    return Err(LockError::Held { port: port.into(), pid: holder_pid(file), path: path.clone() });
                }
                Taken::Stale => continue,
            }
        }
        Err(io_err(io::Error::other("the lock file kept changing")))
    }

    /// The file it holds.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write_pid(&self) -> io::Result<()> {
        let mut f = &self.file;
        f.set_len(0)?;
        f.rewind()?;
        let pid = std::process::id();
        match px_io::process::own_start_time() {
            Some(start) => write!(f, "{pid}\nstart {start}\n"),
            None => writeln!(f, "{pid}"),
        }
    }
}

impl Drop for PortLock {
    fn drop(&mut self) {
        // Removed while still locked, so that no one locks a file that is
        // no longer the port's (see the check in `acquire`); the lock goes
        // when the file closes, after this.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What one attempt on an open lock file came to.
#[derive(Debug)]
enum Taken {
    /// Ours, with our PID in it.
    Locked(PortLock),
    /// Another open file holds it.
    Held(File),
    /// Not the port's lock (any more): its holder removed it after we
    /// opened it, or it is an unheld file of another user, removed now.
    /// Open the path again.
    Stale,
}

/// Tries to lock `file`, opened from `path` (`writable`: read-write).
fn take(file: File, writable: bool, path: &Path) -> io::Result<Taken> {
    if !try_lock(&file)? {
        return Ok(match holder(&file) {
            // Whoever holds it, it is not the gateway the file names.
            Some(h) if !h.alive() => {
                remove_if_same(path, &file)?;
                Taken::Stale
            }
            _ => Taken::Held(file),
        });
    }
    // Still the file the path names? A holder removes it, still locked,
    // when it lets go: a file locked after that is nobody's lock.
    let same = std::fs::metadata(path).is_ok_and(|m| file.metadata().is_ok_and(|f| f.ino() == m.ino()));
    if !same {
        return Ok(Taken::Stale);
    }
    if !writable {
        // Left behind by a holder of another user (a root gateway killed,
        // before a `px` one): unlocked, so nobody's; removed, to make our own.
        std::fs::remove_file(path)?;
        return Ok(Taken::Stale);
    }
    let lock = PortLock { file, path: path.to_path_buf() };
    lock.write_pid()?;
    Ok(Taken::Locked(lock))
}

/// Removes `path` if it still names the file `file` is open on.
fn remove_if_same(path: &Path, file: &File) -> io::Result<()> {
    let same = std::fs::metadata(path).is_ok_and(|m| file.metadata().is_ok_and(|f| f.ino() == m.ino()));
    match std::fs::remove_file(path) {
        Err(e) if same && e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Opens (or creates, mode 0600) the lock file, without following a
/// symlink; read only if it is another user's. A file of ours left by an
/// older version with a wider mode is narrowed to 0600.
fn open(path: &Path) -> io::Result<(File, bool)> {
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    match rw {
        Ok(f) => {
            if f.metadata().is_ok_and(|m| m.mode() & 0o077 != 0) {
                let _ = f.set_permissions(std::fs::Permissions::from_mode(0o600));
            }
            Ok((f, true))
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let f = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
            Ok((f, false))
        }
        Err(e) => Err(e),
    }
}

/// Takes the write lock of the open file description without waiting:
/// `Ok(false)` if another open file (of any process, this one included)
/// holds a lock on it. A read-only descriptor takes a read lock, which
/// answers the same question (no other writer) for a file only read.
fn try_lock(f: &File) -> io::Result<bool> {
    let writable = f.metadata().is_ok() && fcntl_getfl(f).is_some_and(|fl| fl & libc::O_ACCMODE != libc::O_RDONLY);
    // SAFETY: a zeroed `flock` is valid; the fields that matter are set.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = if writable { libc::F_WRLCK } else { libc::F_RDLCK } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    loop {
        // SAFETY: fcntl with a live `flock` on a descriptor `f` owns and
        // keeps open; an OFD lock needs `l_pid` 0 (zeroed above).
        if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EACCES) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

fn fcntl_getfl(f: &File) -> Option<libc::c_int> {
    // SAFETY: F_GETFL on a descriptor `f` owns.
    let fl = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
    (fl >= 0).then_some(fl)
}

/// A process as a lock file records it: its PID and, when known, its
/// start time (clock ticks after boot, `/proc/PID/stat` field 22), which
/// tells it from a later process that got the same PID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Holder {
    pid: u32,
    start: Option<u64>,
}

impl Holder {
    fn parse(text: &str) -> Option<Holder> {
        let mut lines = text.lines();
        let pid = lines.next()?.trim().parse().ok()?;
        let start = lines.find_map(|l| l.strip_prefix("start ")?.trim().parse().ok());
        Some(Holder { pid, start })
    }

    /// Whether the process it names runs (the same process: same start).
    fn alive(&self) -> bool {
        px_io::process::is_running(self.pid, self.start)
    }
}

/// The holder the file names; the holder writes it just after it locks,
/// so an empty file is read again for a moment.
fn holder(f: &File) -> Option<Holder> {
    let until = Instant::now() + Duration::from_millis(200);
    let mut f = f;
    loop {
        let mut text = String::new();
        if f.rewind().is_ok()
            && f.read_to_string(&mut text).is_ok()
            && let Some(h) = Holder::parse(&text)
        {
            return Some(h);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the kernel lists a lock of any kind on the file `path` names
/// (`/proc/locks`: `MAJ:MIN:INODE` of each lock); `None` if it cannot tell.
fn locked(path: &Path) -> Option<bool> {
    let m = std::fs::symlink_metadata(path).ok()?;
    let (major, minor) = (libc::major(m.dev()), libc::minor(m.dev()));
    let want = format!("{major:02x}:{minor:02x}:{}", m.ino());
    let list = std::fs::read_to_string("/proc/locks").ok()?;
    Some(list.lines().any(|l| l.split_whitespace().any(|w| w == want)))
}

/// The PID the holder wrote.
fn holder_pid(f: File) -> Option<u32> {
    holder(&f).map(|h| h.pid)
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A fresh directory under the temp dir, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new() -> Dir {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            Dir(std::env::temp_dir().join(format!("px-lock-test-{}-{n}", std::process::id())))
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The lab removes a gateway's files by the namespace their names
    /// carry (`px_netns::runfiles`, for gateways killed with SIGKILL): the
    /// names made here must say it the way it reads them, in its directory.
    #[test]
    fn the_files_name_their_namespace_as_the_lab_reads_it() {
        let lock = lock_path(Path::new("/x"), "lo").unwrap();
        let sock = super::super::control::default_path("in", "out");
        for p in [lock, sock] {
            let n = p.file_name().unwrap().to_str().unwrap();
            assert_eq!(px_netns::runfiles::namespace_of(n), Some(netns_id()), "{n}");
        }
        if std::env::var_os("RUNTIME_DIRECTORY").is_none() {
            assert_eq!(lock_dir(), Path::new(px_netns::runfiles::RUN_DIR));
        }
    }

    /// Two locks of one port (two open files, here in one process) cannot
    /// both be held; the refusal names the port and the holder's PID; once
    /// the first goes, the port can be locked again. `lo` exists in every
    /// namespace and is only named here, never used.
    #[test]
    fn a_port_is_locked_once() {
        let dir = Dir::new();
        let first = PortLock::acquire(&dir.0, "lo").unwrap();
        let me = Holder { pid: std::process::id(), start: px_io::process::own_start_time() };
        assert_eq!(Holder::parse(&std::fs::read_to_string(first.path()).unwrap()), Some(me));
        let e = PortLock::acquire(&dir.0, "lo").unwrap_err();
        assert!(matches!(&e, LockError::Held { pid: Some(p), .. } if *p == std::process::id()), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("port lo ") && text.contains(&format!("PID {}", std::process::id())), "{text}");
        let path = first.path().to_path_buf();
        drop(first);
        assert!(!path.exists(), "the lock file stays after its holder let go");
        let again = PortLock::acquire(&dir.0, "lo").unwrap();
        assert_eq!(again.path(), path);
    }

    /// The same name in another network namespace is another port: `lo`
    /// here and `lo` in a fresh namespace (both index 1) lock apart.
    /// Root only (the namespace); skipped with a message otherwise.
    #[test]
    fn equal_names_in_two_namespaces_are_two_ports() {
        if !px_netns::require_root_or_skip("equal_names_in_two_namespaces_are_two_ports") {
            return;
        }
        let dir = Dir::new();
        let here = PortLock::acquire(&dir.0, "lo").unwrap();
        let ns = px_netns::Netns::new("lock").unwrap();
        let there = ns.run(|| PortLock::acquire(&dir.0, "lo")).unwrap();
        let there = there.expect("lo of another namespace is another port");
        assert_ne!(here.path(), there.path());
    }

    /// The race of a holder letting go: a file opened before its holder
    /// removed it and let go can be locked, but is no longer the port's
    /// (a new holder may have the new file): that is no lock.
    #[test]
    fn a_file_removed_after_it_was_opened_is_not_a_lock() {
        let dir = Dir::new();
        let first = PortLock::acquire(&dir.0, "lo").unwrap();
        let path = first.path().to_path_buf();
        let (opened, writable) = open(&path).unwrap();
        drop(first); // removes the file, then lets go
        let second = PortLock::acquire(&dir.0, "lo").unwrap(); // a new file
        assert!(matches!(take(opened, writable, &path).unwrap(), Taken::Stale));
        drop(second);
    }

    /// A file left by a holder that is gone (its PID still in it) does not
    /// lock the port: the next gateway takes it and writes its own PID.
    #[test]
    fn a_file_left_behind_does_not_hold_the_port() {
        let dir = Dir::new();
        std::fs::create_dir_all(&dir.0).unwrap();
        let path = lock_path(&dir.0, "lo").unwrap();
        std::fs::write(&path, "999999\n").unwrap();
        let lock = PortLock::acquire(&dir.0, "lo").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(Holder::parse(&text).map(|h| h.pid), Some(std::process::id()));
        drop(lock);
    }

    /// Run by [`the_lock_of_a_killed_process_is_released`] as a process of
    /// its own: holds the lock of `lo` in `$PX_LOCK_TEST_DIR` until killed.
    #[test]
    #[ignore = "a helper process, started by the_lock_of_a_killed_process_is_released"]
    fn hold_a_lock_until_killed() {
        let Some(dir) = std::env::var_os("PX_LOCK_TEST_DIR") else { return };
        // The parent takes and drops the lock while it waits for this one
        // to hold it: try again while it does.
        let t0 = Instant::now();
        let _lock = loop {
            match PortLock::acquire(Path::new(&dir), "lo") {
                Ok(l) => break l,
                Err(LockError::Held { .. }) if t0.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        };
        std::thread::sleep(Duration::from_secs(30));
    }

    /// Starts [`hold_a_lock_until_killed`] as a process of its own and
    /// waits until it holds the lock of `lo` in `dir`, as the refusal names
    /// it (by its PID).
    fn holder_process(dir: &Path) -> std::process::Child {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "gateway::lock::tests::hold_a_lock_until_killed", "--ignored", "--quiet"])
            .env("PX_LOCK_TEST_DIR", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        loop {
            match PortLock::acquire(dir, "lo") {
                Err(LockError::Held { pid, .. }) if pid == Some(child.id()) => return child,
                // Not the child's yet: let go (and remove the file) at once.
                Ok(lock) => drop(lock),
                Err(LockError::Held { .. }) => {}
                Err(e) => panic!("{e}"),
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "the child did not take the lock");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Another process holding the lock refuses this one, named by its PID,
    /// and its lock goes when it is killed with SIGKILL (no chance to clean
    /// up; its file stays behind).
    #[test]
    fn the_lock_of_a_killed_process_is_released() {
        let dir = Dir::new();
        let mut child = holder_process(&dir.0);
        child.kill().unwrap(); // SIGKILL, to the child we started
        child.wait().unwrap();
        let path = lock_path(&dir.0, "lo").unwrap();
        assert!(path.exists(), "a killed holder cannot remove its file");
        PortLock::acquire(&dir.0, "lo").expect("the killed holder's lock is gone");
    }

    /// Issue 35 item 6: the lock file is the gateway's alone (0600):
    /// another local user cannot even open it.
    #[test]
    fn the_lock_file_is_the_gateways_alone() {
        let dir = Dir::new();
        let lock = PortLock::acquire(&dir.0, "lo").unwrap();
        let mode = std::fs::metadata(lock.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "lock file mode {mode:o}");
    }

    /// Takes, on a read-only descriptor of `path`, every lock a reader can
    /// take: a shared `flock` and an open-file-description read lock.
    fn squat(path: &Path) -> File {
        let f = OpenOptions::new().read(true).open(path).unwrap();
        // SAFETY: flock on a descriptor `f` owns.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) }, 0);
        // SAFETY: a zeroed `flock` is valid; the fields are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_RDLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        // SAFETY: fcntl with a live `flock` on a descriptor `f` owns.
        assert_eq!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) }, 0);
        f
    }

    /// Issue 35 item 6: after its holder was killed with SIGKILL, a local
    /// reader holding whatever lock it can take on the file left behind
    /// (a shared `flock`, a read lock) does not keep a fail-closed gateway
    /// down: the file names a dead process, so the next gateway takes the
    /// port (on a new file).
    #[test]
    fn a_readers_lock_does_not_keep_the_port_after_its_holder_is_killed() {
        let dir = Dir::new();
        let mut child = holder_process(&dir.0);
        let path = lock_path(&dir.0, "lo").unwrap();
        child.kill().unwrap(); // SIGKILL, to the child we started
        child.wait().unwrap();
        let _squatter = squat(&path);
        let lock = PortLock::acquire(&dir.0, "lo").expect("a reader's lock kept the port of a dead gateway");
        assert_eq!(
            std::fs::read_to_string(lock.path()).unwrap().lines().next(),
            Some(&*std::process::id().to_string())
        );
    }

    /// A PID that lives again in another process is not the holder: the
    /// file names the process by its PID and its start time.
    #[test]
    fn a_reused_pid_is_not_the_holder() {
        let dir = Dir::new();
        std::fs::create_dir_all(&dir.0).unwrap();
        let path = lock_path(&dir.0, "lo").unwrap();
        // This process's PID, with another start time: a gateway that died
        // and whose PID went to this test.
        std::fs::write(&path, format!("{}\nstart 1\n", std::process::id())).unwrap();
        let _squatter = squat(&path);
        let lock = PortLock::acquire(&dir.0, "lo").expect("a reused PID was taken for the holder");
        drop(lock);
        // The holder's own record names it alive.
        let live = PortLock::acquire(&dir.0, "lo").unwrap();
        let e = PortLock::acquire(&dir.0, "lo").unwrap_err();
        assert!(matches!(e, LockError::Held { pid: Some(p), .. } if p == std::process::id()), "{e:?}");
        drop(live);
    }

    /// The kernel's list of locks says whether a file is locked: what a
    /// gateway of another user consults for a lock file it may not open.
    #[test]
    fn the_kernels_list_tells_a_held_file_from_a_free_one() {
        let dir = Dir::new();
        let lock = PortLock::acquire(&dir.0, "lo").unwrap();
        assert_eq!(locked(lock.path()), Some(true));
        let path = lock.path().to_path_buf();
        drop(lock);
        std::fs::write(&path, "1\n").unwrap();
        assert_eq!(locked(&path), Some(false), "a file nobody locks");
        assert_eq!(locked(&dir.0.join("none")), None);
    }
}
