"""Configuration merging and validation, and the small pure pieces around it."""

from __future__ import annotations

import numpy as np
import pytest

from harness.config import registry
from harness.config.run_config import RunConfig, build_config
from harness.data.datasets import parse_spec
from harness.errors import ConfigError
from harness.results.explain import explain
from harness.results.summary import percentiles_ms


def test_overrides_beat_the_file_and_reach_backend_options(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("scenario: Server\ntarget_qps: 100\nbackend: synthetic\nbackend_options:\n  service_time_ms: 1\n")
    c = build_config(f, ["target_qps=250", "service_time_ms=4", "backend_options.wait=busy"], {}, registry.option_names)
    assert c.target_qps == 250
    assert c.backend_options == {"service_time_ms": 4, "wait": "busy"}


def test_backend_option_errors_name_the_line(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("backend: synthetic\nbackend_options:\n  servce_time_ms: 1\n")
    with pytest.raises(ConfigError) as e:
        build_config(f, [], {}, registry.option_names)
    assert f"{f}:3" in str(e.value) and "did you mean 'service_time_ms'" in str(e.value)
    # Values are checked by the backend's own options model before the child starts.
    from harness.config.run_config import validate_backend_options

    cfg = RunConfig(backend="synthetic", backend_options={"servce_time_ms": 1})
    with pytest.raises(ConfigError) as e:
        validate_backend_options(cfg, registry.get("synthetic").Options)
    assert "did you mean 'service_time_ms'" in str(e.value)


def test_config_is_frozen_and_round_trips():
    c = RunConfig(scenario="Server", target_qps=10)
    with pytest.raises(Exception):
        c.target_qps = 5  # type: ignore[misc]
    import yaml

    assert RunConfig(**yaml.safe_load(c.to_yaml())) == c


def test_dataset_specs_split_outside_parentheses():
    assert parse_spec("synthetic:isl=lognormal(1024,0.5),osl=64") == (
        "synthetic",
        {"isl": "lognormal(1024,0.5)", "osl": "64"},
    )
    assert parse_spec("npy:/data/x") == ("npy", {"path": "/data/x"})
    assert parse_spec("digits") == ("digits", {})


def test_percentiles_use_loadgens_nearest_rank():
    ns = np.arange(1, 101) * 1_000_000  # 1..100 ms
    p = percentiles_ms(ns)
    assert p["p50"] == 51.0 and p["p90"] == 91.0 and p["p99"] == 100.0 and p["p99_9"] == 100.0
    assert p["mean"] == 50.5 and p["min"] == 1.0 and p["max"] == 100.0


def test_invalid_offline_explained_with_the_value_to_set():
    lg = {
        "result_validity": "INVALID",
        "result_min_duration_met": False,
        "result_min_queries_met": True,
        "early_stopping_met": True,
        "effective_min_duration_ms": 10000,
        "effective_target_qps": 1000,
    }
    reasons, fixes = explain("Offline", lg, {"throughput_per_s": 1730.0})
    assert "ran out of samples" in reasons[0]
    # the measured 1,730/s plus 50 %: a fix sized exactly from this short run would fail again
    assert fixes[0].startswith("raise offline_expected_qps to ≈ 2600 (the rate measured here plus 50%")


def test_saturated_server_explained():
    lg = {
        "result_validity": "INVALID",
        "result_perf_constraints_met": False,
        "result_min_duration_met": True,
        "result_min_queries_met": True,
        "early_stopping_met": True,
        "effective_target_latency_ns": 10_000_000,
        "effective_target_latency_percentile": 0.99,
        "effective_target_qps": 1000,
        "result_99.00_percentile_latency_ns": 250_000_000,
        "result_completed_samples_per_sec": 600.0,
    }
    reasons, fixes = explain("Server", lg, {})
    assert any("saturated" in r for r in reasons)
    assert fixes == ["lower target_qps to ≈ 540"]


def test_early_stopping_explained_with_query_count():
    lg = {
        "result_validity": "INVALID",
        "early_stopping_met": False,
        "early_stopping_result": " * Only processed 501 queries.  * Need to process at least 662 queries for early stopping.",
    }
    _, fixes = explain("MultiStream", lg, {})
    assert fixes == ["raise min_query_count to ≥ 662"]


def test_configuration_reference_is_current():
    from pathlib import Path

    from harness.config.reference import reference_markdown

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    assert doc == reference_markdown(), "regenerate: python -m harness.config.reference > docs/configuration.md"
    assert all(f"`{k}`" in doc for k in RunConfig.model_fields)
