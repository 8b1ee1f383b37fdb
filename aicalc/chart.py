"""A compact terminal bar chart: one bar per row, for one-dimensional sweeps on a terminal."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def bars(labels: Sequence[str], values: Sequence[float], fmt: Callable[[float], str], title: str,
         limit: float | None = None, width: int = 40) -> Callable:
    """Return a callable that draws the chart on a rich console (the renderer calls it)."""

    def draw(console) -> None:
        top = max([*values, limit or 0]) or 1.0
        pad = max(len(str(label)) for label in labels)
        console.print(title, style="bold")
        for label, v in zip(labels, values, strict=True):
            n = v / top * width
            bar = "█" * int(n) + ("▌" if n - int(n) >= 0.5 else "")
            over = limit is not None and v > limit
            console.print(f"{label:>{pad}} {bar:<{width + 1}} {fmt(v)}", style="red" if over else None)
        if limit:
            console.print(f"{'':>{pad}} {' ' * int(limit / top * width)}▲ limit {fmt(limit)}", style="dim")

    return draw
