#!/usr/bin/env python3
"""One guest connection to the host: QEMU's user network runs this for every connection the
guest makes to a `guestfwd=...-cmd:` address, with the connection as stdin and stdout.

Usage: relay.py PORT. It connects to 127.0.0.1:PORT (retrying for up to 120 s while the host
tool there is not listening yet: the guest's program may start first) and copies bytes both
ways until either side closes. Nothing else may be written to stdout or stderr: both are the
guest's connection.
"""
import os
import selectors
import socket
import sys
import time


def main() -> int:
    port = int(sys.argv[1])
    deadline = time.monotonic() + 120
    while True:
        try:
            peer = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                return 1
            time.sleep(0.1)
    peer.setblocking(True)
    peer.settimeout(None)
    guest_in, guest_out = sys.stdin.fileno(), sys.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(guest_in, selectors.EVENT_READ)
    sel.register(peer, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj == guest_in:
                data = os.read(guest_in, 65536)
                if not data:
                    peer.shutdown(socket.SHUT_WR)
                    sel.unregister(guest_in)
                    continue
                peer.sendall(data)
            else:
                data = peer.recv(65536)
                if not data:
                    return 0
                # One write per message received, as the programs read each
                # message with a single read().
                view = memoryview(data)
                while view:
                    view = view[os.write(guest_out, view):]


if __name__ == "__main__":
    sys.stderr = open(os.devnull, "w")
    try:
        sys.exit(main())
    except OSError:
        sys.exit(1)
