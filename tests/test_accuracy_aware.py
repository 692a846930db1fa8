"""The accuracy-aware search (issue 14) on a model with one known fragile layer, checked against onnxruntime."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from edgekit.core.data import input_specs, open_dataset
from edgekit.core.errors import DataError, QuantizationError
from edgekit.core.model import load_model
from edgekit.quantize.accuracy import SearchOptions, search
from edgekit.quantize.budget import Budget, budget_from_flags
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from edgekit.quantize.restores import RESTORES, apply_restores, available_restores
from edgekit.targets.base import get_target
from fragile_models import FRAGILE, fragile_cnn, fragile_data


@pytest.fixture(scope="module")
def fragile(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fragile")
    model = fragile_cnn()
    path = folder / "fragile.onnx"
    onnx.save(model, path)
    return path, fragile_data(model, folder), fragile_data(model, folder, labels=False)


def edgekit(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "100"},
    )


def ort_outputs(model: onnx.ModelProto | Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    # No graph optimisation: the QDQ model's own arithmetic (onnxruntime's fused int8 Gemm rounds otherwise).
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return np.stack([session.run(None, {"x": s[None]})[0][0] for s in x])


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def dataset(model, path):
    return open_dataset(path, input_specs(model), None)


def test_the_search_restores_the_fragile_layer_first(fragile):
    path, data, _ = fragile
    model = load_model(path)
    result = search(
        model,
        dataset(model, data),
        dataset(model, data),
        get_target("arm-cpu"),
        QuantizeOptions(),
        SearchOptions(Budget("min_cosine", 0.995), executor="inline", ranking_samples=20),
    )
    assert result.met and result.restored[0][0] == FRAGILE
    assert [r[2] for r in result.restored] == ["float"] * len(result.restored)
    # The curve starts at plain int8 (below the budget) and ends at the answer; onnxruntime agrees on both.
    x = np.load(data)["x"]
    ref = ort_outputs(path, x)
    # The search's starting point: int8, with bias correction, another range estimator and GPTQ rounding when
    # they brought it closer.
    methods = [f.split()[0] for f in result.base_fixes if f.endswith(" ranges")]
    plain = quantize(
        model,
        dataset(model, data),
        QuantizeOptions(
            activations="int8",
            bias_correction="bias-correction" in result.base_fixes,
            method=methods[0] if methods else "minmax",
            weight_rounding="gptq" if "gptq rounding" in result.base_fixes else "nearest",
        ),
    )
    restored = quantize(model, dataset(model, data), result.options)
    assert (
        mean_cosine(ref, ort_outputs(plain.proto(), x))
        < 0.995
        <= mean_cosine(ref, ort_outputs(restored.proto(), x))
    )
    assert result.curve[0].metric == pytest.approx(mean_cosine(ref, ort_outputs(plain.proto(), x)), abs=2e-3)
    assert result.curve[-1].metric == pytest.approx(result.final.metric)
    assert len(result.curve) == len(result.restored) + 1


def test_cli_max_drop_on_the_default_process_pool(fragile, tmp_path):
    path, data, _ = fragile
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    run = edgekit("quantize", path, "--calib", data, "--eval", data, "--max-drop", "0", "-o", out,
                  "--report", report, "--target", "intel-vpu", "-q")  # fmt: skip
    assert run.returncode == 0, run.stderr
    section = json.loads(report.read_text())["accuracy_aware"]
    assert section["executor"] == "process" and section["data"]["flag"] == "--eval"
    assert section["restored"][0]["node"] == FRAGILE
    assert "--max-drop 0 met" in run.stdout
    # The written file: the fragile conv reads float weights, and onnxruntime loses no labelled sample.
    written = onnx.load(out)
    conv = next(n for n in written.graph.node if n.name == FRAGILE)
    assert conv.input[1] in {t.name for t in written.graph.initializer}
    arrays = np.load(data)
    ref, cand = ort_outputs(path, arrays["x"]), ort_outputs(out, arrays["x"])
    labels = arrays["labels"]
    assert np.sum(cand.argmax(1) == labels) >= np.sum(ref.argmax(1) == labels)


def test_every_target_has_its_legal_restores():
    names = {
        t: [r.name for r in available_restores(get_target(t))] for t in ("arm-cpu", "intel-vpu", "nnapi")
    }
    arm = get_target("arm-cpu")
    arm_int16 = "int16x8" if arm.precisions["int16x8"] is None else None
    assert names["arm-cpu"] == [n for n in (arm_int16, "float") if n]
    assert names["intel-vpu"] == ["float"]
    assert names["nnapi"] == ["mse", "percentile", "bias-correction"]  # int8 only
    assert [r.name for r in available_restores(get_target("nnapi"), allow_cpu_fallback=True)][-1] == "float"
    # int16x8 joins arm-cpu's choices, first, as soon as the target runs the recipe.
    runs_int16 = type("Arm16", (), {"name": "arm-cpu", "precisions": {**arm.precisions, "int16x8": None}})()
    assert [r.name for r in available_restores(runs_int16)] == ["int16x8", "float"]
    assert set(RESTORES) >= {"arm-cpu", "intel-vpu", "nnapi"}


def test_each_int8_restore_changes_what_it_says(fragile):
    path, data, _ = fragile
    model = load_model(path)
    base = QuantizeOptions(activations="int8", samples=40, method="minmax")
    stats_options = QuantizeOptions(activations="int8", samples=40, method="mse", bias_correction=True)
    stats = quantize(model, dataset(model, data), stats_options).stats

    def initializer(q, suffix: str, node: str) -> np.ndarray:
        proto = q.proto()
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
        return next(v for k, v in inits.items() if node in k and k.endswith(suffix))

    plain = quantize(model, (), base, statistics=stats)
    mse = quantize(model, (), apply_restores(base, {"conv2": "mse"}), statistics=stats)
    corrected = quantize(model, (), apply_restores(base, {"conv2": "bias-correction"}), statistics=stats)
    out = plain.plan.fused and "r2"
    assert mse.params[out].scale < plain.params[out].scale  # mse clips the range
    assert mse.params["r1"] == plain.params["r1"]  # the other layers keep theirs
    assert not np.array_equal(
        initializer(plain, "_quantized", "b2_conv2"), initializer(corrected, "_quantized", "b2_conv2")
    )
    left_float = quantize(
        model, (), apply_restores(base, {FRAGILE: "float"}, {FRAGILE: "relu1"}), statistics=stats
    )
    assert {f.node for f in left_float.plan.float_ops} >= {FRAGILE, "relu1"}


def test_nnapi_refuses_a_budget_int8_cannot_meet_and_names_the_layers(fragile, tmp_path):
    path, data, _ = fragile
    args = ["quantize", path, "--calib", data, "--eval", data, "--max-drop", "0", "--target", "nnapi",
            "--executor", "inline", "--ranking-samples", "20", "-q"]  # fmt: skip
    run = edgekit(*args, "-o", tmp_path / "a.onnx")
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be met in int8: best reached top-1 loss" in lines[0]
    assert f"layers that would need float: {FRAGILE}" in lines[0] and "--allow-cpu-fallback" in lines[0]
    assert not (tmp_path / "a.onnx").exists()
    run = edgekit(*args, "-o", tmp_path / "b.onnx", "--allow-cpu-fallback", "--report", tmp_path / "b.json")
    assert run.returncode == 0, run.stderr
    restored = json.loads((tmp_path / "b.json").read_text())["accuracy_aware"]["restored"]
    assert (FRAGILE, "float") in {(r["node"], r["restore"]) for r in restored}


def test_a_budget_nothing_meets_is_one_line_with_the_best_reached(fragile, tmp_path):
    path, data, _ = fragile
    run = edgekit("quantize", path, "--calib", data, "--accuracy-data", data, "--min-cosine", "1",
                  "--executor", "inline", "-o", tmp_path / "x.onnx", "-q")  # fmt: skip
    assert run.returncode == 2
    line = run.stderr.strip()
    assert "\n" not in line and "--min-cosine 1 cannot be met: best reached cosine 0.9" in line


def test_labels_absent_and_bad_budgets(fragile, tmp_path):
    path, data, unlabelled = fragile
    run = edgekit("quantize", path, "--calib", data, "--accuracy-data", unlabelled, "--max-drop", "1",
                  "-o", tmp_path / "x.onnx", "-q")  # fmt: skip
    assert run.returncode == 2 and "--max-drop needs labels" in run.stderr and "Traceback" not in run.stderr
    run = edgekit("quantize", path, "--calib", data, "--max-drop", "1", "-o", tmp_path / "x.onnx", "-q")
    assert run.returncode == 2 and "--accuracy-data DATA or --eval DATA" in run.stderr
    with pytest.raises(DataError, match="pass one accuracy budget"):
        budget_from_flags(1.0, 99.0, None)
    with pytest.raises(DataError, match="--min-agreement must be a percentage"):
        Budget("min_agreement", 120)


@pytest.mark.parametrize("precision", ["w8", "fp16"])
def test_a_budget_with_a_recipe_the_search_does_not_quantize_is_refused_not_ignored(
    fragile, tmp_path, precision
):
    """Found by benchmarks/recipe_survey.py: `--precision w8|w4|fp16|fp32 --min-cosine C` wrote the file or the
    bundle with the budget never measured (exit 0 with --min-cosine 0.999999999), and so did a deploy of an
    already-quantized model. Each is one typed line now, and nothing is written."""
    path, data, _ = fragile
    budget = ("--calib", data, "--accuracy-data", data, "--min-cosine", "0.999999999", "-q")
    out = tmp_path / "x.onnx"
    run = edgekit("quantize", path, "--precision", precision, *budget, "-o", out)
    assert run.returncode == 2 and not out.exists(), run.stdout + run.stderr
    assert run.stderr.strip() == (
        f"error: --min-cosine restores layers of a model quantized with calibration data; --precision "
        f"{precision} is not (give int8 or int16x8)"
    )
    run = edgekit(
        "deploy", path, "--target", "arm-cpu", "--precision", precision, *budget, "-o", tmp_path / "b"
    )
    assert run.returncode == 2 and not (tmp_path / "b").exists(), run.stdout + run.stderr
    assert run.stderr.strip() == (
        f"error: --min-cosine restores layers of the int8 model the deploy quantizes; --precision {precision} "
        "is not quantized with --calib (give --precision auto, int8 or int16x8)"
    )


def test_a_budget_on_an_already_quantized_model_is_refused(fragile, tmp_path):
    path, data, _ = fragile
    budget = ("--calib", data, "--accuracy-data", data, "--min-cosine", "0.999999999", "-q")
    qdq = tmp_path / "qdq.onnx"
    assert edgekit("quantize", path, "--calib", data, "-o", qdq, "-q").returncode == 0
    run = edgekit("deploy", qdq, "--target", "intel-vpu", *budget, "-o", tmp_path / "c")
    assert run.returncode == 2 and not (tmp_path / "c").exists(), run.stdout + run.stderr
    assert run.stderr.strip() == (
        "error: --min-cosine chooses what to restore while quantizing a float model; qdq.onnx is already quantized"
    )


def test_a_missing_ray_names_the_extra(fragile, monkeypatch):
    from edgekit.quantize import executors

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(QuantizationError, match=r"pip install edgekit\[ray\]"):
        executors.make_executor("ray", None)  # type: ignore[arg-type]


def test_the_ray_executor_on_a_local_ray(fragile):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install edgekit[ray])")
    path, data, _ = fragile
    model = load_model(path)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        result = search(
            model,
            dataset(model, data),
            dataset(model, data),
            get_target("intel-vpu"),
            QuantizeOptions(),
            SearchOptions(Budget("max_drop", 0), executor="ray", ranking_samples=20),
        )
    finally:
        ray.shutdown()
    assert result.executor == "ray" and result.met and result.restored[0][0] == FRAGILE


def test_the_report_section_lists_the_restores_and_plots_the_curve(fragile):
    from edgekit import accuracy_report
    from edgekit.quantize.accuracy import CURVE_POINTS, curve_points

    assert curve_points(3) == [0, 1, 2, 3]
    many = curve_points(90)
    assert many[0] == 0 and many[-1] == 90 and len(many) == CURVE_POINTS + 1
    path, data, _ = fragile
    model = load_model(path)
    result = search(
        model,
        dataset(model, data),
        dataset(model, data),
        None,
        QuantizeOptions(),
        SearchOptions(Budget("min_agreement", 100), executor="inline", ranking_samples=20),
    )
    section = result.to_json()
    assert section["restored"][0]["node"] == FRAGILE and section["target"] == "onnx"
    md = accuracy_report.markdown(section)
    assert f"| 1 | {FRAGILE} | Conv |" in md and "--min-agreement 100 met" in md
    figure = accuracy_report.plot({"arm-cpu": section})
    (line,) = [ln for ln in figure.axes[0].lines if ln.get_label() == "arm-cpu"]
    assert list(line.get_xdata()) == [c["restored"] for c in section["curve"]]
    assert FRAGILE in accuracy_report.html_section(section)


def test_deploy_restores_per_target_and_the_tflite_keeps_the_float_layer(fragile, tmp_path):
    path, data, _ = fragile
    out = tmp_path / "bundles"
    run = edgekit("deploy", path, "-t", "arm-cpu", "-t", "intel-vpu", "--calib", data, "--accuracy-data", data,
                  "--max-drop", "0", "--executor", "inline", "--ranking-samples", "20", "-o", out, "-q")  # fmt: skip
    assert run.returncode == 0, run.stderr
    from edgekit.device_agents.bundle import read_bundle

    for target in ("arm-cpu", "intel-vpu"):
        with read_bundle(out / target) as bundle:
            manifest = bundle.manifest
        assert FRAGILE in manifest.provenance["quantization"]["exclude"]
        # Verified against its QDQ model: the restored conv runs float in the artifact too (LiteRT, OpenVINO).
        assert min(o["cosine"] for o in manifest.verification["outputs"].values()) > 0.999
    assert "ops left in float: conv_fragile (CONV_2D)" in run.stdout
    # Each target's outcome in one line: the metric reached, the layers restored and to what.
    for target in ("arm-cpu", "intel-vpu"):
        line = next(x for x in run.stdout.splitlines() if x.startswith(f"{target}: --max-drop 0 met on"))
        assert re.search(r"\b1 of \d+ layers restored \(1 float\): conv_fragile; \d+ evaluations in", line), (
            line
        )
    run = edgekit("deploy", path, "-t", "arm-cpu", "--max-drop", "0", "-o", tmp_path / "x", "-q")
    assert run.returncode == 2 and "--max-drop needs --calib DATA" in run.stderr


@pytest.mark.parametrize(
    "restores,cut",
    [
        ({"conv2": "float"}, "r1_dequantized"),
        ({"conv2": "int16x8"}, "r1_dequantized"),
        ({"fc": "float"}, "flat_dequantized"),
        ({"conv3": "int16x8", "fc": "float"}, "r1_dequantized"),  # r2 feeds the Add too: no cut there
    ],
)
def test_candidates_run_from_cached_activations_measure_what_the_whole_model_does(fragile, restores, cut):
    """A candidate runs only from the last cached activation of the base model it shares: the same outputs, bit
    for bit, as the whole candidate model in the same runtime (OpenVINO, onnxruntime for int16x8), and the
    metric onnxruntime gives the whole candidate QDQ model."""
    import onnx_ir as ir
    from edgekit.quantize.budget import Reference
    from edgekit.quantize.executors import EvalContext, Task, evaluate

    path, data, _ = fragile
    model = load_model(path)
    x = np.load(data)["x"][:12]
    inputs = [{"x": s[None]} for s in x]
    base = QuantizeOptions(activations="int8")
    stats = quantize(model, dataset(model, data), base).stats
    budget = Budget("min_cosine", 0.99)
    ref = ort_outputs(path, x)
    reference = Reference.build(["logits"], [{"logits": r[None]} for r in ref], [None] * len(x), budget)
    context = EvalContext("k", ir.to_proto(model).SerializeToString(), stats, inputs, reference, budget)
    candidate = apply_restores(base, restores)
    indices = tuple(range(len(x)))
    whole = evaluate(context, Task(candidate, indices))
    cached = evaluate(context, Task(candidate, indices, base))
    assert whole.cut is None and cached.cut == cut  # only the layers after the cut ran
    assert cached.measurement.metric == whole.measurement.metric
    qdq = quantize(model, (), candidate, statistics=stats).proto()
    assert cached.measurement.metric == pytest.approx(mean_cosine(ref, ort_outputs(qdq, x)), abs=2e-3)


def test_the_cache_runs_the_base_only_on_the_samples_asked_for(fragile):
    """A worker builds its cached base activations for the samples its candidates ask for, then for the others
    when asked: the answers stay those of the whole candidate model."""
    import onnx_ir as ir
    from edgekit.quantize.budget import Reference
    from edgekit.quantize.executors import EvalContext, Task, evaluate

    path, data, _ = fragile
    model = load_model(path)
    x = np.load(data)["x"][:10]
    base = QuantizeOptions(activations="int8")
    stats = quantize(model, dataset(model, data), base).stats
    budget = Budget("min_cosine", 0.99)
    ref = ort_outputs(path, x)
    reference = Reference.build(["logits"], [{"logits": r[None]} for r in ref], [None] * len(x), budget)
    inputs = [{"x": s[None]} for s in x]
    context = EvalContext("k", ir.to_proto(model).SerializeToString(), stats, inputs, reference, budget)
    candidate = apply_restores(base, {"fc": "float"})
    part = evaluate(context, Task(candidate, (3, 5), base))
    cached = context.suffix_cache(base).cached("openvino")
    assert part.cut == "flat_dequantized" and all(sorted(v) == [3, 5] for v in cached.values.values())
    indices = tuple(range(len(x)))
    rest = evaluate(context, Task(candidate, indices, base))
    assert rest.cut == "flat_dequantized" and all(sorted(v) == list(indices) for v in cached.values.values())
    whole = evaluate(context, Task(candidate, indices))
    assert whole.cut is None and rest.measurement.badness == whole.measurement.badness
    assert rest.measurement.metric == whole.measurement.metric


def test_the_search_calibrates_once_and_nnapi_falls_back_to_the_float_search(fragile, monkeypatch):
    """Every whole-model fix and per-layer int8 fix (other range methods, bias correction) chooses parameters from
    the one set of statistics: the model is calibrated once (pipeline.calibrate: the equalization's per-channel
    ranges, then the statistics); nnapi ends with the fragile layer on the CPU."""
    from edgekit.quantize import accuracy

    calls = []
    monkeypatch.setattr(accuracy, "calibrate", _counted(accuracy.calibrate, calls))
    path, data, _ = fragile
    model = load_model(path)
    lines: list[str] = []
    result = search(
        model,
        dataset(model, data),
        dataset(model, data),
        get_target("nnapi"),
        QuantizeOptions(),
        SearchOptions(Budget("max_drop", 0), executor="inline", ranking_samples=20, allow_cpu_fallback=True),
        say=lines.append,
    )
    assert len(calls) == 1
    assert any(" with mse ranges " in line for line in lines)  # the histogram methods were among the fixes
    assert result.met and (FRAGILE, "float") in {(n, r) for n, _, r in result.restored}


def _fragile_search(model, data, budget, count=40):
    """A :class:`~edgekit.quantize.candidates.Search` over the fragile model's samples on the inline executor (int8 base, exact runner)."""
    import onnx_ir as ir
    from edgekit.quantize.budget import Reference
    from edgekit.quantize.candidates import Search as _Search
    from edgekit.quantize.executors import EvalContext, InlineExecutor

    x = np.load(data)["x"][:count]
    stats = quantize(model, dataset(model, data), QuantizeOptions(activations="int8")).stats
    ref = ort_outputs(ir.to_proto(model), x)
    reference = Reference.build(["logits"], [{"logits": r[None]} for r in ref], [None] * len(x), budget)
    inputs = [{"x": s[None]} for s in x]
    context = EvalContext("k", ir.to_proto(model).SerializeToString(), stats, inputs, reference, budget)
    everything = tuple(range(len(x)))
    return _Search(InlineExecutor(context), budget, everything, everything), x


def test_minimise_drops_the_restores_that_did_not_help_and_keeps_the_fragile_layer(fragile):
    """Delta debugging over a long restored set (every layer but the head float): what is left still meets the
    budget on the whole set (checked again in onnxruntime), holds the fragile layer, and is smaller."""
    from edgekit.quantize.prune import minimise

    path, data, _ = fragile
    model = load_model(path)
    budget = Budget("min_cosine", 0.995)
    s, x = _fragile_search(model, data, budget)
    base = QuantizeOptions(activations="int8")
    layers = ["conv0", "conv2", FRAGILE, "conv3", "add"]  # the fragile layer in the middle of the ranked list
    chosen = {n: "float" for n in layers}
    kept = minimise(s, lambda r: apply_restores(base, r), chosen, s.everything)
    assert FRAGILE in kept and len(kept) < len(chosen) and set(kept) <= set(chosen)
    assert all(st.phase == "minimise" for st in s.steps) and s.steps
    ref = ort_outputs(path, x)
    qdq = quantize(model, (), apply_restores(base, kept), statistics=s.executor.context.stats).proto()
    assert mean_cosine(ref, ort_outputs(qdq, x)) >= budget.value - 2e-3
    # Without the fragile layer nothing meets it: each trial that dropped it failed and was not kept.
    alone = {n: "float" for n in layers if n != FRAGILE}
    assert not budget.met(
        s.run("check", [(apply_restores(base, alone), 4)], s.everything)[0].measurement.metric
    )


def test_the_shortfall_measures_how_far_a_lost_sample_is_from_its_class():
    """The continuous figure the restores are ranked by: over the samples fp32 gets right and the candidate gets
    wrong, fp32's class below the candidate's top score; with equal sample counts the smaller shortfall ranks
    first."""
    from edgekit.quantize.budget import Reference, measure

    budget = Budget("max_drop", 0.5)
    ref_logits = [np.array([[3.0, 1.0, 0.0]]), np.array([[0.0, 2.0, 1.0]]), np.array([[0.0, 0.5, 2.0]])]
    labels = [0, 1, 0]  # the third: fp32 is wrong, it does not count
    reference = Reference.build(["y"], [{"y": r} for r in ref_logits], labels, budget)
    near = [
        {"y": np.array([[1.0, 1.2, 0.0]])},
        {"y": np.array([[0.0, 2.0, 1.0]])},
        {"y": np.array([[3.0, 0, 0]])},
    ]
    far = [
        {"y": np.array([[1.0, 3.0, 0.0]])},
        {"y": np.array([[0.0, 2.0, 1.0]])},
        {"y": np.array([[3.0, 0, 0]])},
    ]
    m_near, m_far = (measure(budget, reference, range(3), o) for o in (near, far))
    assert m_near.metric == m_far.metric == pytest.approx(100 / 3)  # one lost sample each
    assert m_near.shortfall == pytest.approx(0.2, abs=1e-5) and m_far.shortfall == pytest.approx(
        2.0, abs=1e-5
    )
    assert m_near.rank_key(budget) > m_far.rank_key(budget)
    same = measure(budget, reference, range(3), [{"y": r} for r in ref_logits])
    assert same.shortfall == 0.0 and same.metric == 0.0


def test_intel_vpu_candidates_run_on_openvinos_int8_kernels(fragile):
    """intel-vpu's candidates are measured as its IR runs (OpenVINO's int8 kernels, HostRunner(exact_qdq=False)),
    whole (no cached cut): the same badness per sample as that runner on the whole QDQ model."""
    import onnx_ir as ir
    from edgekit.core.runtime import HostRunner
    from edgekit.quantize.budget import Reference, measure
    from edgekit.quantize.executors import KERNEL_RUNNER_TARGETS, EvalContext, Task, evaluate

    assert "intel-vpu" in KERNEL_RUNNER_TARGETS and "arm-cpu" not in KERNEL_RUNNER_TARGETS
    path, data, _ = fragile
    model = load_model(path)
    x = np.load(data)["x"][:16]
    base = QuantizeOptions(activations="uint8")
    stats = quantize(model, dataset(model, data), base).stats
    budget = Budget("min_cosine", 0.99)
    ref = ort_outputs(path, x)
    reference = Reference.build(["logits"], [{"logits": r[None]} for r in ref], [None] * len(x), budget)
    inputs = [{"x": s[None]} for s in x]
    context = EvalContext("k", ir.to_proto(model).SerializeToString(), stats, inputs, reference, budget,
                          exact_qdq=False)  # fmt: skip
    candidate = apply_restores(base, {"conv3": "float"})
    indices = tuple(range(len(x)))
    out = evaluate(context, Task(candidate, indices, base))
    assert out.cut is None
    runner = HostRunner(quantize(model, (), candidate, statistics=stats).proto(), exact_qdq=False)
    direct = measure(budget, reference, indices, [runner.run(i) for i in inputs])
    assert out.measurement.badness == direct.badness and out.measurement.metric == direct.metric


class _OracleExecutor:
    """Measures a candidate (a frozenset of ``layer -> restore``) by a hand-made rule instead of running a model."""

    workers = 2

    def __init__(self, rule):
        self.rule = rule

    def start(self, tasks):
        from edgekit.quantize.budget import Measurement
        from edgekit.quantize.executors import Outcome

        outs = []
        for task in tasks:
            cos = self.rule(dict(task.options))
            outs.append(Outcome(Measurement(cos, 100.0, 100.0, cos, len(task.indices)), 0, 0.0))
        return lambda: outs


def _oracle_rank_and_restore(rule, layers, cheap_score):
    """``_rank_and_restore`` over ``layers`` (arm-cpu's restores: int16x8, float) measured by ``rule``: (met, chosen,
    ranked, the lines it said, the search)."""
    from edgekit.quantize.accuracy import _rank_and_restore
    from edgekit.quantize.candidates import Search

    everything = tuple(range(8))
    s = Search(_OracleExecutor(rule), Budget("min_cosine", 0.99), everything[:4], everything)
    said: list[str] = []
    base = s.run("int8", [(frozenset(), 0)])[0].measurement
    met, chosen, ranked = _rank_and_restore(
        s,
        lambda r: frozenset(r.items()),
        layers,
        cheap_score,
        ["int16x8", "float"],
        base,
        5,
        said.append,
        "arm-cpu",
    )
    return met, chosen, ranked, said, s


def test_when_each_layers_cheaper_restore_falls_short_together_the_prefix_goes_float():
    """Alone, int16x8 does as well as float on every layer (so it is each layer's choice), but two layers need
    float weights together: no prefix of the cheaper choices meets the budget, the float prefix does, and the
    pruned answer keeps exactly those two layers float."""
    layers = ["a", "b", "c", "d", "e"]

    def rule(restores):
        cos = 0.9 + 0.015 * len(restores)
        if restores.get("a") == "float" and restores.get("b") == "float":
            cos += 0.06
        return min(cos, 1.0)

    met, chosen, _, said, s = _oracle_rank_and_restore(rule, layers, {n: 1.0 for n in layers})
    assert met and chosen == {"a": "float", "b": "float"}
    assert any("every restored layer float" in line for line in said)
    # Each layer alone chose int16x8, and every int16x8 prefix (all five: 0.975) fell short.
    assert rule({n: "int16x8" for n in layers}) < 0.99
    assert any(st.phase == "gallop" and st.restored == 5 and not st.met for st in s.steps)


def test_a_candidate_confirmed_on_more_samples_runs_only_the_others(fragile):
    """With its outputs kept per sample, a candidate measured on the ranking subset and then on the whole set runs
    only the samples it has not run (the whole set's measurement is the whole model's, sample for sample, with
    `--max-drop` and `--min-cosine`), and a candidate measured on the whole set is measured on a subset without
    running at all."""
    import onnx_ir as ir
    from edgekit.quantize.budget import Reference
    from edgekit.quantize.candidates import Search as _Search
    from edgekit.quantize.executors import EvalContext, InlineExecutor, Task, evaluate

    path, data, _ = fragile
    model = load_model(path)
    arrays = np.load(data)
    x, labels = arrays["x"][:16], [int(v) for v in arrays["labels"][:16]]
    base = QuantizeOptions(activations="int8")
    stats = quantize(model, dataset(model, data), base).stats
    inputs = [{"x": s[None]} for s in x]
    ref = ort_outputs(path, x)
    everything, ranking = tuple(range(len(x))), (1, 4, 6, 9, 12, 13)
    for budget in (Budget("max_drop", 0), Budget("min_cosine", 0.99)):
        reference = Reference.build(["logits"], [{"logits": r[None]} for r in ref], labels, budget)
        context = EvalContext("k", ir.to_proto(model).SerializeToString(), stats, inputs, reference, budget)
        asked: list[tuple[int, ...]] = []
        executor = InlineExecutor(context)
        real = executor.map
        executor.map = lambda tasks, real=real, asked=asked: (
            asked.extend(t.indices for t in tasks) or real(tasks)
        )
        s = _Search(executor, budget, ranking, everything)
        s.reference, s.keep, s.base = reference, ("logits",), base
        candidate, other = apply_restores(base, {"conv2": "float"}), apply_restores(base, {"conv3": "float"})
        on_ranking = s.run("rank", [(candidate, 1)])[0].measurement
        confirmed = s.run("confirm", [(candidate, 1)], everything)[0].measurement
        assert asked == [ranking, tuple(i for i in everything if i not in ranking)]
        for indices, got in ((ranking, on_ranking), (everything, confirmed)):
            want = evaluate(context, Task(candidate, indices)).measurement  # the whole model, every sample
            assert (got.metric, got.badness, got.agreement, got.cosine) == (
                want.metric, want.badness, want.agreement, want.cosine
            )  # fmt: skip
        asked.clear()
        whole = s.run("curve", [(other, 1)], everything)[0]
        subset = s.run("rank", [(other, 1)])[0]
        assert asked == [everything]  # the subset was measured from the outputs kept
        assert subset.measurement.badness == tuple(whole.measurement.badness[i] for i in ranking)
        assert subset.size_bytes == whole.size_bytes
        assert [st.phase for st in s.steps] == ["rank", "confirm", "curve"]  # evaluations that ran


class _RecordingOracle(_OracleExecutor):
    """The oracle, its rule also told how many samples a candidate runs on; each batch of tasks recorded."""

    def __init__(self, rule):
        super().__init__(rule)
        self.batches: list[list[tuple[frozenset, int]]] = []

    def start(self, tasks):
        from edgekit.quantize.budget import Measurement
        from edgekit.quantize.executors import Outcome

        self.batches.append([(t.options, len(t.indices)) for t in tasks])
        outs = []
        for task in tasks:
            cos = self.rule(dict(task.options), len(task.indices))
            outs.append(Outcome(Measurement(cos, 100.0, 100.0, cos, len(task.indices)), 0, 0.0))
        return lambda: outs


def test_single_restores_meeting_the_ranking_subset_are_confirmed_in_one_round():
    """Two layers each meet the budget alone on the ranking subset; only the second ranked meets it on the whole
    set. Both are confirmed in one batch (one round of the pool), and the answer is the one that meets it there."""
    from edgekit.quantize.accuracy import _rank_and_restore
    from edgekit.quantize.candidates import Search as _Search

    layers = ["a", "b", "c", "d"]

    def rule(restores, samples):
        if restores == {"a": "float"}:
            return 0.995 if samples == 4 else 0.98  # meets on the ranking subset only
        if restores == {"b": "float"}:
            return 0.993
        return 0.9 + 0.01 * len(restores)

    budget = Budget("min_cosine", 0.99)
    everything = tuple(range(8))
    executor = _RecordingOracle(rule)
    s = _Search(executor, budget, everything[:4], everything)
    base = s.run("int8", [(frozenset(), 0)])[0].measurement
    met, chosen, ranked = _rank_and_restore(
        s, lambda r: frozenset(r.items()), layers, {n: 1.0 for n in layers}, ["float"], base, 4, lambda _: None,
        "intel-vpu",
    )  # fmt: skip
    assert met and chosen == {"b": "float"} and ranked[0] == "b"
    confirms = [b for b in executor.batches if b and all(n == len(everything) for _, n in b)]
    assert confirms == [[(frozenset({("a", "float")}), 8), (frozenset({("b", "float")}), 8)]]
    assert [st.phase for st in s.steps].count("confirm") == 2


def test_the_search_s_sqnr_rows_are_the_report_s_sqnr(fragile):
    """The search's per-layer SQNR (``sqnr_only``: the two sums alone, computed in one graph holding the fp32
    and the QDQ model, in float32, on onnxruntime: no compile step) is the SQNR of the report's full rows (two
    OpenVINO runs, float64 sums in numpy)."""
    from edgekit.core import runtime
    from edgekit.quantize import evaluation
    from edgekit.quantize.evaluation import evaluate as per_layer_sqnr

    path, data, _ = fragile
    model = load_model(path)
    quantized = quantize(model, dataset(model, data), QuantizeOptions(activations="int8"))
    _, full = per_layer_sqnr(model, quantized, dataset(model, data), limit=6, isolate=False)
    layers = [r["tensor"] for r in full]
    from edgekit.quantize.calibrate import no_progress

    sessions = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime._OrtSession, "__init__", _counted(runtime._OrtSession.__init__, sessions))
        joined = evaluation._sqnr_in_graph(
            model, quantized, layers, dataset(model, data), no_progress, 6, False
        )
    assert joined is not None  # the one-graph form, not the two runs it falls back to
    assert len(sessions) == 1  # on onnxruntime (not compiled by OpenVINO)
    _, light = per_layer_sqnr(model, quantized, dataset(model, data), limit=6, isolate=False, sqnr_only=True)
    assert light == joined[1]
    # The same rows (equal SQNRs, a reshape's and its input's, may sort either way in float32).
    by_name = {r["tensor"]: r["sqnr_db"] for r in full}
    assert sorted(r["tensor"] for r in light) == sorted(by_name) and len(full) >= 5
    for a in light:
        b = by_name[a["tensor"]]
        assert (a["sqnr_db"] is None) == (b is None)
        assert a["sqnr_db"] is None or a["sqnr_db"] == pytest.approx(b, abs=1e-4)
    # The fragile layer's noise is seen.
    assert any(r["sqnr_db"] is not None and r["sqnr_db"] < 30 for r in full)


def test_workers_share_the_cached_base_activations_through_the_store(fragile, tmp_path):
    """Two workers' caches of one base model with a shared store: the second reads every sample the first ran
    (it never runs the base), and a candidate run from those values gives the whole candidate model's answers; a
    sample another worker claimed but never wrote is run."""
    from edgekit.core.runtime import HostRunner
    from edgekit.quantize.suffix import CANDIDATE_PROPERTIES, SuffixCache

    path, data, _ = fragile
    model = load_model(path)
    x = np.load(data)["x"][:8]
    inputs = [{"x": s[None]} for s in x]
    base = QuantizeOptions(activations="int8")
    stats = quantize(model, dataset(model, data), base).stats
    base_proto = quantize(model, (), base, statistics=stats).proto()
    candidate = quantize(model, (), apply_restores(base, {"fc": "float"}), statistics=stats).proto()
    indices = tuple(range(len(x)))
    first = SuffixCache(base_proto, inputs, 1, (str(tmp_path), 0, 2))
    first.cached("openvino").ensure(indices)
    second = SuffixCache(base_proto, inputs, 1, (str(tmp_path), 1, 2))
    results, cut = second.run(candidate, indices)
    assert cut == "flat_dequantized" and second.cached("openvino")._runner is None  # every sample read
    whole = HostRunner(candidate, properties=CANDIDATE_PROPERTIES)  # as the search's workers run it
    for got, sample in zip(results, inputs, strict=True):
        assert np.array_equal(got["logits"], whole.run(sample)["logits"])
    # A sample claimed by a worker that never wrote it: run by the one that needs it.
    third = SuffixCache(base_proto, inputs, 1, (str(tmp_path / "other"), 0, 2))
    (tmp_path / "other").mkdir()
    third_cache = third.cached("openvino")
    open(third_cache._path(3) + ".claim", "w").close()
    third_cache.ensure((3, 4))
    assert sorted(third_cache.values["flat_dequantized"]) == [3, 4] and third_cache._runner is not None


def test_a_chain_of_reshapes_between_float_layers_goes_float_with_them():
    """Two data-movement ops in a row between two layers: both layers restored to float leaves no int8 tensor
    (each mover waited for the other before: PP-OCRv4 rec kept 35 of them int8 with every layer float); one layer
    still int8 keeps the chain quantized next to it."""
    import onnx_ir as ir
    from edgekit.core.model import load_proto
    from edgekit.quantize.accuracy import _enclosed_data_movement, quantizable_layers
    from edgekit.quantize.pipeline import NothingToQuantizeError
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([1, 8, 8, 8], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["a", "shape"], ["r"], name="reshape"),
        helper.make_node("Transpose", ["r"], ["t"], name="transpose", perm=[0, 1, 3, 2]),
        helper.make_node("Conv", ["t", "w2"], ["y"], name="c2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits,
    )  # fmt: skip
    model = load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    samples = [type("S", (), {"inputs": {"x": rng.normal(0, 1, (1, 4, 8, 8)).astype(np.float32)}, "label": None})()
               for _ in range(4)]  # fmt: skip
    base = quantize(model, samples, QuantizeOptions())
    layers = {n.name for n in quantizable_layers(model, base.plan)}
    assert layers == {"c1", "c2"}
    enclosed = _enclosed_data_movement(model, base.plan, layers)
    assert enclosed(frozenset({"c1", "c2"})) == {"reshape", "transpose"}
    assert enclosed(frozenset({"c1"})) == frozenset()
    with pytest.raises(NothingToQuantizeError):  # every layer float and the chain with them: the float model
        quantize(
            model,
            (),
            QuantizeOptions(exclude=frozenset({"c1", "c2", "reshape", "transpose"})),
            statistics=base.stats,
        )
    one = quantize(model, (), QuantizeOptions(exclude=frozenset({"c1"})), statistics=base.stats).proto()
    assert any(n.op_type == "QuantizeLinear" for n in one.graph.node)
    assert isinstance(ir.from_proto(one), ir.Model)


def test_when_no_ranked_prefix_meets_the_float_model_is_pruned_back_to_int8():
    """The budget needs two layers float together, one of them the last in every ranked order (a near-tie sample
    on a high-SQNR layer): no prefix but the whole list meets it, and the whole list is the float model (no int8
    left: it meets no budget). Delta debugging from the float model finds the two."""
    layers = ["a", "b", "c", "d", "e"]

    def rule(restores):
        if len(restores) == len(layers) and set(restores.values()) == {"float"}:
            return float("nan")  # every layer float: nothing to quantize
        cos = 0.9 + 0.001 * len(restores)
        return cos + 0.09 if restores.get("a") == "float" and restores.get("e") == "float" else cos

    met, chosen, ranked, said, _ = _oracle_rank_and_restore(
        rule, layers, {n: 5.0 - i for i, n in enumerate(layers)}
    )
    assert met and chosen == {"a": "float", "e": "float"}, said
    assert any("from the float model" in line for line in said)
    assert ranked[:2] == ["a", "e"] and sorted(ranked) == layers


def test_a_refusal_names_a_few_layers_and_counts_the_rest():
    """The nnapi refusal is one line: a fragile model whose every layer needs float (a seeded MobileNetV3 at a
    98 % agreement budget: 96 of 108) names the first ones and counts the others instead of listing them all."""
    from edgekit.quantize.accuracy import NAMED_LAYERS, _named

    few = [f"Conv.{i}" for i in range(NAMED_LAYERS)]
    assert _named(few, 108) == ", ".join(few)
    many = [f"Conv.{i}" for i in range(96)]
    assert _named(many, 108) == f"96 of 108: {', '.join(many[:NAMED_LAYERS])} and {96 - NAMED_LAYERS} more"


def test_the_deploy_line_suggests_fp16_when_most_layers_left_int8():
    """When the search restores over half the layers (a fragile seeded MobileNetV3 at --min-agreement 98: 107 of
    108), the deploy's outcome line says the int8 bundle is barely int8 and names the float recipe."""
    from edgekit.accuracy_report import outcome_line

    def section(restored: int) -> dict:
        rows = [{"node": f"Conv.{i}", "restore": "float" if i % 2 else "int16x8"} for i in range(restored)]
        metric = {"metric": 98.4}
        return {"target": "arm-cpu", "budget": {"kind": "min_agreement", "value": 98.0}, "restored": rows,
                "accuracy_samples": 64, "final": metric, "base": {"metric": 78.1}, "quantizable_layers": 108,
                "evaluations": 99, "wall_s": 50.0}  # fmt: skip

    line = outcome_line(section(107))
    assert "107 of 108 layers restored (54 int16x8, 53 float): Conv.0, Conv.1" in line
    assert line.endswith(
        "; over half the layers restored: consider --precision fp16 (float compute, half the size)"
    )
    assert "fp16" not in outcome_line(section(3)) and "3 of 108 layers restored" in outcome_line(section(3))


def _counted(function, calls: list):
    """``function``, each call's arguments appended to ``calls``."""

    def wrapper(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    return wrapper
