//! The metrics endpoint: `GET /metrics` (or `GET /`) answered with the
//! Prometheus text of a fresh scrape, anything else with 404.
//!
//! What it guarantees, whatever the clients do:
//! - memory: a request's line and headers are read into at most
//!   [`MAX_REQUEST`] bytes; a longer one is answered 431 and closed;
//! - time: a client has [`REQUEST_TIME`] to send its request and its
//!   answer [`WRITE_TIME`] to leave; then the connection is closed;
//! - one slow client does not hold up the others: each connection is
//!   served on its own short-lived thread, at most [`MAX_CLIENTS`] at a
//!   time (one more is answered 503 without waiting);
//! - stopping never waits for a client: the accepting thread looks at the
//!   stop flag every [`STOP_POLL`] and is the only one [`serve`] returns;
//!   the connection threads end by their own deadlines.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use px_io::Poller;

use super::render::render;
use super::snapshot::Shared;

/// Most bytes of a request line and headers read before the request is refused.
const MAX_REQUEST: usize = 8 * 1024;
/// How long a client has to send its request line and headers.
const REQUEST_TIME: Duration = Duration::from_secs(2);
/// How long an answer has to leave.
const WRITE_TIME: Duration = Duration::from_secs(2);
/// Connections served at the same time.
const MAX_CLIENTS: usize = 4;
/// How often the accepting thread looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

/// Serves `GET /metrics` on `addr` until `stop` is set. The thread it
/// returns ends within 50 ms of `stop`, whatever the clients do.
pub fn serve(addr: SocketAddr, shared: Shared, stop: Arc<AtomicBool>) -> io::Result<std::thread::JoinHandle<()>> {
    serve_on(TcpListener::bind(addr)?, shared, stop)
}

/// [`serve`] on a bound listener.
fn serve_on(listener: TcpListener, shared: Shared, stop: Arc<AtomicBool>) -> io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("px-metrics".into()).spawn(move || {
        let active = Arc::new(AtomicUsize::new(0));
        let mut poller = Poller::new();
        poller.add(listener.as_fd());
        while !stop.load(Ordering::Relaxed) {
            if poller.wait(Some(STOP_POLL)).is_err() {
                std::thread::sleep(STOP_POLL);
            }
            loop {
                match listener.accept() {
                    Ok((stream, _)) => accept(stream, &shared, &active),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        // E.g. out of descriptors: the listener stays
                        // readable, so wait instead of spinning.
                        std::thread::sleep(STOP_POLL);
                        break;
                    }
                }
            }
        }
    })
}

/// Hands a new connection to a thread of its own, or answers 503 when
/// [`MAX_CLIENTS`] are being served.
fn accept(stream: TcpStream, shared: &Shared, active: &Arc<AtomicUsize>) {
    if active.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
        active.fetch_sub(1, Ordering::AcqRel);
        // One non-blocking attempt, never a wait.
        if stream.set_nonblocking(true).is_ok() {
            let _ = respond(&mut &stream, "503 Service Unavailable", "busy, try again\n");
        }
        return;
    }
    let (shared, slot) = (shared.clone(), Slot(active.clone()));
    // If the thread cannot start, the closure (stream and slot) is dropped:
    // the connection closes and the place is given back.
    let _ = std::thread::Builder::new().name("px-metrics-conn".into()).spawn(move || {
        let _slot = slot;
        serve_client(&stream, &shared);
    });
}

/// One of the [`MAX_CLIENTS`] places, given back on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads one request and answers it, within the deadlines.
fn serve_client(stream: &TcpStream, shared: &Shared) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let mut reader = Deadline { stream, at: Instant::now() + REQUEST_TIME };
    let (status, body) = match read_request(&mut reader, MAX_REQUEST) {
        Ok(line) if line.starts_with("GET /metrics") || line.starts_with("GET / ") => ("200 OK", render(shared)),
        Ok(_) => ("404 Not Found", "try /metrics\n".to_string()),
        Err(RequestError::TooLarge) => {
            ("431 Request Header Fields Too Large", format!("request line and headers over {MAX_REQUEST} bytes\n"))
        }
        Err(RequestError::Incomplete) => return,
    };
    let _ = respond(&mut Deadline { stream, at: Instant::now() + WRITE_TIME }, status, &body);
}

/// Writes the whole answer with as few system calls as the socket takes
/// (one, unless its buffer fills).
fn respond(w: &mut impl Write, status: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    w.write_all(&[head.as_bytes(), body.as_bytes()].concat())
}

/// A blocking stream read or written until a deadline: each call waits
/// at most for what is left of it, so a client that sends or reads a byte
/// now and then cannot stretch it.
struct Deadline<'a> {
    stream: &'a TcpStream,
    at: Instant,
}

impl Deadline<'_> {
    fn left(&self) -> io::Result<Duration> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() { Err(io::ErrorKind::TimedOut.into()) } else { Ok(left) }
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        (&mut &*self.stream).read(buf)
    }
}

impl Write for Deadline<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        (&mut &*self.stream).write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why no request was read.
#[derive(Debug, PartialEq, Eq)]
enum RequestError {
    /// The line and headers did not end within the byte bound (answered 431).
    TooLarge,
    /// The client closed, failed or ran out of time before it sent a
    /// whole request line (closed without an answer).
    Incomplete,
}

/// Reads a request's line and headers, up to the empty line that ends
/// them, holding at most `max` bytes, and returns the request line. A
/// client that closes or times out after a whole request line still gets
/// its answer (as `echo 'GET /metrics' | nc` expects).
fn read_request(r: &mut impl Read, max: usize) -> Result<String, RequestError> {
    let mut head = Vec::with_capacity(max.min(1024));
    let mut chunk = [0u8; 1024];
    loop {
        if head.len() >= max {
            return Err(RequestError::TooLarge);
        }
        let room = (max - head.len()).min(chunk.len());
        match r.read(&mut chunk[..room]) {
            Ok(0) => break,
            Ok(n) => {
                // The end may straddle two reads: look from 3 bytes back.
                let from = head.len().saturating_sub(3);
                head.extend_from_slice(&chunk[..n]);
                let tail = &head[from..];
                if tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n") {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    match head.iter().position(|&b| b == b'\n') {
        Some(end) => Ok(String::from_utf8_lossy(&head[..end]).trim_end().to_string()),
        None => Err(RequestError::Incomplete),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read};
    use std::net::TcpStream;
    use std::time::Instant;

    use super::*;

    #[test]
    fn serves_metrics_over_http() {
        let sh = Shared::new(1);
        let stop = Arc::new(AtomicBool::new(false));
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let h = serve(addr, sh, stop.clone()).unwrap();
        let mut body = String::new();
        for _ in 0..50 {
            if let Ok(mut s) = std::net::TcpStream::connect(addr) {
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                std::io::Read::read_to_string(&mut s, &mut body).unwrap();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        assert!(body.contains("px_gateway_conversion_yield"));
    }

    /// A server on a free 127.0.0.1 port, with its stop flag.
    fn start() -> (SocketAddr, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
        let stop = Arc::new(AtomicBool::new(false));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let h = serve_on(listener, Shared::new(1), stop.clone()).unwrap();
        (addr, stop, h)
    }

    /// A reader of `n` bytes of `a` (no newline) that counts what it gave.
    struct Flood {
        left: usize,
        given: usize,
    }

    impl Read for Flood {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.left);
            buf[..n].fill(b'a');
            (self.left, self.given) = (self.left - n, self.given + n);
            Ok(n)
        }
    }

    /// 1 MB without a newline: refused after at most the bound, which is
    /// all the memory it took.
    #[test]
    fn the_request_reader_stops_at_the_bound() {
        let mut flood = Flood { left: 1 << 20, given: 0 };
        assert_eq!(read_request(&mut flood, MAX_REQUEST), Err(RequestError::TooLarge));
        assert!(flood.given <= MAX_REQUEST, "read {} bytes", flood.given);
        // Headers that end exactly at the bound are not too large.
        let mut req = b"GET /metrics HTTP/1.1\r\n".to_vec();
        req.resize(MAX_REQUEST - 4, b'h');
        req.extend_from_slice(b"\r\n\r\n");
        assert_eq!(read_request(&mut &req[..], MAX_REQUEST).unwrap(), "GET /metrics HTTP/1.1");
    }

    #[test]
    fn the_request_reader_takes_what_clients_send() {
        let read = |b: &[u8]| read_request(&mut &b[..], MAX_REQUEST);
        assert_eq!(read(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap(), "GET /metrics HTTP/1.1");
        // A bare line and the end of input (`echo 'GET /metrics' | nc`).
        assert_eq!(read(b"GET /metrics\n").unwrap(), "GET /metrics");
        assert_eq!(read(b"GET / HTTP/1.0\n\n").unwrap(), "GET / HTTP/1.0");
        assert_eq!(read(b""), Err(RequestError::Incomplete));
        assert_eq!(read(b"GET /metr"), Err(RequestError::Incomplete));
    }

    /// With every place taken by a stalled client, one more is told 503 at
    /// once; when they leave, scrapes are served again.
    #[test]
    fn past_the_client_bound_a_client_is_told_busy_at_once() {
        let (addr, stop, h) = start();
        let _ = scrape(addr);
        let stalled: Vec<TcpStream> = (0..MAX_CLIENTS).map(|_| connect(addr)).collect();
        std::thread::sleep(Duration::from_millis(50));
        let (body, took) = scrape(addr);
        assert!(body.starts_with("HTTP/1.1 503"), "{body}");
        assert!(took < Duration::from_millis(500), "the busy answer took {took:?}");
        drop(stalled);
        let mut ok = false;
        for _ in 0..50 {
            if scrape(addr).0.starts_with("HTTP/1.1 200 OK") {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(ok, "no scrape served after the stalled clients left");
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// Connects, retrying while the server thread starts.
    fn connect(addr: SocketAddr) -> TcpStream {
        for _ in 0..50 {
            if let Ok(s) = TcpStream::connect(addr) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("cannot connect to {addr}");
    }

    /// One scrape; what came back and how long it took.
    fn scrape(addr: SocketAddr) -> (String, Duration) {
        let t0 = Instant::now();
        let mut s = connect(addr);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        (body, t0.elapsed())
    }

    /// 1 MB without a newline: refused once the request passes the
    /// bound (431), the connection closed, well before the client is done.
    #[test]
    fn an_endless_request_line_is_refused_and_closed() {
        let (addr, stop, h) = start();
        let mut s = connect(addr);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let writer = s.try_clone().unwrap();
        let t0 = Instant::now();
        let flood = std::thread::spawn(move || {
            let mut w = writer;
            let chunk = [b'a'; 64 * 1024];
            for _ in 0..16 {
                if w.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        let mut got = Vec::new();
        let end = s.read_to_end(&mut got);
        let took = t0.elapsed();
        let text = String::from_utf8_lossy(&got);
        eprintln!("after {took:?}: {end:?} {:?}", text.lines().next());
        // Closed with the error status, or reset because the server closed
        // with the rest of the flood unread: either way, not read on.
        assert!(
            text.starts_with("HTTP/1.1 431")
                || end.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{end:?} {text:?}"
        );
        assert!(took < Duration::from_secs(1), "closed after {took:?}");
        let _ = flood.join();
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// A client that connects and sends nothing does not hold up a scrape.
    #[test]
    fn a_stalled_client_does_not_delay_a_scrape() {
        let (addr, stop, h) = start();
        let _ = scrape(addr); // the server is up
        let _stalled = connect(addr);
        std::thread::sleep(Duration::from_millis(20));
        let (body, took) = scrape(addr);
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        eprintln!("a scrape beside a stalled client took {took:?}");
        assert!(took < Duration::from_millis(150), "a scrape beside a stalled client took {took:?}");
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// A client that trickles its request a byte at a time is cut off at
    /// the request deadline, not kept while it keeps sending.
    #[test]
    fn a_trickling_client_is_cut_off_at_the_deadline() {
        let (addr, stop, h) = start();
        let mut s = connect(addr);
        let mut w = s.try_clone().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let trickle = {
            let done = done.clone();
            std::thread::spawn(move || {
                let _ = w.write_all(b"GET /metrics HTTP/1.1\r\n");
                while !done.load(Ordering::Relaxed) && w.write_all(b"X").is_ok() {
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let t0 = Instant::now();
        s.set_read_timeout(Some(REQUEST_TIME + Duration::from_secs(2))).unwrap();
        let mut got = Vec::new();
        let end = s.read_to_end(&mut got);
        let took = t0.elapsed();
        done.store(true, Ordering::Relaxed);
        trickle.join().unwrap();
        // Closed (EOF or reset), not timed out on our side, and in time.
        let timed_out = end.as_ref().is_err_and(|e| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut));
        assert!(!timed_out && took < REQUEST_TIME + Duration::from_millis(500), "{end:?} after {took:?}");
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// Stop returns promptly while a client trickles a byte at a time
    /// (never finishing its request).
    #[test]
    fn stop_does_not_wait_for_a_trickling_client() {
        let (addr, stop, h) = start();
        let _ = scrape(addr);
        let mut s = connect(addr);
        let done = Arc::new(AtomicBool::new(false));
        let trickle = {
            let done = done.clone();
            std::thread::spawn(move || {
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
                while !done.load(Ordering::Relaxed) {
                    if s.write_all(b"X").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        stop.store(true, Ordering::Relaxed);
        // Joined on a helper thread, so that a server that does wait for
        // the client fails this test instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(h.join().is_ok()).unwrap());
        let joined = rx.recv_timeout(Duration::from_secs(1));
        let took = t0.elapsed();
        done.store(true, Ordering::Relaxed);
        trickle.join().unwrap();
        assert_eq!(joined, Ok(true), "stop did not return within 1 s with a client trickling");
        assert!(took < Duration::from_millis(300), "stop took {took:?} with a client trickling");
    }
}
