//! Two gateways behind ECMP (issue 30): b-network A's border router `ra`
//! reaches the exchange router `rx` over two parallel links, each with a
//! `px gateway` as a bump in it; BIRD 2 on both routers speaks eBGP over
//! each link (through the gateway), with BFD on each session, and merges
//! the two equal routes into one kernel multipath route (`merge paths`).
//!
//! ```text
//!  hA ─9000─ ra ═g1═9000═[gw1]═1500═g1═ rx ─1500─ hL
//!               ╚g2═9000═[gw2]═1500═g2═╝
//! ```
//!
//! The run: sha256-checked paced TCP flows in both directions; `kill -9`
//! of gw1; later gw1 started again. Every transfer must complete exact.
//! Measured: the time each flow stood still after the kill, the time the
//! routers' kernel routes lost the dead path, the surviving gateway's
//! yield on the flows it adopted mid-stream, the traffic per link over
//! time, and whether the flow hash is symmetric across the two routers
//! (same `fib_multipath_hash_seed`) and what a differing seed does.
//!
//! By job: `config.rs` (addresses, BIRD's configurations, the namespaces
//! and links), `scenario.rs` (bring-up, the flows, the kill and the
//! restart), `measure.rs` (stalls, traffic per link, routes, flow hash,
//! yields, and the result).

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

mod config;
mod measure;
mod scenario;

pub use config::{HASH_SEED, HOST_A, HOST_L, PREFIX_A, PREFIX_L};
pub use measure::stall_after;
pub use scenario::run;

/// What to run.
#[derive(Debug, Clone)]
pub struct EcmpOptions {
    /// The `px` binary (runs the gateways).
    pub exe: PathBuf,
    /// Flows in each direction.
    pub flows: usize,
    /// Rate of each flow, Mbit/s (paced writes of 64 KiB).
    pub rate_mbps: f64,
    /// From the start of the flows to the kill.
    pub before_kill: Duration,
    /// From the kill to gw1's restart.
    pub down: Duration,
    /// From the restart to the end of the flows.
    pub after_restart: Duration,
    /// 5-tuples tried for the hash symmetry check.
    pub hash_tuples: usize,
    /// Extra arguments for both gateways.
    pub gateway_args: Vec<String>,
    /// BFD transmit and receive interval, ms (detection: 3 of them).
    pub bfd_ms: u32,
    /// `net.ipv4.fib_multipath_hash_policy` on both routers: 1 (L4) or 3
    /// (custom fields: addresses, protocol, ports). See `docs/border.md`:
    /// with 1, Linux reuses a packet's existing L4 hash (a sender socket's
    /// random `txhash`, a NIC's RSS hash), which differs per direction.
    pub hash_policy: u32,
}

impl Default for EcmpOptions {
    fn default() -> Self {
        EcmpOptions {
            exe: PathBuf::from("px"),
            flows: 4,
            rate_mbps: 40.0,
            before_kill: Duration::from_secs(3),
            down: Duration::from_secs(5),
            after_restart: Duration::from_secs(5),
            hash_tuples: 64,
            gateway_args: Vec::new(),
            bfd_ms: 50,
            hash_policy: 3,
        }
    }
}

/// One sha256-checked transfer.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    /// `a_to_l` or `l_to_a`.
    pub direction: &'static str,
    /// Flow number.
    pub flow: u64,
    /// Bytes received (each checked against the sender's stream).
    pub bytes: u64,
    /// SHA-256 the sender computed.
    pub sent_sha256: String,
    /// SHA-256 the receiver computed.
    pub received_sha256: String,
    /// Longest time without a received byte after the kill, ms (0: the
    /// flow never stood still: it was on the surviving gateway).
    pub failover_stall_ms: f64,
    /// Longest stall after gw1's restart, ms.
    pub failback_stall_ms: f64,
    /// The receiver's estimate of the segment size it gets at the end
    /// (`TCP_INFO` `rcv_mss`): 8948 for a flow its last gateway merges,
    /// about 1448 for one it passes at the safe size (it never saw the
    /// handshake), 1448 for every A → L flow (legacy side).
    pub receiver_mss: u32,
}

/// Flow hash symmetry between the two routers.
#[derive(Debug, Clone, Serialize)]
pub struct HashSymmetry {
    /// `net.ipv4.fib_multipath_hash_policy` on both routers (1: L4; 3:
    /// custom fields).
    pub policy: u32,
    /// 5-tuples tried.
    pub tuples: usize,
    /// Share of tuples whose two directions take the same gateway with the
    /// same seed on both routers.
    pub same_seed: f64,
    /// ... with different seeds.
    pub different_seeds: f64,
    /// Share of tuples on link 1 (the spread).
    pub on_link1: f64,
    /// Of the real L → A flows, the share whose receiver got merged
    /// (8948-byte) segments just before the kill: their gateway saw both
    /// directions. What the FIB answers above says for a tuple; this says
    /// what the packets did.
    pub flows_merged_before_kill: f64,
}

/// Traffic per gateway at one moment.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds since the flows started.
    pub t_s: f64,
    /// Mbit/s through gw1 (both directions, counted at `ra`).
    pub gw1_mbps: f64,
    /// Mbit/s through gw2.
    pub gw2_mbps: f64,
}

/// What the ECMP run measured.
#[derive(Debug, Clone, Serialize)]
pub struct EcmpResult {
    /// Every transfer complete and its digests equal.
    pub transfers_exact: bool,
    /// The transfers.
    pub transfers: Vec<Transfer>,
    /// Flows that stood still after the kill (they were on gw1).
    pub stalled_flows: usize,
    /// Longest time from the kill until a stalled flow moved again, ms.
    pub failover_ms: f64,
    /// Median of it over the stalled flows, ms.
    pub failover_median_ms: f64,
    /// From the kill until `ra`'s kernel route had one next hop, ms.
    pub route_converged_ms: Option<f64>,
    /// Longest stall of any flow after gw1's restart, ms.
    pub failback_ms: f64,
    /// Flows that stood still after the restart.
    pub failback_stalled_flows: usize,
    /// gw2's conversion yield from the start to the kill.
    pub yield_before_failover: Option<f64>,
    /// gw2's conversion yield from the kill to gw1's restart (its own flows
    /// and the ones it adopted without seeing their handshake).
    pub yield_after_failover: Option<f64>,
    /// gw2's TCP data packets to the inner port in that window.
    pub gw2_data_out_after: u64,
    /// Flow hash symmetry.
    pub hash: HashSymmetry,
    /// BFD timers (tx/rx interval ms, multiplier).
    pub bfd: (u32, u32),
    /// BGP sessions that went down on `ra` besides the killed gateway's
    /// (flaps: BFD packets missed on a loaded machine).
    pub bfd_flaps: usize,
    /// `ra`'s BIRD log lines about its sessions.
    pub ra_events: Vec<String>,
    /// When gw1 was killed and restarted (s since start).
    pub kill_at_s: f64,
    /// ... restarted.
    pub restart_at_s: f64,
    /// Traffic per gateway over time (100 ms bins).
    pub samples: Vec<Sample>,
}

/// One sample: seconds since the start, each flow's received bytes, the
/// bytes through each gateway link.
type RawSample = (f64, Vec<u64>, [u64; 2]);
