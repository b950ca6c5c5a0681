"""ONNX Runtime: execution providers stated explicitly, never a silent CPU fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from backends.base import BackendDescription, BackendOptions, Batch, LoadContext, Outputs, TensorBackend, TensorSpec
from harness.errors import BackendError, ModelError, first_line

_ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}
_OPT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


class OrtOptions(BackendOptions):
    providers: list[str] = Field(
        default_factory=lambda: ["CPUExecutionProvider"],
        description="execution providers in priority order; each must be available",
    )
    intra_op_threads: int | None = Field(None, ge=1, description="default: cores / workers")
    inter_op_threads: int = Field(1, ge=1)
    allow_spinning: bool = Field(False, description="idle ORT threads spin and steal CPU from LoadGen")
    graph_optimization_level: Literal["disable", "basic", "extended", "all"] = "all"


class OnnxRuntimeBackend(TensorBackend):
    name = "onnxruntime"
    Options = OrtOptions
    options: OrtOptions

    @classmethod
    def scales_with_host_cores(cls, options: OrtOptions) -> bool:
        return list(options.providers) == ["CPUExecutionProvider"]

    def load(self, ctx: LoadContext) -> None:
        import onnxruntime as ort

        if not ctx.model:
            raise ModelError("backend onnxruntime needs --model PATH to an .onnx file")
        path = Path(ctx.model)
        if not path.is_file():
            raise ModelError(f"model file {path} does not exist")
        available = ort.get_available_providers()
        missing = [p for p in self.options.providers if p not in available]
        if missing:
            raise BackendError(
                f"execution provider(s) {', '.join(missing)} not available in this onnxruntime "
                f"(available: {', '.join(available)}); install the matching onnxruntime build or "
                "change `providers`"
            )
        so = ort.SessionOptions()
        self.threads = self.options.intra_op_threads or ctx.threads
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = self.options.inter_op_threads
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.options.allow_spinning else "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "1" if self.options.allow_spinning else "0")
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[self.options.graph_optimization_level])
        try:
            self.session = ort.InferenceSession(str(path), sess_options=so, providers=self.options.providers)
        except Exception as e:  # ORT raises its own Fail/InvalidGraph/... types
            raise ModelError(f"onnxruntime cannot load {path}: {first_line(e)}") from e
        used = self.session.get_providers()
        fell_back = [p for p in self.options.providers if p not in used]
        if fell_back:
            raise BackendError(
                f"onnxruntime did not enable {', '.join(fell_back)} for this model (it used "
                f"{', '.join(used)}): refusing a silent fallback"
            )
        self._version = ort.__version__
        self._path = path

    def inputs(self) -> list[TensorSpec]:
        return [_spec(i) for i in self.session.get_inputs()]

    def outputs(self) -> list[TensorSpec]:
        return [_spec(o) for o in self.session.get_outputs()]

    def predict(self, batch: Batch) -> Outputs:
        return self.session.run(None, dict(batch))

    def batches_freely(self) -> bool:
        # A fixed leading dimension only runs at that batch; a symbolic one (None) takes any.
        return all(spec.shape[0] is None for spec in self.inputs() if spec.shape)

    def describe(self) -> BackendDescription:
        return {
            "backend": self.name,
            "engine": "onnxruntime",
            "engine_version": self._version,
            "providers_requested": list(self.options.providers),
            "providers_used": self.session.get_providers(),
            "intra_op_threads": self.threads,
            "inter_op_threads": self.options.inter_op_threads,
            "allow_spinning": self.options.allow_spinning,
            "graph_optimization_level": self.options.graph_optimization_level,
            "inputs": [s.__dict__ for s in self.inputs()],
            "outputs": [s.__dict__ for s in self.outputs()],
            "precision": sorted({s.dtype for s in self.inputs()}),
        }


def _spec(node: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) else None for d in node.shape)
    return TensorSpec(node.name, shape, _ORT_DTYPES.get(node.type, node.type))
