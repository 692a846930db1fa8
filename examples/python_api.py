"""edgekit from Python: quantize, package for a target, run on the local agent, compare with fp32.

    python examples/python_api.py [--out DIR]

Uses the built-in digits example (trained on the fly if needed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import edgekit
import numpy as np
from edgekit.core.model import load_proto
from edgekit.device_agents.client import connect
from edgekit.device_eval import from_device, to_device
from edgekit.targets.base import PackageOptions, get_target

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "digits" / "build" / "api")
    args = parser.parse_args(argv)
    data = HERE / "digits" / "build"
    if not (data / "digits.onnx").exists():
        sys.path.insert(0, str(HERE / "digits"))
        import train

        train.main(data)
    args.out.mkdir(parents=True, exist_ok=True)

    # 1. Quantize (QDQ ONNX) and compare with fp32 on the host.
    result = edgekit.quantize_model(
        data / "digits.onnx",
        data / "calib.npz",
        eval_data=data / "val.npz",
        output=args.out / "digits.int8.onnx",
        options=edgekit.QuantizeOptions(method="minmax", samples=100),
    )
    acc = result.report["evaluation"]["accuracy"]
    print(f"host: fp32 top-1 {acc['reference_top1']:.2f} %, int8 {acc['candidate_top1']:.2f} %")

    # 2. Package the QDQ model for the ARM CPU target (int8 TFLite, verified in LiteRT before it is written).
    bundle = get_target("arm-cpu").package(load_proto(result.model, prepare=False), args.out / "arm-cpu",
                                           PackageOptions())  # fmt: skip

    # 3. Run it on a device: here the embedded local agent (a subprocess on a pseudo-terminal).
    val = np.load(data / "val.npz")
    with connect("local") as device:
        print("agent:", device.hello().get("machine"))
        device.load(device.put_bundle(bundle))
        (spec_in,) = device.loaded["inputs"]
        (spec_out,) = device.loaded["outputs"]
        from edgekit.device_agents.bundle import TensorSpec

        tin = TensorSpec(
            **{k: spec_in.get(k) for k in ("name", "shape", "dtype", "layout", "scale", "zero_point")}
        )
        tout = TensorSpec(
            **{k: spec_out.get(k) for k in ("name", "shape", "dtype", "layout", "scale", "zero_point")}
        )
        x = np.stack([to_device(s.reshape(1, 1, 8, 8), tin) for s in val["input"]])
        outputs, times = device.infer({tin.name: x})
    preds = [int(np.argmax(from_device(y, tout, (1, 10)))) for y in outputs[tout.name]]
    top1 = 100.0 * np.mean(np.array(preds) == val["labels"])
    print(f"device: int8 top-1 {top1:.2f} % on {len(preds)} samples, median {1e3 * np.median(times):.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
