"""Calibration and evaluation data for the zoo models (``tests/zoo/models/zoo.json``), from real photos.

Importable by the tests and the benchmarks, and needs only numpy, Pillow and scikit-learn (no torch). Each
manifest entry's ``data`` says how to make its inputs:

- ``{"type": "image", "color": "RGB"|"BGR"|"GRAY", "scale": s, "mean": [...], "std": [...]}``: crops of real
  photographs resized to the input's H x W, ``(pixel * scale - mean) / std`` per channel, NCHW. Photos are
  scikit-learn's two bundled sample images (offline, always there) by default, or the 200 ImageNet photos of
  ``../shared/data/imagenet-sample-200`` when a ``photos`` folder is given. With ``"text": true`` words are
  drawn on each crop first (:func:`draw_text`): a text detector's input (on plain photos PP-OCRv4 det's
  probability map is ~0 everywhere, 0.02 % of its pixels above 0.3, and a cosine between two such maps measures
  noise).
- ``{"type": "logmel", "sample_rate": 16000, "hop_ms": 20, "window_ms": 30}``: log-mel features ``[frames,
  bins]`` (the input's last two dims) of a synthetic voiced signal (harmonics with a gliding pitch, formant-like
  envelope, noise bursts), computed with numpy, normalised per utterance: the float input of a keyword spotter.
- ``{"type": "waveform", "sample_rate": 16000}``: the raw signal (the input's last dim, samples) of the same
  synthetic utterances, zero mean and unit variance per utterance (as Wav2Vec2's feature extractor normalises);
  an input shorter than half a second is a window of a half-second utterance (a VAD's chunk). Inputs named in
  ``"states": [...]`` are a streaming model's recurrent state instead (:func:`state_array`).
- ``{"type": "tokens", "vocab_size": V, "roles": {"input_ids": "ids", "attention_mask": "mask",
  "token_type_ids": "type_ids"}}``: token ids of sentences of random length (a CLS id 101, body ids, a SEP id
  102, then padding 0) with the matching attention mask (1 on tokens, 0 on padding); ``type_ids`` are zeros;
  ``positions`` are 0, 1, 2, ... (a decoder's ``position_ids`` as optimum's text-generation export takes them).
  With ``"vocab": "path/to/vocab.txt"`` (a BERT WordPiece vocabulary) the bodies are real sentences (this
  repository's README and docs) tokenised by the plain uncased BERT WordPiece, cut to the sequence length.
  With ``"log": false, "mel": "slaney", "dbfs": -30`` it is librosa's mel power (not log) of the utterance at
  -30 dBFS, as Resemblyzer's speaker encoder takes it.
- ``{"type": "waveform", ..., "signal": "music", "normalize": false}``: notes instead of speech (:func:`synthetic_music`:
  harmonic tones with attack/decay envelopes, chords, vibrato, noise), left as they are in [-1, 1] (as librosa
  loads a file) instead of unit variance; the samples are the input's longest dim (basic-pitch's [1, 43844, 1]).
  ``"pcm16": true``: 16-bit PCM sample values (integers up to 32767, peak at 10-90 % of full scale) as floats.
- ``{"type": "bytes", "beg": 1024, "end": 1024, "padding": 256, "block": 4096}``: the bytes of real files (this
  Python's standard library and ``/usr/share``: source, bytecode, shared objects, text, images, archives, one file
  type after another) as integer tokens, as Magika reads them (:func:`file_tokens`): the first ``beg`` bytes of
  the first ``block`` after stripping leading whitespace, padded after, and the last ``end`` bytes of the last
  ``block`` after stripping trailing whitespace, padded before; the input's dtype (int32 for Magika).
- ``{"type": "arrays", "file": "name.samples.npz"}``: stored inputs beside the model (the manifest's folder), a
  pipeline's real intermediate features that only its upstream models make (openWakeWord's melspectrogram ->
  speech-embedding -> wake-word heads); calibration takes the first rows, evaluation the next.

Arrays have a leading sample axis and the input's shape without its batch dim (``edgekit``'s .npz format).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
MANIFEST = MODELS / "zoo.json"

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: The ImageNet normalisation of torchvision/timm models, as a manifest ``data`` entry.
IMAGENET_DATA = {
    "type": "image",
    "color": "RGB",
    "scale": 1 / 255,
    "mean": IMAGENET_MEAN,
    "std": IMAGENET_STD,
}
#: PP-OCRv4 det's input (PaddleOCR's preprocessing, BGR). A text detector's input: on plain photos its probability
#: map is ~0 (0.02 % of pixels above 0.3) and a cosine between two such maps measures noise (int8 vs fp32 0.06 there,
#: 0.95 with text).
PPOCR_DET_DATA = {**IMAGENET_DATA, "color": "BGR", "text": True}
#: PP-OCRv4 rec's input (BGR, scaled to [-1, 1]).
PPOCR_REC_DATA = {"type": "image", "color": "BGR", "scale": 1 / 255, "mean": [0.5] * 3, "std": [0.5] * 3}


def load_manifest(path: Path = MANIFEST) -> dict[str, Any]:
    """The zoo manifest: ``{"format": 1, "models": [entry, ...]}``."""
    return json.loads(Path(path).read_text())


def entries(path: Path = MANIFEST) -> list[dict[str, Any]]:
    return list(load_manifest(path)["models"])


# ------------------------------------------------------------------------------------------------ photos


@functools.lru_cache(maxsize=4)
def cached_photos(photos: Path | None = None) -> list[np.ndarray]:
    """:func:`load_photos`, read once per folder."""
    return load_photos(photos)


def merge_manifest(folder: Path, entries: list[dict[str, Any]]) -> Path:
    """Write ``entries`` into ``folder/zoo.json``, replacing the entries of the same names and keeping the others
    (each builder script writes only its own), sorted by name. A replaced entry's ``"ci": false`` (the suite's time
    budget, set in the manifest) is kept unless the new entry says otherwise."""
    path = folder / "zoo.json"
    manifest = load_manifest(path) if path.exists() else {"format": 1, "models": []}
    ours = {e["name"] for e in entries}
    kept_out = {m["name"] for m in manifest["models"] if m.get("ci") is False}
    for e in entries:
        if e["name"] in kept_out:
            e.setdefault("ci", False)
    models = [m for m in manifest["models"] if m["name"] not in ours] + list(entries)
    manifest["models"] = sorted(models, key=lambda m: m["name"])
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {path}")
    return path


def bn_photos(photos: Path | None, shared: Path) -> list[np.ndarray]:
    """The photos BatchNorm statistics come from: ``photos``, else ``shared``'s 200 ImageNet photos, else
    scikit-learn's two sample images (said on stdout)."""
    if photos is None:
        candidate = shared / "data" / "imagenet-sample-200"
        photos = candidate if candidate.is_dir() else None
    loaded = load_photos(photos)
    print(f"BatchNorm statistics from {len(loaded)} photo(s) ({photos or 'scikit-learn sample images'})")
    return loaded


def load_photos(photos: Path | None = None, limit: int | None = None) -> list[np.ndarray]:
    """RGB uint8 HxWx3 photographs: the JPEGs of ``photos`` (sorted by name), else scikit-learn's two."""
    if photos is not None:
        from PIL import Image

        files = sorted(p for p in Path(photos).iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
        out = []
        for f in files[:limit] if limit else files:
            with Image.open(f) as im:
                out.append(np.asarray(im.convert("RGB")))
        if out:
            return out
    from sklearn.datasets import load_sample_images

    return [np.asarray(img) for img in load_sample_images().images]


def _resize(img: np.ndarray, height: int, width: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(img).resize((width, height), Image.BILINEAR))


def photo_crops(photos: Sequence[np.ndarray], count: int, height: int, width: int, seed: int) -> np.ndarray:
    """``count`` uint8 [H, W, 3] crops: random crops (20-100 % of the shorter side, random place and flip) of
    the photos, cycling through them, resized to H x W. With many photos (the shared set) the first pass takes
    the centre crop of each photo, as an ImageNet evaluation would."""
    rng = np.random.default_rng(seed)
    out = np.empty((count, height, width, 3), np.uint8)
    many = len(photos) >= count
    order = rng.permutation(len(photos))
    for i in range(count):
        img = photos[order[i % len(photos)]]
        h, w = img.shape[:2]
        aspect = width / height
        if many:  # centre crop with the input's aspect (resize the shorter side, then crop)
            ch, cw = (h, min(w, round(h * aspect))) if w / h >= aspect else (min(h, round(w / aspect)), w)
            top, left = (h - ch) // 2, (w - cw) // 2
        else:
            frac = rng.uniform(0.2, 1.0)
            ch = max(8, int(min(h, w / aspect) * frac))
            cw = max(8, min(w, int(ch * aspect)))
            top, left = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        crop = img[top : top + ch, left : left + cw]
        if not many and rng.random() < 0.5:
            crop = crop[:, ::-1]
        out[i] = _resize(np.ascontiguousarray(crop), height, width)
    return out


#: Words drawn on the photos of a text detector's data (signs, labels, prices).
_TEXT = (
    "edge kit model quantize int8 deploy target runtime calibration scale zero point tensor layer output "
    "input shape opset export photo text detector 2026 No. 42 OPEN 24h EXIT Tel: +1 555 0199 SALE 50% "
    "Main St. Station Cafe Parking Coffee Menu Price $3.50 Hotel Bank Pharmacy"
)


def draw_text(crops: np.ndarray, seed: int) -> np.ndarray:
    """The crops ([N, H, W, 3] uint8) with 2-6 lines of words drawn on each (Pillow's scalable default font,
    1/24 to 1/8 of the height, dark or light ink, some on a plain band, some rotated a little): a text
    detector's real input, signs and labels over a scene."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed + 7919)
    vocabulary = _TEXT.split()
    out = np.empty_like(crops)
    for i, crop in enumerate(crops):
        img = Image.fromarray(crop)
        height, width = crop.shape[:2]
        for _ in range(int(rng.integers(2, 7))):
            size = int(rng.uniform(height / 24, height / 8))
            font = ImageFont.load_default(size=max(size, 8))
            words = " ".join(rng.choice(vocabulary, size=int(rng.integers(1, 5))))
            x0, y0, x1, y1 = font.getbbox(words)
            layer = Image.new("RGBA", (x1 + 8, y1 + 8), (0, 0, 0, 0))
            draw = ImageDraw.Draw(layer)
            ink = tuple(
                int(v) for v in (rng.integers(0, 70, 3) if rng.random() < 0.6 else rng.integers(190, 256, 3))
            )
            if rng.random() < 0.4:
                band = tuple(255 - v for v in ink)
                draw.rectangle((0, 0, x1 + 8, y1 + 8), fill=(*band, 255))
            draw.text((4, 4), words, font=font, fill=(*ink, 255))
            if rng.random() < 0.3:
                layer = layer.rotate(float(rng.uniform(-15, 15)), expand=True, resample=Image.BILINEAR)
            px = int(rng.integers(-layer.width // 4, max(1, width - layer.width // 2)))
            py = int(rng.integers(0, max(1, height - layer.height)))
            img.paste(layer, (px, py), layer)
        out[i] = np.asarray(img)
    return out


def image_array(
    data: Mapping[str, Any], shape: Sequence[int], count: int, seed: int, photos: Sequence[np.ndarray]
) -> np.ndarray:
    """``count`` normalised images shaped like one sample of an NCHW input ``shape`` ([1, C, H, W]), or of an
    NHWC one ([1, H, W, C]) with ``"layout": "NHWC"`` (a TensorFlow / TFLite model converted by tf2onnx)."""
    nhwc = data.get("layout", "NCHW").upper() == "NHWC"
    channels, height, width = (int(shape[3]), int(shape[1]), int(shape[2])) if nhwc else map(int, shape[1:4])
    crops = photo_crops(photos, count, height, width, seed)
    if data.get("text"):
        crops = draw_text(crops, seed)
    crops = crops.astype(np.float32)
    color = data.get("color", "RGB").upper()
    if color == "BGR":
        crops = crops[..., ::-1]
    elif color == "GRAY" or channels == 1:
        crops = (crops @ np.array([0.299, 0.587, 0.114], np.float32))[..., None]
    x = crops * np.float32(data.get("scale", 1.0))
    if data.get("mean") is not None:
        x = x - np.asarray(data["mean"], np.float32)
    if data.get("std") is not None:
        x = x / np.asarray(data["std"], np.float32)
    return np.ascontiguousarray((x if nhwc else x.transpose(0, 3, 1, 2)).astype(np.float32))


# ------------------------------------------------------------------------------------------------- audio


def _mel_filters(sample_rate: int, n_fft: int, bins: int) -> np.ndarray:
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10 ** (np.asarray(m) / 2595.0) - 1.0)

    mels = np.linspace(hz_to_mel(20.0), hz_to_mel(sample_rate / 2), bins + 2)
    edges = mel_to_hz(mels) / sample_rate * n_fft
    k = np.arange(n_fft // 2 + 1)
    filters = np.zeros((bins, k.size), np.float64)
    for b in range(bins):
        lo, mid, hi = edges[b], edges[b + 1], edges[b + 2]
        up = (k - lo) / max(mid - lo, 1e-9)
        down = (hi - k) / max(hi - mid, 1e-9)
        filters[b] = np.clip(np.minimum(up, down), 0, None)
    return filters


def synthetic_utterance(rng: np.random.Generator, sample_rate: int, seconds: float) -> np.ndarray:
    """A speech-like signal: a voiced segment (harmonics of a gliding pitch shaped by two formants) between
    silence and noise bursts, with background noise."""
    n = int(sample_rate * seconds)
    t = np.arange(n) / sample_rate
    start, length = rng.uniform(0.05, 0.35) * seconds, rng.uniform(0.3, 0.6) * seconds
    f0 = rng.uniform(90, 250) * (1 + 0.15 * np.sin(2 * np.pi * rng.uniform(1, 4) * t))
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    formants = rng.uniform([300, 900], [900, 2500])
    voiced = np.zeros(n)
    for h in range(1, 30):
        freq = f0 * h
        gain = sum(np.exp(-(((freq - f) / 150.0) ** 2)) for f in formants) / h**0.5
        voiced += gain * np.sin(h * phase)
    envelope = np.clip((t - start) / 0.03, 0, 1) * np.clip((start + length - t) / 0.05, 0, 1)
    signal = voiced * envelope
    for _ in range(rng.integers(1, 3)):  # fricative-like bursts
        b0 = rng.uniform(0, seconds - 0.1)
        burst = (t > b0) & (t < b0 + rng.uniform(0.03, 0.1))
        signal += burst * rng.normal(0, 0.3, n)
    signal += rng.normal(0, rng.uniform(0.005, 0.05), n)
    return (signal / (np.abs(signal).max() + 1e-9)).astype(np.float64)


def slaney_mel_filters(sample_rate: int, n_fft: int, bins: int) -> np.ndarray:
    """librosa.filters.mel's defaults: the Slaney mel scale (linear below 1 kHz, logarithmic above) from 0 to
    Nyquist, triangles normalised to unit area (``norm="slaney"``); [bins, n_fft // 2 + 1]."""

    def hz_to_mel(f):
        f = np.asarray(f, np.float64)
        return np.where(f < 1000, f / (200 / 3), 15 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27))

    def mel_to_hz(m):
        return np.where(m < 15, m * (200 / 3), 1000 * np.exp((m - 15) * (np.log(6.4) / 27)))

    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sample_rate / 2), bins + 2))
    fft_f = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    ramps = mel_f[:, None] - fft_f[None, :]
    fdiff = np.diff(mel_f)
    weights = np.maximum(0, np.minimum(-ramps[:-2] / fdiff[:-1, None], ramps[2:] / fdiff[1:, None]))
    return weights * (2.0 / (mel_f[2:] - mel_f[:-2]))[:, None]


def mel_power(data: Mapping[str, Any], frames: int, bins: int, rng: np.random.Generator) -> np.ndarray:
    """librosa.feature.melspectrogram of an utterance (n_fft = the window, centred frames zero-padded, periodic Hann,
    power 2, Slaney filters) at ``"dbfs"`` RMS level: [frames, bins], not log (Resemblyzer's encoder input)."""
    sample_rate = int(data.get("sample_rate", 16000))
    hop = int(sample_rate * data.get("hop_ms", 10) / 1000)
    n_fft = int(sample_rate * data.get("window_ms", 25) / 1000)
    signal = synthetic_utterance(rng, sample_rate, (frames - 1) * hop / sample_rate)
    signal = signal * 10 ** (data.get("dbfs", -30) / 20) / np.sqrt(np.mean(signal**2))
    padded = np.pad(signal, n_fft // 2)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    segments = np.stack([padded[s : s + n_fft] for s in np.arange(frames) * hop]) * window
    power = np.abs(np.fft.rfft(segments, n_fft)) ** 2
    return power @ slaney_mel_filters(sample_rate, n_fft, bins).T


def logmel_array(data: Mapping[str, Any], shape: Sequence[int], count: int, seed: int) -> np.ndarray:
    """``count`` log-mel feature maps shaped like one sample of ``shape`` ([1, frames, bins]); with ``"log":
    false`` librosa's mel power instead (:func:`mel_power`)."""
    frames, bins = int(shape[-2]), int(shape[-1])
    if data.get("log", True) is False:
        rng = np.random.default_rng(seed)
        out = np.stack([mel_power(data, frames, bins, rng) for _ in range(count)])
        return out.reshape((count, *[int(d) for d in shape[1:]])).astype(np.float32)
    sample_rate = int(data.get("sample_rate", 16000))
    hop = int(sample_rate * data.get("hop_ms", 20) / 1000)
    window = int(sample_rate * data.get("window_ms", 30) / 1000)
    n_fft = 1 << (window - 1).bit_length()
    filters = _mel_filters(sample_rate, n_fft, bins)
    rng = np.random.default_rng(seed)
    out = np.empty((count, *[int(d) for d in shape[1:]]), np.float32)
    for i in range(count):
        signal = synthetic_utterance(
            rng, sample_rate, (frames - 1) * hop / sample_rate + window / sample_rate
        )
        starts = np.arange(frames) * hop
        segments = np.stack([signal[s : s + window] for s in starts]) * np.hanning(window)
        power = np.abs(np.fft.rfft(segments, n_fft)) ** 2
        logmel = np.log(power @ filters.T + 1e-6)
        logmel = (logmel - logmel.mean()) / (logmel.std() + 1e-6)
        out[i] = logmel.reshape(out.shape[1:]).astype(np.float32)
    return out


def synthetic_music(rng: np.random.Generator, sample_rate: int, seconds: float) -> np.ndarray:
    """A music-like signal in [-1, 1]: a sequence of notes and chords (equal-tempered pitches from A1 to C7, 3-12
    harmonics with a decaying spectrum, a fast attack and an exponential decay, some with vibrato), plus noise."""
    n = int(sample_rate * seconds)
    t = np.arange(n) / sample_rate
    signal = np.zeros(n)
    for _ in range(int(rng.integers(3, 9))):
        onset, length = rng.uniform(-0.2, 0.9) * seconds, rng.uniform(0.15, 0.8) * seconds
        local = t - onset
        envelope = np.clip(local / 0.01, 0, 1) * np.exp(-np.clip(local, 0, None) * rng.uniform(1.0, 6.0))
        envelope *= (local >= 0) & (local < length)
        for key in rng.integers(21, 97, int(rng.integers(1, 4))):  # MIDI keys: a note or a chord
            f0 = 440.0 * 2 ** ((key - 69) / 12)
            vibrato = 1 + (0.004 * np.sin(2 * np.pi * 5.5 * t) if rng.random() < 0.3 else 0)
            phase = 2 * np.pi * np.cumsum(f0 * vibrato) / sample_rate
            for h in range(1, int(rng.integers(3, 13))):
                if f0 * h < sample_rate / 2:
                    signal += (
                        envelope * rng.uniform(0.3, 1.0) / h**1.2 * np.sin(h * phase + rng.uniform(0, 6.3))
                    )
    signal += rng.normal(0, rng.uniform(0.002, 0.02), n)
    return signal / (np.abs(signal).max() + 1e-9) * rng.uniform(0.3, 0.95)


def waveform_array(data: Mapping[str, Any], shape: Sequence[int], count: int, seed: int) -> np.ndarray:
    """``count`` raw utterances (``"signal": "music"``: notes) shaped like one sample of ``shape`` (samples on
    its longest dim), zero mean and unit variance unless ``"normalize": false``."""
    dims = [int(d) for d in shape[1:]]
    samples, sample_rate = max(dims), int(data.get("sample_rate", 16000))
    music = data.get("signal", "speech") == "music"
    rng = np.random.default_rng(seed)
    out = np.empty((count, *dims), np.float32)
    # A chunk shorter than an utterance (a VAD's 512 samples) is a window of a half-second one.
    length = max(samples + 1, sample_rate // 2)
    for i in range(count):
        signal = (synthetic_music if music else synthetic_utterance)(rng, sample_rate, length / sample_rate)
        start = int(rng.integers(0, length - samples)) if length > samples + 1 else 0
        signal = signal[start : start + samples]
        if data.get("pcm16"):  # 16-bit PCM sample values as floats, peak at 10-90 % of full scale
            signal = np.round(signal / (np.abs(signal).max() + 1e-9) * 32767 * rng.uniform(0.1, 0.9))
        elif data.get("normalize", True):
            signal = (signal - signal.mean()) / (signal.std() + 1e-7)
        out[i] = signal.reshape(out.shape[1:])
    return out


# -------------------------------------------------------------------------------------------------- bytes


@functools.lru_cache(maxsize=1)
def real_files() -> tuple[Path, ...]:
    """Real files of many types, one file type (suffix) after another: this Python's standard library and
    ``/usr/share`` (sorted, files of 8 bytes or more; at most 40 per suffix)."""
    import sysconfig

    by_suffix: dict[str, list[Path]] = {}
    for root in (Path(sysconfig.get_paths()["stdlib"]), Path("/usr/share")):
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            group = by_suffix.setdefault(path.suffix.lower(), [])
            if len(group) < 40 and path.is_file() and not path.is_symlink() and path.stat().st_size >= 8:
                group.append(path)
    groups = [by_suffix[k] for k in sorted(by_suffix) if by_suffix[k]]
    return tuple(g[i] for i in range(40) for g in groups if i < len(g))


def file_tokens(content: bytes, beg: int, end: int, padding: int, block: int) -> np.ndarray:
    """Magika's features of a file's bytes: the first ``beg`` of its first ``block`` bytes (leading whitespace
    stripped) padded after, then the last ``end`` of its last ``block`` (trailing whitespace stripped) padded
    before, with the ``padding`` token."""
    head = list(content[:block].lstrip()[:beg])
    tail = list(content[-block:].rstrip()[-end:]) if end else []
    return np.asarray(head + [padding] * (beg - len(head)) + [padding] * (end - len(tail)) + tail, np.int64)


def bytes_array(data: Mapping[str, Any], spec: Mapping[str, Any], count: int, seed: int) -> np.ndarray:
    """``count`` token rows of real files (:func:`real_files`, a random file of each next type) for a ``bytes``
    input."""
    files = real_files()
    rng = np.random.default_rng(seed)
    start = int(rng.integers(len(files)))
    step = max(1, len(files) // (count * 3))
    beg, end = int(data.get("beg", 1024)), int(data.get("end", 1024))
    rows = []
    for i in range(count):
        path = files[(start + i * step) % len(files)]
        with open(path, "rb") as f:
            head = f.read(int(data.get("block", 4096)))
            size = f.seek(0, 2)
            f.seek(max(0, size - int(data.get("block", 4096))))
            tail = f.read()
        content = head if size <= len(head) else head + tail  # the last block is at the end either way
        rows.append(
            file_tokens(content, beg, end, int(data.get("padding", 256)), int(data.get("block", 4096)))
        )
    shape = [int(d) for d in spec["shape"][1:]]
    return np.stack(rows).reshape((count, *shape)).astype(spec["dtype"])


def state_array(shape: Sequence[int], count: int, seed: int) -> np.ndarray:
    """``count`` recurrent states shaped like one sample of ``shape``: tanh of N(0, 0.5), the range of an LSTM's
    h (a streaming model's state input, fed back from its previous call). A state whose first dim is not 1
    (Silero VAD's [2, batch, 128]) is stored with its full shape per sample."""
    rng = np.random.default_rng(seed)
    dims = [int(d) for d in (shape[1:] if int(shape[0]) == 1 else shape)]
    return np.tanh(rng.normal(0.0, 0.5, (count, *dims))).astype(np.float32)


# ------------------------------------------------------------------------------------------------ tokens


@functools.lru_cache(maxsize=4)
def load_vocab(path: str) -> dict[str, int]:
    """A BERT ``vocab.txt``: one token a line, its id the line number."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return {token: i for i, token in enumerate(lines)}


def _basic_tokens(text: str) -> list[str]:
    """BERT's uncased basic tokenizer: lower case, accents stripped, split on spaces and punctuation."""
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(c for c in text if unicodedata.category(c) != "Mn" and c.isprintable())
    out = []
    for word in text.split():
        out += [t for t in re.split(r"([!-/:-@\[-`{-~])", word) if t]
    return [piece for t in out for piece in _split_unicode_punctuation(t)]


def _split_unicode_punctuation(token: str) -> list[str]:
    if len(token) == 1 or not any(unicodedata.category(c).startswith("P") for c in token):
        return [token]
    parts, current = [], ""
    for c in token:
        if unicodedata.category(c).startswith("P"):
            parts += [current, c] if current else [c]
            current = ""
        else:
            current += c
    return parts + ([current] if current else [])


def wordpiece(text: str, vocab: Mapping[str, int], max_chars: int = 100) -> list[int]:
    """The ids of ``text`` by BERT's greedy longest-match-first WordPiece (``##`` continuations, ``[UNK]``)."""
    ids = []
    for word in _basic_tokens(text):
        pieces, start = [], 0
        while start < len(word) and len(word) <= max_chars:
            end = len(word)
            while end > start:
                piece = ("##" if start else "") + word[start:end]
                if piece in vocab:
                    break
                end -= 1
            if end == start:
                pieces = None
                break
            pieces.append(vocab[piece])
            start = end
        ids += pieces if pieces else [vocab["[UNK]"]]
    return ids


@functools.lru_cache(maxsize=1)
def text_sentences() -> tuple[str, ...]:
    """Real English sentences: this repository's README and docs, markup stripped, 4 words or more."""
    root = HERE.parents[1]
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    sentences = []
    for f in files:
        if not f.exists():
            continue
        text = re.sub(r"`+|\*+|\|+|#+|-{3,}|\[|\]\([^)]*\)", " ", f.read_text(encoding="utf-8"))
        for s in re.split(r"(?<=[.!?])\s+|\n\s*\n", text):
            s = " ".join(s.split())
            if len(s.split()) >= 4:
                sentences.append(s)
    return tuple(sentences)


def _text_bodies(vocab_path: str, count: int, length: int, rng: np.random.Generator) -> list[list[int]]:
    """``count`` token bodies of real text: consecutive sentences from a random place, up to ``length`` ids."""
    vocab = load_vocab(vocab_path)
    sentences = text_sentences()
    bodies = []
    for _ in range(count):
        target = int(rng.integers(max(1, length // 8), length + 1))
        k, body = int(rng.integers(len(sentences))), []
        while len(body) < target:
            body += wordpiece(sentences[k % len(sentences)], vocab)
            k += 1
        bodies.append(body[:target])
    return bodies


def token_arrays(
    data: Mapping[str, Any], inputs: Sequence[Mapping[str, Any]], count: int, seed: int
) -> dict[str, np.ndarray]:
    roles = data.get("roles", {})
    vocab = int(data.get("vocab_size", 1000))
    rng = np.random.default_rng(seed)
    length = int(inputs[0]["shape"][-1])
    ids = np.zeros((count, length), np.int64)
    mask = np.zeros((count, length), np.int64)
    texts = _text_bodies(data["vocab"], count, length - 2, rng) if data.get("vocab") else None
    for i in range(count):
        if texts is not None:
            body = np.asarray(texts[i], np.int64)
            n = len(body) + 2
        else:
            n = int(rng.integers(max(3, length // 4), length + 1))
            # BERT vocabularies: words start at 1000
            low = 1000 if vocab > 2000 else 103 if vocab > 206 else 1
            body = low + (rng.zipf(1.3, n - 2) - 1) % (vocab - low)  # word-frequency-like ids
        ids[i, :n] = np.concatenate([[min(101, vocab - 1)], body, [min(102, vocab - 1)]])
        mask[i, :n] = 1
    out = {}
    for spec in inputs:
        role = roles.get(spec["name"], "ids")
        positions = np.broadcast_to(np.arange(length, dtype=np.int64), ids.shape)
        arr = {"ids": ids, "mask": mask, "type_ids": np.zeros_like(ids), "positions": positions}[role]
        out[spec["name"]] = arr.reshape((count, *[int(d) for d in spec["shape"][1:]])).astype(spec["dtype"])
    return out


# ------------------------------------------------------------------------------------------------- files


def make_arrays(
    entry: Mapping[str, Any], count: int, seed: int, photos: Sequence[np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """The inputs of ``count`` samples for a manifest ``entry``, keyed by input name."""
    data = entry["data"]
    kind = data["type"]
    if kind == "tokens":
        return token_arrays(data, entry["inputs"], count, seed)
    out = {}
    for k, spec in enumerate(entry["inputs"]):
        if kind == "image":
            out[spec["name"]] = image_array(data, spec["shape"], count, seed + k, photos or cached_photos())
        elif kind == "logmel":
            out[spec["name"]] = logmel_array(data, spec["shape"], count, seed + k)
        elif kind == "waveform" and spec["name"] in data.get("states", ()):
            out[spec["name"]] = state_array(spec["shape"], count, seed + k)
        elif kind == "waveform":
            out[spec["name"]] = waveform_array(data, spec["shape"], count, seed + k)
        elif kind == "bytes":
            out[spec["name"]] = bytes_array(data, spec, count, seed + k)
        else:
            raise ValueError(f"{entry.get('name')}: unknown data type {kind!r}")
    return out


def stored_arrays(entry: Mapping[str, Any], source: Path, calib: int, evaluation: int) -> tuple[dict, dict]:
    """An ``"arrays"`` entry's calibration and evaluation samples: the first ``calib`` and the next ``evaluation``
    rows of each input in ``source / data["file"]`` (a pipeline's real intermediate features, written by the
    builder script beside the model)."""
    path = Path(source) / entry["data"]["file"]
    with np.load(path) as stored:
        arrays = {spec["name"]: stored[spec["name"]] for spec in entry["inputs"]}
    have = min(len(a) for a in arrays.values())
    if have < calib + evaluation:
        raise ValueError(f"{entry.get('name')}: {path} holds {have} samples, {calib + evaluation} asked")
    return (
        {k: v[:calib] for k, v in arrays.items()},
        {k: v[calib : calib + evaluation] for k, v in arrays.items()},
    )


def write_data(
    entry: Mapping[str, Any],
    folder: Path,
    *,
    calib: int = 16,
    evaluation: int = 8,
    photos: Path | None = None,
    source: Path | None = None,
) -> tuple[Path, Path]:
    """Write ``folder/<name>.calib.npz`` and ``folder/<name>.eval.npz`` (disjoint samples); return both.
    ``source``: the manifest's folder (an ``"arrays"`` entry's file is there)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if entry["data"]["type"] == "arrays":
        if source is None:
            raise ValueError(f"{entry.get('name')}: an 'arrays' entry needs the manifest's folder")
        paths = folder / f"{entry['name']}.calib.npz", folder / f"{entry['name']}.eval.npz"
        for path, arrays in zip(paths, stored_arrays(entry, source, calib, evaluation), strict=True):
            np.savez(path, **arrays)
        return paths
    images = cached_photos(photos) if entry["data"]["type"] == "image" else None
    if images is not None and photos is not None and len(images) >= calib + evaluation:
        calib_arrays = make_arrays(entry, calib, 1, images[:calib])
        eval_arrays = make_arrays(entry, evaluation, 2, images[calib : calib + evaluation])
    else:
        calib_arrays = make_arrays(entry, calib, 1, images)
        eval_arrays = make_arrays(entry, evaluation, 2, images)
    paths = folder / f"{entry['name']}.calib.npz", folder / f"{entry['name']}.eval.npz"
    np.savez(paths[0], **calib_arrays)
    np.savez(paths[1], **eval_arrays)
    return paths
