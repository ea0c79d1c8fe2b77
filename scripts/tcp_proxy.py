"""A TCP proxy on 127.0.0.1 for the suites that cut links (ha/, compare/):
`tcp_proxy.py LISTEN TARGET [LISTEN TARGET ...]` forwards each listening port to its target, a
port on 127.0.0.1 or the path of a Unix socket.
    SIGUSR1  cut: open connections are reset, new ones closed at once (the peer is gone)
    SIGHUP   blackhole: connections stay open but no byte passes (a partition: neither side
             learns anything until its own timeouts)
    SIGUSR2  pass: traffic flows again (bytes held in a blackhole flow on)"""

import os
import signal
import socket
import sys
import threading

cut = threading.Event()
passing = threading.Event()
passing.set()
open_sockets = set()
guard = threading.Lock()


def track(*sockets):
    with guard:
        open_sockets.update(sockets)


def close(*sockets):
    for sock in sockets:
        with guard:
            open_sockets.discard(sock)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
        except OSError:
            pass


def pump(source, sink):
    try:
        while not cut.is_set():
            data = source.recv(65536)
            if not data:
                break
            passing.wait()
            if cut.is_set():
                break
            sink.sendall(data)
    except OSError:
        pass
    close(source, sink)


def serve(listen_port, target):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", listen_port))
    listener.listen(64)
    while True:
        client, _ = listener.accept()
        if cut.is_set():
            close(client)
            continue
        try:
            if str(target).startswith("/"):
                upstream = socket.socket(socket.AF_UNIX)
                upstream.settimeout(2)
                upstream.connect(target)
            else:
                upstream = socket.create_connection(("127.0.0.1", int(target)), timeout=2)
            upstream.settimeout(None)
        except OSError:
            close(client)
            continue
        track(client, upstream)
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


def on_cut(*_):
    cut.set()
    passing.set()
    with guard:
        sockets = list(open_sockets)
    close(*sockets)


def on_pass(*_):
    cut.clear()
    passing.set()


signal.signal(signal.SIGUSR1, on_cut)
signal.signal(signal.SIGHUP, lambda *_: passing.clear())
signal.signal(signal.SIGUSR2, on_pass)
# os._exit: sys.exit would wait out interpreter shutdown while the daemon pump threads sit in
# blocking calls.
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
pairs = sys.argv[1:]
for listen, target in zip(pairs[::2], pairs[1::2]):
    threading.Thread(target=serve, args=(int(listen), target), daemon=True).start()
while True:
    signal.pause()
