/* SPDX-License-Identifier: Apache-2.0 OR MIT
 *
 * px_dpdk_bench: DPDK's GRO and GSO libraries on the same frames as
 * `px bench engine`, as the reference point for PacketExpress.
 *
 *   GRO ("heavyweight" mode: rte_gro_ctx_create / rte_gro_reassemble /
 *   rte_gro_timeout_flush) on a pcap of inbound 1500-byte-MTU frames, fed in
 *   file order in RX-sized bursts, flushed on the trace's own clock; merged
 *   packets above the inner MTU are cut back to it with rte_gso_segment
 *   (DPDK GRO cannot bound a merge below 64 KB), then the IPv4 and TCP
 *   checksums DPDK leaves stale are recomputed.
 *
 *   GSO (rte_gso_segment) on a pcap of outbound large frames, to the outer
 *   MTU, then the checksums.
 *
 * Runs without hugepages or NICs (--no-huge --no-pci --no-shconf -l CORE;
 * 22.11 refuses --in-memory with --no-huge, --no-shconf is its file-less part).
 * Loading frames into mbufs is untimed; the GRO (resp. GSO) calls and the
 * checksum work are timed with the TSC, separately. Every run's output is
 * checked (untimed): per TCP flow the payload bytes (count and a
 * position-weighted content sum) equal the input, every checksum verifies
 * with an independent one's-complement implementation, every frame fits its
 * MTU. One JSON object on stdout; diagnostics on stderr.
 *
 * Exit: 0 ok, 1 an output check failed, 2 bad usage, bad input or DPDK
 * initialisation failed.
 *
 * Build: bench/dpdk/build.sh OUT (cc -O2 $(pkg-config --cflags --libs libdpdk)).
 * Documentation: bench/dpdk/README.md.
 */
#define _GNU_SOURCE
#ifndef ALLOW_EXPERIMENTAL_API
#define ALLOW_EXPERIMENTAL_API /* rte_ipv4_udptcp_cksum_mbuf */
#endif
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
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
#include <rte_ether.h>
#include <rte_gro.h>
#include <rte_gso.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_net.h>
#include <rte_tcp.h>
#include <rte_version.h>

#define PX_TOOL "px_dpdk_bench"
#include "px_dpdk_common.h"

/* ------------------------------------------------------------------ */
/* Configuration                                                       */

struct cfg {
	const char *gro_path, *gso_path;
	unsigned runs;
	unsigned hold_us, flush_period_us;
	unsigned burst;
	unsigned mtu, imtu, inner_mss, outer_mss;
	unsigned max_flows, items_per_flow;
	unsigned lcore;
	int dump;
};

/* Position-weighted content sum: order-independent across segments,
 * sensitive to every byte and to the sequence number it sits at. */
struct wsum {
	uint32_t seq;
	uint64_t sum;
};

static void wsum_add(struct wsum *w, const uint8_t *p, uint32_t n, uint32_t pos)
{
	uint32_t s = w->seq + pos;
	uint64_t acc = 0;
	for (uint32_t i = 0; i < n; i++)
		acc += (uint64_t)(p[i] + 1u) * (uint32_t)((s + i) * 2654435761u);
	w->sum += acc;
}

static void run_wsum(void *arg, const uint8_t *p, uint32_t n, uint32_t pos)
{
	wsum_add(arg, p, n, pos);
}

/* ------------------------------------------------------------------ */
/* Per-flow accounting (5-tuple).                                       */

struct flow {
	uint8_t in_hi_set, out_hi_set;
	uint32_t in_hi, out_hi;
	uint64_t in_bytes, out_bytes, in_wsum, out_wsum;
};

/* Frames without TCP payload (non-TCP, pure ACKs) must leave intact:
 * counted, and an order-independent sum of per-frame hashes over the
 * Ethernet header and the IP packet (padding excluded: DPDK trims it). */
static uint64_t nodata_hash(const uint8_t *p, uint32_t len)
{
	uint64_t h = 1469598103934665603ull;
	for (uint32_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h ^ len;
}

static uint32_t nodata_len(const struct pinfo *pi, uint32_t frame_len)
{
	return pi->kind == K_OTHER ? frame_len : pi->l2 + pi->ip_len;
}

/* ------------------------------------------------------------------ */
/* Statistics                                                           */

struct run_t {
	double seconds;      /* all timed work: DPDK calls + checksums */
	double csum_seconds; /* of which checksum recomputation */
	double reseg_seconds;/* of which rte_gso_segment back to the inner MTU (GRO only) */
	double wall_seconds; /* CLOCK_MONOTONIC around the whole timed loop (includes untimed gaps) */
};

struct pass {
	const char *name;
	int done;
	/* input, from the pcap */
	uint64_t in_frames, in_tcp_frames, in_data_segs, in_payload, in_psh, in_psh_bytes;
	uint64_t in_other, in_ipv6_tcp, in_ooo, in_ce, in_cwr, in_nodata, in_nodata_hash;
	/* output, of the last run (identical across runs, checked) */
	uint64_t out_frames, out_data_segs, out_full, out_payload, out_psh, out_psh_bytes;
	uint64_t out_ooo, out_max_ip_len, out_merged, out_resegmented, csum_fixed, out_ce, out_cwr;
	uint64_t flush_calls, flush_slips, flush_slips_preempted;
	double parse_seconds;
	struct run_t *runs;
	unsigned nruns;
	struct fidx flows; /* of struct flow */
};

static void account_input(struct pass *ps, const struct trace *t, unsigned mtu_check, int gso)
{
	fidx_init(&ps->flows, sizeof(struct flow));
	for (size_t i = 0; i < t->n; i++) {
		struct pinfo pi;
		parse_frame(t->f[i].data, t->f[i].len, t->f[i].len, &pi);
		ps->in_frames++;
		if (pi.kind == K_OTHER || pi.payload == 0) {
			ps->in_nodata++;
			ps->in_nodata_hash +=
				nodata_hash(t->f[i].data, nodata_len(&pi, t->f[i].len));
		}
		if (pi.kind == K_OTHER) {
			ps->in_other++;
			continue;
		}
		ps->in_tcp_frames++;
		if (pi.kind == K_TCP6)
			ps->in_ipv6_tcp++;
		if (gso && pi.ip_len > mtu_check && pi.kind != K_TCP4)
			die(EXIT_INPUT,
			    "%s: frame %zu is an IPv6 TCP segment above the MTU; DPDK 22.11 GSO "
			    "segments IPv4 TCP only",
			    t->path, i + 1);
		/* Bad input checksums would make the output checks meaningless. */
		struct csum c = {0, 0};
		const uint8_t *ip = t->f[i].data + pi.l2;
		uint32_t l4len = pi.ip_len - pi.l3;
		if (pi.kind == K_TCP4) {
			cs_add(&c, ip, pi.l3);
			if (cs_fold(c.sum) != 0xffff)
				die(EXIT_INPUT, "%s: frame %zu has a bad IPv4 header checksum",
				    t->path, i + 1);
			c.sum = 0;
			cs_add(&c, ip + 12, 8);
		} else {
			cs_add(&c, ip + 8, 32);
		}
		c.sum += 6 + l4len;
		cs_add(&c, ip + pi.l3, l4len);
		if (cs_fold(c.sum) != 0xffff)
			die(EXIT_INPUT,
			    "%s: frame %zu has a bad TCP checksum (captured with checksum offload?)",
			    t->path, i + 1);
		if (pi.payload == 0)
			continue;
		struct flow *f = fidx_get(&ps->flows, pi.key, 1);
		ps->in_data_segs++;
		ps->in_payload += pi.payload;
		if (pi.flags & RTE_TCP_PSH_FLAG) {
			ps->in_psh++;
			ps->in_psh_bytes += pi.payload;
		}
		ps->in_ce += pi.ecn == 3;
		ps->in_cwr += (pi.flags & RTE_TCP_CWR_FLAG) != 0;
		ps->in_ooo += stream_advance(&f->in_hi, &f->in_hi_set, &f->in_bytes, pi.seq, pi.payload);
		struct wsum w = {pi.seq, 0};
		wsum_add(&w, ip + pi.l3 + pi.l4, pi.payload, 0);
		f->in_wsum += w.sum;
	}
}

/* Checks and counts one run's output. Returns the number of failures
 * (messages on stderr, at most a few). */
struct out_stats {
	uint64_t frames, data_segs, full, payload, psh, psh_bytes, ooo, max_ip_len, merged, ce, cwr;
	uint64_t nodata, nodata_hash;
};

static unsigned check_output(struct pass *ps, struct rte_mbuf **out, size_t nout, unsigned ip_limit,
			     unsigned full_mss, struct out_stats *st, int dump)
{
	unsigned fails = 0;
	memset(st, 0, sizeof(*st));
	for (uint32_t i = 0; i < ps->flows.n; i++) {
		struct flow *f = fidx_at(&ps->flows, i);
		f->out_bytes = f->out_wsum = 0;
		f->out_hi_set = 0;
	}
	for (size_t i = 0; i < nout; i++) {
		struct rte_mbuf *m = out[i];
		struct pinfo pi;
		parse_frame(rte_pktmbuf_mtod(m, const uint8_t *), m->data_len, m->pkt_len, &pi);
		st->frames++;
		if (dump) {
			char k[128] = "non-TCP";
			if (pi.kind != K_OTHER)
				key_str(pi.key, k, sizeof(k));
			fprintf(stderr, "%s out %zu: %s seq %u len %u flags 0x%02x ip_len %u mbufs %u\n",
				ps->name, i + 1, k, pi.seq, pi.payload, pi.flags, pi.ip_len, m->nb_segs);
		}
		if (pi.kind == K_OTHER || pi.payload == 0) {
			uint32_t len = nodata_len(&pi, m->pkt_len);
			st->nodata++;
			if (len <= m->data_len)
				st->nodata_hash +=
					nodata_hash(rte_pktmbuf_mtod(m, const uint8_t *), len);
		}
		if (pi.kind == K_OTHER)
			continue;
		if (m->nb_segs > 1)
			st->merged++;
		if (pi.ip_len > st->max_ip_len)
			st->max_ip_len = pi.ip_len;
		if (pi.ip_len > ip_limit || pi.ip_len > 65535) {
			if (fails++ < 5)
				fprintf(stderr,
					"px_dpdk_bench: %s: output frame %zu has IP length %u > limit %u\n",
					ps->name, i + 1, pi.ip_len, ip_limit);
		}
		const char *why = NULL;
		if (verify_csums(m, &pi, &why) != 0) {
			if (fails++ < 5)
				fprintf(stderr, "px_dpdk_bench: %s: output frame %zu: bad %s\n",
					ps->name, i + 1, why);
			continue;
		}
		if (pi.payload == 0)
			continue;
		st->data_segs++;
		st->payload += pi.payload;
		if (pi.payload == full_mss)
			st->full++;
		st->ce += pi.ecn == 3;
		st->cwr += (pi.flags & RTE_TCP_CWR_FLAG) != 0;
		if (pi.flags & RTE_TCP_PSH_FLAG) {
			st->psh++;
			st->psh_bytes += pi.payload;
		}
		struct flow *f = fidx_get(&ps->flows, pi.key, 0);
		if (!f) {
			char k[128];
			key_str(pi.key, k, sizeof(k));
			if (fails++ < 5)
				fprintf(stderr, "px_dpdk_bench: %s: output carries data of unknown flow %s\n",
					ps->name, k);
			continue;
		}
		st->ooo += stream_advance(&f->out_hi, &f->out_hi_set, &f->out_bytes, pi.seq, pi.payload);
		struct wsum w = {pi.seq, 0};
		mbuf_runs(m, pi.l2 + pi.l3 + pi.l4, pi.payload, run_wsum, &w);
		f->out_wsum += w.sum;
	}
	if (st->nodata != ps->in_nodata || st->nodata_hash != ps->in_nodata_hash) {
		if (fails++ < 5)
			fprintf(stderr,
				"px_dpdk_bench: %s: frames without TCP payload: %" PRIu64 " in, %" PRIu64
				" out%s\n",
				ps->name, ps->in_nodata, st->nodata,
				st->nodata == ps->in_nodata ? " (same count, different content)" : "");
	}
	for (uint32_t i = 0; i < ps->flows.n; i++) {
		struct flow *f = fidx_at(&ps->flows, i);
		if (f->in_bytes != f->out_bytes || f->in_wsum != f->out_wsum) {
			char k[128];
			key_str(ps->flows.key[i], k, sizeof(k));
			if (fails++ < 5)
				fprintf(stderr,
					"px_dpdk_bench: %s: flow %s: %" PRIu64 " payload bytes in, %" PRIu64
					" out%s\n",
					ps->name, k, f->in_bytes, f->out_bytes,
					f->in_bytes == f->out_bytes ? " (same count, different content)" : "");
		}
	}
	return fails;
}

/* Self test of the checks: PX_DPDK_BENCH_FAULT=corrupt flips the last byte
 * of the first output data segment, =drop removes it, =dropnodata removes
 * the first output frame without TCP payload; after DPDK and before the
 * checks. The run must then fail with exit 1. */
static void inject_fault(struct rte_mbuf **out, size_t *n)
{
	const char *f = getenv("PX_DPDK_BENCH_FAULT");
	if (!f || !*f)
		return;
	int nodata = strcmp(f, "dropnodata") == 0;
	for (size_t i = 0; i < *n; i++) {
		struct pinfo pi;
		parse_frame(rte_pktmbuf_mtod(out[i], const uint8_t *), out[i]->data_len,
			    out[i]->pkt_len, &pi);
		if ((pi.kind == K_OTHER || pi.payload == 0) != nodata)
			continue;
		if (strcmp(f, "corrupt") == 0) {
			struct rte_mbuf *last = rte_pktmbuf_lastseg(out[i]);
			rte_pktmbuf_mtod(last, uint8_t *)[last->data_len - 1] ^= 0x5a;
		} else if (strcmp(f, "drop") == 0 || nodata) {
			rte_pktmbuf_free(out[i]);
			memmove(&out[i], &out[i + 1], (*n - i - 1) * sizeof(*out));
			(*n)--;
		} else {
			die(EXIT_INPUT, "PX_DPDK_BENCH_FAULT must be corrupt, drop or dropnodata");
		}
		return;
	}
}

/* ------------------------------------------------------------------ */
/* DPDK side                                                            */

static double tsc_hz;

static double now_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Copies the frames into fresh mbufs and sets what a NIC plus the RX
 * path would: packet_type and l2/l3/l4 lengths (rte_net_get_ptype, timed
 * on its own as parse_seconds, not part of the GRO/GSO figure). */
static void load_mbufs(const struct trace *t, struct rte_mempool *mp, struct rte_mbuf **m,
		       int for_gso, double *parse_seconds)
{
	if (rte_pktmbuf_alloc_bulk(mp, m, (unsigned)t->n) != 0)
		die(EXIT_INPUT, "mbuf pool %s exhausted (%zu frames)", mp->name, t->n);
	for (size_t i = 0; i < t->n; i++) {
		char *d = rte_pktmbuf_append(m[i], (uint16_t)t->f[i].len);
		if (!d)
			die(EXIT_INPUT, "frame %zu (%u bytes) does not fit an mbuf", i + 1, t->f[i].len);
		memcpy(d, t->f[i].data, t->f[i].len);
	}
	uint64_t t0 = rte_rdtsc();
	for (size_t i = 0; i < t->n; i++) {
		struct rte_net_hdr_lens hl;
		m[i]->packet_type = rte_net_get_ptype(m[i], &hl, RTE_PTYPE_ALL_MASK);
		m[i]->l2_len = hl.l2_len;
		m[i]->l3_len = hl.l3_len;
		m[i]->l4_len = hl.l4_len;
		if (for_gso && is_tcp4(m[i]))
			m[i]->ol_flags |= RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4;
	}
	*parse_seconds += (rte_rdtsc() - t0) / tsc_hz;
}

struct sink {
	struct rte_mbuf **out;
	size_t n, cap;
	uint64_t cyc_reseg, cyc_csum, csum_fixed, resegmented;
	const struct rte_gso_ctx *reseg; /* NULL: no resegmentation */
	unsigned reseg_ip_limit;
};

/* Takes packets DPDK handed back (GRO output or GSO input) and finishes
 * them: resegmentation if needed (timed), then checksums (timed). */
static inline void sink_put(struct sink *s, struct rte_mbuf **pk, unsigned k)
{
	size_t first = s->n;
	uint64_t t0 = rte_rdtsc();
	for (unsigned i = 0; i < k; i++) {
		struct rte_mbuf *m = pk[i];
		if (s->reseg && is_tcp4(m) && m->pkt_len - m->l2_len > s->reseg_ip_limit) {
			m->ol_flags |= RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4;
			size_t room = s->cap - s->n;
			int r = rte_gso_segment(m, s->reseg, &s->out[s->n],
						(uint16_t)(room > 65535 ? 65535 : room));
			if (r < 0)
				die(EXIT_INPUT, "rte_gso_segment failed: %s", strerror(-r));
			if (r > 0) {
				rte_pktmbuf_free(m);
				s->n += (size_t)r;
				s->resegmented++;
				continue;
			}
		}
		if (s->n == s->cap)
			die(EXIT_INPUT, "output array full (%zu)", s->cap);
		s->out[s->n++] = m;
	}
	uint64_t t1 = rte_rdtsc();
	for (size_t i = first; i < s->n; i++) {
		struct rte_mbuf *m = s->out[i];
		if (m->nb_segs > 1 && is_tcp4(m)) {
			fix_csum(m);
			s->csum_fixed++;
		}
	}
	uint64_t t2 = rte_rdtsc();
	s->cyc_reseg += t1 - t0;
	s->cyc_csum += t2 - t1;
}

struct pools {
	struct rte_mempool *gro_in, *gso_in, *hdr, *ind;
};

#define GAP_CYCLES 40000u /* separates RX bursts on the TSC (see flush_upto) */

struct burst_log {
	uint64_t ts_ns;     /* trace time of the burst (its last frame) */
	uint64_t tsc_after; /* TSC read right after rte_gro_reassemble returned */
};

struct gro_state {
	void *ctx;
	struct sink *sink;
	uint64_t cyc_gro;
	struct rte_mbuf **tmp;
	unsigned tmp_cap;
	struct burst_log *log;
	size_t nlog, flushed_upto; /* bursts [0, flushed_upto) are out of the table */
	uint64_t flush_calls, slips, slips_preempted;
};

/* Flushes everything in the table (timeout 0). */
static void flush_all(struct gro_state *g)
{
	for (;;) {
		uint64_t t0 = rte_rdtsc();
		uint16_t k = rte_gro_timeout_flush(g->ctx, 0, RTE_GRO_TCP_IPV4, g->tmp,
						   (uint16_t)g->tmp_cap);
		g->cyc_gro += rte_rdtsc() - t0;
		g->flush_calls++;
		sink_put(g->sink, g->tmp, k);
		if (k < g->tmp_cap)
			break;
	}
	g->flushed_upto = g->nlog;
}

/* Flushes the items inserted by bursts [0, upto]: DPDK stamps each item
 * with rte_rdtsc() at insertion and flushes items with
 * start_time <= rte_rdtsc() - timeout_cycles, so timeout_cycles is chosen
 * to put that threshold half-way in the GAP_CYCLES pause that followed
 * burst `upto`. DPDK reads the TSC a little after we do, so the threshold
 * can only move later: if preemption pushed it past the pause, items of
 * the next burst leave early. Each mbuf carries its burst number in
 * hash.rss (GRO does not touch it): a flushed packet whose earliest
 * segment came after burst `upto` is counted as a slip (untimed check). */
static void flush_upto(struct gro_state *g, size_t upto)
{
	uint64_t boundary = g->log[upto].tsc_after + GAP_CYCLES / 2;
	for (;;) {
		uint64_t t0 = rte_rdtsc();
		uint16_t k = rte_gro_timeout_flush(g->ctx, t0 - boundary, RTE_GRO_TCP_IPV4,
						   g->tmp, (uint16_t)g->tmp_cap);
		uint64_t t1 = rte_rdtsc();
		g->cyc_gro += t1 - t0;
		g->flush_calls++;
		/* DPDK's TSC read lies between t0 and t1: a call shorter than half
		 * the pause cannot have moved the cut-off out of it, so a slip in
		 * such a call is the harness's error, not the scheduler's. */
		const int preempted = t1 - t0 >= GAP_CYCLES / 2;
		for (unsigned j = 0; j < k; j++) {
			uint32_t first = UINT32_MAX;
			for (const struct rte_mbuf *sg = g->tmp[j]; sg; sg = sg->next)
				first = RTE_MIN(first, sg->hash.rss);
			if (first > upto) {
				g->slips++;
				g->slips_preempted += preempted;
			}
		}
		sink_put(g->sink, g->tmp, k);
		if (k < g->tmp_cap)
			break;
	}
	g->flushed_upto = upto + 1;
}

static void spin_until(uint64_t tsc)
{
	while (rte_rdtsc() < tsc)
		rte_pause();
}

/* What a run's output showed, kept for the JSON (the last run's). */
static void record_output(struct pass *ps, const struct out_stats *st, const struct sink *s)
{
	ps->out_frames = st->frames;
	ps->out_data_segs = st->data_segs;
	ps->out_full = st->full;
	ps->out_payload = st->payload;
	ps->out_psh = st->psh;
	ps->out_psh_bytes = st->psh_bytes;
	ps->out_ooo = st->ooo;
	ps->out_ce = st->ce;
	ps->out_cwr = st->cwr;
	ps->out_max_ip_len = st->max_ip_len;
	ps->out_merged = st->merged;
	ps->out_resegmented = s->resegmented;
	ps->csum_fixed = s->csum_fixed;
}

static void run_gro(const struct cfg *c, const struct trace *t, struct pools *pl, struct pass *ps)
{
	struct rte_mbuf **in = malloc(t->n * sizeof(*in));
	size_t out_cap = 2 * t->n + 1024;
	struct rte_mbuf **out = malloc(out_cap * sizeof(*out));
	struct gro_state g = {0};
	g.tmp_cap = 8192;
	g.tmp = malloc(g.tmp_cap * sizeof(*g.tmp));
	g.log = malloc((t->n + 1) * sizeof(*g.log));
	struct rte_mbuf *burst[512];
	if (!in || !out || !g.tmp || !g.log)
		die(EXIT_INPUT, "out of memory");

	struct rte_gso_ctx reseg = {
		.direct_pool = pl->hdr,
		.indirect_pool = pl->ind,
		.flag = 0, /* incrementing IP IDs, like a NIC's TSO */
		.gso_types = RTE_ETH_TX_OFFLOAD_TCP_TSO,
		.gso_size = (uint16_t)(c->imtu + RTE_ETHER_HDR_LEN),
	};
	const uint64_t period = (uint64_t)c->flush_period_us * 1000;
	const uint64_t thresh = (uint64_t)(c->hold_us - c->flush_period_us) * 1000;
	ps->runs = calloc(c->runs, sizeof(*ps->runs));
	ps->nruns = c->runs;

	for (unsigned r = 0; r < c->runs; r++) {
		load_mbufs(t, pl->gro_in, in, 0, &ps->parse_seconds);
		struct rte_gro_param p = {
			.gro_types = RTE_GRO_TCP_IPV4,
			.max_flow_num = (uint16_t)c->max_flows,
			.max_item_per_flow = (uint16_t)c->items_per_flow,
			.socket_id = (uint16_t)rte_socket_id(),
		};
		g.ctx = rte_gro_ctx_create(&p);
		if (!g.ctx)
			die(EXIT_INPUT, "rte_gro_ctx_create failed (max_flows %u x items %u)",
			    c->max_flows, c->items_per_flow);
		struct sink s = {.out = out, .n = 0, .cap = out_cap,
				 .reseg = c->imtu ? &reseg : NULL, .reseg_ip_limit = c->imtu};
		g.sink = &s;
		g.cyc_gro = 0;
		g.nlog = g.flushed_upto = 0;
		g.flush_calls = g.slips = g.slips_preempted = 0;

		double w0 = now_mono();
		uint64_t next_tick = t->f[0].ts_ns + period;
		size_t i = 0;
		while (i < t->n) {
			if (t->f[i].ts_ns >= next_tick) {
				/* The trace clock passed a flush tick. */
				if (thresh == 0) {
					if (g.flushed_upto < g.nlog)
						flush_all(&g);
				} else {
					uint64_t cutoff = next_tick - thresh;
					size_t k = g.flushed_upto;
					while (k < g.nlog && g.log[k].ts_ns <= cutoff)
						k++;
					if (k > g.flushed_upto)
						flush_upto(&g, k - 1);
				}
				next_tick += period;
				if (g.flushed_upto == g.nlog && t->f[i].ts_ns >= next_tick)
					/* table empty: skip idle ticks */
					next_tick += (t->f[i].ts_ns - next_tick) / period * period + period;
				continue;
			}
			unsigned k = 0;
			while (k < c->burst && i < t->n && t->f[i].ts_ns < next_tick) {
				in[i]->hash.rss = (uint32_t)g.nlog; /* for the slip check */
				burst[k++] = in[i++];
			}
			uint64_t t0 = rte_rdtsc();
			uint16_t nb = rte_gro_reassemble(burst, (uint16_t)k, g.ctx);
			uint64_t t1 = rte_rdtsc();
			g.cyc_gro += t1 - t0;
			g.log[g.nlog].ts_ns = t->f[i - 1].ts_ns;
			g.log[g.nlog].tsc_after = t1;
			g.nlog++;
			if (thresh)
				spin_until(t1 + GAP_CYCLES);
			sink_put(&s, burst, nb);
			if (rte_gro_get_pkt_count(g.ctx) == 0)
				g.flushed_upto = g.nlog;
		}
		flush_all(&g);
		double w1 = now_mono();
		if (rte_gro_get_pkt_count(g.ctx) != 0)
			die(EXIT_CHECK, "gro: %" PRIu64 " packets left in the table after the final flush",
			    rte_gro_get_pkt_count(g.ctx));
		rte_gro_ctx_destroy(g.ctx);

		struct run_t *rt = &ps->runs[r];
		rt->csum_seconds = s.cyc_csum / tsc_hz;
		rt->reseg_seconds = s.cyc_reseg / tsc_hz;
		rt->seconds = (g.cyc_gro + s.cyc_reseg + s.cyc_csum) / tsc_hz;
		rt->wall_seconds = w1 - w0;

		struct out_stats st;
		unsigned limit = c->imtu ? c->imtu : 65535;
		inject_fault(out, &s.n);
		unsigned fails = check_output(ps, out, s.n, limit, c->inner_mss, &st,
					      c->dump && r + 1 == c->runs);
		if (fails)
			die(EXIT_CHECK, "gro run %u: %u check(s) failed", r + 1, fails);
		if (r > 0 && (st.frames != ps->out_frames || st.full != ps->out_full))
			fprintf(stderr, "px_dpdk_bench: gro run %u: output differs from run 1 "
				"(%" PRIu64 " frames vs %" PRIu64 "): timing-dependent flushes\n",
				r + 1, st.frames, ps->out_frames);
		record_output(ps, &st, &s);
		ps->flush_calls = g.flush_calls;
		ps->flush_slips += g.slips;
		ps->flush_slips_preempted += g.slips_preempted;
		for (size_t j = 0; j < s.n; j++)
			rte_pktmbuf_free(out[j]);
	}
	ps->parse_seconds /= c->runs;
	ps->done = 1;
	free(in);
	free(out);
	free(g.tmp);
	free(g.log);
}

static void run_gso(const struct cfg *c, const struct trace *t, struct pools *pl, struct pass *ps,
		    size_t pieces_bound)
{
	struct rte_mbuf **in = malloc(t->n * sizeof(*in));
	size_t out_cap = pieces_bound + t->n + 1024;
	struct rte_mbuf **out = malloc(out_cap * sizeof(*out));
	if (!in || !out)
		die(EXIT_INPUT, "out of memory");
	struct rte_gso_ctx gso = {
		.direct_pool = pl->hdr,
		.indirect_pool = pl->ind,
		.flag = 0,
		.gso_types = RTE_ETH_TX_OFFLOAD_TCP_TSO,
		.gso_size = (uint16_t)(c->mtu + RTE_ETHER_HDR_LEN),
	};
	ps->runs = calloc(c->runs, sizeof(*ps->runs));
	ps->nruns = c->runs;
	for (unsigned r = 0; r < c->runs; r++) {
		load_mbufs(t, pl->gso_in, in, 1, &ps->parse_seconds);
		struct sink s = {.out = out, .n = 0, .cap = out_cap, .reseg = &gso,
				 .reseg_ip_limit = c->mtu};
		double w0 = now_mono();
		for (size_t i = 0; i < t->n; i += c->burst) {
			unsigned k = (unsigned)RTE_MIN((size_t)c->burst, t->n - i);
			sink_put(&s, &in[i], k);
		}
		double w1 = now_mono();
		struct run_t *rt = &ps->runs[r];
		rt->csum_seconds = s.cyc_csum / tsc_hz;
		rt->reseg_seconds = s.cyc_reseg / tsc_hz;
		rt->seconds = (s.cyc_reseg + s.cyc_csum) / tsc_hz;
		rt->wall_seconds = w1 - w0;

		struct out_stats st;
		inject_fault(out, &s.n);
		unsigned fails = check_output(ps, out, s.n, c->mtu, c->outer_mss, &st,
					      c->dump && r + 1 == c->runs);
		if (fails)
			die(EXIT_CHECK, "gso run %u: %u check(s) failed", r + 1, fails);
		record_output(ps, &st, &s);
		for (size_t j = 0; j < s.n; j++)
			rte_pktmbuf_free(out[j]);
	}
	ps->parse_seconds /= c->runs;
	ps->done = 1;
	free(in);
	free(out);
}

/* ------------------------------------------------------------------ */
/* Output                                                               */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median_seconds(const struct pass *ps)
{
	double *v = malloc(ps->nruns * sizeof(*v));
	for (unsigned i = 0; i < ps->nruns; i++)
		v[i] = ps->runs[i].seconds;
	qsort(v, ps->nruns, sizeof(*v), cmp_double);
	double m = ps->nruns % 2 ? v[ps->nruns / 2] : (v[ps->nruns / 2 - 1] + v[ps->nruns / 2]) / 2;
	free(v);
	return m;
}

static void print_pass(const struct pass *ps, int gro)
{
	printf("\"%s\":{\"runs\":[", ps->name);
	for (unsigned i = 0; i < ps->nruns; i++)
		printf("%s{\"seconds\":%.9f,\"csum_seconds\":%.9f,\"%s\":%.9f,\"wall_seconds\":%.9f}",
		       i ? "," : "", ps->runs[i].seconds, ps->runs[i].csum_seconds,
		       gro ? "reseg_seconds" : "gso_seconds",
		       ps->runs[i].reseg_seconds, ps->runs[i].wall_seconds);
	double med = median_seconds(ps);
	double yield = ps->out_data_segs ? (double)ps->out_full / ps->out_data_segs : 0.0;
	printf("],\"in_frames\":%" PRIu64 ",\"in_tcp_frames\":%" PRIu64
	       ",\"in_data_segments\":%" PRIu64 ",\"in_payload_bytes\":%" PRIu64
	       ",\"in_psh_segments\":%" PRIu64 ",\"in_psh_bytes\":%" PRIu64
	       ",\"in_other_frames\":%" PRIu64 ",\"in_ipv6_tcp_frames\":%" PRIu64
	       ",\"in_out_of_order\":%" PRIu64 ",\"in_ce_segments\":%" PRIu64
	       ",\"in_cwr_segments\":%" PRIu64,
	       ps->in_frames, ps->in_tcp_frames, ps->in_data_segs, ps->in_payload, ps->in_psh,
	       ps->in_psh_bytes, ps->in_other, ps->in_ipv6_tcp, ps->in_ooo, ps->in_ce, ps->in_cwr);
	printf(",\"out_frames\":%" PRIu64 ",\"out_data_segments\":%" PRIu64 ",\"out_full\":%" PRIu64
	       ",\"out_payload_bytes\":%" PRIu64 ",\"out_psh_segments\":%" PRIu64
	       ",\"out_psh_bytes\":%" PRIu64 ",\"out_out_of_order\":%" PRIu64
	       ",\"out_max_ip_len\":%" PRIu64 ",\"out_multi_mbuf\":%" PRIu64
	       ",\"%s\":%" PRIu64 ",\"csum_recomputed\":%" PRIu64 ",\"out_ce_segments\":%" PRIu64
	       ",\"out_cwr_segments\":%" PRIu64,
	       ps->out_frames, ps->out_data_segs, ps->out_full, ps->out_payload, ps->out_psh,
	       ps->out_psh_bytes, ps->out_ooo, ps->out_max_ip_len, ps->out_merged,
	       gro ? "resegmented" : "segmented", ps->out_resegmented, ps->csum_fixed, ps->out_ce,
	       ps->out_cwr);
	if (gro)
		printf(",\"flush_calls\":%" PRIu64 ",\"flush_slips\":%" PRIu64
		       ",\"flush_slips_preempted\":%" PRIu64,
		       ps->flush_calls, ps->flush_slips, ps->flush_slips_preempted);
	printf(",\"yield\":%.6f,\"seconds_median\":%.9f,\"gbps_median\":%.6f,\"mpps_median\":%.6f"
	       ",\"parse_seconds\":%.9f}",
	       yield, med, med > 0 ? ps->in_payload * 8.0 / med / 1e9 : 0.0,
	       med > 0 ? ps->in_frames / med / 1e6 : 0.0, ps->parse_seconds);
}

/* ------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: px_dpdk_bench [--gro IN.pcap] [--gso OUT.pcap] [options]\n"
		"  --gro FILE            inbound frames (eMTU-sized TCP segments) for GRO\n"
		"  --gso FILE            outbound large frames for GSO\n"
		"  --runs N              timed repetitions (5)\n"
		"  --hold-us US          longest a segment may wait in GRO (500, as px)\n"
		"  --flush-period-us US  trace time between rte_gro_timeout_flush calls (= hold);\n"
		"                        each flush takes items older than hold - period\n"
		"  --burst N             mbufs per rte_gro_reassemble call / GSO batch (32)\n"
		"  --mtu N               outer (IP) MTU, GSO target (1500)\n"
		"  --imtu N              inner (IP) MTU: GRO output above it is cut back with\n"
		"                        rte_gso_segment; 0 keeps DPDK's 64 KB merges (9000)\n"
		"  --inner-mss N         payload of a full inbound segment, for the yield (8948)\n"
		"  --outer-mss N         payload of a full outbound segment (1448)\n"
		"  --max-flows N         rte_gro_param.max_flow_num (distinct flows of the trace)\n"
		"  --items-per-flow N    rte_gro_param.max_item_per_flow (4)\n"
		"  --lcore N             core to run on (0)\n"
		"  --dump                list the last run's output frames on stderr\n"
		"One JSON object on stdout. Exit 0 ok, 1 check failed, 2 bad input/usage.\n");
}

int main(int argc, char **argv)
{
	struct cfg c = {
		.runs = 5, .hold_us = 500, .flush_period_us = 0, .burst = 32, .mtu = 1500,
		.imtu = 9000, .inner_mss = 8948, .outer_mss = 1448, .max_flows = 0,
		.items_per_flow = 4, .lcore = 0,
	};
	static const struct option opts[] = {
		{"gro", required_argument, 0, 'g'},
		{"gso", required_argument, 0, 's'},
		{"runs", required_argument, 0, 'r'},
		{"hold-us", required_argument, 0, 'H'},
		{"flush-period-us", required_argument, 0, 'P'},
		{"burst", required_argument, 0, 'b'},
		{"mtu", required_argument, 0, 'm'},
		{"imtu", required_argument, 0, 'i'},
		{"inner-mss", required_argument, 0, 'I'},
		{"outer-mss", required_argument, 0, 'O'},
		{"max-flows", required_argument, 0, 'f'},
		{"items-per-flow", required_argument, 0, 'n'},
		{"lcore", required_argument, 0, 'l'},
		{"dump", no_argument, 0, 'd'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	int o;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'g': c.gro_path = optarg; break;
		case 's': c.gso_path = optarg; break;
		case 'r': c.runs = parse_uint(optarg, "--runs"); break;
		case 'H': c.hold_us = parse_uint(optarg, "--hold-us"); break;
		case 'P': c.flush_period_us = parse_uint(optarg, "--flush-period-us"); break;
		case 'b': c.burst = parse_uint(optarg, "--burst"); break;
		case 'm': c.mtu = parse_uint(optarg, "--mtu"); break;
		case 'i': c.imtu = parse_uint(optarg, "--imtu"); break;
		case 'I': c.inner_mss = parse_uint(optarg, "--inner-mss"); break;
		case 'O': c.outer_mss = parse_uint(optarg, "--outer-mss"); break;
		case 'f': c.max_flows = parse_uint(optarg, "--max-flows"); break;
		case 'n': c.items_per_flow = parse_uint(optarg, "--items-per-flow"); break;
		case 'l': c.lcore = parse_uint(optarg, "--lcore"); break;
		case 'd': c.dump = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_INPUT;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return EXIT_INPUT;
	}
	if (!c.gro_path && !c.gso_path) {
		usage(stderr);
		die(EXIT_INPUT, "give --gro and/or --gso");
	}
	if (c.flush_period_us == 0)
		c.flush_period_us = c.hold_us;
	if (c.runs < 1 || c.hold_us < 1 || c.flush_period_us > c.hold_us)
		die(EXIT_INPUT, "need --runs >= 1, --hold-us >= 1, 1 <= --flush-period-us <= --hold-us");
	if (c.burst < 1 || c.burst > 512)
		die(EXIT_INPUT, "--burst must be 1..512");
	if (c.mtu < 576 || c.mtu > 65535 || (c.imtu && (c.imtu < c.mtu || c.imtu > 65535)))
		die(EXIT_INPUT, "need 576 <= --mtu <= --imtu <= 65535 (or --imtu 0)");
	if (c.items_per_flow < 1 || c.items_per_flow > 65535 || c.max_flows > 65535)
		die(EXIT_INPUT, "--max-flows and --items-per-flow must fit 16 bits");

	/* Input first, untimed, so the EAL gets memory sized to it. */
	struct trace tg = {0}, ts = {0};
	struct pass pg = {.name = "gro"}, pso = {.name = "gso"};
	size_t gso_pieces = 0;
	if (c.gro_path) {
		pcap_load(c.gro_path, &tg);
		account_input(&pg, &tg, 0, 0);
		if (c.max_flows == 0)
			c.max_flows = (unsigned)RTE_MIN(RTE_MAX(pg.flows.n, (size_t)1), (size_t)65535);
	}
	if (c.gso_path) {
		pcap_load(c.gso_path, &ts);
		account_input(&pso, &ts, c.mtu, 1);
		for (size_t i = 0; i < ts.n; i++) {
			struct pinfo pi;
			parse_frame(ts.f[i].data, ts.f[i].len, ts.f[i].len, &pi);
			if (pi.kind == K_TCP4 && pi.ip_len > c.mtu) {
				uint32_t unit = c.mtu - pi.l3 - pi.l4;
				gso_pieces += (pi.payload + unit - 1) / unit;
			} else if (pi.kind == K_OTHER && ts.f[i].len > c.mtu + 18u) {
				die(EXIT_INPUT,
				    "%s: frame %zu is not TCP and above the MTU; the harness segments TCP only",
				    ts.path, i + 1);
			} else {
				gso_pieces++;
			}
		}
	}
	if (c.max_flows == 0)
		c.max_flows = 1;

	/* Pool sizes: inputs, GSO headers (direct) and payload references
	 * (indirect). A resegmented GRO packet needs one indirect mbuf per
	 * input mbuf a piece touches: at most pieces + input mbufs. */
	size_t hdr_n = 1024, ind_n = 1024;
	if (c.gro_path) {
		hdr_n = RTE_MAX(hdr_n, tg.n + 1024);
		ind_n = RTE_MAX(ind_n, 2 * tg.n + 1024);
	}
	if (c.gso_path) {
		hdr_n = RTE_MAX(hdr_n, gso_pieces + 1024);
		ind_n = RTE_MAX(ind_n, gso_pieces + 1024);
	}
	unsigned gro_room = RTE_PKTMBUF_HEADROOM + RTE_MAX(tg.max_len, 2048u);
	unsigned gso_room = RTE_PKTMBUF_HEADROOM + RTE_MAX(ts.max_len, 2048u);
	unsigned hdr_room = RTE_PKTMBUF_HEADROOM + 256;
	double bytes = 0;
	const double ovh = sizeof(struct rte_mbuf) + 192; /* mempool object header, alignment */
	bytes += (double)tg.n * (gro_room + ovh) + (double)ts.n * (gso_room + ovh);
	bytes += (double)hdr_n * (hdr_room + ovh) + (double)ind_n * ovh;
	bytes += (double)c.max_flows * c.items_per_flow * 128.0; /* GRO table */
	unsigned mem_mb = (unsigned)(bytes * 1.25 / 1048576.0) + 128;

	char lcore_s[16], mem_s[16], prefix_s[64];
	snprintf(lcore_s, sizeof(lcore_s), "%u", c.lcore);
	snprintf(mem_s, sizeof(mem_s), "%u", mem_mb);
	snprintf(prefix_s, sizeof(prefix_s), "--file-prefix=px-dpdk-bench-%d", (int)getpid());
	char *eal_argv[] = {
		argv[0], "--no-huge", "--no-pci", "--no-shconf", "--no-telemetry",
		"-l", lcore_s, "-m", mem_s, "--log-level=4", prefix_s, NULL,
	};
	/* EAL logs go to stdout by default on Linux: keep stdout for JSON. */
	rte_openlog_stream(stderr);
	if (rte_eal_init((int)RTE_DIM(eal_argv) - 1, eal_argv) < 0)
		die(EXIT_INPUT, "rte_eal_init failed: %s", rte_strerror(rte_errno));
	px_eal_note_runtime_dir();
	tsc_hz = (double)rte_get_tsc_hz();

	struct pools pl = {0};
	if (c.gro_path)
		pl.gro_in = px_mkpool("px_gro_in", tg.n, gro_room);
	if (c.gso_path)
		pl.gso_in = px_mkpool("px_gso_in", ts.n, gso_room);
	pl.hdr = px_mkpool("px_hdr", hdr_n, hdr_room);
	pl.ind = px_mkpool("px_ind", ind_n, 0);

	if (c.gro_path)
		run_gro(&c, &tg, &pl, &pg);
	if (c.gso_path)
		run_gso(&c, &ts, &pl, &pso, gso_pieces);

	printf("{\"tool\":\"px_dpdk_bench\",\"dpdk_version\":\"%s\",\"tsc_hz\":%.0f,\"lcore\":%u,"
	       "\"eal_memory_mb\":%u,\"hold_us\":%u,\"flush_period_us\":%u,\"flush_older_than_us\":%u,"
	       "\"burst\":%u,\"mtu\":%u,\"imtu\":%u,\"inner_mss\":%u,\"outer_mss\":%u,"
	       "\"max_flow_num\":%u,\"max_item_per_flow\":%u,",
	       rte_version(), tsc_hz, c.lcore, mem_mb, c.hold_us, c.flush_period_us,
	       c.hold_us - c.flush_period_us, c.burst, c.mtu, c.imtu, c.inner_mss, c.outer_mss,
	       c.max_flows, c.items_per_flow);
	if (pg.done) {
		print_pass(&pg, 1);
		printf(",");
	}
	if (pso.done) {
		print_pass(&pso, 0);
		printf(",");
	}
	printf("\"semantics\":\"DPDK 22.11 GRO (TCP/IPv4 only; IPv6 passes unmerged) merges a segment "
	       "only if its TCP flags are exactly ACK (PSH, FIN, SYN, RST, URG, ECE, CWR never "
	       "merge), it carries payload, its TCP header length and option bytes equal the "
	       "held segment's byte for byte (a changed TSval or TSecr blocks the merge), its DF "
	       "bit matches, it is sequence-contiguous and (DF clear) its IP ID consecutive; the "
	       "flow key is MACs, IPs, ports and the ACK number; TOS is never compared, so a CE "
	       "mark after the first segment is lost; merges grow to 65535 IP bytes with no "
	       "smaller bound and are flushed only by the timeout flush; unmergeable segments "
	       "leave at once, ahead of the held ones of their flow; checksums are left stale. "
	       "GSO (TCP/IPv4 only) clears FIN and PSH except on the last piece, copies CWR to "
	       "every piece and leaves checksums stale.\"}\n");
	fflush(stdout);
	rte_eal_cleanup();
	return 0;
}
