"""LLM helper commands (kv-cache, accuracy)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.cli._common import console, handle_errors


def _fmt(b: float) -> str:
    return f"{b / 1e9:,.3f} GB ({b / 2**30:,.3f} GiB)" if b >= 1e6 else f"{b / 1e3:,.1f} kB"


@click.command("kv-cache", short_help="KV-cache memory per token, sequence and batch; what fits.")
@click.option("--model-config", type=click.Path(path_type=Path), help="a Hugging Face config.json")
@click.option("--layers", type=int)
@click.option("--kv-heads", type=int, help="key/value heads (GQA: fewer than attention heads)")
@click.option("--head-dim", type=int)
@click.option("--dtype", type=click.Choice(["fp32", "fp16", "bf16", "fp8", "int8", "int4"]),
              help="the cache's dtype [default: the config's torch_dtype, else fp16, and said so]")
@click.option("--seq-len", type=int, required=True, help="tokens per sequence (prompt + output)")
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--memory-gb", type=float, help="device memory budget, 1 GB = 1e9 bytes")
@click.option("--weights-gb", type=float, default=0.0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def kv_cache(model_config, layers, kv_heads, head_dim, dtype, seq_len, batch, memory_gb, weights_gb, as_json) -> None:
    """KV-cache bytes per token, per sequence and per batch; max concurrent sequences."""
    from harness.errors import ConfigError
    from harness.results.kv_cache import DEFAULT_DTYPE, KvShape, estimate, from_hf_config, hf_config_dtype

    if dtype is not None:
        dtype_source = f"{dtype} from --dtype"
    elif model_config:
        dtype, dtype_source = hf_config_dtype(model_config)
    else:
        dtype, dtype_source = DEFAULT_DTYPE, f"{DEFAULT_DTYPE} by default; pass --dtype for the dtype the model runs in"
    if model_config:
        shape = from_hf_config(model_config, dtype)
    elif None in (layers, kv_heads, head_dim):
        raise ConfigError("kv-cache: give --model-config, or all of --layers, --kv-heads and --head-dim")
    else:
        shape = KvShape(layers, kv_heads, head_dim, dtype)
    est = estimate(shape, seq_len, batch, memory_gb, weights_gb)
    if as_json:
        console.print_json(json.dumps({**est.to_dict(), "dtype_source": dtype_source}))
        return
    s = est.shape
    console.print(
        f"KV cache: 2 × {s['layers']} layers × {s['kv_heads']} kv heads × {s['head_dim']} head dim × "
        f"{est.bytes_per_token / (2 * s['layers'] * s['kv_heads'] * s['head_dim']):g} bytes ({s['dtype']})"
    )
    console.print(f"  dtype              {dtype_source}", highlight=False)
    console.print(f"  per token          {est.bytes_per_token:,.0f} bytes")
    console.print(f"  per sequence       {_fmt(est.bytes_per_sequence)} at {seq_len:,} tokens")
    console.print(f"  batch of {batch:<9,d} {_fmt(est.bytes_for_batch)}")
    if est.max_concurrent_sequences is not None:
        console.print(
            f"  fits               {est.max_concurrent_sequences:,} sequences of {seq_len:,} tokens in "
            f"{memory_gb:g} GB − {weights_gb:g} GB weights"
        )
    console.print(f"  [dim]left out: {'; '.join(est.left_out)}[/]")


@click.command("accuracy", short_help="Score a finished run's generated text from its folder alone.")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="the summary's text_accuracy section as JSON")
@handle_errors
def accuracy(run_dir: Path, as_json: bool) -> None:
    """(Re)score RUN_DIR's answers against the references it recorded: ROUGE or exact match, with
    sample counts and 95% confidence intervals, the figures its summary.json holds."""
    from harness.results.text_accuracy import lines, score_folder

    section = score_folder(run_dir)
    if as_json:
        console.print_json(json.dumps(section))
        return
    for line in lines(section):
        console.print(line, highlight=False, soft_wrap=True)
