#!/usr/bin/python3
"""Does a PACKET_TX_RING frame sent into a veth still reference the ring
after the kernel hands its slot back?

Two roles, run in two namespaces by check.sh:

  tx_ring.py recv ADDR PORT
      binds a UDP socket, prints "ready", waits for a line on stdin (the
      sender has rewritten its slots), then prints what each datagram holds.

  tx_ring.py send IFACE DST_MAC SRC_MAC SRC DST PORT COUNT
      writes COUNT UDP datagrams of 8000 bytes of b"A" into a TPACKET_V2 TX
      ring, sends them with one send(), waits until every slot's status is
      TP_STATUS_AVAILABLE (the kernel's word that user space may reuse it),
      then overwrites every payload with b"B".

  tx_ring.py flood IFACE DST_MAC SRC_MAC SRC DST PORT SECONDS
      sends such datagrams through the ring for SECONDS (for a profile).

If the received datagrams hold b"B", the skb still pointed into the ring
when its slot was handed back (corruption). If they hold b"A", the kernel
copied the frame before handing the slot back: safe, and a copy anyway.
The UDP checksum is 0 (IPv4 allows it), so the receiver does not verify the
bytes and would deliver a rewritten payload as it is.
"""
import mmap
import socket
import struct
import sys
import time

SOL_PACKET, PACKET_VERSION, PACKET_TX_RING, TPACKET_V2 = 263, 10, 13, 1
TP_STATUS_AVAILABLE, TP_STATUS_SEND_REQUEST = 0, 1
SLOT = 16384
# Frame data starts at TPACKET2_HDRLEN - sizeof(struct sockaddr_ll).
DATA = 32
PAYLOAD = 8000


def ip_checksum(header):
    total = sum(struct.unpack("!%dH" % (len(header) // 2), header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def datagram(dst_mac, src_mac, src, dst, port, ident):
    udp = struct.pack("!HHHH", 40000, port, 8 + PAYLOAD, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + PAYLOAD, ident, 0x4000, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", ip_checksum(ip)) + ip[12:]
    return dst_mac + src_mac + b"\x08\x00" + ip + udp + b"A" * PAYLOAD


def open_ring(iface, slots):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
    s.setsockopt(SOL_PACKET, PACKET_TX_RING, struct.pack("IIII", SLOT, slots, SLOT, slots))
    ring = mmap.mmap(s.fileno(), SLOT * slots, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    s.bind((iface, 0))
    return s, ring


def status(ring, i):
    return struct.unpack_from("I", ring, i * SLOT)[0]


def fill(ring, i, frame):
    ring[i * SLOT + DATA:i * SLOT + DATA + len(frame)] = frame
    struct.pack_into("I", ring, i * SLOT + 4, len(frame))  # tp_len


def wait_available(ring, i, deadline):
    while status(ring, i) != TP_STATUS_AVAILABLE:
        if time.monotonic() > deadline:
            sys.exit("tx_ring: slot %d never came back (status %#x)" % (i, status(ring, i)))
        time.sleep(0.0001)


def send(iface, dst_mac, src_mac, src, dst, port, count):
    s, ring = open_ring(iface, count)
    for i in range(count):
        fill(ring, i, datagram(dst_mac, src_mac, src, dst, port, i))
        struct.pack_into("I", ring, i * SLOT, TP_STATUS_SEND_REQUEST)
    s.send(b"")
    deadline = time.monotonic() + 5
    for i in range(count):
        wait_available(ring, i, deadline)
    at = DATA + 14 + 28
    for i in range(count):
        ring[i * SLOT + at:i * SLOT + at + PAYLOAD] = b"B" * PAYLOAD
    print("sender: %d slots handed back by the kernel and rewritten with b'B'" % count, flush=True)


def flood(iface, dst_mac, src_mac, src, dst, port, seconds):
    slots = 64
    s, ring = open_ring(iface, slots)
    frame = datagram(dst_mac, src_mac, src, dst, port, 0)
    for i in range(slots):
        fill(ring, i, frame)
    end, sent = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        for i in range(slots):
            wait_available(ring, i, time.monotonic() + 5)
            struct.pack_into("I", ring, i * SLOT, TP_STATUS_SEND_REQUEST)
        s.send(b"")
        sent += slots
    print("sender: %d frames through the ring in %.0f s" % (sent, seconds), flush=True)


def recv(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind((addr, port))
    print("ready", flush=True)
    sys.stdin.readline()
    s.settimeout(2)
    got = 0
    while True:
        try:
            d = s.recv(65535)
        except socket.timeout:
            break
        got += 1
        print("datagram %d: %d bytes, %d of b'A', %d of b'B'" % (got, len(d), d.count(b"A"), d.count(b"B")),
              flush=True)
    print("received %d" % got, flush=True)


def mac(text):
    return bytes.fromhex(text.replace(":", ""))


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "recv":
        recv(args[0], int(args[1]))
    elif role == "send":
        send(args[0], mac(args[1]), mac(args[2]), args[3], args[4], int(args[5]), int(args[6]))
    elif role == "flood":
        flood(args[0], mac(args[1]), mac(args[2]), args[3], args[4], int(args[5]), float(args[6]))
    else:
        sys.exit("usage: tx_ring.py recv|send|flood ...")
