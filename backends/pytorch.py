"""PyTorch: eager or compiled, fp32/bf16/fp16, on the device asked for and no other.

Model sources, told apart by what `--model` names:
    mypkg.models:build   a callable returning an nn.Module (also path/to/file.py:build);
                         `weights` loads a state_dict into it, `model_kwargs` are its arguments
    model.pt / .ts       a TorchScript archive (torch.jit.save)
    model.pt2            a torch.export program (torch.export.save)
Files are recognised by their contents, not their suffix, so a state_dict passed as the
model gets an error that says what it is and where it belongs.

The input signature comes from the `input_shape`/`input_dtype`/`input_name` options, else
from the model: a .pt2 program carries one, and an nn.Module may carry `example_inputs`
(a tensor or tuple of tensors, batch dimension first).

torch is imported inside methods only: without it `harness backends` still lists this
backend, as unavailable, with the install command.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.base import Batch, LoadContext, Outputs, TensorBackend, TensorSpec
from backends.pytorch_models import LoadedModel, forward_arg_names, load_model
from backends.pytorch_options import PRECISIONS, PyTorchOptions
from harness.errors import BackendError, ConfigError, ModelError, first_line

if TYPE_CHECKING:
    import torch


class PyTorchBackend(TensorBackend):
    name = "pytorch"
    Options = PyTorchOptions
    options: PyTorchOptions
    requires = ("torch",)
    install_hint = "pip install 'loadgen-harness[pytorch]'"

    @classmethod
    def scales_with_host_cores(cls, options: PyTorchOptions) -> bool:
        # Measured Offline, MLP batch 64 on 2 cores: 2 workers x 1 thread 1.03-1.15x a
        # plain 2-thread loop, 1 worker x 2 threads 0.73-0.83x (benchmarks/bench_pytorch.py).
        # Not for compiled models: torch.compile does not promise that concurrent calls from
        # several threads are safe (a guard miss recompiles), so they keep one worker.
        return options.device == "cpu" and options.compile == "off"

    # --- load ----------------------------------------------------------------------------
    def load(self, ctx: LoadContext) -> None:
        import torch

        # torch's intra-op thread count is per calling thread (OpenMP): set for this
        # backend's own work and given back, so a second backend in the process (parity)
        # and the harness keep theirs; predict does the same for each call.
        self.threads = self.options.threads or ctx.threads
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            self._load(ctx)
        finally:
            torch.set_num_threads(before)

    def _load(self, ctx: LoadContext) -> None:
        import torch

        o = self.options
        self._torch = torch
        self._model_ref = ctx.model
        self.device = resolve_device(o.device)
        t0 = time.perf_counter()
        loaded = load_model(ctx.model, o, ctx.seed)
        if loaded.source == "torchscript" and o.compile != "off":
            raise ConfigError(
                f"compile={o.compile} cannot trace a TorchScript model ({ctx.model}); use compile=off, "
                "or give the model as module:function or a .pt2 program"
            )
        self.source = loaded.source
        self.weights_sha256 = loaded.weights_sha256
        self._specs = self._signature(loaded, ctx.model)
        module = loaded.module
        if loaded.source != "export":  # a program's train/eval behaviour was fixed when it was exported
            module = module.eval()
        dtype = getattr(torch, PRECISIONS[o.precision])
        self._convert = dtype if o.precision != "fp32" and o.precision_mode == "convert" else None
        self._autocast = dtype if o.precision != "fp32" and o.precision_mode == "autocast" else None
        module = module.to(self.device)
        if self._convert is not None:
            module = module.to(self._convert)
        if o.channels_last:
            module = module.to(memory_format=torch.channels_last)
        self.module = module
        self.load_model_s = time.perf_counter() - t0
        # Counted now: the child calls describe() after close() has freed the module.
        params = list(module.parameters()) if hasattr(module, "parameters") else []
        self._param_count = int(sum(p.numel() for p in params))
        self._param_dtype = str(params[0].dtype).removeprefix("torch.") if params else None

        # A model traced with a fixed batch only runs at that batch; a compiled one is
        # compiled once at max_batch. Both get smaller batches padded up to that size, so
        # no shape ever reaches the model (and no recompile happens) during the test.
        batch_dim = self._specs[0].shape[0]
        if isinstance(batch_dim, int):
            if ctx.max_batch > batch_dim:
                raise ConfigError(
                    f"{ctx.model} was exported with a fixed batch of {batch_dim} but max_batch is "
                    f"{ctx.max_batch}: set max_batch<={batch_dim}, or export with a dynamic batch "
                    "(dynamic_shapes={'x': {0: torch.export.Dim('batch')}})"
                )
            self.pad_to: int | None = batch_dim
        else:
            self.pad_to = ctx.max_batch if o.compile != "off" else None
        self.max_batch = self.pad_to or ctx.max_batch
        self._needs_prepare = self.device.type != "cpu" or self._convert is not None or o.channels_last
        self._grad_mode = torch.inference_mode if o.inference_mode else torch.no_grad
        self._fn = module
        if o.compile != "off":
            self._fn = torch.compile(module, mode=o.compile, dynamic=False)

        # One prediction on zeros now: a wrong input shape, a dtype the model refuses or a
        # compile failure is reported at load, in one line, not as failed samples later.
        zeros = {s.name: np.zeros((1, *s.sample_shape()), dtype=s.dtype) for s in self._specs}
        t0 = time.perf_counter()
        try:
            probe = self.predict(zeros)
        except Exception as e:  # torch raises RuntimeError, TypeError, inductor errors...
            raise ModelError(self._probe_failure(e)) from e
        self.compile_s = time.perf_counter() - t0 if o.compile != "off" else None
        self._outputs = [
            TensorSpec(f"output_{i}" if len(probe) > 1 else "output", (None, *a.shape[1:]), str(a.dtype))
            for i, a in enumerate(probe)
        ]
        self.warmup_s: float | None = None

    def _signature(self, loaded: LoadedModel, ref: str | None) -> list[TensorSpec]:
        o = self.options
        if o.input_shape is not None:
            name = o.input_name or forward_arg_names(loaded.module, 1)[0]
            return [TensorSpec(name, (None, *o.input_shape), o.input_dtype or "float32")]
        if not loaded.declared:
            raise ConfigError(
                f"model {ref} declares no input signature: set input_shape to one sample's shape "
                "without the batch dim, e.g. --set input_shape=[3,224,224] (and input_dtype if not float32)"
            )
        specs = loaded.declared
        if (o.input_name or o.input_dtype) and len(specs) == 1:
            s = specs[0]
            specs = [TensorSpec(o.input_name or s.name, s.shape, o.input_dtype or s.dtype)]
        elif o.input_name or o.input_dtype:
            raise ConfigError(
                f"input_name/input_dtype rename a single input, but model {ref} has {len(specs)} "
                f"inputs ({', '.join(s.name for s in specs)})"
            )
        return specs

    def _probe_failure(self, e: Exception) -> str:
        o = self.options
        shapes = ", ".join(f"{s.name!r} {_fmt(s.shape)} {s.dtype}" for s in self._specs)
        origin = "from input_shape/input_dtype" if o.input_shape is not None else "declared by the model"
        where = f" with compile={o.compile}" if o.compile != "off" else ""
        fix = (
            "set input_shape (per sample, no batch dim) to what the model takes"
            if o.input_shape is not None or self.source != "export"
            else "check the exported program"
        )
        return f"model {self._model_ref} failed{where} on input {shapes} ({origin}): {first_line(e)}; {fix}"

    # --- the contract ----------------------------------------------------------------------
    def inputs(self) -> list[TensorSpec]:
        return list(self._specs)

    def outputs(self) -> list[TensorSpec]:
        return list(self._outputs)

    def warmup(self, batch: Batch) -> None:
        """Real samples at max_batch, so allocator, kernels (and CUDA graphs) are ready."""
        t0 = time.perf_counter()
        self.predict(batch)
        full = {k: np.resize(v, (self.max_batch, *v.shape[1:])) for k, v in batch.items()}
        for _ in range(self.options.warmup_runs):
            self.predict(full)
        self.warmup_s = time.perf_counter() - t0

    def predict(self, batch: Batch) -> Outputs:
        # torch's thread count is per calling thread: this call runs with the backend's and
        # gives the caller's back (~0.5 us when they differ, as in Offline's 1-thread workers).
        torch = self._torch
        before = torch.get_num_threads()
        if before == self.threads:
            return self._predict(batch)
        torch.set_num_threads(self.threads)
        try:
            return self._predict(batch)
        finally:
            torch.set_num_threads(before)

    def _predict(self, batch: Batch) -> Outputs:
        # The hot path: work that a configuration does not need is skipped, not done as a no-op.
        torch = self._torch
        xs = [torch.from_numpy(np.ascontiguousarray(batch[s.name])) for s in self._specs]
        n = xs[0].shape[0]
        padded = self.pad_to is not None and n != self.pad_to
        if padded:
            if n > self.pad_to:
                raise ValueError(f"batch of {n} exceeds the model's fixed batch of {self.pad_to}")
            xs = [torch.cat([x, x.new_zeros((self.pad_to - n, *x.shape[1:]))]) for x in xs]
        if self._needs_prepare:
            xs = [self._prepare(x) for x in xs]
        with self._grad_mode():
            if self._autocast is None:
                out = self._fn(*xs)
            else:
                with torch.autocast(self.device.type, dtype=self._autocast):
                    out = self._fn(*xs)
            if self.device.type == "cuda":
                # Side streams included: predict returns only when the GPU is done.
                torch.cuda.synchronize(self.device)
        # numpy has no bfloat16, and one dtype keeps comparisons (parity, accuracy) simple:
        # floating outputs come back as float32; integer/bool outputs (class ids, masks) keep theirs.
        arrays = []
        for t in [out] if isinstance(out, torch.Tensor) else _flatten(out, torch.Tensor):
            if padded:
                t = t[:n]
            if t.dtype != torch.float32 and t.is_floating_point():
                t = t.float()
            if t.device.type != "cpu":
                t = t.cpu()
            arrays.append(t.detach().numpy() if t.requires_grad else t.numpy())
        return arrays

    def _prepare(self, x: torch.Tensor) -> torch.Tensor:
        if self.device.type != "cpu":
            x = x.to(self.device)
        if self._convert is not None and x.is_floating_point():
            x = x.to(self._convert)
        if self.options.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=self._torch.channels_last)
        return x

    def describe(self) -> dict[str, Any]:
        torch = self._torch
        o = self.options
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        if self.device.type == "cuda":
            device_name = torch.cuda.get_device_name(self.device)
        elif self.device.type == "cpu":
            device_name = f"cpu ({torch.backends.cpu.get_cpu_capability()})"
        else:
            device_name = str(self.device)
        return {
            "backend": self.name,
            "engine": "torch",
            "engine_version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "cudnn_version": cudnn,
            "device": str(self.device),
            "device_name": device_name,
            "model_source": self.source,
            "weights_sha256": self.weights_sha256,
            "parameters": self._param_count,
            "parameter_dtype": self._param_dtype,
            "precision": o.precision,
            "precision_mode": o.precision_mode if o.precision != "fp32" else None,
            "compile": o.compile,
            "compile_s": self.compile_s,
            "padded_batch": self.pad_to,
            "load_model_s": self.load_model_s,
            "warmup_s": self.warmup_s,
            "threads": self.threads,  # what every call of this backend runs with (predict sets it)
            "inference_mode": o.inference_mode,
            "channels_last": o.channels_last,
            "inputs": [s.__dict__ for s in self._specs],
            "outputs": [s.__dict__ for s in self._outputs],
        }

    def close(self) -> None:
        self._fn = self.module = None
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()


# --- device -------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """The torch device, or a BackendError: never a silent fallback to the CPU."""
    import torch

    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            why = (
                f"this torch {torch.__version__} is a CPU-only build"
                if torch.version.cuda is None
                else "no CUDA GPU is visible (torch.cuda.device_count() is 0)"
            )
            raise BackendError(f"device {name} asked for, but {why}: use device=cpu, or run on a GPU machine with a CUDA build of torch")
        index = int(name.partition(":")[2] or torch.cuda.current_device())
        if index >= torch.cuda.device_count():
            raise BackendError(f"device {name} asked for, but only {torch.cuda.device_count()} CUDA device(s) exist: use cuda:0..")
        return torch.device("cuda", index)
    if name == "mps" and not torch.backends.mps.is_available():
        raise BackendError("device mps asked for, but MPS is not available in this torch/machine: use device=cpu")
    return torch.device(name)


# --- outputs --------------------------------------------------------------------------------


def _flatten(out: Any, tensor_type: type) -> list[Any]:
    if isinstance(out, tensor_type):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _flatten(v, tensor_type)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in _flatten(v, tensor_type)]
    raise TypeError(f"model returned {type(out).__name__}; expected tensors (alone, in a tuple, list or dict)")


# --- messages -------------------------------------------------------------------------------


def _fmt(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("N" if d is None else str(d) for d in shape) + "]"
