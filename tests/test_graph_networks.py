"""torch_geometric graph networks as torch exports them (probe round 14t, ``benchmarks/zoo/probe_tabular_ts.py``).

Message passing is ``ScatterElements`` (torch's ``scatter_add`` / ``scatter_reduce``): GCN / GIN / SAGE sum the
messages of each target node, GAT's segment softmax takes a scatter maximum first. The committed files are the
probe's seeded models, 2 layers on a 32-node graph with 96 directed edges (``--only pyg_gat_const_op18`` and
``pyg_gin_op17``, torch_geometric 2.8.1, torch 2.14; 40 KB and 27 KB):

- ``pyg_gat_fixed_graph.onnx``: GATConv with the graph a constant (opset 18). torch writes an If on the rank of
  the attention coefficients whose other branch declares another rank; the declared shapes made shape inference
  fail once folding knew the rank (onnx_ir logged a traceback), the If stayed and the model was refused as
  control flow. Then ScatterElements had no TFLite converter.
- ``pyg_gin_edge_index.onnx``: GINConv with ``edge_index`` an int64 input: run-time indices, reduction "add".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.cli.common import run_app
from edgekit.cli.main import app
from onnx import TensorProto, helper
from tflite_files import run_tflite_file

DATA = Path(__file__).parent / "data"


def _deploy(args: list[str], capsys) -> tuple[int, str]:
    try:
        run_app(app, args)
        return 0, capsys.readouterr().err
    except SystemExit as exc:
        return int(exc.code or 0), capsys.readouterr().err


def _graph(rng: np.random.Generator) -> np.ndarray:
    """A random undirected graph's edge_index [2, 96] over 32 nodes, no self loops (as the probe's data)."""
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < 48:
        a, b = (int(v) for v in rng.integers(0, 32, 2))
        if a != b:
            pairs.add((min(a, b), max(a, b)))
    p = np.array(sorted(pairs)).T
    return np.concatenate([p, p[::-1]], 1).astype(np.int64)


@pytest.mark.parametrize("name", ["pyg_gat_fixed_graph", "pyg_gin_edge_index"])
def test_graph_network_deploys_and_matches_onnxruntime(tmp_path, capsys, name):
    path = DATA / f"{name}.onnx"
    code, err = _deploy(
        ["deploy", str(path), "-t", "arm-cpu", "--precision", "fp32", "-o", str(tmp_path)], capsys
    )
    assert code == 0, err
    assert "Traceback" not in err, err
    (tflite,) = (tmp_path / "arm-cpu").glob("*.tflite")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for _ in range(3):
        feeds = {"x": rng.standard_normal((32, 16)).astype(np.float32)}
        if name == "pyg_gin_edge_index":
            feeds["edge_index"] = _graph(rng)
        (expected,) = session.run(None, feeds)
        tfl_feeds = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feeds.items()}
        got = run_tflite_file(tflite, tfl_feeds)["logits"]
        scale = float(np.abs(expected).max())
        assert float(np.abs(got - expected).max()) <= 1e-5 * scale, name


def test_a_run_time_scatter_maximum_is_refused_in_one_line(tmp_path, capsys):
    """ScatterElements(reduction="max") at indices computed at run time: TFLite's SCATTER_ND only sums repeated
    indices, so it is refused with the reason (a fixed graph takes every reduction)."""
    graph = helper.make_graph(
        [helper.make_node("ScatterElements", ["x", "idx", "u"], ["y"], axis=0, reduction="max")],
        "scatter_max",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [6, 3]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, [6, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
    )  # fmt: skip
    path = tmp_path / "scatter_max.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    code, err = _deploy(["deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out")], capsys)
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("error:"), err
    assert "reduction 'max' needs constant indices" in last, err
