//! `px-pmtud`: sans-I/O path MTU discovery for PacketExpress.
//!
//! Nothing in this crate opens a socket or reads a clock: every method that
//! depends on time takes `now: std::time::Instant`, every packet goes out
//! through a `poll_*` method, and every deadline comes back from a
//! `poll_timeout()`. The same types run under the real tools (`px probe`,
//! `px fpmtud`) and under the deterministic simulator (`px sim`).
//!
//! # Modules
//!
//! * [`rtt`] — [`rtt::RttEstimator`] with [`rtt::ClassicRtt`] (RFC 9002 §5)
//!   and [`rtt::OncePerRtt`] (the "once per RTT" blog, PTO variants 4V, 3V,
//!   MaxRTT). Feed `on_packet_sent(pn)` and `on_ack(RttSample)`; read
//!   `smoothed_rtt()`, `rttvar()`, `pto(max_ack_delay)`.
//! * [`dplpmtud`] — [`dplpmtud::Dplpmtud`], the RFC 8899 state machine
//!   (DISABLED, BASE, SEARCHING, SEARCH_COMPLETE, ERROR). Loop:
//!   `enable()`; `poll_probe(now, &rtt) -> Option<u16>` (send a probe of
//!   that size); report `on_probe_acked(now, size)`, `on_probe_lost(now,
//!   size)`, `on_packet_too_big(now, size)`, `on_black_hole()`,
//!   `on_data_acked(size)` / `on_data_lost(size)`; fire
//!   `handle_timeout(now)` at `poll_timeout()`; read `plpmtu()`, `state()`,
//!   `poll_event()`.
//! * [`search`] — search strategies: [`search::SearchStrategy::Bisection`]
//!   and lsquic's maximum-first search ([`search::SearchStrategy::lsquic`] to
//!   99 %, [`search::SearchStrategy::lsquic_exact`] to the byte).
//! * [`blackhole`] — detection of "large packets lost while small ones get
//!   through" from data-packet ACKs and losses.
//! * [`fpmtud`] — F-PMTUD (paper §4.2):
//!   * [`fpmtud::wire`]: legacy (`FPMT` / 4-byte reply) and extended v1
//!     formats (see `docs/fpmtud.md`), parse/emit, never panics;
//!   * [`fpmtud::prober::Prober`]: `poll_transmit(now) -> Option<ProbeTransmit>`
//!     (send `payload` with IP length `ip_len`, DF per `dont_fragment`),
//!     `handle_reply(now, udp_payload)`, `handle_timeout(now)` at
//!     `poll_timeout()`, then `result()` → [`fpmtud::prober::FpmtudResult`]
//!     (`Exact`, `Estimate` or `Fallback` to DPLPMTUD with a lower bound);
//!   * [`fpmtud::responder::Responder`]: `handle_arrival(now, &Arrival)`
//!     (source, payload, whole / kernel-reassembled / per-fragment pieces),
//!     then `poll_transmit() -> Option<Transmit>`; no amplification, per-source
//!     rate limit, counters;
//!   * [`fpmtud::fragment`]: the IPv4 fragmentation arithmetic routers
//!     apply, as a reference model for tests and the simulator.
//! * [`session`] — one measurement of each method `px probe` offers, built
//!   on the cores above: [`session::FpmtudSession`] (with the early
//!   fallback), [`session::DplpmtudSession`], [`session::IcmpSession`]
//!   (classic PMTUD), [`session::ParallelSession`] (several DF-set sizes
//!   per round trip: exact in two or three round trips on any path) and
//!   [`session::AutoSession`]. Loop: send what
//!   `poll_transmit(now)` returns (a [`session::ProbeDatagram`]: size, DF
//!   handling, payload); report `on_datagram`, `on_icmp_too_big`,
//!   `on_unreachable`, `on_local_refused`; fire `handle_timeout(now)` at
//!   `poll_timeout()`; read `outcome()` ([`session::Measurement`]).
//!   `px probe` drives them on a socket, `px sim pmtud-compare` in
//!   simulated time.
//! * [`transport`] — [`transport::TransportStart`]: what a transport (QUIC)
//!   starts with after one measurement: the UDP payload known to pass and the
//!   ceiling of its own search (`examples/transport_start.rs`).
//!
//! # Example: F-PMTUD against a responder, in simulated time
//!
//! ```
//! use std::net::SocketAddr;
//! use std::time::{Duration, Instant};
//! use px_pmtud::fpmtud::fragment::traverse;
//! use px_pmtud::fpmtud::prober::{Prober, ProberConfig};
//! use px_pmtud::fpmtud::responder::{Arrival, Pieces, Responder, ResponderConfig};
//! use px_pmtud::rtt::ClassicRtt;
//!
//! let hops = [9000, 1500, 1400]; // the prober's link first
//! let mut prober = Prober::new(ProberConfig::new(9000), 42, ClassicRtt::default()).unwrap();
//! let mut responder = Responder::new(ResponderConfig::default());
//! let from: SocketAddr = "198.51.100.1:40000".parse().unwrap();
//! let mut now = Instant::now();
//! while !prober.is_done() {
//!     let mut replies = Vec::new();
//!     while let Some(probe) = prober.poll_transmit(now) {
//!         if let Some(frags) = traverse(probe.ip_len, probe.dont_fragment, &hops) {
//!             let pieces = if frags.len() == 1 {
//!                 Pieces::Whole { ip_len: probe.ip_len }
//!             } else {
//!                 Pieces::Fragments { records: &frags, reassembled: true }
//!             };
//!             let arrival = Arrival { source: from, payload: &probe.payload, pieces };
//!             responder.handle_arrival(now, &arrival);
//!         }
//!         while let Some(reply) = responder.poll_transmit() {
//!             replies.push(reply.payload);
//!         }
//!     }
//!     now += Duration::from_millis(20);
//!     for r in replies {
//!         prober.handle_reply(now, &r);
//!     }
//!     if let Some(t) = prober.poll_timeout().filter(|t| *t <= now) {
//!         prober.handle_timeout(t);
//!     }
//! }
//! let result = prober.result().unwrap();
//! assert_eq!(result.pmtu(), Some(1400));
//! assert_eq!(result.round_trips, 2);
//! ```

pub mod blackhole;
pub mod dplpmtud;
pub mod fpmtud;
pub mod rtt;
pub mod search;
pub mod session;
pub mod transport;
