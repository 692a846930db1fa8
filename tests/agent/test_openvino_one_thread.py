"""OpenVINO's CPU plugin on one thread: its snippets (fused Subgraph kernels) computed wrong values there on an int8
DistilBERT IR (round 11t: every logit the same, -0.025236; at two threads, and on one with ``SNIPPETS_MODE``
``DISABLE``, the right ones). The IR is edgekit's intel-vpu int8 bundle of the seeded DistilBERT classifier of
``benchmarks/zoo/probe_hub_variants.py`` (``--only distilbert_cls --variants fp32``), with 4 of its token samples."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
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


def test_snippets_are_off_exactly_where_a_run_has_one_thread():
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    assert openvino_cpu_config(config, 1) == {**config, "SNIPPETS_MODE": "DISABLE"}
    assert openvino_cpu_config({**config, "SNIPPETS_MODE": "ENABLE"}, 1)["SNIPPETS_MODE"] == "ENABLE"
    available = len(os.sched_getaffinity(0))
    assert (openvino_cpu_config(config, 2) == config) == (available > 1)
    assert (openvino_cpu_config(config) == config) == (available > 1)
