#!/usr/bin/env python3
"""Tiny TCP request/response: rr.py server PORT | rr.py client HOST PORT N SIZE
Client prints median and p99 round trip in microseconds (TCP_NODELAY, 1 conn)."""
import socket, sys, time
if sys.argv[1] == "server":
    s = socket.socket(socket.AF_INET6 if ":" in sys.argv[3] else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[3], int(sys.argv[2]))); s.listen(4)
    while True:
        c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            d = c.recv(65536)
            if not d: break
            c.sendall(d)
        c.close()
host, port, n, size = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
c = socket.create_connection((host, port)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b"x" * size; rtts = []
for _ in range(n):
    t = time.perf_counter_ns(); c.sendall(buf); got = 0
    while got < size: got += len(c.recv(65536))
    rtts.append((time.perf_counter_ns() - t) / 1000)
rtts.sort()
print(f"{rtts[len(rtts)//2]:.1f} {rtts[int(len(rtts)*0.99)]:.1f}")
