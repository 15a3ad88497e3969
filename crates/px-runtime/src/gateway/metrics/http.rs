//! The metrics endpoint: `GET /metrics` (or `GET /`) answered with the
//! Prometheus text of a fresh scrape, anything else with 404.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::render::render;
use super::snapshot::Shared;

/// Serves `GET /metrics` on `addr` until `stop` is set.
pub fn serve(addr: SocketAddr, shared: Shared, stop: Arc<AtomicBool>) -> std::io::Result<std::thread::JoinHandle<()>> {
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("px-metrics".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut reader = BufReader::new(&stream);
                    let mut line = String::new();
                    let _ = reader.read_line(&mut line);
                    // Skip the request headers.
                    let mut h = String::new();
                    while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                        h.clear();
                    }
                    let (status, body) = if line.starts_with("GET /metrics") || line.starts_with("GET / ") {
                        ("200 OK", render(&shared))
                    } else {
                        ("404 Not Found", "try /metrics\n".to_string())
                    };
                    let mut w = &stream;
                    let _ = write!(
                        w,
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
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
}
