/* Builds a caravan of sequence-numbered datagrams with the C ABI, parses it
 * back and checks every datagram. Exit 0 and one summary line on success. */
#include <stdio.h>
#include <string.h>

#include "px_caravan.h"

int main(void) {
    uint8_t buf[9000];
    px_caravan_builder b;
    const uint8_t src[4] = {198, 51, 100, 1}, dst[4] = {203, 0, 113, 2};
    if (px_caravan_builder_init(&b, buf, sizeof buf, 40000, 4433, 9000, 20) != 0) return 1;
    uint32_t pushed = 0;
    for (;;) {
        uint8_t d[1200];
        memset(d, (int)(pushed & 0xff), sizeof d);
        memcpy(d, &pushed, sizeof pushed);
        int32_t r = px_caravan_push_v4(&b, d, sizeof d, src, dst);
        if (r == PX_CARAVAN_E_NO_ROOM) break;
        if (r != 0) { fprintf(stderr, "push: %s\n", px_caravan_strerror(r)); return 2; }
        pushed++;
    }
    int32_t n = px_caravan_validate(buf, b.len, 40000, 4433);
    if (n != (int32_t)pushed) { fprintf(stderr, "validate: %d (%s)\n", n, px_caravan_strerror(n)); return 3; }
    size_t off = 0;
    px_caravan_record rec;
    uint32_t seen = 0;
    while (px_caravan_next(buf, b.len, &off, &rec) == 1) {
        uint32_t seq;
        memcpy(&seq, rec.payload, sizeof seq);
        if (seq != seen || rec.payload_len != 1200 || rec.payload[1199] != (seen & 0xff) || rec.checksum == 0) return 4;
        seen++;
    }
    /* A cut caravan is refused whole. */
    if (px_caravan_validate(buf, b.len - 1, 40000, 4433) != PX_CARAVAN_E_OVERRUN) return 5;
    printf("caravan %zu bytes, %u datagrams pushed, %u read back\n", b.len, pushed, seen);
    return seen == pushed ? 0 : 6;
}
