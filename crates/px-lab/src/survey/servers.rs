//! The lab's HTTP servers: a thread per port, a thread per connection,
//! each answer naming its target (so that a fingerprint from another
//! target cannot match).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use px_netns::{Netns, NetnsGuard};

use super::truth::PORTS;
use crate::RunError;

/// Body bytes of every answer (more than one 1500-byte packet, for PMTUD).
pub const BODY: usize = 6000;

/// connection; stopped and joined on drop.
pub(super) struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Servers {
    pub(super) fn start(ns: &Netns) -> Result<Servers, RunError> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for port in PORTS {
            let listener = ns
                .run(|| {
                    let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))?;
                    l.set_nonblocking(true)?;
                    Ok::<_, std::io::Error>(l)
                })?
                .map_err(|e| format!("HTTP server on port {port}: {e}"))?;
            let (stop, name) = (stop.clone(), ns.name().to_string());
            threads.push(std::thread::spawn(move || {
                // Connections' threads are created from here: they must be
                // in the namespace too (setns is per thread, inherited).
                let Ok(_g) = NetnsGuard::enter(&name) else { return };
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            std::thread::spawn(move || answer(s));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            }));
        }
        Ok(Servers { stop, threads })
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The answer of a lab server: its address and port in every line of a
/// 6000-byte body (so that every target's fingerprint differs).
pub fn body_for(local: SocketAddr) -> Vec<u8> {
    let line = format!("px lab survey: this is {local}\n");
    line.bytes().cycle().take(BODY).collect()
}

fn answer(mut s: TcpStream) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut req = Vec::new();
    let mut buf = [0u8; 2048];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 << 10 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let Ok(local) = s.local_addr() else { return };
    let body = body_for(local);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(&body));
    let _ = s.shutdown(std::net::Shutdown::Write);
    // Until the client's RST or FIN.
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
}
