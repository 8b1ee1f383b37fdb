"""A loopback stand-in for the Hugging Face Hub: the file endpoints huggingface_hub uses (HEAD and GET, with
Range, on /{repo}/resolve/{revision}/{file}), serving repos built in memory. Tests only; never a real network."""

import json
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1, "U8": 1}
FILES: dict = {}


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
        body = self._file()
        if body is None:
            self._missing()
        else:
            self._headers(body)

    def do_GET(self):  # noqa: N802 - the http.server interface
        body = self._file()
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
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
