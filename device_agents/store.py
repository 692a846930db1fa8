"""The agent's storage: resumable, content-addressed file uploads and verified bundles under its own
work directory.

A bundle travels as its files, not as an archive: the host uploads every file the manifest lists
(each keyed by its sha256, resumable from the last confirmed offset), then commits the manifest.
The agent hashes each file while it arrives, so committing needs no second pass over the data, and
``read_bundle`` verifies every file again whenever a bundle is loaded.

Layout of ``workdir``::

    uploads/<sha256>.part      bytes received so far of a file (content-addressed by its sha256)
    uploads/<sha256>.json      its declared size
    blobs/<sha256>             a complete file whose sha256 was checked, waiting for its manifest
    bundles/<bundle_id>/       a committed bundle (manifest.json + model files)

Names coming from the host never become paths directly: uploads and blobs are keyed by a validated
sha256, bundle ids must match ``[A-Za-z0-9][A-Za-z0-9._-]{0,79}``, and file names inside a bundle
come from a manifest validated by ``bundle.Manifest`` (plain names only). Everything stored counts
against ``quota`` bytes. A bundle becomes visible only once complete: it is assembled in a
temporary directory and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .bundle import MANIFEST_NAME, BundleError, LoadedBundle, Manifest, manifest_bytes, read_bundle
from .errors import AgentError

_SHA = re.compile(r"[0-9a-f]{64}")
_BUNDLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class StoreError(AgentError):
    code = "store_error"


class QuotaExceeded(StoreError):
    code = "quota_exceeded"


class NotFound(StoreError):
    code = "not_found"


class BadRequest(AgentError):
    code = "bad_request"


class UploadGap(BadRequest):
    """A chunk beyond the confirmed offset (an earlier chunk was lost): the host resumes from there."""

    code = "upload_gap"


def safe_label(name: Any) -> str:
    """A harmless label from a host-supplied name (for bundle ids): plain characters, bounded length."""
    text = name if isinstance(name, str) else ""
    text = text.replace("\\", "/").rsplit("/", 1)[-1]
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if text.endswith(suffix):
            text = text[: -len(suffix)]
    text = _UNSAFE.sub("_", text).strip("._-")[:48]
    return text or "bundle"


def check_bundle_id(bundle_id: Any) -> str:
    if not isinstance(bundle_id, str) or not _BUNDLE_ID.fullmatch(bundle_id) or ".." in bundle_id:
        raise BadRequest(f"invalid bundle id {str(bundle_id)[:100]!r}")
    return bundle_id


def check_sha(sha: Any) -> str:
    if not isinstance(sha, str) or not _SHA.fullmatch(sha):
        raise BadRequest("sha256 must be 64 lowercase hex digits")
    return sha


def _tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


class Upload:
    """One upload in progress: appends chunks at the confirmed offset, hashing as it goes."""

    def __init__(self, part: Path, size: int):
        self.part = part
        self.size = size
        self.hasher = hashlib.sha256()
        self.offset = 0
        if part.exists():  # resume: re-hash what an earlier connection confirmed
            with open(part, "rb") as f:
                while True:
                    block = f.read(1 << 20)
                    if not block:
                        break
                    self.hasher.update(block)
                    self.offset += len(block)
            if self.offset > size:
                part.unlink()
                self.hasher, self.offset = hashlib.sha256(), 0

    def write(self, offset: int, data: memoryview) -> int:
        if offset > self.offset:
            raise UploadGap(f"chunk at offset {offset} leaves a gap (have {self.offset} bytes)")
        if offset + len(data) > self.size:
            raise BadRequest(f"chunk at offset {offset} runs past the declared size {self.size}")
        skip = self.offset - offset  # an already-confirmed prefix (a retransmitted chunk)
        if skip < len(data):
            fresh = data[skip:]
            with open(self.part, "ab") as f:
                f.write(fresh)
            self.hasher.update(fresh)
            self.offset += len(fresh)
        return self.offset


class BundleStore:
    def __init__(self, workdir: str | os.PathLike[str], quota: int):
        self.root = Path(workdir).resolve()
        self.quota = quota
        self.uploads_dir = self.root / "uploads"
        self.blobs_dir = self.root / "blobs"
        self.bundles_dir = self.root / "bundles"
        try:
            for d in (self.uploads_dir, self.blobs_dir, self.bundles_dir):
                d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the work directory {self.root}: {exc.strerror or exc}") from None
        self._uploads: dict[str, Upload] = {}
        for stale in self.bundles_dir.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)

    # -- accounting -------------------------------------------------------------------------------
    def used(self) -> int:
        return sum(_tree_size(d) for d in (self.uploads_dir, self.blobs_dir, self.bundles_dir))

    def _need(self, extra: int, what: str) -> None:
        used = self.used()
        if used + extra > self.quota:
            raise QuotaExceeded(
                f"{what} needs {extra} bytes; {used} of the {self.quota}-byte quota are in use "
                "(delete bundles or start the agent with a larger --quota-mb)"
            )

    # -- file uploads -----------------------------------------------------------------------------
    def begin(self, sha: Any, size: Any) -> dict[str, Any]:
        """Start or resume the upload of one file; ``complete`` when the agent already has it."""
        sha = check_sha(sha)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BadRequest("upload size must be a non-negative integer")
        blob = self.blobs_dir / sha
        if blob.is_file() and blob.stat().st_size == size:
            return {"upload": sha, "offset": size, "complete": True}
        part = self.uploads_dir / f"{sha}.part"
        upload = self._uploads.get(sha)
        if upload is None or upload.size != size:
            if not part.exists():
                self._need(size, f"upload of {size} bytes")
            upload = Upload(part, size)
            if not part.exists():
                part.touch()
            (self.uploads_dir / f"{sha}.json").write_text(json.dumps({"size": size}))
            self._uploads[sha] = upload
        return {"upload": sha, "offset": upload.offset, "complete": False}

    def chunk(self, sha: Any, offset: Any, data: memoryview) -> int:
        upload = self._upload(sha)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise BadRequest("chunk offset must be a non-negative integer")
        return upload.write(offset, data)

    def finish(self, sha: Any) -> dict[str, Any]:
        """Check the sha256 of a complete upload (hashed while it arrived) and keep it as a blob."""
        upload = self._upload(sha)
        sha = check_sha(sha)
        if upload.offset != upload.size:
            raise BadRequest(f"upload incomplete: {upload.offset} of {upload.size} bytes received")
        digest = upload.hasher.hexdigest()
        if digest != sha:
            self.abort(sha)
            raise BundleError(
                f"upload corrupted or tampered: sha256 {digest[:16]}... does not match {sha[:16]}...; "
                "the upload was discarded"
            )
        os.replace(upload.part, self.blobs_dir / sha)
        self.abort(sha)
        return {"sha256": sha, "size": upload.size}

    def abort(self, sha: str) -> None:
        self._uploads.pop(sha, None)
        for suffix in (".part", ".json"):
            with contextlib.suppress(OSError):
                (self.uploads_dir / f"{sha}{suffix}").unlink()

    def _upload(self, sha: Any) -> Upload:
        sha = check_sha(sha)
        upload = self._uploads.get(sha)
        if upload is None:
            meta = self.uploads_dir / f"{sha}.json"
            if not meta.is_file():
                raise NotFound(f"no upload {sha[:16]}... in progress (send PUT_BEGIN first)")
            info = json.loads(meta.read_text())
            upload = Upload(self.uploads_dir / f"{sha}.part", int(info["size"]))
            self._uploads[sha] = upload
        return upload

    # -- committing a bundle ----------------------------------------------------------------------
    @staticmethod
    def bundle_id_for(manifest: Manifest, name: Any) -> str:
        digest = hashlib.sha256(manifest_bytes(manifest)).hexdigest()
        return f"{safe_label(name)}-{digest[:12]}"

    def check_manifest(self, manifest_json: Any, name: Any) -> tuple[Manifest, str, list[str]]:
        """(validated manifest, its bundle id, sha256 of the listed files the agent does not have)."""
        manifest = Manifest.from_json(manifest_json)  # plain file names, known format version, ...
        bundle_id = self.bundle_id_for(manifest, name)
        if (self.bundles_dir / bundle_id).is_dir():
            return manifest, bundle_id, []
        missing = []
        for f in manifest.model_files:
            blob = self.blobs_dir / f.sha256
            if not (blob.is_file() and blob.stat().st_size == f.size) and f.sha256 not in missing:
                missing.append(f.sha256)
        return manifest, bundle_id, missing

    def commit(self, manifest_json: Any, name: Any) -> dict[str, Any]:
        """Assemble a bundle from uploaded blobs and its manifest; atomic (temp dir, then rename)."""
        manifest, bundle_id, missing = self.check_manifest(manifest_json, name)
        final = self.bundles_dir / bundle_id
        if final.is_dir():
            return {"bundle_id": bundle_id, "existing": True}
        if missing:
            raise BundleError(f"the bundle's files {', '.join(m[:12] for m in missing)} were not uploaded")
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.bundles_dir))
        placed: dict[str, Path] = {}
        try:
            (tmp / MANIFEST_NAME).write_bytes(manifest_bytes(manifest))
            for f in manifest.model_files:
                dest = tmp / f.path
                if f.sha256 in placed:  # the same content under two names
                    shutil.copyfile(placed[f.sha256], dest)
                else:
                    os.replace(self.blobs_dir / f.sha256, dest)
                    placed[f.sha256] = dest
            os.replace(tmp, final)
        except BaseException:
            for sha, path in placed.items():  # give the blobs back
                with contextlib.suppress(OSError):
                    os.replace(path, self.blobs_dir / sha)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return {"bundle_id": bundle_id, "existing": False}

    # -- bundles ----------------------------------------------------------------------------------
    def open(self, bundle_id: Any) -> LoadedBundle:
        """The verified bundle (sizes and sha256 of every file are checked again on every load)."""
        path = self.bundles_dir / check_bundle_id(bundle_id)
        if not path.is_dir():
            raise NotFound(f"no bundle {bundle_id!r} on this agent")
        return read_bundle(path)

    def delete(self, bundle_id: Any) -> bool:
        path = self.bundles_dir / check_bundle_id(bundle_id)
        if not path.is_dir():
            raise NotFound(f"no bundle {bundle_id!r} on this agent")
        trash = self.bundles_dir / f".tmp-del-{bundle_id}"
        os.replace(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def list(self) -> list[dict[str, Any]]:
        out = []
        for p in sorted(self.bundles_dir.iterdir()):
            if p.is_dir() and not p.name.startswith("."):
                out.append({"bundle_id": p.name, "size": _tree_size(p)})
        return out

    def blobs(self) -> list[dict[str, Any]]:
        return [{"sha256": p.name, "size": p.stat().st_size} for p in sorted(self.blobs_dir.iterdir())]

    def partial_uploads(self) -> list[dict[str, Any]]:
        out = []
        for meta in sorted(self.uploads_dir.glob("*.json")):
            part = meta.with_suffix(".part")
            with contextlib.suppress(OSError, ValueError, KeyError):
                info = json.loads(meta.read_text())
                out.append({"upload": meta.stem, "size": int(info["size"]), "received": part.stat().st_size})
        return out
