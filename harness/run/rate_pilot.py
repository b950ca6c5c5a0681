"""The Offline pilot a rate search starts from (a `target_qps=auto` sweep, a capacity
search), and how a searched rate is written: apart from both, which use them."""

from __future__ import annotations

from harness.config.run_config import RunConfig

#: an Offline pilot issues the base config's min_query_count, within these bounds (256
#: when it sets none): a Server config's query count is sized for its tries already,
#: and an LLM's 32 requests are minutes, where a tensor model's 2,048 samples are a second
PILOT_SAMPLES = (16, 256, 2048)


def pilot_values(base: RunConfig) -> dict[str, str]:
    """An Offline pass of the same config: the throughput that a rate search starts from."""
    low, default, high = PILOT_SAMPLES
    count = min(max(base.min_query_count or default, low), high)
    return {"scenario": "Offline", "min_query_count": str(count), "min_duration_s": "0"}


def rate_text(rate: float) -> str:
    return f"{rate:.4g}"
