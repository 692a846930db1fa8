"""The array sources of :mod:`edgekit.core.data`: ``.npz`` and ``.npy`` files and folders of array files, read one
sample's bytes at a time (``.npy`` streams and ``.npz`` members are never loaded whole)."""

from __future__ import annotations

import math
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from edgekit.core.data import (
    LABELS_KEY,
    InputSpec,
    Sample,
    _check_dtype,
    _check_sample_shape,
    _conform,
    _fmt_shape,
    _labels_array,
    _single_input,
    _Source,
)
from edgekit.core.errors import DataError


class _NpyHeader:
    """The header of one ``.npy`` stream: shape, dtype, and where the data starts."""

    def __init__(self, where: str, stream: BinaryIO):
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except (ValueError, OSError, EOFError, SyntaxError) as exc:
            raise DataError(f"{where}: not a readable numpy array ({exc})") from None
        self.shape: tuple[int, ...] = tuple(shape)
        self.fortran_order: bool = bool(fortran)
        self.dtype: np.dtype = np.dtype(dtype)
        self.offset: int = stream.tell()
        self.sample_bytes = math.prod(self.shape[1:]) * self.dtype.itemsize
        self.data_bytes = math.prod(self.shape) * self.dtype.itemsize

    def check(self, where: str, spec: InputSpec, stream_bytes: int) -> None:
        """A numeric array of samples for ``spec``, and a stream of ``stream_bytes`` that holds all of it."""
        if len(self.shape) == 0:
            raise DataError(f"{where}: expected an array with a leading sample dimension, got a scalar")
        _check_dtype(where, self.dtype, spec)
        _check_sample_shape(where, self.shape[1:], spec)
        available = stream_bytes - self.offset
        if available < self.data_bytes:
            raise DataError(
                f"{where}: file is truncated ({available} of {self.data_bytes} data bytes for shape "
                f"{_fmt_shape(self.shape)})"
            )


def _stream_samples(where: str, stream: BinaryIO) -> Iterator[np.ndarray]:
    """The samples (first-axis slices) of a C-order ``.npy`` stream, reading one sample's bytes at a time."""
    header = _NpyHeader(where, stream)
    assert not header.fortran_order
    for index in range(header.shape[0]):
        chunk = stream.read(header.sample_bytes)
        if len(chunk) != header.sample_bytes:
            raise DataError(f"{where}: file is truncated at sample {index}")
        yield np.frombuffer(chunk, dtype=header.dtype).reshape(header.shape[1:])


def stored_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """The shapes of the arrays of a ``.npz`` (by key) or a ``.npy`` (key ``""``) data file, read from their
    headers only; empty when ``path`` is not such a readable file (opening it as data says what is wrong)."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            with path.open("rb") as stream:
                return {"": _NpyHeader(str(path), stream).shape}
        if suffix == ".npz":
            with zipfile.ZipFile(path) as zf:
                shapes = {}
                for name in (n for n in zf.namelist() if n.endswith(".npy")):
                    with zf.open(name) as stream:
                        shapes[name.removesuffix(".npy")] = _NpyHeader(name, stream).shape
                return shapes
    except (DataError, zipfile.BadZipFile, zlib.error, OSError):
        pass
    return {}


class NpzSource(_Source):
    kind = "npz"

    def __init__(self, path: Path, inputs: Sequence[InputSpec]):
        self.path = path
        self.inputs = list(inputs)
        try:
            with zipfile.ZipFile(path) as zf:
                self._init_from_zip(zf)
        except (zipfile.BadZipFile, zlib.error, OSError) as exc:
            raise DataError(f"{path}: not a readable .npz file ({exc})") from None
        self.has_labels = self.labels is not None

    def _init_from_zip(self, zf: zipfile.ZipFile) -> None:
        path = self.path
        arrays = {info.filename.removesuffix(".npy"): info.filename for info in zf.infolist()}
        arrays = {k: v for k, v in arrays.items() if v.endswith(".npy")}
        if not arrays:
            raise DataError(f"{path}: no arrays in the .npz file")
        model_names = sorted(s.name for s in self.inputs)
        labels_key = (
            LABELS_KEY if LABELS_KEY not in model_names else None
        )  # unless the model has such an input
        data_keys = sorted(k for k in arrays if k != labels_key)
        if data_keys != model_names:
            raise DataError(
                f"{path}: arrays {data_keys} do not match the model inputs {model_names}"
                + (" (labels go under the key 'labels')" if not data_keys else "")
            )
        self._members = {k: arrays[k] for k in data_keys}
        self._headers: dict[str, _NpyHeader] = {}
        counts = set()
        for spec in self.inputs:
            where = f"{path}[{spec.name}]"
            with zf.open(self._members[spec.name]) as stream:
                header = _NpyHeader(where, stream)
            header.check(where, spec, zf.getinfo(self._members[spec.name]).file_size)
            counts.add(header.shape[0])
            self._headers[spec.name] = header
        if len(counts) > 1:
            sizes = ", ".join(f"{k}: {h.shape[0]}" for k, h in self._headers.items())
            raise DataError(f"{path}: input arrays have different sample counts ({sizes})")
        self.count = counts.pop()
        self.labels: np.ndarray | None = None
        if labels_key in arrays:
            self.labels = _labels_array(
                str(path), self._load_whole(zf, LABELS_KEY, arrays[LABELS_KEY]), self.count
            )

    def _load_whole(self, zf: zipfile.ZipFile, key: str, member: str) -> np.ndarray:
        try:
            with zf.open(member) as stream:
                return np.lib.format.read_array(stream, allow_pickle=False)
        except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError) as exc:
            raise DataError(f"{self.path}[{key}]: unreadable ({exc})") from None

    def _iter_member(self, zf: zipfile.ZipFile, spec: InputSpec) -> Iterator[np.ndarray]:
        """Samples of one member read in order, one sample's bytes at a time."""
        key = spec.name
        where = f"{self.path}[{key}]"
        header = self._headers[key]
        if header.fortran_order:  # samples are not contiguous: read the array (rare: numpy writes C order)
            yield from self._load_whole(zf, key, self._members[key])
            return
        try:
            with zf.open(self._members[key]) as stream:
                yield from _stream_samples(where, stream)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
            raise DataError(f"{where}: unreadable ({exc})") from None

    def samples(self) -> Iterator[Sample]:
        try:
            zf = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, zlib.error, OSError) as exc:
            raise DataError(f"{self.path}: not a readable .npz file ({exc})") from None
        streams = {spec.name: self._iter_member(zf, spec) for spec in self.inputs}
        try:
            for index in range(self.count):
                arrays = {spec.name: _conform(next(streams[spec.name]), spec) for spec in self.inputs}
                label = int(self.labels[index]) if self.labels is not None else None
                yield Sample(arrays, label, f"{self.path.name}[{index}]")
        finally:
            for stream in streams.values():
                stream.close()
            zf.close()


class NpySource(_Source):
    kind = "npy"
    has_labels = False

    def __init__(self, path: Path, inputs: Sequence[InputSpec]):
        self.path = path
        self.spec = _single_input(f"{path}", inputs)
        where = str(path)
        try:
            with open(path, "rb") as stream:
                self.header = _NpyHeader(where, stream)
            size = path.stat().st_size
        except OSError as exc:
            raise DataError(f"{path}: not a readable .npy file ({exc})") from None
        self.header.check(where, self.spec, size)
        self.count = int(self.header.shape[0])

    def _arrays(self) -> Iterator[np.ndarray]:
        # Plain reads, not a memory map: mapped pages would count in the process's RSS as they are touched.
        if self.header.fortran_order:  # samples are not contiguous (rare: numpy writes C order)
            yield from np.load(self.path, mmap_mode="r", allow_pickle=False)
            return
        try:
            with open(self.path, "rb") as stream:
                yield from _stream_samples(str(self.path), stream)
        except OSError as exc:
            raise DataError(f"{self.path}: unreadable ({exc})") from None

    def samples(self) -> Iterator[Sample]:
        for index, array in enumerate(self._arrays()):
            yield Sample({self.spec.name: _conform(array, self.spec)}, None, f"{self.path.name}[{index}]")


class ArrayFilesSource(_Source):
    """A folder of ``.npy``/``.npz`` files, one sample per file (``.npz``: keys = input names, optional
    ``label``/``labels`` scalar)."""

    kind = "array-folder"

    def __init__(self, folder: Path, files: list[Path], inputs: Sequence[InputSpec]):
        self.folder = folder
        self.files = files
        self.inputs = list(inputs)
        self.count = len(files)
        if any(f.suffix.lower() == ".npy" for f in files):
            _single_input(f"{folder} (.npy files)", self.inputs)
        # Labels are present if the first file has them; every other file is checked as it is read.
        self.has_labels = self._read(files[0])[1] is not None

    def _read(self, path: Path) -> tuple[dict[str, np.ndarray], int | None]:
        try:
            loaded = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise DataError(f"{path}: not a readable numpy file ({exc})") from None
        label: int | None = None
        if isinstance(loaded, np.ndarray):
            arrays = {self.inputs[0].name: loaded}
        else:
            with loaded:
                arrays = {k: loaded[k] for k in loaded.files}
            for key in ("label", LABELS_KEY):
                if key in arrays:
                    value = arrays.pop(key)
                    if value.size != 1:
                        raise DataError(
                            f"{path}: '{key}' must be one class index, got shape {_fmt_shape(value.shape)}"
                        )
                    label = int(_labels_array(str(path), value.reshape(1), 1)[0])
            names, model_names = sorted(arrays), sorted(s.name for s in self.inputs)
            if names != model_names:
                raise DataError(f"{path}: arrays {names} do not match the model inputs {model_names}")
        for spec in self.inputs:
            _check_dtype(str(path), arrays[spec.name].dtype, spec)
            _check_sample_shape(str(path), arrays[spec.name].shape, spec)
        return arrays, label

    def samples(self) -> Iterator[Sample]:
        for path in self.files:
            arrays, label = self._read(path)
            if (label is not None) != self.has_labels:
                raise DataError(f"{path}: some files in {self.folder} have a label and some do not")
            yield Sample({s.name: _conform(arrays[s.name], s) for s in self.inputs}, label, path.name)

    def details(self) -> dict[str, Any]:
        return {"files": self.count}
