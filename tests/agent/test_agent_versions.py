"""A real agent process checks a bundle's runtime requirement against the runtime it has, on LOAD:
an older requirement than installed loads, a newer one is refused with a typed error naming both."""

from __future__ import annotations

import dataclasses
import importlib.metadata
from pathlib import Path

import numpy as np
import pytest
from agent_procs import AgentProcess
from edgekit.device_agents.bundle import Requirement, read_bundle, write_bundle
from edgekit.device_agents.client import connect
from edgekit.device_agents.errors import RemoteError

LITERT = importlib.metadata.version("ai-edge-litert")
OPENVINO = importlib.metadata.version("openvino")


def _bump(version: str) -> str:
    return f"{int(version.split('.')[0]) + 1}.0"


def _with_requirements(src: Path, out: Path, *requirements: Requirement) -> Path:
    with read_bundle(src) as bundle:
        manifest = dataclasses.replace(bundle.manifest, requirements=requirements)
        files = {f.path: bundle.path(f) for f in manifest.model_files}
        roles = {f.path: f.role for f in manifest.model_files}
        return write_bundle(out, manifest, files, roles=roles)


def _load(agent: AgentProcess, bundle: Path) -> dict:  # type: ignore[type-arg]
    with connect(agent.url()) as client:
        return client.load(client.put_bundle(bundle))


@pytest.mark.parametrize(
    "requirement",
    [
        Requirement("tflite-runtime", "2.5.0"),  # TF Lite scale: every ai-edge-litert counts as 2.17
        Requirement("ai-edge-litert", "1.0"),
        Requirement("ai-edge-litert", LITERT),  # equal to the installed one
        Requirement("ai-edge-litert", "1.2"),  # what manifests written before said regardless
        Requirement("openvino", _bump(OPENVINO)),  # about another runtime: not this bundle's
    ],
    ids=lambda r: f"{r.package}>={r.min_version}",
)
def test_tflite_bundle_loads_when_the_runtime_is_new_enough(
    tcp_agent: AgentProcess, bundles, tmp_path: Path, requirement: Requirement
) -> None:  # type: ignore[no-untyped-def]
    bundle = _with_requirements(bundles["tflite"], tmp_path / "b", requirement)
    info = _load(tcp_agent, bundle)
    assert info["runtime"] == "ai_edge_litert" and info["version"] == LITERT
    with connect(tcp_agent.url()) as client:
        client.load(client.put_bundle(bundle))
        a = np.full((1, 4), 2, np.float32)
        out, _ = client.infer({"a": a, "b": a})
        np.testing.assert_array_equal(out["sum"], a + a)


@pytest.mark.parametrize(
    ("requirement", "shown"),
    [
        (Requirement("ai-edge-litert", _bump(LITERT)), f"ai-edge-litert {LITERT}"),
        (Requirement("tflite-runtime", "2.99.0"), f"ai-edge-litert {LITERT} (TensorFlow Lite 2.17)"),
    ],
    ids=["ai-edge-litert", "tflite-runtime"],
)
def test_tflite_bundle_needing_a_newer_runtime_is_refused(
    tcp_agent: AgentProcess, bundles, tmp_path: Path, requirement: Requirement, shown: str
) -> None:  # type: ignore[no-untyped-def]
    bundle = _with_requirements(bundles["tflite"], tmp_path / "b", requirement)
    with pytest.raises(RemoteError) as err:
        _load(tcp_agent, bundle)
    assert err.value.remote_code == "runtime_too_old"
    assert f"{requirement.package} >= {requirement.min_version}" in err.value.message
    assert shown in err.value.message
    with connect(tcp_agent.url()) as client:  # the agent keeps serving and loads a bundle that fits
        assert client.load(client.put_bundle(bundles["tflite"]))["runtime"] == "ai_edge_litert"


def test_openvino_bundle_older_requirement_loads_newer_is_refused(
    tcp_agent: AgentProcess, bundles, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    older = _with_requirements(bundles["openvino"], tmp_path / "old", Requirement("openvino", "2022.1"))
    info = _load(tcp_agent, older)
    assert info["runtime"] == "openvino" and info["skipped_files"] == []
    newer = _with_requirements(
        bundles["openvino"], tmp_path / "new", Requirement("openvino", _bump(OPENVINO))
    )
    with pytest.raises(RemoteError) as err:
        _load(tcp_agent, newer)
    assert err.value.remote_code == "runtime_too_old"
    assert (
        f"openvino >= {_bump(OPENVINO)}" in err.value.message and f"openvino {OPENVINO}" in err.value.message
    )


def test_a_blob_scoped_requirement_drops_the_blob_not_the_bundle(
    tcp_agent: AgentProcess, bundles, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    with read_bundle(bundles["openvino"]) as src:
        files = {f.path: src.path(f) for f in src.manifest.model_files}
        roles = {f.path: f.role for f in src.manifest.model_files}
        manifest = dataclasses.replace(
            src.manifest,
            requirements=(
                Requirement("openvino", "2022.1"),
                Requirement("openvino", _bump(OPENVINO), file="model.npu.blob"),
            ),
        )
        bundle = write_bundle(
            tmp_path / "b",
            manifest,
            {**files, "model.npu.blob": b"a blob only a newer OpenVINO reads"},
            roles={**roles, "model.npu.blob": "compiled"},
        )
    info = _load(tcp_agent, bundle)
    assert info["skipped_files"] == ["model.npu.blob"]
    with connect(tcp_agent.url()) as client:
        client.load(client.put_bundle(bundle))
        x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
        out, _ = client.infer({"x": x})
        w, b = bundles["ov_weights"]
        np.testing.assert_allclose(out["y"], np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_requirement_rules_for_each_installed_tflite_package() -> None:
    from edgekit.device_agents.runtimes import unmet_requirement

    tf = Requirement("tflite-runtime", "2.5.0")
    assert unmet_requirement(tf, "tflite_runtime", "2.14.0") is None
    assert unmet_requirement(tf, "ai_edge_litert", "1.0.1") is None  # LiteRT counts as TF Lite 2.17
    why = unmet_requirement(Requirement("tflite-runtime", "2.15.0"), "tflite_runtime", "2.14.0")
    assert why == "needs tflite-runtime >= 2.15.0; this device has tflite-runtime 2.14.0"
    assert (
        unmet_requirement(Requirement("ai-edge-litert", "1.2"), "tflite_runtime", "2.14.0") is None
    )  # not its package
    assert (
        unmet_requirement(Requirement("tflite-runtime", "2.99"), "ai_edge_litert", "unknown") is None
    )  # cannot tell
    assert unmet_requirement(Requirement("openvino", "2025.3"), "openvino", "2025.2.0") is not None
