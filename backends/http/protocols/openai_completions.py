"""OpenAI completions (`POST {url}/completions`): a prompt's text, or its dataset's token
ids (MLPerf's `tok_input`, as a list of ints, which vLLM and llama.cpp's server take),
in; tokens, streamed as SSE or whole, out."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from backends.base import PromptSample, Sample
from backends.http.openai import OpenAIOptions, OpenAIProtocol
from harness.errors import DatasetError


class OpenAICompletionsOptions(OpenAIOptions):
    protocol: Literal["openai-completions"] = Field("openai-completions", description="OpenAI completions, POST {url}/completions (url: http://host:port/v1); prompts (text or token ids) in, tokens out")
    prompt_from: Literal["text", "ids"] = Field(
        "text", description="send each prompt's text, or its dataset's token ids "
        "(MLPerf's tok_input, as `prompt`: a list of ints, which vLLM and llama.cpp's server take)"
    )


class OpenAICompletions(OpenAIProtocol):
    name = "openai-completions"
    Options = OpenAICompletionsOptions
    options: OpenAICompletionsOptions
    aliases = ("openai-completions", "completions")
    path = "/completions"

    @property
    def sends_token_ids(self) -> bool:  # type: ignore[override]
        return self.options.prompt_from == "ids"

    def put_input(self, body: dict[str, Any], sample: PromptSample) -> None:
        if self.sends_token_ids:
            if sample.input_ids is None:  # build_source's check names the row; this is the last guard
                raise DatasetError("prompt_from=ids: a sample has no token ids; use a dataset that carries them "
                                   "(mlperf:SET:PATH) or set prompt_from=text")
            body["prompt"] = list(sample.input_ids)
        else:
            if sample.prompt is None:
                raise DatasetError("protocol openai-completions needs `prompt` samples; this dataset has chat `messages` (use openai-chat)")
            body["prompt"] = sample.prompt

    def input_tokens(self, sample: Sample) -> int:
        if self.sends_token_ids and isinstance(sample, PromptSample):  # exact: the ids are the prompt
            return len(sample.input_ids or ())
        return super().input_tokens(sample)

    @property
    def input_token_method(self) -> str:
        return "the dataset's token ids" if self.sends_token_ids else super().input_token_method

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "prompt_from": self.options.prompt_from}


PROTOCOL = OpenAICompletions
