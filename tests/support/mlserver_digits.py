"""A digits classifier for MLServer (KServe v2, `mlserver-sklearn`), written into a folder
MLServer starts from, by the MLServer venv's own Python: the model is pickled by the same
scikit-learn that will load it.

    MLSERVER_PYTHON -m tests.support.mlserver_digits OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def write(out: Path) -> None:
    import joblib
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    x, y = load_digits(return_X_y=True)
    # The harness's digits samples are 1x8x8 images (the embedded model's input); the
    # pipeline flattens them, with numpy's own reshape (pickled by reference, no test code).
    flatten = FunctionTransformer(np.reshape, kw_args={"shape": (-1, 64)})
    model = make_pipeline(flatten, LogisticRegression(max_iter=2000)).fit(x.reshape(-1, 1, 8, 8) / 16.0, y)
    folder = out / "digits"
    folder.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, folder / "model.joblib")
    (folder / "model-settings.json").write_text(json.dumps({
        "name": "digits",
        "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": "./model.joblib", "version": "1"},
        "inputs": [{"name": "image", "datatype": "FP32", "shape": [-1, 1, 8, 8]}],
        "outputs": [{"name": "predict", "datatype": "INT64", "shape": [-1]}],
    }, indent=2))


if __name__ == "__main__":
    write(Path(sys.argv[1]))
