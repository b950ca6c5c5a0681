"""Small torch models for the PyTorch backend and parity tests, named as `tests.support.torch_models:NAME`.

`digits_mlp` is the embedded default model (harness.data.embedded, an ONNX file) rebuilt as an
nn.Module from the ONNX initializers, so onnxruntime and pytorch run the same weights.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


class TinyMLP(nn.Module):
    """8x8 images to 10 class scores; `example_inputs` declares the signature."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)
        self.example_inputs = (torch.zeros(1, 1, 8, 8),)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(image.flatten(1))))


def tiny_mlp(hidden: int = 32) -> nn.Module:
    return TinyMLP(hidden)


def tiny_cnn() -> nn.Module:
    """A convolution, so channels_last changes the memory format of something."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    model.example_inputs = (torch.zeros(1, 3, 16, 16),)
    return model


def bare_mlp() -> nn.Module:
    """No `example_inputs`: the signature must come from the input_shape option."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def not_a_module() -> str:
    return "a string"


class DigitsMLP(nn.Module):
    """The ONNX graph of harness.data.embedded: Flatten, Gemm, Relu, Gemm, Softmax."""

    def __init__(self, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> None:
        super().__init__()
        self.fc1 = nn.Linear(w1.shape[0], w1.shape[1])
        self.fc2 = nn.Linear(w2.shape[0], w2.shape[1])
        with torch.no_grad():  # ONNX Gemm computes x @ W + b; nn.Linear computes x @ W.T + b
            self.fc1.weight.copy_(w1.T)
            self.fc1.bias.copy_(b1)
            self.fc2.weight.copy_(w2.T)
            self.fc2.bias.copy_(b2)
        self.example_inputs = (torch.zeros(1, 1, 8, 8),)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(torch.relu(self.fc1(image.flatten(1)))), dim=1)


def digits_mlp(onnx_path: str | None = None) -> nn.Module:
    """The embedded model (or another ONNX file with the same graph) as an nn.Module."""
    import onnx
    from onnx import numpy_helper

    from harness.data.embedded import default_model

    graph = onnx.load(str(Path(onnx_path) if onnx_path else default_model())).graph
    init = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in graph.initializer}
    return DigitsMLP(init["w1"], init["b1"], init["w2"], init["b2"])


class Bench(nn.Module):
    """Big enough that compute, not the harness, sets the pace (benchmarks/bench_pytorch.py)."""

    def __init__(self, features: int = 512, hidden: int = 2048, classes: int = 1000) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, classes)
        )
        self.example_inputs = (torch.zeros(1, features),)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def bench_mlp() -> nn.Module:
    return Bench()
