"""A TCP proxy on 127.0.0.1: `proxy.py LISTEN TARGET [LISTEN TARGET ...]` forwards each
listening port to its target port. SIGUSR1 cuts it (open connections are reset, new ones are
closed at once: the other side is unreachable); SIGUSR2 lets traffic through again."""

import signal
import socket
import sys
import threading

cut = threading.Event()
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
            sink.sendall(data)
    except OSError:
        pass
    close(source, sink)


def serve(listen_port, target_port):
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
            upstream = socket.create_connection(("127.0.0.1", target_port), timeout=2)
            upstream.settimeout(None)
        except OSError:
            close(client)
            continue
        track(client, upstream)
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


def on_cut(*_):
    cut.set()
    with guard:
        sockets = list(open_sockets)
    close(*sockets)


signal.signal(signal.SIGUSR1, on_cut)
signal.signal(signal.SIGUSR2, lambda *_: cut.clear())
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
pairs = [int(arg) for arg in sys.argv[1:]]
for listen, target in zip(pairs[::2], pairs[1::2]):
    threading.Thread(target=serve, args=(listen, target), daemon=True).start()
while True:
    signal.pause()
