// SPDX-License-Identifier: MIT OR Apache-2.0
//
// PacketExpress kernel fast path (issue 28): a TC program on the ingress
// of each gateway port. For a TCP packet of a flow the engine offloaded
// (an entry in `px_flows`, keyed by the packet's own direction), it
// changes a GRO super-packet's segment size to what the engine asked for,
// without touching its bytes, and redirects it to the other port, whose
// GSO (or the NIC's TSO) cuts it there. Everything else goes on to the
// user-space path exactly as without the program (TC_ACT_OK: the
// gateway's protocol-bound packet sockets receive it after TC, so each
// packet takes exactly one of the two paths).
//
// The engine is the only decision maker: this program never creates an
// entry. What it does not handle, it hands back: the entry's state becomes
// RETURNED (with the reason) and that packet and every later one of the
// direction go to user space, in order, until the engine withdraws or
// re-installs the flow. A packet from outside that lies too far from the
// stream to be the connection's (an off-path guess) does not hand the flow
// back: it is forwarded unchanged, as a router would, if it fits.
//
// Built by px-runtime's build.rs with Debian's clang (-target bpf).
// The layout of the maps' keys and values is mirrored in
// crates/px-runtime/src/fast_path/maps.rs (with tests on the sizes).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef BPF_F_ADJ_ROOM_FIXED_GSO
#define BPF_F_ADJ_ROOM_FIXED_GSO (1ULL << 0)
#endif

// Flow states (px_flow.state).
#define PX_ON 1       // the kernel carries the direction
#define PX_RETURNED 2 // handed back to user space (return_reason says why)

// How far from the expected sequence a segment from outside may start and
// still be the connection's (the engine's conntrack::MAX_AHEAD).
#define PX_MAX_AHEAD (256 << 10)

// bpf_skb_adjust_room moves at most this many bytes per call.
#define PX_ADJ_MAX 0xfff
// Pairs of calls per resize: 4 * 0xfff covers 1448 <-> 8948 and more.
#define PX_ADJ_ROUNDS 4

// Why a packet took the path it took (index into px_reasons).
enum px_reason {
	PX_R_RESIZED = 0,      // segment size changed, redirected
	PX_R_AS_IS = 1,        // redirected unchanged (fits, or too short to resize)
	PX_R_NO_FLOW = 2,      // TCP packet of no offloaded flow: user space
	PX_R_NOT_TCP = 3,      // not plain IPv4/IPv6 TCP (options, fragments, ...): user space
	PX_R_FLAGS = 4,        // SYN, FIN, RST, URG; CWR on a super-packet: handed back
	PX_R_OPTIONS = 5,      // a TCP option other than NOP, timestamps, SACK: handed back
	PX_R_LONE = 6,         // a single segment too big for the egress: handed back
	PX_R_SMALL = 7,        // a super-packet smaller than min_payload: handed back
	PX_R_ADJUST = 8,       // bpf_skb_adjust_room refused: handed back
	PX_R_FOREIGN = 9,      // off-path-looking segment from outside, forwarded unchanged
	PX_R_FOREIGN_BIG = 10, // the same, but too big to forward unchanged: user space
	PX_R_RETURNED = 11,    // flow already handed back: user space
	PX_R_VLAN = 12,        // carried a VLAN tag: user space has it from its tap; dropped here
	PX_R_MAX = 13,
};

// A flow in one direction: the packet's own addresses and ports.
struct px_key {
	__u32 saddr[4]; // IPv4: saddr[0], the rest 0
	__u32 daddr[4];
	__u16 sport; // network byte order, as on the wire
	__u16 dport;
	__u8 family; // 4 or 6
	__u8 pad[3];
};

// What the engine asked for (written by user space at install), and what
// the kernel did with the direction since.
struct px_flow {
	__u32 state;       // PX_ON or PX_RETURNED
	__u32 out_ifindex; // the other port
	__u16 gso_target;  // payload of each segment on the egress
	__u16 min_payload; // super-packets with less payload go to user space (0: never)
	__u8 check_window; // from outside: the sequence must be near next_seq
	__u8 tcp_hlen;     // TCP header length gso_target was computed for
	__u8 pad[2];
	__u32 next_seq;      // end of the furthest data (host order)
	__u32 return_reason; // a px_reason, once RETURNED
	__u64 packets;       // packets redirected (super-packets count once)
	__u64 segs_in;       // their wire segments as received
	__u64 segs_out;      // the wire segments they leave as
	__u64 full_out;      // of those, segments of gso_target bytes
	__u64 bytes;         // TCP payload bytes redirected
	__u64 data_out;      // of segs_out, those with payload
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct px_key);
	__type(value, struct px_flow);
} px_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PX_R_MAX);
	__type(key, __u32);
	__type(value, __u64);
} px_reasons SEC(".maps");

static __always_inline void count(__u32 r)
{
	__u64 *c = bpf_map_lookup_elem(&px_reasons, &r);
	if (c)
		*c += 1;
}

static __always_inline int hand_back(struct px_flow *f, __u32 r)
{
	f->return_reason = r;
	f->state = PX_RETURNED;
	count(r);
	return TC_ACT_OK;
}

// Serial-number arithmetic (RFC 1982) on 32-bit sequence numbers.
static __always_inline __s32 seq_since(__u32 a, __u32 b)
{
	return (__s32)(a - b);
}

// Whether the TCP options are ones the fast path passes through untouched,
// in the layouts Linux writes: nothing; timestamps (NOP NOP TS); SACK
// blocks (NOP NOP SACK), after timestamps or alone. Anything else goes to
// the engine. (A pattern rather than a parsing loop: the verifier checks
// it in a few hundred instructions.)
static __always_inline int plain_options(struct __sk_buff *skb, __u32 at, __u32 len)
{
	__u8 o[4];
	if (len == 0)
		return 1;
	if (len > 40 || (len & 3))
		return 0;
	if (bpf_skb_load_bytes(skb, at, o, 4) < 0)
		return 0;
	if (o[0] != 1 || o[1] != 1)
		return 0;
	__u32 sack_at = 0;
	if (o[2] == 8 && o[3] == 10) {
		if (len == 12)
			return 1;
		sack_at = 12;
		if (bpf_skb_load_bytes(skb, at + 12, o, 4) < 0)
			return 0;
		if (o[0] != 1 || o[1] != 1)
			return 0;
	}
	// NOP NOP SACK with 1 to 4 blocks, to the end of the options.
	return o[2] == 5 && o[3] >= 10 && o[3] <= 34 && (o[3] - 2) % 8 == 0 && sack_at + 2 + o[3] == len;
}

// Changes the segment size of a GSO packet from `from` to `to` without
// changing its bytes: room inserted after the network header with the
// segment size kept and removed again without (or the other way round),
// each call moving the size by what it inserts or removes.
static __always_inline int resize(struct __sk_buff *skb, __u32 from, __u32 to)
{
	int grow = to > from;
	__u32 diff = grow ? to - from : from - to;
	for (int r = 0; r < PX_ADJ_ROUNDS; r++) {
		if (diff == 0)
			return 0;
		__s32 x = diff > PX_ADJ_MAX ? PX_ADJ_MAX : diff;
		__u64 first = grow ? BPF_F_ADJ_ROOM_FIXED_GSO : 0;
		__u64 second = grow ? 0 : BPF_F_ADJ_ROOM_FIXED_GSO;
		if (bpf_skb_adjust_room(skb, x, BPF_ADJ_ROOM_NET, first) < 0)
			return -1;
		if (bpf_skb_adjust_room(skb, -x, BPF_ADJ_ROOM_NET, second) < 0)
			return -1;
		diff -= x;
	}
	return diff == 0 ? 0 : -1;
}

SEC("classifier")
int px_fast_path(struct __sk_buff *skb)
{
	struct px_key key = {};
	__u32 l3 = sizeof(struct ethhdr), l4, seq, ip_end;
	__u8 tcp_hdr[20];
	__u16 proto;

	// A VLAN-tagged frame: the kernel clears the tag before it serves the
	// gateway's protocol-bound sockets, so the gateway reads tagged frames
	// from its tap (which runs before TC) and the frame goes no further
	// here: exactly one copy reaches user space, with its tag.
	if (skb->vlan_present) {
		count(PX_R_VLAN);
		return TC_ACT_SHOT;
	}
	if (bpf_skb_load_bytes(skb, 12, &proto, 2) < 0)
		return TC_ACT_OK;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, l3, &ip, sizeof(ip)) < 0)
			goto not_tcp;
		// No IP options, no fragments: what the engine's own fast
		// checks take too.
		if (ip.ihl != 5 || ip.protocol != IPPROTO_TCP || (ip.frag_off & bpf_htons(0x3fff)))
			goto not_tcp;
		key.family = 4;
		key.saddr[0] = ip.saddr;
		key.daddr[0] = ip.daddr;
		l4 = l3 + 20;
		// Where the IP packet ends (not the frame: Ethernet pads short
		// ones); 0 in a BIG TCP super-packet, which ends with the frame.
		ip_end = ip.tot_len ? l3 + bpf_ntohs(ip.tot_len) : skb->len;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, l3, &ip6, sizeof(ip6)) < 0)
			goto not_tcp;
		if (ip6.nexthdr != IPPROTO_TCP)
			goto not_tcp;
		key.family = 6;
		__builtin_memcpy(key.saddr, &ip6.saddr, 16);
		__builtin_memcpy(key.daddr, &ip6.daddr, 16);
		l4 = l3 + 40;
		ip_end = ip6.payload_len ? l4 + bpf_ntohs(ip6.payload_len) : skb->len;
	} else {
		// Not IP: not the fast path's (and not counted: ARP and the
		// like are not TCP packets the engine could have offloaded).
		return TC_ACT_OK;
	}
	if (bpf_skb_load_bytes(skb, l4, tcp_hdr, 20) < 0)
		goto not_tcp;
	struct tcphdr *th = (struct tcphdr *)tcp_hdr;
	key.sport = th->source;
	key.dport = th->dest;

	struct px_flow *f = bpf_map_lookup_elem(&px_flows, &key);
	if (!f) {
		count(PX_R_NO_FLOW);
		return TC_ACT_OK;
	}
	if (f->state != PX_ON) {
		count(PX_R_RETURNED);
		return TC_ACT_OK;
	}
	__u32 doff = th->doff * 4;
	if (doff < 20 || doff > 60)
		goto not_tcp;
	__u32 hdrs = l4 + doff;
	if (ip_end < hdrs || ip_end > skb->len)
		goto not_tcp;
	__u32 payload = ip_end - hdrs;
	seq = bpf_ntohl(th->seq);
	__u32 gso = skb->gso_size;
	int is_gso = gso != 0;
	__u32 target = f->gso_target;

	if (f->check_window) {
		__s32 d = seq_since(seq, f->next_seq);
		if (d > PX_MAX_AHEAD || d < -PX_MAX_AHEAD) {
			// Not the connection's, as far as an end host could tell:
			// a router's treatment, and the flow stays offloaded.
			if ((is_gso ? gso : payload) > target) {
				count(PX_R_FOREIGN_BIG);
				return TC_ACT_OK;
			}
			count(PX_R_FOREIGN);
			return bpf_redirect(f->out_ifindex, 0);
		}
	}
	if (th->syn || th->fin || th->rst || th->urg)
		return hand_back(f, PX_R_FLAGS);
	if (!plain_options(skb, l4 + 20, doff - 20))
		return hand_back(f, PX_R_OPTIONS);
	// A data segment with other options than the size was made for would
	// leave as segments too big for the egress.
	if (payload > 0 && doff != f->tcp_hlen)
		return hand_back(f, PX_R_OPTIONS);

	__u32 segs_in = is_gso ? (payload + gso - 1) / (gso ? gso : 1) : 1;
	__u32 new_gso = 0;
	if (f->min_payload && payload > 0 && payload < f->min_payload)
		return hand_back(f, PX_R_SMALL);
	if (is_gso) {
		// CWR on a super-packet: whether its later segments keep it is a
		// question of ECN mode the engine answers (the kernel's GSO
		// clears it after the first segment).
		if (th->cwr)
			return hand_back(f, PX_R_FLAGS);
		// Only a packet longer than the new size stays a GSO packet the
		// egress may cut (tcp_gso_segment refuses len <= mss).
		if (gso != target && payload > target)
			new_gso = target;
		else if (gso > target)
			return hand_back(f, PX_R_LONE);
	} else if (payload > target) {
		// One segment, too big for the egress: only the engine can
		// cut it (no BPF helper makes a packet a GSO packet).
		return hand_back(f, PX_R_LONE);
	}
	if (new_gso) {
		if (resize(skb, gso, new_gso) < 0)
			return hand_back(f, PX_R_ADJUST);
		count(PX_R_RESIZED);
	} else {
		count(PX_R_AS_IS);
	}
	// The furthest data, for the engine when it takes the flow back.
	__u32 end = seq + payload;
	if (seq_since(end, f->next_seq) > 0)
		f->next_seq = end;
	__u32 size = new_gso ? new_gso : (is_gso ? gso : payload);
	__u32 out = size ? (payload + size - 1) / size : 1;
	__sync_fetch_and_add(&f->packets, 1);
	__sync_fetch_and_add(&f->segs_in, segs_in);
	__sync_fetch_and_add(&f->segs_out, out ? out : 1);
	if (payload)
		__sync_fetch_and_add(&f->data_out, out);
	if (size == target)
		__sync_fetch_and_add(&f->full_out, payload / target);
	__sync_fetch_and_add(&f->bytes, payload);
	return bpf_redirect(f->out_ifindex, 0);

not_tcp:
	count(PX_R_NOT_TCP);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
