"""The bundle format: every manifest field round-trips, loading validates, writing is atomic."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from pathlib import Path

import pytest
from edgekit.device_agents import bundle as b
from edgekit.device_agents.bundle import BundleError, Manifest, Requirement, TensorSpec
from edgekit.device_agents.errors import AgentError


def make_manifest(**over) -> Manifest:
    fields = dict(
        format_version=b.FORMAT_VERSION,
        target="intel-vpu",
        runtime="openvino",
        model_files=(),
        requirements=(Requirement("openvino", "2024.4"),),
        inputs=(TensorSpec("x", (1, 3, 8, 8), "float32", layout="NCHW"),),
        outputs=(TensorSpec("y", (1, 10), "uint8", scale=0.0125, zero_point=3),),
        preprocessing={"mean": [104.0, 117.0, 123.0], "channel_order": "BGR"},
        provenance={"source_sha256": "ab" * 32, "edgekit_version": "0.1.0", "calibration_samples": 64},
        verification={"samples": 3, "max_abs_error": 1e-3, "passed": True},
        device_hint="NPU",
    )
    fields.update(over)
    return Manifest(**fields)


FILES = {"model.xml": b"<net/>", "model.bin": bytes(range(256)) * 10}
ROLES = {"model.bin": "weights"}


def test_every_field_round_trips_through_disk(tmp_path: Path) -> None:
    m = make_manifest()
    out = b.write_bundle(tmp_path / "bundle", m, FILES, roles=ROLES)
    assert out == tmp_path / "bundle"
    on_disk = json.loads((out / b.MANIFEST_NAME).read_text())
    assert on_disk["format_version"] == "1.0"
    assert on_disk["target"] == "intel-vpu" and on_disk["runtime"] == "openvino"
    assert on_disk["device_hint"] == "NPU"
    assert on_disk["requirements"] == [{"package": "openvino", "min_version": "2024.4"}]
    assert on_disk["inputs"][0] == {
        "name": "x",
        "shape": [1, 3, 8, 8],
        "dtype": "float32",
        "layout": "NCHW",
        "scale": None,
        "zero_point": None,
    }
    assert on_disk["outputs"][0]["scale"] == 0.0125 and on_disk["outputs"][0]["zero_point"] == 3
    assert on_disk["preprocessing"]["channel_order"] == "BGR"
    assert on_disk["provenance"]["calibration_samples"] == 64
    assert on_disk["verification"]["passed"] is True
    files = {f["path"]: f for f in on_disk["model_files"]}
    for name, content in FILES.items():
        assert files[name]["sha256"] == hashlib.sha256(content).hexdigest()
        assert files[name]["size"] == len(content)
    assert files["model.xml"]["role"] == "model" and files["model.bin"]["role"] == "weights"

    loaded = b.read_bundle(out)
    assert loaded.manifest.inputs == m.inputs and loaded.manifest.outputs == m.outputs
    assert loaded.manifest.preprocessing == m.preprocessing
    assert loaded.manifest.primary_model().path == "model.xml"
    assert loaded.primary_path.read_bytes() == FILES["model.xml"]
    assert Manifest.from_json(loaded.manifest.to_json()) == loaded.manifest


def test_archive_round_trip_and_cleanup(tmp_path: Path) -> None:
    src = tmp_path / "w.bin"
    src.write_bytes(b"weights" * 100)
    out = b.write_bundle(tmp_path / "bundle", make_manifest(), {"m.xml": b"<x/>", "w.bin": src}, archive=True)
    assert out.name == "bundle.tar.gz" and out.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.tar.gz", "w.bin"]  # no temp left behind
    with b.read_bundle(out) as loaded:
        assert loaded.path("w.bin").read_bytes() == src.read_bytes()
        scratch = loaded.scratch
        assert scratch is not None and scratch.exists()
    assert not scratch.exists()


def test_tampered_model_file_is_rejected_naming_it(tmp_path: Path) -> None:
    out = b.write_bundle(tmp_path / "bundle", make_manifest(), FILES, roles=ROLES)
    data = bytearray((out / "model.bin").read_bytes())
    data[100] ^= 0xFF  # same size, different content
    (out / "model.bin").write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"'model.bin'.*sha256"):
        b.read_bundle(out)
    (out / "model.bin").write_bytes(bytes(data[:-1]))
    with pytest.raises(BundleError, match=r"'model.bin' has 2559 bytes"):
        b.read_bundle(out)
    (out / "model.bin").unlink()
    with pytest.raises(BundleError, match="'model.bin' is missing"):
        b.read_bundle(out)


def test_bundle_error_is_an_agent_error() -> None:
    assert issubclass(BundleError, AgentError) and BundleError.code == "bundle_error"


def _manifest_dict(**over) -> dict:
    d = make_manifest(model_files=(b.ModelFile("model.xml", "0" * 64, 6),)).to_json()
    d.update(over)
    return d


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format_version": "2.0"}, r"format version 2.0 is not supported .*1\.x"),
        ({"format_version": "one"}, "not MAJOR.MINOR"),
        ({"runtime": "tensorrt"}, "runtime 'tensorrt'"),
        ({"model_files": []}, "model_files is empty"),
        ({"inputs": "x"}, r"inputs has the wrong type"),
        ({"provenance": {"edgekit_version": "0.1"}}, "provenance.source_sha256"),
        ({"device_hint": 3}, "device_hint has the wrong type"),
    ],
)
def test_invalid_manifests_are_rejected(change: dict, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        Manifest.from_json(_manifest_dict(**change))


@pytest.mark.parametrize(
    "missing", ["target", "runtime", "inputs", "outputs", "verification", "preprocessing"]
)
def test_missing_required_field(missing: str) -> None:
    d = _manifest_dict()
    del d[missing]
    with pytest.raises(BundleError, match=f"missing the required field '{missing}'"):
        Manifest.from_json(d)


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        ({"name": "x", "shape": [1, -1], "dtype": "float32"}, "non-negative integers"),
        ({"name": "x", "shape": [1], "dtype": "complex64"}, "dtype 'complex64'"),
        ({"name": "x", "shape": [1], "dtype": "int8", "scale": 0.1}, "both scale and zero_point"),
        ({"shape": [1], "dtype": "int8"}, "missing the required field 'name'"),
    ],
)
def test_invalid_tensor_specs(tensor: dict, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        Manifest.from_json(_manifest_dict(inputs=[tensor]))


def test_model_file_paths_must_be_plain_names() -> None:
    bad = {"path": "../etc/passwd", "sha256": "0" * 64, "size": 1, "role": "model"}
    with pytest.raises(BundleError, match="not a plain file name"):
        Manifest.from_json(_manifest_dict(model_files=[bad]))
    no_model = {"path": "w.bin", "sha256": "0" * 64, "size": 1, "role": "weights"}
    with pytest.raises(BundleError, match="no file with role 'model'"):
        Manifest.from_json(_manifest_dict(model_files=[no_model]))


def test_unknown_major_version_on_disk(tmp_path: Path) -> None:
    out = b.write_bundle(tmp_path / "bundle", make_manifest(), FILES)
    d = json.loads((out / b.MANIFEST_NAME).read_text())
    d["format_version"] = "7.3"
    (out / b.MANIFEST_NAME).write_text(json.dumps(d))
    with pytest.raises(BundleError, match="format version 7.3 is not supported"):
        b.read_bundle(out)
    d["format_version"] = "1.9"  # a newer minor version of the same major is accepted
    (out / b.MANIFEST_NAME).write_text(json.dumps(d))
    assert b.read_bundle(out).manifest.format_version == "1.9"


def test_failed_packaging_leaves_nothing_behind(tmp_path: Path) -> None:
    bad = make_manifest(inputs=(TensorSpec("x", (1,), "complex128"),))  # invalid: rejected before rename
    with pytest.raises(BundleError, match="complex128"):
        b.write_bundle(tmp_path / "bundle", bad, FILES)
    with pytest.raises(BundleError, match="cannot read"):
        b.write_bundle(tmp_path / "bundle", make_manifest(), {"m.xml": tmp_path / "does-not-exist"})
    with pytest.raises(BundleError, match="cannot read"):
        b.write_bundle(tmp_path / "b2", make_manifest(), {"m.xml": tmp_path / "nope"}, archive=True)
    assert list(tmp_path.iterdir()) == []


def test_failed_rewrite_keeps_the_previous_bundle(tmp_path: Path) -> None:
    out = b.write_bundle(tmp_path / "bundle", make_manifest(), FILES)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(BundleError):
        b.write_bundle(out, make_manifest(runtime="nope"), {"other.xml": b"x"})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    out2 = b.write_bundle(out, make_manifest(), {"other.xml": b"x"})  # a good rewrite replaces it
    assert sorted(p.name for p in out2.iterdir()) == ["manifest.json", "other.xml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_refuses_to_overwrite_a_directory_that_is_not_a_bundle(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "precious.txt").write_text("keep me")
    with pytest.raises(BundleError, match="not an edgekit bundle; refusing"):
        b.write_bundle(tmp_path / "home", make_manifest(), FILES)
    assert (tmp_path / "home" / "precious.txt").read_text() == "keep me"


def test_file_names_are_sanitised(tmp_path: Path) -> None:
    out = b.write_bundle(tmp_path / "bundle", make_manifest(), {"../../evil name.xml": b"x"})
    assert sorted(p.name for p in out.iterdir()) == ["evil_name.xml", "manifest.json"]
    with pytest.raises(BundleError, match="used twice or reserved"):
        b.write_bundle(tmp_path / "b2", make_manifest(), {"manifest.json": b"x"})
    with pytest.raises(BundleError, match="used twice or reserved"):
        b.write_bundle(tmp_path / "b3", make_manifest(), {"a/m.xml": b"x", "b/m.xml": b"y"})


def _tar_with(tmp_path: Path, add) -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        add(tar)
    return path


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("name", ["../escape.txt", "/abs/escape.txt", "a/../../escape.txt"])
def test_archive_path_traversal_is_refused(tmp_path: Path, name: str) -> None:
    archive = _tar_with(tmp_path, lambda tar: _add_bytes(tar, name, b"boom"))
    with pytest.raises(BundleError, match="points outside the bundle"):
        b.read_bundle(archive, extract_to=tmp_path / "x")
    assert not (tmp_path / "escape.txt").exists()


def test_archive_links_are_refused(tmp_path: Path) -> None:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("manifest.json")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)

    with pytest.raises(BundleError, match="link or special file"):
        b.read_bundle(_tar_with(tmp_path, add))


def test_archive_tampering_is_detected(tmp_path: Path) -> None:
    good = b.write_bundle(tmp_path / "good", make_manifest(), FILES)
    manifest = (good / b.MANIFEST_NAME).read_bytes()

    def add(tar: tarfile.TarFile) -> None:
        _add_bytes(tar, "manifest.json", manifest)
        _add_bytes(tar, "model.xml", b"<evil/>")
        _add_bytes(tar, "model.bin", FILES["model.bin"])

    archive = _tar_with(tmp_path, add)
    with pytest.raises(BundleError, match="'model.xml'"):
        b.read_bundle(archive)


def test_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="does not exist"):
        b.read_bundle(tmp_path / "nothing")
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(BundleError, match="neither a bundle directory nor a readable"):
        b.read_bundle(tmp_path / "junk.tar.gz")
    with pytest.raises(BundleError, match="no manifest.json"):
        b.read_bundle(tmp_path)
    (tmp_path / b.MANIFEST_NAME).write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        b.read_bundle(tmp_path)


def test_failed_archive_reads_leave_no_scratch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(BundleError):
        b.read_bundle(tmp_path / "junk.tar.gz")
    archive = _tar_with(tmp_path, lambda tar: _add_bytes(tar, "readme.txt", b"no manifest"))
    with pytest.raises(BundleError, match="no manifest.json at its top level"):
        b.read_bundle(archive)
    assert list(scratch.iterdir()) == []


def test_requirements_old_and_file_scoped_read_back(tmp_path: Path) -> None:
    old = make_manifest(model_files=(b.ModelFile("model.xml", "0" * 64, 1),)).to_json()
    assert old["requirements"] == [{"package": "openvino", "min_version": "2024.4"}]  # no "file" key
    assert Manifest.from_json(old).requirements == (Requirement("openvino", "2024.4"),)
    scoped = dict(
        old, requirements=[{"package": "openvino", "min_version": "2026.4", "file": "nowhere.blob"}]
    )
    with pytest.raises(BundleError, match="requirements\\[0\\].file 'nowhere.blob' is not a file"):
        Manifest.from_json(scoped)
    assert Requirement("openvino", "2022.1").met_by("2025.2.0-19140-c01cd93e24d-releases/2025/2")
    assert not Requirement("openvino", "2025.3").met_by("2025.2.0")
    assert Requirement("tflite-runtime", "2.5.0").met_by("2.5") and not Requirement("x", "2.14").met_by(
        "2.5.0"
    )
