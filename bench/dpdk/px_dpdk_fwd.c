/* SPDX-License-Identifier: Apache-2.0 OR MIT
 *
 * px_dpdk_fwd: the two reference forwarders of `px bench gateway
 * --datapath dpdk`, on the same ports and lcore as `px gateway --datapath
 * dpdk`:
 *
 *   --mode io    plain I/O forwarding, no processing: each frame received
 *                on one port leaves on the other. The ceiling of this I/O
 *                (the `limit` round).
 *   --mode gro   the paper's baseline, a forwarder built on DPDK's own
 *                libraries (the `baseline` round). Inbound (outer port to
 *                inner port): rte_net_get_ptype (memif delivers
 *                packet_type 0), rte_gro_reassemble (heavyweight mode,
 *                every frame of a burst), everything flushed every
 *                --hold-us; merges above the inner MTU cut back to it
 *                with rte_gso_segment (DPDK GRO merges up to 64 KB), and
 *                the checksums DPDK leaves stale recomputed. Outbound
 *                (inner port to outer port): TCP/IPv4 frames above the
 *                outer MTU cut with rte_gso_segment, checksums recomputed.
 *                The same semantics as px_dpdk_bench's fair setting
 *                (bench/dpdk/README.md).
 *
 * Port 0 is the outer port (eMTU side), port 1 the inner one (iMTU side),
 * in the order the --vdev/-a arguments give them; --outer NAME and
 * --inner NAME choose by device name instead. One RX and one TX queue per
 * port, polled by the main lcore. A frame is never dropped for a full TX
 * ring: it waits, and that direction's RX pauses until it has left, so the
 * sender sees back-pressure and every byte arrives (the benchmark checks
 * it).
 *
 * Runs until SIGINT or SIGTERM, then prints one JSON object (counters,
 * the cycles the loop spent and those of iterations that moved a packet:
 * the busy share of a polling thread) to stdout or --stats FILE, stops
 * the ports and removes EAL's runtime directory.
 *
 * Usage: px_dpdk_fwd [EAL options] -- --mode io|gro [options]
 * Exit: 0 ok, 2 bad usage or DPDK initialisation failed.
 * Build: bench/dpdk/build.sh OUT/px_dpdk_fwd. Documentation: bench/dpdk/README.md.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_common.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_gro.h>
#include <rte_gso.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_net.h>
#include <rte_version.h>

#define PX_TOOL "px_dpdk_fwd"
#include "px_dpdk_common.h"

#define MAX_BURST 256
/* Frames waiting for one direction's TX: a burst of GRO flushes or GSO
 * pieces fits (see room()). */
#define PEND_CAP 16384
/* The most pieces rte_gso_segment makes of one packet here: a 64 KB GRO
 * merge cut at a 9000-byte inner MTU, or a 9000-byte frame cut at a
 * 576-byte outer MTU. */
#define MAX_PIECES 128

enum mode { MODE_IO, MODE_GRO };

struct cfg {
	enum mode mode;
	unsigned burst, hold_us, mtu, imtu, max_flows, items_per_flow;
	const char *outer, *inner, *stats;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* One direction: frames received on rx_port, waiting to leave on tx_port. */
struct dir {
	const char *name;
	uint16_t rx_port, tx_port;
	struct rte_mbuf **pend;
	unsigned head, n; /* pend[head, n) wait for TX */
	uint64_t rx_frames, rx_bytes, tx_frames, tx_bytes;
};

struct stats {
	uint64_t gro_flushes, gro_flushed, gro_unmerged, resegmented, reseg_pieces;
	uint64_t gso_segmented, gso_pieces, csum_fixed, unsegmentable, errors;
};

/* PX_DPDK_FWD_FAULT=drop|corrupt|oversize damages the 1000th inbound
 * frame after it was received, so that a test can see the generator's
 * checks fire: drop frees it, corrupt flips its last byte (checksums left
 * as they were), oversize glues copies of it to its end (a frame above
 * every MTU). Off unless set. */
enum fault { F_NONE, F_DROP, F_CORRUPT, F_OVERSIZE };

struct fwd {
	struct cfg c;
	enum fault fault;
	struct dir in, out; /* in: outer -> inner (merge); out: inner -> outer (split) */
	void *gro;
	struct rte_gso_ctx reseg, gso;
	struct stats st;
	uint64_t hold_cycles, next_flush;
};

static unsigned room(const struct dir *d) { return PEND_CAP - d->n; }

static void push(struct dir *d, struct rte_mbuf *m)
{
	d->pend[d->n++] = m;
}

/* What a NIC would have set: packet type and header lengths. */
static void classify(struct rte_mbuf *m)
{
	struct rte_net_hdr_lens hl;
	m->packet_type = rte_net_get_ptype(m, &hl, RTE_PTYPE_ALL_MASK);
	m->l2_len = hl.l2_len;
	m->l3_len = hl.l3_len;
	m->l4_len = hl.l4_len;
}

/* Cuts a TCP/IPv4 packet above `ip_limit` IP bytes with `ctx` (the pieces
 * go to d's pending frames with their checksums complete), or passes it
 * on; a multi-segment packet passed on (a GRO merge) gets its checksums
 * recomputed. Returns the pieces made (0: passed on). */
static unsigned cut_or_pass(struct fwd *f, struct dir *d, struct rte_mbuf *m, const struct rte_gso_ctx *ctx,
			    unsigned ip_limit)
{
	if (is_tcp4(m) && m->pkt_len - m->l2_len > ip_limit) {
		m->ol_flags |= RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4;
		int r = rte_gso_segment(m, ctx, &d->pend[d->n], (uint16_t)RTE_MIN(room(d), 65535u));
		if (r > 0) {
			rte_pktmbuf_free(m);
			for (int i = 0; i < r; i++)
				fix_csum(d->pend[d->n + (unsigned)i]);
			f->st.csum_fixed += (unsigned)r;
			d->n += (unsigned)r;
			return (unsigned)r;
		}
		if (r < 0)
			f->st.errors++;
		m->ol_flags &= ~(RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4);
	} else if (m->pkt_len - m->l2_len > ip_limit) {
		/* 22.11 GSO cuts TCP/IPv4 only: counted, passed as it is. */
		f->st.unsegmentable++;
	}
	if (m->nb_segs > 1 && is_tcp4(m)) {
		fix_csum(m);
		f->st.csum_fixed++;
	}
	push(d, m);
	return 0;
}

/* Frames GRO handed back (unmerged, or flushed): merges above the inner
 * MTU are cut back to it. */
static void gro_out(struct fwd *f, struct rte_mbuf **pk, unsigned k)
{
	for (unsigned i = 0; i < k; i++) {
		unsigned r = cut_or_pass(f, &f->in, pk[i], &f->reseg, f->c.imtu);
		if (r) {
			f->st.resegmented++;
			f->st.reseg_pieces += r;
		}
	}
}

/* Flushes everything GRO holds, as far as the pending room allows. */
static unsigned gro_flush(struct fwd *f)
{
	struct rte_mbuf *tmp[MAX_BURST];
	unsigned total = 0;
	while (rte_gro_get_pkt_count(f->gro) > 0) {
		unsigned fit = room(&f->in) / MAX_PIECES;
		if (fit == 0)
			break;
		uint16_t k = rte_gro_timeout_flush(f->gro, 0, RTE_GRO_TCP_IPV4, tmp,
						   (uint16_t)RTE_MIN(fit, (unsigned)MAX_BURST));
		if (k == 0)
			break;
		f->st.gro_flushed += k;
		gro_out(f, tmp, k);
		total += k;
	}
	f->st.gro_flushes++;
	return total;
}

static uint64_t frame_bytes(struct rte_mbuf **m, unsigned n)
{
	uint64_t b = 0;
	for (unsigned i = 0; i < n; i++)
		b += m[i]->pkt_len;
	return b;
}

static void inject_fault(struct fwd *f, struct dir *d, unsigned at)
{
	struct rte_mbuf *m = d->pend[at];
	switch (f->fault) {
	case F_DROP:
		rte_pktmbuf_free(m);
		memmove(&d->pend[at], &d->pend[at + 1], (d->n - at - 1) * sizeof(*d->pend));
		d->n--;
		break;
	case F_CORRUPT:
		rte_pktmbuf_mtod(rte_pktmbuf_lastseg(m), uint8_t *)[rte_pktmbuf_lastseg(m)->data_len - 1] ^= 0x5a;
		break;
	case F_OVERSIZE: {
		uint32_t one = m->pkt_len;
		while (m->pkt_len <= f->c.imtu + 18u) {
			struct rte_mbuf *copy = rte_pktmbuf_copy(m, m->pool, 0, one);
			if (!copy || rte_pktmbuf_chain(m, copy) != 0) {
				rte_pktmbuf_free(copy);
				break;
			}
		}
		break;
	}
	case F_NONE:
		break;
	}
}

/* Receives one burst into d (io mode: as they came; gro mode: through
 * GRO or GSO). Returns the frames received. */
static unsigned receive(struct fwd *f, struct dir *d)
{
	struct rte_mbuf *b[MAX_BURST];
	unsigned want = f->c.burst;
	if (f->c.mode == MODE_IO) {
		if (room(d) < want)
			return 0;
		uint16_t nb = rte_eth_rx_burst(d->rx_port, 0, &d->pend[d->n], (uint16_t)want);
		d->rx_frames += nb;
		d->rx_bytes += frame_bytes(&d->pend[d->n], nb);
		d->n += nb;
		if (f->fault && d == &f->in && d->rx_frames >= 1000 && d->rx_frames - nb < 1000)
			inject_fault(f, d, d->n - 1 - (unsigned)(d->rx_frames - 1000));
		return nb;
	}
	if (room(d) < want * MAX_PIECES)
		return 0;
	uint16_t nb = rte_eth_rx_burst(d->rx_port, 0, b, (uint16_t)want);
	if (nb == 0)
		return 0;
	d->rx_frames += nb;
	d->rx_bytes += frame_bytes(b, nb);
	for (unsigned i = 0; i < nb; i++)
		classify(b[i]);
	if (d == &f->in) {
		uint16_t left = rte_gro_reassemble(b, nb, f->gro);
		f->st.gro_unmerged += left;
		gro_out(f, b, left);
	} else {
		for (unsigned i = 0; i < nb; i++) {
			unsigned r = cut_or_pass(f, d, b[i], &f->gso, f->c.mtu);
			if (r) {
				f->st.gso_segmented++;
				f->st.gso_pieces += r;
			}
		}
	}
	return nb;
}

/* Sends what d holds, as much as the TX ring takes. */
static unsigned transmit(struct dir *d)
{
	if (d->head == d->n)
		return 0;
	unsigned sent = 0;
	while (d->head < d->n) {
		uint16_t k = (uint16_t)RTE_MIN(d->n - d->head, (unsigned)MAX_BURST);
		uint16_t t = rte_eth_tx_burst(d->tx_port, 0, &d->pend[d->head], k);
		/* pkt_len of sent mbufs is gone with them: count before. */
		sent += t;
		d->head += t;
		if (t < k)
			break;
	}
	d->tx_frames += sent;
	if (d->head == d->n)
		d->head = d->n = 0;
	return sent;
}

static void port_start(uint16_t port, struct rte_mempool *rx_pool)
{
	px_port_setup(port, rx_pool);
	if (rte_eth_dev_start(port) != 0)
		die(EXIT_INPUT, "port %u: start failed (memif client without its server?)", port);
}

static void print_dir(FILE *o, const struct dir *d)
{
	fprintf(o, "\"%s\":{\"rx_frames\":%" PRIu64 ",\"rx_bytes\":%" PRIu64 ",\"tx_frames\":%" PRIu64 "}",
		d->name, d->rx_frames, d->rx_bytes, d->tx_frames);
}

static void usage(FILE *o)
{
	fprintf(o,
		"usage: px_dpdk_fwd [EAL options] -- --mode io|gro [options]\n"
		"  --mode io|gro          io: plain forwarding (the I/O ceiling); gro: DPDK GRO\n"
		"                         inbound (outer to inner), GSO outbound (the baseline)\n"
		"  --burst N              frames per RX burst (32)\n"
		"  --hold-us US           gro: flush everything GRO holds every US (500, as px)\n"
		"  --mtu N                outer IP MTU, the outbound GSO target (1500)\n"
		"  --imtu N               inner IP MTU: merges above it are cut back (9000)\n"
		"  --max-flows N          rte_gro_param.max_flow_num (1024)\n"
		"  --items-per-flow N     rte_gro_param.max_item_per_flow (4)\n"
		"  --outer NAME, --inner NAME   ports by device name (default: ports 0 and 1)\n"
		"  --stats FILE           write the JSON there instead of stdout\n"
		"Runs until SIGINT/SIGTERM, then prints one JSON object.\n");
}

static void parse_args(int argc, char **argv, struct cfg *c)
{
	static const struct option opts[] = {
		{"mode", required_argument, 0, 'M'},
		{"burst", required_argument, 0, 'b'},
		{"hold-us", required_argument, 0, 'H'},
		{"mtu", required_argument, 0, 'm'},
		{"imtu", required_argument, 0, 'i'},
		{"max-flows", required_argument, 0, 'f'},
		{"items-per-flow", required_argument, 0, 'n'},
		{"outer", required_argument, 0, 'o'},
		{"inner", required_argument, 0, 'I'},
		{"stats", required_argument, 0, 's'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	int o, have_mode = 0;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'M':
			if (strcmp(optarg, "io") == 0)
				c->mode = MODE_IO;
			else if (strcmp(optarg, "gro") == 0)
				c->mode = MODE_GRO;
			else
				die(EXIT_INPUT, "--mode must be io or gro, not %s", optarg);
			have_mode = 1;
			break;
		case 'b': c->burst = parse_uint(optarg, "--burst"); break;
		case 'H': c->hold_us = parse_uint(optarg, "--hold-us"); break;
		case 'm': c->mtu = parse_uint(optarg, "--mtu"); break;
		case 'i': c->imtu = parse_uint(optarg, "--imtu"); break;
		case 'f': c->max_flows = parse_uint(optarg, "--max-flows"); break;
		case 'n': c->items_per_flow = parse_uint(optarg, "--items-per-flow"); break;
		case 'o': c->outer = optarg; break;
		case 'I': c->inner = optarg; break;
		case 's': c->stats = optarg; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(EXIT_INPUT);
		}
	}
	if (optind != argc || !have_mode) {
		usage(stderr);
		die(EXIT_INPUT, "give --mode io or --mode gro");
	}
	if (c->burst < 1 || c->burst > MAX_BURST)
		die(EXIT_INPUT, "--burst must be 1..%d", MAX_BURST);
	if (c->hold_us < 1)
		die(EXIT_INPUT, "--hold-us must be at least 1");
	if (c->mtu < 576 || c->imtu < c->mtu || c->imtu > 65535 - RTE_ETHER_HDR_LEN)
		die(EXIT_INPUT, "need 576 <= --mtu <= --imtu <= 65521");
	if (c->max_flows < 1 || c->max_flows > 65535 || c->items_per_flow < 1 || c->items_per_flow > 65535)
		die(EXIT_INPUT, "--max-flows and --items-per-flow must be 1..65535");
}

int main(int argc, char **argv)
{
	/* The application's arguments follow "--"; check them before EAL
	 * starts, so that a usage error costs nothing. */
	struct fwd f;
	memset(&f, 0, sizeof(f));
	f.c = (struct cfg){.mode = MODE_IO, .burst = 32, .hold_us = 500, .mtu = 1500, .imtu = 9000,
			   .max_flows = 1024, .items_per_flow = 4};
	int dd = px_app_args(argc, argv, usage, "--mode io|gro");
	parse_args(argc - dd, argv + dd, &f.c);
	px_app_args_done(argv, dd);
	const char *fault = getenv("PX_DPDK_FWD_FAULT");
	if (fault && *fault) {
		if (f.c.mode != MODE_IO)
			die(EXIT_INPUT, "PX_DPDK_FWD_FAULT is for --mode io");
		f.fault = strcmp(fault, "drop") == 0       ? F_DROP
			  : strcmp(fault, "corrupt") == 0  ? F_CORRUPT
			  : strcmp(fault, "oversize") == 0 ? F_OVERSIZE
							   : (die(EXIT_INPUT, "PX_DPDK_FWD_FAULT must be drop, corrupt or oversize"), F_NONE);
	}

	rte_openlog_stream(stderr);
	if (rte_eal_init(dd, argv) < 0)
		die(EXIT_INPUT, "rte_eal_init failed: %s", rte_strerror(rte_errno));
	px_eal_note_runtime_dir();
	px_on_stop_signals(on_signal);
	if (rte_eth_dev_count_avail() < 2)
		die(EXIT_INPUT, "need two ports (outer, inner), have %u: give two --vdev", rte_eth_dev_count_avail());
	uint16_t outer = px_port_by_name(f.c.outer, 0), inner = px_port_by_name(f.c.inner, 1);
	if (outer == inner)
		die(EXIT_INPUT, "the outer and the inner port are the same port");

	/* Outer RX: eMTU frames; GRO holds what arrives in one hold period
	 * (everything is flushed every --hold-us: 64 Ki frames is 500 µs at
	 * 130 Mpps). Inner RX: single-segment iMTU frames. */
	unsigned outer_n = f.c.mode == MODE_GRO ? 65536u : 16384u;
	struct rte_mempool *outer_pool = px_mkpool("px_fwd_outer", outer_n, RTE_MBUF_DEFAULT_BUF_SIZE);
	struct rte_mempool *inner_pool =
		px_mkpool("px_fwd_inner", 8192, RTE_PKTMBUF_HEADROOM + RTE_ALIGN_CEIL(f.c.imtu + 18, 1024));
	port_start(outer, outer_pool);
	port_start(inner, inner_pool);

	f.in = (struct dir){.name = "inbound", .rx_port = outer, .tx_port = inner};
	f.out = (struct dir){.name = "outbound", .rx_port = inner, .tx_port = outer};
	f.in.pend = malloc(PEND_CAP * sizeof(*f.in.pend));
	f.out.pend = malloc(PEND_CAP * sizeof(*f.out.pend));
	if (!f.in.pend || !f.out.pend)
		die(EXIT_INPUT, "out of memory");
	if (f.c.mode == MODE_GRO) {
		struct rte_gro_param p = {
			.gro_types = RTE_GRO_TCP_IPV4,
			.max_flow_num = (uint16_t)f.c.max_flows,
			.max_item_per_flow = (uint16_t)f.c.items_per_flow,
			.socket_id = (uint16_t)rte_socket_id(),
		};
		f.gro = rte_gro_ctx_create(&p);
		if (!f.gro)
			die(EXIT_INPUT, "rte_gro_ctx_create failed (max_flows %u x items %u)", f.c.max_flows,
			    f.c.items_per_flow);
		struct rte_mempool *hdr = px_mkpool("px_fwd_hdr", 32768, RTE_PKTMBUF_HEADROOM + 256);
		struct rte_mempool *ind = px_mkpool("px_fwd_ind", 65536, 0);
		f.reseg = (struct rte_gso_ctx){.direct_pool = hdr, .indirect_pool = ind, .flag = 0,
					       .gso_types = RTE_ETH_TX_OFFLOAD_TCP_TSO,
					       .gso_size = (uint16_t)(f.c.imtu + RTE_ETHER_HDR_LEN)};
		f.gso = f.reseg;
		f.gso.gso_size = (uint16_t)(f.c.mtu + RTE_ETHER_HDR_LEN);
	}
	const double tsc_hz = (double)rte_get_tsc_hz();
	f.hold_cycles = (uint64_t)(f.c.hold_us * tsc_hz / 1e6);
	fprintf(stderr, "px_dpdk_fwd: mode %s, outer port %u, inner port %u, lcore %u: forwarding\n",
		f.c.mode == MODE_IO ? "io" : "gro", outer, inner, rte_lcore_id());

	/* Cycles are counted from the first frame to the last one moved. */
	uint64_t first = 0, last = 0, busy = 0;
	f.next_flush = rte_rdtsc() + f.hold_cycles;
	while (!stop) {
		uint64_t t0 = rte_rdtsc();
		unsigned moved = receive(&f, &f.in) + receive(&f, &f.out);
		if (f.gro && t0 >= f.next_flush) {
			moved += gro_flush(&f);
			f.next_flush = t0 + f.hold_cycles;
		}
		moved += transmit(&f.in) + transmit(&f.out);
		if (moved) {
			uint64_t t1 = rte_rdtsc();
			if (!first)
				first = t0;
			last = t1;
			busy += t1 - t0;
		}
	}

	FILE *o = stdout;
	if (f.c.stats && !(o = fopen(f.c.stats, "w")))
		die(EXIT_INPUT, "%s: %s", f.c.stats, strerror(errno));
	uint64_t span = last - first;
	fprintf(o,
		"{\"tool\":\"px_dpdk_fwd\",\"mode\":\"%s\",\"dpdk_version\":\"%s\",\"lcore\":%u,\"tsc_hz\":%.0f,"
		"\"burst\":%u,\"hold_us\":%u,\"mtu\":%u,\"imtu\":%u,\"max_flow_num\":%u,\"max_item_per_flow\":%u,"
		"\"active_seconds\":%.9f,\"cycles\":%" PRIu64 ",\"busy_cycles\":%" PRIu64 ",\"busy_share\":%.6f,",
		f.c.mode == MODE_IO ? "io" : "gro", rte_version(), rte_lcore_id(), tsc_hz, f.c.burst, f.c.hold_us,
		f.c.mtu, f.c.imtu, f.c.max_flows, f.c.items_per_flow, span / tsc_hz, span, busy,
		span ? (double)busy / (double)span : 0.0);
	print_dir(o, &f.in);
	fputc(',', o);
	print_dir(o, &f.out);
	fprintf(o,
		",\"gro_flushes\":%" PRIu64 ",\"gro_flushed\":%" PRIu64 ",\"gro_unmerged\":%" PRIu64
		",\"resegmented\":%" PRIu64 ",\"reseg_pieces\":%" PRIu64 ",\"gso_segmented\":%" PRIu64
		",\"gso_pieces\":%" PRIu64 ",\"csum_fixed\":%" PRIu64 ",\"unsegmentable\":%" PRIu64
		",\"errors\":%" PRIu64 ",\"held_at_exit\":%" PRIu64 ",\"pending_at_exit\":%u}\n",
		f.st.gro_flushes, f.st.gro_flushed, f.st.gro_unmerged, f.st.resegmented, f.st.reseg_pieces,
		f.st.gso_segmented, f.st.gso_pieces, f.st.csum_fixed, f.st.unsegmentable, f.st.errors,
		f.gro ? rte_gro_get_pkt_count(f.gro) : 0, (f.in.n - f.in.head) + (f.out.n - f.out.head));
	if (o != stdout)
		fclose(o);
	else
		fflush(stdout);
	rte_eth_dev_stop(outer);
	rte_eth_dev_stop(inner);
	rte_eth_dev_close(outer);
	rte_eth_dev_close(inner);
	rte_eal_cleanup();
	return 0;
}
