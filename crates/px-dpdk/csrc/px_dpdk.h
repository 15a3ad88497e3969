/* The C side of px-dpdk: a small ABI of our own over DPDK 22.11, so that
 * Rust never sees DPDK's structures (rte_mbuf, rte_eth_conf, ...) nor
 * calls its static-inline functions (rx/tx burst, mbuf alloc/free).
 * Everything here is fixed-width integers, pointers and opaque handles;
 * src/sys.rs declares the same, and px_dpdk_abi() lets the Rust tests
 * check that both sides agree on every size and offset.
 *
 * Per packet the costs are the descriptor writes of a burst: one call
 * receives a burst and describes each frame (px_rx), one prepares a burst
 * for sending (px_tx_prepare), one sends it (px_tx_burst). */
#ifndef PX_DPDK_H
#define PX_DPDK_H

#include <stdint.h>

/* A received frame: where its bytes are (a single segment: chained frames
 * are copied into one buffer of the large pool) and what the port said
 * about it. */
struct px_rx_desc {
    uint8_t *data;
    uint32_t len;
    uint32_t flags;    /* PX_RX_* */
    uint16_t gso_size; /* PX_RX_LRO: the MSS of the merged segments */
    uint16_t pad[3];
};

#define PX_RX_L4_CSUM_GOOD 0x1u /* the port verified the TCP/UDP checksum */
#define PX_RX_L4_CSUM_BAD 0x2u  /* ... and found it wrong */
#define PX_RX_IP_CSUM_BAD 0x4u
#define PX_RX_LRO 0x8u          /* a segment merged by the port (LRO) */
#define PX_RX_UNUSABLE 0x10u    /* a chained frame that fit no buffer: len 0 */

/* A frame to send: mbuf `m`, of which bytes [start, start + len) leave;
 * offloads the port is asked for (PX_TX_*), with the header lengths they
 * need. */
struct px_tx_desc {
    void *m;
    uint32_t start;
    uint32_t len;
    uint32_t flags;
    uint16_t l2_len;
    uint16_t l3_len;
    uint16_t l4_len;
    uint16_t tso_segsz;
    uint32_t pad;
};

#define PX_TX_IPV4 0x1u
#define PX_TX_IPV6 0x2u
#define PX_TX_IP_CSUM 0x4u
#define PX_TX_TCP_CSUM 0x8u
#define PX_TX_UDP_CSUM 0x10u
#define PX_TX_TCP_SEG 0x20u

/* What a port is and can do (rte_eth_dev_info, in our terms). */
struct px_port_info {
    char driver[32];
    uint16_t port_id;
    uint16_t max_rx_queues;
    uint16_t max_tx_queues;
    uint16_t mtu;
    uint32_t max_rx_pktlen;
    int32_t socket;
    uint32_t capa;      /* PX_CAPA_* */
    uint8_t mac[6];
    uint16_t pad;
};

#define PX_CAPA_TX_IP_CSUM 0x1u
#define PX_CAPA_TX_TCP_CSUM 0x2u
#define PX_CAPA_TX_UDP_CSUM 0x4u
#define PX_CAPA_TX_TSO 0x8u
#define PX_CAPA_RX_CSUM 0x10u
#define PX_CAPA_RX_LRO 0x20u
#define PX_CAPA_RSS 0x40u

/* How to set a port up. */
struct px_port_conf {
    uint16_t queues;      /* rx and tx queue pairs: one per worker */
    uint16_t rx_desc;
    uint16_t tx_desc;
    uint16_t mtu;         /* 0: leave it */
    uint32_t offloads;    /* PX_CAPA_* to turn on (a subset of capa) */
    uint32_t promiscuous; /* take every frame (a NIC; not a kernel interface's flag) */
    void *pool;           /* receive buffers */
};

struct px_port_stats {
    uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf;
};

struct px_abi {
    uint32_t rx_desc_size, rx_desc_len, rx_desc_flags, rx_desc_gso;
    uint32_t tx_desc_size, tx_desc_start, tx_desc_flags, tx_desc_tso;
    uint32_t info_size, info_capa, info_mac;
    uint32_t conf_size, conf_pool;
    uint32_t stats_size;
    uint32_t ext_size, ext_done;
};

/* The state of a buffer lent to a port (px_attach): room for DPDK's
 * shared info of an external buffer, and `done`, set to 1 by the
 * driver's last free of the mbuf. Caller memory, at a fixed address for
 * as long as the buffer is lent. */
struct px_ext {
    uint64_t shinfo[4];
    uint32_t done;
    uint32_t pad;
};

void px_dpdk_abi(struct px_abi *out);

/* EAL: argv[0] is the program name. Returns rte_eal_init's result (the
 * number of arguments parsed, or -1 with rte_errno). */
int px_eal_init(int argc, char **argv);
int px_eal_cleanup(void);
int px_errno(void);
const char *px_strerror(int err);
const char *px_runtime_dir(void);
const char *px_version(void);
/* Registers the calling thread with the EAL (a lcore id for the mempool
 * caches); -1 if none is free. */
int px_thread_register(void);
void px_thread_unregister(void);

/* Ports. */
int px_port_by_name(const char *name, uint16_t *port);
int px_port_info(uint16_t port, struct px_port_info *out);
int px_port_start(uint16_t port, const struct px_port_conf *conf, const char **step);
void px_port_stop(uint16_t port);
int px_port_stats(uint16_t port, struct px_port_stats *out);
int px_port_link_up(uint16_t port);

/* Buffers. */
void *px_pool_create(const char *name, uint32_t n, uint32_t cache, uint16_t data_room, int socket);
void px_pool_free(void *pool);
uint32_t px_pool_in_use(void *pool);
/* `n` fresh single-segment mbufs from `pool`, their data pointers and
 * room; 0 or -1 (none taken). */
int px_alloc(void *pool, void **m, uint8_t **data, uint32_t *room, uint16_t n);
void px_free(void **m, uint16_t n);
/* An mbuf of `pool` whose data is the caller's `len` bytes at `data`
 * (attached as an external buffer, not copied); NULL if the pool has
 * none free. The bytes stay the caller's to keep unchanged until
 * `ext->done` reads 1. */
void *px_attach(void *pool, uint8_t *data, uint16_t len, struct px_ext *ext);

/* Frames. `large` takes chained frames that must become one buffer. */
uint16_t px_rx(uint16_t port, uint16_t queue, void **m, struct px_rx_desc *d, uint16_t n, void *large);
void px_tx_prepare(const struct px_tx_desc *d, void **m, uint16_t n);
uint16_t px_tx_burst(uint16_t port, uint16_t queue, void **m, uint16_t n);

#endif
