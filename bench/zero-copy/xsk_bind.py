#!/usr/bin/python3
"""Asks the kernel for an AF_XDP socket on IFACE (queue 0), first in
zero-copy mode (XDP_ZEROCOPY), then in copy mode (XDP_COPY), and prints
what each bind answers. A driver without AF_XDP zero-copy refuses the first
with EOPNOTSUPP; in copy mode the kernel copies every frame into and out of
the socket's memory, as it does for a packet socket.

Usage: xsk_bind.py IFACE
"""
import ctypes
import ctypes.util
import errno
import mmap
import os
import socket
import struct
import sys

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
AF_XDP, SOL_XDP = 44, 283
XDP_RX_RING, XDP_UMEM_REG, XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING = 2, 4, 5, 6
XDP_COPY, XDP_ZEROCOPY = 1 << 1, 1 << 2
CHUNK, CHUNKS = 4096, 64


def bind(ifindex, mode):
    fd = libc.socket(AF_XDP, socket.SOCK_RAW, 0)
    if fd < 0:
        return "socket: " + os.strerror(ctypes.get_errno())
    area = mmap.mmap(-1, CHUNK * CHUNKS)
    try:
        base = ctypes.addressof(ctypes.c_char.from_buffer(area))
        options = [(XDP_UMEM_REG, struct.pack("QQIIII", base, CHUNK * CHUNKS, CHUNK, 0, 0, 0))]
        options += [(o, struct.pack("I", 64)) for o in (XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING, XDP_RX_RING)]
        for opt, val in options:
            b = ctypes.create_string_buffer(val, len(val))
            if libc.setsockopt(fd, SOL_XDP, opt, b, len(val)) != 0:
                return "setsockopt %d: %s" % (opt, os.strerror(ctypes.get_errno()))
        addr = struct.pack("HHIII", AF_XDP, mode, ifindex, 0, 0)
        b = ctypes.create_string_buffer(addr, len(addr))
        if libc.bind(fd, b, len(addr)) == 0:
            return "bound"
        err = ctypes.get_errno()
        return "refused: %s (%s)" % (errno.errorcode.get(err, err), os.strerror(err))
    finally:
        os.close(fd)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    idx = socket.if_nametoindex(sys.argv[1])
    print("%s: AF_XDP zero-copy (XDP_ZEROCOPY): %s" % (sys.argv[1], bind(idx, XDP_ZEROCOPY)))
    print("%s: AF_XDP copy mode (XDP_COPY): %s" % (sys.argv[1], bind(idx, XDP_COPY)))
