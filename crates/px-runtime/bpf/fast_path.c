// SPDX-License-Identifier: MIT OR Apache-2.0
//
// PacketExpress kernel fast path (issue 28): a TC program on the ingress
// of each gateway port. For a TCP packet of a flow the engine offloaded
// (an entry in `px_flows`, keyed as the engine keys the flow, outer host
// first, read from the packet as the port it arrived on says), in a
// direction the kernel carries, it changes a GRO super-packet's segment
// size to what the engine asked for, without touching its bytes, and
// redirects it to the other port, whose GSO (or the NIC's TSO) cuts it
// there. Everything else goes on to the user-space path exactly as
// without the program (TC_ACT_OK: the gateway's protocol-bound packet
// sockets receive it after TC, so each packet takes exactly one of the
// two paths).
//
// The engine is the only decision maker: this program never creates an
// entry. What it does not handle, it hands back: the direction's state
// becomes PX_RETURNED (with the reason) and that packet and every later
// one of the direction go to user space, in order, until the engine
// withdraws or re-installs the flow. A packet from outside that lies
// outside what the inner host allows (`px_admits`, the engine's
// conntrack::ReceiveWindow::admits) does not hand the flow back: it is
// forwarded unchanged, as a router would, if it fits. The packets of the
// inner host keep that window up to date in the entry, whichever side
// carries them.
//
// The layout of the maps and every constant are in fast_path.h, from
// which px-runtime's build.rs generates the Rust side
// (crates/px-runtime/build/contract.rs; the maps are read and written in
// crates/px-runtime/src/fast_path.rs). Built by that build.rs with
// Debian's clang (-target bpf).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "fast_path.h"

#ifndef BPF_F_ADJ_ROOM_FIXED_GSO
#define BPF_F_ADJ_ROOM_FIXED_GSO (1ULL << 0)
#endif

// The two ports, set by the loader before the program is loaded (aya's
// EbpfLoader::override_global): which one a packet arrived on says which
// way it goes, and the other is where it is redirected.
volatile const __u32 px_inner_ifindex = 0;
volatile const __u32 px_outer_ifindex = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PX_TABLE_ENTRIES);
	__type(key, struct px_key);
	__type(value, struct px_flow);
} px_flows SEC(".maps");

// Entry 0 non-zero: offload = "off". The program then only keeps
// tagged frames from the IP sockets (the gateway reads them from its tap)
// and passes everything else on untouched, without a lookup or a count:
// free, and attached all the same (the gateway's sockets are split by
// protocol on that promise). 0, the default: it works.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} px_paused SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PX_R_MAX);
	__type(key, __u32);
	__type(value, __u64);
} px_reasons SEC(".maps");

// Per-CPU: what each port's redirected packets were on the wires
// (struct px_port_count), summed over the CPUs by the gateway.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct px_port_count);
} px_ports SEC(".maps");

// A redirected packet, as the wires count it: it arrived as `segs_in`
// frames and leaves as `segs_out`, each with the `hdr` bytes of headers
// (Ethernet to TCP) that the first, `len` bytes long in all, carries.
static __always_inline void count_port(__u32 from, __u32 len, __u32 hdr, __u32 segs_in, __u32 segs_out)
{
	struct px_port_count *c = bpf_map_lookup_elem(&px_ports, &from);
	if (!c)
		return;
	segs_in = segs_in ? segs_in : 1;
	segs_out = segs_out ? segs_out : 1;
	c->rx_packets += segs_in;
	c->rx_bytes += len + (__u64)(segs_in - 1) * hdr;
	c->tx_packets += segs_out;
	c->tx_bytes += len + (__u64)(segs_out - 1) * hdr;
}

static __always_inline void count(__u32 r)
{
	__u64 *c = bpf_map_lookup_elem(&px_reasons, &r);
	if (c)
		*c += 1;
}

static __always_inline int hand_back(struct px_dir *d, __u32 r)
{
	d->return_reason = r;
	d->state = PX_RETURNED;
	count(r);
	return TC_ACT_OK;
}

// Serial-number arithmetic (RFC 1982) on 32-bit sequence numbers.
static __always_inline __s32 seq_since(__u32 a, __u32 b)
{
	return (__s32)(a - b);
}

// Whether a segment from outside occupying [seq, end) may belong to the
// connection whose furthest data ends at `next`: it starts no further on
// than the inner host allows, and ends less than its largest window
// before `next` (Linux nf_conntrack tcp_in_window's first two checks).
// The engine's conntrack::ReceiveWindow::admits, the same rule.
static __always_inline int px_admits(const struct px_flow *f, __u32 next, __u32 seq, __u32 end)
{
	__u32 behind = next - f->rcv_max_win - 1;
	return seq_since(seq, f->rcv_end) <= 0 && seq_since(end, behind) > 0;
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

// The IPv4 header checksum verifies (20 bytes, no options).
static __always_inline int ipv4_checksum_ok(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

SEC("classifier")
int px_fast_path(struct __sk_buff *skb)
{
	struct px_key key = {};
	__u32 l3 = sizeof(struct ethhdr), l4, ip_end;
	__u8 tcp_hdr[20];
	__u16 proto;
	__u32 src[4] = {}, dst[4] = {};

	// A VLAN-tagged frame: the kernel clears the tag before it serves the
	// gateway's protocol-bound sockets, so the gateway reads tagged frames
	// from its tap (which runs before TC) and the frame goes no further
	// here: exactly one copy reaches user space, with its tag.
	if (skb->vlan_present) {
		count(PX_R_VLAN);
		return TC_ACT_SHOT;
	}
	__u32 zero = 0;
	__u32 *paused = bpf_map_lookup_elem(&px_paused, &zero);
	if (paused && *paused)
		return TC_ACT_OK;
	__u32 ifindex = skb->ingress_ifindex;
	int from_outer;
	if (ifindex == px_outer_ifindex)
		from_outer = 1;
	else if (ifindex == px_inner_ifindex)
		from_outer = 0;
	else
		return TC_ACT_OK;
	__u32 gso = skb->gso_size;
	int is_gso = gso != 0;

	if (bpf_skb_load_bytes(skb, 12, &proto, 2) < 0)
		return TC_ACT_OK;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, l3, &ip, sizeof(ip)) < 0)
			goto malformed;
		// What the engine drops (px_wire's IPv4 view and the header
		// checksum): another version, a header checksum that fails, a
		// total length shorter than the header or beyond the frame;
		// 0 only in a BIG TCP super-packet, which ends with the frame.
		if (ip.version != 4 || ip.ihl < 5)
			goto malformed;
		// IP options, fragments, other protocols: the engine's.
		if (ip.ihl != 5 || ip.protocol != IPPROTO_TCP || (ip.frag_off & bpf_htons(0x3fff)))
			goto not_tcp;
		if (!ipv4_checksum_ok(&ip))
			goto malformed;
		__u32 tot = bpf_ntohs(ip.tot_len);
		if (tot == 0 && !is_gso)
			goto malformed;
		if (tot != 0 && tot < 20)
			goto malformed;
		ip_end = tot ? l3 + tot : skb->len;
		if (ip_end > skb->len)
			goto malformed;
		key.family = 4;
		src[0] = ip.saddr;
		dst[0] = ip.daddr;
		l4 = l3 + 20;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, l3, &ip6, sizeof(ip6)) < 0)
			goto malformed;
		if (ip6.version != 6)
			goto malformed;
		__u32 plen = bpf_ntohs(ip6.payload_len);
		if (plen == 0 && !is_gso)
			goto malformed;
		l4 = l3 + 40;
		ip_end = plen ? l4 + plen : skb->len;
		if (ip_end > skb->len)
			goto malformed;
		if (ip6.nexthdr != IPPROTO_TCP)
			goto not_tcp;
		key.family = 6;
		__builtin_memcpy(src, &ip6.saddr, 16);
		__builtin_memcpy(dst, &ip6.daddr, 16);
	} else {
		// Not IP: not the fast path's (and not counted: ARP and the
		// like are not TCP packets the engine could have offloaded).
		return TC_ACT_OK;
	}
	// Bytes after the IP packet (more than Ethernet's padding of a short
	// frame): the engine passes the packet on without them.
	if (ip_end < skb->len && skb->len > 60)
		goto not_tcp;
	if (bpf_skb_load_bytes(skb, l4, tcp_hdr, 20) < 0)
		goto not_tcp;
	struct tcphdr *th = (struct tcphdr *)tcp_hdr;
	__u32 doff = th->doff * 4;
	if (doff < 20 || l4 + doff > ip_end)
		goto not_tcp;
	if (from_outer) {
		__builtin_memcpy(key.outer, src, 16);
		__builtin_memcpy(key.inner, dst, 16);
		key.outer_port = th->source;
		key.inner_port = th->dest;
	} else {
		__builtin_memcpy(key.outer, dst, 16);
		__builtin_memcpy(key.inner, src, 16);
		key.outer_port = th->dest;
		key.inner_port = th->source;
	}

	struct px_flow *f = bpf_map_lookup_elem(&px_flows, &key);
	if (!f) {
		count(PX_R_NO_FLOW);
		return TC_ACT_OK;
	}
	__u32 seq = bpf_ntohl(th->seq);
	__u32 payload = ip_end - l4 - doff;
	// What the segment occupies of the sequence space (SYN and FIN count).
	__u32 end = seq + payload + th->syn + th->fin;
	if (!from_outer && th->ack && !th->syn && !th->rst) {
		// The inner host's ACK and window: what it allows the outer host
		// to send (the engine's conntrack::ReceiveWindow::on_ack).
		__u32 win = (__u32)bpf_ntohs(th->window) << (f->rcv_shift & 15);
		if (win > PX_MAX_WINDOW)
			win = PX_MAX_WINDOW;
		__u32 allowed = bpf_ntohl(th->ack_seq) + win;
		if (seq_since(allowed, f->rcv_end) > 0)
			f->rcv_end = allowed;
		if (win > f->rcv_max_win)
			f->rcv_max_win = win;
	}
	struct px_dir *d = from_outer ? &f->dir[PX_FROM_OUTER] : &f->dir[PX_FROM_INNER];
	if (d->state == PX_USER) {
		count(PX_R_ENGINE);
		return TC_ACT_OK;
	}
	if (d->state != PX_ON) {
		count(PX_R_RETURNED);
		return TC_ACT_OK;
	}
	__u32 target = d->gso_target;
	__u32 out_ifindex = from_outer ? px_inner_ifindex : px_outer_ifindex;

	if (from_outer && !px_admits(f, d->next_seq, seq, end)) {
		// Not the connection's, as far as the inner host could tell: a
		// router's treatment, and the flow stays offloaded.
		if ((is_gso ? gso : payload) > target) {
			count(PX_R_FOREIGN_BIG);
			return TC_ACT_OK;
		}
		count(PX_R_FOREIGN);
		__u32 segs = is_gso ? (payload + gso - 1) / (gso ? gso : 1) : 1;
		count_port(from_outer, skb->len, l4 + doff, segs, segs);
		return bpf_redirect(out_ifindex, 0);
	}
	if (th->syn || th->fin || th->rst || th->urg)
		return hand_back(d, PX_R_FLAGS);
	if (!plain_options(skb, l4 + 20, doff - 20))
		return hand_back(d, PX_R_OPTIONS);
	// A data segment with other options than the size was made for would
	// leave as segments too big for the egress.
	if (payload > 0 && doff != d->tcp_hlen)
		return hand_back(d, PX_R_OPTIONS);

	__u32 segs_in = is_gso ? (payload + gso - 1) / (gso ? gso : 1) : 1;
	__u32 new_gso = 0;
	if (is_gso) {
		// CWR on a super-packet: whether its later segments keep it is a
		// question of ECN mode the engine answers (the kernel's GSO
		// clears it after the first segment).
		if (th->cwr)
			return hand_back(d, PX_R_FLAGS);
		// Only a packet longer than the new size stays a GSO packet the
		// egress may cut (tcp_gso_segment refuses len <= mss).
		if (gso != target && payload > target)
			new_gso = target;
		else if (gso > target)
			return hand_back(d, PX_R_LONE);
	} else if (payload > target) {
		// One segment, too big for the egress: only the engine can
		// cut it (no BPF helper makes a packet a GSO packet).
		return hand_back(d, PX_R_LONE);
	}
	if (new_gso) {
		if (resize(skb, gso, new_gso) < 0)
			return hand_back(d, PX_R_ADJUST);
		count(PX_R_RESIZED);
	} else {
		count(PX_R_AS_IS);
	}
	// The furthest data and the last ACK, for the engine when it takes
	// the flow back.
	__s32 ahead = seq_since(end, d->next_seq);
	if (ahead > 0) {
		d->next_seq = end;
		__sync_fetch_and_add(&d->advanced, (__u64)ahead);
	}
	if (th->ack)
		d->ack = bpf_ntohl(th->ack_seq);
	__u32 size = new_gso ? new_gso : (is_gso ? gso : payload);
	__u32 out = size ? (payload + size - 1) / size : 1;
	__sync_fetch_and_add(&d->packets, 1);
	__sync_fetch_and_add(&d->segs_in, segs_in);
	__sync_fetch_and_add(&d->segs_out, out ? out : 1);
	if (payload)
		__sync_fetch_and_add(&d->data_out, out);
	if (size == target)
		__sync_fetch_and_add(&d->full_out, payload / target);
	__sync_fetch_and_add(&d->bytes, payload);
	count_port(from_outer, skb->len, l4 + doff, segs_in, out);
	return bpf_redirect(out_ifindex, 0);

malformed:
	count(PX_R_MALFORMED);
	return TC_ACT_OK;
not_tcp:
	count(PX_R_NOT_TCP);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
