"""ONNX backend node tests for every op the TFLite converter supports, through converter + LiteRT.

    python benchmarks/onnx_conformance.py [--json out.json] [--show-failures]

Fetches the ``onnx==1.22.0`` wheel with ``pip download --no-deps`` into a temporary directory (never
committed), reads ``onnx/backend/test/data/node/*`` and, for every test case whose ops are all in
``edgekit.targets.tflite.supported_ops()``, converts the model (``keep_io_layout=True`` so the test's
NCHW data feeds it as is), runs it in the LiteRT interpreter and compares with the expected outputs
(``rtol=1e-3, atol=1e-5``).

Inputs declared with dynamic dims get the shape of the test's data (as ``--input-shape`` does).
Inputs a deployed model has as constants (integer parameters such as shapes, axes, pads, indices; and
weights or bounds the converter needs constant) are turned into initializers with the test's values.

Outcomes per case: ``pass``; ``fail`` (converted but wrong, or crashed: a bug); ``declined`` (the
converter refused the case with a typed error naming the limitation, e.g. a Pad mode TFLite lacks);
``n/a`` (an op it does not support, or data/outputs that are not float32: integer/bool/string tests).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import traceback
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ONNX_VERSION = "1.22.0"
RTOL, ATOL = 1e-3, 1e-5


def fetch_node_tests(folder: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"onnx=={ONNX_VERSION}",
            "--no-deps",
            "-q",
            "-d",
            str(folder),
        ],
        check=True,
    )
    wheel = next(folder.glob("onnx-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.namelist() if m.startswith("onnx/backend/test/data/node/")]
        z.extractall(folder, members)
    return folder / "onnx/backend/test/data/node"


def _load_tensors(folder: Path, prefix: str) -> list[np.ndarray]:
    files = sorted(folder.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1]))
    out = []
    for f in files:
        t = onnx.TensorProto()
        t.ParseFromString(f.read_bytes())
        out.append(numpy_helper.to_array(t))
    return out


def run_case(case: Path, supported: set[str]) -> tuple[str, str]:
    """(outcome, detail) of one backend test case."""
    from edgekit.core.errors import EdgekitError
    from edgekit.targets.tflite.converter import ConvertOptions, convert
    from edgekit.targets.tflite.package import run_tflite

    model = onnx.load(case / "model.onnx")
    ops = {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}
    foreign = [n.op_type for n in model.graph.node if n.domain not in ("", "ai.onnx")]
    missing = sorted(ops - supported) + foreign
    if missing:
        return "n/a", f"ops {missing}"
    data = case / "test_data_set_0"
    try:
        inputs, expected = _load_tensors(data, "input"), _load_tensors(data, "output")
    except (ValueError, onnx.onnx_cpp2py_export.checker.ValidationError, KeyError):
        return "n/a", "inputs/outputs that are not plain tensors"
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    feeds = dict(zip(names, inputs, strict=True))
    if (
        not inputs
        or inputs[0].dtype != np.float32
        or any(a.dtype not in (np.float32, np.int64) for a in expected)
    ):
        return "n/a", "non-float32 data input or outputs"
    note = ""
    if _fix_input_shapes(model, feeds):
        note = "input shapes fixed from the test data"
    params = [n for n, a in feeds.items() if a.dtype != np.float32]
    if params:  # integer inputs are parameters (shapes, axes, pads, indices): constants in a deployed model
        model = _inputs_as_constants(model, feeds, keep=[n for n in names if n not in params])
        feeds = {n: a for n, a in feeds.items() if n not in params}
        names = list(feeds)
        note = ", ".join(filter(None, [note, "integer parameters as constants"]))
    try:
        result = convert(model, ConvertOptions(keep_io_layout=True, target="conformance"))
    except EdgekitError as exc:
        if "must be a constant" not in str(exc) or len(names) < 2:
            return "declined", str(exc)
        # Weights / bounds given as graph inputs: the converter needs them constant (TFLite kernels
        # take constant filters); run the case again with every input but the first as an initializer.
        model = _inputs_as_constants(model, feeds, keep=names[:1])
        feeds = {names[0]: feeds[names[0]]}
        note = ", ".join(filter(None, [note, "weights as constants"]))
        try:
            result = convert(model, ConvertOptions(keep_io_layout=True, target="conformance"))
        except EdgekitError as exc2:
            return "declined", str(exc2)
        except Exception as exc2:  # noqa: BLE001
            return "fail", f"converter crashed: {type(exc2).__name__}: {exc2}"
    except Exception as exc:  # noqa: BLE001 - any other exception is a converter bug
        return "fail", f"converter crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    try:
        got = run_tflite(result.data, result, feeds, threads=1)
    except Exception as exc:  # noqa: BLE001
        return "fail", f"LiteRT failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    out_names = [o.name for o in model.graph.output]
    for name, want in zip(out_names, expected, strict=True):
        have = got[name]
        if have.shape != want.shape:
            return "fail", f"output {name}: shape {have.shape} != {want.shape}"
        if not np.allclose(have, want, rtol=RTOL, atol=ATOL, equal_nan=True):
            err = float(np.nanmax(np.abs(have.astype(np.float64) - want)))
            return "fail", f"output {name}: max abs error {err:.3g}"
    return "pass", note


def _fix_input_shapes(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> bool:
    """Give inputs declared with dynamic dims the shape of the test's data (what ``--input-shape`` does
    for a user); True when any input changed."""
    changed = False
    for value in model.graph.input:
        if value.name not in feeds or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        shape = feeds[value.name].shape
        if len(dims) == len(shape) and all(d.HasField("dim_value") for d in dims):
            continue
        del dims[:]
        for size in shape:
            dims.add().dim_value = int(size)
        changed = True
    return changed


def _inputs_as_constants(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], keep: list[str]
) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [i for i in out.graph.input if i.name in keep]
    for name, array in feeds.items():
        if name not in keep:
            out.graph.initializer.append(numpy_helper.from_array(array, name))
    del out.graph.input[:]
    out.graph.input.extend(kept)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write per-case outcomes here")
    parser.add_argument("--show-failures", action="store_true")
    parser.add_argument(
        "--node-dir", type=Path, help="use an extracted node test folder instead of pip download"
    )
    args = parser.parse_args(argv)
    from edgekit.targets.tflite import supported_ops

    supported = set(supported_ops())
    with tempfile.TemporaryDirectory(prefix="edgekit-conformance-") as tmp:
        node_dir = args.node_dir or fetch_node_tests(Path(tmp))
        cases = sorted(p for p in node_dir.iterdir() if (p / "model.onnx").is_file())
        outcomes: dict[str, tuple[str, str]] = {c.name: run_case(c, supported) for c in cases}
    counts = Counter(o for o, _ in outcomes.values())
    per_op: dict[str, Counter] = defaultdict(Counter)
    for name, (outcome, _) in outcomes.items():
        if outcome != "n/a":
            per_op[name.removeprefix("test_").split("_")[0]][outcome] += 1
    print(f"ONNX {ONNX_VERSION} backend node tests: {len(outcomes)} cases")
    print(f"pass {counts['pass']}, fail {counts['fail']}, declined {counts['declined']}, n/a {counts['n/a']}")
    as_constants = sum(1 for o, d in outcomes.values() if o == "pass" and d)
    print(f"(of the passes, {as_constants} with weight, bound or integer parameter inputs made initializers)")
    applicable = counts["pass"] + counts["fail"]
    if applicable:
        print(f"pass rate on converted cases: {counts['pass'] / applicable:.1%}")
    for outcome in ("fail", "declined") if args.show_failures else ("fail",):
        for name, (o, detail) in sorted(outcomes.items()):
            if o == outcome:
                print(f"  {outcome}: {name}: {detail.splitlines()[0] if detail else ''}")
    if args.json:
        args.json.write_text(
            json.dumps({k: {"outcome": o, "detail": d} for k, (o, d) in outcomes.items()}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
