"""What the peers do with the team's two old models, in one run: onnxruntime's quantize_static, NNCF's quantize
(ONNX backend) and edgekit's quantize_model on SqueezeNet 1.1 (opset 7) and MNIST-8 (opset 8).

Each tool runs in its own child process (a crash there is a finding, not the end of the run). A tool passes when
it writes a model that onnx.checker accepts and onnxruntime loads and runs. Prints one markdown table.

    python benchmarks/peer_failures.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from shared_data import default_shared

MODELS = {
    "SqueezeNet 1.1 (opset 7)": ("models/squeezenet1.1-fp32.onnx", "data_0", (1, 3, 224, 224)),
    "MNIST-8 (opset 8)": ("models/mnist-8.onnx", "Input3", (1, 1, 28, 28)),
}
TOOLS = ("onnxruntime quantize_static", "NNCF quantize", "edgekit quantize_model")


def _samples(name: str, shape: tuple[int, ...], count: int = 8) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{name: rng.uniform(0, 255, shape).astype(np.float32)} for _ in range(count)]


def _quantize(tool: str, model: str, name: str, shape: tuple[int, ...], out: str) -> None:
    import onnx

    samples = _samples(name, shape)
    if tool == TOOLS[0]:
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

        class Reader:
            def __init__(self):
                self.it = iter(samples)

            def get_next(self):
                return next(self.it, None)

        quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
    elif tool == TOOLS[1]:
        import nncf

        onnx.save(nncf.quantize(onnx.load(model), nncf.Dataset(samples), subset_size=len(samples)), out)
    else:
        from types import SimpleNamespace

        import edgekit

        edgekit.quantize_model(model, [SimpleNamespace(inputs=s, label=None) for s in samples], output=out)


def worker(tool: str, model: str, name: str, shape: tuple[int, ...], out: str) -> dict:
    """Quantize, then check the file: onnx.checker (full) and one onnxruntime run."""
    import onnx
    import onnxruntime as ort

    try:
        _quantize(tool, model, name, shape, out)
    except Exception as exc:  # a peer's failure is the measurement
        return {"result": "fails", "detail": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
    try:
        onnx.checker.check_model(onnx.load(out), full_check=True)
        session = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
        session.run(None, _samples(name, shape, 1)[0])
    except Exception as exc:
        return {
            "result": "invalid model",
            "detail": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}",
        }
    return {"result": "quantizes", "detail": ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument(
        "--worker", nargs=4, metavar=("TOOL", "MODEL", "INPUT", "SHAPE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        tool, model, name, shape = args.worker
        with tempfile.TemporaryDirectory() as tmp:
            out = worker(tool, model, name, tuple(json.loads(shape)), str(Path(tmp, "q.onnx")))
        print(json.dumps(out))
        return 0
    print("| model | " + " | ".join(TOOLS) + " |")
    print("|---|" + "---|" * len(TOOLS))
    for label, (path, name, shape) in MODELS.items():
        cells = []
        for tool in TOOLS:
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                tool,
                str(args.shared / path),
                name,
                json.dumps(shape),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode != 0 or not lines:
                tail = (proc.stderr.strip().splitlines() or ["?"])[-1][:160]
                cells.append(f"crashes (exit {proc.returncode}: {tail})")
                continue
            out = json.loads(lines[-1])
            cells.append(out["result"] + (f" ({out['detail']})" if out["detail"] else ""))
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
