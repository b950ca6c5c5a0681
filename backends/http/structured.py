"""Structured outputs on the wire: the forms in which OpenAI-compatible servers take a JSON
Schema, as data, and the reading of a schema back out of a request body.

Servers disagree on the form, and a wrong one is not always refused:

    openai       response_format {"type": "json_schema", "json_schema": {name, schema, strict}}
                 (OpenAI, vLLM, SGLang, llama.cpp's C++ llama-server)
    llama-cpp    response_format {"type": "json_object", "schema": S}: llama-cpp-python's
                 server, which answers OpenAI's form with HTTP 500 (its `type` is only
                 "text" or "json_object"), and turns the schema into a grammar
    vllm         structured_outputs {"json": S}: vLLM's own field (also `regex`, `choice`,
                 `grammar`, through extra_body)
    vllm-guided  guided_json S: vLLM's field before structured_outputs; vLLM 0.32 ignores
                 it (HTTP 200, output unconstrained), so use it only with a vLLM that takes it

The transport and the protocols only look the form up here (`FORMS`); none names a server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

SchemaForm = Literal["openai", "llama-cpp", "vllm", "vllm-guided"]

#: the schema OpenAI's `json_object` mode promises: a JSON object, nothing more
ANY_OBJECT: Mapping[str, Any] = {"type": "object"}


def _name(schema: Mapping[str, Any]) -> str:
    """OpenAI's json_schema needs a name (^[a-zA-Z0-9_-]{1,64}$): the schema's title, else "answer"."""
    title = schema.get("title") if isinstance(schema, Mapping) else None
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", title)[:64] if isinstance(title, str) and title else ""
    return name or "answer"


#: form -> the request fields that carry the schema
FORMS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "openai": lambda s: {"response_format": {"type": "json_schema",
                                             "json_schema": {"name": _name(s), "schema": s, "strict": True}}},
    "llama-cpp": lambda s: {"response_format": {"type": "json_object", "schema": s}},
    "vllm": lambda s: {"structured_outputs": {"json": s}},
    "vllm-guided": lambda s: {"guided_json": s},
}


def request_fields(form: SchemaForm, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that ask a server, in `form`, for answers that follow `schema`."""
    return FORMS[form](schema)


def schema_in(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON Schema that request fields (e.g. an `extra_body` passed through as written)
    ask the server to follow, in any of the forms above; `json_object` without a schema asks
    for any object. None: they ask for none (or for a regex, a choice, a grammar: no schema
    checks those)."""
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping):
        if fmt.get("type") == "json_schema" and isinstance(fmt.get("json_schema"), Mapping):
            return _parsed(fmt["json_schema"].get("schema"))
        if fmt.get("type") == "json_object":
            return _parsed(fmt.get("schema")) or ANY_OBJECT
    outputs = body.get("structured_outputs")
    if isinstance(outputs, Mapping):
        if outputs.get("json") is not None:
            return _parsed(outputs["json"])
        if outputs.get("json_object"):
            return ANY_OBJECT
    return _parsed(body.get("guided_json"))


def _parsed(schema: Any) -> Mapping[str, Any] | None:
    """vLLM takes a schema as an object or as its JSON text."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return None
    return schema if isinstance(schema, Mapping) else None
