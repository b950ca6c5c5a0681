"""The embedded default: a real model on real data, with no download.

scikit-learn ships the UCI handwritten-digits images (8x8). At first use we train a small
MLP on the training split with plain numpy (a few seconds), write it as ONNX with the
`onnx` helpers, and cache it in the user cache dir; `harness run` with no arguments then
benchmarks it under ONNX Runtime on the held-out test split, whose labels give accuracy.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

TEST_FRACTION = 0.25
HIDDEN = 64
EPOCHS = 300
SEED = 0
MODEL_VERSION = "digits-mlp-v1"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loadgen-harness"


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    images = (d.images / 16.0).astype(np.float32)[:, None, :, :]  # N,1,8,8 in [0,1]
    return images, d.target.astype(np.int64)


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    images, labels = _digits()
    order = np.random.default_rng(SEED).permutation(len(labels))
    n_test = int(len(labels) * TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return images[train], labels[train], images[test], labels[test]


def digits_test_split() -> tuple[np.ndarray, np.ndarray]:
    _, _, x, y = _split()
    return x, y


def _train(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """Full-batch gradient descent with momentum on softmax cross-entropy."""
    rng = np.random.default_rng(SEED)
    x = x.reshape(len(x), -1).astype(np.float64)
    w1 = rng.normal(0, np.sqrt(2 / x.shape[1]), (x.shape[1], HIDDEN))
    b1 = np.zeros(HIDDEN)
    w2 = rng.normal(0, np.sqrt(2 / HIDDEN), (HIDDEN, 10))
    b2 = np.zeros(10)
    params = [w1, b1, w2, b2]
    velocity = [np.zeros_like(p) for p in params]
    onehot = np.eye(10)[y]
    for _ in range(EPOCHS):
        h = np.maximum(x @ w1 + b1, 0)
        logits = h @ w2 + b2
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        g_logits = (p - onehot) / len(x)
        g_h = (g_logits @ w2.T) * (h > 0)
        grads = [x.T @ g_h, g_h.sum(0), h.T @ g_logits, g_logits.sum(0)]
        for i, g in enumerate(grads):
            velocity[i] = 0.9 * velocity[i] - 0.5 * g
            params[i] += velocity[i]
    return [p.astype(np.float32) for p in params]


def _to_onnx(params: list[np.ndarray]) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    w1, b1, w2, b2 = params
    nodes = [
        helper.make_node("Flatten", ["image"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_mlp",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(a, n) for a, n in zip(params, ["w1", "b1", "w2", "b2"], strict=True)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="loadgen-harness")
    model.ir_version = 8
    return model.SerializeToString()


def default_model() -> Path:
    """Path of the cached embedded model, training and exporting it on first use."""
    path = cache_dir() / f"{MODEL_VERSION}.onnx"
    if path.exists():
        return path
    x, y, _, _ = _split()
    data = _to_onnx(_train(x, y))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)  # atomic: concurrent first runs never see half a file
    return path


