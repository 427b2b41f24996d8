"""Hostile peers on real sockets, for tests/faults/test_hostile_peers.py and tools/soak_hostile.py.

- `HostileServer(kind)`: an address a scheduler is pointed at with `--pods` that is not a pod
  (random bytes, an SSH or HTTP banner, a connection closed or reset before login).
- `stranger(address, kind)`: one connection to a pod by someone without the token (garbage, a
  Cap'n Proto frame header and nothing else, a connection closed or reset at once).
- `rss_mb(pid)`: a process's resident memory, read from /proc.
"""

from __future__ import annotations

import os
import socket
import struct
import threading

SERVER_KINDS = ("random-bytes", "ssh-banner", "http-banner", "close", "reset")
CLIENT_KINDS = ("garbage", "frame-header", "close", "reset", "banner")


class HostileServer:
    """A listening socket on 127.0.0.1 that answers every connection in one hostile way."""

    def __init__(self, kind: str):
        if kind not in SERVER_KINDS:
            raise ValueError(kind)
        self.kind = kind
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.served = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: done
                return
            with conn:
                self._answer(conn)
            self.served += 1

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            if self.kind == "random-bytes":
                conn.sendall(os.urandom(4096))
            elif self.kind == "ssh-banner":
                conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n")
            elif self.kind == "http-banner":
                conn.recv(1 << 16)  # an HTTP server waits for the request, then answers it
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            elif self.kind == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if self.kind in ("random-bytes", "ssh-banner"):
                conn.recv(1 << 16)
        except OSError:  # the scheduler hung up first: fine
            pass

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def stranger(address: str, kind: str, seed: int = 0) -> None:
    """One connection to `address` by someone without the token, ended at once."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        if kind == "garbage":
            sock.sendall(os.urandom(64 + seed % 512))
        elif kind == "frame-header":  # one segment of 1 word announced, never sent
            sock.sendall(b"\0\0\0\0\1\0\0\0")
        elif kind == "banner":
            sock.sendall(b"GET / HTTP/1.1\r\nHost: pod\r\n\r\n")
        elif kind == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif kind != "close":
            raise ValueError(kind)


def flood(address: str, count: int, start: int = 0) -> None:
    """`count` stranger connections, cycling through every client kind."""
    for i in range(start, start + count):
        stranger(address, CLIENT_KINDS[i % len(CLIENT_KINDS)], seed=i)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")
