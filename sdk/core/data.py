"""Streamed calibration and evaluation data: ``.npz``, ``.npy``, folders of images or array files.

``open_dataset`` checks what it can cheaply up front (paths, array headers, names, shapes, dtypes, label
counts, ``labels.csv`` rows) and raises :class:`~edgekit.core.errors.DataError` with one line naming the
problem. Iterating yields one :class:`Sample` at a time shaped like the model's input (batch dim
included); arrays are read lazily (``.npy`` files and ``.npz`` members are read one sample's bytes at a
time, images decoded one at a time), so memory stays bounded however many samples there are.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
from edgekit.core.errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
ARRAY_SUFFIXES = (".npy", ".npz")
LABELS_KEY = "labels"
LABELS_CSV = "labels.csv"

ResizeMode = Literal["resize", "shorter-side-crop"]
ColorOrder = Literal["RGB", "BGR", "GRAY"]
Layout = Literal["NCHW", "NHWC"]

_RESIZE_MODES = ("resize", "shorter-side-crop")
_COLORS = ("RGB", "BGR", "GRAY")
_LAYOUTS = ("NCHW", "NHWC")
_OUTPUT_DTYPES = ("float32", "float16", "uint8")
# Shorter side = crop / 0.875 when resize_shorter is not given (224 -> 256, the usual ImageNet recipe).
T = TypeVar("T")
_DEFAULT_CROP_FRACTION = 0.875


# --------------------------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class ImagePreprocess:
    """How a folder of images becomes model input.

    Pixels are decoded with Pillow into ``color`` order, resized (``size`` = (H, W); ``None`` means the
    model input's H and W), converted to float, then ``(x * scale - mean) / std`` per channel (``mean``
    and ``std`` are in the output channel order and have 0, 1 or ``channels`` entries), laid out as
    ``layout`` with a leading batch dim, and cast to ``dtype``.

    ``resize_mode="shorter-side-crop"`` scales the shorter side to ``resize_shorter`` (default
    ``round(min(size) / 0.875)``) keeping the aspect ratio, then crops the centre ``size``.
    """

    size: tuple[int, int] | None = None
    resize_mode: ResizeMode = "resize"
    resize_shorter: int | None = None
    color: ColorOrder = "RGB"
    scale: float = 1.0
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    layout: Layout = "NCHW"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.resize_mode not in _RESIZE_MODES:
            raise DataError(
                f"resize mode must be one of {', '.join(_RESIZE_MODES)}, got {self.resize_mode!r}"
            )
        if self.color not in _COLORS:
            raise DataError(f"color must be one of {', '.join(_COLORS)}, got {self.color!r}")
        if self.layout not in _LAYOUTS:
            raise DataError(f"layout must be one of {', '.join(_LAYOUTS)}, got {self.layout!r}")
        if self.dtype not in _OUTPUT_DTYPES:
            raise DataError(
                f"preprocess dtype must be one of {', '.join(_OUTPUT_DTYPES)}, got {self.dtype!r}"
            )
        if self.size is not None:
            object.__setattr__(self, "size", tuple(int(v) for v in self.size))
            if len(self.size) != 2 or min(self.size) <= 0:
                raise DataError(f"image size must be two positive integers (H, W), got {self.size}")
        if self.resize_shorter is not None and int(self.resize_shorter) <= 0:
            raise DataError(f"resize_shorter must be positive, got {self.resize_shorter}")
        if not math.isfinite(self.scale) or self.scale == 0:
            raise DataError(f"scale must be a finite non-zero number, got {self.scale}")
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        for what, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (0, 1, self.channels):
                raise DataError(
                    f"{what} needs 1 or {self.channels} values for {self.color} images, got {len(values)}"
                )
        if any(v == 0 or not math.isfinite(v) for v in self.std):
            raise DataError(f"std values must be finite and non-zero, got {self.std}")

    @property
    def channels(self) -> int:
        return 1 if self.color == "GRAY" else 3

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (recorded in reports and bundles); ``from_json`` reverses it."""
        out = asdict(self)
        out["size"] = list(self.size) if self.size is not None else None
        out["mean"] = list(self.mean)
        out["std"] = list(self.std)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> ImagePreprocess:
        """Rebuild from ``to_json()`` output (a dict or its JSON text)."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as exc:
                raise DataError(f"image preprocessing is not valid JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise DataError("image preprocessing JSON must be an object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise DataError(
                f"unknown image preprocessing keys: {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        kwargs = dict(data)
        for key in ("size", "mean", "std"):
            if kwargs.get(key) is not None:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, fixed shape (batch dim included) and element dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))


def input_specs(model: Any) -> list[InputSpec]:
    """The inputs of an ``onnx.ModelProto`` or ``onnx_ir.Model`` (initializers excluded); dynamic dims are -1."""
    import onnx
    import onnx_ir as ir

    if isinstance(model, onnx.ModelProto):
        model = ir.from_proto(model)
    if not isinstance(model, ir.Model):
        raise TypeError(f"expected an onnx.ModelProto or onnx_ir.Model, got {type(model).__name__}")
    weights = set(model.graph.initializers)
    specs = []
    for value in model.graph.inputs:
        if value.name in weights:
            continue
        if value.dtype is None or value.shape is None:
            raise DataError(f"model input {value.name!r} has no tensor type or shape")
        try:
            dtype = np.dtype(value.dtype.numpy())
        except TypeError:
            raise DataError(
                f"model input {value.name!r} has type {value.dtype.name}, which data cannot feed"
            ) from None
        shape = tuple(d if isinstance(d, int) and d > 0 else -1 for d in value.shape)
        specs.append(InputSpec(value.name, shape, dtype))
    return specs


@dataclass(frozen=True)
class Sample:
    """One sample: model inputs (batch dim included), its label if the data set has labels, a name."""

    inputs: dict[str, np.ndarray]
    label: int | None
    name: str


# ------------------------------------------------------------------------------------------- helpers


def _fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _shape_matches(got: Sequence[int], expected: Sequence[int]) -> bool:
    """Equal shapes; a non-positive expected dim matches any size."""
    return len(got) == len(expected) and all(e <= 0 or g == e for g, e in zip(got, expected, strict=True))


def _sample_shape_ok(per_sample: Sequence[int], spec: InputSpec) -> bool:
    """A stored sample is the full input shape, or the shape without a leading batch dim of 1."""
    if _shape_matches(per_sample, spec.shape):
        return True
    return len(spec.shape) > 0 and spec.shape[0] in (1, -1, 0) and _shape_matches(per_sample, spec.shape[1:])


def _check_sample_shape(where: str, per_sample: Sequence[int], spec: InputSpec) -> None:
    if not _sample_shape_ok(per_sample, spec):
        alternatives = _fmt_shape(spec.shape)
        if spec.shape and spec.shape[0] in (1, -1, 0):
            alternatives = f"{_fmt_shape(spec.shape[1:])} or {alternatives}"
        raise DataError(
            f"{where}: input {spec.name!r} expects per-sample shape {alternatives}, got {_fmt_shape(per_sample)}"
        )


def _check_dtype(where: str, dtype: np.dtype, spec: InputSpec) -> None:
    """Data must be of the input's kind: float for a float input (any width), integers for an integer one.

    Integer data for a float input is refused rather than cast: it is nearly always unpreprocessed data (raw
    pixels, token ids) fed to the wrong input, and a cast would hide that until the scales come out wrong.
    """
    numeric = dtype.kind in "biuf"
    want_float = spec.dtype.kind == "f"
    same_kind = (dtype.kind == "f") == want_float and np.can_cast(dtype, spec.dtype, casting="same_kind")
    if not numeric or not same_kind:
        hint = ""
        if numeric and want_float:
            hint = f" (convert and preprocess it first, e.g. .astype(np.{spec.dtype.name}))"
        raise DataError(
            f"{where}: input {spec.name!r} expects {spec.dtype.name} data, got {dtype.name}"
            + (hint if numeric else " (not numeric)")
        )


def _conform(array: np.ndarray, spec: InputSpec) -> np.ndarray:
    """A contiguous copy shaped and typed like the model input (shape and dtype already checked)."""
    array = np.asarray(array)
    if len(array.shape) != len(spec.shape):
        array = array.reshape((1, *array.shape))
    return np.array(array, dtype=spec.dtype, order="C", copy=True)


def _labels_array(where: str, labels: np.ndarray, count: int) -> np.ndarray:
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise DataError(
            f"{where}: labels must be a 1-D array of class indices, got shape {_fmt_shape(labels.shape)}"
        )
    if labels.shape[0] != count:
        raise DataError(f"{where}: {labels.shape[0]} labels for {count} samples")
    if labels.dtype.kind in "iub":
        return labels.astype(np.int64)
    if labels.dtype.kind == "f" and np.all(np.isfinite(labels)) and np.all(labels == np.round(labels)):
        return labels.astype(np.int64)
    raise DataError(f"{where}: labels must be integer class indices, got {labels.dtype.name} values")


def _single_input(where: str, inputs: Sequence[InputSpec]) -> InputSpec:
    if len(inputs) != 1:
        names = ", ".join(s.name for s in inputs)
        raise DataError(
            f"{where} holds one input but the model has {len(inputs)} ({names}); use an .npz keyed by input name"
        )
    return inputs[0]


# ------------------------------------------------------------------------------------------- sources


class _Source:
    """Where samples come from; ``Dataset`` adds the limit and the public API."""

    kind: str
    count: int
    has_labels: bool

    def samples(self) -> Iterator[Sample]:
        raise NotImplementedError

    def details(self) -> dict[str, Any]:
        return {}


def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES


class _ImageFolderSource(_Source):
    kind = "images"

    def __init__(self, folder: Path, inputs: Sequence[InputSpec], preprocess: ImagePreprocess | None):
        self.folder = folder
        self.spec = _single_input(f"image folder {folder}", inputs)
        self.preprocess = preprocess or ImagePreprocess()
        self.labels_from = "none"
        self.classes: list[str] = []
        #: label -> class name, where the data names its classes (non-numeric sub-folders, labels.csv's 3rd column)
        self.class_names: dict[int, str] = {}
        self.items: list[tuple[Path, int | None]] = self._list_items()
        self.count = len(self.items)
        self.has_labels = self.labels_from != "none"
        self._shape_plan()

    # -- listing --------------------------------------------------------------------------------------

    def _list_items(self) -> list[tuple[Path, int | None]]:
        folder = self.folder
        top_images = sorted((p for p in folder.iterdir() if _is_image(p)), key=lambda p: p.name)
        csv_path = folder / LABELS_CSV
        if csv_path.is_file():
            self.labels_from = LABELS_CSV
            return self._items_from_csv(csv_path, top_images)
        class_dirs = sorted(
            (d for d in folder.iterdir() if d.is_dir() and any(_is_image(p) for p in d.iterdir())),
            key=lambda d: d.name,
        )
        if class_dirs and top_images:
            raise DataError(
                f"{folder}: has images both at the top level and in sub-folders; "
                f"use sub-folders per class or a {LABELS_CSV}"
            )
        if not class_dirs:
            return [(p, None) for p in top_images]
        self.labels_from = "folders"
        self.classes = [d.name for d in class_dirs]
        numeric = all(name.isdigit() for name in self.classes)
        if not numeric:
            self.class_names = dict(enumerate(self.classes))
        items = []
        for index, d in enumerate(class_dirs):
            label = int(d.name) if numeric else index
            items.extend(
                (p, label) for p in sorted((p for p in d.iterdir() if _is_image(p)), key=lambda p: p.name)
            )
        return items

    def _items_from_csv(self, csv_path: Path, top_images: list[Path]) -> list[tuple[Path, int | None]]:
        try:
            with open(csv_path, newline="", encoding="utf-8-sig") as f:
                rows = [row for row in csv.reader(f) if row and any(cell.strip() for cell in row)]
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise DataError(f"{csv_path}: unreadable ({exc})") from None
        labels: dict[str, int] = {}
        for line, row in enumerate(rows, start=1):
            if len(row) < 2:
                raise DataError(f"{csv_path} row {line}: expected 'file,label', got {','.join(row)!r}")
            name, value = row[0].strip(), row[1].strip()
            try:
                label = int(value)
            except ValueError:
                if line == 1:  # a header row
                    continue
                raise DataError(f"{csv_path} row {line}: label {value!r} is not an integer") from None
            if not (self.folder / name).is_file():
                raise DataError(f"{csv_path} row {line}: file {name!r} not found in {self.folder}")
            if Path(name).suffix.lower() not in IMAGE_SUFFIXES:
                raise DataError(f"{csv_path} row {line}: {name!r} is not a .jpg/.jpeg/.png image")
            if name in labels and labels[name] != label:
                raise DataError(f"{csv_path} row {line}: {name!r} is listed twice with different labels")
            labels[name] = label
            if len(row) >= 3 and row[2].strip():
                self.class_names[label] = row[2].strip()
        unlisted = [p.name for p in top_images if p.name not in labels]
        if unlisted:
            more = f" (and {len(unlisted) - 1} more)" if len(unlisted) > 1 else ""
            raise DataError(f"{csv_path}: no label for image {unlisted[0]!r}{more}")
        return [(self.folder / name, labels[name]) for name in sorted(labels)]

    # -- decoding -------------------------------------------------------------------------------------

    def _shape_plan(self) -> None:
        """Fix the output size from the model input and check channels and layout agree with it."""
        pre, shape = self.preprocess, self.spec.shape
        where = f"image folder {self.folder}"
        _check_dtype(where, np.dtype(pre.dtype), self.spec)
        if len(shape) == 4:
            c, h, w = (
                (shape[1], shape[2], shape[3]) if pre.layout == "NCHW" else (shape[3], shape[1], shape[2])
            )
            if c > 0 and c != pre.channels:
                raise DataError(
                    f"{where}: input {self.spec.name!r} {_fmt_shape(shape)} has {c} channels in {pre.layout} "
                    f"but {pre.color} images have {pre.channels}; set the color or layout"
                )
            model_size = (h, w) if h > 0 and w > 0 else None
        else:
            model_size = None
        size = pre.size or model_size
        if size is None:
            raise DataError(
                f"{where}: cannot tell the image size from input {self.spec.name!r} {_fmt_shape(shape)}; give a size"
            )
        self.size: tuple[int, int] = (int(size[0]), int(size[1]))
        self.preprocess = replace(pre, size=self.size)  # recorded with the size actually used
        out = (1, pre.channels, *self.size) if pre.layout == "NCHW" else (1, *self.size, pre.channels)
        if not _shape_matches(out, shape) and math.prod(out) != math.prod(shape):
            raise DataError(
                f"{where}: images preprocess to {_fmt_shape(out)} but input {self.spec.name!r} "
                f"expects {_fmt_shape(shape)}"
            )
        self.out_shape = out

    def decode(self, path: Path) -> np.ndarray:
        """One image as model input: ``out_shape`` reshaped to the input shape, cast to the input dtype."""
        from PIL import Image, UnidentifiedImageError

        pre = self.preprocess
        try:
            with Image.open(path) as img:
                img = img.convert("L" if pre.color == "GRAY" else "RGB")
                img = _resize(img, self.size, pre)
                pixels = np.asarray(img, dtype=np.float32)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
            raise DataError(f"{path}: cannot decode image ({exc})") from None
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        if pre.color == "BGR":
            pixels = pixels[:, :, ::-1]
        x = pixels * np.float32(pre.scale)
        if pre.mean:
            x = x - np.asarray(pre.mean, dtype=np.float32)
        if pre.std:
            x = x / np.asarray(pre.std, dtype=np.float32)
        x = x.transpose(2, 0, 1) if pre.layout == "NCHW" else x
        if pre.dtype == "uint8":
            x = np.clip(np.rint(x), 0, 255)
        x = x.astype(pre.dtype)[None]
        if not _shape_matches(x.shape, self.spec.shape):
            x = x.reshape(self.spec.shape)
        return np.array(x, dtype=self.spec.dtype, order="C")

    def samples(self) -> Iterator[Sample]:
        for path, label in self.items:
            name = str(path.relative_to(self.folder))
            yield Sample({self.spec.name: self.decode(path)}, label, name)

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"labels_from": self.labels_from}
        if self.classes:
            out["classes"] = len(self.classes)
        if self.class_names:
            out["class_names"] = {str(k): v for k, v in sorted(self.class_names.items())}
        return out


def _resize(img: Any, size: tuple[int, int], pre: ImagePreprocess) -> Any:
    from PIL import Image

    height, width = size
    if pre.resize_mode == "resize":
        return img if img.size == (width, height) else img.resize((width, height), Image.Resampling.BILINEAR)
    shorter = pre.resize_shorter or int(round(min(size) / _DEFAULT_CROP_FRACTION))
    w, h = img.size
    if w <= h:
        new_w, new_h = shorter, max(1, int(round(h * shorter / w)))
    else:
        new_w, new_h = max(1, int(round(w * shorter / h))), shorter
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), Image.Resampling.BILINEAR)
    if new_w < width or new_h < height:
        raise DataError(f"resize_shorter {shorter} is smaller than the crop size {height}x{width}")
    top = int(round((new_h - height) / 2.0))
    left = int(round((new_w - width) / 2.0))
    return img.crop((left, top, left + width, top + height))


# ------------------------------------------------------------------------------------------- dataset


class Dataset:
    """Samples streamed from one source; iterate as often as needed (each pass re-reads lazily)."""

    def __init__(self, source: _Source, path: Path, limit: int | None):
        self._source = source
        self.path = path
        self.limit = limit

    def __len__(self) -> int:
        return self._source.count if self.limit is None else min(self._source.count, self.limit)

    def __iter__(self) -> Iterator[Sample]:
        remaining = len(self)
        if remaining == 0:
            return
        with closing(self._source.samples()) as samples:
            for sample in samples:
                for name, array in sample.inputs.items():
                    if array.dtype.kind == "f" and not np.isfinite(array).all():
                        raise DataError(
                            f"{self.path}: sample {sample.name} input {name!r} contains NaN or infinity"
                        )
                yield sample
                remaining -= 1
                if remaining == 0:
                    return

    @property
    def has_labels(self) -> bool:
        return self._source.has_labels

    @property
    def kind(self) -> str:
        return self._source.kind

    def describe(self) -> dict[str, Any]:
        """What the data set is: kind, path, sample count, labels, preprocessing (JSON-serialisable)."""
        pre = getattr(self._source, "preprocess", None)
        return {
            "kind": self._source.kind,
            "path": str(self.path),
            "count": len(self),
            "available": self._source.count,
            "labels": self.has_labels,
            "preprocessing": pre.to_json() if pre is not None else None,
            **self._source.details(),
        }


def open_dataset(
    path: str | Path,
    inputs: Sequence[InputSpec],
    preprocess: ImagePreprocess | None = None,
    limit: int | None = None,
) -> Dataset:
    """Open ``.npz``, ``.npy``, a folder of images or a folder of ``.npy``/``.npz`` files.

    ``inputs`` are the model's inputs; every sample is checked against them (names, shapes with or
    without the batch dim, numeric dtypes castable to the input's). ``preprocess`` applies to images
    only. ``limit`` caps the number of samples. Raises :class:`DataError` on any problem.
    """
    path = Path(path)
    if not inputs:
        raise DataError("the model has no inputs to feed data to")
    if limit is not None and limit <= 0:
        raise DataError(f"sample limit must be positive, got {limit}")
    if not path.exists():
        raise DataError(f"data path not found: {path}")
    if path.is_dir():
        source = _open_folder(path, inputs, preprocess)
    elif path.suffix.lower() == ".npz":
        from edgekit.core.array_sources import NpzSource

        source = NpzSource(path, inputs)
    elif path.suffix.lower() == ".npy":
        from edgekit.core.array_sources import NpySource

        source = NpySource(path, inputs)
    else:
        raise DataError(f"unsupported data file {path}: expected .npz, .npy or a folder of images")
    if source.count == 0:
        raise DataError(f"empty data set: {path} holds no samples")
    return Dataset(source, path, limit)


def _open_folder(folder: Path, inputs: Sequence[InputSpec], preprocess: ImagePreprocess | None) -> _Source:
    try:
        entries = list(folder.iterdir())
    except OSError as exc:
        raise DataError(f"{folder}: cannot list folder ({exc})") from None
    has_images = any(_is_image(p) for p in entries) or (folder / LABELS_CSV).is_file()
    has_class_dirs = any(d.is_dir() and any(_is_image(p) for p in d.iterdir()) for d in entries)
    if has_images or has_class_dirs:
        return _ImageFolderSource(folder, inputs, preprocess)
    array_files = sorted(
        (p for p in entries if p.is_file() and p.suffix.lower() in ARRAY_SUFFIXES), key=lambda p: p.name
    )
    if array_files:
        from edgekit.core.array_sources import ArrayFilesSource

        return ArrayFilesSource(folder, array_files, inputs)
    raise DataError(
        f"empty data set: {folder} has no images ({', '.join(IMAGE_SUFFIXES)}), class sub-folders "
        "or .npy/.npz files"
    )


def prefetched(items: Iterable[T], depth: int = 4) -> Iterator[T]:
    """Iterate ``items`` with up to ``depth`` of them produced ahead in a background thread.

    Decoding images (Pillow releases the GIL) then overlaps with inference. Memory stays bounded by ``depth``.
    An exception in the producer is re-raised in the consumer; stopping early stops the producer.
    """
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(entry: tuple) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((done, None))
        except BaseException as exc:  # handed to the consumer
            put((done, exc))

    thread = threading.Thread(target=produce, name="edgekit-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = q.get()
            if item is done:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)
