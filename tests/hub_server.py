"""A loopback stand-in for the Hugging Face Hub: the file endpoints huggingface_hub uses (HEAD and GET, with
Range, on /{repo}/resolve/{revision}/{file}), serving repos built in memory. Tests only; never a real network.

A file's value is its bytes, or a hostile behaviour (:class:`Hostile` and its helpers: a status, a redirect, a
dropped connection, a body that ignores Range, one sent a byte at a time, an answer that never comes). Every request
is logged in ``REQUESTS`` and the bytes each answer wrote are counted in ``SENT``, so tests bound the work done."""

import json
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1, "U8": 1}
FILES: dict = {}
REQUESTS: list = []  # (method, path, Range header or None)
AUTH: list = []  # (path, Authorization header or None) of every GET
SENT: dict = {}  # path → body bytes written
STOP = threading.Event()  # set when a server stops: a handler waiting on it ends


class Hostile:
    """An answer built to hurt the client. ``status``/``headers``: what is sent first; ``body``: bytes, or
    (size, fill byte) for a body generated as it is sent (never held in memory); ``length``: whether a
    Content-Length is sent; ``drip``: seconds between single bytes; ``stall``: seconds (at most) before answering;
    ``drop_after``: bytes of the body sent before the connection is closed."""

    def __init__(self, status=200, headers=None, body=b"", length=True, drip=0.0, stall=0.0, drop_after=None):
        self.status, self.headers, self.body, self.length = status, headers or {}, body, length
        self.drip, self.stall, self.drop_after = drip, stall, drop_after

    def size(self):
        return self.body[0] if isinstance(self.body, tuple) else len(self.body)

    def chunks(self):
        if isinstance(self.body, tuple):
            n, fill = self.body
            block = bytes([fill]) * (1 << 16)
            while n > 0:
                yield block[: min(n, len(block))]
                n -= len(block)
        else:
            yield self.body


def redirect(location, status=302):
    return Hostile(status, {"Location": location})


def status(code, **headers):
    return Hostile(code, {k.replace("_", "-"): v for k, v in headers.items()})


def safetensors_bytes(tensors: dict) -> bytes:
    """A safetensors file: the 8-byte header length, the JSON header, zeros for the data."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = SIZES[dtype]
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + b"\0" * offset


class Handler(BaseHTTPRequestHandler):
    def _file(self):
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            return FILES.get(("/".join(parts[:2]), "/".join(parts[4:])))
        return None

    def _headers(self, body: bytes, status: int = 200, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("X-Repo-Commit", "a" * 40)
        self.send_header("ETag", f'"e{len(body)}"')
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()

    def _missing(self) -> None:
        self.send_response(404)
        self.send_header("X-Error-Code", "EntryNotFound")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self):  # noqa: N802 - the http.server interface
        REQUESTS.append(("HEAD", self.path, self.headers.get("range")))
        body = self._file()
        if body is None:
            self._missing()
        elif isinstance(body, Hostile):
            self._hostile(body, head=True)
        else:
            self._headers(body)

    def _hostile(self, h: Hostile, head=False):
        if h.stall:
            STOP.wait(h.stall)
        self.send_response(h.status)
        self.send_header("X-Repo-Commit", "b" * 40)
        if h.length:
            self.send_header("Content-Length", str(h.size()))
        for k, v in h.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if head:
            return
        sent = 0
        try:
            for chunk in h.chunks():
                if h.drop_after is not None and sent + len(chunk) > h.drop_after:
                    self.wfile.write(chunk[: h.drop_after - sent])
                    self.wfile.flush()
                    self.connection.shutdown(2)  # socket.SHUT_RDWR: the connection drops mid-body
                    return
                if h.drip:
                    for i in range(len(chunk)):
                        if STOP.wait(h.drip):
                            return
                        self.wfile.write(chunk[i : i + 1])
                        self.wfile.flush()
                        sent += 1
                        SENT[self.path] = sent
                else:
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    SENT[self.path] = sent
        except OSError:  # the client hung up: what it read is bounded
            pass
        finally:
            self.close_connection = True

    def do_GET(self):  # noqa: N802 - the http.server interface
        REQUESTS.append(("GET", self.path, self.headers.get("range")))
        AUTH.append((self.path, self.headers.get("authorization")))
        body = self._file()
        if isinstance(body, Hostile):
            self._hostile(body)
            return
        if body is None:
            self._missing()
            return
        rng = self.headers.get("range")
        if rng:
            a, b = (int(x) for x in rng.split("=")[1].split("-"))
            part = body[a : b + 1]
            self._headers(part, 206, {"Content-Range": f"bytes {a}-{a + len(part) - 1}/{len(body)}"})
            self.wfile.write(part)
        else:
            self._headers(body)
            self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(files: dict) -> tuple[ThreadingHTTPServer, str]:
    """Start a server for ``files`` ({(repo, filename): bytes}) on 127.0.0.1; returns (server, endpoint URL)."""
    FILES.clear()
    FILES.update(files)
    REQUESTS.clear()
    AUTH.clear()
    SENT.clear()
    STOP.clear()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def stop(srv) -> None:
    """Stop a server and release every handler still waiting (a stalled or dripping answer)."""
    STOP.set()
    srv.shutdown()
    srv.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

