"""A long request and the agent's replies cross on a pty without deadlock (both ends drain while they write)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.core.model import load_proto
from edgekit.device_agents.client import connect
from edgekit.targets.base import PackageOptions, get_target
from onnx import TensorProto, helper


@pytest.mark.parametrize("url", ["local", "local?ack_timeout=0.02"])
def test_large_infer_batches_over_the_local_pty(tmp_path, url):
    """A 15 MB request and a 15 MB reply; with a tiny ack timeout the host also retransmits while the agent
    replies, so both ends write at once (links drain their input while they write)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 160, 160])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 160, 160])],
    )
    model = load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9))
    bundle = get_target("arm-cpu").package(model, tmp_path / "relu", PackageOptions())
    x = np.random.default_rng(0).normal(size=(48, 1, 160, 160, 3)).astype(np.float32)  # 14.7 MB in one INFER
    with connect(url, timeout=60) as client:
        client.hello()
        client.load(client.put_bundle(bundle))
        (name,) = [s["name"] for s in client.loaded["inputs"]]
        outputs, times = client.infer({name: x})
    (y,) = outputs.values()
    assert len(times) == 48
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert onnx.__version__  # the host side may use onnx; the agent subprocess does not
