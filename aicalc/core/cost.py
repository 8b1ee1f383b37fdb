"""Cost and energy from time on chips: price per chip-hour and power per chip.

Cost = chips × hours × price per chip-hour (on-demand, from the chip preset or a given ``price``).
Energy = chips × TDP × power fraction × PUE × time: a chip under sustained load draws a fraction
of its TDP (default 0.8, between the 0.7–0.9 that nvidia-smi logs of training and batch-inference
jobs typically show), and the data centre multiplies IT power by its PUE (default 1.2, a modern
hyperscale figure; the Uptime Institute's global average is about 1.5). Both are inputs, shown in
every result, and overridable.
"""

from aicalc.tuples import Named

J_PER_KWH = 3.6e6


class PowerModel(Named):
    """Facility power under load: the fraction of TDP chips draw and the data centre's PUE."""

    power_fraction: float = 0.8
    pue: float = 1.2

    def watts(self, tdp_w, chips):
        """Facility watts drawn by ``chips`` chips of ``tdp_w`` each under load."""
        return chips * tdp_w * self.power_fraction * self.pue


def usd(chips, seconds, price_per_chip_hour):
    return chips * seconds / 3600.0 * price_per_chip_hour


def kwh(chips, seconds, tdp_w, power: PowerModel = PowerModel()):
    return power.watts(tdp_w, chips) * seconds / J_PER_KWH


def usd_per_million_tokens(chips, tokens_per_s, price_per_chip_hour):
    """Deployment cost of 10⁶ tokens at a sustained rate of ``tokens_per_s`` over ``chips`` chips."""
    return chips * price_per_chip_hour / 3600.0 / tokens_per_s * 1e6


def joules_per_token(chips, tokens_per_s, tdp_w, power: PowerModel = PowerModel()):
    return power.watts(tdp_w, chips) / tokens_per_s


def request_seconds(ttft_s, tpot_s, gen_tokens, concurrency):
    """Chip-time one request holds when ``concurrency`` requests share the deployment: (TTFT + gen·TPOT) / concurrency."""
    return (ttft_s + gen_tokens * tpot_s) / concurrency


def lifetime_split(training_usd, annual_inference_usd, years=1.0):
    """Share of lifetime cost spent on inference: I·y / (T + I·y)."""
    total = training_usd + annual_inference_usd * years
    return annual_inference_usd * years / total


TOKENS_PER_PARAM = 20.0  # compute-optimal training tokens per parameter (Hoffmann et al. 2022, "Chinchilla")


def chinchilla_tokens(params):
    """Compute-optimal training tokens for a model of ``params`` parameters: 20·N (Hoffmann et al. 2022)."""
    return TOKENS_PER_PARAM * params


def annual_usd(usd_per_request, requests_per_day):
    """A year of serving at a steady ``requests_per_day``."""
    return usd_per_request * requests_per_day * 365.0
