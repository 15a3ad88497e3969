//! `px-pmtud`: sans-I/O path MTU discovery for PacketExpress.
//!
//! * [`rtt`]: RTT estimators (RFC 9002 classic, once-per-RTT variants).
//! * [`search`]: DPLPMTUD search strategies (bisection, lsquic).
//! * [`blackhole`]: black-hole detection from data-packet losses.
//! * [`dplpmtud`]: the RFC 8899 state machine.

pub mod blackhole;
pub mod dplpmtud;
pub mod fpmtud;
pub mod rtt;
pub mod search;
