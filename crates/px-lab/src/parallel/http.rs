//! A small HTTP/1.1 file server for `px lab parallel`: one file of a given
//! size (deterministic bytes, served from memory), `GET` and `HEAD`, byte
//! ranges (`Range: bytes=a-b`, `a-`), one request per connection. Enough
//! for a parallel range downloader (axel) and cheap enough that the
//! kernel's TCP work, not the server's parsing, dominates its CPU.
//!
//! Every thread (the acceptor and one per connection) is pinned to one
//! CPU and adds its own CPU time (`getrusage(RUSAGE_THREAD)`) to the
//! server's total when it ends, so [`HttpServer::stop`] returns the
//! server's process-context CPU seconds. The listening socket is opened
//! inside the namespace; threads stop on [`HttpServer::stop`] or drop.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use px_netns::netns::Netns;

/// The path the file is served at.
pub const PATH: &str = "/file";

/// A running server.
#[derive(Debug)]
pub struct HttpServer {
    stop: Arc<AtomicBool>,
    cpu_us: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    acceptor: Option<JoinHandle<()>>,
}

fn thread_cpu_us() -> u64 {
    (px_netns::cpu::thread_cpu_seconds() * 1e6) as u64
}

/// `(first, last)` of a `Range: bytes=` header value within `size`.
fn parse_range(v: &str, size: u64) -> Option<(u64, u64)> {
    let spec = v.trim().strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let first: u64 = a.trim().parse().ok()?;
    let last = if b.trim().is_empty() { size.checked_sub(1)? } else { b.trim().parse::<u64>().ok()?.min(size - 1) };
    (first <= last && last < size).then_some((first, last))
}

/// Sets the socket's congestion control (`TCP_CONGESTION`; a privileged
/// socket may use any the kernel has, not only the namespace's allowed ones).
pub fn set_congestion(s: &impl AsRawFd, cc: &str) -> std::io::Result<()> {
    // SAFETY: the name points to cc.len() live bytes.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            cc.as_ptr().cast(),
            cc.len() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Serves one request on `s`; returns the body bytes sent.
fn serve(s: TcpStream, size: u64, body: &[u8]) -> std::io::Result<u64> {
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut it = line.split_whitespace();
    let (method, path) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
    let mut range = None;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("range")
        {
            range = parse_range(v, size);
        }
    }
    let mut w = s;
    if path != PATH || !(method == "GET" || method == "HEAD") {
        w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        return Ok(0);
    }
    let (first, last) = range.unwrap_or((0, size.saturating_sub(1)));
    let len = if size == 0 { 0 } else { last - first + 1 };
    let head = match range {
        Some(_) => format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Length: {len}\r\nContent-Range: bytes {first}-{last}/{size}\r\n\
             Accept-Ranges: bytes\r\nConnection: close\r\n\r\n"
        ),
        None => {
            format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n")
        }
    };
    w.write_all(head.as_bytes())?;
    if method == "HEAD" {
        return Ok(0);
    }
    let mut off = first;
    while off <= last && len > 0 {
        let start = (off % body.len() as u64) as usize;
        let n = (body.len() - start).min((last - off + 1) as usize);
        w.write_all(&body[start..start + n])?;
        off += n as u64;
    }
    Ok(len)
}

impl HttpServer {
    /// Serves a file of `size` bytes at `addr` (inside `ns`), every thread
    /// pinned to `cpu`, every connection with congestion control `cc`.
    pub fn start(ns: &Netns, addr: SocketAddr, size: u64, cpu: usize, cc: &str) -> Result<HttpServer, String> {
        let listener =
            ns.run(|| TcpListener::bind(addr)).map_err(|e| e.to_string())?.map_err(|e| format!("bind {addr}: {e}"))?;
        // A blocking accept that wakes every 50 ms to look at the stop flag.
        px_netns::traffic::set_accept_timeout(&listener, Duration::from_millis(50)).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let cpu_us = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let body: Arc<[u8]> = (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let (st, cu, by) = (Arc::clone(&stop), Arc::clone(&cpu_us), Arc::clone(&bytes));
        let cc = cc.to_owned();
        let acceptor = std::thread::Builder::new()
            .name("px-http".into())
            .spawn(move || {
                let _ = px_netns::cpu::pin_current_thread(cpu);
                let mut conns = Vec::new();
                while !st.load(Ordering::Relaxed) {
                    // An error is the 50 ms timeout: look at the stop flag again.
                    if let Ok((s, _)) = listener.accept() {
                        // Checked on the listener in `start`; a failure here would be the same.
                        let _ = set_congestion(&s, &cc);
                        let (cu, by, body) = (Arc::clone(&cu), Arc::clone(&by), Arc::clone(&body));
                        conns.push(std::thread::spawn(move || {
                            let _ = px_netns::cpu::pin_current_thread(cpu);
                            let n = serve(s, size, &body).unwrap_or(0);
                            by.fetch_add(n, Ordering::Relaxed);
                            cu.fetch_add(thread_cpu_us(), Ordering::Relaxed);
                        }));
                    }
                    conns.retain(|c: &JoinHandle<()>| !c.is_finished());
                }
                for c in conns {
                    let _ = c.join();
                }
                cu.fetch_add(thread_cpu_us(), Ordering::Relaxed);
            })
            .map_err(|e| e.to_string())?;
        Ok(HttpServer { stop, cpu_us, bytes, acceptor: Some(acceptor) })
    }

    /// CPU seconds of the connection threads that ended so far.
    pub fn cpu_seconds(&self) -> f64 {
        self.cpu_us.load(Ordering::Relaxed) as f64 / 1e6
    }

    /// Body bytes served so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Stops accepting, waits for the connections and returns the CPU
    /// seconds of all threads and the body bytes served.
    pub fn stop(mut self) -> (f64, u64) {
        self.shutdown();
        (self.cpu_seconds(), self.bytes())
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-99", 1000), Some((0, 99)));
        assert_eq!(parse_range(" bytes=500-", 1000), Some((500, 999)));
        assert_eq!(parse_range("bytes=900-5000", 1000), Some((900, 999)));
        assert_eq!(parse_range("bytes=1000-", 1000), None);
        assert_eq!(parse_range("bytes=5-1", 1000), None);
        assert_eq!(parse_range("items=0-1", 1000), None);
    }
}
