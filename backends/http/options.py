"""The options every HTTP protocol shares (the transport's: URL, pool, timeouts, retries,
credentials, tokenizer), as the base of each protocol's own options (its module in
backends/http/protocols subclasses BaseHttpOptions, with `protocol: Literal[its name]`).

The backend's `Options`, the union of them all keyed by `protocol`, is
backends.http.backend.HttpOptions.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from backends.base import StreamingOptions
from backends.http.credentials import EnvNames, Headers, Url


class BaseHttpOptions(StreamingOptions):
    protocol: str = Field(description="wire protocol of the server (its own options below)")
    url: Url = Field(description="the server's URL, in its protocol's form (below)")
    model_name: str | None = Field(None, description="model name sent to (or served by) the server")
    max_in_flight: int | None = Field(None, ge=1, description="most requests open at once (None: as LoadGen issues)")
    connections: int = Field(0, ge=0, description="connection pool size (0: one per open request)")
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(60.0, gt=0, description="longest silence between two reads")
    total_timeout_s: float = Field(600.0, gt=0, description="longest whole request")
    retries: int = Field(0, ge=0, description="retries of a request that failed before any content (0: off)")
    retry_statuses: list[int] = Field(default_factory=lambda: [429, 502, 503, 504])
    api_key_env: str | None = Field(None, description="name of the environment variable holding the API key")
    verify_tls: bool = Field(True, description="verify the server's TLS certificate")
    headers: Headers = Field(default_factory=dict, description="extra request headers (no credentials: see headers_env)")
    headers_env: EnvNames = Field(
        default_factory=dict, description="headers whose values come from environment variables: {Header-Name: ENV_VAR}"
    )
    query_env: EnvNames = Field(
        default_factory=dict, description="URL query parameters whose values come from environment variables: {name: ENV_VAR}"
    )
    tokenizer: str | None = Field(
        None, description="local token counting: 'whitespace', a .gguf file (needs llama-cpp-python) or a local "
        "Hugging Face tokenizer folder with tokenizer.json (needs transformers; never downloaded); a .gguf or a "
        "folder also counts chat prompts through its chat template and turns answers into token ids in accuracy "
        "mode when the server sends none"
    )
    warmup_requests: int = Field(1, ge=0, description="requests sent at once before the timed test (opens as many pooled connections)")
    check_server: bool = Field(True, description="query the server's model metadata at load")

    @model_validator(mode="after")
    def _headers_once(self) -> BaseHttpOptions:
        taken = {k.lower() for k in self.headers} & {k.lower() for k in self.headers_env}
        if self.api_key_env and "authorization" in {k.lower() for k in self.headers_env}:
            taken.add("authorization (api_key_env sends it)")
        if taken:
            raise ValueError(f"headers_env: {', '.join(sorted(taken))} given twice")
        return self


def option_error(title: str, key: str, message: str, value: Any) -> ValidationError:
    """One option's error as pydantic raises it, so that the harness names the option and
    where it was set, as for any other option."""
    error = PydanticCustomError("protocol_option", message)
    return ValidationError.from_exception_data(title, [InitErrorDetails(type=error, loc=(key,), input=value)])
