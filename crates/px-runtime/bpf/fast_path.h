// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The contract between the kernel fast path (fast_path.c) and the gateway
// that loads it: the flow table's key and value, the reasons a packet took
// the path it took, the states and constants. px-runtime's build.rs
// generates the Rust side from this file (crates/px-runtime/build/contract.rs,
// module px_runtime::fast_path::contract), with the layout clang gives the
// structs asserted at compile time. It reads a subset of C: `#define NAME
// INTEGER`, enums whose entries all say `= INTEGER`, structs of __u8 ..
// __u64 and earlier structs (arrays by an integer or a #define); `//`
// comments become the Rust docs.

#ifndef PX_FAST_PATH_H
#define PX_FAST_PATH_H

#include <linux/types.h>

// Entries of the flow table (one per offloaded flow).
#define PX_TABLE_ENTRIES 65536

// A direction's state (px_dir.state).
#define PX_USER 0     // the engine carries it: its packets go to user space
#define PX_ON 1       // the kernel carries it
#define PX_RETURNED 2 // handed back (return_reason says why): user space until the engine withdraws it

// Index of px_flow.dir: the port a direction's packets arrive on.
#define PX_FROM_INNER 0 // outbound: from the b-network host
#define PX_FROM_OUTER 1 // inbound: from the legacy network

// bpf_skb_adjust_room moves at most this many bytes per call.
#define PX_ADJ_MAX 4095
// Pairs of calls per resize: 4 * 4095 covers 1448 <-> 8948 and more.
#define PX_ADJ_ROUNDS 4

// The largest window taken from the inner host's ACK (RFC 7323 §2.3:
// 2^30 bytes; the engine's conntrack::ReceiveWindow::MAX_WINDOW).
#define PX_MAX_WINDOW 1073741824

// Why a packet took the path it took (the index of its counter in
// px_reasons; a hand-back stores it in px_dir.return_reason).
enum px_reason {
	PX_R_RESIZED = 0,     // segment size changed, redirected
	PX_R_AS_IS = 1,       // redirected unchanged (fits, or too short to resize)
	PX_R_NO_FLOW = 2,     // TCP packet of no offloaded flow (or arrived on the other port): user space
	PX_R_NOT_TCP = 3,     // not plain IPv4/IPv6 TCP (options, fragments, a trailer, ...): user space
	PX_R_MALFORMED = 4,   // IP header the engine does not take as is (checksum, version, lengths): user space
	PX_R_FLAGS = 5,       // SYN, FIN, RST, URG; CWR on a super-packet: handed back
	PX_R_OPTIONS = 6,     // a TCP option other than NOP, timestamps, SACK: handed back
	PX_R_LONE = 7,        // a single segment too big for the egress: handed back
	PX_R_ADJUST = 8,      // bpf_skb_adjust_room refused: handed back
	PX_R_FOREIGN = 9,     // outside what the inner host allows, forwarded unchanged
	PX_R_FOREIGN_BIG = 10, // the same, but too big to forward unchanged: user space
	PX_R_RETURNED = 11,   // direction already handed back: user space
	PX_R_ENGINE = 12,     // direction the engine carries: user space
	PX_R_VLAN = 13,       // carried a VLAN tag: user space has it from its tap; dropped here
	PX_R_MAX = 14,
};

// A flow, as the engine keys it (both directions' packets find it).
struct px_key {
	__u32 outer[4];  // the outer host's address (IPv4: outer[0], the rest 0), network byte order
	__u32 inner[4];  // the inner host's address
	__u16 outer_port; // network byte order, as on the wire
	__u16 inner_port; // network byte order
	__u8 family;     // 4 or 6
	__u8 pad[3];     // zero
};

// One direction of a flow: what the engine asked for (written at
// install), and what the kernel did with the direction since.
struct px_dir {
	__u32 state;         // PX_USER, PX_ON or PX_RETURNED
	__u32 return_reason; // a px_reason, once PX_RETURNED
	__u32 next_seq;      // end of the furthest data carried (host order)
	__u32 ack;           // the last ACK its packets carried (of the other direction's data)
	__u16 gso_target;    // payload of each segment on the egress
	__u8 tcp_hlen;       // TCP header length gso_target was computed for
	__u8 pad[5];         // zero
	__u64 advanced;      // how far next_seq moved since the install (64-bit: it never wraps)
	__u64 packets;       // packets redirected (super-packets count once)
	__u64 segs_in;       // their wire segments as received
	__u64 segs_out;      // the wire segments they leave as
	__u64 full_out;      // of those, segments of gso_target bytes
	__u64 bytes;         // TCP payload bytes redirected
	__u64 data_out;      // of segs_out, those with payload
};

// A flow: its two directions, and what the inner host allows the outer
// host to send (the engine's conntrack::ReceiveWindow): the furthest
// ACK plus window the inner host announced, and its largest window.
struct px_flow {
	struct px_dir dir[2]; // by the port the packets arrive on: PX_FROM_INNER, PX_FROM_OUTER
	__u32 rcv_end;        // the inner host's furthest ack + window (host order)
	__u32 rcv_max_win;    // the largest window it announced, scaled
	__u8 rcv_shift;       // the shift of its window field (RFC 7323)
	__u8 pad[7];          // zero
};

// What the program redirected of the packets that arrived on one port (the
// index of px_ports: PX_FROM_INNER, PX_FROM_OUTER), as the devices count
// them (`ip -s link`): wire frames (a GRO super-packet counts as the
// segments GRO made it of, a GSO one as those it leaves as) and their
// bytes, Ethernet header included. The user-space workers count the
// rest; the gateway adds the two.
struct px_port_count {
	__u64 rx_packets; // arrived on this port and redirected
	__u64 rx_bytes;
	__u64 tx_packets; // the same packets, as they left by the other port
	__u64 tx_bytes;
};

#endif
