"""The edgekit bundle: model file(s) plus ``manifest.json``, as a directory or a ``.tar.gz``.

Every target writes one; the device agent loads one. This module runs on small devices, so it uses
the standard library only (numpy is never required here). The schema is documented in
``docs/bundle.md``.

Writing is atomic: the bundle is built in a temporary directory next to its destination and renamed
into place, so a failed packaging leaves nothing behind. Reading validates the manifest, refuses
unknown major format versions, extracts archives safely (regular files and directories only, no
path traversal, no links) and checks every listed file's size and sha256.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.device_agents.errors import AgentError

FORMAT_VERSION = "1.0"
MANIFEST_NAME = "manifest.json"
ARCHIVE_SUFFIX = ".tar.gz"
RUNTIMES = ("tflite", "openvino")
DTYPES = ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_ARCHIVE_BYTES = 4 * 1024**3
REQUIRED_PROVENANCE = ("source_sha256", "edgekit_version")

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_CHUNK = 1 << 20


class BundleError(AgentError):
    """A bundle is malformed, tampered with, of an unsupported format version, or cannot be written."""

    code = "bundle_error"


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output as the packaged model sees it.

    ``scale`` and ``zero_point`` are set for integer (quantized) tensors: real = scale * (q - zero_point).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    layout: str | None = None
    scale: float | None = None
    zero_point: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "layout": self.layout,
            "scale": self.scale,
            "zero_point": self.zero_point,
        }

    @classmethod
    def from_json(cls, d: Any, where: str = "tensor") -> TensorSpec:
        d = _expect_dict(d, where)
        name = _expect(d, "name", str, where)
        shape = _expect(d, "shape", list, where)
        # -1: a dim an output's selection sizes at run time (a detector's NMS); inputs are static
        least = -1 if where.startswith("outputs") else 0
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= least for x in shape):
            what = "integers >= -1 (-1: sized at run time)" if least else "non-negative integers"
            raise BundleError(f"manifest: {where}.shape must be a list of {what}, got {shape!r}")
        dtype = _expect(d, "dtype", str, where)
        if dtype not in DTYPES:
            raise BundleError(f"manifest: {where}.dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        layout = _optional(d, "layout", str, where)
        scale = _optional(d, "scale", (int, float), where)
        zero_point = _optional(d, "zero_point", int, where)
        if (scale is None) != (zero_point is None):
            raise BundleError(f"manifest: {where} must give both scale and zero_point or neither")
        return cls(
            name=name,
            shape=tuple(shape),
            dtype=dtype,
            layout=layout,
            scale=None if scale is None else float(scale),
            zero_point=zero_point,
        )


@dataclass(frozen=True)
class ModelFile:
    """A file of the bundle: its path relative to the bundle root, sha256 (hex), size in bytes, role.

    Roles: ``model`` (the file a runtime loads, e.g. ``.tflite`` or IR ``.xml``), ``weights`` (IR
    ``.bin``), ``compiled`` (a device-compiled blob), ``report`` (side information).
    """

    path: str
    sha256: str
    size: int
    role: str = "model"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size, "role": self.role}

    @classmethod
    def from_json(cls, d: Any, where: str = "model_file") -> ModelFile:
        d = _expect_dict(d, where)
        path = _expect(d, "path", str, where)
        if sanitize_name(path) != path:
            raise BundleError(f"manifest: {where}.path {path!r} is not a plain file name")
        sha = _expect(d, "sha256", str, where)
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise BundleError(f"manifest: {where}.sha256 must be 64 lowercase hex digits")
        size = _expect(d, "size", int, where)
        if size < 0:
            raise BundleError(f"manifest: {where}.size must be non-negative")
        role = d.get("role", "model")
        if not isinstance(role, str):
            raise BundleError(f"manifest: {where}.role must be a string")
        return cls(path=path, sha256=sha, size=size, role=role)


@dataclass(frozen=True)
class Requirement:
    """A runtime package the device needs, e.g. ``Requirement("openvino", "2022.1")``.

    ``min_version`` is the oldest release that reads the artifact. ``file`` (optional) scopes the
    requirement to one bundle file (a compiled blob): a device that does not meet it loads the bundle
    without that file. See ``docs/bundle.md`` for the packages and how the agent checks them.
    """

    package: str
    min_version: str
    file: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"package": self.package, "min_version": self.min_version}
        if self.file is not None:
            out["file"] = self.file
        return out

    def met_by(self, version: str) -> bool:
        """Whether an installed ``version`` (of ``package``, or on its scale) is ``min_version`` or newer."""
        return version_key(version) >= version_key(self.min_version)

    @classmethod
    def from_json(cls, d: Any, where: str = "requirement") -> Requirement:
        d = _expect_dict(d, where)
        return cls(
            _expect(d, "package", str, where),
            _expect(d, "min_version", str, where),
            _optional(d, "file", str, where),
        )


@dataclass(frozen=True)
class Manifest:
    """The content of ``manifest.json``. See ``docs/bundle.md`` for every field."""

    format_version: str
    target: str
    runtime: str
    model_files: tuple[ModelFile, ...]
    requirements: tuple[Requirement, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    preprocessing: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    verification: Mapping[str, Any] = field(default_factory=dict)
    device_hint: str | None = None
    #: Options the runtime passes to a delegate when it loads one, per delegate (``{"nnapi": {"allow_fp16":
    #: "true"}}``: the NNAPI delegate may relax float32 computation to float16). Optional.
    delegate_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def primary_model(self) -> ModelFile:
        """The file a runtime loads: the first file with role ``model``."""
        for f in self.model_files:
            if f.role == "model":
                return f
        raise BundleError("manifest lists no file with role 'model'")

    def files_with_role(self, role: str) -> tuple[ModelFile, ...]:
        return tuple(f for f in self.model_files if f.role == role)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``json.dumps(manifest.to_json())`` is the file's content)."""
        out: dict[str, Any] = {
            "format_version": self.format_version,
            "target": self.target,
            "runtime": self.runtime,
            "device_hint": self.device_hint,
            "model_files": [f.to_json() for f in self.model_files],
            "requirements": [r.to_json() for r in self.requirements],
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "preprocessing": dict(self.preprocessing),
            "provenance": dict(self.provenance),
            "verification": dict(self.verification),
        }
        if self.delegate_options:
            out["delegate_options"] = {k: dict(v) for k, v in self.delegate_options.items()}
        return out

    @classmethod
    def from_json(cls, d: Any) -> Manifest:
        """Validate a parsed ``manifest.json`` (required fields, types, format version)."""
        d = _expect_dict(d, "manifest")
        version = _expect(d, "format_version", str, "manifest")
        check_format_version(version)
        target = _expect(d, "target", str, "manifest")
        runtime = _expect(d, "runtime", str, "manifest")
        if runtime not in RUNTIMES:
            raise BundleError(f"manifest: runtime {runtime!r} is not one of {', '.join(RUNTIMES)}")
        files = tuple(
            ModelFile.from_json(x, f"model_files[{i}]")
            for i, x in enumerate(_expect(d, "model_files", list, "manifest"))
        )
        if not files:
            raise BundleError("manifest: model_files is empty")
        paths = [f.path for f in files]
        if len(set(paths)) != len(paths):
            raise BundleError("manifest: model_files lists a path twice")
        if MANIFEST_NAME in paths:
            raise BundleError(f"manifest: model_files must not list {MANIFEST_NAME}")
        reqs = tuple(
            Requirement.from_json(x, f"requirements[{i}]")
            for i, x in enumerate(_expect(d, "requirements", list, "manifest"))
        )
        for i, req in enumerate(reqs):
            if req.file is not None and req.file not in paths:
                raise BundleError(
                    f"manifest: requirements[{i}].file {req.file!r} is not a file of the bundle"
                )
        inputs = tuple(
            TensorSpec.from_json(x, f"inputs[{i}]")
            for i, x in enumerate(_expect(d, "inputs", list, "manifest"))
        )
        outputs = tuple(
            TensorSpec.from_json(x, f"outputs[{i}]")
            for i, x in enumerate(_expect(d, "outputs", list, "manifest"))
        )
        if not inputs or not outputs:
            raise BundleError("manifest: inputs and outputs must each list at least one tensor")
        provenance = _expect(d, "provenance", dict, "manifest")
        for key in REQUIRED_PROVENANCE:
            if not isinstance(provenance.get(key), str):
                raise BundleError(f"manifest: provenance.{key} is missing or not a string")
        manifest = cls(
            format_version=version,
            target=target,
            runtime=runtime,
            model_files=files,
            requirements=reqs,
            inputs=inputs,
            outputs=outputs,
            preprocessing=_expect(d, "preprocessing", dict, "manifest"),
            provenance=provenance,
            verification=_expect(d, "verification", dict, "manifest"),
            device_hint=_optional(d, "device_hint", str, "manifest"),
            delegate_options=_delegate_options(_optional(d, "delegate_options", dict, "manifest") or {}),
        )
        manifest.primary_model()  # raises when no file has role "model"
        return manifest


@dataclass(frozen=True)
class LoadedBundle:
    """A validated bundle on disk. ``root`` holds the files; ``path(f)`` gives one file's location.

    For an archive, ``root`` is a temporary extraction directory that ``cleanup()`` removes (the
    object is also a context manager doing that).
    """

    manifest: Manifest
    root: Path
    scratch: Path | None = None

    def path(self, model_file: ModelFile | str) -> Path:
        name = model_file.path if isinstance(model_file, ModelFile) else model_file
        return self.root / name

    @property
    def primary_path(self) -> Path:
        return self.path(self.manifest.primary_model())

    def cleanup(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> LoadedBundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


# ---------------------------------------------------------------------------------------------------
# helpers


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (/proc), else by setting it back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike[str], directory: bool = False) -> None:
    """Give a file made by ``mkstemp``/``mkdtemp`` (0600/0700) the mode a plain ``open``/``mkdir`` would."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


def check_format_version(version: str) -> None:
    """Accept any ``1.x``; anything else is a clear BundleError."""
    match = re.fullmatch(r"(\d+)\.(\d+)", version)
    if not match:
        raise BundleError(f"manifest: format_version {version!r} is not MAJOR.MINOR")
    supported = int(FORMAT_VERSION.split(".")[0])
    if int(match.group(1)) != supported:
        raise BundleError(
            f"bundle format version {version} is not supported (this edgekit reads {supported}.x); "
            "use a matching edgekit version"
        )


def version_key(version: str) -> tuple[int, ...]:
    """``"2026.4.1-22982-..."`` -> ``(2026, 4, 1)``, ``"2.14.0"`` -> ``(2, 14)``: comparable release numbers."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    parts = [int(p) for p in match.group(0).split(".")] if match else []
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def sanitize_name(name: str) -> str:
    """A plain, safe file name: base name only, characters [A-Za-z0-9._-], no leading dot."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    safe = _SAFE_NAME.sub("_", base).lstrip(".")
    if not safe:
        raise BundleError(f"file name {name!r} has no usable characters")
    return safe


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _expect_dict(d: Any, where: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise BundleError(f"manifest: {where} must be an object, got {type(d).__name__}")
    return d


def _expect(d: dict[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise BundleError(f"manifest: {where} is missing the required field {key!r}")
    value = d[key]
    if not isinstance(value, typ) or (isinstance(value, bool) and typ in (int, (int, float))):
        raise BundleError(f"manifest: {where}.{key} has the wrong type ({type(value).__name__})")
    return value


def _delegate_options(d: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``delegate_options``: delegate name -> {option: string value}."""
    for name, options in d.items():
        if not isinstance(options, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in options.items()
        ):
            raise BundleError(f"manifest: delegate_options.{name} must map option names to strings")
    return {name: dict(options) for name, options in d.items()}


def _optional(d: dict[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if d.get(key) is None:
        return None
    return _expect(d, key, typ, where)


# ---------------------------------------------------------------------------------------------------
# writing


def write_bundle(
    out_dir: str | os.PathLike[str],
    manifest: Manifest,
    files: Mapping[str, bytes | str | os.PathLike[str]],
    archive: bool = False,
    roles: Mapping[str, str] | None = None,
) -> Path:
    """Write a bundle atomically and return its path.

    ``manifest`` is complete except for ``model_files`` (ignored: computed here from ``files``, with
    sha256 and size). ``files`` maps a file name (sanitised to a plain name) to its bytes or to a
    path to copy. ``roles`` maps file names to roles (default ``model``). With ``archive`` the
    result is ``<out_dir>.tar.gz`` (files under one top-level directory named after ``out_dir``).

    An existing bundle at the destination is replaced; an existing non-empty directory that is not a
    bundle is refused.
    """
    dest = Path(out_dir)
    if archive and not dest.name.endswith(ARCHIVE_SUFFIX):
        dest = dest.with_name(dest.name + ARCHIVE_SUFFIX)
    if not files:
        raise BundleError("a bundle needs at least one model file")
    roles = dict(roles or {})
    entries: list[tuple[str, bytes | Path, str]] = []
    seen: set[str] = set()
    for name, content in files.items():
        safe = sanitize_name(name)
        if safe in seen or safe == MANIFEST_NAME:
            raise BundleError(f"bundle file name {safe!r} is used twice or reserved")
        seen.add(safe)
        role = roles.get(name, roles.get(safe, "model"))
        entries.append((safe, content if isinstance(content, bytes) else Path(content), role))
    _check_destination(dest)
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(f"cannot create {parent}: {exc.strerror or exc}") from None

    bundle_name = dest.name[: -len(ARCHIVE_SUFFIX)] if archive else dest.name
    tmp = Path(tempfile.mkdtemp(prefix=f".{bundle_name}.", suffix=".tmp", dir=parent))
    try:
        follow_umask(tmp, directory=True)
        model_files = []
        for name, content, role in entries:
            target = tmp / name
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                try:
                    shutil.copyfile(content, target)
                except OSError as exc:
                    raise BundleError(f"cannot read {content}: {exc.strerror or exc}") from None
            model_files.append(ModelFile(name, sha256_file(target), target.stat().st_size, role))
        final = dataclasses.replace(manifest, model_files=tuple(model_files))
        Manifest.from_json(json.loads(json.dumps(final.to_json())))  # never write what cannot be read
        (tmp / MANIFEST_NAME).write_bytes(manifest_bytes(final))
        if archive:
            _write_archive(tmp, dest, bundle_name)
        else:
            _replace_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)  # left over only in the archive case
    return dest


def _check_destination(dest: Path) -> None:
    if dest.is_symlink():
        raise BundleError(f"refusing to replace the symbolic link {dest}")
    if dest.is_dir():
        if any(dest.iterdir()) and not (dest / MANIFEST_NAME).is_file():
            raise BundleError(f"{dest} exists and is not an edgekit bundle; refusing to overwrite it")
    elif dest.exists() and not dest.name.endswith(ARCHIVE_SUFFIX):
        raise BundleError(f"{dest} exists and is not a directory")


def _write_archive(src: Path, dest: Path, top: str) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for item in sorted(src.iterdir()):
                info = tar.gettarinfo(str(item), arcname=f"{top}/{item.name}")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mode = 0o644
                with open(item, "rb") as f:
                    tar.addfile(info, f)
        follow_umask(tmp_name)
        os.replace(tmp_name, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def _replace_dir(src: Path, dest: Path) -> None:
    if not dest.exists():
        os.replace(src, dest)
        return
    trash = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
    old = trash / "old"
    os.replace(dest, old)
    try:
        os.replace(src, dest)
    except BaseException:
        os.replace(old, dest)
        raise
    finally:
        shutil.rmtree(trash, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------
# reading


def read_bundle(
    path: str | os.PathLike[str], extract_to: str | os.PathLike[str] | None = None
) -> LoadedBundle:
    """Load and verify a bundle directory or ``.tar.gz``.

    An archive is extracted into ``extract_to`` (default: a new temporary directory, removed by
    ``LoadedBundle.cleanup()``). Every listed file's size and sha256 are checked.
    """
    p = Path(path)
    scratch: Path | None = None
    if p.is_dir():
        root = p
    elif p.is_file():
        root, scratch = _extract_archive(p, extract_to)
    else:
        raise BundleError(f"bundle {p} does not exist")
    try:
        manifest = _read_manifest(root)
        _verify_files(root, manifest)
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    return LoadedBundle(manifest=manifest, root=root, scratch=scratch)


def _read_manifest(root: Path) -> Manifest:
    mpath = root / MANIFEST_NAME
    if mpath.is_symlink() or not mpath.is_file():
        raise BundleError(f"{root} is not an edgekit bundle (no {MANIFEST_NAME})")
    if mpath.stat().st_size > MAX_MANIFEST_BYTES:
        raise BundleError(f"{MANIFEST_NAME} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        data = json.loads(mpath.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{MANIFEST_NAME} is not valid JSON: {exc}") from None
    return Manifest.from_json(data)


def _verify_files(root: Path, manifest: Manifest) -> None:
    for f in manifest.model_files:
        fp = root / f.path
        if fp.is_symlink() or not fp.is_file():
            raise BundleError(f"bundle file {f.path!r} is missing")
        size = fp.stat().st_size
        if size != f.size:
            raise BundleError(
                f"bundle file {f.path!r} has {size} bytes, the manifest says {f.size}: tampered or truncated"
            )
        if sha256_file(fp) != f.sha256:
            raise BundleError(
                f"bundle file {f.path!r} does not match its sha256 in the manifest: tampered or corrupt"
            )


def _extract_archive(archive: Path, extract_to: str | os.PathLike[str] | None) -> tuple[Path, Path | None]:
    """Extract safely; return (bundle root, scratch dir to remove later or None)."""
    if extract_to is None:
        dest, scratch = Path(tempfile.mkdtemp(prefix="edgekit-bundle-")), True
    else:
        dest, scratch = Path(extract_to), False
        dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            _extract_members(tar, dest, archive)
        return _bundle_root(dest), dest if scratch else None
    except (tarfile.TarError, OSError, EOFError) as exc:
        if scratch:
            shutil.rmtree(dest, ignore_errors=True)
        raise BundleError(f"{archive} is neither a bundle directory nor a readable .tar.gz ({exc})") from None
    except BaseException:
        if scratch:
            shutil.rmtree(dest, ignore_errors=True)
        raise


def _extract_members(tar: tarfile.TarFile, dest: Path, archive: Path) -> None:
    members = tar.getmembers()
    names = [_safe_member_name(m) for m in members]  # validate everything before writing anything
    total = sum(m.size for m in members if m.isfile())
    if total > MAX_ARCHIVE_BYTES:
        raise BundleError(f"{archive} unpacks to {total} bytes, more than the {MAX_ARCHIVE_BYTES} allowed")
    for member, name in zip(members, names):  # noqa: B905 - equal lengths; Python 3.9
        target = dest.joinpath(*name)
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        src = tar.extractfile(member)
        assert src is not None  # regular files always have content
        with src, open(target, "xb") as out:
            shutil.copyfileobj(src, out, _CHUNK)


def _safe_member_name(member: tarfile.TarInfo) -> tuple[str, ...]:
    if not (member.isfile() or member.isdir()):
        raise BundleError(f"archive member {member.name!r} is a link or special file; refusing it")
    name = member.name.replace("\\", "/")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if name.startswith("/") or ".." in parts or not parts or re.match(r"^[A-Za-z]:", name):
        raise BundleError(f"archive member {member.name!r} points outside the bundle; refusing it")
    return parts


def _bundle_root(dest: Path) -> Path:
    if (dest / MANIFEST_NAME).is_file():
        return dest
    entries = list(dest.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / MANIFEST_NAME).is_file():
        return entries[0]
    raise BundleError(f"archive has no {MANIFEST_NAME} at its top level")


def manifest_bytes(manifest: Manifest) -> bytes:
    """The exact ``manifest.json`` bytes ``write_bundle`` would write for ``manifest``."""
    return (json.dumps(manifest.to_json(), indent=2) + "\n").encode()


__all__ = [
    "ARCHIVE_SUFFIX",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "BundleError",
    "LoadedBundle",
    "Manifest",
    "ModelFile",
    "Requirement",
    "TensorSpec",
    "check_format_version",
    "manifest_bytes",
    "read_bundle",
    "sanitize_name",
    "sha256_file",
    "version_key",
    "write_bundle",
]
