"""The agent as a real subprocess, over loopback TCP and over a pty pair (``local``), serving a real
TFLite model and a real OpenVINO IR built in the test; references are numpy and the runtimes."""

from __future__ import annotations

import numpy as np
import pytest
from agent_procs import AgentProcess
from edgekit.device_agents.client import connect
from edgekit.device_agents.errors import InputError, RemoteError


def check_tflite(client, bundle_dir) -> str:  # type: ignore[no-untyped-def]
    seen: list[tuple[int, int]] = []
    bundle_id = client.put_bundle(bundle_dir, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] > 0
    info = client.load(bundle_id, threads=1)
    assert info["runtime"] in ("ai_edge_litert", "tflite_runtime")
    assert [t["name"] for t in info["inputs"]] == ["a", "b"]
    assert info["ops"] == 2 and 0 <= info["delegated_ops"] <= 2
    rng = np.random.default_rng(1)
    a = rng.standard_normal((7, 4)).astype(np.float32)  # 7 samples of a batch-1 model, concatenated
    b = rng.standard_normal((7, 4)).astype(np.float32)
    outputs, times = client.infer({"a": a, "b": b})
    np.testing.assert_array_equal(outputs["sum"], a + b)
    np.testing.assert_array_equal(outputs["prod"], a * b)
    assert len(times) == 7 and all(0 < t < 1 for t in times)
    one, t1 = client.infer([a[:1], b[:1]])  # one sample of the model's exact shape, positional
    assert one["sum"].shape == (1, 4) and len(t1) == 1
    stacked, _ = client.infer({"a": a.reshape(7, 1, 4), "b": b.reshape(7, 1, 4)})
    assert stacked["prod"].shape == (7, 1, 4)
    runs = client.bench(warmup=2, runs=9)
    assert len(runs) == 9 and all(t > 0 for t in runs)
    return bundle_id


def check_openvino(client, bundles) -> None:  # type: ignore[no-untyped-def]
    w, bias = bundles["ov_weights"]
    bundle_id = client.put_bundle(bundles["openvino"])
    info = client.load(bundle_id, threads=2)
    assert info["runtime"] == "openvino" and info["device"] == "CPU"
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    out, times = client.infer({"x": x})
    np.testing.assert_allclose(out["y"], np.maximum(x @ w + bias, 0), rtol=1e-5, atol=1e-5)
    assert len(times) == 5


def test_tcp_agent_serves_tflite_and_openvino(tcp_agent: AgentProcess, bundles) -> None:  # type: ignore[no-untyped-def]
    with connect(tcp_agent.url()) as client:
        info = client.hello()
        assert info["protocol"] == 1 and info["runtimes"]["openvino"]
        assert info["disk_free"] > 0 and info["python"]
        bundle_id = check_tflite(client, bundles["tflite"])
        check_openvino(client, bundles)
        status = client.status()
        assert {b["bundle_id"] for b in status["bundles"]} >= {bundle_id}
        assert status["uploads"] == []  # nothing half-uploaded left behind
        client.delete(bundle_id)
        assert bundle_id not in {b["bundle_id"] for b in client.status()["bundles"]}
    # the agent keeps serving the next client, and an archive uploads like a directory
    with connect(tcp_agent.url()) as client:
        bundle_id = client.put_bundle(bundles["tflite_archive"])
        client.load(bundle_id)
        out, _ = client.infer({"a": np.ones((1, 4), np.float32), "b": np.full((1, 4), 2, np.float32)})
        np.testing.assert_array_equal(out["prod"], np.full((1, 4), 2, np.float32))


def test_local_agent_over_pty(bundles) -> None:  # type: ignore[no-untyped-def]
    with connect("local", timeout=30) as client:
        assert client.link.description == "local agent (pty)"
        assert client.info["runtimes"]["ai_edge_litert"]
        check_tflite(client, bundles["tflite"])
        check_openvino(client, bundles)
        workdir = client.link.workdir
        assert (workdir / "bundles").is_dir()
    assert not workdir.exists()  # the embedded agent's scratch work directory is removed


def test_resume_of_same_content_is_instant(tcp_agent: AgentProcess, bundles) -> None:  # type: ignore[no-untyped-def]
    with connect(tcp_agent.url()) as client:
        first = client.put_bundle(bundles["tflite"])
        calls: list[tuple[int, int]] = []
        assert client.put_bundle(bundles["tflite"], progress=lambda d, t: calls.append((d, t))) == first
        assert len(calls) == 1 and calls[0][0] == calls[0][1]  # already stored: nothing sent


def test_bad_requests_are_typed_errors_and_the_agent_keeps_serving(tcp_agent: AgentProcess, bundles) -> None:  # type: ignore[no-untyped-def]
    with connect(tcp_agent.url()) as client:
        with pytest.raises(InputError, match="no model loaded"):
            client.infer({"a": np.zeros((1, 4), np.float32)})
        with pytest.raises(RemoteError, match="not_found"):
            client.load("nothing-here-000000000000")
        bundle_id = client.put_bundle(bundles["tflite"])
        client.load(bundle_id)
        with pytest.raises(InputError, match="shape"):
            client.infer({"a": np.zeros((1, 5), np.float32), "b": np.zeros((1, 5), np.float32)})
        with pytest.raises(InputError, match="do not match"):
            client.infer({"a": np.zeros((1, 4), np.float32)})
        with pytest.raises(InputError, match="int64|float32"):
            client.infer({"a": np.zeros((1, 4), np.int64), "b": np.zeros((1, 4), np.float32)})
        with pytest.raises(RemoteError, match="bad_request"):
            client.bench(warmup=-1, runs=3)
        with pytest.raises(RemoteError, match="runtime_unavailable"):
            client.load(bundle_id, delegate="nnapi")  # no NNAPI on this host: a clear error
        with pytest.raises(RemoteError, match="threads"):
            client.load(bundle_id, threads=0)
        # still serving: a normal request works
        client.load(bundle_id)
        out, _ = client.infer({"a": np.ones((1, 4), np.float32), "b": np.ones((1, 4), np.float32)})
        assert out["sum"].tolist() == [[2, 2, 2, 2]]


def test_large_batches_are_split_to_fit_the_agent_frame_limit(tmp_path, bundles) -> None:  # type: ignore[no-untyped-def]
    from agent_procs import start_tcp_agent, stop

    agent = start_tcp_agent(tmp_path / "work", "--max-frame-mb", "0.1")  # 100 KiB frames
    try:
        with connect(agent.url()) as client:
            assert client.info["max_payload"] == 104857
            client.load(client.put_bundle(bundles["tflite"]))
            a = np.random.default_rng(4).standard_normal((5000, 4)).astype(np.float32)  # 80 kB per input
            before = client.status()["counters"]["requests"]
            out, times = client.infer({"a": a, "b": a})
            np.testing.assert_array_equal(out["sum"], a + a)
            assert len(times) == 5000
            infers = client.status()["counters"]["requests"] - before - 1
            assert infers >= 4  # 160 kB of inputs in frames of at most 100 kB less headroom
    finally:
        stop(agent.proc)


def test_client_input_conversion() -> None:
    from edgekit.device_agents.client import _to_samples

    specs = [{"name": "q", "shape": [1, 3], "dtype": "int8"}]
    stacked, mode = _to_samples({"q": np.array([[1, -2, 127]], np.int64)}, specs)
    assert mode == "single" and stacked["q"].dtype == np.int8 and stacked["q"].shape == (1, 1, 3)
    with pytest.raises(InputError, match="outside the range of int8"):
        _to_samples({"q": np.array([[1, -2, 300]])}, specs)
    with pytest.raises(InputError, match="float32, the model takes int8"):
        _to_samples([np.zeros((1, 3), np.float32)], specs)
    with pytest.raises(InputError, match="disagree"):
        _to_samples(
            {"q": np.zeros((2, 3), np.int8), "r": np.zeros((3, 3), np.int8)},
            [*specs, {"name": "r", "shape": [1, 3], "dtype": "int8"}],
        )


def _selection_model():  # type: ignore[no-untyped-def]
    """NonMaxSuppression over 16 boxes of one class, then the boxes it kept: ``[K, 4]``, K known at run time."""
    from onnx import TensorProto, helper

    inits = [
        helper.make_tensor("max", TensorProto.INT64, [1], [16]),
        helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.3]),
        helper.make_tensor("threshold", TensorProto.FLOAT, [1], [0.5]),
        helper.make_tensor("two", TensorProto.INT64, [], [2]),
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
    ]
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou", "threshold"], ["selected"]),
        helper.make_node("Gather", ["selected", "two"], ["index"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["all_boxes"]),
        helper.make_node("Gather", ["all_boxes", "index"], ["kept"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "selection",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 16, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 16]),
        ],
        [helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["K", 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_selection_whose_rows_vary_runs_one_sample_per_request(
    tcp_agent: AgentProcess, tmp_path, capsys
) -> None:  # type: ignore[no-untyped-def]
    """A bundle whose output has as many rows as its NMS keeps (manifest shape [-1, 4]): each sample's rows come
    back as onnxruntime computes them; samples keeping different counts in one request are refused in one line."""
    import json

    import onnx
    import onnxruntime as ort
    from cli_in_process import cli_text

    model = _selection_model()
    path = tmp_path / "selection.onnx"
    onnx.save(model, path)
    code, text = cli_text(capsys, "deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out"))
    assert code == 0, text
    bundle = tmp_path / "out" / "arm-cpu"
    assert json.loads((bundle / "manifest.json").read_text())["outputs"][0]["shape"] == [-1, 4]
    rng = np.random.default_rng(5)
    corner = rng.uniform(0, 10, (2, 16, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(1, 4, (2, 16, 2))], -1).astype(np.float32)
    scores = rng.random((2, 1, 16), dtype=np.float32)
    session = ort.InferenceSession(model.SerializeToString())
    want = [session.run(None, {"boxes": boxes[i : i + 1], "scores": scores[i : i + 1]})[0] for i in range(2)]
    assert len(want[0]) != len(want[1])
    with connect(tcp_agent.url()) as client:
        client.load(client.put_bundle(bundle), threads=1)
        for i in range(2):
            out, _ = client.infer({"boxes": boxes[i : i + 1], "scores": scores[i : i + 1]})
            np.testing.assert_array_equal(out["kept"].reshape(want[i].shape), want[i])
        with pytest.raises(RemoteError, match="one sample per request"):
            client.infer({"boxes": boxes, "scores": scores})
