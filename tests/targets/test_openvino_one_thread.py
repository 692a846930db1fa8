"""OpenVINO's CPU plugin on one thread: its snippets (fused Subgraph kernels) computed wrong values there on an int8
DistilBERT IR and on its QDQ model (round 11t: every logit the same, -0.025236; at two threads a stream, and on one
with ``SNIPPETS_MODE`` ``DISABLE``, the right ones). The IR is edgekit's intel-vpu int8 bundle of the seeded DistilBERT
classifier of ``benchmarks/zoo/probe_hub_variants.py`` (``--only distilbert_cls --variants fp32``), the QDQ model
``edgekit quantize``'s of it, with 4 of its token samples."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from edgekit.core.runtime import HostRunner
from edgekit.device_agents.bundle import read_bundle
from edgekit.device_agents.runtimes import open_runner, openvino_cpu_config

DATA = Path(__file__).resolve().parent / "data"


def test_a_one_thread_cpu_run_of_an_int8_transformer_is_the_two_thread_run():
    bundle = read_bundle(DATA / "distilbert_int8_ir")
    one, two = open_runner(bundle, threads=1), open_runner(bundle, threads=2)
    with np.load(DATA / "distilbert_int8_tokens.npz") as tokens:
        for i in range(4):
            feeds = [tokens[spec.name][i : i + 1] for spec in bundle.manifest.inputs]
            want = two.run(feeds)[0][0]
            got = one.run(feeds)[0][0]
            assert np.ptp(want) > 1e-2 * np.abs(want).max()  # three distinct logits
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


def test_the_host_runner_with_a_thread_a_stream_runs_the_qdq_model_as_on_two_threads():
    """The host runner's streams share the cores: on 2 cores, 2 streams of one thread each (the accuracy search's
    and the evaluation's runs of a QDQ model as OpenVINO computes it)."""
    proto = onnx.load(str(DATA / "distilbert_int8_qdq.onnx"))
    with np.load(DATA / "distilbert_int8_tokens.npz") as tokens:
        feeds = [{name: tokens[name][i : i + 1] for name in tokens.files} for i in range(4)]
    want = [HostRunner(proto, exact_qdq=False, threads=2).run(f)["logits"] for f in feeds]
    streamed = HostRunner(proto, exact_qdq=False, streams=2)
    got = [np.array(out["logits"]) for _, out in streamed.run_stream(enumerate(feeds))]
    for g, w in zip(got, want, strict=True):
        assert np.ptp(w) > 1e-2 * np.abs(w).max()
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6 * np.abs(w).max())


def test_snippets_are_off_exactly_where_a_run_has_one_thread():
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    one, two = {**config, "INFERENCE_NUM_THREADS": 1}, {**config, "INFERENCE_NUM_THREADS": "2"}
    assert openvino_cpu_config(one) == {**one, "SNIPPETS_MODE": "DISABLE"}
    assert openvino_cpu_config({**one, "SNIPPETS_MODE": "ENABLE"})["SNIPPETS_MODE"] == "ENABLE"
    available = len(os.sched_getaffinity(0))
    assert (openvino_cpu_config(two) == two) == (available > 1)
    assert (openvino_cpu_config(config) == config) == (available > 1)
    streams = {**config, "NUM_STREAMS": "2"}
    assert (openvino_cpu_config(streams) == streams) == (available > 3)
