//! `px-survey`: the measurement of the paper's §5.3 as a tool.
//!
//! Toward each target (address, port, optional HTTP host name) the survey
//! asks four questions, the way scamper's `tbit` packages TCP behaviour
//! tests:
//!
//! 1. Does it answer an unfragmented HTTP request (status, length, hash of
//!    the first body bytes: the answer's *fingerprint*)?
//! 2. Does it answer the same request sent as IP fragments, and is the
//!    answer identical?
//! 3. Where fragments are not answered: at which hop do they stop
//!    (TTL-limited first fragments against TTL-limited whole packets)?
//! 4. Does classic ICMP PMTUD work toward it: after a "fragmentation
//!    needed" for one of its full-sized segments, does it resend that data
//!    in smaller segments? (Once per address: a host's path MTU cache is
//!    per destination, so a second test toward the same host would only
//!    see the first one's effect.)
//!
//! Everything that decides is sans-I/O, with time passed in: [`target`]
//! (the input file), [`record`] (one JSON line per target, resume,
//! classification), [`rate`] (global and per-destination packet rates),
//! [`packet`] (building and parsing the packets), [`exchange`] (the raw TCP
//! client and the hop test as state machines), [`job`] (one target's
//! stages, retries and record), [`scheduler`] (the targets in progress,
//! whose packet leaves next under the rate limits, which job an answer is
//! for), [`report`] (the paper's table). [`run`] is the Linux driver: raw
//! sockets, the firewall rule that keeps the kernel from resetting the raw
//! connections, the output file, and the loop.

pub mod exchange;
pub mod job;
#[cfg(test)]
mod model;
pub mod packet;
pub mod rate;
pub mod record;
pub mod report;
#[cfg(target_os = "linux")]
pub mod run;
pub mod scheduler;
pub mod target;

pub use record::{Class, FetchResult, Fingerprint, FragmentPath, Pmtud, Record, Stop};
pub use target::{Target, TargetError, parse_targets};
