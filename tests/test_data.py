"""edgekit.core.data: every source kind, preprocessing numerics against a numpy reference, streaming, bad input."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from edgekit.core.data import ImagePreprocess, InputSpec, Sample, input_specs, open_dataset
from edgekit.core.errors import DataError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

DIGIT = InputSpec("x", (1, 1, 8, 8), np.float32)
RGB16 = InputSpec("img", (1, 3, 16, 16), np.float32)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _write_image(path: Path, height: int, width: int, mode: str = "RGB", seed: int = 0) -> np.ndarray:
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = _rng(seed).integers(0, 256, size=(height, width, channels), dtype=np.uint8)
    Image.fromarray(pixels[:, :, 0] if mode == "L" else pixels, mode).save(path)
    return pixels


def _decoded(path: Path, mode: str = "RGB") -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert(mode), dtype=np.float32)


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        ds = fn(*args, **kwargs)
        list(ds)
    message = str(info.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------------------------------------ npz


def test_npz_samples_labels_and_describe(tmp_path: Path) -> None:
    x = _rng().normal(size=(7, 1, 8, 8)).astype(np.float32)
    labels = np.arange(7) % 3
    np.savez(tmp_path / "d.npz", x=x, labels=labels)
    ds = open_dataset(tmp_path / "d.npz", [DIGIT])
    assert len(ds) == 7 and ds.has_labels
    samples = list(ds)
    assert [s.label for s in samples] == labels.tolist()
    for i, sample in enumerate(samples):
        assert isinstance(sample, Sample)
        assert sample.inputs["x"].shape == (1, 1, 8, 8) and sample.inputs["x"].dtype == np.float32
        np.testing.assert_array_equal(sample.inputs["x"][0], x[i])
    assert samples[2].name == "d.npz[2]"
    info = ds.describe()
    assert info["kind"] == "npz" and info["count"] == 7 and info["labels"] is True
    assert info["path"] == str(tmp_path / "d.npz") and info["preprocessing"] is None
    json.dumps(info)


def test_npz_batched_compressed_multi_input_cast_and_limit(tmp_path: Path) -> None:
    a = _rng().integers(0, 16, size=(5, 1, 1, 8, 8)).astype(np.float16)  # batch dim already per sample
    b = _rng(1).normal(size=(5, 4)).astype(np.float64)
    np.savez_compressed(tmp_path / "m.npz", a=a, b=b)
    specs = [InputSpec("a", (1, 1, 8, 8), np.float32), InputSpec("b", (1, 4), np.float32)]
    ds = open_dataset(tmp_path / "m.npz", specs, limit=3)
    assert len(ds) == 3 and not ds.has_labels
    samples = list(ds)
    assert len(samples) == 3 and samples[0].label is None
    for i, sample in enumerate(samples):
        assert sample.inputs["a"].dtype == np.float32 and sample.inputs["b"].dtype == np.float32
        np.testing.assert_array_equal(sample.inputs["a"], a[i].astype(np.float32))
        np.testing.assert_array_equal(sample.inputs["b"][0], b[i].astype(np.float32))
    # A second pass reads the same data again.
    np.testing.assert_array_equal(list(ds)[1].inputs["b"], samples[1].inputs["b"])
    assert open_dataset(tmp_path / "m.npz", specs, limit=50).__len__() == 5


def test_integer_data_for_a_float_input_is_refused(tmp_path: Path) -> None:
    """Integer data (raw pixels, ids) for a float input is refused, not cast; integer widths still convert."""
    np.savez(tmp_path / "i.npz", x=np.ones((3, 1, 4), np.int64))
    msg = _error(open_dataset, tmp_path / "i.npz", [InputSpec("x", (1, 4), np.float32)])
    assert "expects float32 data, got int64" in msg and "astype" in msg and "\n" not in msg
    ds = open_dataset(tmp_path / "i.npz", [InputSpec("x", (1, 4), np.int32)])
    assert next(iter(ds)).inputs["x"].dtype == np.int32


def test_npz_float_labels_with_integer_values_are_accepted(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.zeros((3, 1, 8, 8)), labels=np.array([[1.0], [0.0], [9.0]]))
    assert [s.label for s in open_dataset(tmp_path / "d.npz", [DIGIT])] == [1, 0, 9]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(1, 5),
    dims=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    dtype=st.sampled_from(["<f4", ">f4", "<f8", "<f2", "|i1", "|u1", "<i2", ">u2", "<i8", "|b1"]),
    batched=st.booleans(),
    kind=st.sampled_from(["npz", "npz-compressed", "npy"]),
)
def test_arrays_round_trip_through_the_stream_reader(
    tmp_path: Path, count: int, dims: list[int], dtype: str, batched: bool, kind: str
) -> None:
    stored = _rng(count).normal(size=(count, *([1] if batched else []), *dims)) * 10
    stored = stored.astype(dtype)
    # each kind reads into an input of its kind (integer data for a float input is refused, see below)
    want = {"f": np.float32, "i": np.int64, "u": np.int64, "b": np.bool_}[stored.dtype.kind]
    spec = InputSpec("x", (1, *dims), want)
    path = tmp_path / f"d.{kind[:3]}"
    if kind == "npy":
        np.save(path, stored)
    else:
        (np.savez if kind == "npz" else np.savez_compressed)(path, x=stored)
    samples = list(open_dataset(path, [spec]))
    assert len(samples) == count
    for i, sample in enumerate(samples):
        got = sample.inputs["x"]
        assert got.shape == (1, *dims) and got.dtype == want and got.flags.c_contiguous
        np.testing.assert_array_equal(got.reshape(-1), stored[i].astype(want).reshape(-1))


def test_npz_model_input_named_labels_is_data(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", labels=np.arange(6, dtype=np.int64).reshape(3, 2))
    ds = open_dataset(tmp_path / "d.npz", [InputSpec("labels", (1, 2), np.int64)])
    assert not ds.has_labels and [s.inputs["labels"].tolist() for s in ds] == [[[0, 1]], [[2, 3]], [[4, 5]]]


def test_npz_is_streamed_not_loaded(tmp_path: Path) -> None:
    n = 1500
    x = np.ones((n, 3, 32, 32), dtype=np.float32)  # 18 MB
    np.savez(tmp_path / "big.npz", img=x, labels=np.zeros(n, dtype=np.int64))
    del x
    spec = InputSpec("img", (1, 3, 32, 32), np.float32)
    tracemalloc.start()
    try:
        ds = open_dataset(tmp_path / "big.npz", [spec])
        it = iter(ds)
        assert inspect.isgenerator(it)
        total = 0.0
        for sample in it:
            total += float(sample.inputs["img"].sum())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == n * 3 * 32 * 32
    assert peak < 2_000_000, f"peak {peak} bytes: the data set is not streamed"


# ------------------------------------------------------------------------------------------------ npy


def test_npy_is_streamed(tmp_path: Path) -> None:
    n = 1500
    x = _rng().normal(size=(n, 1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "big.npy", x)
    spec = InputSpec("img", (1, 3, 32, 32), np.float32)
    tracemalloc.start()
    try:
        ds = open_dataset(tmp_path / "big.npy", [spec])
        checksum = 0.0
        for i, sample in enumerate(ds):
            if i % 500 == 0:
                np.testing.assert_array_equal(sample.inputs["img"], x[i])
            checksum += float(sample.inputs["img"][0, 0, 0, 0])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(ds) == n and not ds.has_labels and ds.describe()["kind"] == "npy"
    assert checksum == pytest.approx(float(x[:, 0, 0, 0, 0].astype(np.float64).sum()), rel=1e-5)
    assert peak < 2_000_000, f"peak {peak} bytes: the .npy file is not streamed"


def test_fortran_order_arrays_are_read_correctly(tmp_path: Path) -> None:
    x = np.asfortranarray(_rng().normal(size=(5, 1, 8, 8)).astype(np.float32))
    np.save(tmp_path / "f.npy", x)
    np.savez(tmp_path / "f.npz", x=x)
    for name in ("f.npy", "f.npz"):
        got = np.concatenate([s.inputs["x"] for s in open_dataset(tmp_path / name, [DIGIT])])
        np.testing.assert_array_equal(got, x)


def test_npy_needs_a_single_input_model(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.zeros((2, 1, 8, 8), np.float32))
    msg = _error(open_dataset, tmp_path / "d.npy", [DIGIT, InputSpec("y", (1, 4))])
    assert "one input" in msg and "x, y" in msg


# --------------------------------------------------------------------------------------- array folder


def test_folder_of_array_files(tmp_path: Path) -> None:
    for i in range(3):
        np.savez(tmp_path / f"s{i}.npz", x=np.full((1, 8, 8), i, np.float32), label=np.array(i + 5))
    ds = open_dataset(tmp_path, [DIGIT])
    samples = list(ds)
    assert ds.kind == "array-folder" and ds.has_labels and len(ds) == 3
    assert [s.label for s in samples] == [5, 6, 7] and [s.name for s in samples] == [
        "s0.npz",
        "s1.npz",
        "s2.npz",
    ]
    assert samples[2].inputs["x"].shape == (1, 1, 8, 8) and float(samples[2].inputs["x"].max()) == 2.0

    npy_dir = tmp_path / "npy"
    npy_dir.mkdir()
    np.save(npy_dir / "b.npy", np.ones((1, 1, 8, 8), np.float32))
    np.save(npy_dir / "a.npy", np.zeros((1, 8, 8), np.float32))
    samples = list(open_dataset(npy_dir, [DIGIT]))
    assert [s.name for s in samples] == ["a.npy", "b.npy"] and samples[1].inputs["x"].sum() == 64


# ----------------------------------------------------------------------------------------- images


def test_image_folder_labels_csv_resize_and_normalize(tmp_path: Path) -> None:
    _write_image(tmp_path / "b.png", 20, 30, seed=1)
    _write_image(tmp_path / "a.PNG", 16, 16, seed=2)
    _write_image(tmp_path / "c.jpg", 24, 12, seed=3)
    (tmp_path / "labels.csv").write_text("file,class_index\nb.png,4\na.PNG,1\nc.jpg,7\n")
    pre = ImagePreprocess(scale=1 / 255, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    ds = open_dataset(tmp_path, [RGB16], pre)
    samples = list(ds)
    assert [s.name for s in samples] == ["a.PNG", "b.png", "c.jpg"]
    assert [s.label for s in samples] == [1, 4, 7]
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    for sample in samples:
        with Image.open(tmp_path / sample.name) as img:
            resized = img.convert("RGB").resize((16, 16), Image.Resampling.BILINEAR)
        ref = (np.asarray(resized, np.float32) * np.float32(1 / 255) - mean) / std
        got = sample.inputs["img"]
        assert got.shape == (1, 3, 16, 16) and got.dtype == np.float32
        np.testing.assert_allclose(got[0], ref.transpose(2, 0, 1), rtol=1e-6, atol=1e-6)
    info = ds.describe()
    assert info["kind"] == "images" and info["labels_from"] == "labels.csv"
    # The size used (the model's, as none was given) is recorded.
    assert ImagePreprocess.from_json(info["preprocessing"]) == dataclasses.replace(pre, size=(16, 16))


def test_labels_csv_without_header(tmp_path: Path) -> None:
    _write_image(tmp_path / "x.png", 16, 16)
    _write_image(tmp_path / "y.png", 16, 16, seed=5)
    (tmp_path / "labels.csv").write_text("y.png,3\nx.png,2\n")
    assert [(s.name, s.label) for s in open_dataset(tmp_path, [RGB16])] == [("x.png", 2), ("y.png", 3)]


def test_shorter_side_crop_bgr_nhwc(tmp_path: Path) -> None:
    _write_image(tmp_path / "wide.png", 30, 42)  # H=30, W=42
    pre = ImagePreprocess(
        size=(16, 16),
        resize_mode="shorter-side-crop",
        resize_shorter=20,
        color="BGR",
        mean=(104.0, 117.0, 123.0),
        layout="NHWC",
    )
    spec = InputSpec("img", (1, 16, 16, 3), np.float32)
    (sample,) = list(open_dataset(tmp_path, [spec], pre))
    # By hand: shorter side 30 -> 20, so W 42 -> 28; crop 16x16 starting at top (20-16)/2=2, left (28-16)/2=6.
    with Image.open(tmp_path / "wide.png") as img:
        resized = np.asarray(img.convert("RGB").resize((28, 20), Image.Resampling.BILINEAR), np.float32)
    ref = resized[2:18, 6:22, ::-1] - np.array([104.0, 117.0, 123.0], np.float32)
    assert sample.inputs["img"].shape == (1, 16, 16, 3)
    np.testing.assert_allclose(sample.inputs["img"][0], ref, rtol=0, atol=1e-5)


def test_shorter_side_crop_default_shorter_and_tall_image(tmp_path: Path) -> None:
    _write_image(tmp_path / "tall.png", 40, 20)  # H=40, W=20
    pre = ImagePreprocess(size=(14, 14), resize_mode="shorter-side-crop")  # shorter = round(14 / 0.875) = 16
    spec = InputSpec("img", (1, 3, 14, 14), np.float32)
    (sample,) = list(open_dataset(tmp_path, [spec], pre))
    with Image.open(tmp_path / "tall.png") as img:
        resized = np.asarray(img.convert("RGB").resize((16, 32), Image.Resampling.BILINEAR), np.float32)
    ref = resized[9:23, 1:15].transpose(2, 0, 1)  # top (32-14)/2 = 9, left (16-14)/2 = 1
    np.testing.assert_array_equal(sample.inputs["img"][0], ref)


def test_grayscale_and_rgba_and_jpeg_conversion(tmp_path: Path) -> None:
    _write_image(tmp_path / "g.png", 8, 8, mode="RGBA")
    _write_image(tmp_path / "h.JPEG", 8, 8, mode="L", seed=4)
    pre = ImagePreprocess(color="GRAY", scale=1 / 16)
    samples = list(open_dataset(tmp_path, [DIGIT], pre))
    assert [s.name for s in samples] == ["g.png", "h.JPEG"] and not any(s.label is not None for s in samples)
    for sample in samples:
        ref = _decoded(tmp_path / sample.name, "L") * np.float32(1 / 16)
        np.testing.assert_allclose(sample.inputs["x"][0, 0], ref, rtol=1e-6)


def test_class_subfolders_sorted_names_and_numeric_names(tmp_path: Path) -> None:
    named = tmp_path / "named"
    for cls, count in (("zebra", 1), ("cat", 2), ("dog", 1)):
        (named / cls).mkdir(parents=True)
        for i in range(count):
            _write_image(named / cls / f"{i}.png", 16, 16, seed=i)
    ds = open_dataset(named, [RGB16])
    assert [(s.name, s.label) for s in ds] == [
        ("cat/0.png", 0),
        ("cat/1.png", 0),
        ("dog/0.png", 1),
        ("zebra/0.png", 2),
    ]
    assert ds.describe()["labels_from"] == "folders" and ds.describe()["classes"] == 3

    numeric = tmp_path / "numeric"
    for cls in ("3", "7"):
        (numeric / cls).mkdir(parents=True)
        _write_image(numeric / cls / "a.jpg", 16, 16)
    assert [s.label for s in open_dataset(numeric, [RGB16])] == [3, 7]


def test_image_folder_is_decoded_one_at_a_time(tmp_path: Path) -> None:
    for i in range(4):
        _write_image(tmp_path / f"{i}.png", 16, 16, seed=i)
    (tmp_path / "2.png").write_bytes(b"not an image")
    it = iter(open_dataset(tmp_path, [RGB16]))
    assert inspect.isgenerator(it)
    assert next(it).name == "0.png" and next(it).name == "1.png"  # the broken file is not read yet
    with pytest.raises(DataError, match=r"2\.png: cannot decode image"):
        next(it)


def test_input_specs_from_onnx_models(tmp_path: Path) -> None:
    import onnx_ir as ir
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["a", "w"], ["y"]),
            helper.make_node("Cast", ["ids"], ["c"], to=TensorProto.FLOAT),
        ],
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4]),  # an initializer listed as an input
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, None),
        ],
        [numpy_helper.from_array(np.ones(4, np.float32), "w")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    expected = [InputSpec("a", (-1, 4), np.float32), InputSpec("ids", (1, 3), np.int64)]
    assert input_specs(proto) == expected
    assert input_specs(ir.from_proto(proto)) == expected
    # A dynamic batch dim accepts per-sample arrays with or without it.
    np.savez(tmp_path / "d.npz", a=np.ones((2, 4)), ids=np.zeros((2, 1, 3), np.int32))
    sample = next(iter(open_dataset(tmp_path / "d.npz", input_specs(proto))))
    assert sample.inputs["a"].shape == (1, 4) and sample.inputs["ids"].dtype == np.int64


def test_preprocess_json_round_trip() -> None:
    pre = ImagePreprocess(
        size=(224, 224),
        resize_mode="shorter-side-crop",
        resize_shorter=256,
        color="BGR",
        mean=(104, 117, 123),
    )
    text = json.dumps(pre.to_json())
    assert ImagePreprocess.from_json(text) == pre
    assert ImagePreprocess.from_json(json.loads(text)) == pre
    assert pre.mean == (104.0, 117.0, 123.0)


# -------------------------------------------------------------------------------------------- bad input


def test_missing_and_unsupported_paths(tmp_path: Path) -> None:
    assert "not found" in _error(open_dataset, tmp_path / "nope.npz", [DIGIT])
    (tmp_path / "d.txt").write_text("1,2,3")
    assert "unsupported data file" in _error(open_dataset, tmp_path / "d.txt", [DIGIT])
    assert "positive" in _error(open_dataset, tmp_path / "d.txt", [DIGIT], limit=0)


def test_corrupt_files(tmp_path: Path) -> None:
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 this is not a zip")
    assert "not a readable .npz" in _error(open_dataset, tmp_path / "bad.npz", [DIGIT])
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    assert "bad.npy: not a readable" in _error(open_dataset, tmp_path / "bad.npy", [DIGIT])
    np.save(tmp_path / "cut.npy", np.zeros((50, 1, 8, 8), np.float32))
    data = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[: len(data) // 2])
    assert "cut.npy: file is truncated" in _error(open_dataset, tmp_path / "cut.npy", [DIGIT])
    with open(tmp_path / "cut.npz", "wb") as f:  # a member whose array data were cut short
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (50, 1, 8, 8)}
        )
        f.write(b"\0" * 100)
    raw = (tmp_path / "cut.npz").read_bytes()
    with zipfile.ZipFile(tmp_path / "cut.npz", "w") as zf:
        zf.writestr("x.npy", raw)
    assert "file is truncated" in _error(open_dataset, tmp_path / "cut.npz", [DIGIT])


def test_empty_data_sets(tmp_path: Path) -> None:
    np.savez(tmp_path / "e.npz", x=np.zeros((0, 1, 8, 8), np.float32))
    assert "empty data set" in _error(open_dataset, tmp_path / "e.npz", [DIGIT])
    np.save(tmp_path / "e.npy", np.zeros((0, 1, 8, 8), np.float32))
    assert "empty data set" in _error(open_dataset, tmp_path / "e.npy", [DIGIT])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("nothing here")
    assert "empty data set" in _error(open_dataset, tmp_path / "empty", [DIGIT])


def test_input_names_mismatch_names_both_sets(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", input=np.zeros((2, 1, 8, 8), np.float32), labels=np.zeros(2))
    msg = _error(open_dataset, tmp_path / "d.npz", [DIGIT])
    assert "['input']" in msg and "['x']" in msg


def test_wrong_shape_names_expected_and_got(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 1, 28, 28), np.float32))
    msg = _error(open_dataset, tmp_path / "d.npz", [DIGIT])
    assert "[1,8,8] or [1,1,8,8]" in msg and "[1,28,28]" in msg
    np.save(tmp_path / "s.npy", np.float32(3.0))
    assert "leading sample dimension" in _error(open_dataset, tmp_path / "s.npy", [DIGIT])


def test_wrong_dtypes(tmp_path: Path) -> None:
    np.savez(tmp_path / "s.npz", x=np.full((2, 1, 8, 8), "a"))
    assert "not numeric" in _error(open_dataset, tmp_path / "s.npz", [DIGIT])
    np.save(tmp_path / "o.npy", np.array([[1, "a"], [2, None]], dtype=object), allow_pickle=True)
    assert "got object (not numeric)" in _error(open_dataset, tmp_path / "o.npy", [InputSpec("x", (1, 2))])
    np.save(tmp_path / "f.npy", np.zeros((2, 4), np.float32))
    msg = _error(open_dataset, tmp_path / "f.npy", [InputSpec("ids", (1, 4), np.int64)])
    assert "expects int64" in msg and "float32" in msg


def test_labels_count_mismatch_and_bad_labels(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.zeros((3, 1, 8, 8), np.float32), labels=np.zeros(4, np.int64))
    assert "4 labels for 3 samples" in _error(open_dataset, tmp_path / "d.npz", [DIGIT])
    np.savez(tmp_path / "f.npz", x=np.zeros((2, 1, 8, 8), np.float32), labels=np.array([0.5, 1.0]))
    assert "integer class indices" in _error(open_dataset, tmp_path / "f.npz", [DIGIT])
    np.savez(tmp_path / "m.npz", a=np.zeros((3, 4)), b=np.zeros((2, 4)))
    msg = _error(open_dataset, tmp_path / "m.npz", [InputSpec("a", (1, 4)), InputSpec("b", (1, 4))])
    assert "different sample counts" in msg


def test_non_finite_values_name_the_sample(tmp_path: Path) -> None:
    x = np.zeros((4, 1, 8, 8), np.float32)
    x[2, 0, 3, 3] = np.nan
    np.save(tmp_path / "n.npy", x)
    ds = open_dataset(tmp_path / "n.npy", [DIGIT])
    assert len(list(open_dataset(tmp_path / "n.npy", [DIGIT], limit=2))) == 2
    with pytest.raises(DataError, match=r"sample n\.npy\[2\] input 'x' contains NaN or infinity"):
        list(ds)


def test_labels_csv_problems(tmp_path: Path) -> None:
    _write_image(tmp_path / "a.png", 16, 16)
    (tmp_path / "labels.csv").write_text("file,label\na.png,1\nmissing.png,2\n")
    msg = _error(open_dataset, tmp_path, [RGB16])
    assert "missing.png" in msg and "not found" in msg and "row 3" in msg
    _write_image(tmp_path / "b.png", 16, 16)
    (tmp_path / "labels.csv").write_text("a.png,1\n")
    assert "no label for image 'b.png'" in _error(open_dataset, tmp_path, [RGB16])
    (tmp_path / "labels.csv").write_text("a.png,1\nb.png,cat\n")
    assert "'cat' is not an integer" in _error(open_dataset, tmp_path, [RGB16])


def test_undecodable_image_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated jpeg")
    msg = _error(open_dataset, tmp_path, [RGB16])
    assert "broken.jpg" in msg and "cannot decode image" in msg


def test_image_layout_and_folder_problems(tmp_path: Path) -> None:
    _write_image(tmp_path / "a.png", 16, 16)
    assert "3 channels" in _error(open_dataset, tmp_path, [RGB16], ImagePreprocess(color="GRAY"))
    msg = _error(open_dataset, tmp_path, [RGB16, DIGIT])
    assert "one input" in msg
    msg = _error(
        open_dataset, tmp_path, [InputSpec("img", (1, 3, 16, 16), np.float32)], ImagePreprocess(size=(8, 8))
    )
    assert "[1,3,8,8]" in msg and "[1,3,16,16]" in msg
    (tmp_path / "cls").mkdir()
    _write_image(tmp_path / "cls" / "b.png", 16, 16)
    assert "both at the top level and in sub-folders" in _error(open_dataset, tmp_path, [RGB16])


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"resize_mode": "stretch"}, "resize mode"),
        ({"color": "CMYK"}, "color"),
        ({"layout": "CHW"}, "layout"),
        ({"mean": (1.0, 2.0)}, "mean needs 1 or 3 values"),
        ({"std": (0.0,)}, "non-zero"),
        ({"size": (0, 4)}, "positive"),
        ({"scale": 0.0}, "scale"),
        ({"dtype": "int32"}, "dtype"),
    ],
)
def test_invalid_preprocess_options(kwargs: dict, text: str) -> None:
    with pytest.raises(DataError, match=text):
        ImagePreprocess(**kwargs)


def test_from_json_rejects_unknown_keys_and_bad_text() -> None:
    with pytest.raises(DataError, match="unknown image preprocessing keys: colour"):
        ImagePreprocess.from_json({"colour": "RGB"})
    with pytest.raises(DataError, match="not valid JSON"):
        ImagePreprocess.from_json("{")


@pytest.mark.shared
@pytest.mark.skipif(
    os.environ.get("EDGEKIT_SHARED") != "1", reason="needs ../shared; opt in with EDGEKIT_SHARED=1"
)
def test_shared_imagenet_sample_with_squeezenet_preprocessing() -> None:
    import onnxruntime as ort

    shared = Path(__file__).resolve().parents[2] / "shared"
    session = ort.InferenceSession(
        str(shared / "models" / "squeezenet1.1-fp32.onnx"), providers=["CPUExecutionProvider"]
    )
    pre = ImagePreprocess(color="BGR", mean=(104.0, 117.0, 123.0))  # as in ../shared/README.md
    ds = open_dataset(
        shared / "data" / "imagenet-sample-200", [InputSpec("data_0", (1, 3, 224, 224), np.float32)], pre
    )
    assert len(ds) == 200 and ds.has_labels
    correct = sum(int(session.run(None, s.inputs)[0].argmax() == s.label) for s in ds)
    assert correct / 200 >= 0.55  # the README: roughly 60 % top-1 in fp32 with this preprocessing
