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
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_byteorder.h>
#include <rte_eal.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
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

static inline void cs_add(struct csum *c, const uint8_t *p, uint32_t n)
{
	if (n == 0)
		return;
	if (c->odd) {
		c->sum += p[0];
		p++;
		n--;
		c->odd = 0;
	}
	while (n >= 2) {
		c->sum += (uint32_t)p[0] << 8 | p[1];
		p += 2;
		n -= 2;
	}
	if (n) {
		c->sum += (uint32_t)p[0] << 8;
		c->odd = 1;
	}
}

static inline uint16_t cs_fold(uint64_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
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
