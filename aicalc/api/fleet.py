"""The fewest chips that serve a traffic within its latency targets: for every replica layout (chip, TP, weight and
KV formats), aggregated or as disaggregated prefill and decode pools each with its own layout, the replica count
found by bisection on the scheduler simulation's p99 TTFT and TPOT (:mod:`aicalc.core.simulate`), and what that
fleet costs. ``serve --search`` without ``--chips`` and ``compare``'s fleet price are both this one search."""

from __future__ import annotations

from aicalc.api.results import Table
from aicalc.api.traffic import DEFAULT_SEQS, MAX_ARRIVAL_S, _percentile
from aicalc.core.serving import TOKEN_BUDGET

MAX_FLEET_CHIPS = 16384  # the largest fleet searched
FLEET_REQUESTS = 1000  # requests simulated per replica count (p99: the 10th slowest)
FLEET_MAX_REQUESTS = 20_000  # requests one fleet search may simulate per replica count
SIM_WORK = 2_000_000  # scheduler work one simulation may take: past it, a replica count is too few (overloaded)
TPS = (1, 2, 4, 8, 16)


class Fleet(Table):
    """One row per layout that meets the targets, cheapest first: ``mode`` (aggregated or disaggregated),
    ``chip``, ``chips`` (the whole fleet), ``tp``, ``replicas``, ``dtype``, ``kv_dtype``; disaggregated rows also
    ``prefill_chip``, ``prefill_tp``, ``prefill_replicas``, ``prefill_chips``, ``decode_chip``, ``decode_tp``,
    ``decode_replicas``, ``decode_chips``, ``kv_transfer_s``; ``rate`` (requests/s sized for),
    ``p50_ttft_s``, ``p99_ttft_s``, ``p50_tpot_s``, ``p99_tpot_s`` (simulated at that fleet),
    ``usd_per_hour``, ``usd_per_day``, ``usd_per_million_output_tokens``, ``meets_slo``, ``simulations``."""


def fewest(meets, start: int, most: int, beyond=None) -> int | None:
    """The least ``r`` in [1, ``most``] with ``meets(r)``, for ``meets`` false below some count and true from it
    on; None when ``meets(most)`` is false. Starts at ``start`` (an estimate), gallops (doubling the step) to a
    bracket of a count that misses and one that meets, then bisects it: O(log) calls of ``meets``, never a scan.
    The answer is a count that meets with one fewer missing (or 1). ``beyond(r)``: True where an answer of ``r``
    or more is of no use; the search then stops with None as soon as a count that misses shows the answer lies
    there (the answer always lies above a count that misses), calling ``meets`` as it would have up to then."""
    start = min(max(int(start), 1), most)
    lo, hi = 0, None  # lo: a count known to miss (0 serves nothing); hi: one known to meet
    if meets(start):
        hi, step = start, 1
        while hi - step > lo:  # gallop down
            if not meets(hi - step):
                lo = hi - step
                break
            hi -= step
            step *= 2
    else:
        lo, step = start, 1
        while hi is None:  # gallop up
            if lo >= most or (beyond is not None and beyond(lo + 1)):
                return None
            r = min(most, max(lo + step, 2 * lo) if step > 2 else lo + step)
            if meets(r):
                hi = r
            else:
                lo = r
            step *= 2
    while hi - lo > 1:
        if beyond is not None and beyond(lo + 1):
            return None
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def traffic_rate(rate=None, requests_per_day=None, peak_factor=1.0) -> float:
    """Requests/s to size for: ``rate``, or ``requests_per_day`` / 86,400 × ``peak_factor`` (the peak hour's rate
    over the day's average)."""
    from aicalc.api import inputs
    from aicalc.errors import ParameterError

    if rate is not None and requests_per_day is not None:
        raise ParameterError("rate", rate, "and requests_per_day both give the traffic: give one")
    peak = inputs.single("peak_factor", peak_factor)
    if not 1.0 <= peak <= 86_400.0:  # 86,400: a whole day's requests in one second
        raise ParameterError("peak_factor", peak_factor, "must lie from 1 (the day's average) to 86,400 (a whole "
                             "day's requests in one second)")
    if requests_per_day is not None:
        return inputs.single("requests_per_day", requests_per_day) / 86_400.0 * peak
    if rate is None:
        return None
    return inputs.single("rate", rate)


def size_fleet(model, chips=("h100-sxm",), *, rate=None, requests=None, requests_per_day=None, peak_factor=1.0,
               prompt=1024, gen=256, num_requests: int = FLEET_REQUESTS, max_ttft=None, max_tpot=None,
               dtypes=("release",), kv_dtypes=("bf16",), tps=None, disaggregate: bool = True, engine=None,
               policy=None, price=None, seed: int = 0, max_chips: int = MAX_FLEET_CHIPS,
               cheapest: bool = False) -> Fleet:
    """The fewest chips of each layout that serve ``rate`` requests/s (or ``requests_per_day`` × ``peak_factor``
    / 86,400; or a trace, ``requests``, at its own arrival times or at ``rate``) of ``prompt`` + ``gen`` tokens
    within ``max_ttft`` and ``max_tpot`` at the 99th percentile, over every chip in ``chips``, TP degree
    (``tps``, default those of 1-16 the model admits), weight and KV format; aggregated replicas, and
    (``disaggregate``) prefill and decode pools sized separately, each pool over every chip and TP. ``price``:
    USD per chip-hour for every chip (default each preset's). Rows meeting the targets, cheapest first (then
    fewest chips); a layout that cannot meet them with up to ``max_chips`` chips has no row. ``cheapest``: only the
    first row is wanted (``compare``'s fleet): a layout or pool that cannot come out strictly cheaper than the best
    fleet found so far is not sized (a tie would sort after it), so the first row is the same with fewer
    simulations and the rows after it may be missing."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import load_decoder, load_node_or_chip, named_format
    from aicalc.api.deployment import moe_layouts, pipelines
    from aicalc.api.roofline import cost_setup
    from aicalc.api.traffic import Layout, replica
    from aicalc.core.dtypes import kv_bytes_per_element
    from aicalc.core.geometry import check_tp
    from aicalc.errors import AicalcError, ParameterError

    spec = load_decoder(model, "serve")
    arch = spec.arch
    if isinstance(chips, str):
        chips = [chips]
    if not chips:
        raise ParameterError("chips", "[]", "is empty: give at least one chip")
    # an unknown format is bad input, not a layout quietly left out; "release" named as tables show it
    dtypes = [named_format(spec, dt) for dt in dtypes]
    for kvd in kv_dtypes:
        if kvd != "auto":
            kv_bytes_per_element(kvd, 128)
    P, G, unit, lam = _traffic(rate, requests, requests_per_day, peak_factor, prompt, gen, num_requests, seed)
    n = len(P)
    if max_ttft is None:  # with no TTFT target any rate is "served" by one replica and a queue without end
        raise ParameterError("max_ttft", True, "is needed to size a fleet: without a TTFT target one replica "
                             "serves any rate, its queue growing without end")
    ttft_cap = inputs.seconds("max_ttft", max_ttft)
    tpot_cap = inputs.seconds("max_tpot", max_tpot) if max_tpot is not None else np.inf
    max_chips = inputs.whole("max_chips", max_chips)
    if price is not None:
        price = inputs.single("price", price)
    longest = max(p + g for p, g in zip(P, G, strict=True))
    warnings: list[str] = []
    layouts = []
    for chip_id in chips:
        chip, _ = load_node_or_chip(chip_id)
        for tp in tps or TPS:
            try:
                check_tp(arch, tp)
            except ParameterError:
                continue
            layouts += [Layout(chip.id, int(tp), dt, kvd, ep, adp) for dt in dtypes for kvd in kv_dtypes
                        for ep, adp in moe_layouts(arch, int(tp))]
            # a TP group that fills the scale-up domain, also pipelined over 2 and 4 domains (as the deployment
            # search: vLLM's multi-node layout, TP inside a node and PP across nodes); plain TP replicas
            layouts += [Layout(chip.id, int(tp), dt, kvd, 1, 1, pp) for pp in pipelines(chip, int(tp), None)[1:]
                        for dt in dtypes for kvd in kv_dtypes]
    if not layouts:
        raise ParameterError("tp", ",".join(str(t) for t in tps or TPS), f"admits no layout of {spec.id} (a TP "
                             "degree must divide its attention heads and FFN)")
    reps, setups = {}, {}
    for lay in layouts:
        try:
            # the cost model's view depends on TP only through whether TP needs a link: one per chip and formats
            key = (lay.chip, lay.dtype, lay.kv_dtype, lay.tp > 1)
            if key not in setups:
                setups[key] = cost_setup(spec, lay.chip, lay.dtype, lay.kv_dtype, tp_needs_link=lay.tp > 1,
                                         engine=engine)
            rep = replica(spec, lay, engine=engine, policy=policy, longest=longest, cs=setups[key], need=longest,
                          max_seqs=DEFAULT_SEQS, token_budget=TOKEN_BUDGET)  # as the emitted command pins them
        except AicalcError as e:  # e.g. no math for this dtype on this chip
            warnings.append(f"{lay.chip} TP {lay.tp}{f' PP {lay.pp}' if lay.pp > 1 else ''} {lay.dtype}: {e}")
            continue
        if rep.capacity_tokens >= longest:  # the weights leave room for the longest request
            reps[lay] = rep
    if not reps:
        raise ParameterError("chip", ",".join(map(str, chips)), f"holds no replica of {spec.id} with room for a "
                             f"request of {longest:,} tokens at TP up to {max(tps or TPS)}")
    prices = {lay.chip: price or rep.setup.chip.price_per_hour_usd for lay, rep in reps.items()}
    weight = prices if all(prices.values()) else dict.fromkeys(prices, 1.0)  # rank by dollars, else by chips
    search = _Search(P, G, unit, lam, ttft_cap, tpot_cap, max_chips, weight, cheapest)
    rows = []
    for rep in sorted(reps.values(), key=search.bound):  # cheapest bound first: later layouts may be skipped
        row = search.aggregated(rep)
        if row:
            rows.append(row)
    if disaggregate:
        rows += search.disaggregated(reps)
    if search.skipped:
        pools = {}  # in the search's order (the set's own order changes with each process's string hashes)
        for pool in ("aggregated", "prefill", "decode"):
            k = sum(1 for p, _ in search.skipped if p == pool)
            if k:
                pools[pool] = k
        warnings.append("not sized, as even at full throughput they would cost more than the cheapest fleet found: "
                        + ", ".join(f"{k} {pool} layout{'s' if k > 1 else ''}" for pool, k in pools.items()))
    for row in rows:
        row["meets_slo"] = True
        if all(prices.values()):
            hour = sum(k * prices[c] for c, k in row["_chips"].items())
            row["usd_per_hour"], row["usd_per_day"] = hour, hour * 24.0
            row["usd_per_million_output_tokens"] = hour / 3600.0 / (lam * float(np.mean(G))) * 1e6
        else:
            row["usd_per_hour"] = row["usd_per_day"] = row["usd_per_million_output_tokens"] = None
        del row["_chips"]
    rows.sort(key=lambda r: (r["usd_per_hour"] is None, r["usd_per_hour"] or 0.0, r["chips"]))
    if not rows:
        warnings.append(f"no fleet of up to {max_chips:,} chips serves {lam:.4g} requests/s within the targets")
    keys = ["mode", "chip", "chips", "tp", "pp", "ep", "attention_dp", "replicas", "dtype", "kv_dtype", "prefill_chip", "prefill_tp",
            "prefill_replicas", "prefill_chips", "decode_chip", "decode_tp", "decode_replicas", "decode_chips",
            "kv_transfer_s", "rate", "p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s", "usd_per_hour",
            "usd_per_day", "usd_per_million_output_tokens", "meets_slo", "simulations"]
    cols = {k: _objects([r.get(k) for r in rows]) for k in keys}
    return Fleet(cols, warnings, row_dicts=[{k: r.get(k) for k in keys} for r in rows], rate=lam, requests=n,
                 max_ttft=ttft_cap, max_tpot=tpot_cap, simulations=search.count,
                 policy=next(iter(reps.values())).policy)


def _traffic(rate, requests, requests_per_day, peak_factor, prompt, gen, num_requests, seed):
    """(prompt and gen lists, unit-rate arrival times, requests/s) of the traffic a fleet serves: Poisson at the
    rate (seeded), or a trace at its own times. At most :data:`FLEET_MAX_REQUESTS` requests (each simulation of
    the search runs them all)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.traffic import _requests
    from aicalc.errors import ParameterError

    lam = traffic_rate(rate, requests_per_day, peak_factor)
    if requests is not None:
        P, G, arrival, _ = _requests(requests)
        if len(P) > FLEET_MAX_REQUESTS:
            raise ParameterError("requests", "(trace)", f"holds {len(P):,} requests; a fleet search simulates at "
                                 f"most {FLEET_MAX_REQUESTS:,} (each of its simulations runs them all)")
    else:
        n = inputs.whole("num_requests", num_requests)
        if n > FLEET_MAX_REQUESTS:
            raise ParameterError("num_requests", n, f"is more than the {FLEET_MAX_REQUESTS:,} a fleet search "
                                 "simulates (each of its simulations runs them all)")
        P, G, arrival = [inputs.whole("prompt", prompt)] * n, [inputs.whole("gen", gen)] * n, None
    n = len(P)
    if arrival is not None and lam is None:  # a trace at its own times: one replica sees them stretched r times
        order = np.argsort(arrival, kind="stable")
        P, G = [P[i] for i in order], [G[i] for i in order]
        t = np.asarray(arrival, dtype=np.float64)[order]
        span = float(t[-1] - t[0])
        if not span > 0:
            raise ParameterError("requests", "(trace)", "arrives all at one time: give {rate} to spread it")
        unit, lam = (t - t[0]) * n / span, n / span  # arrivals of one request per second on average
    else:
        if lam is None:
            raise ParameterError("rate", True, "is needed to size a fleet (or {requests_per_day}, or a trace with "
                                 "arrival times)")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ParameterError("seed", inputs._safe(seed), "must be a whole number >= 0")
        from aicalc.api.arrivals import unit_arrivals

        unit = unit_arrivals(seed, n)  # unit-rate Poisson, cumsum(default_rng(seed).exponential(1, n))
    if not lam > 0:
        raise ParameterError("rate", lam, "must be positive")
    return P, G, unit, lam


def simulate_deployments(model, rows: list[dict], *, rate=None, requests=None, prompt=1024, gen=256,
                         num_requests: int = FLEET_REQUESTS, max_ttft=None, max_tpot=None, engine=None, policy=None,
                         seed: int = 0) -> list[dict]:
    """Deployments of a fixed size (rows of :func:`aicalc.api.deployment.search_deployments`) under a traffic:
    each row gains ``rate``, ``p50_ttft_s``, ``p99_ttft_s``, ``p50_tpot_s``, ``p99_tpot_s`` from the scheduler
    simulation of its replicas (a pipelined row: replicas of ``tp × pp`` chips, :func:`aicalc.api.traffic.replica`;
    a disaggregated row: its prefill pool, then its decode pool with prefills free), and ``meets_slo`` says whether those p99s meet the targets (None where the run overloads past the
    work one simulation may take)."""
    import math

    from aicalc.api import inputs
    from aicalc.api.catalog import load_decoder
    from aicalc.api.traffic import Layout, replica
    from aicalc.core.simulate import StepCost

    spec = load_decoder(model, "serve")
    P, G, unit, lam = _traffic(rate, requests, None, 1.0, prompt, gen, num_requests, seed)
    ttft_cap = inputs.seconds("max_ttft", max_ttft) if max_ttft is not None else math.inf
    tpot_cap = inputs.seconds("max_tpot", max_tpot) if max_tpot is not None else math.inf
    search = _Search(P, G, unit, lam, math.inf, math.inf, MAX_FLEET_CHIPS, {})
    longest = max(p + g for p, g in zip(P, G, strict=True))
    reps: dict = {}

    def rep_of(chip, tp, dtype, kv_dtype, ep=1, attention_dp=1, pp=1):
        lay = Layout(chip, int(tp), dtype, kv_dtype, int(ep), int(attention_dp), int(pp))
        if lay not in reps:
            reps[lay] = replica(spec, lay, engine=engine, policy=policy, longest=longest, max_seqs=DEFAULT_SEQS,
                                token_budget=TOKEN_BUDGET)  # as the emitted command pins them
        return reps[lay]

    out = []
    for row in rows:
        row = dict(row, rate=lam)
        if row["mode"] == "aggregated":
            s = search._sim(rep_of(row["chip"], row["tp"], row["dtype"], row["kv_dtype"], row.get("ep", 1),
                                   row.get("attention_dp", 1), row.get("pp", 1)), row["replicas"], math.inf, math.inf)
        else:
            pre = rep_of(row["chip"], row["prefill_tp"], row["dtype"], row["kv_dtype"])
            dec = rep_of(row["chip"], row["tp"], row["dtype"], row["kv_dtype"])
            c = dec.cost
            free = StepCost(c.decode_s, c.context_bins, 0.0, [0.0, 1.0, 2.0**40], [0.0, 0.0, 0.0])
            a = search._sim(pre, row["prefill_replicas"], math.inf, math.inf, gen=[1] * len(P))
            b = search._sim(dec, row["replicas"], math.inf, math.inf, cost=free)
            transfer = row.get("kv_transfer_s", 0.0)
            s = None if a is None or b is None else (a[0] + transfer + b[0], a[1] + transfer + b[1], b[2], b[3])
        if s is None:
            row |= {"p50_ttft_s": None, "p99_ttft_s": None, "p50_tpot_s": None, "p99_tpot_s": None,
                    "meets_slo": False}
        else:
            row |= {"p50_ttft_s": s[0], "p99_ttft_s": s[1], "p50_tpot_s": s[2], "p99_tpot_s": s[3],
                    "meets_slo": bool(s[1] <= ttft_cap and s[3] <= tpot_cap)}
        out.append(row)
    return out


class _Search:
    """Replica counts by bisection for one traffic: every simulation runs the same arrivals (unit-rate times
    ``unit`` stretched to one replica's share), so a count that meets keeps meeting with more replicas."""

    def __init__(self, P, G, unit, lam, ttft_cap, tpot_cap, max_chips, weight, cheapest: bool = False):
        self.P, self.G, self.unit, self.lam = P, G, unit, lam
        self.ttft_cap, self.tpot_cap, self.max_chips = ttft_cap, tpot_cap, max_chips
        self.weight = weight  # chip id → what a chip counts in the ranking (its price, or 1)
        self.best = float("inf")  # the cheapest fleet found so far, in those units
        self.count = 0
        self.skipped: set = set()  # (pool, layout) not simulated: its floor costs more than the best found
        self.cheapest = cheapest  # only the cheapest fleet is wanted: a tie with the best found is no use either
        self._memo: dict = {}  # (what, id(replica)) → its floor or its idle p99s, computed once per replica

    def _once(self, what: str, rep, f):
        key = (what, id(rep))
        if key not in self._memo:
            self._memo[key] = (rep, f(rep))  # the replica kept alive with it: its id is not reused meanwhile
        return self._memo[key][1]

    def _means(self) -> tuple[float, float]:
        """(mean prompt, mean gen) of the traffic, as floats."""
        if "means" not in self._memo:
            import numpy as np

            self._memo["means"] = (float(np.mean(self.P)), float(np.mean(self.G)))
        return self._memo["means"]

    def _beaten(self, cost: float) -> bool:
        """Whether a fleet costing ``cost`` (a floor) is no use: dearer than the best found, or (``cheapest``)
        no cheaper."""
        return cost >= self.best if self.cheapest else cost > self.best

    def _cost(self, chips: dict) -> float:
        return sum(n * self.weight[c] for c, n in chips.items())

    def _decode_floor(self, rep) -> float:
        """Replicas a decode load needs at the least: every output token at the cheapest decode step per
        sequence (the largest batch the cache holds, at the shortest context)."""
        return self._once("decode_floor", rep, self._decode_floor_of)

    def _decode_floor_of(self, rep) -> float:
        import bisect

        c = rep.cost
        p, g = self._means()
        top = max(1, min(rep.max_seqs, len(c.decode_s) - 1, int(rep.capacity_tokens // (p + g))))
        j = min(bisect.bisect_left(c.context_bins, min(self.P)), len(c.context_bins) - 1)
        per_token = min(c.decode_s[b][j] / b for b in range(1, top + 1))
        return self.lam * (g - 1) * per_token

    def _prefill_floor(self, rep) -> float:
        """Replicas a prefill load needs at the least: every prompt token at the marginal cost of a full step."""
        return self._once("prefill_floor", rep, self._prefill_floor_of)

    def _prefill_floor_of(self, rep) -> float:
        import numpy as np

        c = rep.cost
        p = self._means()[0]
        k = max(1.0, rep.token_budget // p)
        per_prompt = min(c.prefill_s_per_token * p, float(np.interp(k * p, c.prefill_tokens, c.prefill_s)) / k)
        return self.lam * per_prompt

    def bound(self, rep) -> float:
        """A floor under the cost of an aggregated fleet of ``rep``: its replicas at full throughput."""
        import math

        n = max(1, math.ceil(self._decode_floor(rep) + self._prefill_floor(rep) - 1e-9))
        return self._cost({rep.layout.chip: n * _width(rep.layout)})

    def _sim(self, rep, replicas: int, ttft_cap: float, tpot_cap: float, gen=None, cost=None):
        """(p50, p99 TTFT, p50, p99 TPOT) of one replica's share of the traffic; None when it misses a target
        for sure before its end (more than 1 % of requests past one) or overloads."""
        import math

        import numpy as np

        from aicalc.core.simulate import SimulationError

        self.count += 1
        stretch = replicas / self.lam
        if float(self.unit[-1]) * stretch > MAX_ARRIVAL_S:  # a request every few days per replica: each meets an
            return self._idle(rep, gen, cost)  # idle replica (a float64 clock would not resolve the steps here)
        arrival = (self.unit * stretch).tolist()
        n = len(arrival)
        allowed = n - 1 - math.floor(0.99 * (n - 1))  # more past a limit put the (interpolated) p99 past it
        try:
            ttft, tpot, *_ = rep.run(arrival, self.P, gen or self.G, max_work=SIM_WORK, cost=cost,
                                     give_up=(ttft_cap, tpot_cap, allowed))
        except SimulationError as e:
            if e.reason in ("work", "targets"):
                return None
            raise
        ttft, tpot = np.asarray(ttft), np.asarray(tpot)
        fin = np.isfinite(tpot)
        t = tpot[fin] if fin.any() else np.zeros(1)  # gen = 1 everywhere: no TPOT to meet
        return tuple(_percentile(v, q) for v in (ttft, t) for q in (50, 99))

    def _idle(self, rep, gen, cost):
        """(p50, p99 TTFT, p50, p99 TPOT) of requests that each meet an idle replica."""
        import bisect

        import numpy as np

        c = cost or rep.cost
        gen = gen or self.G
        ttft = np.interp(self.P, c.prefill_tokens, c.prefill_s)
        ctx = [p + g / 2 for p, g in zip(self.P, gen, strict=True)]
        tpot = np.asarray([c.decode_s[1][min(bisect.bisect_left(c.context_bins, x), len(c.context_bins) - 1)]
                           for x, g in zip(ctx, gen, strict=True) if g > 1] or [0.0])
        return tuple(_percentile(v, q) for v in (ttft, tpot) for q in (50, 99))

    def _alone(self, rep):
        """(p99 TTFT, p99 TPOT) of requests that meet an idle replica: no replica count does better."""
        return self._once("alone", rep, self._alone_of)

    def _alone_of(self, rep):
        import numpy as np

        c = rep.cost
        if "PG" not in self._memo:
            P = np.asarray(self.P, dtype=np.float64)
            self._memo["PG"] = (P, P + np.asarray(self.G, dtype=np.float64) / 2)  # prompts, mid-generation contexts
        P, ctx = self._memo["PG"]
        pre = np.interp(P, c.prefill_tokens, c.prefill_s)
        bins = np.asarray(c.context_bins, dtype=np.float64)  # bisect_left, the last bin past the end
        dec = np.asarray(c.decode_s[1], dtype=np.float64)[np.minimum(np.searchsorted(bins, ctx), bins.size - 1)]
        return _percentile(pre, 99), _percentile(dec, 99)

    def _start(self, rep) -> int:
        """Replicas a first guess needs: the rate over one replica's throughput with its cache full."""
        import bisect
        import math


        c = rep.cost
        p, g = self._means()
        b = max(1, min(rep.max_seqs, len(c.decode_s) - 1, int(rep.capacity_tokens // (p + g))))
        j = min(bisect.bisect_left(c.context_bins, p + g / 2), len(c.context_bins) - 1)
        per_request = g * c.decode_s[b][j] / b + p * c.prefill_s_per_token
        return max(1, math.ceil(self.lam * per_request))

    def aggregated(self, rep) -> dict | None:
        lay = rep.layout
        ttft0, tpot0 = self._alone(rep)
        if ttft0 > self.ttft_cap or tpot0 > self.tpot_cap:
            return None
        if self._beaten(self.bound(rep)):
            self.skipped.add(("aggregated", lay))
            return None
        seen = {}

        def meets(r):
            seen[r] = s = self._sim(rep, r, self.ttft_cap, self.tpot_cap)
            return s is not None and s[1] <= self.ttft_cap and s[3] <= self.tpot_cap

        before = self.count
        w = _width(lay)
        beyond = (lambda r: self._beaten(self._cost({lay.chip: r * w}))) if self.cheapest else None
        r = fewest(meets, self._start(rep), self.max_chips // w, beyond)
        if r is None:
            return None
        s = seen[r]
        self.best = min(self.best, self._cost({lay.chip: r * w}))
        return {"mode": "aggregated", "chip": lay.chip, "chips": r * w, "tp": lay.tp, "pp": lay.pp, "ep": lay.ep,
                "attention_dp": lay.attention_dp, "replicas": r,
                "dtype": lay.dtype, "kv_dtype": lay.kv_dtype, "rate": self.lam, "p50_ttft_s": s[0],
                "p99_ttft_s": s[1], "p50_tpot_s": s[2], "p99_tpot_s": s[3], "simulations": self.count - before,
                "_chips": {lay.chip: r * w}}

    def disaggregated(self, reps: dict) -> list[dict]:
        """Prefill pools (requests of one token, each layout sized for the TTFT target less the KV transfer and
        the hand-off to a decode step, at most a TPOT target's) and decode pools (prefill free: it happened in
        the other pool; sized for the TPOT target and the TTFT the prefill pool leaves), each over every layout;
        a row per decode layout with the cheapest prefill pool of the same formats. Layouts whose floor (full
        throughput) cannot beat the cheapest fleet found are skipped."""
        import bisect
        import math

        from aicalc.core.simulate import StepCost

        rows = []
        ones = [1] * len(self.P)
        p99_prompt = _percentile(self.P, 99)
        p_mean, g_mean = self._means()
        mid = p_mean + g_mean / 2
        formats = {(lay.dtype, lay.kv_dtype) for lay in reps}
        for dt, kvd in sorted(formats):
            group = [rep for lay, rep in reps.items() if (lay.dtype, lay.kv_dtype) == (dt, kvd)
                     and lay.ep == 1 and lay.attention_dp == 1 and lay.pp == 1]  # pools of plain TP replicas
            steps = []
            for rep in group:
                c = rep.cost
                j = min(bisect.bisect_left(c.context_bins, mid), len(c.context_bins) - 1)
                steps.append(c.decode_s[min(rep.max_seqs, len(c.decode_s) - 1)][j])
            handoff = min(self.tpot_cap, max(steps))  # the first decode step after the hand-off
            floors = {id(rep): self._cost({rep.layout.chip: max(1, math.ceil(self._decode_floor(rep) - 1e-9))
                                          * rep.layout.tp}) for rep in group}
            least_decode = min(floors.values())
            best = None
            for rep in sorted(group, key=lambda r: self._cost({r.layout.chip: r.layout.tp * max(1, math.ceil(
                    self._prefill_floor(r) - 1e-9))})):
                lay = rep.layout
                floor = self._cost({lay.chip: lay.tp * max(1, math.ceil(self._prefill_floor(rep) - 1e-9))})
                if self._beaten(floor + least_decode) or floor + least_decode > (best[0][0] if best else math.inf):
                    self.skipped.add(("prefill", lay))
                    continue
                transfer = _transfer_s(rep, p99_prompt)
                cap = self.ttft_cap - transfer - handoff
                if self._alone(rep)[0] > cap:
                    continue
                seen = {}

                def meets(r, rep=rep, seen=seen, cap=cap):
                    seen[r] = s = self._sim(rep, r, cap, math.inf, gen=ones)
                    return s is not None and s[1] <= cap

                before = self.count
                beyond = (lambda r, lay=lay, least=least_decode: self._beaten(self._cost({lay.chip: r * lay.tp})
                                                                              + least)) if self.cheapest else None
                r = fewest(meets, self._start_prefill(rep), self.max_chips // lay.tp, beyond)
                if r is None:
                    continue
                key = (self._cost({lay.chip: r * lay.tp}), r * lay.tp)
                if best is None or key < best[0]:
                    best = (key, lay, r, seen[r], transfer, self.count - before)
            if best is None:
                continue
            (p_cost, _), p_lay, p_r, p_s, transfer, p_sims = best
            left = self.ttft_cap - p_s[1] - transfer  # TTFT the decode pool may add
            for rep in sorted(group, key=lambda r: floors[id(r)]):
                lay = rep.layout
                if self._beaten(p_cost + floors[id(rep)]):
                    self.skipped.add(("decode", lay))
                    continue
                c = rep.cost
                free = StepCost(c.decode_s, c.context_bins, 0.0, [0.0, 1.0, 2.0**40], [0.0, 0.0, 0.0])
                if self._alone(rep)[1] > min(self.tpot_cap, left):
                    continue
                seen = {}

                def meets(r, rep=rep, seen=seen, free=free, left=left):
                    seen[r] = s = self._sim(rep, r, left, self.tpot_cap, cost=free)
                    return s is not None and s[1] <= left and s[3] <= self.tpot_cap

                before = self.count
                beyond = (lambda r, lay=lay, pool=(p_lay, p_r): self._beaten(self._cost(_both(pool, lay, r)))) \
                    if self.cheapest else None
                r = fewest(meets, self._start(rep), (self.max_chips - p_r * p_lay.tp) // lay.tp, beyond)
                if r is None:
                    continue
                s = seen[r]
                chips = _both((p_lay, p_r), lay, r)
                self.best = min(self.best, self._cost(chips))
                rows.append({"mode": "disaggregated", "chip": lay.chip if lay.chip == p_lay.chip else
                             f"{p_lay.chip} + {lay.chip}", "chips": p_r * p_lay.tp + r * lay.tp, "tp": lay.tp, "pp": 1,
                             "replicas": p_r + r, "dtype": dt, "kv_dtype": kvd, "prefill_chip": p_lay.chip,
                             "prefill_tp": p_lay.tp, "prefill_replicas": p_r, "prefill_chips": p_r * p_lay.tp,
                             "decode_chip": lay.chip, "decode_tp": lay.tp, "decode_replicas": r,
                             "decode_chips": r * lay.tp, "kv_transfer_s": transfer, "rate": self.lam,
                             "p50_ttft_s": p_s[0] + transfer + s[0], "p99_ttft_s": p_s[1] + transfer + s[1],
                             "p50_tpot_s": s[2], "p99_tpot_s": s[3], "simulations": p_sims + self.count - before,
                             "_chips": chips})
        return rows

    def _start_prefill(self, rep) -> int:
        """Prefill replicas a first guess needs: the rate over one replica's prompts per second at a full step."""
        import math

        import numpy as np

        c = rep.cost
        p = self._means()[0]
        k = max(1.0, rep.token_budget // p)
        return max(1, math.ceil(self.lam * float(np.interp(k * p, c.prefill_tokens, c.prefill_s)) / k))


def _both(prefill: tuple, lay, r: int) -> dict:
    """Chips by chip id of a disaggregated fleet: the prefill pool (layout, replicas) and ``r`` decode replicas
    of ``lay``."""
    p_lay, p_r = prefill
    chips = {p_lay.chip: p_r * p_lay.tp}
    chips[lay.chip] = chips.get(lay.chip, 0) + r * lay.tp
    return chips


def _transfer_s(rep, prompt: float) -> float:
    """Seconds to ship one request's KV cache (``prompt`` tokens) from a prefill replica over its chips'
    scale-out NICs (the pools sit on different nodes), each of the ``tp`` chips sending its share."""
    from aicalc.core.geometry import cache_bytes_per_token_layer
    from aicalc.core.kv_cache import kv_shape

    arch = rep.setup.model.arch
    kv = float(cache_bytes_per_token_layer(arch, rep.setup.kv_dtype, 1)) * arch.attention_layers * prompt + \
        kv_shape(arch, rep.setup.kv_dtype).fixed_bytes(prompt)  # a hybrid's recurrent state, DeepSeek-V4's windows
    return kv / (rep.layout.tp * (rep.setup.chip.scale_out_gbs or 25.0) * 1e9)


def _objects(values):
    import numpy as np

    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a


def _width(lay) -> int:
    """Chips per replica of a layout: its TP group times its pipeline stages."""
    return lay.tp * lay.pp
