"""The series of known inference servers, in the harness's vocabulary (docs/telemetry.md).

A server is recognised by its series' names (vLLM's all start `vllm:`). Each concept maps
to the first family of its list the server exposes, so one table covers a server's renames
across versions. Families are named as prometheus_client's parser names them: a counter
without its `_total`, a histogram without `_bucket`/`_sum`/`_count`.

Kinds:
    gauge      a level (requests waiting); summed over label sets, or averaged (`mean`)
               where it is a fraction (KV-cache usage per engine)
    counter    cumulative; the window's delta and rate
    histogram  per-request seconds; the window's delta of buckets (a summary, which has
               none, gives its count and mean only)
    sum_us     a cumulative microsecond total (Triton's durations), read with a count
               counter as a mean per request
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Concept:
    name: str
    kind: str  # gauge | counter | histogram | sum_us
    description: str
    mean: bool = False  # gauges: average over label sets instead of summing them


CONCEPTS = {c.name: c for c in (
    Concept("queue_depth", "gauge", "requests waiting in the server's queue"),
    Concept("running", "gauge", "requests being processed"),
    Concept("kv_cache_usage", "gauge", "KV-cache blocks in use, 0 to 1", mean=True),
    Concept("prefix_cache_hit_rate", "gauge", "the server's own prefix-cache hit rate, 0 to 1", mean=True),
    Concept("prefix_cache_queries", "counter", "prompt tokens looked up in the prefix cache"),
    Concept("prefix_cache_hits", "counter", "of them, tokens found"),
    Concept("prompt_tokens", "counter", "prompt tokens processed"),
    Concept("cached_prompt_tokens", "counter", "prompt tokens served from the cache"),
    Concept("generation_tokens", "counter", "tokens generated"),
    Concept("requests_succeeded", "counter", "requests finished"),
    Concept("requests_failed", "counter", "requests failed"),
    Concept("preemptions", "counter", "requests preempted (KV cache full)"),
    Concept("server_queue_time", "histogram", "per request: waiting before its first schedule"),
    Concept("server_prefill_time", "histogram", "per request: prefill"),
    Concept("server_decode_time", "histogram", "per request: decode"),
    Concept("server_ttft", "histogram", "per request: the server's time to first token"),
    Concept("server_itl", "histogram", "per token: the server's inter-token latency"),
    Concept("server_e2e", "histogram", "per request: the server's end-to-end latency"),
    Concept("server_queue_time_total", "sum_us", "queue time, cumulative microseconds"),
    Concept("server_compute_time_total", "sum_us", "compute time, cumulative microseconds"),
)}


@dataclass(frozen=True)
class Server:
    name: str
    series: dict[str, tuple[str, ...]]  # concept -> candidate family names, first found wins
    count_for_sums: str | None = None  # the counter a sum_us concept is divided by


SERVERS = (
    Server("vllm", {
        "queue_depth": ("vllm:num_requests_waiting",),
        "running": ("vllm:num_requests_running",),
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # a fraction despite "perc"
        "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
        "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
        "prompt_tokens": ("vllm:prompt_tokens",),
        "cached_prompt_tokens": ("vllm:prompt_tokens_cached",),
        "generation_tokens": ("vllm:generation_tokens",),
        "requests_succeeded": ("vllm:request_success",),
        "preemptions": ("vllm:num_preemptions",),
        "server_queue_time": ("vllm:request_queue_time_seconds",),
        "server_prefill_time": ("vllm:request_prefill_time_seconds",),
        "server_decode_time": ("vllm:request_decode_time_seconds",),
        "server_ttft": ("vllm:time_to_first_token_seconds",),
        "server_itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "server_e2e": ("vllm:e2e_request_latency_seconds",),
    }),
    Server("sglang", {
        "queue_depth": ("sglang:num_queue_reqs",),
        "running": ("sglang:num_running_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),
        "prefix_cache_hit_rate": ("sglang:cache_hit_rate",),
        "prompt_tokens": ("sglang:prompt_tokens",),
        "cached_prompt_tokens": ("sglang:cached_tokens",),
        "generation_tokens": ("sglang:generation_tokens",),
        "requests_succeeded": ("sglang:num_requests",),  # every finished request
        "preemptions": ("sglang:num_retracted_requests",),  # SGLang calls them retractions
        "server_queue_time": ("sglang:queue_time_seconds",),
        "server_ttft": ("sglang:time_to_first_token_seconds",),
        "server_itl": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "server_e2e": ("sglang:e2e_request_latency_seconds",),
    }),
    Server("tgi", {
        "queue_depth": ("tgi_queue_size",),
        "running": ("tgi_batch_current_size",),
        "requests_succeeded": ("tgi_request_success",),
        "requests_failed": ("tgi_request_failure",),
        "server_queue_time": ("tgi_request_queue_duration",),
        "server_e2e": ("tgi_request_duration",),
        "server_itl": ("tgi_request_mean_time_per_token_duration",),
    }),
    Server("llama.cpp", {
        "queue_depth": ("llamacpp:requests_deferred",),
        "running": ("llamacpp:requests_processing",),
        "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
        "prompt_tokens": ("llamacpp:prompt_tokens",),
        "cached_prompt_tokens": ("llamacpp:prompt_tokens_cached",),
        "generation_tokens": ("llamacpp:tokens_predicted",),
    }),
    Server("triton", {
        "queue_depth": ("nv_inference_pending_request_count",),
        "requests_succeeded": ("nv_inference_request_success",),
        "requests_failed": ("nv_inference_request_failure",),
        "server_queue_time_total": ("nv_inference_queue_duration_us",),
        "server_compute_time_total": ("nv_inference_compute_infer_duration_us",),
    }, count_for_sums="nv_inference_request_success"),
    Server("mlserver", {
        "requests_succeeded": ("model_infer_request_success",),
        "requests_failed": ("model_infer_request_failure",),
        "server_e2e": ("model_infer_request_duration",),  # a summary: count and mean, no buckets
    }),
)


def _base(family: str) -> str:
    return family[:-6] if family.endswith("_total") else family


def detect(families: set[str]) -> Server | None:
    """The known server whose series these are (None: not one we know)."""
    names = {_base(f) for f in families}
    best, score = None, 0
    for server in SERVERS:
        found = sum(1 for cands in server.series.values() if any(c in names for c in cands))
        if found > score:
            best, score = server, found
    return best


def resolve(server: Server, families: set[str]) -> dict[str, str]:
    """concept -> the family this server exposes for it, among those scraped."""
    by_base = {_base(f): f for f in families}
    out: dict[str, str] = {}
    for concept, cands in server.series.items():
        for cand in cands:
            if cand in by_base:
                out[concept] = by_base[cand]
                break
    return out
