"""Issue 12 probe round 20f: the models whose figures rounds 19m / 19r missed, rebuilt in one folder to trace them
(``--out benchmarks/.zoo/probe20f``, not committed; the same needs as ``probe_families19.py``: ``monai`` 1.6.1,
``einops``, ``yolov5`` 7.0.14, ``pandas``, ``seaborn`` in the probe's venv and torchreid 0.2.5's sdist, ``--torchreid
DIR``).

Each model is built by its round's own builder with its round's seed (the same files, byte for byte):

- round 19m (``probe_families19.py``): yolov5n ``--dynamic`` at opset 12 (fp32 verification 1.94e-4 of the range),
  PatchCore (fp32 2.1e-4), OSNet x0.25 / OSNet-AIN x0.25 (int8 vs QDQ 0.9936 / 0.9898), SegResNet (0.9971) and the
  MONAI 3-D models whose int8 .tflite missed 0.999 against its QDQ model (BasicUNet, UNet, DynUNet, AttentionUnet,
  UNETR, DenseNet121: 0.9687-0.9987);
- round 19r (``probe_two_stage.py``): Mask R-CNN MobileNetV3 with its masks at RoI resolution (arm-cpu fp32 refused
  by the verification's tail check, masks 2.8e-3 of the range).

    python benchmarks/zoo/probe_figures20.py --torchreid /tmp/torchreid-0.2.5 [--only a,b]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe20f/zoo.json --no-shared --workers 1 --calib 16 \\
        --eval 8 --json r.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe20f"
#: round 19m's models traced here (probe_families19's names)
FAMILIES19 = (
    "y_yolov5n_dynamic_op12", "a_patchcore", "r_osnet_x0_25", "r_osnet_ain_x0_25", "m3_segresnet",
    "m3_basicunet", "m3_unet", "m3_dynunet", "m3_attunet", "m3_unetr", "m3_densenet121",
)  # fmt: skip
#: round 19r's
TWO_STAGE = ("maskrcnn_mnv3_rois",)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--torchreid", type=Path, help="torchreid 0.2.5's sdist, unpacked (the OSNet models)")
    args = ap.parse_args(argv)
    wanted = set(args.only.split(",")) if args.only else set(FAMILIES19) | set(TWO_STAGE)
    families = [n for n in FAMILIES19 if n in wanted]
    two_stage = [n for n in TWO_STAGE if n in wanted]
    torchreid = ["--torchreid", str(args.torchreid)] if args.torchreid else []
    if families:
        import probe_families19

        probe_families19.main(["--out", str(args.out), "--only", ",".join(families), *torchreid])
    if two_stage:
        import probe_two_stage

        probe_two_stage.main(["--out", str(args.out), "--only", ",".join(two_stage)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
