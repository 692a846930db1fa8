"""``edgekit deploy``: packaging per target, the bundles it writes, and one-line errors for bad input."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import openvino as ov
import pytest
from cnn_models import qdq_with_onnxruntime, tiny_cnn, with_unsupported_op
from edgekit.cli.common import run_app
from edgekit.cli.main import app
from edgekit.device_agents.bundle import read_bundle


def deploy(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``edgekit deploy`` in-process through the same error mapping as the console script."""
    try:
        run_app(app, ["deploy", *args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    paths = {"float": folder / "cnn.onnx", "qdq": folder / "cnn_qdq.onnx", "det": folder / "det.onnx"}
    onnx.save(tiny_cnn(), paths["float"])
    onnx.save(qdq_with_onnxruntime(tiny_cnn(), folder), paths["qdq"])
    onnx.save(with_unsupported_op(tiny_cnn()), paths["det"])
    calib = np.random.default_rng(3).standard_normal((8, 1, 3, 16, 16)).astype(np.float32)
    paths["calib"] = folder / "calib.npy"
    np.save(paths["calib"], calib)
    return paths


def test_float_model_becomes_an_fp16_bundle(tmp_path: Path, models: dict[str, Path], capsys) -> None:
    out_dir = tmp_path / "out"
    code, out, err = deploy(
        capsys, str(models["float"]), "-t", "intel-vpu", "-t", "intel-vpu", "-o", str(out_dir),
        "--precision", "fp16", "--calib", str(models["calib"]),
    )  # fmt: skip
    assert code == 0, err
    bundle = out_dir / "intel-vpu"
    assert out.count(f"✓ intel-vpu → {bundle} (fp16") == 1  # a repeated target is packaged once
    m = read_bundle(bundle).manifest
    assert m.verification["precision"] == "fp16" and m.verification["passed"]
    assert m.verification["samples"] == 3  # the first calibration samples verify the IR
    assert m.provenance["source_sha256"] == hashlib.sha256(models["float"].read_bytes()).hexdigest()
    assert m.provenance["source_model"] == "cnn.onnx" and m.provenance["quantization"] is None
    assert m.device_hint is None
    if "NPU" not in ov.Core().available_devices:
        assert "no NPU plugin on this host" in out


def test_console_script_packages_a_qdq_model_as_an_int8_archive(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    out_dir = tmp_path / "out"
    args = [str(models["qdq"]), "-t", "intel-vpu", "-o", str(out_dir), "--archive", "--device-hint", "npu"]
    proc = subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", "deploy", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    devices = ov.Core().available_devices
    absent = (
        f"warning: --device-hint NPU: OpenVINO {ov.get_version()} on this host has no NPU device (it has: "
    )
    assert (absent in proc.stderr) == ("NPU" not in devices), proc.stderr  # packaged anyway, for the device
    assert [p.name for p in out_dir.iterdir()] == ["intel-vpu.tar.gz"]
    with read_bundle(out_dir / "intel-vpu.tar.gz") as loaded:
        m = loaded.manifest
        assert m.device_hint == "NPU"
        assert m.verification["precision"] == "int8" and m.verification["int8"]["fake_quantize"] > 0
        assert m.provenance["quantization"] == {"source": "QDQ model as given"}


def test_float_model_with_calib_is_quantized_for_uint8(
    tmp_path: Path, models: dict[str, Path], capsys
) -> None:
    code, out, err = deploy(
        capsys, str(models["float"]), "-t", "intel-vpu", "-o", str(tmp_path), "--calib", str(models["calib"])
    )
    assert code == 0, err
    assert (
        "quantizing for intel-vpu (int8: int8 weights, uint8 activations) on 8 calibration sample(s)" in out
    )
    m = read_bundle(tmp_path / "intel-vpu").manifest
    assert m.verification["precision"] == "int8" and m.verification["passed"]
    assert (
        m.verification["int8"]["fake_quantize"] >= 4 and m.verification["int8"]["float_compute_layers"] == []
    )
    assert m.provenance["quantization"]["activations"] == "uint8" and m.provenance["calibration_samples"] == 8
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(tmp_path / "intel-vpu" / "model.xml")), "CPU")
    x = np.load(models["calib"])[0]
    probs = compiled({"x": x})[compiled.output(0)]
    assert probs.shape == (1, 10) and abs(float(probs.sum()) - 1.0) < 0.05


def test_failing_target_leaves_nothing(tmp_path: Path, models: dict[str, Path], capsys) -> None:
    out_dir = tmp_path / "out"
    code, out, err = deploy(capsys, str(models["det"]), "-t", "intel-vpu", "-o", str(out_dir))
    assert code == 2
    assert err.strip().splitlines() == [
        "error: target 'intel-vpu' cannot take this model: Det 'my_det': "
        "OpenVINO's ONNX frontend has no conversion for Det"
    ]
    assert not out_dir.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{float}", "-o", "{out}"], "pass at least one --target"),
        (["{missing}", "-t", "intel-vpu", "-o", "{out}"], "model file not found"),
        (["{float}", "-t", "tpu", "-o", "{out}"], "unknown target 'tpu'; supported targets:"),
        (["{float}", "-t", "intel-vpu", "-o", "{out}", "--precision", "fp8"], "--precision must be one of"),
        (
            ["{float}", "-t", "intel-vpu", "-o", "{out}", "--precision", "int8"],
            "--precision int8 needs --calib",
        ),
        (["{qdq}", "-t", "intel-vpu", "-o", "{out}", "--precision", "fp32"], "already quantized"),
        (
            ["{float}", "-t", "intel-vpu", "-o", "{out}", "--device-hint", "GPU"],
            "--device-hint 'GPU' is not accepted",
        ),
        (["{float}", "-t", "intel-vpu", "-o", "{out}", "--calib", "{missing}"], "calibration data not found"),
        (["{float}", "-t", "intel-vpu", "-o", "{float}"], "exists and is not a folder"),
        (["{float}", "-t", "intel-vpu", "-o", "{out}", "--input-shape", "x=1,3"], "rank 2"),
        (
            ["{float}", "-t", "intel-vpu", "-o", "{out}", "--preprocess", "{{bad"],
            "--preprocess is not valid JSON",
        ),
        (["{float}", "-t", "intel-vpu", "-o", "{out}", "--preprocess", '{{"colour": 1}}'], "unknown image"),
        (
            ["{float}", "-t", "intel-vpu", "-o", "{out}", "--calib", "{float}", "--method", "magic"],
            "--method",
        ),
        (["{float}", "-t", "intel-vpu"], "pass an output folder (-o DIR) or --report PATH"),
        (
            ["{float}", "-t", "arm-cpu", "-t", "intel-vpu", "-o", "{out}", "--device-hint", "myriad"],
            "--device-hint myriad: OpenVINO removed the MYRIAD plugin (Movidius VPUs) in 2023.0",
        ),
        (
            ["{float}", "-t", "nnapi", "-o", "{out}", "--precision", "w4"],
            "target 'nnapi' cannot run --precision w4: NNAPI has no 4-bit tensor type; it runs: fp16, int8",
        ),
        (["{qdq}", "-t", "intel-vpu", "-o", "{out}", "--precision", "fp16"], "already quantized"),
        (
            ["{float}", "-t", "intel-vpu", "-o", "{out}", "--calib", "{calib}", "--layer-precision", "conv1"],
            "--layer-precision expects NAME=RECIPE",
        ),
        (
            [
                "{float}",
                "-t",
                "intel-vpu",
                "-o",
                "{out}",
                "--calib",
                "{calib}",
                "--layer-precision",
                "conv1=fp8",
            ],
            "the recipe of --layer-precision conv1 must be one of fp32, fp16, int8",
        ),
        (
            [
                "{float}",
                "-t",
                "intel-vpu",
                "-o",
                "{out}",
                "--calib",
                "{calib}",
                "--layer-precision",
                "conv_1=fp32",
            ],
            "--layer-precision names no node of the model: conv_1; closest: conv1",
        ),
        (
            ["{float}", "-t", "intel-vpu", "-o", "{out}", "--layer-precision", "conv1=fp32"],
            "--layer-precision applies when the deploy quantizes",
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, models: dict[str, Path], capsys, args: list[str], message: str
) -> None:
    names = {
        "float": models["float"],
        "qdq": models["qdq"],
        "calib": models["calib"],
        "missing": tmp_path / "nope",
        "out": tmp_path / "out",
    }
    code, out, err = deploy(capsys, *[a.format(**names) for a in args])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not (tmp_path / "out").exists()


def test_several_targets_each_get_their_activation_dtype(
    tmp_path: Path, models: dict[str, Path], capsys
) -> None:
    code, out, err = deploy(
        capsys, str(models["float"]), "-t", "arm-cpu", "-t", "intel-vpu", "-o", str(tmp_path),
        "--calib", str(models["calib"]),
    )  # fmt: skip
    assert code == 0, err
    assert (
        "quantizing for arm-cpu (int8: int8 weights, int8 activations)" in out
        and "quantizing for intel-vpu (int8: int8 weights, uint8 activations)" in out
    )
    arm, vpu = read_bundle(tmp_path / "arm-cpu").manifest, read_bundle(tmp_path / "intel-vpu").manifest
    assert (arm.runtime, vpu.runtime) == ("tflite", "openvino")
    assert arm.provenance["quantization"]["activations"] == "int8"
    assert vpu.provenance["quantization"]["activations"] == "uint8"
    assert arm.provenance["source_sha256"] == vpu.provenance["source_sha256"]


def test_one_failing_target_does_not_stop_the_others(tmp_path: Path, capsys) -> None:
    model = tiny_cnn()
    head = next(n for n in model.graph.node if n.op_type == "Softmax")
    head.op_type = "Sinh"  # OpenVINO takes it; the TFLite converter has no Sinh
    del head.attribute[:]
    path = tmp_path / "softplus.onnx"
    onnx.save(model, path)
    out_dir = tmp_path / "out"
    code, out, err = deploy(capsys, str(path), "-t", "arm-cpu", "-t", "intel-vpu", "-o", str(out_dir))
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[0].startswith("✗ arm-cpu: ") and "Sinh" in lines[0]
    assert lines[-1].startswith(f"error: intel-vpu written to {out_dir / 'intel-vpu'}; arm-cpu failed: ")
    assert "Sinh" in lines[-1]
    assert "✓ intel-vpu" in out
    assert sorted(p.name for p in out_dir.iterdir()) == ["intel-vpu"]


def test_layer_precision_reaches_the_quantizer(tmp_path: Path, models: dict[str, Path], capsys) -> None:
    code, out, err = deploy(
        capsys, str(models["float"]), "-t", "arm-cpu", "-o", str(tmp_path), "--calib", str(models["calib"]),
        "--layer-precision", "fc=fp32", "--layer-precision", "conv2=int8",
    )  # fmt: skip
    assert code == 0, err
    quantization = read_bundle(tmp_path / "arm-cpu").manifest.provenance["quantization"]
    assert quantization["layer_precision"] == {"fc": "fp32", "conv2": "int8"}
    assert quantization["precision"] == "int8"


def test_the_recipe_reaches_the_quantizer_and_the_target(
    tmp_path: Path, models: dict[str, Path], monkeypatch
) -> None:
    """A calibrated recipe goes to QuantizeOptions.precision, any recipe to PackageOptions.precision; a target
    whose table accepts the recipe gets it (arm-cpu made to accept int16x8 here, as issue 13 will)."""
    import edgekit.api
    from edgekit import deploy as deploy_api
    from edgekit.targets.arm_cpu import ArmCpuTarget
    from edgekit.targets.openvino_ir import IntelVpuTarget

    monkeypatch.setattr(ArmCpuTarget, "precisions", {**ArmCpuTarget.precisions, "int16x8": None})
    schemes, packaged = [], []
    quantize_model = edgekit.api.quantize_model
    monkeypatch.setattr(
        edgekit.api, "quantize_model", lambda *a, **k: schemes.append(k["options"]) or quantize_model(*a, **k)
    )
    for cls in (ArmCpuTarget, IntelVpuTarget):
        real = cls.package
        monkeypatch.setattr(
            cls,
            "package",
            lambda self, m, d, o, real=real: packaged.append((self.name, o.precision)) or real(self, m, d, o),
        )
    result = deploy_api(
        models["float"], "arm-cpu", output=tmp_path / "a", calib=models["calib"], precision="int16x8"
    )
    assert [(s.precision, s.activations) for s in schemes] == [("int16x8", "int8")]
    assert result.bundles[0].precision == "int16x8" and packaged == [("arm-cpu", "int16x8")]
    result = deploy_api(
        models["float"], "intel-vpu", output=tmp_path / "b", calib=models["calib"], precision="fp16"
    )
    assert len(schemes) == 1  # fp16 is not calibrated: the float model goes to the target as it is
    assert packaged[-1] == ("intel-vpu", "fp16") and result.bundles[0].verification["precision"] == "fp16"
    deploy_api(models["float"], "intel-vpu", output=tmp_path / "c", calib=models["calib"])
    assert packaged[-1] == ("intel-vpu", None)  # auto: the target reads the precision off the model
    assert schemes[-1].precision == "int8"


def test_a_device_hint_present_on_the_host_packages_without_a_warning(
    tmp_path: Path, models: dict[str, Path], capsys
) -> None:
    assert "CPU" in ov.Core().available_devices
    code, out, err = deploy(
        capsys, str(models["qdq"]), "-t", "intel-vpu", "-o", str(tmp_path), "--device-hint", "cpu"
    )
    assert code == 0 and err == "", err
    assert read_bundle(tmp_path / "intel-vpu").manifest.device_hint == "CPU"


@pytest.mark.parametrize(
    ("precision", "activations", "said"),
    [
        ("int8", "uint8", "int8: int8 weights, uint8 activations"),
        ("int16x8", "int8", "int16x8: int16 activations, int8 weights, int64 bias (16x8)"),
        ("w8", "int8", "w8: weight-only int8, float activations"),
    ],
)
def test_the_quantizing_line_names_the_recipe_not_only_the_8bit_type(precision, activations, said):
    # a 16x8 deploy said "(int8 activations)": the 8-bit type of the int8 recipe, which it does not use
    from edgekit.deployment.package import _scheme_summary
    from edgekit.quantize.options import QuantizeOptions

    assert _scheme_summary(QuantizeOptions(precision=precision, activations=activations)) == said
