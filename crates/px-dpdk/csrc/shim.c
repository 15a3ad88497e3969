/* px-dpdk's C side: see px_dpdk.h. Compiled by build.rs with pkg-config's
 * flags for libdpdk (DPDK 22.11 headers). */
#include <stddef.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_version.h>

#include "px_dpdk.h"

void px_dpdk_abi(struct px_abi *o) {
    o->rx_desc_size = sizeof(struct px_rx_desc);
    o->rx_desc_len = offsetof(struct px_rx_desc, len);
    o->rx_desc_flags = offsetof(struct px_rx_desc, flags);
    o->rx_desc_gso = offsetof(struct px_rx_desc, gso_size);
    o->tx_desc_size = sizeof(struct px_tx_desc);
    o->tx_desc_start = offsetof(struct px_tx_desc, start);
    o->tx_desc_flags = offsetof(struct px_tx_desc, flags);
    o->tx_desc_tso = offsetof(struct px_tx_desc, tso_segsz);
    o->info_size = sizeof(struct px_port_info);
    o->info_capa = offsetof(struct px_port_info, capa);
    o->info_mac = offsetof(struct px_port_info, mac);
    o->conf_size = sizeof(struct px_port_conf);
    o->conf_pool = offsetof(struct px_port_conf, pool);
    o->stats_size = sizeof(struct px_port_stats);
    o->ext_size = sizeof(struct px_ext);
    o->ext_done = offsetof(struct px_ext, done);
}

_Static_assert(sizeof(struct rte_mbuf_ext_shared_info) <= sizeof(((struct px_ext *)0)->shinfo),
               "px_ext.shinfo holds DPDK's rte_mbuf_ext_shared_info");

/* The driver's last free of a lent buffer's mbuf: the buffer is the
 * caller's again. */
static void px_ext_free(void *addr, void *opaque) {
    (void)addr;
    __atomic_store_n(&((struct px_ext *)opaque)->done, 1, __ATOMIC_RELEASE);
}

void *px_attach(void *pool, uint8_t *data, uint16_t len, struct px_ext *ext) {
    struct rte_mbuf *m = rte_pktmbuf_alloc((struct rte_mempool *)pool);
    if (m == NULL)
        return NULL;
    struct rte_mbuf_ext_shared_info *s = (struct rte_mbuf_ext_shared_info *)ext->shinfo;
    memset(s, 0, sizeof(*s));
    s->free_cb = px_ext_free;
    s->fcb_opaque = ext;
    rte_mbuf_ext_refcnt_set(s, 1);
    ext->done = 0;
    /* No IOVA: only drivers that copy the bytes (or read them on the CPU)
     * are given lent buffers. */
    rte_pktmbuf_attach_extbuf(m, data, RTE_BAD_IOVA, len, s);
    m->data_len = m->pkt_len = len;
    return m;
}

int px_eal_init(int argc, char **argv) { return rte_eal_init(argc, argv); }
int px_eal_cleanup(void) { return rte_eal_cleanup(); }
int px_errno(void) { return rte_errno; }
const char *px_strerror(int err) { return rte_strerror(err); }
const char *px_runtime_dir(void) { return rte_eal_get_runtime_dir(); }
const char *px_version(void) { return rte_version(); }
int px_thread_register(void) { return rte_thread_register(); }
void px_thread_unregister(void) { rte_thread_unregister(); }

int px_port_by_name(const char *name, uint16_t *port) { return rte_eth_dev_get_port_by_name(name, port); }

int px_port_info(uint16_t port, struct px_port_info *o) {
    struct rte_eth_dev_info di;
    int r = rte_eth_dev_info_get(port, &di);
    if (r != 0)
        return r;
    memset(o, 0, sizeof(*o));
    strncpy(o->driver, di.driver_name ? di.driver_name : "", sizeof(o->driver) - 1);
    o->port_id = port;
    o->max_rx_queues = di.max_rx_queues;
    o->max_tx_queues = di.max_tx_queues;
    uint16_t mtu = 0;
    if (rte_eth_dev_get_mtu(port, &mtu) == 0)
        o->mtu = mtu;
    o->max_rx_pktlen = di.max_rx_pktlen;
    o->socket = rte_eth_dev_socket_id(port);
    uint64_t tx = di.tx_offload_capa, rx = di.rx_offload_capa;
    o->capa = ((tx & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) ? PX_CAPA_TX_IP_CSUM : 0) |
              ((tx & RTE_ETH_TX_OFFLOAD_TCP_CKSUM) ? PX_CAPA_TX_TCP_CSUM : 0) |
              ((tx & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) ? PX_CAPA_TX_UDP_CSUM : 0) |
              ((tx & RTE_ETH_TX_OFFLOAD_TCP_TSO) ? PX_CAPA_TX_TSO : 0) |
              (((rx & RTE_ETH_RX_OFFLOAD_CHECKSUM) == RTE_ETH_RX_OFFLOAD_CHECKSUM) ? PX_CAPA_RX_CSUM : 0) |
              ((rx & RTE_ETH_RX_OFFLOAD_TCP_LRO) ? PX_CAPA_RX_LRO : 0) |
              ((di.flow_type_rss_offloads & (RTE_ETH_RSS_TCP | RTE_ETH_RSS_IP)) ? PX_CAPA_RSS : 0);
    struct rte_ether_addr mac;
    if (rte_eth_macaddr_get(port, &mac) == 0)
        memcpy(o->mac, mac.addr_bytes, 6);
    return 0;
}

/* 0x6d5a repeated: a Toeplitz key under which the hash of (a, b, pa, pb)
 * equals that of (b, a, pb, pa) (Woo and Park, "Scalable TCP session
 * monitoring with symmetric receive-side scaling", 2012): both
 * directions of a flow land on the same queue, hence the same worker. */
static uint8_t symmetric_key[64];

int px_port_start(uint16_t port, const struct px_port_conf *pc, const char **step) {
    struct rte_eth_dev_info di;
    int r;
    *step = "rte_eth_dev_info_get";
    if ((r = rte_eth_dev_info_get(port, &di)) != 0)
        return r;
    struct rte_eth_conf c;
    memset(&c, 0, sizeof(c));
    if (pc->queues > 1 && (pc->offloads & PX_CAPA_RSS)) {
        for (size_t i = 0; i < sizeof(symmetric_key); i += 2) {
            symmetric_key[i] = 0x6d;
            symmetric_key[i + 1] = 0x5a;
        }
        c.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        c.rx_adv_conf.rss_conf.rss_key = symmetric_key;
        c.rx_adv_conf.rss_conf.rss_key_len = di.hash_key_size ? di.hash_key_size : 40;
        if (c.rx_adv_conf.rss_conf.rss_key_len > sizeof(symmetric_key))
            c.rx_adv_conf.rss_conf.rss_key_len = sizeof(symmetric_key);
        c.rx_adv_conf.rss_conf.rss_hf = (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP) & di.flow_type_rss_offloads;
    }
    if (pc->offloads & PX_CAPA_RX_CSUM)
        c.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_CHECKSUM & di.rx_offload_capa;
    if (pc->offloads & PX_CAPA_RX_LRO) {
        c.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_TCP_LRO;
        c.rxmode.max_lro_pkt_size = di.max_lro_pkt_size;
    }
    if (pc->offloads & PX_CAPA_TX_IP_CSUM)
        c.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
    if (pc->offloads & PX_CAPA_TX_TCP_CSUM)
        c.txmode.offloads |= RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
    if (pc->offloads & PX_CAPA_TX_UDP_CSUM)
        c.txmode.offloads |= RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
    if (pc->offloads & PX_CAPA_TX_TSO)
        c.txmode.offloads |= RTE_ETH_TX_OFFLOAD_TCP_TSO;
    if (pc->mtu)
        c.rxmode.mtu = pc->mtu;
    *step = "rte_eth_dev_configure";
    if ((r = rte_eth_dev_configure(port, pc->queues, pc->queues, &c)) != 0)
        return r;
    uint16_t rxd = pc->rx_desc, txd = pc->tx_desc;
    *step = "rte_eth_dev_adjust_nb_rx_tx_desc";
    if ((r = rte_eth_dev_adjust_nb_rx_tx_desc(port, &rxd, &txd)) != 0)
        return r;
    int socket = rte_eth_dev_socket_id(port);
    for (uint16_t q = 0; q < pc->queues; q++) {
        struct rte_eth_rxconf rxc = di.default_rxconf;
        rxc.offloads = c.rxmode.offloads;
        *step = "rte_eth_rx_queue_setup";
        if ((r = rte_eth_rx_queue_setup(port, q, rxd, socket, &rxc, (struct rte_mempool *)pc->pool)) != 0)
            return r;
        struct rte_eth_txconf txc = di.default_txconf;
        txc.offloads = c.txmode.offloads;
        *step = "rte_eth_tx_queue_setup";
        if ((r = rte_eth_tx_queue_setup(port, q, txd, socket, &txc)) != 0)
            return r;
    }
    *step = "rte_eth_dev_start";
    if ((r = rte_eth_dev_start(port)) != 0)
        return r;
    /* A bump in the wire takes every frame; a port that cannot be
     * promiscuous (memif, pcap) takes every frame anyway. */
    if (pc->promiscuous)
        (void)rte_eth_promiscuous_enable(port);
    return 0;
}

void px_port_stop(uint16_t port) {
    (void)rte_eth_dev_stop(port);
    (void)rte_eth_dev_close(port);
}

int px_port_stats(uint16_t port, struct px_port_stats *o) {
    struct rte_eth_stats s;
    int r = rte_eth_stats_get(port, &s);
    if (r != 0)
        return r;
    o->ipackets = s.ipackets;
    o->opackets = s.opackets;
    o->ibytes = s.ibytes;
    o->obytes = s.obytes;
    o->imissed = s.imissed;
    o->ierrors = s.ierrors;
    o->oerrors = s.oerrors;
    o->rx_nombuf = s.rx_nombuf;
    return 0;
}

int px_port_link_up(uint16_t port) {
    struct rte_eth_link l;
    if (rte_eth_link_get_nowait(port, &l) != 0)
        return -1;
    return l.link_status == RTE_ETH_LINK_UP;
}

void *px_pool_create(const char *name, uint32_t n, uint32_t cache, uint16_t data_room, int socket) {
    return rte_pktmbuf_pool_create(name, n, cache, 0, data_room, socket);
}

void px_pool_free(void *pool) { rte_mempool_free((struct rte_mempool *)pool); }

uint32_t px_pool_in_use(void *pool) { return rte_mempool_in_use_count((struct rte_mempool *)pool); }

int px_alloc(void *pool, void **m, uint8_t **data, uint32_t *room, uint16_t n) {
    struct rte_mbuf **mb = (struct rte_mbuf **)m;
    if (rte_pktmbuf_alloc_bulk((struct rte_mempool *)pool, mb, n) != 0)
        return -1;
    for (uint16_t i = 0; i < n; i++) {
        data[i] = rte_pktmbuf_mtod(mb[i], uint8_t *);
        room[i] = rte_pktmbuf_tailroom(mb[i]);
    }
    return 0;
}

void px_free(void **m, uint16_t n) { rte_pktmbuf_free_bulk((struct rte_mbuf **)m, n); }

/* A chained frame copied into one mbuf of `large`; NULL if it does not fit
 * (or none is free). The chain is freed either way by the caller. */
static struct rte_mbuf *linearize(struct rte_mbuf *m, struct rte_mempool *large) {
    if (large == NULL)
        return NULL;
    struct rte_mbuf *one = rte_pktmbuf_alloc(large);
    if (one == NULL)
        return NULL;
    if (m->pkt_len > rte_pktmbuf_tailroom(one)) {
        rte_pktmbuf_free(one);
        return NULL;
    }
    uint8_t *dst = rte_pktmbuf_mtod(one, uint8_t *);
    for (struct rte_mbuf *s = m; s != NULL; s = s->next) {
        memcpy(dst, rte_pktmbuf_mtod(s, uint8_t *), s->data_len);
        dst += s->data_len;
    }
    one->data_len = one->pkt_len = m->pkt_len;
    one->ol_flags = m->ol_flags;
    one->tso_segsz = m->tso_segsz;
    return one;
}

uint16_t px_rx(uint16_t port, uint16_t queue, void **m, struct px_rx_desc *d, uint16_t n, void *large) {
    struct rte_mbuf **mb = (struct rte_mbuf **)m;
    uint16_t got = rte_eth_rx_burst(port, queue, mb, n);
    for (uint16_t i = 0; i < got; i++) {
        struct rte_mbuf *x = mb[i];
        uint32_t flags = 0;
        if (x->nb_segs > 1) {
            struct rte_mbuf *one = linearize(x, (struct rte_mempool *)large);
            if (one == NULL) {
                flags |= PX_RX_UNUSABLE;
            } else {
                rte_pktmbuf_free(x);
                mb[i] = x = one;
            }
        }
        uint64_t ol = x->ol_flags;
        if ((ol & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD)
            flags |= PX_RX_L4_CSUM_GOOD;
        else if ((ol & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_BAD)
            flags |= PX_RX_L4_CSUM_BAD;
        if ((ol & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_BAD)
            flags |= PX_RX_IP_CSUM_BAD;
        if (ol & RTE_MBUF_F_RX_LRO)
            flags |= PX_RX_LRO;
        d[i].data = rte_pktmbuf_mtod(x, uint8_t *);
        d[i].len = (flags & PX_RX_UNUSABLE) ? 0 : x->data_len;
        d[i].flags = flags;
        d[i].gso_size = (ol & RTE_MBUF_F_RX_LRO) ? x->tso_segsz : 0;
    }
    return got;
}

void px_tx_prepare(const struct px_tx_desc *d, void **m, uint16_t n) {
    for (uint16_t i = 0; i < n; i++) {
        struct rte_mbuf *x = (struct rte_mbuf *)d[i].m;
        x->data_off += d[i].start;
        x->data_len = d[i].len;
        x->pkt_len = d[i].len;
        uint32_t f = d[i].flags;
        uint64_t ol = 0;
        if (f & PX_TX_IPV4)
            ol |= RTE_MBUF_F_TX_IPV4;
        if (f & PX_TX_IPV6)
            ol |= RTE_MBUF_F_TX_IPV6;
        if (f & PX_TX_IP_CSUM)
            ol |= RTE_MBUF_F_TX_IP_CKSUM;
        if (f & PX_TX_TCP_SEG)
            ol |= RTE_MBUF_F_TX_TCP_SEG;
        else if (f & PX_TX_TCP_CSUM)
            ol |= RTE_MBUF_F_TX_TCP_CKSUM;
        else if (f & PX_TX_UDP_CSUM)
            ol |= RTE_MBUF_F_TX_UDP_CKSUM;
        /* Offload flags are set anew; an external buffer stays one (its
         * free must call the lender back, not treat it as indirect). */
        x->ol_flags = (x->ol_flags & RTE_MBUF_F_EXTERNAL) | ol;
        x->l2_len = d[i].l2_len;
        x->l3_len = d[i].l3_len;
        x->l4_len = d[i].l4_len;
        x->tso_segsz = d[i].tso_segsz;
        m[i] = x;
    }
}

uint16_t px_tx_burst(uint16_t port, uint16_t queue, void **m, uint16_t n) {
    struct rte_mbuf **mb = (struct rte_mbuf **)m;
    /* A PMD that needs the pseudo-header sums written its way for
     * checksum offload or TSO (most NICs: without the length for TSO)
     * writes them here; without offloads it is a no-op. A frame it
     * refuses stops the burst there, and the caller sees it as not sent. */
    uint16_t ok = rte_eth_tx_prepare(port, queue, mb, n);
    return rte_eth_tx_burst(port, queue, mb, ok);
}
