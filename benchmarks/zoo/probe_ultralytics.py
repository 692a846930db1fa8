"""Issue 12 round 7u probe: the ultralytics families as users export them today (``model.export(format="onnx")``).

    python benchmarks/zoo/probe_ultralytics.py                       # every probe model -> benchmarks/.zoo/probe7u
    python benchmarks/zoo/probe_ultralytics.py --only yolo11n,yolo26n
    python benchmarks/zoo/probe_ultralytics.py --reduced           # yolo26n_e2e -> tests/zoo/models (ci: false)
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe7u/zoo.json --no-shared --workers 1

Offline (``YOLO_OFFLINE=1``): each model is built from ultralytics' own yaml (scale ``n`` unless a reduced width
is asked for), seeded weights, BatchNorm statistics from real photos (``export.set_bn_statistics``), the class
biases of every detection head spread as a trained detector's (``detectors._spread_class_bias``), then written by
ultralytics' own exporter with the options users pass (opset, ``dynamic``, ``simplify``, ``nms``).

Models: yolo11n (C2PSA attention), yolo26n (end-to-end NMS-free head: TopK / GatherElements), yolov10n (NMS-free),
yolov5nu, yolov8n-seg / yolo11n-seg (mask prototypes, two outputs), yolov8n-pose / yolo11n-pose (keypoints),
yolov8n-obb (rotated boxes), yolov8n-cls / yolo11n-cls, rtdetr-l; and yolov8n at opsets 11 / 13, dynamic, simplified,
with ``nms=True``. Needs torch and ultralytics (dev only).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("YOLO_OFFLINE", "1")  # ultralytics must not look anything up

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export as zoo_export  # noqa: E402
from detectors import YOLO_DATA, _spread_class_bias  # noqa: E402
from export import Spec, set_bn_statistics, zoo_data  # noqa: E402

OUT = zoo_export.FULL_DIR / "probe7u"
SEED = 7

#: name -> (yaml, kind, export options, scale override or None, classes or None, imgsz)
#: scale override: [depth, width, max_channels] in place of the yaml's "n" (the committed reduced models).
PROBES: dict[str, dict[str, Any]] = {
    "yolo11n": {"yaml": "yolo11n.yaml", "kind": "detector"},
    "yolo26n": {"yaml": "yolo26n.yaml", "kind": "detector"},
    "yolov10n": {"yaml": "yolov10n.yaml", "kind": "detector"},
    "yolo26n_e2e": {"yaml": "yolo26n.yaml", "kind": "detector", "export": {"nms": False}},
    "yolov10n_e2e": {"yaml": "yolov10n.yaml", "kind": "detector", "export": {"nms": False}},
    "yolov5nu": {"yaml": "yolov5nu.yaml", "kind": "detector", "file": "yolov5_probe.yaml"},
    "yolov8n_seg": {"yaml": "yolov8n-seg.yaml", "kind": "detector"},
    "yolo11n_seg": {"yaml": "yolo11n-seg.yaml", "kind": "detector"},
    "yolov8n_pose": {"yaml": "yolov8n-pose.yaml", "kind": "detector"},
    "yolo11n_pose": {"yaml": "yolo11n-pose.yaml", "kind": "detector"},
    "yolov8n_obb": {"yaml": "yolov8n-obb.yaml", "kind": "detector"},
    "yolov8n_cls": {"yaml": "yolov8n-cls.yaml", "kind": "classifier", "imgsz": 128},
    "yolo11n_cls": {"yaml": "yolo11n-cls.yaml", "kind": "classifier", "imgsz": 128},
    "rtdetr_l": {"yaml": "rtdetr-l.yaml", "kind": "detector"},
    "yolov8n_op11": {"yaml": "yolov8n.yaml", "kind": "detector", "export": {"opset": 11}},
    "yolov8n_op13": {"yaml": "yolov8n.yaml", "kind": "detector", "export": {"opset": 13}},
    "yolov8n_dynamic": {"yaml": "yolov8n.yaml", "kind": "detector", "export": {"dynamic": True}},
    "yolov8n_simplify": {"yaml": "yolov8n.yaml", "kind": "detector", "export": {"simplify": True}},
    "yolov8n_nms": {"yaml": "yolov8n.yaml", "kind": "detector", "export": {"nms": True}},
    "yolo11n_op12_dynamic": {
        "yaml": "yolo11n.yaml",
        "kind": "detector",
        "export": {"opset": 12, "dynamic": True, "simplify": True},
    },
}
IMGSZ = 160
#: The committed reduced models (tests/zoo/models, ``"ci": false``): YOLOv8n's reduced width (detectors.py), 20
#: classes, 128x128. yolo26n_e2e: C2PSA attention and the NMS-free end-to-end head (TopK over the anchors'
#: best scores, GatherElements, TopK over anchors x classes, Mod/Div class and row indices). (yolov8n_seg at that
#: size is 1.8 MB, its 64-channel box branches fixed by reg_max: over the committed models' budget.)
REDUCED = ("yolo26n_e2e",)
REDUCED_SCALE = [0.33, 0.0625, 1024]
REDUCED_CLASSES = 20
REDUCED_IMGSZ = 128


def build(probe: dict[str, Any], folder: Path, scale: list[float] | None, classes: int | None):
    import yaml
    from ultralytics import YOLO
    from ultralytics.nn.tasks import yaml_model_load

    cfg = yaml_model_load(probe["yaml"])
    cfg.pop("yaml_file", None)
    key = cfg.get("scale") or "n"
    # one scale left in the yaml: the written file's name no longer tells ultralytics which (yaml_model_load
    # falls back to the first key, and safe_dump sorts them: "l" before "n")
    cfg["scales"] = {key: scale if scale is not None else cfg["scales"][key]}
    if classes is not None:
        cfg["nc"] = classes
    path = folder / probe.get("file", probe["yaml"])  # ultralytics re-maps some names (yolov5nu -> yolov5u)
    path.write_text(yaml.safe_dump(cfg))
    if probe["yaml"].startswith("rtdetr"):
        from ultralytics import RTDETR

        yolo = RTDETR(str(path))
    else:
        yolo = YOLO(str(path))
    gen = torch.Generator().manual_seed(SEED)
    head = yolo.model.model[-1]
    nc = getattr(head, "nc", None)
    for branch in ("cv3", "one2one_cv3"):
        for seq in getattr(head, branch, None) or []:
            last = seq[-1]
            conv = last if isinstance(last, torch.nn.Conv2d) else None
            if conv is not None and nc:
                _spread_class_bias(conv, nc, gen)
    return yolo


def export_probe(
    name: str,
    out: Path,
    photos,
    scale: list[float] | None = None,
    classes: int | None = None,
    imgsz: int | None = None,
) -> dict[str, Any]:
    import onnx

    probe = PROBES[name]
    size = imgsz or probe.get("imgsz", IMGSZ)
    options = {"opset": None, "simplify": False, "dynamic": False, **probe.get("export", {})}
    options = {k: v for k, v in options.items() if v is not None}
    inputs = [("images", [1, 3, size, size])]
    spec = Spec(name, name, probe["kind"], 0, lambda f: None, lambda f: inputs, [])
    spec.data = dict(YOLO_DATA)
    path = out / f"{name}.onnx"
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            torch.manual_seed(SEED)
            yolo = build(probe, Path(tmp), scale, classes)
            net = yolo.model
            n_bn = set_bn_statistics(net, spec, False, photos, 4)
            written = yolo.export(format="onnx", imgsz=size, **options)
        finally:
            os.chdir(cwd)
        shutil.move(str(Path(tmp, written)), path)
    proto = onnx.load(str(path))
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    outputs = [o.name for o in proto.graph.output]
    entry: dict[str, Any] = {
        "name": name,
        "file": path.name,
        "family": f"ultralytics {probe['yaml']}",
        "kind": probe["kind"],
        "opset": opset,
        "inputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in inputs],
        "outputs": outputs,
        "data": dict(YOLO_DATA),
        "size": "reduced" if scale is not None else "full",
        "params": int(sum(p.numel() for p in net.parameters())),
        "batchnorm_layers_set": n_bn,
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": f"ultralytics {probe['yaml']} export(format='onnx', imgsz={size}, {options})",
        "seed": SEED,
    }
    if options.get("dynamic"):
        entry["extra_args"] = ["--input-shape", f"images=1,3,{size},{size}"]
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated names: " + ", ".join(PROBES))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    parser.add_argument(
        "--reduced", action="store_true", help="the committed reduced models -> tests/zoo/models (ci: false)"
    )
    args = parser.parse_args(argv)
    photos = zoo_data.bn_photos(args.photos, zoo_export.default_shared())
    torch.set_num_threads(1)
    if args.reduced:
        out = zoo_export.REDUCED_DIR
        names = args.only.split(",") if args.only else list(REDUCED)
        reduced = [
            dict(
                export_probe(n, out, photos, REDUCED_SCALE, REDUCED_CLASSES, REDUCED_IMGSZ),
                ci=False,
                note=f"issue 12 probe round 7u (benchmarks/zoo/probe_ultralytics.py --reduced): {PROBES[n]['yaml']}, "
                f"width 1/16, {REDUCED_CLASSES} classes, {REDUCED_IMGSZ}x{REDUCED_IMGSZ}, "
                f"export(format='onnx', {PROBES[n].get('export', {})})",
            )
            for n in names
        ]
        for e in reduced:
            print(
                f"{e['name']}: {(out / e['file']).stat().st_size / 1e6:.2f} MB {e['params']:,d} params {e['ops']}"
            )
        zoo_data.merge_manifest(out, reduced)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    entries = []
    for name in args.only.split(",") if args.only else list(PROBES):
        try:
            entries.append(export_probe(name, args.out, photos))
        except Exception as exc:  # a probe: one family that does not build/export must not stop the others
            print(f"{name}: could not build/export: {type(exc).__name__}: {exc}")
            continue
        e = entries[-1]
        print(f"{name}: {(args.out / e['file']).stat().st_size / 1e6:.2f} MB opset {e['opset']} {e['ops']}")
    zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
