//! A transport's start from one F-PMTUD measurement, in simulated time:
//! an [`FpmtudSession`] against the sans-I/O responder over a path of
//! routers (IPv4 fragmentation by `fpmtud::fragment::traverse`), then
//! [`TransportStart`] gives the UDP payload a QUIC stack starts at and
//! the ceiling of its own search.
//!
//! ```text
//! cargo run -p px-pmtud --example transport_start -- 9000 1500 1400
//! ```
//! (link MTUs from the prober's outward; default `9000 9000`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use px_pmtud::fpmtud::fragment::traverse;
use px_pmtud::fpmtud::responder::{Arrival, Pieces, Responder, ResponderConfig};
use px_pmtud::session::{Df, FpmtudSession, Session, SessionConfig};
use px_pmtud::transport::{QUIC_MIN_PAYLOAD, TransportStart};

const ONE_WAY: Duration = Duration::from_millis(1);

fn main() -> Result<(), String> {
    let hops = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u16>().map_err(|e| format!("link MTU `{a}`: {e}")))
        .collect::<Result<Vec<u16>, String>>()?;
    let hops = if hops.is_empty() { vec![9000, 9000] } else { hops };
    let link_mtu = hops[0];
    let start = Instant::now();
    let cfg = SessionConfig::new(link_mtu, false);
    let mut session = FpmtudSession::new(&cfg, 0x5eed, false, start).map_err(|e| e.to_string())?;
    let last = *hops.last().unwrap_or(&link_mtu);
    let mut responder = Responder::new(ResponderConfig { link_mtu: last, ..ResponderConfig::default() });
    let from: SocketAddr = "198.51.100.1:40000".parse().map_err(|e| format!("{e}"))?;
    let mut now = start;
    let outcome = loop {
        session.handle_timeout(now);
        let mut replies = Vec::new();
        while let Some(probe) = session.poll_transmit(now) {
            // Df::Clear may be fragmented by the routers; DF-set probes that are too big vanish.
            let Some(frags) = traverse(probe.size, probe.df != Df::Clear, &hops) else { continue };
            let pieces = if frags.len() == 1 {
                Pieces::Whole { ip_len: probe.size }
            } else {
                Pieces::Fragments { records: &frags, reassembled: true }
            };
            responder.handle_arrival(now + ONE_WAY, &Arrival { source: from, payload: &probe.payload, pieces });
            while let Some(reply) = responder.poll_transmit() {
                replies.push(reply.payload);
            }
        }
        if let Some(m) = session.outcome() {
            break m.clone();
        }
        // Replies come back one round trip later; otherwise wait for the session's timer.
        let next = if replies.is_empty() { session.poll_timeout().unwrap_or(now + ONE_WAY) } else { now + 2 * ONE_WAY };
        now = next.max(now);
        for r in replies {
            session.on_datagram(now, &r);
        }
    };
    println!(
        "path {hops:?}: path MTU {:?} (exact: {}, up to {:?}) in {} round trip(s), {:?} simulated",
        outcome.pmtu, outcome.exact, outcome.pmtu_high, outcome.round_trips, outcome.elapsed
    );
    match TransportStart::from_measurement(&outcome, false, QUIC_MIN_PAYLOAD) {
        Some(s) => println!(
            "QUIC start: initial UDP payload {} B, own search up to {} B, confirmed: {}",
            s.initial_payload, s.search_ceiling, s.confirmed
        ),
        None => println!("QUIC start: nothing usable; keep the default {QUIC_MIN_PAYLOAD} B and search"),
    }
    Ok(())
}
