//! The control socket: a local unix stream socket on which a running
//! gateway answers `px status` with its [`Status`] as one JSON document.
//!
//! Where: the `control_socket` key, by default [`default_path`] in the
//! lock directory (`/run/px`, or systemd's `$RUNTIME_DIRECTORY`), named
//! after the network namespace and the two ports, so that `px status` run
//! in the gateway's namespace finds it alone ([`find`]). Who: the socket is
//! made mode 0660, so the gateway's user and group (the package's `px`)
//! and root may ask; like the metrics endpoint it only reads.
//!
//! The protocol is one request line (`status`), one JSON answer, then the
//! gateway closes. Bounded like the metrics endpoint: one client at a
//! time, 256 bytes of request, 2 s deadlines, and a thread that ends
//! within 100 ms of the stop flag without waiting for a client.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use px_gateway::SharedPmtu;

use super::metrics::{ReloadResult, Shared, WorkerSnapshot};
use super::status::{ConfigStatus, Identity, Status};

/// The one request the socket answers.
pub const REQUEST: &str = "status";
/// How long a client may take to send its request or read the answer.
const CLIENT_DEADLINE: Duration = Duration::from_secs(2);
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
    s.write_all(format!("{REQUEST}\n").as_bytes()).map_err(io)?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(io)?;
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
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(io)?;
    l.set_nonblocking(true).map_err(io)?;
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("px-control".into())
        .spawn(move || {
            let mut samples: (Option<(Instant, WorkerSnapshot)>, (Instant, WorkerSnapshot)) =
                (None, (Instant::now(), WorkerSnapshot::default()));
            while !stop.load(Ordering::Relaxed) {
                if samples.1.0.elapsed() >= SAMPLE_EVERY {
                    samples = (Some(samples.1), (Instant::now(), src.shared.total()));
                }
                match l.accept() {
                    Ok((s, _)) => answer(s, &src, &samples.1, &stop),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
            let _ = std::fs::remove_file(&path);
        })
        .map_err(io)
}

/// One client: read its request, build the status, write it.
fn answer(mut s: UnixStream, src: &Source, last: &(Instant, WorkerSnapshot), stop: &AtomicBool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(CLIENT_DEADLINE));
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
}
