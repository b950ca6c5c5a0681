"""OpenAI chat completions (`POST {url}/chat/completions`): vLLM, SGLang, TGI, llama.cpp's
server, Ollama. Takes prompts (sent as one user message) or chat messages, and the turns
of a multi-turn session; gives tokens, streamed as SSE or whole. A message's content may
be typed parts (backends.content: text, image_url, video_url), written out in OpenAI's form."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from backends.base import InputKind, PromptSample, Sample
from backends.content import text_messages, wire_messages
from backends.http.openai import OpenAIOptions, OpenAIProtocol


class OpenAIChatOptions(OpenAIOptions):
    protocol: Literal["openai-chat"] = Field("openai-chat", description="OpenAI chat completions, POST {url}/chat/completions (url: http://host:port/v1); prompts or chat messages in (and multi-turn sessions), tokens out")


class OpenAIChat(OpenAIProtocol):
    name = "openai-chat"
    Options = OpenAIChatOptions
    aliases = ("openai", "openai-chat", "chat", "vllm", "sglang", "tgi", "llama.cpp", "llamacpp", "ollama")
    takes: ClassVar[tuple[InputKind, ...]] = ("prompt", "chat")
    path = "/chat/completions"
    chat = True

    def put_input(self, body: dict[str, Any], sample: PromptSample) -> None:
        body["messages"] = wire_messages(sample.chat())

    def input_tokens(self, sample: Sample) -> int:
        # what the server tokenizes is the messages after the model's chat template; their
        # images and videos are the server's to count (its usage), never the tokenizer's
        if isinstance(sample, PromptSample) and self.bound.tokenizer is not None:
            return self.bound.tokenizer.count_chat(text_messages(sample.chat()))
        return super().input_tokens(sample)

    @property
    def input_token_method(self) -> str:
        tokenizer = self.bound.tokenizer
        return tokenizer.chat_method if tokenizer is not None else super().input_token_method


PROTOCOL = OpenAIChat
