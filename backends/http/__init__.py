"""A remote model behind HTTP, in one of the wire protocols of backends/http/protocols
(KServe v2 over HTTP or gRPC, templated JSON, the OpenAI completions/chat APIs, streaming
SSE or not, OpenAI embeddings and audio transcriptions, rerank) or a third party's (the
`harness.http_protocols` entry-point group).

The backend only knows *how* to send: it turns a sample into a request body (`prepare`,
at QSL load time, so the timed path posts ready bytes) and a response into `Chunk`s
(`stream`). The event-loop SUT (`harness.child.stream_sut`) owns the loop, concurrency,
timestamps and completion. Events travel as chunks (backends.base.Chunk):

    Chunk(n_tokens=0, headers=status)   response headers arrived
    Chunk(n_tokens=0, retry=reason)     an attempt failed and is being retried
    Chunk(text, n_tokens=k)             content: k tokens as counted here
    Chunk(n_tokens=0, usage=Usage(..))  the server's token counts (backends.base.Usage)
    Chunk(n_tokens=0, output=value)     a whole answer (KServe tensor, JSON value)
    Chunk(text, k, reasoning=True)      reasoning: k tokens, timed, kept apart from the answer
    Chunk(n_tokens=k)                   k tokens of a tool call's name or arguments pieces
    Chunk(n_tokens=0, tool_calls=[..])  the stream's tool calls, reassembled, at its end

Failures raise `RequestFailed(reason, detail)`; the SUT records "reason: detail", and the
summary groups failures by reason:

    http_<status>     the server answered with status >= 400
    connect           no connection (refused, DNS, TLS handshake)
    disconnected      the server closed the connection before answering
    timeout           connect, read (no bytes for read_timeout_s) or total timeout
    malformed_json    a body that is not the JSON the protocol promises
    http_3xx          a redirect (the client follows none: the detail names the Location)
    unsupported_encoding  a compressed body (the client asks for none and decodes none)
    malformed_sse     an SSE event whose data is not JSON, or a field of the wrong type
                      (choices not a list, choices[0] or delta not an object, content,
                      reasoning_content or a tool call's name/arguments not a string,
                      tool_calls not a list, token_ids not a list, usage not an object)
    malformed_tool_call  a streamed tool call whose reassembled arguments are not JSON
                      (the call is still kept in tokens.jsonl, with `json`: false)
    server_error      an error object inside a 200 stream
    empty_output      a well-formed answer with no content
    truncated_stream  the stream ended (or broke) before [DONE] or a finish_reason
    grpc_<STATUS>     gRPC (kserve-v2-grpc): a status that is not OK, e.g. grpc_NOT_FOUND,
                      grpc_INVALID_ARGUMENT, grpc_UNAVAILABLE (one that could not connect
                      is `connect`, DEADLINE_EXCEEDED is `timeout`); the detail is its details
    malformed_protobuf  gRPC: an answer that is not the protobuf message the protocol promises
    not_ready         gRPC, at load: ServerReady answered false
    rerank_index      a rerank result's index out of range, given twice, or not an integer
    rerank_count      rerank results more than the documents (or fewer, without top_n)
    rerank_score      a rerank result's score that is not a finite number
    vector_dimension  an embedding whose length is not the one asked for (`dimensions`) or
                      the first answer's
    vector_nan        an embedding with a NaN or infinite value
    vector_shape      an embedding that is not a flat list of numbers (one per token: the
                      server pools none)

The event-loop SUT adds its own, in accuracy mode: no_token_ids, short_output,
malformed_token_ids, tokenize; and for a request of several inputs, output_count (not one
output per input) (harness.child.stream_sut).

Reasoning: a chat delta's `reasoning_content` (or `reasoning`) is counted and kept apart
from the answer (Chunk.reasoning); with `reasoning_parser: think_tags`, so are
`<think>...</think>` spans inside the content (an option: a literal "<think>" may be
an answer). Tool calls stream as `delta.tool_calls` pieces, reassembled per index.

The package:
    backend.py       the transport: load, prepare, send, retry, stream (HttpBackend), and
                     its options, the union of the protocols' keyed by `protocol` (HttpOptions)
    options.py       the options every protocol shares (BaseHttpOptions)
    protocol.py      what a protocol is (HttpProtocol), which the transport asks, and what
                     carries its requests (Transport: the client below, or the protocol's own)
    registry.py      the protocols by name: protocols/, then the entry points
    protocols/       one module per protocol: its options, endpoint, encoding, decoding
                     (and a .proto a gRPC protocol compiles at load)
    openai.py        what the OpenAI protocols share
    wire.py          shared wire formats: redaction, OpenAI's SSE, tool calls and usage
    structured.py    structured outputs: the forms servers take a JSON Schema in, as data
    tokenizer.py     local token counting (the `tokenizer` option)
    credentials.py   the credential checks of the options
    client.py        the keep-alive client (asyncio + httptools)
"""

from backends.http.backend import HttpBackend, HttpOptions, PreparedRequest

__all__ = ["HttpBackend", "HttpOptions", "PreparedRequest"]
