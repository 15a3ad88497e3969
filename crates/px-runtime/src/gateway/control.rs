//! The control socket: a local unix stream socket on which a running
//! gateway answers `px status` with its [`Status`] as one JSON document.
//!
//! Where: the `control_socket` key, by default [`default_path`] in the
//! lock directory (`/run/px`, or systemd's `$RUNTIME_DIRECTORY`), named
//! after the network namespace and the two ports, so that `px status` run
//! in the gateway's namespace finds it alone ([`find`]). Who: the socket is
//! made mode 0660 and given the group `px` when that group exists (the
//! package's; otherwise the gateway's own), so the gateway's user, that
//! group and root may ask; the mode and group are set on the socket
//! itself, never through a symlink put in its place ([`restrict`]). Like
//! the metrics endpoint it only reads.
//!
//! The protocol is one request line (`status`), one JSON answer, then the
//! gateway closes. Bounded like the metrics endpoint: each client on a
//! short-lived thread of its own, at most 4 at a time (`MAX_CLIENTS`; one
//! more is answered "busy" at once), 256 bytes of request, 1 s to send it
//! and 2 s for the answer to leave, and an accepting thread that ends
//! within 50 ms of the stop flag without waiting for a client.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use px_gateway::SharedPmtu;

use super::metrics::{ReloadResult, Shared, WorkerSnapshot};
use super::status::{ConfigStatus, Identity, Status};

/// The one request the socket answers.
pub const REQUEST: &str = "status";
/// How long a client may take to send its request. (The unit tests give
/// idle clients longer, so that a loaded machine does not drop them before
/// the test has seen that they hold their places.)
const REQUEST_DEADLINE: Duration = if cfg!(test) { Duration::from_secs(10) } else { Duration::from_secs(1) };
/// How long a client may take to read the answer.
const CLIENT_DEADLINE: Duration = Duration::from_secs(2);
/// Clients served at the same time.
const MAX_CLIENTS: usize = 4;
/// How often the accepting thread looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);
/// The group the socket is given when it exists.
pub const GROUP: &str = "px";
/// How long the server waits for every worker to list its flows.
const FLOWS_WAIT: Duration = Duration::from_secs(1);
/// How often rates are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Why the control socket could not be set up, or asked.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Another live gateway answers on the path.
    #[error("control socket {}: another px gateway answers there", .0.display())]
    InUse(PathBuf),
    #[error("control socket {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// `px status` found no socket of a gateway in this network namespace.
    #[error(
        "no running px gateway found: no control socket in {} for this network namespace (is the gateway running, in this namespace? name one with --socket)",
        .0.display()
    )]
    NotFound(PathBuf),
    /// Several gateways run in this namespace: the caller must choose.
    #[error("{} px gateways run here; name one with --socket: {}", .0.len(), .0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    Several(Vec<PathBuf>),
    /// The gateway answered something that is not a status.
    #[error("control socket {}: unexpected answer: {detail}", path.display())]
    Answer { path: PathBuf, detail: String },
}

/// The inode of this thread's network namespace (0 if `/proc` does not
/// show it), as the port locks name it.
fn netns_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    ["/proc/thread-self/ns/net", "/proc/self/ns/net"]
        .iter()
        .find_map(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.ino())
}

fn prefix() -> String {
    format!("gateway-net{}-", netns_id())
}

/// The default control socket of the gateway on `inner` and `outer` in
/// this network namespace.
pub fn default_path(inner: &str, outer: &str) -> PathBuf {
    super::lock::lock_dir().join(format!("{}{outer}-{inner}.sock", prefix()))
}

/// The control socket of the one gateway of this network namespace in
/// the lock directory.
pub fn find() -> Result<PathBuf, ControlError> {
    let dir = super::lock::lock_dir();
    let p = prefix();
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|x| {
                    x.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&p) && n.ends_with(".sock"))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    // A gateway killed with SIGKILL leaves its socket file, and a later
    // namespace may reuse the inode number the name carries: only a socket
    // someone listens on is a running gateway.
    let mut found = listening(found);
    match found.len() {
        0 => Err(ControlError::NotFound(dir)),
        1 => Ok(found.remove(0)),
        _ => Err(ControlError::Several(found)),
    }
}

/// The paths of `paths` that a process listens on (a connection is
/// accepted; a stale socket file refuses it).
fn listening(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.into_iter().filter(|p| UnixStream::connect(p).is_ok()).collect()
}

/// Asks the gateway at `path` for its status.
pub fn query(path: &Path) -> Result<Status, ControlError> {
    let io = |source| ControlError::Io { path: path.to_path_buf(), source };
    let mut s = UnixStream::connect(path).map_err(io)?;
    s.set_read_timeout(Some(CLIENT_DEADLINE + FLOWS_WAIT)).map_err(io)?;
    s.set_write_timeout(Some(CLIENT_DEADLINE)).map_err(io)?;
    // A gateway that is busy answers and closes before it reads: what it
    // said is read even if the request could not be written.
    let sent = s.write_all(format!("{REQUEST}\n").as_bytes());
    let mut text = String::new();
    let read = s.read_to_string(&mut text);
    if text.is_empty() {
        sent.map_err(io)?;
        read.map_err(io)?;
    }
    if let Ok(serde_json::Value::Object(o)) = serde_json::from_str::<serde_json::Value>(&text)
        && let Some(e) = o.get("error").and_then(|e| e.as_str())
    {
        return Err(ControlError::Answer { path: path.to_path_buf(), detail: e.to_string() });
    }
    serde_json::from_str(&text)
        .map_err(|e| ControlError::Answer { path: path.to_path_buf(), detail: format!("{e}: {:.200}", text) })
}

/// What the control thread reads of the running gateway.
pub struct Source {
    pub id: Identity,
    /// The running configuration's part of the status (the main loop
    /// replaces it on a reload).
    pub config: Arc<Mutex<ConfigStatus>>,
    pub shared: Shared,
    pub pmtu: Arc<SharedPmtu>,
    pub started: Instant,
}

/// Binds the control socket at `path` (a stale file of a dead gateway is
/// replaced; a live one is refused) and serves it on a thread until
/// `stop`; the file is removed when the thread ends.
pub fn serve(path: &Path, src: Source, stop: Arc<AtomicBool>) -> Result<std::thread::JoinHandle<()>, ControlError> {
    let io = |source| ControlError::Io { path: path.to_path_buf(), source };
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(ControlError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let l = UnixListener::bind(path).map_err(io)?;
    restrict(path, group_id(GROUP)).map_err(io)?;
    l.set_nonblocking(true).map_err(io)?;
    let path = path.to_path_buf();
    let src = Arc::new(src);
    std::thread::Builder::new()
        .name("px-control".into())
        .spawn(move || {
            let active = Arc::new(AtomicUsize::new(0));
            let mut poller = px_io::Poller::new();
            poller.add(l.as_fd());
            let mut samples: (Option<(Instant, WorkerSnapshot)>, (Instant, WorkerSnapshot)) =
                (None, (Instant::now(), WorkerSnapshot::default()));
            while !stop.load(Ordering::Relaxed) {
                if samples.1.0.elapsed() >= SAMPLE_EVERY {
                    samples = (Some(samples.1), (Instant::now(), src.shared.total()));
                }
                if poller.wait(Some(STOP_POLL)).is_err() {
                    std::thread::sleep(STOP_POLL);
                }
                loop {
                    match l.accept() {
                        Ok((s, _)) => accept(s, &src, &samples.1, &stop, &active),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            // E.g. out of descriptors: wait instead of spinning.
                            std::thread::sleep(STOP_POLL);
                            break;
                        }
                    }
                }
            }
            let _ = std::fs::remove_file(&path);
        })
        .map_err(io)
}

/// Hands a client to a thread of its own, or tells it "busy" at once when
/// [`MAX_CLIENTS`] are being served.
fn accept(
    s: UnixStream,
    src: &Arc<Source>,
    last: &(Instant, WorkerSnapshot),
    stop: &Arc<AtomicBool>,
    active: &Arc<AtomicUsize>,
) {
    if active.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
        active.fetch_sub(1, Ordering::AcqRel);
        // One non-blocking attempt, never a wait.
        if s.set_nonblocking(true).is_ok() {
            let busy = format!("busy: {MAX_CLIENTS} clients are being served; try again");
            let _ = (&s).write_all(serde_json::json!({ "error": busy }).to_string().as_bytes());
        }
        return;
    }
    let (src, last, stop, slot) = (src.clone(), last.clone(), stop.clone(), Slot(active.clone()));
    // If the thread cannot start, the closure is dropped: the connection
    // closes and the place is given back.
    let _ = std::thread::Builder::new().name("px-control-conn".into()).spawn(move || {
        let _slot = slot;
        answer(s, &src, &last, &stop);
    });
}

/// One of the [`MAX_CLIENTS`] places, given back on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The id of group `name`, if it exists.
pub fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: a zeroed `group` is valid for getgrnam_r to fill.
    let mut g: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is live for the call; `buf` is as long as said.
    let r = unsafe { libc::getgrnam_r(c.as_ptr(), &mut g, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    (r == 0 && !out.is_null()).then_some(g.gr_gid)
}

/// Makes the socket at `path` mode 0660 and, if asked, of group `gid`,
/// acting on the socket itself: `path` is opened without following a
/// symlink (`O_PATH | O_NOFOLLOW`), must be a socket owned by this
/// process's user, and is changed through that descriptor.
pub fn restrict(path: &Path, gid: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `c` is a valid C string; the descriptor is owned at once.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed `stat` is valid for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a live descriptor and a live `stat`.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: geteuid has no preconditions.
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK || st.st_uid != unsafe { libc::geteuid() } {
        return Err(std::io::Error::other(format!("{} is not this process's socket", path.display())));
    }
    if let Some(gid) = gid {
        // SAFETY: fchownat on a live descriptor with an empty path.
        let r = unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), u32::MAX, gid, libc::AT_EMPTY_PATH) };
        // Not allowed (a user outside the group): the gateway's own group.
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
            return Err(std::io::Error::last_os_error());
        }
    }
    // An O_PATH descriptor takes no fchmod; its /proc link changes the
    // file it was opened on, not whatever the path names now.
    std::fs::set_permissions(format!("/proc/self/fd/{}", fd.as_raw_fd()), std::fs::Permissions::from_mode(0o660))
}

/// One client: read its request, build the status, write it.
fn answer(mut s: UnixStream, src: &Source, last: &(Instant, WorkerSnapshot), stop: &AtomicBool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(REQUEST_DEADLINE));
    let _ = s.set_write_timeout(Some(CLIENT_DEADLINE));
    let mut line = String::new();
    let read = BufReader::new((&s).take(256)).read_line(&mut line);
    if read.is_err() || line.trim() != REQUEST {
        let _ = s.write_all(
            serde_json::json!({ "error": format!("unknown request {:?}; the one request is {REQUEST:?}", line.trim()) })
                .to_string()
                .as_bytes(),
        );
        return;
    }
    let status = status(src, last, stop);
    let _ = s.write_all(serde_json::to_string(&status).unwrap_or_default().as_bytes());
}

/// The status now: asks the workers for their largest flows and waits
/// (at most [`FLOWS_WAIT`]) until each has listed them.
fn status(src: &Source, last: &(Instant, WorkerSnapshot), stop: &AtomicBool) -> Status {
    let want = src.shared.process.flows_wanted.fetch_add(1, Ordering::Relaxed) + 1;
    let t0 = Instant::now();
    let mut scrape = src.shared.scrape();
    while scrape.workers.iter().any(|w| w.flows_answered < want)
        && t0.elapsed() < FLOWS_WAIT
        && !stop.load(Ordering::Relaxed)
    {
        std::thread::sleep(Duration::from_millis(20));
        scrape = src.shared.scrape();
    }
    let mut cfg = src.config.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let reloads = |r: ReloadResult| src.shared.process.reloads[r as usize].load(Ordering::Relaxed);
    cfg.generation = reloads(ReloadResult::Applied);
    cfg.reloads_refused = reloads(ReloadResult::Refused);
    cfg.reloads_invalid = reloads(ReloadResult::Invalid);
    let now = Instant::now();
    Status::build(
        &src.id,
        &cfg,
        src.started.elapsed(),
        &scrape,
        Some((&last.1, last.0.elapsed())),
        src.pmtu.learned(now),
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_stale_socket_file_is_not_a_running_gateway() {
        let dir = std::env::temp_dir().join(format!("px-control-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (stale, live) = (dir.join("a.sock"), dir.join("b.sock"));
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let _l = std::os::unix::net::UnixListener::bind(&live).unwrap();
        assert!(stale.exists(), "the file stays behind its listener");
        assert_eq!(listening(vec![stale.clone(), live.clone()]), vec![live.clone()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    use super::*;

    fn source(shared: Shared) -> Source {
        Source {
            id: Identity { version: "t".into(), pid: 1, outer: ("o".into(), 1500), inner: ("i".into(), 9000) },
            config: Arc::new(Mutex::new(ConfigStatus {
                generation: 0,
                reloads_refused: 0,
                reloads_invalid: 0,
                workers: 1,
                gro_gso: true,
                offload: "off".into(),
                merge_timeout_us: 500,
                icmp_source_v4: None,
                icmp_source_v6: None,
                metrics: None,
            })),
            shared,
            pmtu: SharedPmtu::new(16, Duration::from_secs(600)),
            started: Instant::now(),
        }
    }

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("px-control-{}-{name}.sock", std::process::id()))
    }

    /// A client gets the status (flows listed by a "worker" that answers
    /// the request), a second server on a live socket is refused, the
    /// socket is mode 0660, and it is removed when the server stops.
    #[test]
    fn answers_status_refuses_a_second_server_and_cleans_up() {
        let path = temp("serve");
        let shared = Shared::new(1);
        let stop = Arc::new(AtomicBool::new(false));
        let h = serve(&path, source(shared.clone()), stop.clone()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        assert!(matches!(serve(&path, source(shared.clone()), stop.clone()), Err(ControlError::InUse(_))));
        // A worker: answers flow requests as it publishes.
        let worker_stop = Arc::new(AtomicBool::new(false));
        let w = {
            let (shared, ws) = (shared.clone(), worker_stop.clone());
            std::thread::spawn(move || {
                while !ws.load(Ordering::Relaxed) {
                    let want = shared.process.flows_wanted.load(Ordering::Relaxed);
                    let mut s = WorkerSnapshot { flows: 7, flows_answered: want, ..Default::default() };
                    s.wire[px_gateway::Port::Outer as usize].rx_packets = 12;
                    shared.publish(0, s);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        let st = query(&path).unwrap();
        assert_eq!(st.engine.flows, 7);
        assert_eq!(st.ports[0].wire.rx_packets, 12);
        assert_eq!(st.ports[1].mtu, 9000);
        // Anything but the request gets an error object.
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"shutdown\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(text.contains("unknown request \\\"shutdown\\\""), "{text}");
        worker_stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        assert!(!path.exists(), "socket left behind");
        assert!(matches!(query(&path), Err(ControlError::Io { .. })));
    }

    /// A stale socket file (its gateway died) is replaced.
    #[test]
    fn a_stale_socket_is_replaced() {
        let path = temp("stale");
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let stop = Arc::new(AtomicBool::new(false));
        let h = serve(&path, source(Shared::new(0)), stop.clone()).unwrap();
        assert!(query(&path).is_ok());
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// A worker that answers flow requests as it publishes, until dropped.
    struct Worker(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

    impl Worker {
        fn start(shared: &Shared) -> Worker {
            let stop = Arc::new(AtomicBool::new(false));
            let (shared, ws) = (shared.clone(), stop.clone());
            let h = std::thread::spawn(move || {
                while !ws.load(Ordering::Relaxed) {
                    let want = shared.process.flows_wanted.load(Ordering::Relaxed);
                    shared.publish(0, WorkerSnapshot { flows: 3, flows_answered: want, ..Default::default() });
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
            Worker(stop, Some(h))
        }
    }

    impl Drop for Worker {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
            if let Some(h) = self.1.take() {
                let _ = h.join();
            }
        }
    }

    /// Issue 35 item 6: local clients that connect and say nothing do not
    /// keep `px status` from its answer (before: served one at a time, 2 s
    /// each, three idle clients made it fail); past the bound, a client is
    /// told at once that the gateway is busy.
    #[test]
    fn idle_clients_do_not_hold_up_status() {
        let path = temp("idle");
        let shared = Shared::new(1);
        let stop = Arc::new(AtomicBool::new(false));
        let h = serve(&path, source(shared.clone()), stop.clone()).unwrap();
        let _w = Worker::start(&shared);
        let idle: Vec<UnixStream> = (0..3).map(|_| UnixStream::connect(&path).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(50));
        let t0 = Instant::now();
        let st = query(&path).expect("px status behind three idle clients");
        assert_eq!(st.engine.flows, 3);
        assert!(t0.elapsed() < Duration::from_millis(1500), "took {:?}", t0.elapsed());
        // One more idle client fills the places: the next is told at once.
        let more = UnixStream::connect(&path).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let t0 = Instant::now();
        let e = query(&path).unwrap_err();
        assert!(e.to_string().contains("busy"), "{e}");
        assert!(t0.elapsed() < Duration::from_millis(500), "the busy answer took {:?}", t0.elapsed());
        drop((idle, more));
        let t0 = Instant::now();
        while query(&path).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(5), "not served again after the idle clients left");
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// Issue 35 item 6: the socket's mode is set without following a
    /// symlink (a path replaced by a link to another file does not make
    /// that file group-writable), and its group is the one asked.
    #[test]
    fn the_socket_is_restricted_without_following_a_symlink() {
        let dir = std::env::temp_dir().join(format!("px-control-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, "x").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.join("link.sock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(restrict(&link, None).is_err(), "a symlink was followed");
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        // A real socket: 0660, the group asked.
        let sock = dir.join("s.sock");
        let _l = UnixListener::bind(&sock).unwrap();
        // Another group than this process's own (as root, any group may
        // be given), else its own.
        // SAFETY: getegid and geteuid have no preconditions.
        let own = unsafe { libc::getegid() };
        let other = group_id("daemon").or(group_id("nogroup")).filter(|_| unsafe { libc::geteuid() } == 0);
        let gid = other.unwrap_or(own);
        restrict(&sock, Some(gid)).unwrap();
        let m = std::fs::symlink_metadata(&sock).unwrap();
        assert_eq!((m.permissions().mode() & 0o777, m.gid()), (0o660, gid));
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("px-no-such-group"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
