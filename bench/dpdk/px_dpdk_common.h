/* SPDX-License-Identifier: Apache-2.0 OR MIT
 *
 * What the three DPDK tools of bench/dpdk share (px_dpdk_bench: DPDK's
 * GRO/GSO on buffers; px_dpdk_fwd: the forwarders of `px bench gateway
 * --datapath dpdk`; px_dpdk_gen: its generator and sink):
 *
 *   - a classic pcap reader (LINKTYPE_ETHERNET, µs or ns, either byte
 *     order), whole file in memory;
 *   - our own header parser and one's-complement sum, independent of
 *     DPDK's, so that the checks do not trust the code under test;
 *   - a flow index (5-tuple to a dense number, open addressing);
 *   - the TCP/IPv4 checksum completion DPDK leaves to the application
 *     (22.11's rte_ipv4_udptcp_cksum_mbuf with its odd-offset carry fixed);
 *   - removing the runtime directory EAL creates under /var/run/dpdk even
 *     with --no-shconf, so that no tool leaves files behind.
 *
 * Header-only (static inline): each tool is one translation unit. Define
 * PX_TOOL (the program's name, for messages) before including it.
 */
#ifndef PX_DPDK_COMMON_H
#define PX_DPDK_COMMON_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_byteorder.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_tcp.h>

#ifndef PX_TOOL
#error "define PX_TOOL before including px_dpdk_common.h"
#endif

#define EXIT_CHECK 1
#define EXIT_INPUT 2

static inline void __attribute__((noreturn, format(printf, 2, 3))) die(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, PX_TOOL ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

/* A decimal option value up to 10^8, or exit 2 naming the option. */
static inline unsigned parse_uint(const char *s, const char *what)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || end == s || v > 100000000ul)
		die(EXIT_INPUT, "bad value for %s: %s", what, s);
	return (unsigned)v;
}

/* ------------------------------------------------------------------ */
/* Classic pcap reader. Frames point into the file's bytes.            */

struct frame {
	uint64_t ts_ns;
	const uint8_t *data;
	uint32_t len;
};

struct trace {
	const char *path;
	uint8_t *buf;
	size_t size;
	struct frame *f;
	size_t n;
	uint32_t max_len;
	uint64_t bytes; /* sum of frame lengths */
};

static inline uint32_t rd32(const uint8_t *p, int swap)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return swap ? __builtin_bswap32(v) : v;
}

static inline void pcap_load(const char *path, struct trace *t)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		die(EXIT_INPUT, "%s: %s", path, strerror(errno));
	if (fseek(fp, 0, SEEK_END) != 0)
		die(EXIT_INPUT, "%s: cannot seek", path);
	long sz = ftell(fp);
	rewind(fp);
	if (sz < 24)
		die(EXIT_INPUT, "%s: not a pcap file (too short)", path);
	t->path = path;
	t->size = (size_t)sz;
	t->buf = malloc(t->size);
	if (!t->buf || fread(t->buf, 1, t->size, fp) != t->size)
		die(EXIT_INPUT, "%s: read failed", path);
	fclose(fp);

	uint32_t magic;
	memcpy(&magic, t->buf, 4);
	int swap, nsec;
	switch (magic) {
	case 0xa1b2c3d4: swap = 0; nsec = 0; break;
	case 0xa1b23c4d: swap = 0; nsec = 1; break;
	case 0xd4c3b2a1: swap = 1; nsec = 0; break;
	case 0x4d3cb2a1: swap = 1; nsec = 1; break;
	default:
		die(EXIT_INPUT, "%s: not a classic pcap file (magic %08x; pcapng is not supported)",
		    path, magic);
	}
	uint32_t linktype = rd32(t->buf + 20, swap) & 0xffff;
	if (linktype != 1)
		die(EXIT_INPUT, "%s: link type %u, need 1 (Ethernet)", path, linktype);

	size_t cap = 1024, off = 24;
	t->f = malloc(cap * sizeof(*t->f));
	t->n = 0;
	t->max_len = 0;
	t->bytes = 0;
	while (off < t->size) {
		if (t->size - off < 16)
			die(EXIT_INPUT, "%s: truncated record header at byte %zu", path, off);
		uint64_t sec = rd32(t->buf + off, swap);
		uint64_t frac = rd32(t->buf + off + 4, swap);
		uint32_t incl = rd32(t->buf + off + 8, swap);
		uint32_t orig = rd32(t->buf + off + 12, swap);
		off += 16;
		if (incl > t->size - off)
			die(EXIT_INPUT, "%s: truncated frame %zu", path, t->n + 1);
		if (incl != orig)
			die(EXIT_INPUT, "%s: frame %zu captured with %u of %u bytes (snaplen too small)",
			    path, t->n + 1, incl, orig);
		if (incl < 14 || incl > 65535 + 18)
			die(EXIT_INPUT, "%s: frame %zu has impossible length %u", path, t->n + 1, incl);
		if (t->n == cap) {
			cap *= 2;
			t->f = realloc(t->f, cap * sizeof(*t->f));
			if (!t->f)
				die(EXIT_INPUT, "out of memory");
		}
		uint64_t ts = sec * 1000000000ull + (nsec ? frac : frac * 1000ull);
		if (t->n > 0 && ts < t->f[t->n - 1].ts_ns)
			die(EXIT_INPUT, "%s: frame %zu goes back in time", path, t->n + 1);
		t->f[t->n].ts_ns = ts;
		t->f[t->n].data = t->buf + off;
		t->f[t->n].len = incl;
		if (incl > t->max_len)
			t->max_len = incl;
		t->bytes += incl;
		t->n++;
		off += incl;
	}
	if (t->n == 0)
		die(EXIT_INPUT, "%s: no frames", path);
}

/* ------------------------------------------------------------------ */
/* Our own header parser (independent of DPDK's).                      */

enum { K_OTHER = 0, K_TCP4 = 4, K_TCP6 = 6 };

#define KEYLEN 37

struct pinfo {
	int kind;
	uint8_t key[KEYLEN]; /* kind, src[16], dst[16], sport, dport */
	uint32_t l2, l3, l4;  /* header lengths */
	uint32_t ip_len;      /* IPv4 total length, or 40 + IPv6 payload length */
	uint32_t payload;     /* TCP payload bytes */
	uint32_t seq;
	uint8_t flags;
	uint8_t ecn; /* IP ECN codepoint (3 = CE) */
};

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* contig: bytes readable at p; total: bytes of the whole packet. */
static inline void parse_frame(const uint8_t *p, uint32_t contig, uint32_t total, struct pinfo *pi)
{
	memset(pi, 0, sizeof(*pi));
	pi->kind = K_OTHER;
	if (contig < 14)
		return;
	uint32_t l2 = 14;
	uint16_t et = be16(p + 12);
	if (et == 0x8100 || et == 0x88a8) {
		if (contig < 18)
			return;
		et = be16(p + 16);
		l2 = 18;
	}
	const uint8_t *ip = p + l2;
	if (et == 0x0800) {
		if (contig < l2 + 20 || (ip[0] >> 4) != 4)
			return;
		uint32_t ihl = (ip[0] & 15u) * 4;
		uint32_t tot = be16(ip + 2);
		if (ihl < 20 || tot < ihl + 20 || l2 + tot > total || ip[9] != 6)
			return;
		if (be16(ip + 6) & 0x3fff) /* MF or offset: a fragment */
			return;
		if (contig < l2 + ihl + 20)
			return;
		const uint8_t *th = ip + ihl;
		uint32_t thl = (th[12] >> 4) * 4u;
		if (thl < 20 || ihl + thl > tot || contig < l2 + ihl + thl)
			return;
		pi->kind = K_TCP4;
		pi->l2 = l2; pi->l3 = ihl; pi->l4 = thl;
		pi->ip_len = tot;
		pi->payload = tot - ihl - thl;
		pi->key[0] = 4;
		memcpy(pi->key + 1, ip + 12, 4);
		memcpy(pi->key + 17, ip + 16, 4);
		memcpy(pi->key + 33, th, 4);
		pi->seq = be32(th + 4);
		pi->flags = th[13];
		pi->ecn = ip[1] & 3;
	} else if (et == 0x86dd) {
		if (contig < l2 + 40 + 20 || (ip[0] >> 4) != 6 || ip[6] != 6)
			return;
		uint32_t plen = be16(ip + 4);
		if (l2 + 40 + plen > total || plen < 20)
			return;
		const uint8_t *th = ip + 40;
		uint32_t thl = (th[12] >> 4) * 4u;
		if (thl < 20 || thl > plen || contig < l2 + 40 + thl)
			return;
		pi->kind = K_TCP6;
		pi->l2 = l2; pi->l3 = 40; pi->l4 = thl;
		pi->ip_len = 40 + plen;
		pi->payload = plen - thl;
		pi->key[0] = 6;
		memcpy(pi->key + 1, ip + 8, 16);
		memcpy(pi->key + 17, ip + 24, 16);
		memcpy(pi->key + 33, th, 4);
		pi->seq = be32(th + 4);
		pi->flags = th[13];
		pi->ecn = (uint8_t)((be16(ip) >> 4) & 3);
	}
}

static inline void key_str(const uint8_t *k, char *buf, size_t len)
{
	if (k[0] == 4)
		snprintf(buf, len, "%u.%u.%u.%u:%u > %u.%u.%u.%u:%u", k[1], k[2], k[3], k[4],
			 be16(k + 33), k[17], k[18], k[19], k[20], be16(k + 35));
	else
		snprintf(buf, len, "[ipv6 %02x%02x:%02x%02x...]:%u > [...]:%u", k[1], k[2], k[3],
			 k[4], be16(k + 33), be16(k + 35));
}

/* ------------------------------------------------------------------ */
/* Our own one's-complement sum over byte runs that may split 16-bit   */
/* words (mbuf chains).                                                */

struct csum {
	uint64_t sum;
	int odd; /* the previous run ended in the middle of a word */
};

static inline uint16_t cs_fold(uint64_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

/* Adds the bytes p[0, n) as big-endian 16-bit words (RFC 1071), going on
 * from where the previous run stopped (a run may end in the middle of a
 * word). The bytes are summed as native 32-bit words into 64 bits, eight
 * bytes a step, then folded: a one's-complement sum does not depend on
 * the byte order it is taken in except for a swap of the folded result
 * (RFC 1071 §2(B)), and a run that starts in the middle of a word is that
 * swap once more. */
static inline void cs_add(struct csum *c, const uint8_t *p, uint32_t n)
{
	uint64_t acc = 0;
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		acc += (w & 0xffffffffu) + (w >> 32);
	}
	for (; i + 2 <= n; i += 2) {
		uint16_t w;
		memcpy(&w, p + i, 2);
		acc += w;
	}
	if (i < n)
		acc += rte_cpu_to_be_16((uint16_t)(p[i] << 8)); /* a last odd byte: the word's first */
	uint16_t native = cs_fold(acc);
	uint16_t be = rte_be_to_cpu_16(native);
	/* Starting mid-word, every byte sits one position later: swapped. */
	c->sum += c->odd ? rte_bswap16(be) : be;
	c->odd ^= n & 1;
}

/* Calls fn on each contiguous run of [off, off+len) of the mbuf chain;
 * -1 when the chain is shorter. */
typedef void (*run_fn)(void *arg, const uint8_t *p, uint32_t n, uint32_t pos);

static inline int mbuf_runs(const struct rte_mbuf *m, uint32_t off, uint32_t len, run_fn fn, void *arg)
{
	uint32_t pos = 0;
	for (const struct rte_mbuf *s = m; s && len; s = s->next) {
		uint32_t dl = s->data_len;
		if (off >= dl) {
			off -= dl;
			continue;
		}
		uint32_t n = dl - off;
		if (n > len)
			n = len;
		fn(arg, rte_pktmbuf_mtod_offset(s, const uint8_t *, off), n, pos);
		pos += n;
		len -= n;
		off = 0;
	}
	return len == 0 ? 0 : -1;
}

static inline void run_csum(void *arg, const uint8_t *p, uint32_t n, uint32_t pos)
{
	(void)pos;
	cs_add(arg, p, n);
}

/* Verifies the IPv4 header checksum and the TCP checksum (IPv4 or IPv6)
 * of a packet whose headers are contiguous in the first segment.
 * Returns 0, or -1 with *why naming what failed. */
static inline int verify_csums(const struct rte_mbuf *m, const struct pinfo *pi, const char **why)
{
	const uint8_t *p = rte_pktmbuf_mtod(m, const uint8_t *);
	const uint8_t *ip = p + pi->l2;
	struct csum c = {0, 0};
	uint32_t l4len = pi->ip_len - pi->l3;
	if (pi->kind == K_TCP4) {
		cs_add(&c, ip, pi->l3);
		if (cs_fold(c.sum) != 0xffff) {
			*why = "IPv4 header checksum";
			return -1;
		}
		c.sum = 0;
		cs_add(&c, ip + 12, 8);
		c.sum += 6 + l4len;
	} else {
		cs_add(&c, ip + 8, 32);
		c.sum += 6 + l4len;
	}
	if (mbuf_runs(m, pi->l2 + pi->l3, l4len, run_csum, &c) != 0) {
		*why = "TCP segment shorter than its IP length";
		return -1;
	}
	if (cs_fold(c.sum) != 0xffff) {
		*why = "TCP checksum";
		return -1;
	}
	return 0;
}

/* seq a before b, modulo 2^32 */
static inline int seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }

/* One segment of a stream seen: its bytes counted, the highest sequence
 * moved on. Returns 1 when the segment starts below that (out of order). */
static inline int stream_advance(uint32_t *hi, uint8_t *hi_set, uint64_t *bytes, uint32_t seq, uint32_t len)
{
	int ooo = *hi_set && seq_lt(seq, *hi);
	uint32_t end = seq + len;
	if (!*hi_set || seq_lt(*hi, end))
		*hi = end;
	*hi_set = 1;
	*bytes += len;
	return ooo;
}

/* ------------------------------------------------------------------ */
/* Flow index: 5-tuple key to a dense id 0..n-1, each id with a zeroed  */
/* value of `vsize` bytes. Pointers from fidx_get stay valid until the  */
/* next call that creates a flow.                                       */

#define FIDX_NONE UINT32_MAX

struct fidx {
	uint32_t *slot; /* id + 1; 0 = empty */
	size_t cap;     /* slots, a power of two, at least twice n */
	uint8_t (*key)[KEYLEN];
	uint8_t *val;
	size_t vsize, n, vcap;
};

static inline void fidx_init(struct fidx *t, size_t vsize)
{
	memset(t, 0, sizeof(*t));
	t->cap = 1024;
	t->slot = calloc(t->cap, sizeof(*t->slot));
	t->vcap = 256;
	t->key = malloc(t->vcap * KEYLEN);
	t->val = calloc(t->vcap, vsize);
	t->vsize = vsize;
	if (!t->slot || !t->key || !t->val)
		die(EXIT_INPUT, "out of memory");
}

static inline uint64_t fidx_hash(const uint8_t *key)
{
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < KEYLEN; i++)
		h = (h ^ key[i]) * 1099511628211ull;
	return h;
}

static inline void fidx_place(struct fidx *t, uint32_t id)
{
	size_t i = fidx_hash(t->key[id]) & (t->cap - 1);
	while (t->slot[i])
		i = (i + 1) & (t->cap - 1);
	t->slot[i] = id + 1;
}

/* The id of `key`, or FIDX_NONE when it is unknown and !create. */
static inline uint32_t fidx_id(struct fidx *t, const uint8_t *key, int create)
{
	size_t i = fidx_hash(key) & (t->cap - 1);
	for (;;) {
		uint32_t s = t->slot[i];
		if (!s)
			break;
		if (memcmp(t->key[s - 1], key, KEYLEN) == 0)
			return s - 1;
		i = (i + 1) & (t->cap - 1);
	}
	if (!create)
		return FIDX_NONE;
	if (t->n == t->vcap) {
		t->vcap *= 2;
		t->key = realloc(t->key, t->vcap * KEYLEN);
		t->val = realloc(t->val, t->vcap * t->vsize);
		if (!t->key || !t->val)
			die(EXIT_INPUT, "out of memory");
		memset(t->val + t->n * t->vsize, 0, (t->vcap - t->n) * t->vsize);
	}
	uint32_t id = (uint32_t)t->n++;
	memcpy(t->key[id], key, KEYLEN);
	if (2 * t->n > t->cap) {
		free(t->slot);
		t->cap *= 2;
		t->slot = calloc(t->cap, sizeof(*t->slot));
		if (!t->slot)
			die(EXIT_INPUT, "out of memory");
		for (uint32_t j = 0; j < t->n; j++)
			fidx_place(t, j);
	} else {
		t->slot[i] = id + 1;
	}
	return id;
}

static inline void *fidx_at(const struct fidx *t, uint32_t id) { return t->val + (size_t)id * t->vsize; }

/* The value of `key`'s flow, or NULL when it is unknown and !create. */
static inline void *fidx_get(struct fidx *t, const uint8_t *key, int create)
{
	uint32_t id = fidx_id(t, key, create);
	return id == FIDX_NONE ? NULL : fidx_at(t, id);
}

/* ------------------------------------------------------------------ */
/* Checksums DPDK leaves stale after GRO and GSO.                      */

static inline int is_tcp4(const struct rte_mbuf *m)
{
	return RTE_ETH_IS_IPV4_HDR(m->packet_type) &&
	       (m->packet_type & RTE_PTYPE_L4_MASK) == RTE_PTYPE_L4_TCP;
}

/* The TCP checksum over an mbuf chain: DPDK 22.11's
 * rte_ipv4_udptcp_cksum_mbuf, except that each segment's sum is folded to
 * 16 bits before it is byte-swapped. 22.11's rte_raw_cksum_mbuf swaps
 * `(uint16_t)tmp` of an unfolded 32-bit sum, which drops its carries when a
 * segment starts at an odd offset (merges of odd-length segments: the
 * benchmark trace's small flows), and the checksum comes out wrong. Same
 * work per byte as DPDK's. */
static inline uint16_t tcp4_cksum_mbuf(const struct rte_mbuf *m, const struct rte_ipv4_hdr *ip, uint32_t off)
{
	uint32_t len = rte_be_to_cpu_16(ip->total_length) - rte_ipv4_hdr_len(ip);
	uint32_t sum = rte_ipv4_phdr_cksum(ip, 0), done = 0;
	const struct rte_mbuf *seg = m;
	while (seg && off >= seg->data_len) {
		off -= seg->data_len;
		seg = seg->next;
	}
	for (; seg && done < len; seg = seg->next, off = 0) {
		uint32_t n = seg->data_len - off;
		if (n > len - done)
			n = len - done;
		uint32_t tmp = __rte_raw_cksum_reduce(__rte_raw_cksum(rte_pktmbuf_mtod_offset(seg, const char *, off), n, 0));
		sum += (done & 1) ? rte_bswap16((uint16_t)tmp) : tmp;
		done += n;
	}
	return (uint16_t)~__rte_raw_cksum_reduce(sum);
}

/* Recomputes the IPv4 header and TCP checksums of a TCP/IPv4 packet whose
 * l2_len and l3_len are set. */
static inline void fix_csum(struct rte_mbuf *m)
{
	struct rte_ipv4_hdr *ip = rte_pktmbuf_mtod_offset(m, struct rte_ipv4_hdr *, m->l2_len);
	struct rte_tcp_hdr *th = (struct rte_tcp_hdr *)((char *)ip + m->l3_len);
	ip->hdr_checksum = 0;
	ip->hdr_checksum = rte_ipv4_cksum(ip);
	th->cksum = 0;
	th->cksum = tcp4_cksum_mbuf(m, ip, m->l2_len + m->l3_len);
}

/* SIGINT and SIGTERM call `fn`, and interrupt a blocking read (no
 * SA_RESTART). */
static inline void px_on_stop_signals(void (*fn)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* ------------------------------------------------------------------ */
/* DPDK set-up the tools share.                                         */

/* An mbuf pool of n mbufs of data_room bytes (a per-lcore cache for the
 * larger ones), or exit 2 saying which. */
static inline struct rte_mempool *px_mkpool(const char *name, size_t n, unsigned data_room)
{
	unsigned cache = n >= 4096 ? 256 : 0;
	struct rte_mempool *mp = rte_pktmbuf_pool_create(name, (unsigned)n, cache, 0, (uint16_t)data_room,
							 (int)rte_socket_id());
	if (!mp)
		die(EXIT_INPUT, "cannot create mbuf pool %s (%zu mbufs of %u bytes): %s", name, n, data_room,
		    rte_strerror(rte_errno));
	return mp;
}

/* The port called `name`, or `fallback` when no name was given. */
static inline uint16_t px_port_by_name(const char *name, uint16_t fallback)
{
	if (!name)
		return fallback;
	uint16_t p;
	if (rte_eth_dev_get_port_by_name(name, &p) != 0)
		die(EXIT_INPUT, "no DPDK port named %s", name);
	return p;
}

/* One RX queue (mbufs from rx_pool) and one TX queue of 1024 descriptors,
 * multi-segment TX where the port offers it; not started. */
static inline void px_port_setup(uint16_t port, struct rte_mempool *rx_pool)
{
	struct rte_eth_dev_info info;
	if (rte_eth_dev_info_get(port, &info) != 0)
		die(EXIT_INPUT, "port %u: no device info", port);
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	conf.txmode.offloads = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
	if (rte_eth_dev_configure(port, 1, 1, &conf) != 0)
		die(EXIT_INPUT, "port %u: configure failed", port);
	if (rte_eth_rx_queue_setup(port, 0, 1024, (unsigned)rte_eth_dev_socket_id(port), NULL, rx_pool) != 0)
		die(EXIT_INPUT, "port %u: RX queue setup failed", port);
	if (rte_eth_tx_queue_setup(port, 0, 1024, (unsigned)rte_eth_dev_socket_id(port), NULL) != 0)
		die(EXIT_INPUT, "port %u: TX queue setup failed", port);
}

/* `TOOL [EAL options] -- [options]`: the index of "--" in argv, or exit 2
 * with `usage` and `what` when there is none. The options after it are
 * then argv[dd + 1 ...], with argv[dd] standing in for the program name
 * while getopt reads them (px_app_args_done puts "--" back for EAL). */
static inline int px_app_args(int argc, char **argv, void (*usage)(FILE *), const char *what)
{
	int dd = 0;
	while (dd < argc && strcmp(argv[dd], "--") != 0)
		dd++;
	if (dd == argc) {
		usage(stderr);
		die(EXIT_INPUT, "EAL options, then --, then %s", what);
	}
	argv[dd] = argv[0];
	return dd;
}

static inline void px_app_args_done(char **argv, int dd) { argv[dd] = "--"; }

/* ------------------------------------------------------------------ */
/* EAL's runtime directory.                                            */

/* EAL 22.11 creates /var/run/dpdk/<file-prefix> in rte_eal_init even with
 * --no-shconf, and never removes it. Call right after rte_eal_init: on
 * every exit() or return from main (die() included) the directory is
 * removed, and /var/run/dpdk with it when that is empty (another
 * process's directory keeps it). A tool killed by a signal leaves it to
 * whoever started the tool (px bench gateway removes it). */
static char px_runtime_dir[4096];

static inline void px_eal_remove_runtime_dir(void)
{
	if (!px_runtime_dir[0])
		return;
	rmdir(px_runtime_dir);
	char *slash = strrchr(px_runtime_dir, '/');
	if (slash && slash != px_runtime_dir) {
		*slash = 0;
		rmdir(px_runtime_dir); /* fails harmlessly when not empty */
	}
	px_runtime_dir[0] = 0;
}

static inline void px_eal_note_runtime_dir(void)
{
	snprintf(px_runtime_dir, sizeof(px_runtime_dir), "%s", rte_eal_get_runtime_dir());
	atexit(px_eal_remove_runtime_dir);
}

#endif
