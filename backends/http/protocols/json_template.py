"""Any JSON API, by template (`POST {url}`): the request is a JSON file whose
"{{prompt}}"-style strings are filled in per sample; the answer is the value at a dotted
path of the response (a list of numbers becomes a tensor)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from backends.base import Chunk, InputKind, OutputKind, PromptSample, Sample
from backends.content import wire_messages
from backends.http.options import BaseHttpOptions
from backends.http.protocol import Bound, HttpProtocol, read_json_option
from harness.errors import RequestFailed


class JsonTemplateOptions(BaseHttpOptions):
    protocol: Literal["json"] = Field("json", description="any JSON API by template, POST {url} (url: the endpoint); prompts or tensors in (json_input), the value at response_path out")
    max_tokens: int | None = Field(None, ge=1, description="{{max_tokens}} when the sample has none")
    request_template: str | None = Field(None, description="a JSON file; \"{{prompt}}\"-style strings are filled in")
    response_path: str | None = Field(None, description="dotted path of the answer, e.g. outputs.0.data")
    json_input: Literal["prompt", "tensor"] = Field("prompt", description="fill the template from prompts or tensors")

    @model_validator(mode="after")
    def _template_given(self) -> JsonTemplateOptions:
        if not (self.request_template and self.response_path):
            raise ValueError("protocol json needs request_template (a JSON file) and response_path")
        return self


class JsonTemplate(HttpProtocol):
    name = "json"
    Options = JsonTemplateOptions
    options: JsonTemplateOptions
    url_form = "http://host:port/the/endpoint"
    takes: ClassVar[tuple[InputKind, ...]] = ("prompt", "tensor")
    gives: ClassVar[OutputKind] = "text"

    def __init__(self, options: JsonTemplateOptions) -> None:
        super().__init__(options)
        self.template: Any = None

    @property
    def input_kind(self) -> InputKind:
        return self.options.json_input

    @property
    def output_kind(self) -> OutputKind:
        return "tensor" if self.options.json_input == "tensor" else "text"

    @property
    def takes_sessions(self) -> bool:
        return False

    def bind(self, bound: Bound) -> None:
        super().bind(bound)
        self.template = read_json_option("request_template", Path(self.options.request_template or ""))

    def encode(self, sample: Sample) -> bytes:
        return json.dumps(_fill(self.template, _template_values(sample, self.options.max_tokens))).encode()

    def decode(self, raw: bytes) -> list[Chunk]:
        obj = self.json_body(raw)
        try:
            output = _json_output(obj, self.options.response_path or "")
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise RequestFailed("malformed_json", self.bound.excerpt(f"missing {e} in {json.dumps(obj)}")) from e
        if isinstance(output, str) and self.bound.redact_text is not None:
            output = self.bound.redact_text(output)
        return [Chunk(n_tokens=0, output=output)]


def _template_values(sample: Sample, max_tokens: int | None) -> dict[str, Any]:
    if not isinstance(sample, PromptSample):  # tensors
        arrays = {k: v.tolist() for k, v in sample.items()}
        return {"input": next(iter(arrays.values())), "inputs": arrays, "max_tokens": max_tokens}
    return {
        "prompt": sample.text(),
        "messages": wire_messages(sample.messages) if sample.messages else [{"role": "user", "content": sample.text()}],
        "max_tokens": sample.max_tokens or max_tokens,
    }


def _fill(node: Any, values: dict[str, Any]) -> Any:
    """Replace "{{key}}" strings by the value (any JSON type); embedded ones by its text."""
    if isinstance(node, dict):
        return {k: _fill(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, values) for v in node]
    if isinstance(node, str) and "{{" in node:
        stripped = node.strip()
        if stripped.startswith("{{") and stripped.endswith("}}") and stripped[2:-2].strip() in values:
            return values[stripped[2:-2].strip()]
        for k, v in values.items():
            node = node.replace("{{" + k + "}}", v if isinstance(v, str) else json.dumps(v))
    return node


def _json_output(obj: Any, path: str) -> Any:
    node = obj
    for part in path.split("."):
        if isinstance(node, list) and part.lstrip("-").isdigit():
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node[part]
        else:
            raise KeyError(path)
    if node is None or node == "" or node == [] or node == {}:
        raise RequestFailed("empty_output", f"{path} is empty")
    if isinstance(node, list) and all(isinstance(x, (int, float)) for x in node):
        return np.asarray(node, dtype=np.float32)
    return node if isinstance(node, str) else json.dumps(node)


PROTOCOL = JsonTemplate
