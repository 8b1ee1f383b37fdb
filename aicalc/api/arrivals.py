"""Unit-rate Poisson arrival times as the fleet search draws them, ``cumsum(default_rng(seed).exponential(1, n))``,
kept in aicalc's cache folder (:func:`aicalc.catalog.store.cache_dir`) once drawn: a one-off query (``compare``'s
fleet) reads 8 KB instead of importing ``numpy.random`` (~35 M instructions, as much as the rest of the fleet's
imports, docs/robustness.md). The file is named by numpy's version (a Generator's stream may change between
releases), the seed and the count, and is used only when its checksum and length match; anything else is drawn
again."""

from __future__ import annotations

MAX_CACHED = 20_000  # the fleet search's most requests (aicalc.api.fleet.FLEET_MAX_REQUESTS): 160 KB at most


def unit_arrivals(seed: int, n: int):
    """Float64 array of ``n`` arrival times of a unit-rate Poisson process drawn with ``seed``."""
    import numpy as np

    path = _file(seed, n) if n <= MAX_CACHED else None
    cached = _read(path, n) if path is not None else None
    if cached is not None:
        return cached
    unit = np.cumsum(np.random.default_rng(seed).exponential(1.0, n))
    if path is not None:
        _write(path, unit)
    return unit


def _file(seed: int, n: int):
    import numpy as np

    from aicalc.catalog.store import cache_dir

    return cache_dir() / f"arrivals-numpy{np.__version__}-{int(seed)}-{int(n)}.f64"


def _read(path, n: int):
    """The cached times, or None unless the file is a regular one of exactly a checksum line and ``n`` float64s
    matching it, finite, positive and non-decreasing."""
    import os
    import stat
    import zlib

    import numpy as np

    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size != 9 + 8 * n:
            return None
        with open(path, "rb") as f:
            raw = f.read(9 + 8 * n)
    except (OSError, ValueError):
        return None
    head, body = raw[:9], raw[9:]
    if len(body) != 8 * n or head != f"{zlib.crc32(body):08x}\n".encode():
        return None
    times = np.frombuffer(body, dtype="<f8").astype(np.float64)
    # checked like any file: arrival times are finite, positive and in order (else drawn again)
    if n and not (np.all(np.isfinite(times)) and times[0] > 0 and np.all(np.diff(times) >= 0)):
        return None
    return times


def _write(path, unit) -> None:
    import os
    import zlib

    body = unit.astype("<f8").tobytes()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(f"{zlib.crc32(body):08x}\n".encode() + body)
        os.replace(tmp, path)
    except OSError:  # a read-only home: draw them on every run
        pass
