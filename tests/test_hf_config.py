"""Importer defaults that follow transformers' configuration classes (read from their __post_init__)."""

import pytest

from aicalc.catalog.hf_config import arch_from_config

BASE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100}


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3", "qwen2_moe"])
def test_qwen_sliding_window_only_when_enabled_and_from_max_window_layers(model_type):
    # Qwen2Config: sliding_window applies only with use_sliding_window, on layers i >= max_window_layers
    off = arch_from_config({"model_type": model_type, **BASE, "sliding_window": 32})
    assert off.sliding_window is None and off.sliding_layers == 0
    on = arch_from_config({"model_type": model_type, **BASE, "sliding_window": 32, "use_sliding_window": True,
                           "max_window_layers": 2})
    assert on.sliding_window == 32
    assert on.layer_types == ("full_attention",) * 2 + ("sliding_attention",) * 2
