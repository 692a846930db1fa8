"""Evaluation in bounded memory: the streamed metrics equal numpy's all-at-once answers on random data, the
reference spilled to disk reads back exactly, and a real deploy holds a bounded number of samples at a time."""

from __future__ import annotations

import weakref

import numpy as np
import pytest
from edgekit.core.metrics import Comparison, LatencyStats, TensorError
from edgekit.device_eval import SHARD_SAMPLES, Reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def chunks(n: int, cuts: list[int]) -> list[tuple[int, int]]:
    """``range(n)`` cut into consecutive pieces at ``cuts``."""
    edges = sorted({0, n, *(c % (n + 1) for c in cuts)})
    return list(zip(edges[:-1], edges[1:], strict=True))


@SETTINGS
@given(
    n=st.integers(1, 40),
    k=st.integers(1, 12),
    noise=st.floats(0.0, 2.0),
    seed=st.integers(0, 2**31),
    cuts=st.lists(st.integers(0, 40), max_size=6),
)
def test_streamed_tensor_errors_equal_numpy_at_once(n, k, noise, seed, cuts):
    rng = np.random.default_rng(seed)
    ref = rng.normal(0, 1, (n, k))
    cand = ref + rng.normal(0, noise, (n, k))
    ref[rng.random(n) < 0.1] = 0.0  # some all-zero samples: cosine 1 with a zero candidate, 0 otherwise
    err = TensorError()
    for lo, hi in chunks(n, cuts):
        err.update_batch(ref[lo:hi], cand[lo:hi])
    got = err.to_json()
    diff = ref - cand
    signal, noise_power = (ref**2).sum(), (diff**2).sum()
    if noise_power > 0 and signal > 0:
        assert got["sqnr_db"] == pytest.approx(10 * np.log10(signal / noise_power))
    assert got["max_abs_error"] == pytest.approx(np.abs(diff).max())
    assert got["mae"] == pytest.approx(np.abs(diff).mean())
    assert got["rmse"] == pytest.approx(np.sqrt((diff**2).mean()))
    nr, nc = np.linalg.norm(ref, axis=1), np.linalg.norm(cand, axis=1)
    cos = [
        1.0 if a == 0 and b == 0 else (0.0 if a == 0 or b == 0 else r @ c / (a * b))
        for r, c, a, b in zip(ref, cand, nr, nc, strict=True)
    ]
    assert got["cosine"] == pytest.approx(np.mean(cos)) and got["samples"] == n


@SETTINGS
@given(
    n=st.integers(1, 60),
    classes=st.integers(2, 12),
    seed=st.integers(0, 2**31),
    cuts=st.lists(st.integers(0, 60), max_size=6),
    unlabelled=st.floats(0.0, 0.5),
)
def test_streamed_accuracy_and_confusion_equal_numpy_at_once(n, classes, seed, cuts, unlabelled):
    rng = np.random.default_rng(seed)
    ref = rng.normal(0, 1, (n, 1, classes))
    cand = ref + rng.normal(0, 0.7, ref.shape)
    labels = [None if rng.random() < unlabelled else int(x) for x in rng.integers(0, classes, n)]
    comp = Comparison()
    for lo, hi in chunks(n, cuts):
        comp.update_batch({"p": ref[lo:hi]}, {"p": cand[lo:hi]}, labels[lo:hi])
    out = comp.to_json()
    r1, c1 = ref[:, 0].argmax(1), cand[:, 0].argmax(1)
    assert out["top1_agreement"] == pytest.approx(100 * np.mean(r1 == c1))
    rows = np.array([i for i, label in enumerate(labels) if label is not None], int)
    if len(rows) == 0:
        assert "accuracy" not in out
        return
    lab = np.array([labels[i] for i in rows])
    acc = out["accuracy"]
    assert acc["labelled_samples"] == len(rows)
    assert acc["reference_top1"] == pytest.approx(100 * np.mean(r1[rows] == lab))
    assert acc["candidate_top1"] == pytest.approx(100 * np.mean(c1[rows] == lab))
    k = min(5, classes)
    top5 = np.argsort(-cand[rows, 0], axis=1, kind="stable")[:, :k]
    assert acc["candidate_top5"] == pytest.approx(
        100 * np.mean([lab[i] in top5[i] for i in range(len(rows))])
    )
    matrix = np.zeros((classes, classes), int)
    np.add.at(matrix, (lab, c1[rows]), 1)
    streamed = np.zeros_like(matrix)
    for t, p, count in out["confusion"]:
        streamed[t, p] = count
    np.testing.assert_array_equal(streamed, matrix)


@SETTINGS
@given(values=st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=300), size=st.integers(1, 64))
def test_latency_reservoir_is_a_bounded_uniform_sample(values, size):
    stats = LatencyStats(size=size, seed=7)
    for v in values:
        stats.add(v)
    s = stats.summary()
    ms = np.asarray(values) * 1e3
    assert s["samples"] == len(values)
    assert s["mean"] == pytest.approx(ms.mean()) and s["min"] == pytest.approx(ms.min())
    assert s["max"] == pytest.approx(ms.max())
    assert len(stats.kept) == min(size, len(values))
    remaining = list(values)
    for kept in stats.kept:  # a sub-multiset of the values
        remaining.remove(kept)
    if len(values) <= size:  # everything kept: exact percentiles
        assert s["p90"] == pytest.approx(np.percentile(ms, 90)) and "percentiles_over" not in s
    else:
        assert s["percentiles_over"] == size
    again = LatencyStats(size=size, seed=7)
    for v in values:
        again.add(v)
    assert again.kept == stats.kept  # seeded: the same run keeps the same samples


@SETTINGS
@given(
    n=st.integers(1, 30),
    shape=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    dtype=st.sampled_from(["float32", "int64", "uint8"]),
    seed=st.integers(0, 2**31),
    labelled=st.booleans(),
)
def test_reference_spilled_to_disk_reads_back_exactly(n, shape, dtype, seed, labelled):
    rng = np.random.default_rng(seed)
    a = (rng.normal(0, 100, (n, *shape))).astype(dtype)
    b = rng.normal(0, 1, (n, 1, 3)).astype(np.float32)
    labels = [int(x) if labelled else None for x in rng.integers(0, 1000, n)]
    with Reference({"x": (1,)}, ["a", "b"]) as ref:
        for i in range(n):
            ref.append({"a": a[i], "b": b[i]}, labels[i])
        assert ref.count == n and ref.labelled == labelled
        for i in range(n):
            out, label = ref.sample(i)
            np.testing.assert_array_equal(out["a"], a[i])
            assert out["a"].dtype == a.dtype and label == labels[i]
        lo = int(rng.integers(0, n))
        out, got = ref.batch(lo, n - lo)
        np.testing.assert_array_equal(out["b"], b[lo:])
        assert got == labels[lo:]
        with pytest.raises(IndexError):
            ref.batch(0, n + 1)


def test_a_real_deploy_holds_a_bounded_number_of_samples(digits, tmp_path, monkeypatch):
    """`edgekit deploy` (in this process, against the local agent) on the 360 digits samples: every input array
    the data sets yield is tracked with a weak reference, and at no point are more than a shard's worth alive.
    Keeping the evaluation inputs (as the reference once did) would keep all 360."""
    import edgekit.core.data
    from edgekit.cli.common import run_app
    from edgekit.cli.main import app

    refs: list[weakref.ref] = []  # to every input array a sample brought
    seen = {"yielded": 0, "max_alive": 0}
    original = edgekit.core.data.open_dataset

    class Tracked:
        def __init__(self, dataset):
            self._dataset = dataset

        def __getattr__(self, name):
            return getattr(self._dataset, name)

        def __len__(self):
            return len(self._dataset)

        def __iter__(self):
            for sample in self._dataset:
                refs.extend(weakref.ref(a) for a in sample.inputs.values())
                seen["yielded"] += 1
                refs[:] = [r for r in refs if r() is not None]  # freed by reference counting
                seen["max_alive"] = max(seen["max_alive"], len(refs))
                yield sample

    def tracked_open(path, *args, **kwargs):
        dataset = original(path, *args, **kwargs)
        return Tracked(dataset) if str(path) == str(digits.val) else dataset

    monkeypatch.setattr(edgekit.core.data, "open_dataset", tracked_open)
    with pytest.raises(SystemExit) as done:
        run_app(app, ["deploy", str(digits.model), "-t", "arm-cpu", "--calib", str(digits.calib), "--eval",
                      str(digits.val), "--device", "local", "--report", str(tmp_path / "report.html"), "-o",
                      str(tmp_path / "out"), "-q"])  # fmt: skip
    assert done.value.code in (0, None)
    assert (tmp_path / "report.json").is_file()
    # the host reference pass and the device pass each read all 360 (the quantizer's check reads 25)
    assert seen["yielded"] >= 2 * 360
    assert seen["max_alive"] <= SHARD_SAMPLES + 2 < 360, seen
