"""Issue 12 probe round 19r: torchvision's two-stage detectors exported whole (``--out benchmarks/.zoo/probe19r``,
not committed): the RoI head runs after the RPN's selection, on boxes whose count is known at run time only.

- Faster R-CNN MobileNetV3-Large-320-FPN (round 12v's row: RPN, MultiScaleRoIAlign, TwoMLPHead, box decoding,
  a second batched NMS), 256 x 256;
- Mask R-CNN (mask head: four 3x3 convolutions on [K, 256, 14, 14], ConvTranspose, Sigmoid, the mask of each
  box's label, pasted in the image) and Keypoint R-CNN (eight convolutions, ConvTranspose, heatmap argmax),
  each with torchvision's ResNet-50-FPN at 256 x 256 and with a MobileNetV3-Large FPN backbone (as
  ``fasterrcnn_mobilenet_v3_large_fpn`` builds it), fewer RPN proposals than the defaults;
- the MobileNetV3 Mask / Keypoint R-CNN with their per-box outputs at the RoI head's resolution (``*_rois``: the
  [K, 1, 28, 28] masks of each box's label, the [K, 17, 56, 56] keypoint heatmaps), as an edge export leaves the
  pasting to the application: torchvision's own export pastes them in a ``Loop`` over the kept boxes.

Seeded weights, BatchNorm statistics from the photos (round 12v's ``Whole`` / ``build``), opset 11 as torchvision's
``test_onnx.py`` exports them; the box score threshold is lowered (0.01) so that boxes of the untrained heads
survive both selections on the shared photos.

    python benchmarks/zoo/probe_two_stage.py [--only a,b]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe19r/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_torchvision_tasks as tv  # noqa: E402

S = 256
#: fewer proposals than torchvision's 1000 (the RoI head's batch), a score bar the seeded heads pass
KW = {
    "min_size": S,
    "max_size": S,
    "rpn_pre_nms_top_n_test": 300,
    "rpn_post_nms_top_n_test": 100,
    "box_score_thresh": 0.01,
    "box_detections_per_img": 20,
}
BOXES = ("boxes", "scores", "labels")
MASKS = (*BOXES, "masks")
KEYPOINTS = (*BOXES, "keypoints", "keypoints_scores")


def mobilenet(kind: str, keys: tuple[str, ...], pasted: bool = True, **kwargs) -> nn.Module:
    """Mask / Keypoint R-CNN on the MobileNetV3-Large FPN backbone ``fasterrcnn_mobilenet_v3_large_fpn`` uses."""
    from torchvision.models import mobilenet_v3_large
    from torchvision.models.detection import KeypointRCNN, MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.backbone_utils import _mobilenet_extractor

    backbone = _mobilenet_extractor(mobilenet_v3_large(weights=None), True, 6)
    sizes = ((32, 64, 128, 256, 512),) * 3
    anchors = AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * len(sizes))
    build = MaskRCNN if kind == "mask" else KeypointRCNN
    return (tv.Whole if pasted else AtRoiResolution)(
        build(backbone, rpn_anchor_generator=anchors, **kwargs), keys
    )


class AtRoiResolution(tv.Whole):
    """Mask / Keypoint R-CNN whose per-box outputs stay at the RoI head's resolution, as an edge export leaves the
    pasting to the application: torchvision's ONNX path pastes each mask into the image and turns each heatmap
    into keypoints in a ``Loop`` over the kept boxes (``_onnx_paste_masks_in_image_loop``,
    ``_onnx_heatmaps_to_keypoints_loop``: a Resize to each box's size inside). Here ``masks`` are the
    [K, 1, 28, 28] probabilities of each box's label and ``keypoints`` the [K, 17, 56, 56] heatmaps, with
    ``keypoints_scores`` their maxima; the boxes are rescaled to the input as before."""

    def forward(self, images):
        from torchvision.models.detection import roi_heads
        from torchvision.models.detection.transform import resize_boxes

        def boxes_only(result, image_shapes, original_image_sizes):
            for pred, size, original in zip(result, image_shapes, original_image_sizes, strict=True):
                pred["boxes"] = resize_boxes(pred["boxes"], size, original)
            return result

        def heatmaps(
            maps, boxes
        ):  # one image: its boxes' heatmaps (a split by counts would trace them fixed)
            return [maps], [maps.flatten(2).amax(2)]

        keypoints = roi_heads.keypointrcnn_inference
        self.det.transform.postprocess = boxes_only
        roi_heads.keypointrcnn_inference = heatmaps
        try:
            return super().forward(images)
        finally:
            roi_heads.keypointrcnn_inference = keypoints
            del self.det.transform.postprocess


def probes() -> list[tv.Probe]:
    def torchvision(builder: str, keys: tuple[str, ...], **kw):
        return tv.det(builder, True, keys, **KW, **kw)

    def small(kind: str, keys: tuple[str, ...], **kw):
        return lambda: mobilenet(kind, keys, **KW, **kw)

    rows = (
        ("fasterrcnn_mnv3_320", "fasterrcnn_mobilenet_v3_large_320_fpn", BOXES,
         torchvision("fasterrcnn_mobilenet_v3_large_320_fpn", BOXES, num_classes=21)),
        ("maskrcnn_mnv3", "MaskRCNN MobileNetV3-Large-FPN", MASKS, small("mask", MASKS, num_classes=21)),
        ("keypointrcnn_mnv3", "KeypointRCNN MobileNetV3-Large-FPN", KEYPOINTS,
         small("keypoint", KEYPOINTS, num_classes=2, num_keypoints=17)),
        ("maskrcnn_r50", "maskrcnn_resnet50_fpn", MASKS, torchvision("maskrcnn_resnet50_fpn", MASKS, num_classes=21)),
        ("keypointrcnn_r50", "keypointrcnn_resnet50_fpn", KEYPOINTS,
         torchvision("keypointrcnn_resnet50_fpn", KEYPOINTS, num_classes=2, num_keypoints=17)),
        ("maskrcnn_mnv3_rois", "MaskRCNN MobileNetV3-Large-FPN, masks at RoI resolution", MASKS,
         small("mask", MASKS, pasted=False, num_classes=21)),
        ("keypointrcnn_mnv3_rois", "KeypointRCNN MobileNetV3-Large-FPN, heatmaps", KEYPOINTS,
         small("keypoint", KEYPOINTS, pasted=False, num_classes=2, num_keypoints=17)),
    )  # fmt: skip
    return [
        tv.Probe(name, f"torchvision {family} (whole)", "detector", 11, build, [("images", [1, 3, S, S])],
                 list(keys), dict(tv.UNIT_DATA), dynamic_axes=tv.DYN,
                 note="two-stage: RPN selection, RoI head on run-time boxes, second NMS")
        for name, family, keys, build in rows
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=tv.zoo_export.ROOT / "benchmarks" / ".zoo" / "probe19r")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = tv.zoo_data.bn_photos(args.photos, tv.zoo_export.default_shared())
    torch.set_num_threads(1)
    everything = probes()
    names = args.only.split(",") if args.only else [p.name for p in everything]
    for i, probe in enumerate(everything):
        if probe.name not in names:
            continue
        try:
            entry = tv.build(probe, args.out, photos, tv.SEED + 1900 + i)
        except Exception as exc:  # an export torch cannot do is a finding of the probe, not a stop
            print(f"{probe.name:24s} EXPORT FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        tv.zoo_data.merge_manifest(args.out, [entry])
        size = (args.out / entry["file"]).stat().st_size
        print(f"{probe.name:24s} {entry['params']:>10,d} params  {size / 1e6:7.2f} MB  {entry['ops']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
