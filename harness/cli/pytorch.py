"""`harness parity` and `harness export-onnx`: thin commands over harness.run.parity (tensor backends),
harness.run.text_parity_runs and harness.analysis.text_parity (generative backends) and harness.run.export_onnx."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from harness.cli._common import console, handle_errors
from harness.config.run_config import parse_override
from harness.errors import EXIT_NEGATIVE, ConfigError
from harness.report.parity_view import render_parity, render_text_parity, render_vector_parity


def _options(items: tuple[str, ...]) -> dict[str, Any]:
    return dict(parse_override(item) for item in items)


@click.command(short_help="Two backends on the same samples (or prompts): do their outputs (answers) agree?")
@click.option("--model-a", help="model of side A (the reference)")
@click.option("--backend-a", default="onnxruntime", show_default=True)
@click.option("--set-a", "set_a", multiple=True, metavar="KEY=VALUE", help="a backend option of side A")
@click.option("--model-b", help="model of side B")
@click.option("--backend-b", default="pytorch", show_default=True)
@click.option("--set-b", "set_b", multiple=True, metavar="KEY=VALUE", help="a backend option of side B")
@click.option("--dataset", default="synthetic", show_default=True,
              help="tensors: synthetic[:n=N,seed=S] | digits | DIR; prompts (streaming backends): prompts.jsonl | "
              "mlperf:SET:FILE | synthetic:isl=..,osl=..")
@click.option("--samples", default=256, show_default=True, type=click.IntRange(min=1))
@click.option("--batch", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--atol", default=1e-4, show_default=True, type=float, help="absolute tolerance per element")
@click.option("--rtol", default=1e-3, show_default=True, type=float, help="tolerance relative to side A")
@click.option("--min-top1", default=0.99, show_default=True, type=float, help="least top-1 agreement for class scores")
@click.option("--run-a", type=click.Path(path_type=Path), help="generative: compare this finished accuracy run folder ...")
@click.option("--run-b", type=click.Path(path_type=Path), help="... with this one (nothing is run)")
@click.option("--first-ids", default=32, show_default=True, type=click.IntRange(min=1),
              help="generative: compare the first N token ids of each answer")
@click.option("--min-text-match", default=1.0, show_default=True, type=click.FloatRange(0, 1),
              help="generative: least share of samples whose texts are equal (greedy on both sides: 1.0)")
@click.option("--min-cosine", default=0.999, show_default=True, type=click.FloatRange(-1, 1),
              help="embeddings: least cosine similarity of each sample's two vectors")
@click.option("--output-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
              help="generative: where the two runs' folders go (both are kept)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@handle_errors
def parity(
    model_a: str | None,
    backend_a: str,
    set_a: tuple[str, ...],
    model_b: str | None,
    backend_b: str,
    set_b: tuple[str, ...],
    dataset: str,
    samples: int,
    batch: int,
    seed: int,
    atol: float,
    rtol: float,
    min_top1: float,
    run_a: Path | None,
    run_b: Path | None,
    first_ids: int,
    min_text_match: float,
    min_cosine: float,
    output_dir: Path,
    as_json: bool,
) -> None:
    """Run two backend configurations on the same samples and compare outputs (exit 1: they disagree).

    Two streaming backends (e.g. --backend-a pytorch-llm --backend-b http) each run in
    AccuracyOnly mode on the same prompts, and their answers are compared: exact match of
    the texts and of the first N token ids, ROUGE of B against A, and the first sample and
    token where they part; embeddings runs, each sample's two vectors by cosine similarity
    (min and mean, against --min-cosine). --run-a/--run-b compare two finished accuracy
    runs instead.
    """
    from harness.run.parity import Side, Tolerances, run_parity

    if run_a is not None or run_b is not None:
        if run_a is None or run_b is None:
            raise ConfigError("--run-a and --run-b go together: the two accuracy run folders to compare")
        from harness.analysis.text_parity import compare_folders

        _text_verdict(compare_folders(run_a, run_b, first_ids=first_ids, min_text_match=min_text_match,
                                      min_cosine=min_cosine), as_json)
    side_a, side_b = Side(backend_a, model_a, _options(set_a)), Side(backend_b, model_b, _options(set_b))
    from harness.run.text_parity_runs import both_streaming, run_text_parity

    if both_streaming(side_a, side_b):
        _text_verdict(run_text_parity(side_a, side_b, dataset=dataset, output_dir=output_dir, seed=seed,
                                      first_ids=first_ids, min_text_match=min_text_match, min_cosine=min_cosine), as_json)
    result = run_parity(
        Side(backend_a, model_a, _options(set_a)),
        Side(backend_b, model_b, _options(set_b)),
        dataset=dataset,
        samples=samples,
        batch=batch,
        seed=seed,
        tolerances=Tolerances(atol, rtol, min_top1),
    )
    if as_json:
        console.print_json(json.dumps({**asdict(result), "agree": result.agree}, default=str))
    else:
        render_parity(result, console)
    sys.exit(0 if result.agree else EXIT_NEGATIVE)


def _text_verdict(result: Any, as_json: bool) -> None:
    from harness.analysis.text_parity import as_dict

    if as_json:
        console.print_json(json.dumps(as_dict(result)))
    elif hasattr(result, "cosine_min"):  # embeddings' vectors (harness.analysis.vector_parity)
        render_vector_parity(result, console)
    else:
        render_text_parity(result, console)
    sys.exit(0 if result.agree else EXIT_NEGATIVE)


def _shape(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError as e:
        raise ConfigError(f"--input-shape {text!r}: expected integers like 3,224,224 (one sample, no batch dim)") from e


@click.command("export-onnx", short_help="Export a PyTorch model to ONNX and check it under onnxruntime.")
@click.argument("model")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="the .onnx file to write")
@click.option("--weights", help="state_dict file for a module:function model")
@click.option("--model-kwarg", "model_kwargs", multiple=True, metavar="KEY=VALUE", help="an argument of the callable")
@click.option("--input-shape", help="per-sample shape when the model declares none, e.g. 3,224,224")
@click.option("--input-dtype", help="numpy dtype of the input (default float32)")
@click.option("--input-name", help="name of the single input")
@click.option("--opset", default=17, show_default=True, type=click.IntRange(min=7))
@click.option("--exporter", type=click.Choice(["auto", "dynamo", "torchscript"]), default="auto", show_default=True)
@handle_errors
def export_onnx(
    model: str,
    out: Path,
    weights: str | None,
    model_kwargs: tuple[str, ...],
    input_shape: str | None,
    input_dtype: str | None,
    input_name: str | None,
    opset: int,
    exporter: str,
) -> None:
    """Export a PyTorch model (module:function, TorchScript, .pt2) to ONNX and check it under onnxruntime."""
    from pydantic import ValidationError

    from harness.run.export_onnx import export_onnx as export

    try:
        result = export(
            model,
            out,
            weights=weights,
            model_kwargs=_options(model_kwargs),
            input_shape=_shape(input_shape),
            input_dtype=input_dtype,
            input_name=input_name,
            opset=opset,
            exporter=exporter,  # type: ignore[arg-type]  # click.Choice restricts it
        )
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"--{key.replace('_', '-')}: {err['msg']} (got {err.get('input')!r})") from e
    inputs = ", ".join(f"{s.name} [{', '.join('N' if d is None else str(d) for d in s.shape)}] {s.dtype}" for s in result.inputs)
    console.print(f"[green]wrote[/] {result.path} ({result.exporter} exporter, opset {result.opset}, {result.seconds:.2f} s)", highlight=False)
    console.print(f"  inputs: {inputs}; outputs: {', '.join(result.output_names)}", highlight=False)
    if result.max_abs_diff is not None:
        console.print(f"  onnxruntime vs torch on one batch: max abs diff {result.max_abs_diff:.3g}")
    if result.note:
        console.print(f"  note: {result.note}", highlight=False)
