//! PX-caravans in the engine (format: `docs/caravan.md`; wire view:
//! `px_wire::caravan`; end-host library: `px-caravan`).
//!
//! - [`prefix`]: which destinations take caravans.
//! - [`open`]: the caravans being filled, and whether a datagram may join.
//! - [`ip`]: the IP-header work packing and unpacking need.
//! - The engine's side (which datagram goes where, packing inbound,
//!   unpacking outbound) is in the engine's `caravan/` child.
//!
//! Open caravans wait in the engine's one deadline queue
//! (`crate::timer`), beside the TCP holds.
//!
//! Inbound (outer → inner), UDP toward a caravan-capable destination
//! (`Config::caravan_prefixes` / `caravan_ports`): datagrams of one flow are
//! packed, in arrival order, into one caravan of at most the iMTU, held at
//! most the merge timeout. A datagram that does not fit, or whose headers
//! differ (TTL, TOS, DF, link header, an IPv4 ID out of sequence), sends the
//! open caravan and starts the next. A caravan that ends up with a single
//! datagram leaves as that plain datagram.
//!
//! Inbound UDP that carries the caravan DSCP is remarked to DSCP 0 at the
//! boundary (RFC 2474 §2, the header checksum fixed), whatever its
//! destination, fragments included, whether or not caravans are configured:
//! no outside packet can pose as a caravan to a host that reads them.
//!
//! Outbound (inner → outer), UDP marked with the caravan DSCP: the caravan is
//! validated whole, then unpacked into its datagrams with IP headers rebuilt
//! (length, DSCP 0, a fresh IPv4 ID, header checksum) and the records' own
//! UDP checksums kept; a datagram larger than the egress gets the router
//! treatment (fragments, or ICMP "too big").
//!
//! Guarantees (tests in `tests/caravan*.rs`): every datagram leaves once, its
//! UDP header and payload byte-exact, in the order of its flow; nothing is
//! held longer than the merge timeout; held buffers are bounded by
//! `max_flows` caravans and `max_held_bytes`; every malformed caravan is
//! dropped and counted by reason, never forwarded in part.

pub(crate) mod ip;
pub(crate) mod open;
pub(crate) mod prefix;
