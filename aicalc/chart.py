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


def scatter(points: Sequence[tuple[float, float, str]], title: str, xlabel: str, ylabel: str, width: int = 50,
            height: int = 12) -> Callable:
    """A callable(console) drawing labelled points (x, y, one-character mark) on a linear text grid."""

    def draw(console) -> None:
        if not points:
            return
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        x1, y1 = max(xs) or 1.0, max(ys) or 1.0
        grid = [[" "] * (width + 1) for _ in range(height + 1)]
        for x, y, mark in points:
            grid[height - round(y / y1 * height)][round(x / x1 * width)] = mark
        console.print(title, style="bold")
        for i, line in enumerate(grid):
            label = f"{y1:>9.3g} ┤" if i == 0 else (f"{0:>9} ┤" if i == height else f"{'':>9} │")
            console.print(label + "".join(line))
        console.print(f"{'':>10}└{'─' * (width + 1)}")
        console.print(f"{'':>11}0{'':>{width - 12}}{x1:>11.3g}  {xlabel}; up: {ylabel}")

    return draw
