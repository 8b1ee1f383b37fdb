"""Serving under real traffic: a request mix arriving over time, simulated through a continuous-batching
scheduler (:mod:`aicalc.core.simulate`) priced by the cost model: tail latency, throughput and goodput."""

import re

from aicalc.api.results import Table
from aicalc.tuples import Named

MAX_REQUESTS = 200_000  # requests in one trace or one --num-requests
MAX_TOKENS = 2**30  # per request, prompt or output: the cap of --prompt and --gen (aicalc.api.inputs.CAPS)
MAX_ARRIVAL_S = 1e9  # an arrival time, and the span of arrivals one replica sees (about 32 years): beyond it a
#                      float64 clock no longer resolves a step
MAX_FILE_BYTES = 64 << 20
MAX_NUMBER_CHARS = 64  # the text of one number in a trace
MAX_LINE_CHARS = 65_536  # one JSON line (a request takes ~50)
MAX_LINES = 4 * MAX_REQUESTS  # lines of a trace, blank ones too
MAX_SIMULATED = 1_000_000  # requests one call simulates, every rate together
MAX_SEQS = 2**14  # max_seqs: sequences one replica batches, given or the engine's default
DEFAULT_SEQS = 256  # max_seqs of an engine whose profile sets no cap (generic, llama.cpp, …): vLLM V0's default
MAX_WORK = 10_000_000  # units of scheduler work one call may take, every rate together (aicalc.core.simulate):
#                        4-7 s at the worst here; a preemption-bound or very long run stops with an error instead


class Traffic(Table):
    """Columns (one row per arrival rate): ``rate``, ``requests``, ``concurrency`` (mean requests in the system),
    ``ttft_s`` and ``tpot_s`` (means), ``p50_ttft_s``, ``p90_ttft_s``,
    ``p99_ttft_s``, ``p50_tpot_s``, ``p90_tpot_s``, ``p99_tpot_s``, ``output_tokens_per_s``,
    ``requests_per_s``, ``goodput_requests_per_s`` (requests meeting both latency targets, per second),
    ``preemptions``, ``makespan_s``; the replica's layout in every row: ``tp``, ``pp``, ``ep``, ``attention_dp``."""


def read_requests(path):
    """A trace: CSV with a header or JSON lines (``.jsonl``, ``.ndjson``, ``.json``: one flat object a line), each
    request with ``prompt`` and ``gen`` token counts and optionally ``arrival_s`` (seconds, given for every
    request or for none). Returns (prompt, gen, arrival or None) as lists. Only a regular file of at most 64 MiB is
    read; a number is at most 64 characters and finite, prompt and gen whole numbers from 1 to
    :data:`MAX_TOKENS`, arrival_s from 0 to :data:`MAX_ARRIVAL_S`; anything else is a ParameterError naming the
    file and line."""
    prompt, gen, arrival, _ = _read_trace(path)
    return prompt, gen, arrival


def _read_trace(path):
    """(prompt, gen, arrival or None, line of each request) of a trace file (see :func:`read_requests`)."""
    import csv
    import io
    import os
    import stat

    from aicalc.errors import ParameterError

    shown = str(path) if len(str(path)) <= 160 else str(path)[:159] + "…"

    def bad(problem: str):
        return ParameterError("requests", shown, problem)

    def refuse_unless_regular(mode: int) -> None:
        if not stat.S_ISREG(mode):  # a FIFO would wait forever for a writer, a device never end
            kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
                    if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special")
            raise bad(f"is not a regular file ({kind})")

    try:
        refuse_unless_regular(os.stat(path).st_mode)
        # opened without blocking and checked again through the descriptor: a swap between the two is caught
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except (OSError, ValueError, TypeError) as e:
        raise bad(f"cannot be read ({getattr(e, 'strerror', None) or e})") from None
    try:
        try:
            st = os.fstat(fd)
            refuse_unless_regular(st.st_mode)
            if st.st_size > MAX_FILE_BYTES:
                raise bad(f"is larger than {MAX_FILE_BYTES >> 20} MiB")
            f = os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        with f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise bad(f"cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_FILE_BYTES:
        raise bad(f"is larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise bad(f"cannot be read (not UTF-8 text at byte {e.start:,})") from None
    del data
    if text.count("\n") > MAX_LINES:  # counted in C: the loops below stay short whatever the file holds
        raise bad(f"has more than {MAX_LINES:,} lines (a trace holds at most {MAX_REQUESTS:,} requests)")

    rows: list[tuple[int, dict]] = []  # (line, fields)

    def add(line: int, row: dict) -> None:
        if len(rows) == MAX_REQUESTS:
            raise bad(f"holds more than {MAX_REQUESTS:,} requests")
        rows.append((line, row))

    if str(path).lower().endswith((".jsonl", ".json", ".ndjson")):
        for line, raw in enumerate(text.split("\n"), 1):
            if raw.strip():
                if len(raw) > MAX_LINE_CHARS:
                    raise bad(f"line {line}: is longer than {MAX_LINE_CHARS:,} characters")
                try:
                    add(line, _json_row(raw))
                except ValueError as e:
                    raise bad(f"line {line}: {e}") from None
    else:
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            header = next(reader, None)
            while header == []:  # blank lines before the header
                header = next(reader, None)
            head_line = reader.line_num
            names = [h.strip() for h in header or ()]
            twice = next((h for i, h in enumerate(names) if h in names[:i]), None)
            if twice is not None:
                raise bad(f"line {head_line}: column '{_short(twice)}' appears twice in the header")
            for fields in reader:
                if not fields:
                    continue  # a blank line
                if len(fields) != len(names):
                    raise bad(f"line {reader.line_num}: {len(fields)} fields, the header has {len(names)}")
                add(reader.line_num, dict(zip(names, fields, strict=True)))
        except csv.Error as e:
            raise bad(f"line {reader.line_num}: is not valid CSV ({e})") from None
    if not rows:
        raise bad("holds no request")
    first_line, first = rows[0]
    timed = "arrival_s" in first
    prompt, gen, arrival, lines = [], [], [], []
    for line, row in rows:
        if "prompt" not in row or "gen" not in row:
            raise bad(f"line {line}: a request needs 'prompt' and 'gen' (it has {_keys(row)})")
        if ("arrival_s" in row) != timed:
            raise bad(f"line {line}: {'no' if timed else 'an'} arrival_s, while line {first_line} has "
                      f"{'one' if timed else 'none'}: give every request an arrival time or none")
        try:
            p = _whole(row["prompt"], "prompt")
            g = _whole(row["gen"], "gen")
            t = _time(row["arrival_s"]) if timed else 0.0
        except ValueError as e:
            raise bad(f"line {line}: {e}") from None
        prompt.append(p)
        gen.append(g)
        arrival.append(t)
        lines.append(line)
    return prompt, gen, (arrival if timed else None), lines


_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"  # a decimal number as text (compiled when a trace is read)
_MAX_DIGITS = 30  # an integer in a JSON line: no token count or time is longer (docs/robustness.md)


class _LongInteger(str):
    """A JSON integer of more than _MAX_DIGITS digits, kept as its text (Python's int() refuses 4,300 digits and
    float() overflows): an error only where it is read as a number."""


def _json_int(text: str):
    return _LongInteger(text) if len(text.lstrip("-")) > _MAX_DIGITS else int(text)


def _json_pairs(pairs) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key '{_short(k)}' appears twice")
        out[k] = v
    return out


def _json_row(raw: str) -> dict:
    """One JSON line: a flat object (no object or array inside it, so nothing nests: 10^5 '[' once overflowed
    the parser's stack)."""
    import json

    if raw.count("{") + raw.count("[") == 1:  # nothing can nest
        bare = raw.strip()
    else:  # the line without its strings (unrolled: one repeat per escape, not per character)
        bare = re.sub(r'"[^"\\]*(?:\\.[^"\\]*)*"', '""', raw).strip()
    if not bare.startswith("{") or bare.count("{") + bare.count("[") > 1:
        raise ValueError('is not a flat JSON object of numbers like {"prompt": 512, "gen": 128}')
    try:
        return json.loads(raw, object_pairs_hook=_json_pairs, parse_int=_json_int)
    except json.JSONDecodeError as e:
        raise ValueError(f"is not valid JSON ({e.msg} at column {e.colno:,})") from None
    except RecursionError:  # not reachable after the check above; kept so a parser change cannot crash
        raise ValueError("is nested too deeply") from None


def _number(value, name: str) -> float:
    """A field as a finite number: a JSON number, or text of at most MAX_NUMBER_CHARS ASCII characters that
    reads as a decimal number (a CSV field, a JSON string)."""
    import math
    import numbers

    if isinstance(value, _LongInteger):
        raise ValueError(f"{name} is an integer of {len(value.lstrip('-')):,} digits, above aicalc's caps "
                         "(see docs/robustness.md)")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > MAX_NUMBER_CHARS:
            raise ValueError(f"{name} is {len(text):,} characters long, not a number of at most "
                             f"{MAX_NUMBER_CHARS} characters")
        if not (text.isascii() and text.isdigit()) and not re.fullmatch(_NUMBER, text, re.ASCII):  # no "nan", "1_0", "٣"
            raise ValueError(f"{name} '{_short(text)}' is not a number")
        v = float(text)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):  # numpy's numbers too
        try:
            v = float(value)
        except OverflowError:  # an int of more than 308 digits (a JSON line's are at most _MAX_DIGITS)
            raise ValueError(f"{name} is an integer above aicalc's caps (see docs/robustness.md)") from None
    else:
        raise ValueError(f"{name} is {_short(value)}, not a number")
    if not math.isfinite(v):
        raise ValueError(f"{name} is {_short(value)}, not a finite number")
    return v


def _whole(value, name: str) -> int:
    """A token count: a whole number from 1 to MAX_TOKENS."""
    v = _number(value, name)
    if v > MAX_TOKENS:
        raise ValueError(f"{name} {v:.6g} is above aicalc's cap of {MAX_TOKENS:,} tokens (see docs/robustness.md)")
    if v < 1 or v != int(v):
        raise ValueError(f"{name} {v:g} is not a whole number of tokens from 1 to {MAX_TOKENS:,}")
    return int(v)


def _time(value) -> float:
    """An arrival time: seconds from 0 to MAX_ARRIVAL_S."""
    v = _number(value, "arrival_s")
    if not 0 <= v <= MAX_ARRIVAL_S:
        raise ValueError(f"arrival_s {v:.6g} is not a time from 0 to {MAX_ARRIVAL_S:.0e} s")
    return v


def _short(value, n: int = 40) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value) if value is None or isinstance(value, bool) \
        else type(value).__name__ if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def _keys(row: dict) -> str:
    keys = [_short(k, 20) for k in list(row)[:6]]
    return ", ".join(f"'{k}'" for k in keys) + (", …" if len(row) > 6 else "") if keys else "no field"


class Layout(Named):
    """One replica's layout: what a fleet repeats. A record so the fleet search can grow with the cost model (expert
    parallelism and attention data parallelism join it as fields)."""

    chip: str
    tp: int = 1
    dtype: str = "release"
    kv_dtype: str = "bf16"
    ep: int = 1  # expert-parallel ranks over the replica's tp chips (MoE)
    attention_dp: int = 1  # attention data-parallel groups of tp/attention_dp chips
    pp: int = 1  # pipeline stages of tp chips each: a replica spans tp × pp chips


class Replica(Named):
    """One replica as the scheduler simulation sees it: its step-time tables, KV blocks and scheduling policy."""

    layout: Layout
    setup: object  # aicalc.api.roofline.CostSetup
    cost: object  # aicalc.core.simulate.StepCost
    kv_blocks: int
    block: int
    max_seqs: int
    token_budget: int
    policy: str
    reserve: str = "live"  # the engine's KV admission (profiles' kv_reserve): "full" reserves prompt + output

    @property
    def capacity_tokens(self) -> int:
        """Tokens one request may hold at most: the KV cache less the admission watermark."""
        from aicalc.core.simulate import WATERMARK

        return (self.kv_blocks - int(WATERMARK * self.kv_blocks)) * self.block

    def run(self, arrival, prompt, gen, max_work: int | None = None, cost=None, give_up=None):
        """(ttft_s, tpot_s, finish_s, preemptions, work) of requests arriving at one replica (lists);
        ``cost`` replaces the step tables (a decode pool's, whose prefills come from another pool); ``give_up``
        as :func:`aicalc.core.simulate.run`'s."""
        from aicalc.core import simulate as sim

        stats: dict = {}
        ttft, tpot, finish, pre = sim.run(arrival, prompt, gen, cost or self.cost, self.kv_blocks, self.block,
                                          self.max_seqs, self.token_budget, max_work=max_work, stats=stats,
                                          policy=self.policy, give_up=give_up, reserve=self.reserve)
        return ttft, tpot, finish, pre, stats["work"]


def policy_of(engine: str | None, policy: str | None = None) -> str:
    """The scheduler policy: ``policy`` where given, else the engine profile's ``scheduler`` (vLLM V0 and SGLang
    prefill-first, TensorRT-LLM chunked), else chunked (vLLM V1's)."""
    from aicalc.core.simulate import POLICIES
    from aicalc.errors import ParameterError

    if policy is not None:
        if policy not in POLICIES:
            raise ParameterError("policy", policy, f"is not one of {', '.join(POLICIES)}")
        return policy
    if engine is None:
        return "chunked"
    from aicalc.catalog import profiles

    return profiles.load("engine", engine).options.get("scheduler", "chunked")


def replica(model, layout: Layout, *, engine=None, policy=None, max_seqs: int | None = None,
            token_budget: int | None = None, utilization=None, longest: int = 2048, cs=None,
            need: int | None = None) -> Replica:
    """A replica of ``layout`` for the simulation: step-time tables up to ``longest`` tokens of context, and the
    KV blocks of 16 tokens the engine's budget leaves beside weights and overhead (:func:`aicalc.api.serving.kv_memory`:
    ``utilization`` of memory, None for the engine's default: 0.9, or SGLang's --mem-fraction-static default).

    With ``layout.pp`` stages each device holds its stage's layers of the weights and of every sequence's cache
    (as :func:`aicalc.api.serving.serve` prices a given deployment), so the replica's blocks are those its fullest
    stage's memory holds: about ``pp`` times a one-stage replica's on ``pp`` times the chips. The scheduler keeps
    ``pp`` micro-batches in flight, each with the engine's token budget (vLLM V1's batch queue of
    ``pipeline_parallel_size`` scheduled batches, each of up to ``max_num_batched_tokens``; SGLang's PP event loop
    likewise keeps a micro-batch per stage in flight), and ``max_seqs`` still caps its running sequences: one
    simulated step is one round of the pipeline (:func:`_step_cost`), with ``pp`` × ``token_budget`` tokens.

    ``need``: a replica whose KV cache holds fewer tokens than that (``capacity_tokens``) comes without its step
    tables (``cost`` None), for a caller that drops it.

    ``max_seqs`` None: the engine's own cap, :func:`default_seqs`; ``token_budget`` None: its own step budget on
    the chip (:func:`aicalc.catalog.profiles.token_budget`: vLLM V1 8192 on the large chips, 2048 on the others;
    8192 where the profile sets none)."""
    from aicalc.api import inputs
    from aicalc.api.catalog import resident_weights
    from aicalc.api.roofline import cost_setup
    from aicalc.api.serving import check_pipeline, kv_memory, stage_share
    from aicalc.core.geometry import cache_bytes_per_token_layer, check_parallel
    from aicalc.errors import ParameterError

    tp, pp = layout.tp, layout.pp
    if cs is None:
        cs = cost_setup(model, layout.chip, layout.dtype, layout.kv_dtype, tp_needs_link=tp > 1, engine=engine)
    arch = cs.model.arch
    ep, adp = layout.ep, layout.attention_dp
    check_parallel(arch, tp, ep, adp)
    check_pipeline(cs, pp)
    weights = resident_weights(cs.model, layout.dtype, tp, ep=ep, attention_dp=adp, pp=pp)
    eng_opts = cs.engine_options
    budget = kv_memory(cs.chip, eng_opts, arch, weights, tp, pp, adp, utilization).budget
    if max_seqs is None:
        max_seqs = default_seqs(cs, tp, adp, budget / stage_share(arch, pp))
    if token_budget is None:
        from aicalc.catalog.profiles import token_budget as engine_budget

        token_budget = engine_budget(eng_opts, cs.chip)
    for name, v, most in (("max_seqs", max_seqs, MAX_SEQS), ("token_budget", token_budget, MAX_TOKENS)):
        if inputs.single(name, v, whole=True) > most:
            raise ParameterError(name, v, f"is above the cap of {most:,}")
    block = 16
    # with attention DP each group's chips hold the cache of its own sequences: the replica's blocks are the groups';
    # with a pipeline each device holds its stage's layers of a block (the fullest stage's bound the replica's)
    block_bytes = block * float(cache_bytes_per_token_layer(arch, cs.kv_dtype, tp // adp)) * arch.attention_layers \
        * stage_share(arch, pp)
    if arch.linear_layers or arch.mamba_layers or arch.compressed is not None:
        # every running sequence's fixed bytes (a hybrid's recurrent state, DeepSeek-V4's windows) off the budget
        from aicalc.core.kv_cache import kv_shape

        budget -= max_seqs / adp * kv_shape(arch, cs.kv_dtype, tp // adp).fixed_bytes() * stage_share(arch, pp)
    kv_blocks = int(max(budget, 0.0) // block_bytes) * adp
    if need is not None:  # the caller drops a replica without room: its step tables would go unused
        rep = Replica(layout, cs, None, kv_blocks, block, int(max_seqs), int(token_budget) * pp, "chunked")
        if rep.capacity_tokens < need:
            return rep._replace(policy=policy_of(engine, policy), reserve=eng_opts.get("kv_reserve", "live"))
    cost = _step_cost(cs, tp, int(max_seqs), int(token_budget), int(longest), ep, adp, pp)
    return Replica(layout, cs, cost, kv_blocks, block, int(max_seqs), int(token_budget) * pp, policy_of(engine, policy),
                   eng_opts.get("kv_reserve", "live"))


def default_seqs(cs, tp: int, adp: int, budget: float) -> int:
    """The sequences one replica's scheduler(s) run at once by default: the engine's cap per scheduler
    (:func:`aicalc.catalog.profiles.max_running` on the chip, with the pool of one attention group's ``budget``
    bytes per device over one token's bytes and the model's context length: vLLM V1 1024 on a chip of 70 GiB or
    more that is no A100, else 256; vLLM V0 256; SGLang its pool-derived max_running_requests; TensorRT-LLM 2048)
    times the replica's ``adp`` attention groups, at most :data:`MAX_SEQS`; :data:`DEFAULT_SEQS` for an engine
    without a cap of its own."""
    from aicalc.catalog.profiles import max_running
    from aicalc.core.kv_cache import kv_shape

    arch = cs.model.arch
    shape = kv_shape(arch, cs.kv_dtype, tp // adp)
    pool = budget / shape.bytes_per_token if budget > 0 and shape.bytes_per_token > 0 else 0.0
    cap = max_running(cs.engine_options, cs.chip, pool_tokens=pool, context=arch.max_context,
                      model_type=arch.family, schedulers=adp)
    return min(cap * adp, MAX_SEQS) if cap else DEFAULT_SEQS


def _rate_text(rate):
    import numpy as np

    a = np.asarray(rate, dtype=object).reshape(-1) if not isinstance(rate, str) else [rate]
    return a[0] if len(a) == 1 else f"{a[0]}…"


def simulate(model, chip="h100-sxm", rate=None, *, requests=None, prompt=1024, gen=256, num_requests: int = 1000,
             tp: int | None = None, chips: int | None = None, dtype: str = "release", kv_dtype: str = "bf16", engine=None,
             max_ttft=None, max_tpot=None, max_seqs: int | None = None, token_budget: int | None = None,
             utilization=None,
             seed: int = 0, policy: str | None = None, ep: int = 1, attention_dp: int = 1, pp: int = 1,
             efficiency=None) -> Traffic:
    """Requests arriving at ``rate`` per second (Poisson; an array sweeps it) over the whole deployment, spread
    evenly over its replicas, with ``prompt`` / ``gen`` tokens each, or a trace (``requests``: a CSV/JSONL path,
    or a dict of ``prompt``, ``gen`` and optional ``arrival_s`` lists; a trace with its own arrival times takes
    no ``rate``, a rate given with one is refused rather than ignored). ``rate`` defaults to 1 request/s. One row
    per rate. ``policy``: the scheduler's, ``"chunked"`` or ``"prefill-first"`` (:mod:`aicalc.core.simulate`;
    default: the engine's). ``ep`` / ``attention_dp``: expert and attention-data parallelism inside each replica
    (a replica's attention groups hold their own sequences' cache and step together). ``pp``: pipeline stages per
    replica of ``tp·pp`` chips (vLLM ``--pipeline-parallel-size``, SGLang ``--pp-size``), run with ``pp``
    micro-batches in flight (:func:`replica`, :func:`_step_cost`). ``efficiency``: factor overrides, as
    :func:`aicalc.api.roofline.roofline` takes them. ``max_seqs``: sequences one replica runs at once (default:
    the engine's cap, :func:`default_seqs`); ``token_budget``: tokens one step batches (default: the engine's on
    the chip, :func:`replica`).

    Bounded before any work (docs/robustness.md): at most :data:`MAX_REQUESTS` requests and
    :data:`MAX_SIMULATED` over all rates; every request's prompt + gen within one replica's KV cache (a bigger
    one would be preempted and recomputed forever); arrivals spanning at most :data:`MAX_ARRIVAL_S` of one
    replica's time; and the scheduler's work over all rates within :data:`MAX_WORK` (else a SimulationError)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import node_split
    from aicalc.api.roofline import cost_setup
    from aicalc.api.serving import check_pipeline
    from aicalc.core import simulate as sim
    from aicalc.core.geometry import check_parallel
    from aicalc.errors import ParameterError

    tp, chips = node_split(chip, tp, chips)
    tp = inputs.whole("tp", tp)
    pp = inputs.whole("pp", pp)
    chips = inputs.whole("chips", chips) if chips is not None else tp * pp
    if chips < 1 or chips % (tp * pp):
        raise ParameterError("chips", chips, f"is not a positive multiple of tp={tp}" + (f" × pp={pp}" if pp > 1
                                                                                        else ""))
    replicas = chips // (tp * pp)
    cs = cost_setup(model, chip, dtype, kv_dtype, tp_needs_link=tp > 1, engine=engine, efficiency=efficiency)
    ep, attention_dp = inputs.whole("ep", ep), inputs.whole("attention_dp", attention_dp)
    check_parallel(cs.model.arch, tp, ep, attention_dp)
    check_pipeline(cs, pp)
    if requests is not None:
        p_list, g_list, a_list, lines = _requests(requests)
        n = len(p_list)
    else:
        n = inputs.whole("num_requests", num_requests)
        if n > MAX_REQUESTS:
            raise ParameterError("num_requests", n, f"is more than {MAX_REQUESTS:,}")
        p0 = inputs.whole("prompt", prompt)
        g0 = inputs.whole("gen", gen)
        p_list, g_list, a_list, lines = [p0] * n, [g0] * n, None, None
    if a_list is not None and rate is not None:
        raise ParameterError("rate", _rate_text(rate), "cannot be used with a trace that gives its own arrival times "
                             "({requests})")
    rates = inputs.positive("rate", 1.0 if rate is None else rate).reshape(-1) if a_list is None \
        else np.asarray([np.nan])
    if rates.size * n > MAX_SIMULATED:  # bounded before any work: each simulated request costs time
        raise ParameterError("rate", f"{rates.min():g}…{rates.max():g}", f"sweeps {rates.size:,} rates: with "
                             f"{n:,} requests each that simulates {rates.size * n:,} requests; the limit is "
                             f"{MAX_SIMULATED:,} per call")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError("seed", inputs._safe(seed), "must be a whole number >= 0")
    max_ttft = inputs.seconds("max_ttft", max_ttft) if max_ttft is not None else np.inf
    max_tpot = inputs.seconds("max_tpot", max_tpot) if max_tpot is not None else np.inf
    rep = replica(cs.model, Layout(cs.chip.id, tp, dtype, kv_dtype, ep, attention_dp, pp), engine=engine, policy=policy,
                  max_seqs=max_seqs, token_budget=token_budget, utilization=utilization,
                  longest=max(p + g for p, g in zip(p_list, g_list, strict=True)), cs=cs)
    kv_blocks, cost = rep.kv_blocks, rep.cost
    _check_fit(p_list, g_list, lines, requests, rep.capacity_tokens, cs.chip.id)
    if a_list is not None:  # the origin of time is arbitrary; one replica sees the trace slowed by `replicas`
        first, last = min(a_list), max(a_list)
        if (last - first) * replicas > MAX_ARRIVAL_S:
            raise ParameterError("requests", _shown(requests), f"spans {last - first:.6g} s of arrivals; spread "
                                 f"over {_replicas(replicas)}, one replica's share spans "
                                 f"{(last - first) * replicas:.3g} s, beyond the {MAX_ARRIVAL_S:.0e} s a simulation "
                                 "resolves")
        a_list = [t - first for t in a_list]
    elif n * replicas / float(rates.min()) > MAX_ARRIVAL_S:
        lam = float(rates.min())
        raise ParameterError("rate", lam, f"spreads {n:,} requests over about {n * replicas / lam:.3g} s of one "
                             f"replica's time ({_replicas(replicas)}), beyond the {MAX_ARRIVAL_S:.0e} s a "
                             "simulation resolves: raise the rate or simulate fewer requests")
    rows = {k: [] for k in ("rate", "requests", "concurrency", "ttft_s", "tpot_s", "p50_ttft_s", "p90_ttft_s", "p99_ttft_s", "p50_tpot_s", "p90_tpot_s",
                            "p99_tpot_s", "output_tokens_per_s", "requests_per_s", "goodput_requests_per_s",
                            "preemptions", "makespan_s")}
    rng = np.random.default_rng(seed)
    work_left = MAX_WORK
    P, G = np.asarray(p_list), np.asarray(g_list)
    for lam in rates:
        if a_list is None:  # Poisson arrivals: exponential gaps at the per-replica rate
            arr = np.cumsum(rng.exponential(replicas / lam, size=len(P)))
        else:
            arr = np.asarray(a_list, dtype=np.float64)
            order = np.argsort(arr, kind="stable")
            arr, P, G = arr[order] * replicas, P[order], G[order]  # one replica sees 1/replicas of the stream
        try:
            ttft, tpot, finish, pre, work = rep.run(arr.tolist(), P.tolist(), G.tolist(), max_work=work_left)
        except sim.SimulationError as e:
            if e.reason != "work":
                raise
            what = f"at rate {lam:g}/s" if a_list is None else "of the trace"
            raise sim.SimulationError(
                f"the simulation {what} needs more than the {MAX_WORK:,} units of scheduler work one call may take"
                f"{', all rates together' if rates.size > 1 else ''} (stopped after {e.steps:,} steps and "
                f"{e.preemptions:,} preemptions, a preemption counting {sim.PREEMPTION_WORK}): simulate fewer or "
                "shorter requests", "work", e.steps, e.preemptions) from None
        work_left -= work
        ttft, tpot = np.asarray(ttft), np.asarray(tpot)
        span = float(np.nanmax(finish) - arr[0])
        if not span > 0:  # steps shorter than the clock resolves at these times: no rate can be measured
            raise sim.SimulationError(f"the simulated steps are too short to measure at arrival times of "
                                      f"{arr[0]:.3g} s", "steps")
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
    for k, v in (("tp", tp), ("pp", pp), ("ep", ep), ("attention_dp", attention_dp)):
        rows[k] = [v] * len(rows["rate"])
    return Traffic(rows, list(cs.warnings), setup=cs, replicas=replicas, chips=chips, kv_blocks=kv_blocks,
                   cost=cost, policy=rep.policy, pp=pp, max_seqs=rep.max_seqs, token_budget=rep.token_budget // pp)


def _replicas(n: int) -> str:
    return f"{n:,} replica{'s' if n != 1 else ''}"


def _shown(requests) -> str:
    return "(a dict)" if isinstance(requests, dict) else str(requests)[:159] + ("…" if len(str(requests)) > 159
                                                                                else "")


def _requests(requests):
    """(prompt, gen, arrival or None, line of each request or None) of a trace: a file (see
    :func:`read_requests`) or a dict of ``prompt``, ``gen`` and optional ``arrival_s`` sequences, held to the
    same bounds."""
    import os

    from aicalc.errors import ParameterError

    if isinstance(requests, (str, os.PathLike)):
        return _read_trace(requests)
    if not isinstance(requests, dict):
        raise ParameterError("requests", type(requests).__name__, "is neither a file path nor a dict of "
                             "'prompt', 'gen' and optional 'arrival_s' lists")
    columns = {}
    for key in ("prompt", "gen", "arrival_s"):
        if key not in requests:
            if key == "arrival_s":
                continue
            raise ParameterError("requests", "(a dict)", f"has no '{key}'")
        try:
            values = list(requests[key])
        except TypeError:
            raise ParameterError("requests", "(a dict)", f"'{key}' is not a list") from None
        if len(values) > MAX_REQUESTS:
            raise ParameterError("requests", "(a dict)", f"holds more than {MAX_REQUESTS:,} requests")
        columns[key] = values
    n = len(columns["prompt"])
    if n == 0:
        raise ParameterError("requests", "(a dict)", "holds no request")
    if any(len(v) != n for v in columns.values()):
        raise ParameterError("requests", "(a dict)", "has lists of different lengths: "
                             + ", ".join(f"{k} {len(v):,}" for k, v in columns.items()))
    prompt, gen, arrival = [], [], []
    for i in range(n):
        try:
            prompt.append(_whole(columns["prompt"][i], "prompt"))
            gen.append(_whole(columns["gen"][i], "gen"))
            if "arrival_s" in columns:
                arrival.append(_time(columns["arrival_s"][i]))
        except ValueError as e:
            raise ParameterError("requests", "(a dict)", f"request {i + 1}: {e}") from None
    return prompt, gen, (arrival if "arrival_s" in columns else None), None


def _check_fit(prompt, gen, lines, requests, capacity: int, chip: str) -> None:
    """Every request's prompt + gen within the KV cache of one replica less admission's watermark (``capacity``
    tokens): a bigger one would be preempted and recomputed forever, as no other sequence's blocks can make room
    for it."""
    from aicalc.errors import ParameterError

    too_big = [i for i, (p, g) in enumerate(zip(prompt, gen, strict=True)) if p + g > capacity]
    if not too_big:
        return
    i = too_big[0]
    p, g = prompt[i], gen[i]
    fits = (f"prompt + gen can be at most {capacity:,} tokens" if capacity else
            "the weights leave no memory for it")
    where = f"the {capacity:,}-token KV cache of one replica on {chip} (less the 1 % kept free at admission)"
    if requests is None:  # --prompt and --gen
        if p >= capacity:
            raise ParameterError("prompt", p, f"with {{gen={g}}} does not fit {where}: {fits}")
        raise ParameterError("gen", g, f"with {{prompt={p}}} makes a request of {p + g:,} tokens, more than "
                             f"{where} holds: {fits}")
    more = f" (and {len(too_big) - 1:,} more requests)" if len(too_big) > 1 else ""
    at = f"line {lines[i]}" if lines is not None else f"request {i + 1}"
    raise ParameterError("requests", _shown(requests), f"{at}: a request of {p:,} prompt + {g:,} gen tokens does "
                         f"not fit {where}{more}: {fits}")


def _percentile(x, q: float) -> float:
    """numpy's default (linear) percentile of the finite values, NaN when there are none; by a sort, since
    ``np.percentile`` imports ``numpy.ma`` (tens of milliseconds on a one-off query)."""
    import numpy as np

    a = np.asarray(x, dtype=np.float64).reshape(-1)
    a = np.sort(a[~np.isnan(a)])
    if not a.size:
        return float("nan")
    i = q / 100.0 * (a.size - 1)
    lo = int(np.floor(i))
    hi = min(lo + 1, a.size - 1)
    return float(a[lo] + (a[hi] - a[lo]) * (i - lo)) if a[hi] != a[lo] else float(a[lo])


_TABLES: dict = {}  # (id of a CostSetup, the tables' arguments) → (that CostSetup, its tables)


def _step_tables(cs, tp: int, max_seqs: int, token_budget: int, longest: int, ep: int, adp: int):
    """(context bins, decode step times by batch and bin, prefill tokens, prefill pass times, a prefill token's
    marginal cost) of one pipeline stage's pass, as :func:`_step_cost` prices them: worked out once for the
    replicas that differ only in their pipeline (a fleet search's TP group over 1, 2 and 4 domains); the arrays
    are only read."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.core import latency

    key = (id(cs), tp, max_seqs, token_budget, longest, ep, adp)
    held = _TABLES.get(key)
    if held is not None and held[0] is cs:
        return held[1]
    eff = cs.efficiency
    bins = np.array(inputs.distinct(np.ceil(np.geomspace(16, max(longest, 32), 24))))
    B, C = np.meshgrid(np.arange(1, max_seqs + 1, dtype=np.float64), bins, indexing="ij")
    par, D = latency.Par(float(ep), float(adp)), float(adp)
    dec = latency.phase(cs.shape, cs.roofs, cs.formats, eff, B.ravel() / D, 1.0, C.ravel(), tp / D,
                        par=par).t_est.reshape(B.shape)
    dec = np.vstack([np.zeros((1, bins.size)), dec])
    tokens = np.array(inputs.distinct(np.ceil(np.geomspace(1, max(token_budget, longest), 40))))
    t = latency.phase(cs.shape, cs.roofs, cs.formats, eff, 1.0 / D, tokens, 0.0, tp / D, logits_tokens=1.0,
                      par=par).t_est
    half = np.searchsorted(tokens, token_budget / 2.0)
    full = np.searchsorted(tokens, token_budget)
    per_token = float((t[full] - t[half]) / (tokens[full] - tokens[half]))
    for a in (bins, dec, tokens, t):
        a.flags.writeable = False  # shared by the replicas that ask for the same tables
    if len(_TABLES) >= 16:
        _TABLES.clear()
    _TABLES[key] = (cs, (bins, dec, tokens, t, per_token))
    return bins, dec, tokens, t, per_token


def _step_cost(cs, tp: int, max_seqs: int, token_budget: int, longest: int, ep: int = 1, adp: int = 1, pp: int = 1):
    """Step-time tables from the cost model: decode at every batch size over geometric context bins, and the
    marginal and fixed cost of prefill tokens in a batched pass. With attention DP (``adp`` groups) a step's
    sequences and prompt tokens are spread over the groups, which step together through the shared experts
    (``ep``-way expert parallelism).

    With ``pp`` stages a step is one round of the pipeline: the engine keeps ``pp`` micro-batches in flight
    (vLLM V1 runs a batch queue of ``pipeline_parallel_size`` scheduled batches; SGLang's PP scheduler one
    micro-batch per stage; TensorRT-LLM's in-flight batching is taken to run its PP micro-batches likewise,
    not checked against its source here), a
    sequence sits in one of them, and every one of them passes all the stages in turn, so each running sequence
    advances a token per round and the round lasts as long as its heaviest micro-batch's pass
    (:func:`aicalc.api.serving.pipelined`: ``pp`` × the fullest stage's time, plus the sends between stages).
    Decodes spread evenly, ``ceil(b/pp)`` to a micro-batch (as serve prices them); a micro-batch holds at most the
    engine's ``token_budget`` of prefill tokens, so a round's first ``token_budget`` prefill tokens lengthen it
    at their marginal cost through every stage and the rest ride in the other micro-batches
    (``prefill_charged_tokens``), and a prefill-only round lasts one pass over ``min(tokens, token_budget)``.
    A lone request thus sees the sum of the stage times and the sends (TTFT and TPOT), and a full replica
    yields ``pp`` micro-batches' tokens per round. A prompt longer than the budget spreads its chunks over the
    round's micro-batches (SGLang's PP docs, "Pipeline Parallelism for Long Context": different chunks of one
    request run on different stages at once); the fill and drain inside a round are not modelled."""
    import numpy as np

    from aicalc.api.serving import pipelined
    from aicalc.core.simulate import StepCost

    eff = cs.efficiency
    bins, dec, tokens, t, per_token = _step_tables(cs, tp, max_seqs, token_budget, longest, ep, adp)
    if pp == 1:
        return StepCost(dec.tolist(), bins.tolist(), per_token, [0.0, *tokens.tolist()], [0.0, *t.tolist()])
    mb = np.ceil(np.arange(max_seqs + 1) / pp)  # the decodes of a round's heaviest micro-batch
    dec_pp = pipelined(cs, eff, pp, tp, dec[mb.astype(np.int64)], mb[:, None])
    dec_pp[0] = 0.0
    # a micro-batch's prefill tokens (at most the budget) through every stage, and a token's marginal cost there
    x = np.array([*tokens[tokens < token_budget].tolist(), float(token_budget), float(max(pp * token_budget, longest))])
    one = np.minimum(x, token_budget)
    pre = pipelined(cs, eff, pp, tp, np.interp(one, tokens, t), one)
    marginal = float(pipelined(cs, eff, pp, tp, per_token, 1.0) - pipelined(cs, eff, pp, tp, 0.0, 0.0))
    return StepCost(dec_pp.tolist(), bins.tolist(), marginal, [0.0, *x.tolist()], [0.0, *pre.tolist()],
                    float(token_budget))
