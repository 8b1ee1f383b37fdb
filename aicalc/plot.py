"""Roofline pictures: a log-log chart of attainable FLOP/s vs arithmetic intensity.

``terminal_chart`` draws it with text characters under the table (tty only); ``write_plot`` writes PNG/SVG
through the optional matplotlib extra (``pip install 'aicalc[plot]'``).
"""

from __future__ import annotations

import math

from aicalc.errors import AicalcError


def _points(rows):
    for r in rows:
        ai = r.get("arithmetic_intensity")
        t = r.get("time_s")
        if ai and t and r.get("flop"):
            yield f"{r['phase'][0]}{r['batch']}", ai, r["flop"] / t


def terminal_chart(rows, ridge: float, peak: float, bw: float, width: int = 60, height: int = 14):
    """A callable(console) drawing the roofs ('/' memory, '-' compute) and each phase as p/d + batch."""
    pts = list(_points(rows))

    def draw(con) -> None:
        if not pts:
            return
        x0, x1 = math.log10(0.1), math.log10(max(ridge * 100, max(p[1] for p in pts) * 2))
        y1 = math.log10(peak * 1.5)
        y0 = y1 - 5
        grid = [[" "] * width for _ in range(height)]
        for c in range(width):
            ai = 10 ** (x0 + (x1 - x0) * c / (width - 1))
            roof = min(peak, ai * bw)
            r = int((y1 - math.log10(roof)) / (y1 - y0) * (height - 1))
            if 0 <= r < height:
                grid[r][c] = "-" if ai >= ridge else "/"
        for label, ai, fl in pts:
            c = int((math.log10(ai) - x0) / (x1 - x0) * (width - 1))
            r = int((y1 - math.log10(max(fl, 10 ** y0))) / (y1 - y0) * (height - 1))
            if 0 <= r < height and 0 <= c < width:
                grid[r][c] = label[0]
        con.print(f"attainable FLOP/s vs FLOP/byte (log-log); ridge {ridge:,.0f}; p = prefill, d = decode")
        for line in grid:
            con.print("|" + "".join(line), markup=False, highlight=False)
        con.print("+" + "-" * width, markup=False, highlight=False)

    return draw


def write_plot(path: str, rows, ridge: float, peak: float, bw: float, title: str = "", roofs=None) -> None:
    """Write the roofline chart to PNG/SVG (by extension) with matplotlib. ``roofs``: one ``(chip, ridge, peak,
    bandwidth)`` per chip of a table across chips: each chip's roof in its own colour, its points in the same
    colour and labelled with its id (a row's ``chip``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AicalcError("--plot needs matplotlib: pip install 'aicalc[plot]'") from None
    import numpy as np

    pts = list(_points(rows))
    roofs = list(roofs or [(None, ridge, peak, bw)])
    hi = max([r[1] * 100 for r in roofs] + [p[1] * 2 for p in pts])
    x = np.logspace(-1, math.log10(hi), 200)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {}
    for i, (chip, rp, pk, b) in enumerate(roofs):
        colour = "black" if len(roofs) == 1 else f"C{i % 10}"
        colours[chip] = colour
        who = f"{chip}: " if chip else ""
        ax.loglog(x, np.minimum(pk, x * b), color=colour, label=f"{who}roof (dense peak, datasheet bandwidth)")
        ax.axvline(rp, color=colour if chip else "grey", linestyle=":", label=f"{who}ridge {rp:,.0f} FLOP/B")
    for r in rows:
        if r.get("arithmetic_intensity") and r.get("time_s") and r.get("flop"):
            name = r["phase"] if r.get("op", "total") == "total" else f"{r['phase']}:{r['op']}"
            chip = r.get("chip") if len(roofs) > 1 else None
            where = f"{chip} " if chip else ""
            ax.scatter(r["arithmetic_intensity"], r["flop"] / r["time_s"], s=14, color=colours.get(chip))
            ax.annotate(f"{where}{name} B={r['batch']}", (r["arithmetic_intensity"], r["flop"] / r["time_s"]),
                        fontsize=6)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=7)
    try:
        fig.savefig(path, bbox_inches="tight")
    except (OSError, ValueError) as e:
        raise AicalcError(f"--plot {path}: cannot write ({e})") from None
    finally:
        plt.close(fig)


def write_pareto(path: str, rows, title: str) -> None:
    """Tokens/s per chip against tokens/s per user of every deployment, the Pareto front joined (PNG/SVG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AicalcError("--plot needs matplotlib: pip install 'aicalc[plot]'") from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, mark in (("aggregated", "o"), ("disaggregated", "s")):
        pts = [r for r in rows if r["mode"] == mode]
        ax.scatter([r["tokens_per_s_per_user"] for r in pts], [r["output_tokens_per_s_per_chip"] for r in pts],
                   marker=mark, alpha=0.5, label=mode)
    front = sorted((r for r in rows if r["pareto"]), key=lambda r: r["tokens_per_s_per_user"])
    ax.plot([r["tokens_per_s_per_user"] for r in front], [r["output_tokens_per_s_per_chip"] for r in front], "k-",
            lw=1, label="Pareto front")
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per chip")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except (OSError, ValueError) as e:
        raise AicalcError(f"cannot write the plot to '{path}': {e}") from None
    finally:
        plt.close(fig)
