"""A chat message's content as typed parts, in the forms OpenAI's and vLLM's chat APIs take.

A message's `content` is either a string or a tuple of parts:

    TextPart     {"type": "text", "text": ...}
    ImagePart    {"type": "image_url", "image_url": {"url": ...}}   a data URL or an http(s) URL
    VideoPart    {"type": "video_url", "video_url": {"url": ...}}   vLLM's form
    (an audio part, OpenAI's `input_audio`, joins `Part` the same way: a frozen dataclass
    with its own `wire()` and `kind`)

Datasets (harness.data.media) read and encode each file once, when the dataset loads, into
the part's `url`; a protocol only calls `wire()` while it builds the request body, before
the timed test. What a part says about its file (`nbytes`, `width`, `height`, `sha256`,
`source`) is what the report and the tests compare with what a server received.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Union


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    kind: ClassVar[str] = "text"

    def wire(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image: `url` is what is sent (a base64 data URL, or an http(s) URL the server fetches)."""

    url: str
    #: the file (or row) it was read from, for messages; "" when generated
    source: str = ""
    #: the encoded image's bytes, before base64 (0: unknown, an http URL)
    nbytes: int = 0
    width: int = 0
    height: int = 0
    #: "png", "jpeg", ...: the encoded format ("" unknown)
    format: str = ""
    #: sha256 of the encoded bytes, so that a server's copy can be checked against them
    sha256: str = ""
    kind: ClassVar[str] = "image"

    def wire(self) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": self.url}}


@dataclass(frozen=True, slots=True)
class VideoPart:
    """A video, as vLLM takes it (`video_url`): a data URL or an http(s) URL."""

    url: str
    source: str = ""
    nbytes: int = 0
    format: str = ""
    sha256: str = ""
    kind: ClassVar[str] = "video"

    def wire(self) -> dict[str, Any]:
        return {"type": "video_url", "video_url": {"url": self.url}}


#: one part of a message's content
Part = Union[TextPart, ImagePart, VideoPart]
#: a message's content: a string, or parts in order
Content = Union[str, tuple[Part, ...]]
#: the part kinds that carry media (counted per request, shown in the report's media section)
MEDIA_KINDS = ("image", "video")


def wire_content(content: Any) -> Any:
    """The content as the chat API takes it: a string as is, parts as their JSON objects."""
    if isinstance(content, tuple):
        return [p.wire() for p in content]
    return content


def wire_messages(messages: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Messages with their parts written out; a message of string content is passed as is
    (the same dict: a session's turn, built at dispatch, copies nothing)."""
    return [{**m, "content": wire_content(m["content"])} if isinstance(m.get("content"), tuple) else m
            for m in messages]


def content_text(content: Any) -> str:
    """The text of a content: a string, or its text parts joined by newlines."""
    if isinstance(content, tuple):
        return "\n".join(p.text for p in content if isinstance(p, TextPart))
    return "" if content is None else str(content)


def text_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages with only their text, for a local tokenizer's count (media are the server's to count)."""
    return [{**m, "content": content_text(m.get("content"))} for m in messages]


def media_parts(messages: Iterable[Mapping[str, Any]] | None) -> list[ImagePart | VideoPart]:
    """The media parts of all messages, in order."""
    out: list[ImagePart | VideoPart] = []
    for m in messages or ():
        content = m.get("content")
        if isinstance(content, tuple):
            out += [p for p in content if isinstance(p, (ImagePart, VideoPart))]
    return out


def prefixed(content: Any, text: str) -> Any:
    """The content with `text` put in front: of the string, or of its first text part (a
    text part of its own when it has none), so a marker reaches the model first."""
    if not isinstance(content, tuple):
        return text + ("" if content is None else str(content))
    for i, p in enumerate(content):
        if isinstance(p, TextPart):
            return (*content[:i], TextPart(text + p.text), *content[i + 1:])
    return (TextPart(text), *content)
