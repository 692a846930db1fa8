r"""Issue 12 round 12r probe: the compression recipes and the accuracy search over the probe rounds' models.

    python benchmarks/zoo/probe_recipes.py        # -> benchmarks/.zoo/probe12r/ (+ .zoo/probe/) zoo.json, 27 models
    nice -n 5 python benchmarks/recipe_survey.py --manifest benchmarks/.zoo/probe12r/zoo.json --no-shared \
        --no-search --sweep-models "" --workers 1 --timeout 180 --json r.json
    nice -n 5 python benchmarks/recipe_survey.py --manifest benchmarks/.zoo/probe/zoo.json --no-shared \
        --no-search --sweep-models "" --workers 1 --timeout 180 --json r2.json
    nice -n 5 python benchmarks/recipe_survey.py --manifest benchmarks/.zoo/probe12r/zoo.json --no-shared \
        --only minilm_fp32,vit_fp16,yolox_nano_op13,h_whisper_encoder,minilm_quantized \
        --cases "arm-cpu search,intel-vpu search,nnapi search" --workers 1 --timeout 180 --json r3.json

No model of its own: it runs the earlier rounds' builder scripts (seeded, BatchNorm statistics from the photos)
for a varied selection, into one manifest (``probe_sequences.py`` writes only into ``benchmarks/.zoo/probe``):
Hub variant files (``probe_hub_variants.py``: an all-MiniLM-style encoder and ViT as ``model.onnx``, ``_fp16``,
``_fp16io``, ``_quantized`` (quantize_dynamic) and ``_q4`` (MatMulNBits); needs onnxconverter-common), anchor-free
detectors with their decode (``probe_detectors.py``), Hugging Face transformers (``probe_transformers2.py``:
DistilBERT, GPT-2, MobileViT, Whisper encoder), backbones (``probe_backbones2.py``: Inception-v3, RegNetY-400MF,
Swin, Sequencer2D's BiLSTM), sequence models (``probe_sequences.py``: Conformer, CRNN-BiLSTM, BERT as float16 ONNX
and as quantize_dynamic) and ultralytics YOLO11n / YOLOv8n-seg (``probe_ultralytics.py``). Paddle's builders need
paddlepaddle, which this round's venv lacks: the reduced zoo's Paddle models were surveyed before.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / ".zoo" / "probe12r"

#: (builder script, its --only selection, extra arguments); ``None`` output: the script's own folder.
BUILDS = (
    ("probe_hub_variants.py", "minilm,vit", ["--variants", "fp32,fp16,fp16io,quantized,q4"]),
    ("probe_detectors.py", "yolox_nano_op13,rtmdet_style,fcos_style", []),
    ("probe_transformers2.py", "h_distilbert,h_gpt2,h_whisper_encoder,h_mobilevit", []),
    ("probe_backbones2.py", "swin_small,inception_v3,regnet_y_400mf,sequencer2d_s", []),
    ("probe_ultralytics.py", "yolo11n,yolov8n_seg", []),
)
#: probe_sequences.py takes builder function names and writes benchmarks/.zoo/probe/.
SEQUENCES = "conformer,crnn,fp16_bert,bert_dynq"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    failed = 0
    for script, only, extra in BUILDS:
        cmd = [sys.executable, str(HERE / script), "--out", str(args.out), "--only", only, *extra]
        failed += subprocess.call(cmd) != 0
    failed += subprocess.call([sys.executable, str(HERE / "probe_sequences.py"), SEQUENCES]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
