"""The http backend's `tokenizer` option given a Hugging Face tokenizer folder: SmolLM2's,
made from the same GGUF the .gguf tests read (tests/support/smollm2_hf.py).

Its counts and ids must be transformers' own (`AutoTokenizer`: what vLLM tokenizes with) and
llama.cpp's for the same vocabulary, a chat's count must be `apply_chat_template`'s, with the
template in either file transformers reads it from; in accuracy mode an answer the server
sent without ids is logged as the folder's ids. What it cannot take is one line naming the
three kinds it can. The counts against a real server: tests/real_servers/test_vllm.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends.http.tokenizer import Tokenizer
from harness.errors import ConfigError
from tests.support.http_servers import ServerThread, Timing, openai_app
from tests.support.smollm2_hf import gguf_path, tokenizer_folder

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

TEXTS = [
    "The cat sat on the mat.",
    "  leading spaces, trailing\tspaces  \n",
    "Zürich, naïve café — 東京 🚀",
    "def f(x):\n    return x ** 2  # squared",
    "1234567890 3.14159 -42",
]
CHATS = [
    [{"role": "user", "content": "Summarise the news in one sentence."}],
    [{"role": "system", "content": "You answer in French."}, {"role": "user", "content": "Hello there!"}],
    [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And times 3? Zürich 🚀"}],
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokenizer_folder(tmp_path_factory.mktemp("smollm2") / "tokenizer")


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def _chat_ids(reference: Any, messages: list[dict[str, str]]) -> list[int]:
    out = reference.apply_chat_template(messages, add_generation_prompt=True)  # tokenize=True
    return list(out if isinstance(out, list) else out["input_ids"])  # transformers 4: a list; 5: a BatchEncoding


def test_counts_and_ids_are_transformers_and_llama_cpps(folder, reference):
    tok, gguf = Tokenizer(str(folder)), Tokenizer(str(gguf_path()))
    assert tok.makes_ids and tok.chat_method == "tokenizer, chat template"
    for text in TEXTS:
        expected = reference(text, add_special_tokens=False)["input_ids"]
        assert tok.ids(text) == expected == gguf.ids(text), text
        assert tok.count(text) == len(expected) > 0, text
    # a special token written out in a prompt is that token, as the server parses it
    assert tok.ids("<|im_end|>") == [reference.convert_tokens_to_ids("<|im_end|>")]
    assert tok.count("") == 0 and tok.ids("") == []


def test_a_chat_counts_as_apply_chat_template_renders_and_tokenizes_it(folder, reference):
    tok, gguf = Tokenizer(str(folder)), Tokenizer(str(gguf_path()))
    for messages in CHATS:
        expected = len(_chat_ids(reference, messages))
        # the template adds role markers (and SmolLM2's a default system prompt): more than the contents
        assert tok.count_chat(messages) == expected == gguf.count_chat(messages), messages
        assert expected > sum(tok.count(m["content"]) for m in messages) + 2 * len(messages)


def test_the_template_is_read_from_tokenizer_config_as_from_its_own_file(folder, reference, tmp_path):
    # transformers 4 kept the template in tokenizer_config.json; 5 writes chat_template.jinja
    old = shutil.copytree(folder, tmp_path / "old")
    template = (old / "chat_template.jinja").read_text()
    (old / "chat_template.jinja").unlink()
    config = json.loads((old / "tokenizer_config.json").read_text())
    (old / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    tok = Tokenizer(str(old))
    for messages in CHATS:
        assert tok.count_chat(messages) == len(_chat_ids(reference, messages))
    # without a template: the contents only, and the summary says so
    (old / "tokenizer_config.json").write_text(json.dumps(config))
    bare = Tokenizer(str(old))
    assert bare.chat_method == "tokenizer, message contents only"
    assert bare.count_chat(CHATS[1]) == sum(bare.count(m["content"]) for m in CHATS[1])


@pytest.mark.parametrize("spec, what", [
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "no such file or folder (nothing is downloaded)"),
    ("{tmp}/missing", "no such file or folder (nothing is downloaded)"),
    ("{tmp}/empty", "a folder without tokenizer.json"),
    ("{tmp}/tokenizer.json", "not a .gguf file"),
])
def test_what_it_cannot_take_is_one_line_naming_the_three_kinds(tmp_path, spec, what):
    (tmp_path / "tokenizer.json").write_text("{}")  # a file given alone is not its folder
    (tmp_path / "empty").mkdir()
    spec = spec.format(tmp=tmp_path)
    with pytest.raises(ConfigError) as info:
        Tokenizer(spec)
    message = str(info.value)
    assert message == (f"tokenizer {spec!r}: {what}: give 'whitespace', a .gguf file "
                       "or a local tokenizer folder (tokenizer.json)")
    assert "\n" not in message


@pytest.mark.parametrize("content", ['{"version": "1.0", "model": ', "{}"])
def test_a_broken_tokenizer_json_is_one_line(tmp_path, content):
    (tmp_path / "tokenizer.json").write_text(content)
    with pytest.raises(ConfigError, match=r"transformers cannot load this folder \((KeyError|JSONDecodeError): ") as info:
        Tokenizer(str(tmp_path))
    assert "\n" not in str(info.value)


ANSWERS = {"request 0": "The cat sat on the mat.", "request 1": "Stocks fell — sharply — in Zürich on Monday."}


def test_accuracy_mode_logs_the_folders_ids_of_answers_sent_without_ids(run_harness, folder, reference, tmp_path):
    keys = list(ANSWERS)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": k}) + "\n" for k in keys))
    with ServerThread(openai_app(Timing(), answers=ANSWERS)) as srv:  # no token_ids: llama.cpp-like
        run_dir, s = run_harness(
            backend="http", scenario="Offline", mode="AccuracyOnly", dataset=str(prompts),
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", "tokenizer": str(folder)},
        )
    entries = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    logged = {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), dtype="<i4").tolist() for e in entries}
    for i, k in enumerate(keys):
        assert logged[i] == reference(ANSWERS[k], add_special_tokens=False)["input_ids"]
        assert reference.decode(logged[i]) == ANSWERS[k]
    assert s["tokens"]["output_ids_source"] == {"tokenizer": 2}
