#!/usr/bin/env python3
"""One guest connection to 127.0.0.1:PORT, for QEMU's `guestfwd=...-cmd:`.

QEMU's user network spawns this once per connection the guest opens to the
forwarded address, with that connection on stdin/stdout (libslirp
`fork_exec`). It connects to the host tool listening on 127.0.0.1:PORT
(retrying while no one listens yet: the guest's program may start before
the host's side of its run) and copies bytes both ways until both sides
have closed, passing each half-close on. Diagnostics go to LOG, never to
stdout or stderr (which are the guest's connection).

Usage: relay.py PORT LOG
"""

import os
import selectors
import socket
import sys
import time

CONNECT_FOR_S = 60
IDLE_S = 120


def log(path, text):
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%H:%M:%S')} relay: {text}\n")


def main():
    port, logfile = int(sys.argv[1]), sys.argv[2]
    guest = socket.socket(fileno=os.dup(0))
    host = None
    deadline = time.monotonic() + CONNECT_FOR_S
    while host is None:
        try:
            host = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError as e:
            if time.monotonic() >= deadline:
                log(logfile, f"no listener on 127.0.0.1:{port}: {e}")
                return 1
            time.sleep(0.2)
    host.settimeout(None)
    log(logfile, f"guest connection joined to 127.0.0.1:{port}")
    sel = selectors.DefaultSelector()
    peer = {guest: host, host: guest}
    for s in peer:
        sel.register(s, selectors.EVENT_READ)
    moved = {guest: 0, host: 0}
    while sel.get_map():
        events = sel.select(timeout=IDLE_S)
        if not events:
            log(logfile, f"nothing moved for {IDLE_S} s; giving up")
            return 1
        for key, _ in events:
            src = key.fileobj
            data = src.recv(65536)
            if data:
                peer[src].sendall(data)
                moved[src] += len(data)
            else:
                sel.unregister(src)
                try:
                    peer[src].shutdown(socket.SHUT_WR)
                except OSError:
                    pass
    log(logfile, f"done: {moved[guest]} bytes from the guest, {moved[host]} to it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
