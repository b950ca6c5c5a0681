"""A PyTorch model as ONNX, so the same model runs under both the pytorch and onnxruntime backends.

The model is loaded exactly as the pytorch backend loads it (same sources, weights and
input signature), exported with a dynamic batch dimension, then checked: onnxruntime runs
the file on the same random batch as torch and the largest difference is reported.

Exporters: torch's dynamo exporter needs the `onnxscript` package; the TorchScript-based
one (`dynamo=False`) does not. `auto` takes dynamo when onnxscript is installed and says
so; if dynamo fails it tries the TorchScript exporter and records why.
"""

from __future__ import annotations

import importlib.util
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from backends.base import LoadContext, TensorSpec
from harness.config.host import usable_cores
from harness.errors import ConfigError, ModelError, OutputError, first_line

Exporter = Literal["auto", "dynamo", "torchscript"]
_CHECK_BATCH = 2  # not 1: a size-1 batch can get specialised into the graph


@dataclass(frozen=True)
class ExportResult:
    path: Path
    exporter: str
    opset: int
    inputs: list[TensorSpec]
    output_names: list[str]
    seconds: float
    max_abs_diff: float | None  # onnxruntime vs torch on one random batch
    note: str = ""


def export_onnx(
    model: str,
    out: Path,
    *,
    weights: str | None = None,
    model_kwargs: dict[str, Any] | None = None,
    input_shape: tuple[int, ...] | None = None,
    input_dtype: str | None = None,
    input_name: str | None = None,
    opset: int = 17,
    exporter: Exporter = "auto",
    seed: int = 0,
    verify: bool = True,
) -> ExportResult:
    import torch

    from backends.pytorch import PyTorchBackend, PyTorchOptions

    if exporter == "dynamo" and importlib.util.find_spec("onnxscript") is None:
        raise ConfigError("exporter dynamo needs the onnxscript package: pip install onnxscript, or use --exporter torchscript")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {out.parent}: {e.strerror}") from e
    options = PyTorchOptions(
        weights=weights,
        model_kwargs=model_kwargs or {},
        input_shape=input_shape,
        input_dtype=input_dtype,  # type: ignore[arg-type]  # checked by the options model
        input_name=input_name,
        warmup_runs=0,
    )
    backend = PyTorchBackend(options)
    backend.load(LoadContext(model, 1, "Offline", seed, usable_cores()))
    specs = backend.inputs()
    fixed = specs[0].shape[0]  # a .pt2 program may have a fixed batch: export exactly that
    batch = fixed if isinstance(fixed, int) else _CHECK_BATCH
    rng = np.random.default_rng(seed)
    sample = {
        s.name: (rng.standard_normal((batch, *s.sample_shape())) if np.dtype(s.dtype).kind == "f" else np.zeros((batch, *s.sample_shape())))
        .astype(s.dtype)
        for s in specs
    }
    reference = backend.predict(sample)
    output_names = ["output"] if len(reference) == 1 else [f"output_{i}" for i in range(len(reference))]
    args = tuple(torch.from_numpy(sample[s.name]) for s in specs)
    dynamic_axes = {} if isinstance(fixed, int) else {name: {0: "N"} for name in [s.name for s in specs] + output_names}

    is_script = backend.source == "torchscript"
    use_dynamo = exporter == "dynamo" or (exporter == "auto" and not is_script and importlib.util.find_spec("onnxscript") is not None)
    note = "" if use_dynamo or exporter == "torchscript" else (
        "TorchScript model" if is_script else "onnxscript not installed"
    )
    t0 = time.perf_counter()
    module = backend.module
    try:
        if use_dynamo:
            try:
                _export(torch, module, args, out, specs, output_names, dynamic_axes, opset, True)
                used = "dynamo"
            except Exception as e:
                if exporter == "dynamo":
                    raise
                note = f"dynamo exporter failed ({first_line(e)}); used the TorchScript exporter"
                _export(torch, module, args, out, specs, output_names, dynamic_axes, opset, False)
                used = "torchscript"
        else:
            _export(torch, module, args, out, specs, output_names, dynamic_axes, opset, False)
            used = "torchscript"
    except Exception as e:
        raise ModelError(f"torch.onnx.export cannot export {model}: {first_line(e)}") from e
    finally:
        backend.close()
    seconds = time.perf_counter() - t0
    diff = _verify(out, sample, reference) if verify else None
    return ExportResult(out, used, opset, specs, output_names, seconds, diff, note)


def _export(
    torch: Any,
    module: Any,
    args: tuple[Any, ...],
    out: Path,
    specs: list[TensorSpec],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int,
    dynamo: bool,
) -> None:
    extra: dict[str, Any] = {}
    if not dynamo:
        # The TorchScript exporter calls model.train(False) unless told to keep the mode, and
        # a torch.export program refuses train()/eval(); every source is in eval mode already.
        extra["training"] = torch.onnx.TrainingMode.PRESERVE
        if getattr(module, "training", False):
            module.training = False
    with torch.no_grad(), warnings.catch_warnings():
        # PRESERVE always warns about constant folding in training mode; the model is in eval.
        warnings.filterwarnings("ignore", message="It is recommended that constant folding")
        torch.onnx.export(
            module,
            args,
            str(out),
            input_names=[s.name for s in specs],
            output_names=output_names,
            dynamic_axes=dynamic_axes or None,
            opset_version=opset,
            dynamo=dynamo,
            **extra,
        )


def _verify(path: Path, sample: dict[str, np.ndarray], reference: list[np.ndarray]) -> float:
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(None, sample)
    except Exception as e:  # ORT's own error types
        raise ModelError(f"the exported {path} does not run under onnxruntime: {first_line(e)}") from e
    return max(float(np.max(np.abs(g.astype(np.float64) - r.astype(np.float64)))) for g, r in zip(got, reference, strict=True))

