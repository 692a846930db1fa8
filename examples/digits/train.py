"""Train edgekit's built-in example: a small CNN on scikit-learn's bundled 8x8 digits, numpy only.

    python examples/digits/train.py [--out examples/digits/build]

writes ``digits.onnx`` (opset 13: Conv -> BatchNormalization -> Relu -> MaxPool -> Conv -> Relu -> MaxPool ->
Flatten -> Gemm -> Softmax), ``calib.npz`` (200 training samples under the input name) and ``val.npz`` (the
held-out test split with ``labels``), plus ``metrics.json`` with the held-out accuracy. No network: the
data ship with scikit-learn. Training is deterministic (fixed seed) and takes a few seconds on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path(__file__).resolve().parent / "build"
INPUT_NAME = "input"
OUTPUT_NAME = "probs"
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.1
TEST_SIZE = 360
CALIB_SIZE = 200

Params = dict[str, np.ndarray]


@dataclass(frozen=True)
class TrainOptions:
    """Training hyper-parameters (the defaults reach ~98% held-out accuracy)."""

    seed: int = 0
    epochs: int = 12
    batch_size: int = 32
    learning_rate: float = 0.01
    softmax: bool = True


@dataclass(frozen=True)
class TrainResult:
    model: Path
    calib: Path
    val: Path
    metrics: Path
    accuracy: float
    train_seconds: float


# ------------------------------------------------------------------------------------------------ data


def load_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The bundled digits as [N,1,8,8] float32 in [0,1] (pixels 0..16 / 16), stratified train/test split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_SIZE, stratify=y, random_state=seed, shuffle=True
    )
    return x_train, y_train, x_test, y_test


# ---------------------------------------------------------------------------------------------- layers


def _im2col(x: np.ndarray) -> np.ndarray:
    """[N,C,H,W] -> [N*H*W, C*9] patches of a 3x3 window with padding 1 (stride 1)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, c, 3, 3, h, w), dtype=x.dtype)
    for i in range(3):
        for j in range(3):
            cols[:, :, i, j] = padded[:, :, i : i + h, j : j + w]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * h * w, c * 9)


def _col2im(cols: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The adjoint of ``_im2col``: scatter-add patch gradients back to [N,C,H,W]."""
    n, c, h, w = shape
    cols = cols.reshape(n, h, w, c, 3, 3).transpose(0, 3, 4, 5, 1, 2)
    padded = np.zeros((n, c, h + 2, w + 2), dtype=cols.dtype)
    for i in range(3):
        for j in range(3):
            padded[:, :, i : i + h, j : j + w] += cols[:, :, i, j]
    return padded[:, :, 1:-1, 1:-1]


def _conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, _, h, w = x.shape
    cols = _im2col(x)
    out = cols @ weight.reshape(weight.shape[0], -1).T + bias
    return out.reshape(n, h, w, -1).transpose(0, 3, 1, 2), cols


def _conv_backward(
    grad: np.ndarray, cols: np.ndarray, x_shape: tuple[int, ...], weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = grad.transpose(0, 2, 3, 1).reshape(-1, weight.shape[0])
    d_weight = (g.T @ cols).reshape(weight.shape)
    d_bias = g.sum(axis=0)
    d_x = _col2im(g @ weight.reshape(weight.shape[0], -1), x_shape)
    return d_x, d_weight, d_bias


def _maxpool(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, c, h, w = x.shape
    windows = x.reshape(n, c, h // 2, 2, w // 2, 2)
    out = windows.max(axis=(3, 5))
    mask = windows == out[:, :, :, None, :, None]
    mask = mask / mask.sum(axis=(3, 5), keepdims=True)  # split the gradient between tied maxima
    return out, mask


def _maxpool_backward(grad: np.ndarray, mask: np.ndarray) -> np.ndarray:
    n, c, h2, _, w2, _ = mask.shape
    return (mask * grad[:, :, :, None, :, None]).reshape(n, c, h2 * 2, w2 * 2).astype(grad.dtype)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ---------------------------------------------------------------------------------------------- model


def init_params(rng: np.random.Generator) -> Params:
    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {
        "conv1.weight": he((8, 1, 3, 3), 9),
        "conv1.bias": np.zeros(8, np.float32),
        "bn1.scale": np.ones(8, np.float32),
        "bn1.bias": np.zeros(8, np.float32),
        "bn1.mean": np.zeros(8, np.float32),
        "bn1.var": np.ones(8, np.float32),
        "conv2.weight": he((16, 8, 3, 3), 72),
        "conv2.bias": np.zeros(16, np.float32),
        "fc.weight": he((10, 64), 64),
        "fc.bias": np.zeros(10, np.float32),
    }


TRAINABLE = (
    "conv1.weight",
    "conv1.bias",
    "bn1.scale",
    "bn1.bias",
    "conv2.weight",
    "conv2.bias",
    "fc.weight",
    "fc.bias",
)


def forward(params: Params, x: np.ndarray, softmax: bool = True) -> np.ndarray:
    """Inference (BatchNormalization with running statistics): what the exported ONNX graph computes."""
    h, _ = _conv(x, params["conv1.weight"], params["conv1.bias"])
    inv_std = 1.0 / np.sqrt(params["bn1.var"] + np.float32(BN_EPSILON))
    h = (h - params["bn1.mean"][:, None, None]) * (params["bn1.scale"] * inv_std)[:, None, None]
    h = h + params["bn1.bias"][:, None, None]
    h, _ = _maxpool(np.maximum(h, 0))
    h, _ = _conv(h, params["conv2.weight"], params["conv2.bias"])
    h, _ = _maxpool(np.maximum(h, 0))
    logits = h.reshape(h.shape[0], -1) @ params["fc.weight"].T + params["fc.bias"]
    return _softmax(logits) if softmax else logits


def _train_step(params: Params, x: np.ndarray, y: np.ndarray) -> tuple[float, Params]:
    """Forward in training mode (batch statistics), cross-entropy loss, gradients of TRAINABLE."""
    n = x.shape[0]
    c1, cols1 = _conv(x, params["conv1.weight"], params["conv1.bias"])
    mean = c1.mean(axis=(0, 2, 3))
    var = c1.var(axis=(0, 2, 3))
    inv_std = 1.0 / np.sqrt(var + np.float32(BN_EPSILON))
    xhat = (c1 - mean[:, None, None]) * inv_std[:, None, None]
    b1 = xhat * params["bn1.scale"][:, None, None] + params["bn1.bias"][:, None, None]
    r1 = np.maximum(b1, 0)
    p1, mask1 = _maxpool(r1)
    c2, cols2 = _conv(p1, params["conv2.weight"], params["conv2.bias"])
    r2 = np.maximum(c2, 0)
    p2, mask2 = _maxpool(r2)
    flat = p2.reshape(n, -1)
    probs = _softmax(flat @ params["fc.weight"].T + params["fc.bias"])
    loss = float(-np.log(probs[np.arange(n), y] + 1e-12).mean())

    grads: Params = {}
    d_logits = probs.copy()
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    grads["fc.weight"] = d_logits.T @ flat
    grads["fc.bias"] = d_logits.sum(axis=0)
    d_p2 = (d_logits @ params["fc.weight"]).reshape(p2.shape)
    d_c2 = _maxpool_backward(d_p2, mask2) * (c2 > 0)
    d_p1, grads["conv2.weight"], grads["conv2.bias"] = _conv_backward(
        d_c2, cols2, p1.shape, params["conv2.weight"]
    )
    d_b1 = _maxpool_backward(d_p1, mask1) * (b1 > 0)
    grads["bn1.scale"] = (d_b1 * xhat).sum(axis=(0, 2, 3))
    grads["bn1.bias"] = d_b1.sum(axis=(0, 2, 3))
    d_xhat = d_b1 * params["bn1.scale"][:, None, None]
    m = n * c1.shape[2] * c1.shape[3]
    d_c1 = (
        (
            m * d_xhat
            - d_xhat.sum(axis=(0, 2, 3))[:, None, None]
            - xhat * (d_xhat * xhat).sum(axis=(0, 2, 3))[:, None, None]
        )
        * inv_std[:, None, None]
        / m
    )
    _, grads["conv1.weight"], grads["conv1.bias"] = _conv_backward(
        d_c1, cols1, x.shape, params["conv1.weight"]
    )
    # Running statistics for inference, as a framework's BatchNorm layer keeps them.
    unbiased = var * m / max(m - 1, 1)
    params["bn1.mean"] = ((1 - BN_MOMENTUM) * params["bn1.mean"] + BN_MOMENTUM * mean).astype(np.float32)
    params["bn1.var"] = ((1 - BN_MOMENTUM) * params["bn1.var"] + BN_MOMENTUM * unbiased).astype(np.float32)
    return loss, {k: g.astype(np.float32) for k, g in grads.items()}


def train(
    x: np.ndarray, y: np.ndarray, options: TrainOptions, log: Callable[[str], None] = lambda _: None
) -> Params:
    """Adam on mini-batches; deterministic for a given seed."""
    from threadpoolctl import threadpool_limits  # ships with scikit-learn

    # The matrices are tiny: BLAS threads cost more than they give (4x slower with 2 threads).
    with threadpool_limits(limits=1, user_api="blas"):
        return _train(x, y, options, log)


def _train(x: np.ndarray, y: np.ndarray, options: TrainOptions, log: Callable[[str], None]) -> Params:
    rng = np.random.default_rng(options.seed)
    params = init_params(rng)
    adam_m = {k: np.zeros_like(params[k]) for k in TRAINABLE}
    adam_v = {k: np.zeros_like(params[k]) for k in TRAINABLE}
    beta1, beta2, step = 0.9, 0.999, 0
    for epoch in range(options.epochs):
        order = rng.permutation(len(x))
        losses = []
        for start in range(0, len(x), options.batch_size):
            batch = order[start : start + options.batch_size]
            if len(batch) < 2:  # batch statistics need more than one sample
                continue
            loss, grads = _train_step(params, x[batch], y[batch])
            losses.append(loss)
            step += 1
            lr = options.learning_rate * np.sqrt(1 - beta2**step) / (1 - beta1**step)
            for k in TRAINABLE:
                adam_m[k] = beta1 * adam_m[k] + (1 - beta1) * grads[k]
                adam_v[k] = beta2 * adam_v[k] + (1 - beta2) * grads[k] ** 2
                params[k] = (params[k] - lr * adam_m[k] / (np.sqrt(adam_v[k]) + 1e-8)).astype(np.float32)
        log(f"epoch {epoch + 1}/{options.epochs}: loss {np.mean(losses):.4f}")
    return params


# --------------------------------------------------------------------------------------------- export


def to_onnx(params: Params, softmax: bool = True):
    """The trained network as an opset-13 ONNX model with a BatchNormalization node after the first Conv."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.ascontiguousarray(v, dtype=np.float32), name=k) for k, v in params.items()
    ]
    logits = "logits" if softmax else OUTPUT_NAME
    nodes = [
        helper.make_node(
            "Conv",
            [INPUT_NAME, "conv1.weight", "conv1.bias"],
            ["conv1"],
            "conv1",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node(
            "BatchNormalization",
            ["conv1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"],
            ["bn1"],
            "bn1",
            epsilon=BN_EPSILON,
        ),
        helper.make_node("Relu", ["bn1"], ["relu1"], "relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], "pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node(
            "Conv",
            ["pool1", "conv2.weight", "conv2.bias"],
            ["conv2"],
            "conv2",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", ["conv2"], ["relu2"], "relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool2"], "pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool2"], ["flat"], "flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], [logits], "fc", transB=1),
    ]
    if softmax:
        nodes.append(helper.make_node("Softmax", [logits], [OUTPUT_NAME], "softmax", axis=1))
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="edgekit-examples-digits"
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same folder, then rename (never a half-written file)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    _atomic_write(path, write)


def main(
    out_dir: str | os.PathLike[str] = DEFAULT_OUT, options: TrainOptions | None = None, verbose: bool = True
) -> TrainResult:
    """Train, evaluate on the held-out split, and write the model and data sets to ``out_dir``."""
    options = options or TrainOptions()
    say = print if verbose else (lambda _: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    x_train, y_train, x_test, y_test = load_split(options.seed)
    start = time.perf_counter()
    params = train(x_train, y_train, options, say)
    seconds = time.perf_counter() - start
    accuracy = float((forward(params, x_test, options.softmax).argmax(axis=1) == y_test).mean())
    say(f"held-out accuracy {accuracy:.2%} on {len(y_test)} samples (trained in {seconds:.1f} s)")

    model = to_onnx(params, options.softmax)
    result = TrainResult(
        out / "digits.onnx", out / "calib.npz", out / "val.npz", out / "metrics.json", accuracy, seconds
    )
    _atomic_write(result.model, lambda tmp: tmp.write_bytes(model.SerializeToString()))
    _save_npz(result.calib, **{INPUT_NAME: x_train[:CALIB_SIZE]})
    _save_npz(result.val, **{INPUT_NAME: x_test, "labels": y_test})
    metrics = {
        "accuracy": accuracy,
        "val_samples": len(y_test),
        "calib_samples": CALIB_SIZE,
        "train_samples": len(y_train),
        "train_seconds": round(seconds, 3),
        "options": {k: getattr(options, k) for k in TrainOptions.__dataclass_fields__},
    }
    _atomic_write(result.metrics, lambda tmp: tmp.write_text(json.dumps(metrics, indent=2) + "\n"))
    say(f"wrote {result.model}, {result.calib}, {result.val}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=TrainOptions.epochs)
    parser.add_argument("--seed", type=int, default=TrainOptions.seed)
    parser.add_argument("--no-softmax", action="store_true", help="output logits instead of probabilities")
    args = parser.parse_args()
    main(args.out, TrainOptions(seed=args.seed, epochs=args.epochs, softmax=not args.no_softmax))
