"""The PyTorch backend's options (`--set` keys), apart from the backend, so that the model
loaders (backends.pytorch_models) read them without importing the backend that uses them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from backends.base import BackendOptions

PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class PyTorchOptions(BackendOptions):
    device: str = Field(
        "cpu", pattern=r"^(cpu|cuda(:\d+)?|mps)$", description="cpu, cuda, cuda:N or mps; unavailable is an error"
    )
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    precision_mode: Literal["autocast", "convert"] = Field(
        "autocast", description="autocast: ops run in bf16/fp16 where torch deems it safe; convert: weights and inputs cast"
    )
    threads: int | None = Field(None, ge=1, description="torch intra-op threads; default: cores / workers")
    inference_mode: bool = Field(True, description="torch.inference_mode(); false: torch.no_grad()")
    channels_last: bool = Field(False, description="4-D weights and inputs in NHWC memory format")
    compile: Literal["off", "default", "reduce-overhead", "max-autotune"] = Field(
        "off", description="torch.compile mode; compiled before the test, at the max_batch shape"
    )
    weights: str | None = Field(None, description="state_dict file for a module:function model")
    model_kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the module:function")
    input_shape: tuple[int, ...] | None = Field(None, description="per-sample input shape, without the batch dim")
    input_dtype: Literal["float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool"] | None = None
    input_name: str | None = Field(None, description="name of the single input; default: forward()'s argument name")
    warmup_runs: int = Field(3, ge=0, description="predictions at max_batch before the test")

    @field_validator("compile", mode="before")
    @classmethod
    def _yaml_bool(cls, v: Any) -> Any:
        # YAML reads `--set compile=off` as False and `on` as True.
        if v is False:
            return "off"
        if v is True:
            return "default"
        return v
