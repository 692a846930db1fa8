"""``edgekit.deploy``: the deploy pipeline as a library (what the CLI, the examples and the benchmarks call)."""

from __future__ import annotations

import json
from pathlib import Path

import edgekit
import pytest
from edgekit.core.errors import EdgekitError, OutputError, TargetError
from edgekit.device_agents.bundle import read_bundle


def test_deploy_loads_the_model_once_and_returns_what_it_did(digits, tmp_path: Path, monkeypatch) -> None:
    import edgekit.core.model
    import edgekit.core.passes

    reads: list[str] = []
    prepares: list[int] = []
    read_proto, prepare = edgekit.core.model.read_proto, edgekit.core.passes.prepare
    monkeypatch.setattr(edgekit.core.model, "read_proto", lambda p: reads.append(str(p)) or read_proto(p))
    monkeypatch.setattr(edgekit.core.passes, "prepare", lambda m: prepares.append(1) or prepare(m))
    said: list[str] = []
    result = edgekit.deploy(
        digits.model, ["arm-cpu", "intel-vpu"], calib=digits.calib, eval=digits.val, max_samples=40,
        report=tmp_path / "out" / "report.html", hooks=edgekit.deployment.Hooks(say=said.append),
    )  # fmt: skip
    # quantized twice (int8 and uint8 activations), evaluated on the host and the device: loaded once
    assert reads == [str(digits.model)] and len(prepares) == 1
    assert sum(line.startswith("quantizing for") for line in said) == 2
    assert isinstance(result, edgekit.DeployResult) and result.ok and result.failures == ()
    assert [b.target for b in result.bundles] == ["arm-cpu", "intel-vpu"]
    assert result.bundle("arm-cpu").path == tmp_path / "out" / "arm-cpu"  # beside the report
    assert (
        read_bundle(result.bundle("intel-vpu").path).manifest.provenance["quantization"]["activations"]
        == "uint8"
    )
    assert result.report_path == tmp_path / "out" / "report.html" and result.report_path.exists()
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    assert on_disk["samples"] == 40 == result.report["samples"]
    for evaluation, entry in zip(result.evaluations, on_disk["targets"], strict=True):
        assert evaluation.target == entry["target"] and evaluation.precision == "int8"
        acc = entry["evaluation"]["accuracy"]
        assert (evaluation.reference_top1, evaluation.top1) == (acc["reference_top1"], acc["candidate_top1"])
        assert evaluation.top1_drop_pp == pytest.approx(evaluation.reference_top1 - evaluation.top1)
        assert evaluation.latency_p50_ms == entry["latency_ms"]["p50"] > 0


def test_deploy_without_eval_packages_and_prints_nothing(digits, tmp_path: Path, capsys) -> None:
    result = edgekit.deploy(digits.model, "arm-cpu", output=tmp_path, precision="fp32")
    assert capsys.readouterr() == ("", "")
    (bundle,) = result.bundles
    assert bundle.precision == "fp32" and bundle.verification["passed"]
    assert result.evaluations == () and result.report is None and result.report_path is None
    assert read_bundle(bundle.path).manifest.inputs[0].dtype == "float32"


def test_the_module_does_not_hide_the_function() -> None:
    import edgekit.deployment  # noqa: F401 - importing the module must leave edgekit.deploy the function

    assert callable(edgekit.deploy) and edgekit.deploy is edgekit.deployment.deploy


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, OutputError, "pass an output folder (-o DIR) or --report PATH"),
        ({"output": "OUT", "precision": "fp8"}, EdgekitError, "--precision must be one of auto, fp32, fp16"),
        (
            {"output": "OUT", "devices": ["local", "ftp://h"], "eval": "VAL"},
            EdgekitError,
            "unknown device URL",
        ),
        (
            {"output": "OUT", "precision": "w4", "targets": "nnapi"},
            TargetError,
            "nnapi' cannot run --precision w4",
        ),
    ],
)
def test_bad_requests_raise_one_line_and_write_nothing(digits, tmp_path, kwargs, error, message) -> None:
    kwargs = {
        k: (str(tmp_path / "out") if v == "OUT" else digits.val if v == "VAL" else v)
        for k, v in kwargs.items()
    }
    with pytest.raises(error) as info:
        edgekit.deploy(digits.model, kwargs.pop("targets", "arm-cpu"), **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_the_readme_example_runs_as_written(digits, tmp_path: Path, monkeypatch, capsys) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (code,) = [b.split("```", 1)[0] for b in readme.split("```python\n")[1:] if "edgekit.deploy(" in b]
    for source, name in ((digits.model, "model.onnx"), (digits.calib, "calib.npz"), (digits.val, "val.npz")):
        (tmp_path / name).write_bytes(Path(source).read_bytes())
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["samples"] == 100 and (tmp_path / "out" / "report.html").exists()
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == ["arm-cpu", "intel-vpu"]
    for line, entry in zip(printed, report["targets"], strict=True):
        assert Path(entry["bundle"]) == Path("out") / entry["target"]  # relative, as given
        assert f"top-1 {entry['evaluation']['accuracy']['candidate_top1']:.1f} %" in line
