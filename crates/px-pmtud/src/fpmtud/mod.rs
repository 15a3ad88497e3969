//! F-PMTUD: path MTU discovery in one round trip from IP fragments
//! (PacketExpress paper §4.2), made exact by one DF-set confirmation round.

pub mod fragment;
pub mod prober;
pub mod responder;
pub mod wire;
