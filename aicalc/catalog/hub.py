"""The Hugging Face Hub read as foreign input (docs/robustness.md): ``config.json`` and the safetensors index and
headers of a repo, fetched over HTTP by this small client rather than by ``huggingface_hub``'s downloader, so that
every call is bounded:

- one overall deadline for all the Hub calls of a command (``TIMEOUT_S``, ``AICALC_HUB_TIMEOUT`` seconds), a
  watchdog closing the connection when it passes (a server answering one byte every few seconds is cut too);
  ``Retry-After`` is honoured up to ``MAX_RETRY_AFTER_S`` and only within the deadline;
- every body read in chunks and cut at its cap (config 4 MiB; index and each header 16 MiB), so a server that
  ignores ``Range`` sends no more than the cap; a document over its cap is refused, never cached;
- redirects followed at most ``MAX_REDIRECTS`` times, a loop refused, credentials dropped on another host;
- transport failures (refused or dropped connections, timeouts, malformed answers, an unusable ``HF_ENDPOINT``)
  and HTTP errors raised as :class:`HubError` (exit 2) saying what failed and how.

``huggingface_hub`` still gives the settings (``HF_ENDPOINT``, ``HF_HUB_OFFLINE``, the token, the cache folder); a
config.json read here is stored in its cache layout, so that ``try_to_load_from_cache`` finds it offline.
"""

from __future__ import annotations

import os
import re
import threading
import time

from aicalc.errors import AicalcError

TIMEOUT_S = 30.0  # every Hub call of one command together
MAX_TIMEOUT_S = 3600.0
MAX_RETRY_AFTER_S = 10.0  # the longest wait a 429/503 answer may ask for
MAX_RETRIES = 3
MAX_REDIRECTS = 10
MAX_CONFIG_BYTES = 4 << 20  # store.MAX_FILE_BYTES: what a local config.json may hold
MAX_DOC_BYTES = 16 << 20  # checkpoint.MAX_HEADER_BYTES: a safetensors index or one header
CHUNK = 1 << 16
_REDIRECTS = (301, 302, 303, 307, 308)


class HubError(AicalcError):
    """The Hub (or the way to it) failed: exit 2 with what failed and how. ``unreachable``: no connection was made
    at all (no network, a refused port), where a cached config.json may still answer."""

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


def timeout_s() -> float:
    """The overall deadline of the Hub calls, from ``AICALC_HUB_TIMEOUT`` (seconds, > 0, at most an hour)."""
    import math

    text = os.environ.get("AICALC_HUB_TIMEOUT", "").strip()
    if not text:
        return TIMEOUT_S
    try:
        value = float(text) if len(text) <= 32 else math.nan
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT_S:  # False for nan
        raise AicalcError(f"AICALC_HUB_TIMEOUT={_short(text)!s} is not a number of seconds in (0, {MAX_TIMEOUT_S:g}]")
    return value


def _short(text, n: int = 80) -> str:
    from aicalc.catalog.store import _short as store_short

    return store_short(text, n)


def endpoint() -> str:
    """``HF_ENDPOINT`` (huggingface_hub's setting), checked: an http(s) URL with a host and a valid port. Checked
    before huggingface_hub is imported: its import fails on a port out of range."""
    from urllib.parse import urlsplit

    url = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"  # as huggingface_hub.constants reads it
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:  # a port out of range or not a number
        raise HubError(f"HF_ENDPOINT '{_short(url)}' is not a usable URL ({e})") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise HubError(f"HF_ENDPOINT '{_short(url)}' is not an http(s) URL with a host")
    del port
    return url.rstrip("/")


class Hub:
    """The files of one Hub repo at one revision, every call under one deadline."""

    def __init__(self, repo_id: str, revision: str | None = None, timeout: float | None = None):
        from urllib.parse import quote

        self.repo_id, self.revision = repo_id, revision or "main"
        self.endpoint = endpoint()
        self.timeout = timeout_s() if timeout is None else timeout
        self.deadline = time.monotonic() + self.timeout
        self.base = f"{self.endpoint}/{quote(repo_id, safe='/')}/resolve/{quote(self.revision, safe='')}/"
        try:
            from huggingface_hub import get_token

            token = get_token()
        except Exception:  # noqa: BLE001 - no token is a valid setting
            token = None
        self.auth = {"Authorization": f"Bearer {token}"} if isinstance(token, str) and token.isprintable() else {}
        self.commit: str | None = None

    # --- transport --------------------------------------------------------------------------------------------

    def fail(self, what: str, how: str, unreachable: bool = False) -> HubError:
        return HubError(f"the Hugging Face Hub at {_short(self.endpoint)} failed {what} of '{self.repo_id}': {how}",
                        unreachable)

    def left(self, what: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.fail(what, f"no complete answer within {self.timeout:g} s (AICALC_HUB_TIMEOUT)")
        return left

    def get(self, filename: str, cap: int, what: str, first: int | None = None, last: int | None = None):
        """(status, headers with lower-case names, body of at most ``cap`` bytes) of a GET of ``filename``, bytes
        ``first``–``last`` when given (the server may ignore the range: the body is still cut at ``cap``)."""
        from urllib.parse import quote

        headers = {"User-Agent": _agent(), "Accept-Encoding": "identity", **self.auth}
        if first is not None:
            headers["Range"] = f"bytes={first}-{last}"
        url = self.base + quote(filename, safe="/")
        for attempt in range(MAX_RETRIES + 1):
            status, head, body = self._follow(url, headers, cap, what)
            if status not in (429, 503) or attempt == MAX_RETRIES:
                return status, head, body
            wait = _retry_after(head.get("retry-after"))
            if wait > MAX_RETRY_AFTER_S or wait >= self.left(what):
                raise self.fail(what, f"HTTP {status} asking to retry after {_short(head.get('retry-after'), 30)} s, "
                                f"longer than aicalc waits (at most {MAX_RETRY_AFTER_S:g} s, within "
                                f"{self.timeout:g} s in all)")
            time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _follow(self, url: str, headers: dict, cap: int, what: str):
        from urllib.parse import urljoin, urlsplit

        seen = set()
        host = urlsplit(url).netloc
        for _ in range(MAX_REDIRECTS + 1):
            if url in seen:
                raise self.fail(what, f"a redirect loop (back to {_short(url, 120)})")
            seen.add(url)
            status, head, body = self._once(url, headers, cap, what)
            if status not in _REDIRECTS:
                return status, head, body
            if "location" not in head:
                raise self.fail(what, f"HTTP {status} redirect without a Location")
            url = urljoin(url, head["location"])
            try:
                parts = urlsplit(url)
                parts.port  # noqa: B018 - raises ValueError for an unusable port
            except ValueError as e:
                raise self.fail(what, f"a redirect to an unusable URL ({e})") from None
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise self.fail(what, f"a redirect to {_short(url, 120)}, not an http(s) URL")
            if parts.netloc != host:
                headers = {k: v for k, v in headers.items() if k != "Authorization"}  # no token to another host
        raise self.fail(what, f"more than {MAX_REDIRECTS} redirects")

    def _once(self, url: str, headers: dict, cap: int, what: str):
        import http.client
        import socket
        import ssl
        from urllib.parse import urlsplit

        u = urlsplit(url)
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        proxy = _proxy(u)
        if proxy is None:
            conn = cls(u.hostname, u.port, timeout=self.left(what))
        elif u.scheme == "https":
            conn = cls(proxy.hostname, proxy.port, timeout=self.left(what))
            conn.set_tunnel(u.hostname, u.port)
        else:
            conn, path = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=self.left(what)), url
        expired = threading.Event()
        sock: list = []  # the connection's socket (http.client lets go of it once the answer will close it)

        def watchdog():  # the deadline passed while a read was waiting: close the socket under it
            expired.set()
            for s in sock:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(self.left(what), watchdog)
        timer.daemon = True
        timer.start()
        try:
            conn.connect()
            sock.append(conn.sock)
            if expired.is_set():
                watchdog()
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            head = {k.lower(): v for k, v in resp.getheaders()}
            if resp.status not in (200, 206):
                return resp.status, head, b""
            size = head.get("content-length", "")
            if size.isdigit() and len(size) < 20 and int(size) > cap and "range" not in {k.lower() for k in headers}:
                return resp.status, head, None  # over its cap by its own account: refused unread
            chunks, n = [], 0
            expected = int(size) if size.isdigit() and len(size) < 20 else None
            while n < cap:
                sock[0].settimeout(self.left(what))
                chunk = resp.read1(min(CHUNK, cap - n))
                if not chunk:
                    if expected is not None and n < expected and not expired.is_set():
                        raise ConnectionResetError(f"{n:,} of {expected:,} bytes")
                    break
                chunks.append(chunk)
                n += len(chunk)
                if expired.is_set():
                    break
            if expired.is_set():
                self.left(what)
                raise self.fail(what, f"no complete answer within {self.timeout:g} s (AICALC_HUB_TIMEOUT)")
            return resp.status, head, b"".join(chunks)
        except HubError:
            raise
        except TimeoutError:
            raise self.fail(what, f"no answer within {self.timeout:g} s (AICALC_HUB_TIMEOUT)") from None
        except (ConnectionRefusedError, socket.gaierror) as e:
            how = "connection refused" if isinstance(e, ConnectionRefusedError) else f"cannot resolve the host ({e})"
            raise self.fail(what, f"{how} (no network? HF_ENDPOINT sets a mirror; a cached repo works offline)",
                            unreachable=True) from None
        except (http.client.IncompleteRead, http.client.RemoteDisconnected, ConnectionError) as e:
            if expired.is_set():
                raise self.fail(what, f"no complete answer within {self.timeout:g} s (AICALC_HUB_TIMEOUT)") from None
            raise self.fail(what, f"the connection was dropped ({type(e).__name__}: {_short(e, 60)})") from None
        except ssl.SSLError as e:
            raise self.fail(what, f"a TLS error ({_short(e, 120)})") from None
        except http.client.HTTPException as e:
            raise self.fail(what, f"a malformed HTTP answer ({type(e).__name__}: {_short(e, 80)})") from None
        except (OSError, ValueError) as e:
            if expired.is_set():
                raise self.fail(what, f"no complete answer within {self.timeout:g} s (AICALC_HUB_TIMEOUT)") from None
            how = getattr(e, "strerror", None) or e
            raise self.fail(what, f"a network error ({_short(how, 120)})", unreachable=isinstance(e, OSError)
                            and getattr(e, "errno", None) in _UNREACHABLE) from None
        finally:
            timer.cancel()
            conn.close()

    # --- files ------------------------------------------------------------------------------------------------

    def document(self, filename: str, cap: int, what: str) -> bytes | None:
        """The whole of a small file (``config.json``, the safetensors index), at most ``cap`` bytes; None when the
        repo has no such file. HTTP errors are refused naming the status."""
        status, head, body = self.get(filename, cap + 1, what)
        if status == 404 and head.get("x-error-code") != "RepoNotFound":
            return None
        self.check_status(status, head, what)
        if body is None or len(body) > cap:
            raise AicalcError(f"hf://{self.repo_id}/{_short(filename)}: more than the {cap >> 20} MiB aicalc reads "
                              f"from {what.split(' ')[-1]} (see docs/robustness.md)")
        commit = head.get("x-repo-commit", "")
        if re.fullmatch(r"[0-9a-f]{40}", commit):
            self.commit = commit
        return body

    def check_status(self, status: int, head: dict, what: str) -> None:
        if status in (200, 206):
            return
        code = head.get("x-error-code", "")
        if code == "RepoNotFound" or (status == 401 and code != "GatedRepo"):
            raise AicalcError(f"no Hugging Face Hub repo '{self.repo_id}' (or it is gated: set HF_TOKEN)")
        if code == "GatedRepo" or status in (401, 403):
            raise AicalcError(f"Hub repo '{self.repo_id}' is gated or private (HTTP {status}): set HF_TOKEN")
        if code == "RevisionNotFound":
            raise AicalcError(f"Hub repo '{self.repo_id}' has no revision '{_short(self.revision)}'")
        kind = "a server error" if status >= 500 else "an unexpected answer"
        raise self.fail(what, f"HTTP {status} ({kind})")

    def header(self, filename: str, budget: list, lock: threading.Lock):
        """(header bytes, data bytes after it) of a safetensors file: its first ``CHUNK`` bytes, then the rest of a
        longer header, each request cut at what it needs; None when the repo has no such file."""
        what = f"reading the safetensors header of {_short(filename)}"
        where = f"hf://{self.repo_id}/{_short(filename)}"
        status, head, body = self.get(filename, CHUNK, what, 0, CHUNK - 1)
        if status == 404 and head.get("x-error-code") != "RepoNotFound":
            return None
        self.check_status(status, head, what)
        total = _total(status, head)
        if total is None:
            raise self.fail(what, "the answer does not say the file's size (no Content-Range or Content-Length)")
        if len(body) < 8:
            raise AicalcError(f"{where}: not a safetensors file (shorter than its 8-byte header length)")
        from aicalc.catalog.checkpoint import MAX_FOLDER_BYTES, MAX_HEADER_BYTES

        n = int.from_bytes(body[:8], "little")
        if n > MAX_HEADER_BYTES:
            raise AicalcError(f"{where}: a {n:,}-byte safetensors header is more than the {MAX_HEADER_BYTES >> 20} MiB "
                              "aicalc reads (see docs/robustness.md)")
        if n > total - 8:
            raise AicalcError(f"{where}: its safetensors header says {n:,} bytes, but the file holds only "
                              f"{max(total - 8, 0):,} after the length (a truncated file?)")
        with lock:
            if n > budget[0]:
                raise AicalcError(f"hf://{self.repo_id}: the safetensors headers of this repo add up to more than the "
                                  f"{MAX_FOLDER_BYTES >> 20} MiB aicalc reads (see docs/robustness.md)")
            budget[0] -= n
        need = 8 + n
        if len(body) < need:
            status, head, rest = self.get(filename, need - len(body), what, len(body), need - 1)
            self.check_status(status, head, what)
            if status == 200:  # the range ignored: the file from its start, cut at the header's end
                status, head, body = self.get(filename, need, what)
                self.check_status(status, head, what)
            else:
                body += rest
        if len(body) < need:
            raise AicalcError(f"{where}: the file ended inside its {n:,}-byte safetensors header")
        return body[8:need], total - need


_UNREACHABLE = {101, 113, 111, 10061, 10051, 10065}  # ENETUNREACH, EHOSTUNREACH, ECONNREFUSED (POSIX, Windows)


def _total(status: int, head: dict) -> int | None:
    """The whole file's size: Content-Range's ``/total`` of a 206, Content-Length of a 200."""
    if status == 206:
        m = re.fullmatch(r"\s*bytes\s+\d+-\d+/(\d{1,19})\s*", head.get("content-range", ""))
        return int(m[1]) if m else None
    size = head.get("content-length", "").strip()
    return int(size) if size.isdigit() and len(size) < 20 else None


def _retry_after(text: str | None) -> float:
    """Seconds a ``Retry-After`` asks for (a number or an HTTP date); 1 s when absent or unreadable."""
    if not text:
        return 1.0
    text = text.strip()
    if text.isdigit():
        return float(text) if len(text) < 12 else float("inf")
    try:
        from email.utils import parsedate_to_datetime

        return max(parsedate_to_datetime(text).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, OverflowError, IndexError):
        return 1.0


def _proxy(u):
    """The proxy for URL parts ``u`` from the environment (``HTTPS_PROXY``, ``NO_PROXY``…), or None."""
    import urllib.request
    from urllib.parse import urlsplit

    proxy = urllib.request.getproxies().get(u.scheme)
    if not proxy or urllib.request.proxy_bypass(u.hostname or ""):
        return None
    p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        p.port  # noqa: B018
    except ValueError:
        return None
    return p if p.hostname else None


def _agent() -> str:
    from aicalc import __version__

    return f"aicalc/{__version__}"


def cache_config(repo_id: str, revision: str | None, commit: str | None, body: bytes) -> None:
    """Store a config.json read from the Hub (complete, within its cap, parsed) in huggingface_hub's cache layout
    (``snapshots/COMMIT/config.json``, ``refs/REVISION``), where ``try_to_load_from_cache`` finds it offline.
    Best effort: a read-only cache is left alone."""
    from pathlib import Path

    from huggingface_hub import constants

    ref = revision or "main"
    if not commit or not re.fullmatch(r"[\w.-]{1,128}", ref) or ref.strip(".") == "":
        return
    root = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    try:
        snap = root / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        tmp = snap / f".config.json.{os.getpid()}.tmp"
        tmp.write_bytes(body)
        os.replace(tmp, snap / "config.json")
        if ref != commit:
            (root / "refs").mkdir(exist_ok=True)
            tmp = root / "refs" / f".{ref}.{os.getpid()}.tmp"
            tmp.write_text(commit)
            os.replace(tmp, root / "refs" / ref)
    except OSError:
        pass
