"""Block-wise evaluation of long numpy expressions in reused scratch arrays.

Used by the roofline core for speed only; the numbers are those of the formulas that call it.
"""

from __future__ import annotations

# How this is evaluated (the numbers are those of the formulas above; only the evaluation is organised for speed):
# inputs are processed in blocks of CHUNK configurations; within a block every intermediate array is a scratch
# array of a workspace (Workspace), handed out and taken back in LIFO order, because hundreds of fresh numpy
# temporaries per block make the allocator hand memory back to the OS and page-fault it in again (most of the run
# time on small VMs). The operations are built "lean" (a field is None where the op has none, kernels and other
# constants stay scalars, arrays of tp alone are computed once per block and shared by both phases) and summed as
# they are built, one at a time, so the per-op breakdown is not kept. ``Phase.ops`` (the public per-op list)
# runs the same builder without a workspace on first access.
CHUNK = 32768
_HUGE_BYTES = 4 << 20  # numpy asks for transparent huge pages from this size on (few page faults)
_SLAB_BYTES = 2 * _HUGE_BYTES  # scratch is allocated in slabs this large


class Workspace:
    """Scratch float64 arrays of one block's length, reused in LIFO order.

    ``stack`` holds what a phase and its ops take (released back to a mark), ``keep`` what lives for the whole
    block (arrays of tp alone); ``into`` is the list new arrays are recorded in."""

    def __init__(self, cap: int):
        self.cap = self.n = cap
        self.free: list = []
        self.stack: list = []
        self.keep: list = []
        self.into = self.stack

    def reset(self, n: int) -> None:
        self.free += self.stack + self.keep
        self.stack.clear()
        self.keep.clear()
        self.into = self.stack
        self.n = n

    def get(self):
        import numpy as np

        if not self.free:
            self.free += list(np.empty((max(2, min(64, _SLAB_BYTES // (8 * self.cap))), self.cap)))
        buf = self.free.pop()
        self.into.append(buf)
        return buf if self.n == self.cap else buf[: self.n]

    def mark(self) -> int:
        return len(self.stack)

    def release(self, mark: int) -> None:
        self.free += self.stack[mark:]
        del self.stack[mark:]


class Arith:
    """Elementwise arithmetic. With a workspace, array results go into its scratch arrays, or into ``into`` (a
    scratch array of the caller's that it no longer needs); without one numpy allocates as usual (any shapes)."""

    def __init__(self, ws: Workspace | None = None):
        import numpy as np

        self.ws = ws
        self._mul, self._add, self._sub, self._div = np.multiply, np.add, np.subtract, np.divide
        self._max, self._min = np.maximum, np.minimum

    def _f(self, ufunc, a, b, into):
        ws = self.ws
        if ws is not None:
            if getattr(into, "ndim", 0):
                return ufunc(a, b, out=into)
            if getattr(a, "ndim", 0) or getattr(b, "ndim", 0):
                return ufunc(a, b, out=ws.get())
        return ufunc(a, b)

    def unary(self, ufunc, a, into=None):
        ws = self.ws
        if ws is not None and getattr(a, "ndim", 0):
            return ufunc(a, out=into if getattr(into, "ndim", 0) else ws.get())
        return ufunc(a)

    def mul(self, a, b, into=None):
        return self._f(self._mul, a, b, into)

    def add(self, a, b, into=None):
        return self._f(self._add, a, b, into)

    def sub(self, a, b, into=None):
        return self._f(self._sub, a, b, into)

    def div(self, a, b, into=None):
        return self._f(self._div, a, b, into)

    def max(self, a, b, into=None):
        return self._f(self._max, a, b, into)

    def min(self, a, b, into=None):
        return self._f(self._min, a, b, into)


def blockwise(fn, args, n_out: int):
    """fn(workspace, outs, *block_args) over the broadcast of ``args`` (float64 arrays) in blocks of CHUNK
    elements; fn returns n_out results (arrays of the block, or scalars), written into full-shape outputs."""
    import math

    import numpy as np

    shape = np.broadcast_shapes(*(a.shape for a in args))
    if shape == ():
        return [np.float64(r) for r in fn(None, None, *args)]
    size = math.prod(shape)
    flat = [a if a.ndim == 0 else np.broadcast_to(a, shape).reshape(-1) for a in args]
    if size * 8 >= _HUGE_BYTES:  # each output is large enough for transparent huge pages on its own
        outs = [np.empty(size) for _ in range(n_out)]
    else:  # one allocation for all (huge pages once ≥ 4 MiB: far fewer page faults than n_out small ones)
        outs = list(np.empty((n_out, size)))
    ws = Workspace(min(size, CHUNK))
    for i in range(0, size, CHUNK):
        j = min(i + CHUNK, size)
        ws.reset(j - i)
        views = [o[i:j] for o in outs]
        for v, r in zip(views, fn(ws, views, *(a if a.ndim == 0 else a[i:j] for a in flat)), strict=True):
            if r is not v:
                v[...] = r
    return [o.reshape(shape) for o in outs]
