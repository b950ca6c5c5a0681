"""RunConfig -> mlperf_loadgen.TestSettings. The only place that knows LoadGen's field names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.config.run_config import RunConfig
from harness.errors import ConfigError
from harness.results.loadgen_log import INTERACTIVE, loadgen_scenario

# RunConfig key -> (TestSettings attribute, multiplier to LoadGen's unit)
_DIRECT: dict[str, tuple[str, float | None]] = {
    "min_duration_s": ("min_duration_ms", 1e3),
    "max_duration_s": ("max_duration_ms", 1e3),
    "min_query_count": ("min_query_count", None),
    "max_query_count": ("max_query_count", None),
    "performance_sample_count": ("performance_sample_count_override", None),
    "target_qps": ("server_target_qps", None),
    "target_latency_ms": ("server_target_latency_ns", 1e6),
    "target_latency_percentile": ("server_target_latency_percentile", None),
    "server_coalesce_queries": ("server_coalesce_queries", None),
    "server_max_async_queries": ("server_max_async_queries", None),
    "server_num_issue_query_threads": ("server_num_issue_query_threads", None),
    "find_peak_step_size": ("server_find_peak_qps_boundary_step_size", None),
    "offline_expected_qps": ("offline_expected_qps", None),
    "single_stream_expected_latency_ms": ("single_stream_expected_latency_ns", 1e6),
    "single_stream_target_latency_percentile": ("single_stream_target_latency_percentile", None),
    "multi_stream_samples_per_query": ("multi_stream_samples_per_query", None),
    "multi_stream_expected_latency_ms": ("multi_stream_expected_latency_ns", 1e6),
    "multi_stream_target_latency_percentile": ("multi_stream_target_latency_percentile", None),
    "use_token_latencies": ("use_token_latencies", None),
    "ttft_latency_ms": ("ttft_latency", 1e6),
    "tpot_latency_ms": ("tpot_latency", 1e6),
    "qsl_rng_seed": ("qsl_rng_seed", None),
    "sample_index_rng_seed": ("sample_index_rng_seed", None),
    "schedule_rng_seed": ("schedule_rng_seed", None),
    "accuracy_log_rng_seed": ("accuracy_log_rng_seed", None),
    "accuracy_log_probability": ("accuracy_log_probability", None),
    "accuracy_log_sampling_target": ("accuracy_log_sampling_target", None),
    "performance_issue_unique": ("performance_issue_unique", None),
    "performance_issue_same": ("performance_issue_same", None),
    "performance_issue_same_index": ("performance_issue_same_index", None),
    "sample_concatenate_permutation": ("sample_concatenate_permutation", None),
}
_FROMCONFIG_CODES = {-2: "file not found", -22: "parse error (see mlperf_log_detail.txt)"}

# The keys LoadGen's FromConfig looks up (loadgen/test_settings_internal.cc, 6.0.17); any
# other key it ignores without a word, so a typo there silently keeps the default. Plus
# target_duration, which LoadGen's own compiled-in mlperf.conf sets and FromConfig ignores.
CONF_KEYS = frozenset("""
    target_duration
    accuracy_log_probability accuracy_log_rng_seed accuracy_log_sampling_target accuracy_sample_count_override
    coalesce_queries infer_token_latencies max_async_queries max_duration max_query_count min_duration
    min_query_count mode performance_issue_same performance_issue_same_index performance_issue_unique
    performance_sample_count_override print_timestamps qsl_rng_seed sample_concatenate_permutation
    sample_index_rng_seed samples_per_query schedule_rng_seed target_latency target_latency_percentile target_qps
    test05 test05_qsl_rng_seed test05_sample_index_rng_seed test05_schedule_rng_seed token_latency_scaling_factor
    tpot_latency ttft_latency use_token_latencies
""".split())
CONF_SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline", "*")


def _conf_lines(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, words) of each line of a conf text that is neither blank nor a comment."""
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if words and not words[0].startswith("#"):
            yield n, words


def check_conf_file(key: str, path: Path) -> None:
    """Every line of an mlperf.conf/user.conf names a key and a scenario LoadGen knows, in
    its `model.scenario.key = value` form; LoadGen itself skips anything else silently."""
    import difflib

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{key}: cannot read {path}: {getattr(e, 'strerror', None) or e}") from e
    for n, words in _conf_lines(text):
        where = f"{key} {path}:{n}"
        name = words[0]
        if len(words) < 3 or words[1] != "=" or name.count(".") < 2:
            raise ConfigError(f"{where}: expected `model.scenario.key = value` (e.g. *.Offline.min_duration = 600000)")
        model, scenario, setting = name.rsplit(".", 2)  # a model name may hold dots
        if scenario == INTERACTIVE:
            raise ConfigError(f"{where}: LoadGen has no Interactive scenario; it reads Interactive's settings as "
                              f"`{model}-interactive.Server.{setting}` (the key --scenario Interactive uses)")
        if scenario not in CONF_SCENARIOS:
            hint = difflib.get_close_matches(scenario, CONF_SCENARIOS, n=1)
            raise ConfigError(f"{where}: unknown scenario {scenario!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                              + f"; scenarios: {', '.join(CONF_SCENARIOS)}")
        if setting not in CONF_KEYS:
            hint = difflib.get_close_matches(setting, sorted(CONF_KEYS), n=1)
            raise ConfigError(f"{where}: LoadGen has no setting {setting!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                              + ": it would be ignored")


def uses_official_conf(config: RunConfig) -> bool:
    """Whether LoadGen loads its compiled-in mlperf.conf: with any conf file (it loads its
    own first), else by `official_conf`, which defaults to on when a benchmark is named."""
    if config.mlperf_conf or config.user_conf:
        return True
    return config.official_conf if config.official_conf is not None else config.benchmark != "*"


def merged_conf_text(config: RunConfig) -> str | None:
    """mlperf_conf then user_conf in one text: LoadGen accepts one FromConfig per process.
    With neither, but the official conf wanted, an empty user.conf: loading it is how
    LoadGen applies its compiled-in mlperf.conf (FromConfig of a user.conf loads it first);
    without a FromConfig call the seeds stay 0 and no benchmark's counts apply."""
    if not (config.mlperf_conf or config.user_conf) and uses_official_conf(config):
        return "# empty: LoadGen's compiled-in mlperf.conf applies\n"
    parts = []
    for key in ("mlperf_conf", "user_conf"):
        path = getattr(config, key)
        if path:
            try:
                parts.append(Path(path).read_text())
            except OSError as e:
                raise ConfigError(f"{key}: cannot read {path}: {e.strerror}") from e
    return "\n".join(parts) if parts else None


def coalescing_default(config: RunConfig) -> bool | None:
    """The harness's server_coalesce_queries when the run leaves it unset: on in Server,
    unless a conf file sets coalesce_queries (LoadGen's own default is off).

    Why on: LoadGen's issue thread calls into Python once per query and needs the GIL each
    time; when a worker holds it, queries whose time has come wait, and one call per query
    cannot catch up. With it, the late ones come in one call, each still timed from its
    scheduled time, so lateness counts in the latency all the same (benchmarks/bench_core.py,
    zero service time, 2 cores: ~50k QPS with it off and one sample a call, ~190-270k at
    the defaults). MLPerf allows it: LoadGen reads coalesce_queries from user.conf
    (test_settings_internal.cc, outside the mlperf.conf-only keys), the submission checker
    does not look at it, and published closed-division harnesses set it.
    """
    if loadgen_scenario(config.scenario) != "Server" or config.server_coalesce_queries is not None:
        return config.server_coalesce_queries
    for _, words in _conf_lines(merged_conf_text(config) or ""):
        if words[0].count(".") >= 2 and words[0].rsplit(".", 2)[1:] in (["Server", "coalesce_queries"],
                                                                         ["*", "coalesce_queries"]):
            return None  # the conf file decides
    return True


def conf_model(config: RunConfig) -> str:
    """The model name LoadGen looks the conf keys up by: Interactive reads mlperf.conf's
    `<model>-interactive` entries (its TTFT/TPOT bounds, and the same counts and seeds)."""
    return f"{config.benchmark}-interactive" if config.scenario == INTERACTIVE else config.benchmark


def build_test_settings(lg: Any, config: RunConfig, conf_path: Path | None) -> Any:
    ts = lg.TestSettings()
    if conf_path is not None:
        rc = ts.FromConfig(str(conf_path), conf_model(config), loadgen_scenario(config.scenario), 1)
        if rc != 0:
            why = _FROMCONFIG_CODES.get(rc, f"code {rc}")
            raise ConfigError(f"LoadGen rejected conf file {conf_path}: {why}")
    ts.scenario = getattr(lg.TestScenario, loadgen_scenario(config.scenario))
    ts.mode = getattr(lg.TestMode, config.mode)
    for key, (attr, scale) in _DIRECT.items():
        value = getattr(config, key)
        if value is None:
            continue
        if scale is not None:
            value = int(round(value * scale))
        setattr(ts, attr, value)
    return ts
