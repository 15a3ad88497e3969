/* SPDX-License-Identifier: Apache-2.0 OR MIT
 *
 * px_dpdk_gen: the generator and sink of `px bench gateway --datapath
 * dpdk`. On one lcore it replays the benchmark trace into a forwarder's
 * two ports (memif here) as fast as the forwarder takes it, and checks
 * and counts what comes back out of the other port.
 *
 * Port 0 faces the forwarder's outer port (eMTU side), port 1 its inner
 * port (iMTU side). Inbound frames (--in: the 1448-byte segments of the
 * legacy network's flows) are sent on port 0 and arrive, merged, on port
 * 1; outbound frames (--out: 8948-byte segments from the b-network) are
 * sent on port 1 and arrive, split, on port 0. Both at once for the mixed
 * trace, each direction's share of bytes kept as in the two traces.
 *
 * The generator:
 *   - loads each pcap into mbufs once; a frame is handed to TX with its
 *     reference count raised, so the driver's free leaves it to us and
 *     the same mbuf is sent again on the next lap (with a zero-copy memif
 *     client the peer reads it in place: no copy on this side);
 *   - before a frame leaves again, moves its flow on by one lap (sequence
 *     number + the flow's payload per lap, TSval and TSecr + the lap's
 *     length in ms, TCP checksum updated incrementally, RFC 1624), as
 *     px-bench's replay does: the forwarder sees one long stream per flow,
 *     never a retransmission. A frame still in the peer's ring (zero copy)
 *     is not touched until it has been read;
 *   - replays the flows a window at a time (--at-once): the window's
 *     frames in trace order, lap after lap for about 10 ms of trace time,
 *     then the next flows. The trace is written in trace time (800 flows
 *     of 1-2 Gbps, 1.2 Tbps together, each a 64 KB burst every ~350 us);
 *     one core forwards a fiftieth of that, so all 800 at once would play
 *     every flow fifty times slower than written (64 KB bursts 17 ms apart,
 *     which no sender makes) and leave each burst's tail to the merge
 *     timeout. After each window the next one gets as many frames a lap
 *     as the forwarder takes in a lap's trace time, so each flow moves at
 *     its trace rate whatever the forwarder; `--at-once all` is the old
 *     replay. The receivers acknowledge each lap (a lap behind), so no
 *     flow runs out of its receiver's window (1 GiB);
 *   - first sends the bulk flows' handshakes (--in-syn/--in-synack,
 *     --out-syn/--out-synack: SYNs from the sender's side, then SYN-ACKs
 *     from the receiver's) and waits until they have come through, so a
 *     gateway knows both ends' MSS before the data;
 *   - sends full bursts for --seconds, then stops and drains.
 *
 * The sink, for every frame that arrives: its size against the port's MTU,
 * its flow (5-tuple), that it left on the port its flow goes to, the
 * flow's payload bytes and order; and the IPv4 and TCP checksums, with our
 * own one's-complement sum, of every frame or of every Nth
 * (--verify-every N: reading every byte the forwarder wrote costs this
 * side more than forwarding costs a plain forwarder). At the end every
 * flow's payload bytes received must equal those sent.
 *
 * Figures: frames and bytes into the forwarder per second (from the first
 * data frame sent to the last one received), frames out, and the
 * conversion yield: on the inner side (port 1) the share of data frames
 * whose payload is --inner-mss (the paper's definition), on the outer side
 * the share at --outer-mss. The share of TX bursts the forwarder's ring did
 * not take whole shows who limited the round: near 0, the generator.
 *
 * One JSON object on stdout (also when a check failed: "ok": false and the
 * reasons). Exit 0 ok, 1 a check failed, 2 bad usage, bad input, or the
 * ports did not connect.
 *
 * Usage: px_dpdk_gen [EAL options] -- --in IN.pcap --in-syn S.pcap ... [options]
 * Build: bench/dpdk/build.sh OUT/px_dpdk_gen. Documentation: bench/dpdk/README.md.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_common.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_prefetch.h>
#include <rte_version.h>

#define PX_TOOL "px_dpdk_gen"
#include "px_dpdk_common.h"

#define MAX_BURST 256
#define RX_BURST 64
#define MAX_FAILS 8

enum { IN = 0, OUT = 1 };                 /* directions: inbound, outbound */
enum { P_OUTER = 0, P_INNER = 1 };        /* our ports, by the forwarder port they face */
enum { T_DATA = 0, T_SYN = 1, T_SYNACK = 2 };

struct cfg {
	const char *pcap[2][3];
	double seconds;
	unsigned burst, mtu, imtu, inner_mss, outer_mss, connect_ms, drain_ms, verify_every, linger;
	uint32_t at_once; /* flows per window; 0: fitted to the forwarder's pace */
	const char *outer, *inner;
};

/* A frame of the replay, its mbuf built once. */
struct gframe {
	struct rte_mbuf *m;
	uint8_t *data;
	uint32_t flow;    /* FIDX_NONE: not TCP/IPv4 data */
	uint32_t payload;
	uint32_t ord;     /* its flow's number in its direction (windows); 0: not data */
	uint32_t sends;   /* times a port has taken it */
	uint32_t written; /* laps its headers have been moved on by */
	uint16_t tcp_at;  /* offset of the TCP header; 0: not TCP/IPv4 */
	uint16_t ts_at;   /* offset of TSval; 0: no timestamps */
};

/* One direction's data frames, replayed a window of flows at a time: the
 * window's frames in trace order, lap after lap for `laps` laps (about
 * ON_NS of trace time), then the next flows. */
struct replay {
	struct gframe *f;
	size_t n;
	uint32_t ts_step;
	uint16_t port;
	uint64_t lap_bytes;
	uint64_t sent_frames, sent_bytes, sent_payload;
	uint64_t tx_calls, tx_short, in_flight_waits;
	/* The window. */
	uint32_t nflows, at_once, k, start, end, laps, win_lap;
	uint32_t *win, *per_flow; /* frames of the window; frames of each flow */
	uint32_t *flow_of_ord;    /* flow id of each flow number */
	size_t nwin, at;
	uint64_t lap_ns, win_t0, windows, k_sum, trace_ns, wall_ns;
	size_t budget; /* fitted: frames a window's lap should hold */
};

struct gflow {
	uint32_t step; /* payload bytes per lap */
	uint32_t ord;  /* its number in its direction */
	uint32_t laps; /* laps of it sent */
	struct gframe *ack; /* its receiver's ACK (the -synack pcap), or NULL */
	uint32_t ack0;      /* that ACK's acknowledgment number as loaded */
	uint8_t dir;
	uint8_t hi_set;
	uint32_t hi;
	uint64_t sent, recv, ooo;
};

struct port_stats {
	uint64_t rx_frames, rx_bytes, rx_data, rx_full, rx_payload, max_frame;
	uint64_t oversize, bad_csum, verified, nodata, unknown, misrouted, other;
};

struct gen {
	struct cfg c;
	uint16_t port[2];
	struct replay r[2];
	int active[2];
	struct fidx flows; /* of struct gflow */
	struct port_stats ps[2];
	double tsc_hz;
	uint64_t t_first_tx, t_last_rx;
	unsigned nfails;
	char fails[MAX_FAILS][256];
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void __attribute__((format(printf, 2, 3))) fail(struct gen *g, const char *fmt, ...)
{
	if (g->nfails < MAX_FAILS) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(g->fails[g->nfails], sizeof(g->fails[0]), fmt, ap);
		va_end(ap);
	}
	g->nfails++;
}

/* ------------------------------------------------------------------ */
/* Moving a frame on by one lap.                                        */

/* RFC 1624: HC' = ~(~HC + ~m + m'), one 16-bit word. */
static inline uint16_t csum_update16(uint16_t hc, uint16_t old, uint16_t new)
{
	uint32_t s = (uint16_t)~hc + (uint32_t)(uint16_t)~old + new;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

static inline uint16_t csum_update32(uint16_t hc, uint32_t old, uint32_t new)
{
	hc = csum_update16(hc, (uint16_t)(old >> 16), (uint16_t)(new >> 16));
	return csum_update16(hc, (uint16_t)old, (uint16_t)new);
}

static inline void wr32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* Adds `by` to the 32-bit field at p, keeping the checksum at *hc right. */
static inline void bump32(uint8_t *p, uint32_t by, uint16_t *hc)
{
	uint32_t old = be32(p), new = old + by;
	*hc = csum_update32(*hc, old, new);
	wr32(p, new);
}

/* How long (trace time) a window of flows is replayed before the next
 * (px-bench's vs_dpdk::paced::ON_NS), and its size before the first fit. */
#define ON_NS 10000000ull
#define FIRST_WINDOW 8u
/* A window's lap holds at least this many frames (more flows if need be):
 * a zero-copy memif client holds a sent mbuf until the peer has read its
 * slot, and a frame is not moved on while it is held: with a short lap
 * the generator waits for its own frames, and the forwarder's ring holds
 * at most a lap. */
#define MIN_LAP_FRAMES 512u

static void advance(const struct gen *g, const struct replay *r, struct gframe *f)
{
	uint8_t *th = f->data + f->tcp_at;
	uint16_t hc = be16(th + 16);
	const struct gflow *fl = fidx_at(&g->flows, f->flow);
	bump32(th + 4, fl->step, &hc);
	if (f->ts_at) {
		bump32(f->data + f->ts_at, r->ts_step, &hc);
		bump32(f->data + f->ts_at + 4, r->ts_step, &hc);
	}
	th[16] = (uint8_t)(hc >> 8);
	th[17] = (uint8_t)hc;
}

/* Offset of the TSval of a TCP header at th (thl bytes), or 0. */
static uint16_t find_tsval(const uint8_t *th, uint32_t thl, uint32_t tcp_at)
{
	uint32_t i = 20;
	while (i < thl) {
		uint8_t kind = th[i];
		if (kind == 0)
			break;
		if (kind == 1) {
			i++;
			continue;
		}
		if (i + 1 >= thl || th[i + 1] < 2 || i + th[i + 1] > thl)
			break;
		if (kind == 8 && th[i + 1] == 10)
			return (uint16_t)(tcp_at + i + 2);
		i += th[i + 1];
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Windows of flows (px-bench's vs_dpdk::paced, where the reason is).   */

/* Frames a window's lap should hold so that it takes as long as the
 * trace's lap (lap_ns): the forwarder took `frames` in wall_ns. */
static size_t lap_budget(uint64_t frames, uint64_t wall_ns, uint64_t lap_ns)
{
	return (size_t)((double)frames * (double)lap_ns / (double)(wall_ns ? wall_ns : 1));
}

/* Makes the flows from `start` (wrapping to 0) the window: k of them,
 * more while a lap would hold fewer than the budget's frames (fitted) or
 * MIN_LAP_FRAMES; its frames in trace order. */
static void open_window(struct replay *r, uint32_t start)
{
	r->start = start >= r->nflows ? 0 : start;
	size_t frames = 0, least = r->budget > MIN_LAP_FRAMES ? r->budget : MIN_LAP_FRAMES;
	r->end = r->start;
	while (r->end < r->nflows && (r->end - r->start < r->k || frames < least))
		frames += r->per_flow[r->end++];
	r->nwin = 0;
	for (size_t i = 0; i < r->n; i++)
		if (r->f[i].ord >= r->start && r->f[i].ord < r->end)
			r->win[r->nwin++] = (uint32_t)i;
	r->at = 0;
	r->win_lap = 0;
	r->win_t0 = rte_rdtsc();
	r->windows++;
	r->k_sum += r->end - r->start;
}

/* The receivers of the window's flows acknowledge what they got, up to a
 * lap behind: a receiver that never acknowledged would close its window
 * after 1 GiB (65535 << 14), and a gateway must not merge past it. An ACK
 * still in the peer's ring waits for the next lap. */
static void acknowledge(struct gen *g, struct replay *r)
{
	struct rte_mbuf *b[MAX_BURST];
	unsigned k = 0;
	/* Nothing else is sent on that port in an inbound or outbound round:
	 * the driver lets go of the ACKs the peer has read when it sends. */
	rte_eth_tx_burst(g->port[!r->port], 0, b, 0);
	for (uint32_t o = r->start; o < r->end && k < MAX_BURST; o++) {
		if (r->flow_of_ord[o] == FIDX_NONE)
			continue;
		struct gflow *fl = fidx_at(&g->flows, r->flow_of_ord[o]);
		fl->laps++;
		struct gframe *a = fl->ack;
		if (!a || fl->laps < 2 || rte_mbuf_refcnt_read(a->m) != 1)
			continue;
		uint8_t *th = a->data + a->tcp_at;
		uint16_t hc = be16(th + 16);
		uint32_t old = be32(th + 8), new = fl->ack0 + fl->step * (fl->laps - 1);
		hc = csum_update32(hc, old, new);
		wr32(th + 8, new);
		th[16] = (uint8_t)(hc >> 8);
		th[17] = (uint8_t)hc;
		rte_mbuf_refcnt_update(a->m, 1);
		b[k++] = a->m;
	}
	if (k == 0)
		return;
	uint16_t n = rte_eth_tx_burst(g->port[!r->port], 0, b, (uint16_t)k);
	for (unsigned j = n; j < k; j++)
		rte_mbuf_refcnt_update(b[j], -1);
}

/* After a lap of the window: the next lap, or the next window. */
static void window_lap_done(struct gen *g, struct replay *r)
{
	acknowledge(g, r);
	r->at = 0;
	if (++r->win_lap < r->laps)
		return;
	uint64_t wall_ns = (uint64_t)((double)(rte_rdtsc() - r->win_t0) / g->tsc_hz * 1e9);
	r->trace_ns += r->laps * r->lap_ns;
	r->wall_ns += wall_ns;
	if (r->at_once == 0) {
		r->k = 1;
		r->budget = lap_budget((uint64_t)r->nwin * r->laps, wall_ns, r->lap_ns);
	}
	do
		open_window(r, r->end);
	while (r->nwin == 0);
}

/* ------------------------------------------------------------------ */
/* Loading.                                                             */

static unsigned room_for(uint32_t max_len)
{
	return RTE_PKTMBUF_HEADROOM + RTE_ALIGN_CEIL(RTE_MAX(max_len, 2048u - RTE_PKTMBUF_HEADROOM), 64);
}

/* Copies a trace's frames into mbufs of `mp`. */
static struct gframe *build(const struct trace *t, struct rte_mempool *mp)
{
	struct gframe *v = calloc(t->n, sizeof(*v));
	if (!v)
		die(EXIT_INPUT, "out of memory");
	for (size_t i = 0; i < t->n; i++) {
		struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
		if (!m)
			die(EXIT_INPUT, "mbuf pool %s exhausted", mp->name);
		char *d = rte_pktmbuf_append(m, (uint16_t)t->f[i].len);
		if (!d)
			die(EXIT_INPUT, "%s: frame %zu (%u bytes) does not fit an mbuf", t->path, i + 1, t->f[i].len);
		memcpy(d, t->f[i].data, t->f[i].len);
		v[i].m = m;
		v[i].data = (uint8_t *)d;
		v[i].flow = FIDX_NONE;
	}
	return v;
}

/* The data frames of direction d: flows, payload, where to move them on. */
static void index_data(struct gen *g, int d, const struct trace *t)
{
	struct replay *r = &g->r[d];
	r->flow_of_ord = calloc(r->n + 1, sizeof(*r->flow_of_ord));
	if (!r->flow_of_ord)
		die(EXIT_INPUT, "out of memory");
	for (size_t i = 0; i < r->n; i++) {
		struct gframe *f = &r->f[i];
		struct pinfo pi;
		parse_frame(f->data, t->f[i].len, t->f[i].len, &pi);
		r->lap_bytes += t->f[i].len;
		if (pi.kind != K_TCP4 || pi.payload == 0)
			continue;
		uint32_t id = fidx_id(&g->flows, pi.key, 1);
		struct gflow *fl = fidx_at(&g->flows, id);
		if (fl->sent == 0 && fl->step == 0) {
			fl->dir = (uint8_t)d;
			fl->ord = r->nflows++;
			r->flow_of_ord[fl->ord] = id;
		} else if (fl->dir != d)
			die(EXIT_INPUT, "%s: a flow's data goes both ways", t->path);
		fl->step += pi.payload;
		f->flow = id;
		f->ord = fl->ord;
		f->payload = pi.payload;
		f->tcp_at = (uint16_t)(pi.l2 + pi.l3);
		f->ts_at = find_tsval(f->data + f->tcp_at, pi.l4, f->tcp_at);
	}
	/* px-bench's PassStep: the lap's length on the trace's 1 ms clock. */
	r->ts_step = (uint32_t)(t->f[t->n - 1].ts_ns / 1000000) + 1;
	/* The windows: a lap's trace time (first frame to one mean gap after
	 * the last), laps per window, the first window's size. */
	if (r->nflows == 0) {
		r->nflows = 1;
		r->flow_of_ord[0] = FIDX_NONE;
	}
	r->per_flow = calloc(r->nflows, sizeof(*r->per_flow));
	if (!r->per_flow)
		die(EXIT_INPUT, "out of memory");
	for (size_t i = 0; i < r->n; i++)
		r->per_flow[r->f[i].ord]++;
	uint64_t span = t->f[t->n - 1].ts_ns - t->f[0].ts_ns;
	r->lap_ns = t->n > 1 ? span * t->n / (t->n - 1) : 1;
	if (r->lap_ns == 0)
		r->lap_ns = 1;
	r->laps = (uint32_t)((ON_NS + r->lap_ns - 1) / r->lap_ns);
	if (r->laps == 0)
		r->laps = 1;
	r->at_once = g->c.at_once;
	r->k = r->at_once ? r->at_once : FIRST_WINDOW;
	if (r->k > r->nflows)
		r->k = r->nflows;
	r->win = malloc(r->n * sizeof(*r->win));
	if (!r->win)
		die(EXIT_INPUT, "out of memory");
	open_window(r, 0);
}

/* The receivers' ACKs among the -synack frames (ACK, no SYN, no data):
 * each becomes its flow's, moved on as the flow's laps go by. */
static void find_acks(struct gen *g, struct gframe *f, const struct trace *t)
{
	for (size_t i = 0; i < t->n; i++) {
		struct pinfo pi;
		parse_frame(f[i].data, t->f[i].len, t->f[i].len, &pi);
		if (pi.kind != K_TCP4 || pi.payload || (pi.flags & 0x12) != 0x10)
			continue;
		/* The data flow's key: source and destination swapped. */
		uint8_t k[KEYLEN];
		k[0] = pi.key[0];
		memcpy(k + 1, pi.key + 17, 16);
		memcpy(k + 17, pi.key + 1, 16);
		memcpy(k + 33, pi.key + 35, 2);
		memcpy(k + 35, pi.key + 33, 2);
		uint32_t id = fidx_id(&g->flows, k, 0);
		if (id == FIDX_NONE)
			continue;
		struct gflow *fl = fidx_at(&g->flows, id);
		f[i].tcp_at = (uint16_t)(pi.l2 + pi.l3);
		fl->ack = &f[i];
		fl->ack0 = be32(f[i].data + f[i].tcp_at + 8);
	}
}

/* ------------------------------------------------------------------ */
/* The sink.                                                            */

static void sink(struct gen *g, int p, struct rte_mbuf **b, unsigned nb, uint64_t now)
{
	struct port_stats *s = &g->ps[p];
	uint32_t limit = (p == P_INNER ? g->c.imtu : g->c.mtu) + 14;
	uint32_t full = p == P_INNER ? g->c.inner_mss : g->c.outer_mss;
	for (unsigned i = 0; i < nb; i++) {
		struct rte_mbuf *m = b[i];
		/* 22.11's zero-copy memif RX leaves pkt_len short on a frame
		 * that spans descriptors: count the segments' bytes. */
		uint32_t len = m->data_len;
		for (const struct rte_mbuf *sg = m->next; sg; sg = sg->next)
			len += sg->data_len;
		m->pkt_len = len;
		s->rx_frames++;
		s->rx_bytes += len;
		if (len > s->max_frame)
			s->max_frame = len;
		if (len > limit && s->oversize++ == 0)
			fail(g, "%s side: a %u-byte frame, above the %u-byte limit", p ? "inner" : "outer", len, limit);
		struct pinfo pi;
		parse_frame(rte_pktmbuf_mtod(m, const uint8_t *), m->data_len, len, &pi);
		if (pi.kind != K_TCP4) {
			s->other++;
			s->nodata++;
			continue;
		}
		const char *why;
		if (g->c.verify_every && s->rx_frames % g->c.verify_every == 0) {
			s->verified++;
			if (verify_csums(m, &pi, &why) != 0) {
				if (s->bad_csum++ == 0)
					fail(g, "%s side: bad %s", p ? "inner" : "outer", why);
				continue;
			}
		}
		if (pi.payload == 0) {
			s->nodata++;
			continue;
		}
		uint32_t id = fidx_id(&g->flows, pi.key, 0);
		if (id == FIDX_NONE) {
			if (s->unknown++ == 0) {
				char k[128];
				key_str(pi.key, k, sizeof(k));
				fail(g, "%s side: data of a flow never sent (%s)", p ? "inner" : "outer", k);
			}
			continue;
		}
		struct gflow *fl = fidx_at(&g->flows, id);
		/* Inbound flows are sent on port 0 and arrive on port 1. */
		if (fl->dir == p && s->misrouted++ == 0)
			fail(g, "%s side: data came back out of the port it was sent to", p ? "inner" : "outer");
		fl->ooo += (uint64_t)stream_advance(&fl->hi, &fl->hi_set, &fl->recv, pi.seq, pi.payload);
		s->rx_data++;
		s->rx_payload += pi.payload;
		s->rx_full += pi.payload == full;
		g->t_last_rx = now;
	}
	rte_pktmbuf_free_bulk(b, nb);
}

static unsigned poll_rx(struct gen *g)
{
	struct rte_mbuf *b[RX_BURST];
	unsigned got = 0;
	for (int p = 0; p < 2; p++) {
		uint16_t nb = rte_eth_rx_burst(g->port[p], 0, b, RX_BURST);
		if (nb) {
			sink(g, p, b, nb, rte_rdtsc());
			got += nb;
		}
	}
	return got;
}

/* ------------------------------------------------------------------ */
/* The generator.                                                       */

/* Sends up to one burst of r's frames (never across the end of a lap).
 * Returns the frames the port took. */
static unsigned send_burst(struct gen *g, struct replay *r)
{
	struct rte_mbuf *b[MAX_BURST];
	unsigned k = 0, want = g->c.burst;
	if (want > r->nwin - r->at)
		want = (unsigned)(r->nwin - r->at);
	for (; k < want; k++) {
		struct gframe *f = &r->f[r->win[r->at + k]];
		if (f->written < f->sends) {
			/* Still in the peer's ring (zero copy): not ours to change. */
			if (rte_mbuf_refcnt_read(f->m) != 1) {
				r->in_flight_waits++;
				break;
			}
			if (f->tcp_at && f->flow != FIDX_NONE)
				advance(g, r, f);
			f->written++;
		}
		rte_mbuf_refcnt_update(f->m, 1);
		b[k] = f->m;
	}
	/* The next burst's frames and mbuf headers, on their way to the cache. */
	for (size_t j = r->at + k; j < r->at + k + g->c.burst && j < r->nwin; j++) {
		const struct gframe *f = &r->f[r->win[j]];
		rte_prefetch0(f->m);
		rte_prefetch0(f->data);
		rte_prefetch0(f->data + 64);
	}
	if (k == 0) {
		/* The driver lets go of what the peer has read when it sends. */
		rte_eth_tx_burst(g->port[r->port], 0, b, 0);
		return 0;
	}
	uint16_t n = rte_eth_tx_burst(g->port[r->port], 0, b, (uint16_t)k);
	r->tx_calls++;
	r->tx_short += n < k;
	for (unsigned j = n; j < k; j++)
		rte_mbuf_refcnt_update(b[j], -1);
	for (unsigned j = 0; j < n; j++) {
		struct gframe *f = &r->f[r->win[r->at + j]];
		f->sends++;
		r->sent_bytes += f->m->data_len;
		if (f->flow != FIDX_NONE) {
			((struct gflow *)fidx_at(&g->flows, f->flow))->sent += f->payload;
			r->sent_payload += f->payload;
		}
	}
	if (n && !g->t_first_tx)
		g->t_first_tx = rte_rdtsc();
	r->sent_frames += n;
	r->at += n;
	if (r->at == r->nwin)
		window_lap_done(g, r);
	return n;
}

/* Sends a handshake pcap's frames on port p (every frame once, as the ring
 * takes them), then waits until as many frames without payload have come
 * out on the other side. */
static void handshake(struct gen *g, struct gframe *f, size_t n, int p, const char *what)
{
	uint64_t before = g->ps[!p].nodata;
	size_t at = 0;
	uint64_t deadline = rte_rdtsc() + (uint64_t)(2.0 * g->tsc_hz);
	while (at < n && !stop) {
		struct rte_mbuf *b[MAX_BURST];
		unsigned k = (unsigned)RTE_MIN(n - at, (size_t)MAX_BURST);
		for (unsigned j = 0; j < k; j++) {
			rte_mbuf_refcnt_update(f[at + j].m, 1);
			b[j] = f[at + j].m;
		}
		uint16_t s = rte_eth_tx_burst(g->port[p], 0, b, (uint16_t)k);
		for (unsigned j = s; j < k; j++)
			rte_mbuf_refcnt_update(b[j], -1);
		at += s;
		poll_rx(g);
		if (rte_rdtsc() > deadline)
			break;
	}
	while (g->ps[!p].nodata - before < n && rte_rdtsc() < deadline && !stop)
		poll_rx(g);
	uint64_t got = g->ps[!p].nodata - before;
	if (got < n)
		fail(g, "handshake: %" PRIu64 " of %zu %s came through", got, n, what);
}

/* ------------------------------------------------------------------ */

/* Starts both ports and waits for their links. A memif client's start
 * fails until its server listens: retried until the deadline. Once the
 * socket is connected there is no second try: a server that listens but
 * has not started its port yet answers with a disconnect, and 22.11's
 * zero-copy client cannot connect twice (its first connection closes the
 * memseg file descriptor it hands the server). Start the forwarder's
 * ports first (px bench gateway waits for the forwarder to say so). */
static void connect_ports(const struct gen *g, uint64_t deadline)
{
	int started[2] = {0, 0};
	for (;;) {
		int up = 0;
		for (int p = 0; p < 2; p++) {
			struct rte_eth_link l;
			if (!started[p])
				started[p] = rte_eth_dev_start(g->port[p]) == 0;
			else if (rte_eth_link_get_nowait(g->port[p], &l) == 0 && l.link_status)
				up++;
		}
		if (up == 2)
			return;
		if (rte_rdtsc() > deadline || stop)
			die(EXIT_INPUT,
			    "the ports did not connect within %u ms (%s)", g->c.connect_ms,
			    started[0] && started[1] ? "the forwarder refused them: were its ports started?"
						     : "no memif server listening");
		rte_delay_ms(10);
	}
}

static void usage(FILE *o)
{
	fprintf(o,
		"usage: px_dpdk_gen [EAL options] -- [--in F --in-syn F --in-synack F]\n"
		"                   [--out F --out-syn F --out-synack F] [options]\n"
		"  --in FILE              inbound data frames, sent on port 0 (outer side)\n"
		"  --in-syn, --in-synack  their flows' SYNs (port 0) and SYN-ACKs (port 1)\n"
		"  --out FILE             outbound data frames, sent on port 1 (inner side)\n"
		"  --out-syn, --out-synack  their SYNs (port 1) and SYN-ACKs (port 0)\n"
		"                         (--in and --out together: the mixed trace)\n"
		"  --seconds S            how long to send data (2)\n"
		"  --burst N              frames per TX burst (32)\n"
		"  --mtu N, --imtu N      the outer and inner IP MTUs the frames must fit (1500, 9000)\n"
		"  --inner-mss N          payload of a full inner-side segment, for the yield (8948)\n"
		"  --outer-mss N          payload of a full outer-side segment (1448)\n"
		"  --verify-every N       check the checksums of every Nth frame arriving on a\n"
		"                         port (1: every frame, the default; 0: none)\n"
		"  --connect-ms MS        how long to wait for the forwarder's ports (10000)\n"
		"  --drain-ms MS          after sending, wait this long for frames still coming (500)\n"
		"  --outer NAME, --inner NAME  our ports by device name (default: ports 0 and 1)\n"
		"  --at-once N|all|fit    flows sent at once, a window at a time, each for about\n"
		"                         10 ms of trace time at its trace rate (fit, the default:\n"
		"                         the window's size follows the forwarder's pace, so each\n"
		"                         flow moves as fast as in the trace; all: every flow at\n"
		"                         once, slowed by the forwarder's pace against the trace's)\n"
		"  --linger               after the JSON, keep the ports open until stdin closes\n"
		"                         (stop the forwarder first: see bench/dpdk/README.md)\n"
		"One JSON object on stdout. Exit 0 ok, 1 a check failed, 2 bad usage/input/ports.\n");
}

static void parse_args(int argc, char **argv, struct cfg *c)
{
	static const struct option opts[] = {
		{"in", required_argument, 0, 'a'},
		{"in-syn", required_argument, 0, 'b'},
		{"in-synack", required_argument, 0, 'c'},
		{"out", required_argument, 0, 'd'},
		{"out-syn", required_argument, 0, 'e'},
		{"out-synack", required_argument, 0, 'f'},
		{"seconds", required_argument, 0, 'S'},
		{"burst", required_argument, 0, 'B'},
		{"mtu", required_argument, 0, 'm'},
		{"imtu", required_argument, 0, 'i'},
		{"inner-mss", required_argument, 0, 'I'},
		{"outer-mss", required_argument, 0, 'O'},
		{"verify-every", required_argument, 0, 'v'},
		{"connect-ms", required_argument, 0, 'C'},
		{"drain-ms", required_argument, 0, 'D'},
		{"outer", required_argument, 0, 'o'},
		{"inner", required_argument, 0, 'n'},
		{"linger", no_argument, 0, 'L'},
		{"at-once", required_argument, 0, 'A'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	int o;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'a': c->pcap[IN][T_DATA] = optarg; break;
		case 'b': c->pcap[IN][T_SYN] = optarg; break;
		case 'c': c->pcap[IN][T_SYNACK] = optarg; break;
		case 'd': c->pcap[OUT][T_DATA] = optarg; break;
		case 'e': c->pcap[OUT][T_SYN] = optarg; break;
		case 'f': c->pcap[OUT][T_SYNACK] = optarg; break;
		case 'S': {
			char *end;
			c->seconds = strtod(optarg, &end);
			if (*end || !(c->seconds > 0 && c->seconds <= 3600))
				die(EXIT_INPUT, "bad value for --seconds: %s", optarg);
			break;
		}
		case 'B': c->burst = parse_uint(optarg, "--burst"); break;
		case 'm': c->mtu = parse_uint(optarg, "--mtu"); break;
		case 'i': c->imtu = parse_uint(optarg, "--imtu"); break;
		case 'I': c->inner_mss = parse_uint(optarg, "--inner-mss"); break;
		case 'O': c->outer_mss = parse_uint(optarg, "--outer-mss"); break;
		case 'v': c->verify_every = parse_uint(optarg, "--verify-every"); break;
		case 'C': c->connect_ms = parse_uint(optarg, "--connect-ms"); break;
		case 'D': c->drain_ms = parse_uint(optarg, "--drain-ms"); break;
		case 'o': c->outer = optarg; break;
		case 'n': c->inner = optarg; break;
		case 'L': c->linger = 1; break;
		case 'A':
			c->at_once = strcmp(optarg, "all") == 0 ? UINT32_MAX
				     : strcmp(optarg, "fit") == 0 ? 0
								  : parse_uint(optarg, "--at-once");
			if (c->at_once == 0 && strcmp(optarg, "fit") != 0)
				die(EXIT_INPUT, "--at-once takes a number of flows (1 or more), all or fit");
			break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(EXIT_INPUT);
		}
	}
	if (optind != argc) {
		usage(stderr);
		exit(EXIT_INPUT);
	}
	for (int d = 0; d < 2; d++) {
		int given = !!c->pcap[d][T_DATA] + !!c->pcap[d][T_SYN] + !!c->pcap[d][T_SYNACK];
		if (given != 0 && given != 3)
			die(EXIT_INPUT, "give all three of --%s, --%s-syn and --%s-synack", d ? "out" : "in",
			    d ? "out" : "in", d ? "out" : "in");
	}
	if (!c->pcap[IN][T_DATA] && !c->pcap[OUT][T_DATA]) {
		usage(stderr);
		die(EXIT_INPUT, "give the inbound frames (--in …), the outbound ones (--out …), or both");
	}
	if (c->burst < 1 || c->burst > MAX_BURST)
		die(EXIT_INPUT, "--burst must be 1..%d", MAX_BURST);
	if (c->mtu < 576 || c->imtu < c->mtu || c->imtu > 65535)
		die(EXIT_INPUT, "need 576 <= --mtu <= --imtu <= 65535");
}

static double share(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

static void print_json(struct gen *g, uint64_t t_end_tx, const uint32_t laps[2])
{
	double sec = g->t_last_rx > g->t_first_tx ? (g->t_last_rx - g->t_first_tx) / g->tsc_hz : 0.0;
	double tx_sec = t_end_tx > g->t_first_tx ? (t_end_tx - g->t_first_tx) / g->tsc_hz : 0.0;
	uint64_t frames_in = 0, bytes_in = 0, payload_in = 0, calls = 0, shorts = 0, waits = 0;
	for (int d = 0; d < 2; d++) {
		frames_in += g->r[d].sent_frames;
		bytes_in += g->r[d].sent_bytes;
		payload_in += g->r[d].sent_payload;
		calls += g->r[d].tx_calls;
		shorts += g->r[d].tx_short;
		waits += g->r[d].in_flight_waits;
	}
	uint64_t frames_out = g->ps[0].rx_frames + g->ps[1].rx_frames;
	uint64_t payload_out = g->ps[0].rx_payload + g->ps[1].rx_payload;
	uint64_t flows = 0, exact = 0, ooo = 0;
	for (uint32_t i = 0; i < g->flows.n; i++) {
		const struct gflow *fl = fidx_at(&g->flows, i);
		if (!fl->sent)
			continue;
		flows++;
		exact += fl->sent == fl->recv;
		ooo += fl->ooo;
	}
	printf("{\"tool\":\"px_dpdk_gen\",\"dpdk_version\":\"%s\",\"lcore\":%u,\"tsc_hz\":%.0f,\"burst\":%u,"
	       "\"verify_every\":%u,\"directions\":\"%s\",\"seconds_requested\":%.3f,\"seconds\":%.9f,\"tx_seconds\":%.9f,",
	       rte_version(), rte_lcore_id(), g->tsc_hz, g->c.burst, g->c.verify_every,
	       g->active[IN] && g->active[OUT] ? "mixed" : g->active[IN] ? "inbound" : "outbound",
	       g->c.seconds, sec, tx_sec);
	printf("\"frames_in\":%" PRIu64 ",\"bytes_in\":%" PRIu64 ",\"payload_in\":%" PRIu64
	       ",\"frames_out\":%" PRIu64 ",\"payload_out\":%" PRIu64 ",",
	       frames_in, bytes_in, payload_in, frames_out, payload_out);
	printf("\"gbps_in\":%.6f,\"mpps_in\":%.6f,\"mpps_out\":%.6f,\"payload_gbps\":%.6f,",
	       sec > 0 ? bytes_in * 8.0 / sec / 1e9 : 0.0, sec > 0 ? frames_in / sec / 1e6 : 0.0,
	       sec > 0 ? frames_out / sec / 1e6 : 0.0, sec > 0 ? payload_out * 8.0 / sec / 1e9 : 0.0);
	printf("\"inner_yield\":%.6f,\"outer_yield\":%.6f,\"flows\":%" PRIu64 ",\"flows_exact\":%" PRIu64
	       ",\"out_of_order\":%" PRIu64 ",\"tx_bursts\":%" PRIu64 ",\"tx_short_share\":%.6f"
	       ",\"in_flight_waits\":%" PRIu64 ",\"laps\":[%u,%u],",
	       share(g->ps[P_INNER].rx_full, g->ps[P_INNER].rx_data),
	       share(g->ps[P_OUTER].rx_full, g->ps[P_OUTER].rx_data), flows, exact, ooo, calls, share(shorts, calls),
	       waits, laps[IN], laps[OUT]);
	printf("\"at_once_mean\":[%.3f,%.3f],\"window_laps\":[%u,%u],\"flow_pace\":[%.4f,%.4f],",
	       share(g->r[IN].k_sum, g->r[IN].windows), share(g->r[OUT].k_sum, g->r[OUT].windows), g->r[IN].laps,
	       g->r[OUT].laps, share(g->r[IN].trace_ns, g->r[IN].wall_ns), share(g->r[OUT].trace_ns, g->r[OUT].wall_ns));
	printf("\"ports\":[");
	for (int p = 0; p < 2; p++) {
		const struct port_stats *s = &g->ps[p];
		const struct replay *r = &g->r[p == P_OUTER ? IN : OUT];
		printf("%s{\"side\":\"%s\",\"tx_frames\":%" PRIu64 ",\"tx_bytes\":%" PRIu64 ",\"rx_frames\":%" PRIu64
		       ",\"rx_bytes\":%" PRIu64 ",\"rx_data_frames\":%" PRIu64 ",\"rx_full_frames\":%" PRIu64
		       ",\"rx_payload\":%" PRIu64 ",\"max_frame\":%" PRIu64 ",\"oversize\":%" PRIu64
		       ",\"verified\":%" PRIu64 ",\"bad_csum\":%" PRIu64 ",\"no_payload\":%" PRIu64 ",\"not_tcp4\":%" PRIu64
		       ",\"unknown_flow\":%" PRIu64 ",\"misrouted\":%" PRIu64 "}",
		       p ? "," : "", p ? "inner" : "outer", r->sent_frames, r->sent_bytes, s->rx_frames, s->rx_bytes,
		       s->rx_data, s->rx_full, s->rx_payload, s->max_frame, s->oversize, s->verified, s->bad_csum, s->nodata,
		       s->other, s->unknown, s->misrouted);
	}
	printf("],\"ok\":%s,\"failures\":[", g->nfails ? "false" : "true");
	for (unsigned i = 0; i < g->nfails && i < MAX_FAILS; i++) {
		printf("%s\"", i ? "," : "");
		for (const char *q = g->fails[i]; *q; q++)
			if (*q == '"' || *q == '\\')
				printf("\\%c", *q);
			else if ((unsigned char)*q >= 0x20)
				putchar(*q);
		putchar('"');
	}
	printf("]}\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct gen g;
	memset(&g, 0, sizeof(g));
	g.c = (struct cfg){.seconds = 2, .burst = 32, .mtu = 1500, .imtu = 9000, .inner_mss = 8948,
			   .outer_mss = 1448, .connect_ms = 10000, .drain_ms = 500, .verify_every = 1};
	int dd = px_app_args(argc, argv, usage, "the traces");
	parse_args(argc - dd, argv + dd, &g.c);
	px_app_args_done(argv, dd);

	/* The traces first (untimed), so that EAL gets memory sized to them. */
	struct trace t[2][3];
	memset(t, 0, sizeof(t));
	double need = 0;
	uint32_t max_len[2] = {0, 0};
	for (int d = 0; d < 2; d++) {
		if (!g.c.pcap[d][T_DATA])
			continue;
		g.active[d] = 1;
		for (int k = 0; k < 3; k++) {
			pcap_load(g.c.pcap[d][k], &t[d][k]);
			max_len[d] = RTE_MAX(max_len[d], t[d][k].max_len);
		}
		size_t n = t[d][0].n + t[d][1].n + t[d][2].n;
		need += (double)n * (room_for(max_len[d]) + sizeof(struct rte_mbuf) + 192);
	}
	/* RX pools: 4096 mbufs each (a zero-copy memif client keeps its ring
	 * of 1024 filled), each an iMTU frame in one segment, whatever the
	 * port: a forwarder may pass a large frame out of the outer port. */
	unsigned rx_room = room_for(g.c.imtu + 18);
	need += 2 * 4096.0 * (rx_room + sizeof(struct rte_mbuf) + 192);
	/* Objects carry a mempool header and trailer and are cache-aligned;
	 * EAL, the ethdevs and memif take their share. */
	unsigned mem_mb = (unsigned)(need * 1.5 / 1048576.0) + 256;
	int has_m = 0;
	for (int i = 1; i < dd; i++)
		if (strcmp(argv[i], "-m") == 0 || strncmp(argv[i], "--socket-mem", 12) == 0)
			has_m = 1;
	char mem_s[16];
	snprintf(mem_s, sizeof(mem_s), "%u", mem_mb);
	char **eal = calloc((size_t)dd + 3, sizeof(*eal));
	if (!eal)
		die(EXIT_INPUT, "out of memory");
	memcpy(eal, argv, (size_t)dd * sizeof(*eal));
	int neal = dd;
	if (!has_m) {
		eal[neal++] = "-m";
		eal[neal++] = mem_s;
	}

	rte_openlog_stream(stderr);
	if (rte_eal_init(neal, eal) < 0)
		die(EXIT_INPUT, "rte_eal_init failed: %s", rte_strerror(rte_errno));
	px_eal_note_runtime_dir();
	px_on_stop_signals(on_signal);
	g.tsc_hz = (double)rte_get_tsc_hz();
	if (rte_eth_dev_count_avail() < 2)
		die(EXIT_INPUT, "need two ports (facing the outer and the inner port), have %u",
		    rte_eth_dev_count_avail());
	g.port[P_OUTER] = px_port_by_name(g.c.outer, 0);
	g.port[P_INNER] = px_port_by_name(g.c.inner, 1);
	if (g.port[0] == g.port[1])
		die(EXIT_INPUT, "the two ports are the same port");

	fidx_init(&g.flows, sizeof(struct gflow));
	struct gframe *hs[2][3] = {{0}};
	for (int d = 0; d < 2; d++) {
		if (!g.active[d])
			continue;
		char name[32];
		snprintf(name, sizeof(name), "px_gen_%s", d ? "out" : "in");
		size_t n = t[d][0].n + t[d][1].n + t[d][2].n;
		struct rte_mempool *mp = px_mkpool(name, (unsigned)n, room_for(max_len[d]));
		for (int k = 0; k < 3; k++)
			hs[d][k] = build(&t[d][k], mp);
		g.r[d] = (struct replay){.f = hs[d][T_DATA], .n = t[d][T_DATA].n, .port = d == IN ? P_OUTER : P_INNER};
		index_data(&g, d, &t[d][T_DATA]);
		find_acks(&g, hs[d][T_SYNACK], &t[d][T_SYNACK]);
	}
	struct rte_mempool *rx_pool[2] = {px_mkpool("px_gen_rx_outer", 4096, rx_room),
					  px_mkpool("px_gen_rx_inner", 4096, rx_room)};
	for (int p = 0; p < 2; p++)
		px_port_setup(g.port[p], rx_pool[p]);
	connect_ports(&g, rte_rdtsc() + (uint64_t)(g.c.connect_ms * g.tsc_hz / 1e3));
	fprintf(stderr, "px_dpdk_gen: ports up; handshakes, then %.3f s of %s data\n", g.c.seconds,
		g.active[IN] && g.active[OUT] ? "mixed" : g.active[IN] ? "inbound" : "outbound");

	/* SYNs from each flow's sender, then SYN-ACKs from its receiver. */
	for (int k = T_SYN; k <= T_SYNACK; k++)
		for (int d = 0; d < 2; d++)
			if (g.active[d]) {
				int sender = d == IN ? P_OUTER : P_INNER;
				handshake(&g, hs[d][k], t[d][k].n, k == T_SYN ? sender : !sender,
					  k == T_SYN ? "SYNs" : "SYN-ACKs");
			}
	/* Handshakes are not part of the figures. */
	for (int p = 0; p < 2; p++) {
		uint64_t keep_nodata = g.ps[p].nodata;
		memset(&g.ps[p], 0, sizeof(g.ps[p]));
		g.ps[p].nodata = keep_nodata;
	}

	uint64_t t0 = rte_rdtsc(), end = t0 + (uint64_t)(g.c.seconds * g.tsc_hz);
	for (int d = 0; d < 2; d++)
		g.r[d].win_t0 = t0;
	uint64_t now = t0;
	while (now < end && !stop) {
		poll_rx(&g);
		int d;
		if (g.active[IN] && g.active[OUT])
			/* The direction behind in its share of bytes goes next. */
			d = (double)g.r[IN].sent_bytes / g.r[IN].lap_bytes <= (double)g.r[OUT].sent_bytes / g.r[OUT].lap_bytes
				    ? IN
				    : OUT;
		else
			d = g.active[IN] ? IN : OUT;
		send_burst(&g, &g.r[d]);
		now = rte_rdtsc();
	}
	uint64_t t_end_tx = rte_rdtsc();
	/* Drain: until every byte sent has come out, or nothing for drain_ms. */
	uint64_t quiet = (uint64_t)(g.c.drain_ms * g.tsc_hz / 1e3), last = rte_rdtsc();
	for (;;) {
		uint64_t in = g.r[IN].sent_payload + g.r[OUT].sent_payload;
		uint64_t out = g.ps[0].rx_payload + g.ps[1].rx_payload;
		if (out >= in)
			break;
		uint64_t n = rte_rdtsc();
		if (poll_rx(&g))
			last = n;
		else if (n - last > quiet)
			break;
	}

	if (stop)
		fail(&g, "interrupted");
	uint32_t laps[2] = {g.r[IN].n ? (uint32_t)(g.r[IN].sent_frames / g.r[IN].n) : 0,
			    g.r[OUT].n ? (uint32_t)(g.r[OUT].sent_frames / g.r[OUT].n) : 0};
	for (uint32_t i = 0; i < g.flows.n; i++) {
		const struct gflow *fl = fidx_at(&g.flows, i);
		if (fl->sent != fl->recv) {
			char k[128];
			key_str(g.flows.key[i], k, sizeof(k));
			fail(&g, "flow %s: %" PRIu64 " payload bytes sent, %" PRIu64 " received", k, fl->sent, fl->recv);
		}
	}
	if (g.t_first_tx == 0)
		fail(&g, "no data frame left");
	print_json(&g, t_end_tx, laps);
	if (g.c.linger) {
		/* 22.11's memif unmaps a port's shared memory on its interrupt
		 * thread when the peer disconnects, while the peer's lcore may
		 * be inside rx_burst: a forwarder polling when we close crashes.
		 * Wait, not polling, until whoever runs the round has stopped
		 * the forwarder and closes our stdin. */
		char buf[256];
		while (!stop && read(0, buf, sizeof(buf)) > 0)
			;
	}

	for (int p = 0; p < 2; p++) {
		rte_eth_dev_stop(g.port[p]);
		rte_eth_dev_close(g.port[p]);
	}
	rte_eal_cleanup();
	return g.nfails ? EXIT_CHECK : 0;
}
