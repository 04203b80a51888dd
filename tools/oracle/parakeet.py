#!/usr/bin/env python3
"""Parakeet reference oracle: random-weight Parakeet models and the Hugging Face outputs on them.

README
======
hark cannot download trained Parakeet weights, so its Parakeet code is proven against Hugging Face
`transformers` on three small random-weight models with the real structure (8x depthwise-striding
conv subsampling, Conformer blocks with relative-position attention and a kernel-9 conv module,
the real heads and decoding) and everything else shrunk (d_model 64, 2 blocks, 4 heads, ffn 256,
32 subsampling channels, prediction network 48 x 2 LSTM layers, 128-token vocabulary):

  tiny-random-ctc    like nvidia/parakeet-ctc-1.1b   (ParakeetForCTC, 80 mels, biases, x sqrt(d))
  tiny-random-rnnt   like nvidia/parakeet-rnnt-1.1b  (ParakeetForRNNT, 80 mels, biases,
                                                      max_symbols_per_step 3 so the guard fires)
  tiny-random-tdt    like nvidia/parakeet-tdt-0.6b-v3 (ParakeetForTDT, 128 mels, no biases,
                                                      durations [0,1,2,3,4])

Each model folder holds what `save_pretrained` writes (config.json, generation_config.json,
model.safetensors in F32; the processor's tokenizer and feature-extractor files) plus
reference.safetensors and reference.json (see REFERENCE_NOTES below and docs/parakeet.md). The
tokenizer is a SentencePiece-style BPE (pieces marked with U+2581, Metaspace decoding) trained here,
deterministically, on a few sentences, with the special tokens laid out as in the real checkpoints.

Weights are seeded random, shaped so that activations stay O(1) and greedy decoding emits varied
tokens; the blank logit gets an offset so that about half of the decisions (CTC: two thirds) are
blank. The seed is the first whose every greedy decision (tokens; TDT durations too) has a top-2
logit gap of at least --gap-target (2e-3), so float32 round-off elsewhere cannot flip a token.

Everything is computed in float32 on the CPU from the model re-loaded from its files. The oracle also
carries its own float64 numpy implementation of docs/parakeet.md (features, encoder, decoders) and
records how far transformers is from it (reference.json "spec_check"): if the document is wrong,
this says where.

transformers' ParakeetFeatureExtractor needs librosa (only for `librosa.filters.mel(...,
norm="slaney")`) and, once librosa is importable, transformers.audio_utils imports soxr. Neither is
on the GPU machine, so this script writes stand-in packages `librosa` (filters.mel: librosa's slaney
filterbank, bit-exact, in numpy) and `soxr` (no resampling) into a temporary folder and puts it
first on sys.path before importing transformers; a real librosa is used if one is installed.

Run it on the GPU machine (Python 3.12, torch 2.11, transformers 5.17; it computes on the CPU), from
the repository root, writing into the folder the run tool provides:

    PYTHONUNBUFFERED=1 python3 tools/oracle/parakeet.py "$OUT"

It writes $OUT/tiny-random-{ctc,rnnt,tdt}/, $OUT/log.txt (ends with a JSON summary) and
$OUT/transformers-parakeet-src.tar.gz (the library sources whose behaviour was recorded, for
reading). Unpack the results here with

    cp -r <fetched>/tiny-random-* tests/data/parakeet/

Without an argument it writes into tests/data/parakeet/. Checks that need only numpy:

    python3 tools/oracle/parakeet.py --check      # stand-in librosa filterbank vs librosa's values
    python3 tools/oracle/parakeet.py --selftest   # tokenizer trainer, numpy spec implementation

Inputs: tests/data/audio/{jfk,beckett,librivox-0870}.wav (16 kHz mono s16) and
tests/data/tokenizers/whisper/mel_filters.npz (librosa's filterbank for n_fft 400, for --check).
"""

import argparse
import json
import math
import os
import platform
import shutil
import struct
import sys
import tarfile
import tempfile
import time
import traceback
import wave
from collections import Counter

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AUDIO_DIR = os.path.join(REPO, "tests", "data", "audio")
WHISPER_MEL_NPZ = os.path.join(REPO, "tests", "data", "tokenizers", "whisper", "mel_filters.npz")
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "parakeet")

CLIPS = ("jfk", "beckett", "librivox-0870")
SAMPLE_RATE = 16000

# The shrunk structure shared by all three models.
TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=256,
    subsampling_conv_channels=32,
    decoder_hidden_size=48,
    num_decoder_layers=2,
    vocab_size=128,  # including the blank
)

MODELS = {
    "tiny-random-ctc": dict(
        kind="ctc",
        like="nvidia/parakeet-ctc-1.1b",
        num_mel_bins=80,
        bias=True,
        scale_input=True,
        blank_fraction=0.65,
    ),
    "tiny-random-rnnt": dict(
        kind="rnnt",
        like="nvidia/parakeet-rnnt-1.1b",
        num_mel_bins=80,
        bias=True,
        scale_input=False,
        max_symbols_per_step=3,  # real checkpoints: 10; 3 makes the guard fire on these clips
        blank_fraction=0.5,
    ),
    "tiny-random-tdt": dict(
        kind="tdt",
        like="nvidia/parakeet-tdt-0.6b-v3",
        num_mel_bins=128,
        bias=False,
        scale_input=False,
        max_symbols_per_step=10,
        durations=[0, 1, 2, 3, 4],
        blank_fraction=0.5,
    ),
}

# Special tokens at the start of the vocabulary (inside the SentencePiece model) and the one the
# HF converter appends at id V-1, per model kind (convert_nemo_to_hf.py write_processor): CTC
# appends <pad>, which is also the blank; TDT keeps the model's own <pad> (id 2 in v3) and appends
# <blank>; RNN-T appends <blank> and uses it as the tokenizer's pad token.
TOKEN_LAYOUT = {
    "ctc": dict(head=["<unk>"], tail="<pad>", tokenizer_pad="<pad>", config_pad="tail"),
    "rnnt": dict(head=["<unk>"], tail="<blank>", tokenizer_pad="<blank>", config_pad=0),
    "tdt": dict(
        head=["<unk>", "<|nospeech|>", "<pad>", "<|endoftext|>", "<|en|>", "<|de|>"],
        tail="<blank>",
        tokenizer_pad="<pad>",
        config_pad=2,
    ),
}

# Text the tokenizer's BPE merges are learnt from: the transcripts of jfk.wav and
# librivox-0870.wav and a few sentences with digits and the punctuation TDT timestamps treat
# specially.
CORPUS = [
    "And so, my fellow Americans: ask not what your country can do for you, ask what you can do for "
    "your country.",
    "and mister john dashwood had then leisure to consider how much there might be prudently in his "
    "power to do for them",
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs!",
    "Is it true? Yes - it's 100% fine, isn't it? Well: maybe, maybe not.",
    "Sie sagte, dass das Wetter heute schoen ist, und wir gingen in den Park.",
    "We choose to go to the moon in this decade and do the other things, not because they are easy.",
]

LOG_PATH = None  # <out>/log.txt, appended line by line so that a killed run still leaves it
HF_MESSAGES = []


def log(*args, quiet=False):
    line = " ".join(str(a) for a in args)
    if not quiet:
        print(line, flush=True)
    if LOG_PATH:
        with open(LOG_PATH, "a", encoding="utf-8") as f:
            f.write(line + "\n")


# ----------------------------------------------------------------------------------------------
# The slaney filterbank: librosa.filters.mel (librosa 0.10/0.11, htk=False) in numpy. This text is
# both exec'd here and written out as the stand-in package's librosa/filters.py.
# ----------------------------------------------------------------------------------------------

SLANEY_MEL_SOURCE = '''"""Stand-in for librosa.filters.mel, written by hark's tools/oracle/parakeet.py.

librosa's slaney mel filterbank (htk=False), operation for operation as librosa 0.10/0.11 computes
it: float64 throughout, each row rounded into the float32 output, then the slaney area
normalisation multiplied in float64 and rounded again.
"""
import numpy as np


def hz_to_mel(frequencies, *, htk=False):
    if htk:
        raise NotImplementedError("only the slaney mel scale is provided")
    frequencies = np.asanyarray(frequencies)
    f_min = 0.0
    f_sp = 200.0 / 3
    mels = (frequencies - f_min) / f_sp
    min_log_hz = 1000.0
    min_log_mel = (min_log_hz - f_min) / f_sp
    logstep = np.log(6.4) / 27.0
    if frequencies.ndim:
        log_t = frequencies >= min_log_hz
        mels[log_t] = min_log_mel + np.log(frequencies[log_t] / min_log_hz) / logstep
    elif frequencies >= min_log_hz:
        mels = min_log_mel + np.log(frequencies / min_log_hz) / logstep
    return mels


def mel_to_hz(mels, *, htk=False):
    if htk:
        raise NotImplementedError("only the slaney mel scale is provided")
    mels = np.asanyarray(mels)
    f_min = 0.0
    f_sp = 200.0 / 3
    freqs = f_min + f_sp * mels
    min_log_hz = 1000.0
    min_log_mel = (min_log_hz - f_min) / f_sp
    logstep = np.log(6.4) / 27.0
    if mels.ndim:
        log_t = mels >= min_log_mel
        freqs[log_t] = min_log_hz * np.exp(logstep * (mels[log_t] - min_log_mel))
    elif mels >= min_log_mel:
        freqs = min_log_hz * np.exp(logstep * (mels - min_log_mel))
    return freqs


def mel_frequencies(n_mels=128, *, fmin=0.0, fmax=11025.0, htk=False):
    min_mel = hz_to_mel(fmin, htk=htk)
    max_mel = hz_to_mel(fmax, htk=htk)
    mels = np.linspace(min_mel, max_mel, n_mels)
    return mel_to_hz(mels, htk=htk)


def fft_frequencies(*, sr=22050, n_fft=2048):
    return np.fft.rfftfreq(n=n_fft, d=1.0 / sr)


def mel(*, sr, n_fft, n_mels=128, fmin=0.0, fmax=None, htk=False, norm="slaney", dtype=np.float32):
    if fmax is None:
        fmax = float(sr) / 2
    if norm != "slaney":
        raise NotImplementedError("only norm='slaney' is provided")
    n_mels = int(n_mels)
    weights = np.zeros((n_mels, int(1 + n_fft // 2)), dtype=dtype)
    fftfreqs = fft_frequencies(sr=sr, n_fft=n_fft)
    mel_f = mel_frequencies(n_mels + 2, fmin=fmin, fmax=fmax, htk=htk)
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights
'''

# Hand-computed values of librosa.filters.mel(sr=16000, n_fft=512, n_mels, fmin=0, fmax=8000,
# norm="slaney") as (n_mels, row, fft bin, float32 value): computed with Python floats straight from
# the formulas (math.log/exp, no numpy), the first, peak and last non-zero bin of a few rows, plus
# some zeros.
MEL_TABLE = [
    (80, 0, 0, 0.0),
    (80, 0, 1, 0.022534560412168503),
    (80, 0, 2, 0.008637710474431515),
    (80, 0, 3, 0.0),
    (80, 1, 2, 0.018215704709291458),
    (80, 1, 3, 0.012956565245985985),
    (80, 2, 3, 0.013896849937736988),
    (80, 2, 4, 0.01727542094886303),
    (80, 10, 12, 0.0018805701984092593),
    (80, 10, 13, 0.02441513165831566),
    (80, 10, 14, 0.006757139693945646),
    (80, 40, 54, 0.007159441243857145),
    (80, 40, 55, 0.014444176107645035),
    (80, 40, 57, 0.0017512018093839288),
    (80, 40, 100, 0.0),
    (80, 78, 229, 0.00033777268254198134),
    (80, 78, 237, 0.003485006745904684),
    (80, 78, 246, 0.00013439032773021609),
    (80, 79, 238, 0.0003375961387064308),
    (80, 79, 246, 0.0032521483954042196),
    (80, 79, 255, 0.0003505930071696639),
    (80, 79, 256, 0.0),
    (128, 0, 0, 0.0),
    (128, 0, 1, 0.02837754227221012),
    (128, 0, 2, 0.0),
    (128, 1, 1, 0.014389008283615112),
    (128, 1, 2, 0.013988534919917583),
    (128, 2, 2, 0.028778016567230225),
    (128, 10, 8, 0.029578963294625282),
    (128, 64, 54, 0.011216705664992332),
    (128, 64, 55, 0.018818283453583717),
    (128, 64, 56, 0.0006491445237770677),
    (128, 126, 239, 0.0008100776467472315),
    (128, 126, 244, 0.0053904857486486435),
    (128, 126, 249, 0.0008227634243667126),
    (128, 127, 244, 4.7641340643167496e-05),
    (128, 127, 250, 0.005223188549280167),
    (128, 127, 255, 0.0008705313666723669),
    (128, 127, 256, 0.0),
]


def slaney_module():
    """The filterbank functions of SLANEY_MEL_SOURCE as a namespace."""
    namespace = {}
    exec(compile(SLANEY_MEL_SOURCE, "<slaney_mel>", "exec"), namespace)
    return namespace


def float32_ulps(a, b):
    """Distance of two float32 values in units in the last place (same sign assumed)."""
    ia = struct.unpack("<i", struct.pack("<f", a))[0]
    ib = struct.unpack("<i", struct.pack("<f", b))[0]
    return abs(ia - ib)


def check_filterbank(mel_fn):
    """Compares a librosa.filters.mel-like function with MEL_TABLE and with the filterbanks librosa
    wrote for openai/whisper (n_fft 400, 80 and 128 mels). Returns (ok, report)."""
    import numpy as np

    report = {"table": {}, "whisper_npz": {}}
    ok = True
    banks = {}
    worst = 0
    for n_mels, row, fft_bin, value in MEL_TABLE:
        if n_mels not in banks:
            banks[n_mels] = mel_fn(sr=16000, n_fft=512, n_mels=n_mels, fmin=0.0, fmax=8000.0, norm="slaney")
            bank = banks[n_mels]
            if bank.shape != (n_mels, 257) or bank.dtype != np.float32:
                ok = False
                report["table"][f"shape_{n_mels}"] = f"{bank.shape} {bank.dtype}"
        got = float(banks[n_mels][row, fft_bin])
        ulps = float32_ulps(got, value) if (got != 0.0 or value != 0.0) else 0
        worst = max(worst, ulps)
        if ulps > 1:
            ok = False
            report["table"][f"{n_mels}/{row}/{fft_bin}"] = {"expected": value, "got": got, "ulps": ulps}
    report["table"]["entries"] = len(MEL_TABLE)
    report["table"]["max_ulps"] = worst
    for n_mels, bank in banks.items():
        # Slaney normalisation: every triangle has area ~ 2 / (its width in Hz) * width / 2 = 1/Hz
        # scale; here only a coarse sanity check that no row is empty.
        report["table"][f"empty_rows_{n_mels}"] = int((bank.max(axis=1) <= 0).sum())
        if report["table"][f"empty_rows_{n_mels}"]:
            ok = False
    if os.path.exists(WHISPER_MEL_NPZ):
        npz = np.load(WHISPER_MEL_NPZ)
        for n_mels in (80, 128):
            reference = npz[f"mel_{n_mels}"]
            mine = mel_fn(sr=16000, n_fft=400, n_mels=n_mels, fmin=0.0, fmax=8000.0, norm="slaney")
            differing = int((mine != reference).sum())
            report["whisper_npz"][str(n_mels)] = {
                "differing_values": differing,
                "max_abs_diff": float(np.abs(mine.astype(np.float64) - reference).max()),
            }
            if differing:
                ok = False
    else:
        report["whisper_npz"] = "missing: " + WHISPER_MEL_NPZ
    return ok, report


# ----------------------------------------------------------------------------------------------
# Stand-in librosa and soxr packages (written to disk, with dist-info metadata, because
# transformers checks importlib.metadata.version("librosa") before it imports it).
# ----------------------------------------------------------------------------------------------


def package_available(name):
    import importlib.metadata
    import importlib.util

    try:
        if importlib.util.find_spec(name) is None:
            return False
        importlib.metadata.version(name)
        return True
    except Exception:
        return False


def install_stand_in_packages(root):
    """Writes `librosa` (filters.mel only) and `soxr` (nothing) under root, with dist-info folders,
    and puts root first on sys.path. Returns what was installed."""
    import importlib

    installed = []
    packages = {
        "librosa": (
            "0.11.0",
            {
                "__init__.py": '"""Stand-in for librosa written by hark\'s tools/oracle/parakeet.py: only '
                'filters.mel (slaney) exists."""\nfrom . import filters\n\n__version__ = "0.11.0"\n',
                "filters.py": SLANEY_MEL_SOURCE,
            },
        ),
        "soxr": (
            "0.5.0",
            {
                "__init__.py": '"""Stand-in for soxr written by hark\'s tools/oracle/parakeet.py: the oracle '
                'never resamples."""\n__version__ = "0.5.0"\n\n\ndef resample(*args, **kwargs):\n'
                '    raise NotImplementedError("stand-in soxr: resampling is not provided")\n',
            },
        ),
    }
    for name, (version, files) in packages.items():
        if package_available(name):
            continue
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        for filename, text in files.items():
            with open(os.path.join(folder, filename), "w", encoding="utf-8") as f:
                f.write(text)
        dist = os.path.join(root, f"{name}-{version}.dist-info")
        os.makedirs(dist, exist_ok=True)
        with open(os.path.join(dist, "METADATA"), "w", encoding="utf-8") as f:
            f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        with open(os.path.join(dist, "RECORD"), "w", encoding="utf-8") as f:
            f.write("")
        installed.append(f"{name} {version} (stand-in)")
    if installed:
        sys.path.insert(0, root)
        importlib.invalidate_caches()
    return installed


# ----------------------------------------------------------------------------------------------
# Tokenizer: a deterministic SentencePiece-style BPE learnt from CORPUS (pure Python).
# ----------------------------------------------------------------------------------------------

WORD_START = "\u2581"


def train_bpe(lines, n_pieces):
    """Learns BPE merges over words marked with U+2581 (Metaspace, prepend always) until the merged
    pieces plus the alphabet number n_pieces. Ties go to the lexicographically smallest pair.
    Returns (merges in order, merged pieces in order, alphabet by falling frequency)."""
    words = Counter()
    for line in lines:
        for word in line.split():
            words[WORD_START + word] += 1
    chars = Counter()
    for word, count in words.items():
        for ch in word:
            chars[ch] += count
    alphabet = [ch for ch, _ in sorted(chars.items(), key=lambda item: (-item[1], item[0]))]
    segmented = {word: list(word) for word in words}
    merges, pieces, known = [], [], set(alphabet)
    while len(pieces) + len(alphabet) < n_pieces:
        pairs = Counter()
        for word, count in words.items():
            parts = segmented[word]
            for a, b in zip(parts, parts[1:]):
                pairs[(a, b)] += count
        if not pairs:
            raise ValueError("corpus too small for the requested vocabulary")
        best = min(pairs.items(), key=lambda item: (-item[1], item[0]))[0]
        merged = best[0] + best[1]
        merges.append(best)
        if merged not in known:
            known.add(merged)
            pieces.append(merged)
        for word, parts in segmented.items():
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == best[0] and parts[i + 1] == best[1]:
                    out.append(merged)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            segmented[word] = out
    return merges, pieces, alphabet


def token_layout(kind):
    """id -> piece for the whole vocabulary of a model kind, the merges, the special ids, the blank
    and the two pad ids (tokenizer's and config's)."""
    layout = TOKEN_LAYOUT[kind]
    n_total = TINY["vocab_size"]
    head = list(layout["head"])
    n_pieces = n_total - len(head) - 1
    merges, pieces, alphabet = train_bpe(CORPUS, n_pieces)
    vocab = head + pieces + alphabet
    if len(vocab) != n_total - 1 or len(set(vocab)) != len(vocab):
        raise ValueError(f"bad vocabulary: {len(vocab)} pieces, {len(set(vocab))} unique")
    ids = vocab + [layout["tail"]]
    blank = n_total - 1
    tokenizer_pad = ids.index(layout["tokenizer_pad"])
    config_pad = blank if layout["config_pad"] == "tail" else layout["config_pad"]
    return dict(
        pieces=ids,
        bpe_vocab={piece: i for i, piece in enumerate(vocab)},
        merges=merges,
        special_ids=sorted(set(range(len(head))) | {blank}),
        head=head,
        tail=layout["tail"],
        blank=blank,
        tokenizer_pad=tokenizer_pad,
        config_pad=config_pad,
        vocab_size=n_total,
    )


def spec_text(ids, layout):
    """Text of emitted ids: non-special pieces joined, U+2581 -> space, leading space dropped."""
    special = set(layout["special_ids"])
    text = "".join(layout["pieces"][i] for i in ids if i not in special).replace(WORD_START, " ")
    return text[1:] if text.startswith(" ") else text


# ----------------------------------------------------------------------------------------------
# docs/parakeet.md in float64 numpy: the independent reference the oracle compares transformers to.
# ----------------------------------------------------------------------------------------------


def spec_features(samples, mel_filters, hop=160, win=400, n_fft=512, preemphasis=0.97):
    """Normalised log-mel features [L, M] of one utterance (float32 samples), valid frames only."""
    import numpy as np

    x = samples.astype(np.float64)
    y = x.copy()
    y[1:] = x[1:] - preemphasis * x[:-1]
    n = len(y)
    n_frames = 1 + n // hop
    padded = np.concatenate([np.zeros(n_fft // 2), y, np.zeros(n_fft // 2)])
    i = np.arange(win)
    window = np.zeros(n_fft)
    left = (n_fft - win) // 2
    window[left : left + win] = 0.5 - 0.5 * np.cos(2.0 * np.pi * i / (win - 1))
    starts = np.arange(n_frames) * hop
    frames = padded[starts[:, None] + np.arange(n_fft)[None, :]] * window[None, :]
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # [frames, 257]
    mel = power @ mel_filters.astype(np.float64).T  # [frames, M]
    logmel = np.log(mel + 2.0**-24)
    valid = n // hop
    logmel = logmel[:valid]
    mean = logmel.mean(axis=0)
    std = np.sqrt(((logmel - mean) ** 2).sum(axis=0) / (valid - 1))
    return (logmel - mean) / (std + 1e-5)


def conv_out(length, kernel=3, stride=2, pad=1):
    return (length + 2 * pad - kernel) // stride + 1


def spec_conv2d(x, weight, bias, stride, pad, groups):
    """PyTorch Conv2d (cross-correlation) of one image x [Cin, H, W]."""
    import numpy as np

    c_in, height, width = x.shape
    c_out, c_in_group, kh, kw = weight.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    ho = (height + 2 * pad - kh) // stride + 1
    wo = (width + 2 * pad - kw) // stride + 1
    out = np.zeros((c_out, ho, wo))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i : i + stride * (ho - 1) + 1 : stride, j : j + stride * (wo - 1) + 1 : stride]
            if groups == 1:
                out += np.einsum("oc,chw->ohw", weight[:, :, i, j], patch)
            elif groups == c_in == c_out and c_in_group == 1:
                out += weight[:, 0, i, j][:, None, None] * patch
            else:
                raise ValueError("only plain and depthwise convolutions are used")
    return out + bias[:, None, None]


def layer_norm(x, weight, bias, eps=1e-5):
    import numpy as np

    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def sigmoid(x):
    import numpy as np

    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def linear(x, weights, name, bias_required=False):
    """x @ W^T (+ b if the checkpoint has it)."""
    y = x @ weights[name + ".weight"].T
    if name + ".bias" in weights:
        y = y + weights[name + ".bias"]
    elif bias_required:
        raise KeyError(name + ".bias")
    return y


def relative_positions(length, d):
    """pe(r) for r = -(T-1) .. T-1 as rows [2T-1, d], row index r + T - 1."""
    import numpy as np

    r = np.arange(-(length - 1), length, dtype=np.float64)
    w = 1.0 / 10000.0 ** (np.arange(0, d, 2, dtype=np.float64) / d)
    angles = r[:, None] * w[None, :]
    pe = np.zeros((2 * length - 1, d))
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles)
    return pe


def spec_encoder(weights, cfg, features):
    """Encoder output [T, d] of one utterance's valid feature frames [L, M]. `weights` maps
    encoder-relative names ("subsampling.layers.0.weight", "layers.0.norm_out.bias", ...) to float64
    arrays; cfg has hidden_size, num_attention_heads, num_hidden_layers, scale_input,
    subsampling_factor, conv_kernel_size."""
    import numpy as np

    d = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    dh = d // heads
    stages = int(round(math.log2(cfg["subsampling_factor"])))
    x = features[None, :, :]  # [1, L, M]: one channel, time x frequency
    x = spec_conv2d(x, weights["subsampling.layers.0.weight"], weights["subsampling.layers.0.bias"], 2, 1, 1)
    x = np.maximum(x, 0.0)
    channels = x.shape[0]
    for stage in range(1, stages):
        dw, pw = 2 + 3 * (stage - 1), 3 + 3 * (stage - 1)
        x = spec_conv2d(x, weights[f"subsampling.layers.{dw}.weight"], weights[f"subsampling.layers.{dw}.bias"],
                        2, 1, channels)
        x = spec_conv2d(x, weights[f"subsampling.layers.{pw}.weight"], weights[f"subsampling.layers.{pw}.bias"],
                        1, 0, 1)
        x = np.maximum(x, 0.0)
    _, length, freq = x.shape
    x = x.transpose(1, 0, 2).reshape(length, channels * freq)  # channel-major per time step
    x = linear(x, weights, "subsampling.linear", bias_required=True)
    if cfg["scale_input"]:
        x = x * math.sqrt(d)
    pe = relative_positions(length, d)
    # gather index: query i, key j -> row (i - j) + T - 1 of pe
    index = np.arange(length)[:, None] - np.arange(length)[None, :] + length - 1
    kernel = cfg["conv_kernel_size"]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"layers.{layer}."

        def ff(z, name):
            return linear(silu(linear(z, weights, p + name + ".linear1")), weights, p + name + ".linear2")

        x = x + 0.5 * ff(layer_norm(x, weights[p + "norm_feed_forward1.weight"],
                                    weights[p + "norm_feed_forward1.bias"]), "feed_forward1")
        # relative-position multi-head attention
        z = layer_norm(x, weights[p + "norm_self_att.weight"], weights[p + "norm_self_att.bias"])
        q = linear(z, weights, p + "self_attn.q_proj").reshape(length, heads, dh)
        k = linear(z, weights, p + "self_attn.k_proj").reshape(length, heads, dh)
        v = linear(z, weights, p + "self_attn.v_proj").reshape(length, heads, dh)
        pos = (pe @ weights[p + "self_attn.relative_k_proj.weight"].T).reshape(2 * length - 1, heads, dh)
        u = weights[p + "self_attn.bias_u"]
        vb = weights[p + "self_attn.bias_v"]
        content = np.einsum("ihd,jhd->hij", q + u[None], k)
        by_position = np.einsum("ihd,rhd->hir", q + vb[None], pos)  # [h, T, 2T-1]
        position = np.take_along_axis(by_position, np.broadcast_to(index[None], (heads, length, length)), axis=2)
        scores = (content + position) / math.sqrt(dh)
        scores = scores - scores.max(axis=-1, keepdims=True)
        attn = np.exp(scores)
        attn = attn / attn.sum(axis=-1, keepdims=True)
        out = np.einsum("hij,jhd->ihd", attn, v).reshape(length, d)
        x = x + linear(out, weights, p + "self_attn.o_proj")
        # convolution module
        z = layer_norm(x, weights[p + "norm_conv.weight"], weights[p + "norm_conv.bias"])
        y = z @ weights[p + "conv.pointwise_conv1.weight"][:, :, 0].T
        if p + "conv.pointwise_conv1.bias" in weights:
            y = y + weights[p + "conv.pointwise_conv1.bias"]
        y = y[:, :d] * sigmoid(y[:, d:])
        half = (kernel - 1) // 2
        yp = np.pad(y, ((half, half), (0, 0)))
        dw = weights[p + "conv.depthwise_conv.weight"][:, 0, :]  # [d, k]
        y = sum(yp[j : j + length] * dw[:, j][None, :] for j in range(kernel))
        if p + "conv.depthwise_conv.bias" in weights:
            y = y + weights[p + "conv.depthwise_conv.bias"]
        y = (y - weights[p + "conv.norm.running_mean"]) / np.sqrt(weights[p + "conv.norm.running_var"] + 1e-5)
        y = y * weights[p + "conv.norm.weight"] + weights[p + "conv.norm.bias"]
        y = silu(y)
        y = y @ weights[p + "conv.pointwise_conv2.weight"][:, :, 0].T
        if p + "conv.pointwise_conv2.bias" in weights:
            y = y + weights[p + "conv.pointwise_conv2.bias"]
        x = x + y
        x = x + 0.5 * ff(layer_norm(x, weights[p + "norm_feed_forward2.weight"],
                                    weights[p + "norm_feed_forward2.bias"]), "feed_forward2")
        x = layer_norm(x, weights[p + "norm_out.weight"], weights[p + "norm_out.bias"])
    return x


def top2_gap(values):
    import numpy as np

    if len(values) < 2:
        return float("inf")
    part = np.partition(values, -2)[-2:]
    return float(part[1] - part[0])


def spec_ctc(logits, blank):
    """Greedy CTC over the valid frames' logits [T, V]: (tokens, frames, per-frame gaps)."""
    import numpy as np

    best = np.argmax(logits, axis=1)
    tokens, frames = [], []
    for t, k in enumerate(best):
        if k != blank and (t == 0 or best[t - 1] != k):
            tokens.append(int(k))
            frames.append(t)
    gaps = [top2_gap(row) for row in logits]
    return tokens, frames, gaps, best


class SpecTransducer:
    """Prediction network + joint of docs/parakeet.md section 5 from float64 weights (names as in
    the HF checkpoint: encoder_projector.*, decoder.embedding.weight, decoder.lstm.*,
    decoder.decoder_projector.*, joint.head.*)."""

    def __init__(self, weights, layers, vocab_size, blank, durations=None, max_symbols=None):
        self.w = weights
        self.layers = layers
        self.vocab_size = vocab_size
        self.blank = blank
        self.durations = durations
        self.max_symbols = max_symbols

    def project(self, encoder_out):
        return linear(encoder_out, self.w, "encoder_projector", bias_required=True)

    def zero_state(self):
        import numpy as np

        hidden = self.w["decoder.lstm.weight_hh_l0"].shape[1]
        return [(np.zeros(hidden), np.zeros(hidden)) for _ in range(self.layers)]

    def predict(self, token, state):
        """decoder_projector(LSTM(embedding[token]; state)) and the new state."""
        import numpy as np

        x = self.w["decoder.embedding.weight"][token]
        new_state = []
        for layer in range(self.layers):
            h, c = state[layer]
            gates = (self.w[f"decoder.lstm.weight_ih_l{layer}"] @ x + self.w[f"decoder.lstm.bias_ih_l{layer}"]
                     + self.w[f"decoder.lstm.weight_hh_l{layer}"] @ h + self.w[f"decoder.lstm.bias_hh_l{layer}"])
            i, f, g, o = np.split(gates, 4)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            new_state.append((h, c))
            x = h
        return linear(x, self.w, "decoder.decoder_projector", bias_required=True), new_state

    def joint(self, projected_frame, prediction):
        import numpy as np

        return linear(np.maximum(projected_frame + prediction, 0.0), self.w, "joint.head", bias_required=True)

    def decode(self, projected, step_limit=None):
        """Greedy decode of one utterance's projected encoder frames [T, H]. Returns a dict with the
        emitted tokens, their frames and durations, and every step (frame, token, advance, gaps)."""
        import numpy as np

        frames_total = projected.shape[0]
        step_limit = step_limit or 20 * frames_total + 100
        g, state = self.predict(self.blank, self.zero_state())
        t, symbols = 0, 0
        out = dict(tokens=[], frames=[], durations=[], steps=[], forced_advances=0, hit_step_limit=False)
        while t < frames_total:
            if len(out["steps"]) >= step_limit:
                out["hit_step_limit"] = True
                break
            logits = self.joint(projected[t], g)
            token_logits = logits[: self.vocab_size]
            k = int(np.argmax(token_logits))
            step = dict(frame=t, token=k, token_gap=top2_gap(token_logits))
            if self.durations is not None:
                duration_logits = logits[self.vocab_size :]
                advance = int(np.argmax(duration_logits))  # transformers uses the index as frames
                step["duration_index"] = advance
                step["duration_gap"] = top2_gap(duration_logits)
                if k == self.blank and advance == 0:
                    advance = 1
            else:
                if k == self.blank:
                    advance, symbols = 1, 0
                else:
                    symbols += 1
                    if symbols >= self.max_symbols:
                        advance, symbols = 1, 0
                        out["forced_advances"] += 1
                    else:
                        advance = 0
            step["advance"] = advance
            out["steps"].append(step)
            if k != self.blank:
                out["tokens"].append(k)
                out["frames"].append(t)
                out["durations"].append(advance)
                g, state = self.predict(k, state)
            t += advance
        return out


def valid_encoder_frames(feature_frames, factor=8):
    length = feature_frames
    for _ in range(int(round(math.log2(factor)))):
        length = (length - 1) // 2 + 1
    return length


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def read_wav(path):
    import numpy as np

    with wave.open(path, "rb") as w:
        if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, SAMPLE_RATE):
            raise ValueError(f"{path}: expected 16 kHz mono s16")
        raw = w.readframes(w.getnframes())
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0


def jsonable(value):
    """Tensors, numpy values and tuples to plain JSON values."""
    import numpy as np

    try:
        import torch

        if isinstance(value, torch.Tensor):
            return jsonable(value.detach().cpu().tolist())
    except ImportError:
        pass
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return jsonable(float(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def capture_library_messages():
    """Routes transformers' log messages and Python warnings into log.txt (not the console)."""
    import logging
    import warnings

    import transformers

    class Keep(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            HF_MESSAGES.append(message)
            log("[transformers]", message, quiet=True)

    transformers.logging.set_verbosity_warning()
    transformers.logging.disable_default_handler()
    logging.getLogger("transformers").addHandler(Keep())

    def show(message, category, filename, lineno, file=None, line=None):
        HF_MESSAGES.append(str(message))
        log(f"[{category.__name__}]", message, quiet=True)

    warnings.showwarning = show
    warnings.simplefilter("default")


def dump_library_sources(out_dir):
    """Packs the transformers sources that define the behaviour recorded here, for reading."""
    import transformers

    root = os.path.dirname(transformers.__file__)
    path = os.path.join(out_dir, "transformers-parakeet-src.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for rel in ("models/parakeet", "generation/utils.py", "generation/stopping_criteria.py",
                    "generation/logits_process.py", "audio_utils.py", "feature_extraction_sequence_utils.py",
                    "integrations/sdpa_attention.py", "tokenization_utils_tokenizers.py", "convert_slow_tokenizer.py",
                    "processing_utils.py"):
            full = os.path.join(root, rel)
            if os.path.exists(full):
                tar.add(full, arcname=rel, filter=lambda m: None if "__pycache__" in m.name else m)
    log(f"packed {path}: {os.path.getsize(path)} bytes")


def accepted_keys(cls):
    """Constructor keys of a config class, or None when it takes any keyword."""
    import dataclasses
    import inspect

    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    parameters = inspect.signature(cls.__init__).parameters
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return None
    return set(parameters) - {"self"}


def make_config(cls, notes, **kwargs):
    """cls(**kwargs); if the class refuses a key, retries with the keys it declares and notes the
    ones it dropped."""
    try:
        return cls(**kwargs)
    except Exception as first:
        keys = accepted_keys(cls)
        if keys is None:
            raise
        kept = {k: v for k, v in kwargs.items() if k in keys}
        dropped = sorted(set(kwargs) - set(kept))
        notes.append(f"{cls.__name__}: {type(first).__name__}: {first}; retried without {dropped}")
        return cls(**kept)
