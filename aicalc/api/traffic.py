"""Serving under real traffic: a request mix arriving over time, simulated through a continuous-batching
scheduler (:mod:`aicalc.core.simulate`) priced by the cost model: tail latency, throughput and goodput."""

from __future__ import annotations

from aicalc.api.results import Table

MAX_REQUESTS = 200_000
MAX_TOKENS = 10_000_000  # per request, prompt or output


class Traffic(Table):
    """Columns (one row per arrival rate): ``rate``, ``requests``, ``concurrency`` (mean requests in the system),
    ``ttft_s`` and ``tpot_s`` (means), ``p50_ttft_s``, ``p90_ttft_s``,
    ``p99_ttft_s``, ``p50_tpot_s``, ``p90_tpot_s``, ``p99_tpot_s``, ``output_tokens_per_s``,
    ``requests_per_s``, ``goodput_requests_per_s`` (requests meeting both latency targets, per second),
    ``preemptions``, ``makespan_s``."""


def read_requests(path):
    """A trace: CSV with a header or JSON lines, each request with ``prompt`` and ``gen`` token counts and
    optionally ``arrival_s``. Returns (prompt, gen, arrival or None) as lists."""
    import csv
    import json
    import math
    from pathlib import Path

    from aicalc.errors import ParameterError

    p = Path(path)
    try:
        if p.stat().st_size > 64 << 20:
            raise ParameterError("requests", path, "is larger than 64 MiB")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ParameterError("requests", path, f"cannot be read ({getattr(e, 'strerror', None) or e})") from None
    rows: list[dict] = []
    try:
        if p.suffix.lower() in (".jsonl", ".json", ".ndjson"):
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            rows = list(csv.DictReader(text.splitlines()))
    except (json.JSONDecodeError, csv.Error) as e:
        raise ParameterError("requests", path, f"is not valid {'JSON lines' if p.suffix != '.csv' else 'CSV'}: "
                             f"{e}") from None
    if not rows:
        raise ParameterError("requests", path, "holds no request")
    if len(rows) > MAX_REQUESTS:
        raise ParameterError("requests", path, f"holds more than {MAX_REQUESTS:,} requests")
    prompt, gen, arrival = [], [], []
    timed = isinstance(rows[0], dict) and "arrival_s" in rows[0]
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict) or "prompt" not in row or "gen" not in row:
            raise ParameterError("requests", path, f"request {i} has no 'prompt' and 'gen' columns")
        try:
            pr, g = float(row["prompt"]), float(row["gen"])
            t = float(row["arrival_s"]) if timed else 0.0
        except (TypeError, ValueError):
            raise ParameterError("requests", path, f"request {i}: prompt, gen and arrival_s must be numbers") from None
        if not (math.isfinite(pr) and math.isfinite(g) and math.isfinite(t)) or pr < 1 or g < 1 or t < 0 \
                or pr > MAX_TOKENS or g > MAX_TOKENS or pr != int(pr) or g != int(g):
            raise ParameterError("requests", path, f"request {i}: prompt and gen must be whole numbers from 1 to "
                                 f"{MAX_TOKENS:,} and arrival_s a non-negative time")
        prompt.append(int(pr))
        gen.append(int(g))
        arrival.append(t)
    return prompt, gen, (arrival if timed else None)


def simulate(model, chip="h100-sxm", rate=1.0, *, requests=None, prompt=1024, gen=256, num_requests: int = 1000,
             tp: int | None = None, chips: int | None = None, dtype: str = "bf16", kv_dtype: str = "bf16", engine=None,
             max_ttft=None, max_tpot=None, max_seqs: int = 256, token_budget: int = 8192, utilization=0.9,
             seed: int = 0) -> Traffic:
    """Requests arriving at ``rate`` per second (Poisson; an array sweeps it) over the whole deployment, spread
    evenly over its replicas, with ``prompt`` / ``gen`` tokens each, or a trace (``requests``: a CSV/JSONL path,
    or a dict of ``prompt``, ``gen`` and optional ``arrival_s`` lists; a trace's own arrival times replace
    ``rate``). One row per rate."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import node_split
    from aicalc.api.roofline import cost_setup
    from aicalc.core import capacity
    from aicalc.core import simulate as sim
    from aicalc.core.geometry import check_tp, kv_bytes_per_token_layer
    from aicalc.errors import ParameterError

    tp, chips = node_split(chip, tp, chips)
    tp = inputs.whole("tp", tp)
    chips = inputs.whole("chips", chips) if chips is not None else tp
    if chips < 1 or chips % tp:
        raise ParameterError("chips", chips, f"is not a positive multiple of tp={tp}")
    replicas = chips // tp
    cs = cost_setup(model, chip, dtype, kv_dtype, tp_needs_link=tp > 1, engine=engine)
    arch = cs.model.arch
    check_tp(arch, tp)
    if requests is not None:
        p_list, g_list, a_list = read_requests(requests) if not isinstance(requests, dict) else (
            list(map(int, requests["prompt"])), list(map(int, requests["gen"])), requests.get("arrival_s"))
    else:
        n = inputs.whole("num_requests", num_requests)
        if n > MAX_REQUESTS:
            raise ParameterError("num_requests", n, f"is more than {MAX_REQUESTS:,}")
        p0 = inputs.whole("prompt", prompt)
        g0 = inputs.whole("gen", gen)
        p_list, g_list, a_list = [p0] * n, [g0] * n, None
    rates = inputs.positive("rate", rate).reshape(-1) if a_list is None else np.asarray([np.nan])
    for name, v in (("max_seqs", max_seqs), ("token_budget", token_budget)):
        inputs.positive(name, v, whole=True)
    max_ttft = inputs.seconds("max_ttft", max_ttft) if max_ttft is not None else np.inf
    max_tpot = inputs.seconds("max_tpot", max_tpot) if max_tpot is not None else np.inf
    # KV blocks one replica holds: the vLLM budget beside weights and overhead, per device, in blocks of 16
    from aicalc.api.catalog import resident_weights

    weights = resident_weights(cs.model, dtype, tp)
    kv_dtype = cs.kv_dtype
    budget = float(capacity.kv_budget_bytes(cs.chip.memory_bytes, inputs.fraction("utilization", utilization),
                                            weights, capacity.runtime_overhead_bytes(arch, tp)))
    block = 16
    block_bytes = block * float(kv_bytes_per_token_layer(arch, kv_dtype, tp)) * arch.layers
    kv_blocks = int(max(budget, 0.0) // block_bytes)
    if kv_blocks * block < max(p_list) + 1:
        raise ParameterError("prompt", max(p_list), f"tokens do not fit the {kv_blocks * block:,}-token KV cache "
                             f"of one replica on {cs.chip.id}")
    cost = _step_cost(cs, tp, int(max_seqs), int(token_budget), max(p + g for p, g in zip(p_list, g_list, strict=True)))
    rows = {k: [] for k in ("rate", "requests", "concurrency", "ttft_s", "tpot_s", "p50_ttft_s", "p90_ttft_s", "p99_ttft_s", "p50_tpot_s", "p90_tpot_s",
                            "p99_tpot_s", "output_tokens_per_s", "requests_per_s", "goodput_requests_per_s",
                            "preemptions", "makespan_s")}
    rng = np.random.default_rng(seed)
    P, G = np.asarray(p_list), np.asarray(g_list)
    for lam in rates:
        if a_list is None:  # Poisson arrivals: exponential gaps at the per-replica rate
            arr = np.cumsum(rng.exponential(replicas / lam, size=len(P)))
        else:
            arr = np.asarray(a_list, dtype=np.float64)
            order = np.argsort(arr, kind="stable")
            arr, P, G = arr[order] * replicas, P[order], G[order]  # one replica sees 1/replicas of the stream
        ttft, tpot, finish, pre = sim.run(arr.tolist(), P.tolist(), G.tolist(), cost, kv_blocks, block,
                                          int(max_seqs), int(token_budget))
        ttft, tpot = np.asarray(ttft), np.asarray(tpot)
        span = float(np.nanmax(finish) - arr[0]) if len(arr) else 0.0
        good = (ttft <= max_ttft) & ((tpot <= max_tpot) | np.isnan(tpot))
        rows["rate"].append(float(lam) if a_list is None else len(P) / max(span, 1e-9) * replicas)
        rows["requests"].append(len(P))
        latency_s = np.asarray(finish) - arr  # Little's law: requests in the system = arrival rate × latency
        rows["concurrency"].append(float(np.nanmean(latency_s)) * len(P) / max(span, 1e-9) * replicas)
        rows["ttft_s"].append(float(np.nanmean(ttft)))
        rows["tpot_s"].append(float(np.nanmean(tpot)) if np.any(np.isfinite(tpot)) else float("nan"))
        for q in (50, 90, 99):
            rows[f"p{q}_ttft_s"].append(_percentile(ttft, q))
            rows[f"p{q}_tpot_s"].append(_percentile(tpot, q))
        rows["output_tokens_per_s"].append(float(G.sum()) / span * replicas)
        rows["requests_per_s"].append(len(P) / span * replicas)
        rows["goodput_requests_per_s"].append(float(good.sum()) / span * replicas)
        rows["preemptions"].append(pre * replicas)
        rows["makespan_s"].append(span)
    return Traffic(rows, list(cs.warnings), setup=cs, replicas=replicas, chips=chips, kv_blocks=kv_blocks,
                   cost=cost)


def _percentile(x, q: float) -> float:
    import numpy as np

    return float(np.nanpercentile(x, q)) if np.any(np.isfinite(x)) else float("nan")


def _step_cost(cs, tp: int, max_seqs: int, token_budget: int, longest: int):
    """Step-time tables from the cost model: decode at every batch size over geometric context bins, and the
    marginal and fixed cost of prefill tokens in a batched pass."""
    import numpy as np

    from aicalc.core import latency
    from aicalc.core.simulate import StepCost

    eff = cs.efficiency
    bins = np.unique(np.ceil(np.geomspace(16, max(longest, 32), 24)))
    B, C = np.meshgrid(np.arange(1, max_seqs + 1, dtype=np.float64), bins, indexing="ij")
    dec = latency.phase(cs.shape, cs.roofs, cs.formats, eff, B.ravel(), 1.0, C.ravel(), tp).t_est.reshape(B.shape)
    dec = np.vstack([np.zeros((1, bins.size)), dec])
    tokens = np.unique(np.ceil(np.geomspace(1, max(token_budget, longest), 40)))
    t = latency.phase(cs.shape, cs.roofs, cs.formats, eff, 1.0, tokens, 0.0, tp, logits_tokens=1.0).t_est
    half = np.searchsorted(tokens, token_budget / 2.0)
    full = np.searchsorted(tokens, token_budget)
    per_token = float((t[full] - t[half]) / (tokens[full] - tokens[half]))
    return StepCost(dec.tolist(), bins.tolist(), per_token, [0.0, *tokens.tolist()], [0.0, *t.tolist()])
