/*
 * px_caravan.h - C ABI of the PacketExpress PX-caravan end-host library.
 *
 * A PX-caravan is one UDP datagram of a flow whose IP header carries the
 * caravan DSCP (default 11, px_caravan_tos()) and whose payload is a
 * sequence of records, each a complete inner UDP datagram:
 *
 *   | src port | dst port | length (8 + payload) | checksum | payload ... |
 *
 * Receive: read a datagram and its TOS (IP_RECVTOS / IPV6_RECVTCLASS); if
 * the DSCP is the caravan codepoint, px_caravan_validate() it (a malformed
 * caravan is refused whole) and walk it with px_caravan_next().
 * Send: px_caravan_builder_init(), px_caravan_push*() until
 * PX_CARAVAN_E_NO_ROOM, send buf[0..len] with IP_TOS = px_caravan_tos(),
 * px_caravan_builder_reset(). See docs/caravan.md.
 *
 * Link with libpx_caravan.a (add -lpthread -ldl -lm) or libpx_caravan.so.
 */
#ifndef PX_CARAVAN_H
#define PX_CARAVAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PX_CARAVAN_DEFAULT_DSCP 11
#define PX_CARAVAN_RECORD_HEADER_LEN 8

#define PX_CARAVAN_E_EMPTY (-1)         /* no records */
#define PX_CARAVAN_E_TRUNCATED (-2)     /* a record header cut short */
#define PX_CARAVAN_E_BAD_LENGTH (-3)    /* a record length below 8 */
#define PX_CARAVAN_E_OVERRUN (-4)       /* a record runs past the end */
#define PX_CARAVAN_E_PORT_MISMATCH (-5) /* a record of another flow */
#define PX_CARAVAN_E_NO_ROOM (-10)      /* the datagram does not fit */
#define PX_CARAVAN_E_NULL (-11)         /* a null pointer */

/* One datagram of a caravan; payload points into the caller's buffer. */
typedef struct px_caravan_record {
    const uint8_t *payload;
    size_t payload_len;
    uint16_t src_port;
    uint16_t dst_port;
    uint16_t checksum;
} px_caravan_record;

/* A caravan being built; fields are read-only for callers. */
typedef struct px_caravan_builder {
    uint8_t *buf;
    size_t cap;
    size_t len;
    uint32_t count;
    uint16_t src_port;
    uint16_t dst_port;
} px_caravan_builder;

/* Number of datagrams (>= 1) or a negative PX_CARAVAN_E_*. Pass -1 as a
 * port to skip checking that every record belongs to the flow. */
int32_t px_caravan_validate(const uint8_t *buf, size_t len, int32_t src_port, int32_t dst_port);

/* 1: *out holds the record at *offset and *offset moved past it; 0: end;
 * negative: not a record. Start with *offset = 0. */
int32_t px_caravan_next(const uint8_t *buf, size_t len, size_t *offset, px_caravan_record *out);

/* mtu = 0: no limit but cap; else the IP packet (ip_header_len + 8 + payload)
 * stays within mtu. */
int32_t px_caravan_builder_init(px_caravan_builder *b, uint8_t *buf, size_t cap, uint16_t src_port,
                                uint16_t dst_port, size_t mtu, size_t ip_header_len);
/* Inner checksum zero (IPv4 only). */
int32_t px_caravan_push(px_caravan_builder *b, const uint8_t *payload, size_t len);
/* Inner checksum over the pseudo-header; addresses in network byte order. */
int32_t px_caravan_push_v4(px_caravan_builder *b, const uint8_t *payload, size_t len, const uint8_t src[4],
                           const uint8_t dst[4]);
int32_t px_caravan_push_v6(px_caravan_builder *b, const uint8_t *payload, size_t len, const uint8_t src[16],
                           const uint8_t dst[16]);
void px_caravan_builder_reset(px_caravan_builder *b);

uint8_t px_caravan_tos(uint8_t dscp, uint8_t ecn);
const char *px_caravan_strerror(int32_t code);

#ifdef __cplusplus
}
#endif

#endif /* PX_CARAVAN_H */
