"""Where a PyTorch model comes from, for backends.pytorch: a `module:function` (a dotted
module, a package in the current folder, or path/to/file.py), a TorchScript file or a
torch.export .pt2 program, with optional state_dict weights; and the input signature each
source carries.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from backends.base import TensorSpec
from backends.pytorch_options import PyTorchOptions
from harness.errors import ConfigError, ModelError, first_line

_NUMPY_DTYPES = ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")


@dataclass(frozen=True)
class LoadedModel:
    """A model from any source, before device, precision and compile are applied."""

    module: Any  # torch.nn.Module, ScriptModule or the GraphModule of an ExportedProgram
    source: Literal["callable", "torchscript", "export"]
    declared: list[TensorSpec] | None  # the signature the model itself carries, if any
    weights_sha256: str | None = None


def load_model(ref: str | None, options: PyTorchOptions, seed: int) -> LoadedModel:
    if not ref:
        raise ModelError("backend pytorch needs --model: module:function, a TorchScript file or a torch.export .pt2 file")
    path = Path(ref)
    if path.is_file():
        if options.weights or options.model_kwargs:
            raise ConfigError(
                f"weights/model_kwargs apply to a module:function model, but {ref} is a file that holds its own weights"
            )
        return _load_file(path)
    if ":" in ref:
        return _load_callable(ref, options, seed)
    raise ModelError(f"model {ref!r} is neither an existing file nor module:function (e.g. mypkg.models:build)")


def _load_file(path: Path) -> LoadedModel:
    import torch

    try:
        names = zipfile.ZipFile(path).namelist()
    except (zipfile.BadZipFile, OSError) as e:
        raise ModelError(f"{path} is not a TorchScript or torch.export (.pt2) archive ({e})") from e
    if any(n.endswith("/archive_format") or n == "archive_format" for n in names):
        try:
            program = torch.export.load(str(path))
        except Exception as e:
            raise ModelError(f"torch.export.load cannot read {path}: {first_line(e)}") from e
        return LoadedModel(program.module(), "export", _export_signature(program))
    if any("/code/" in n or n.endswith("constants.pkl") for n in names):
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as e:
            raise ModelError(f"torch.jit.load cannot read {path}: {first_line(e)}") from e
        return LoadedModel(module, "torchscript", _example_signature(module))
    raise ModelError(
        f"{path} is a plain torch.save file (a state_dict?), not a TorchScript or .pt2 program: "
        f"pass the architecture as --model module:function and this file as --set weights={path}"
    )


def _import(module_part: str, ref: str) -> Any:
    """A dotted module name, or a .py file given by path (no PYTHONPATH needed)."""
    try:
        if not module_part.endswith(".py"):
            _import_top_from_cwd(module_part.partition(".")[0])
            return importlib.import_module(module_part)
        file = Path(module_part)
        if not file.is_file():
            raise ModelError(f"--model {ref}: file {file} does not exist")
        spec = importlib.util.spec_from_file_location(f"_harness_model_{file.stem}", file)
        if spec is None or spec.loader is None:
            raise ModelError(f"--model {ref}: {file} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except ModelError:
        raise
    except ModuleNotFoundError as e:
        raise ModelError(
            f"--model {ref}: cannot import {module_part!r} ({e}); install it, add its folder to "
            "PYTHONPATH, or name a file: path/to/file.py:function"
        ) from e
    except Exception as e:
        raise ModelError(f"--model {ref}: importing {module_part!r} raised {type(e).__name__}: {first_line(e)}") from e


def _import_top_from_cwd(top: str) -> None:
    """Like `uvicorn main:app`: a package in the current folder is found whether the harness
    runs as `python -m harness` (cwd on sys.path) or as the `harness` script (it is not).
    The package is imported from the folder by path; sys.path stays as it was."""
    if top in sys.modules or importlib.util.find_spec(top) is not None:
        return
    spec = importlib.machinery.PathFinder.find_spec(top, [str(Path.cwd())])
    if spec is None or spec.loader is None:
        return  # importlib.import_module then names what is missing
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module  # submodules of a package are found through it
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[top]
        raise


def _load_callable(ref: str, options: PyTorchOptions, seed: int) -> LoadedModel:
    import torch

    module_part, _, fn_name = ref.rpartition(":")
    mod = _import(module_part, ref)
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        found = sorted(k for k, v in vars(mod).items() if callable(v) and not k.startswith("_"))
        raise ModelError(f"--model {ref}: {module_part} has no callable {fn_name!r} (callables there: {', '.join(found) or 'none'})")
    # Randomly initialised layers come out the same on every run; fork_rng gives the global
    # generator back as it was, so a second backend in the process (parity) is not reseeded.
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = fn(**options.model_kwargs)
    except Exception as e:
        raise ModelError(f"--model {ref}: calling {fn_name}(**model_kwargs) raised {type(e).__name__}: {first_line(e)}") from e
    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"--model {ref}: {fn_name}() returned {type(module).__name__}, not a torch.nn.Module")
    digest = None
    if options.weights:
        digest = _load_weights(module, Path(options.weights), ref)
    return LoadedModel(module, "callable", _example_signature(module), digest)


def _load_weights(module: Any, path: Path, ref: str) -> str:
    import torch

    if not path.is_file():
        raise ModelError(f"weights file {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ModelError(
            f"cannot read weights {path}: {first_line(e)}; save them with torch.save(model.state_dict(), path)"
        ) from e
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]  # the usual training-checkpoint layout
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelError(f"weights {path} is not a state_dict (a mapping of names to tensors)")
    expected = module.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [
        f"{k} {tuple(state[k].shape)} in file vs {tuple(v.shape)} in module"
        for k, v in expected.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing {_few(missing)}")
        if unexpected:
            parts.append(f"unexpected {_few(unexpected)}")
        if wrong:
            parts.append(f"shape mismatch {_few(wrong)}")
        raise ModelError(
            f"weights {path} do not fit the module built by {ref}: {'; '.join(parts)}; "
            "check that --model builds the architecture the weights were saved from"
        )
    module.load_state_dict(state)
    return hashlib.sha256(path.read_bytes()).hexdigest()  # weights fit in memory: they were just loaded


# --- signatures -----------------------------------------------------------------------------


def _numpy_dtype(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    return name if name in _NUMPY_DTYPES else "float32"


def forward_arg_names(module: Any, count: int) -> list[str]:
    names: list[str] = []
    try:
        schema = getattr(getattr(module, "forward", None), "schema", None)
        if schema is not None:  # TorchScript
            names = [a.name for a in schema.arguments if a.name != "self"]
        else:
            params = inspect.signature(module.forward).parameters.values()
            names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError, AttributeError):
        names = []
    if len(names) < count:
        names = ["input"] if count == 1 else [f"input_{i}" for i in range(count)]
    return names[:count]


def _example_signature(module: Any) -> list[TensorSpec] | None:
    """From `module.example_inputs` (batch first), the convention torchbench models use."""
    import torch

    example = getattr(module, "example_inputs", None)
    if example is None:
        return None
    tensors = (example,) if isinstance(example, torch.Tensor) else tuple(example)
    if not tensors or not all(isinstance(t, torch.Tensor) and t.dim() >= 1 for t in tensors):
        return None
    names = forward_arg_names(module, len(tensors))
    return [TensorSpec(n, (None, *t.shape[1:]), _numpy_dtype(t.dtype)) for n, t in zip(names, tensors, strict=True)]


def _export_signature(program: Any) -> list[TensorSpec]:
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    specs = []
    for name in program.graph_signature.user_inputs:
        val = placeholders[name].meta.get("val")
        shape = tuple(d if isinstance(d, int) else None for d in val.shape)
        specs.append(TensorSpec(name, shape, _numpy_dtype(val.dtype)))
    return specs


# --- messages -------------------------------------------------------------------------------



def _few(items: list[str], limit: int = 3) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
