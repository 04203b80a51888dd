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
tokens: the head biases are then calibrated on the clips (calibrate_heads: centred on the mean
encoder output so that tokens follow the audio; TDT duration 0 made rare, or random weights loop on
one frame; the blank raised until it takes about half of the decisions, CTC two thirds). The seed is
the first whose every greedy decision (tokens; TDT durations too) has a top-2 logit gap of at least
--gap-target (2e-3), so that float32 round-off elsewhere cannot flip a token, and whose decoding
exercises the paths (RNN-T guard, TDT duration 0) without hitting generate()'s length cap.

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

It writes $OUT/tiny-random-{ctc,rnnt,tdt}/, $OUT/README.md, $OUT/log.txt (ends with a JSON
summary) and $OUT/transformers-parakeet-src.tar.gz (the library sources whose behaviour was
recorded, for reading; not for the repository). It takes a minute or two (most of it the seed
search; at most --seed-budget seconds per model). Copy the results here with

    cp -r <fetched>/tiny-random-* <fetched>/README.md tests/data/parakeet/

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
import tempfile
import time
import traceback
import wave
from collections import Counter

from oracle_log import OracleLog, pack_library_sources

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
        zero_duration_fraction=0.02,  # random weights easily loop on one frame with duration 0
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

LOG = OracleLog()  # console and $OUT/log.txt; LOG.messages: what transformers said
log = LOG


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


def bpe_encode(text, layout):
    """SentencePiece-style BPE of text with the learnt merges (lowest merge rank first); characters
    outside the alphabet become <unk> (id 0)."""
    ranks = {}
    for i, pair in enumerate(layout["merges"]):
        ranks.setdefault(pair, i)
    ids = []
    for word in text.split():
        parts = list(WORD_START + word)
        while len(parts) > 1:
            candidates = [(ranks[(a, b)], i) for i, (a, b) in enumerate(zip(parts, parts[1:])) if (a, b) in ranks]
            if not candidates:
                break
            _, i = min(candidates)
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        ids += [layout["bpe_vocab"].get(p, 0) for p in parts]
    return ids


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



def pick_weights(weights, names):
    """The arrays of `names`: exact keys, or the one key ending in '.' + name."""
    out = {}
    for name in names:
        if name in weights:
            out[name] = weights[name]
            continue
        found = [k for k in weights if k.endswith("." + name)]
        if len(found) != 1:
            raise KeyError(f"{name}: {found or 'not in the state dict'}")
        out[name] = weights[found[0]]
    return out


def transducer_names(layers):
    names = ["encoder_projector.weight", "encoder_projector.bias", "decoder.embedding.weight",
             "decoder.decoder_projector.weight", "decoder.decoder_projector.bias", "joint.head.weight",
             "joint.head.bias"]
    for layer in range(layers):
        names += [f"decoder.lstm.weight_ih_l{layer}", f"decoder.lstm.weight_hh_l{layer}",
                  f"decoder.lstm.bias_ih_l{layer}", f"decoder.lstm.bias_hh_l{layer}"]
    return names


def make_spec_transducer(spec, layout, weights, layers):
    w = pick_weights(weights, transducer_names(layers))
    if spec["kind"] == "tdt":
        return SpecTransducer(w, layers, layout["vocab_size"], layout["blank"], durations=spec["durations"])
    return SpecTransducer(w, layers, layout["vocab_size"], layout["blank"], max_symbols=spec["max_symbols_per_step"])


def ctc_logits(weights, encoder_out):
    w = pick_weights(weights, ["ctc_head.weight", "ctc_head.bias"])
    return encoder_out @ w["ctc_head.weight"][:, :, 0].T + w["ctc_head.bias"]


def calibrate_heads(spec, layout, weights, enc_outs, layers):
    """Bias changes that make random heads behave a little like a speech model (numpy, float64):
    1. centre: subtract the head's response to the mean encoder output (CTC: from ctc_head.bias;
       transducers: the mean projected frame from encoder_projector.bias, then the head's response to
       the mean joint activation from joint.head.bias), so that tokens follow the audio instead of a
       few rows winning everywhere;
    2. TDT: lower the duration-0 logit until it wins spec['zero_duration_fraction'] of the frames
       at the start-of-utterance prediction (random weights otherwise loop on one frame);
    3. blank: raise the blank logit until blanks take about spec['blank_fraction'] of the greedy
       decisions (CTC: a quantile over frames; transducers: bisection over the actual decode).
    Returns ({weight name: delta to add}, report)."""
    import numpy as np

    blank, vocab = layout["blank"], layout["vocab_size"]
    all_enc = np.concatenate(list(enc_outs.values()))
    report = {}
    if spec["kind"] == "ctc":
        w = pick_weights(weights, ["ctc_head.weight", "ctc_head.bias"])
        head = w["ctc_head.weight"][:, :, 0]
        bias = w["ctc_head.bias"].copy()
        bias -= head @ all_enc.mean(axis=0)
        logits = all_enc @ head.T + bias
        diffs = np.delete(logits, blank, axis=1).max(axis=1) - logits[:, blank]
        report["blank_offset"] = float(np.quantile(diffs, spec["blank_fraction"]))
        bias[blank] += report["blank_offset"]
        return {"ctc_head.bias": bias - w["ctc_head.bias"]}, report
    w = {k: v.copy() for k, v in pick_weights(weights, transducer_names(layers)).items()}
    original = {k: w[k].copy() for k in ("encoder_projector.bias", "joint.head.bias")}
    st = SpecTransducer(w, layers, vocab, blank, durations=spec.get("durations") if spec["kind"] == "tdt" else None,
                        max_symbols=spec.get("max_symbols_per_step"))
    w["encoder_projector.bias"] -= st.project(all_enc).mean(axis=0)
    g0, _ = st.predict(blank, st.zero_state())
    activations = np.maximum(st.project(all_enc) + g0, 0.0)
    w["joint.head.bias"] -= w["joint.head.weight"] @ activations.mean(axis=0)
    logits = activations @ w["joint.head.weight"].T + w["joint.head.bias"]
    if spec["kind"] == "tdt":
        durations = logits[:, vocab:]
        report["duration_0_offset"] = float(np.quantile(durations[:, 1:].max(axis=1) - durations[:, 0],
                                                        spec["zero_duration_fraction"]))
        w["joint.head.bias"][vocab] += report["duration_0_offset"]
    tokens = logits[:, :vocab]
    diffs = np.delete(tokens, blank, axis=1).max(axis=1) - tokens[:, blank]
    low, high = float(np.quantile(diffs, 0.02)) - 5.0, float(np.quantile(diffs, 0.98)) + 5.0
    base = w["joint.head.bias"][blank]
    for _ in range(8):
        middle = 0.5 * (low + high)
        w["joint.head.bias"][blank] = base + middle
        emitted = decisions = 0
        for enc in enc_outs.values():
            res = st.decode(st.project(enc), step_limit=4 * enc.shape[0])
            emitted += len(res["tokens"])
            decisions += len(res["steps"])
        if emitted / max(decisions, 1) > 1.0 - spec["blank_fraction"]:
            low = middle  # too few blanks: raise the blank logit further
        else:
            high = middle
    report["blank_offset"] = 0.5 * (low + high)
    w["joint.head.bias"][blank] = base + report["blank_offset"]
    return {k: w[k] - original[k] for k in original}, report


def judge_decisions(spec, layout, weights, enc_outs, padded_frames, gap_target, layers):
    """Greedy decisions of docs/parakeet.md on given encoder outputs (float64), with the statistics
    and margins the seed search judges."""
    kind = spec["kind"]
    per_clip, gaps = {}, []
    decisions = nonblank = 0
    emitted = []
    required, optional = [], []
    if kind == "ctc":
        for clip, enc in enc_outs.items():
            tokens, frames, clip_gaps, best = spec_ctc(ctc_logits(weights, enc), layout["blank"])
            per_clip[clip] = dict(tokens=tokens, frames=frames, decisions=len(best),
                                  nonblank_decisions=int((best != layout["blank"]).sum()))
            gaps += clip_gaps
            decisions += len(best)
            nonblank += per_clip[clip]["nonblank_decisions"]
            emitted += tokens
    else:
        st = make_spec_transducer(spec, layout, weights, layers)
        advances = Counter()
        zero_duration_tokens = forced = 0
        for clip, enc in enc_outs.items():
            res = st.decode(st.project(enc))
            steps = res["steps"]
            cap = spec["max_symbols_per_step"] * padded_frames[clip]
            per_clip[clip] = dict(tokens=res["tokens"], frames=res["frames"], durations=res["durations"],
                                  decisions=len(steps), nonblank_decisions=len(res["tokens"]),
                                  forced_advances=res["forced_advances"], steps_plus_start=len(steps) + 1,
                                  generate_max_length=cap, hit_step_limit=res["hit_step_limit"])
            for step in steps:
                gaps.append(step["token_gap"])
                if "duration_gap" in step:
                    gaps.append(step["duration_gap"])
                advances[step["advance"]] += 1
                if step["token"] != layout["blank"] and step["advance"] == 0:
                    zero_duration_tokens += 1
            decisions += len(steps)
            nonblank += len(res["tokens"])
            emitted += res["tokens"]
            forced += res["forced_advances"]
            if res["hit_step_limit"] or len(steps) + 1 >= 0.9 * cap:
                required.append(f"{clip}: {len(steps) + 1} steps vs generate max_length {cap}")
        per_clip["_advances"] = dict(sorted(advances.items()))
        per_clip["_zero_duration_tokens"] = zero_duration_tokens
        per_clip["_forced_advances"] = forced
        if kind == "tdt" and (zero_duration_tokens == 0 or len(advances) < 3):
            optional.append("TDT: want tokens with duration 0 and >= 3 distinct advances")
        if kind == "rnnt" and forced == 0:
            optional.append("RNN-T: want the max_symbols_per_step guard to fire")
    min_gap = min(gaps) if gaps else float("inf")
    fraction = nonblank / max(decisions, 1)
    if min_gap < gap_target:
        required.append(f"min gap {min_gap:.2e} < {gap_target:.1e}")
    if not 0.15 <= fraction <= 0.8:
        required.append(f"non-blank fraction {fraction:.2f}")
    for clip in enc_outs:
        if len(per_clip[clip]["tokens"]) < 3:
            required.append(f"{clip}: {len(per_clip[clip]['tokens'])} tokens")
    if len(set(emitted)) < 8:
        required.append(f"{len(set(emitted))} distinct tokens")
    stats = dict(decisions=decisions, nonblank_decisions=nonblank, nonblank_fraction=fraction,
                 emitted_tokens=len(emitted), distinct_tokens=len(set(emitted)), min_gap=min_gap,
                 gaps_below_0_01=int(sum(1 for g in gaps if g < 1e-2)), decisions_with_gap=len(gaps))
    return dict(per_clip=per_clip, stats=stats, required=required, optional=optional,
                score=(not required, not optional, min_gap))

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


def dump_library_sources(out_dir):
    """Packs the transformers sources that define the behaviour recorded here, for reading."""
    path = pack_library_sources(
        out_dir, "transformers-parakeet-src.tar.gz",
        ("models/parakeet", "generation/utils.py", "generation/stopping_criteria.py",
         "generation/logits_process.py", "audio_utils.py", "feature_extraction_sequence_utils.py",
         "integrations/sdpa_attention.py", "tokenization_utils_tokenizers.py",
         "convert_slow_tokenizer.py", "processing_utils.py"))
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


# ----------------------------------------------------------------------------------------------
# The oracle proper (needs numpy, torch, transformers, tokenizers, safetensors).
# ----------------------------------------------------------------------------------------------

HEAD_GAIN = 6.0  # logit scale of the CTC head and the joint head (std ~ 6): clear argmax decisions

REFERENCE_NOTES = [
    "Audio: tests/data/audio/<clip>.wav, int16 / 32768 as float32, 16 kHz mono.",
    "features.<clip> [L, M]: the valid frames of ParakeetProcessor's input_features for the clip alone "
    "(L = samples // 160; transformers also returns one more, all-zero, frame).",
    "encoder.<clip> [T, d]: encoder last_hidden_state at the T = ceil(L / 8) valid frames, run with the "
    "processor's attention_mask.",
    "logits.<clip> [T, V] (CTC): ctc_head output. projected.<clip> [T, H] (RNN-T/TDT): "
    "encoder_projector output (get_audio_features pooler_output).",
    "tokens.<clip>, frames.<clip> (and durations.<clip> for TDT): the emitted (non-blank) tokens of "
    "transformers' greedy generate(), their encoder frame, and the TDT duration (frames advanced after "
    "the token). CTC: repeats collapsed, frame = first frame of the run.",
    "hf_sequences.<clip> / hf_durations.<clip>: generate()'s raw output for the clip alone (RNN-T/TDT: "
    "start token + one token per step, blanks included; durations[0] = 0). CTC: per-frame argmax over "
    "the padded frames, pad_token_id past T.",
    "batch.*: the three clips in one padded batch: batch.sequences / batch.durations as generate() "
    "returned them (rows continue past their end; hark ignores steps whose frame pointer is >= T), "
    "batch.feature_frames (L per row) and batch.encoder_frames (T per row).",
    "reference.json decode.<clip>: the same tokens as lists, the text transformers decodes "
    "(skip_special_tokens=True) and the text docs/parakeet.md section 6 gives, and (TDT/RNN-T) "
    "ParakeetProcessor.decode(..., durations=...) timestamps in seconds.",
    "spec_check: this oracle's float64 numpy implementation of docs/parakeet.md against transformers "
    "(features from the audio; encoder from transformers' features; decoders from transformers' "
    "encoder output, and the whole chain from the audio).",
    "margins: the smallest top-2 logit gap over all greedy decisions (tokens; TDT durations too).",
]


class Oracle:
    def __init__(self, out_dir, args, stand_ins):
        import numpy as np
        import torch
        import transformers

        self.np, self.torch, self.transformers = np, torch, transformers
        self.out_dir = out_dir
        self.args = args
        self.errors = []
        self.summary = {}
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))  # tiny tensors: more threads only add overhead
        torch.manual_seed(0)
        self.versions = {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
        }
        for name in ("tokenizers", "safetensors"):
            try:
                self.versions[name] = __import__(name).__version__
            except Exception as exc:
                self.versions[name] = f"unavailable: {exc}"
        self.versions["stand_in_packages"] = stand_ins
        log("versions", json.dumps(self.versions))
        self.audio = {clip: read_wav(os.path.join(AUDIO_DIR, f"{clip}.wav")) for clip in CLIPS}
        self.filterbank_report = self.check_library_filterbank()

    def error(self, where, exc):
        text = f"{where}: {type(exc).__name__}: {exc}"
        log("ERROR", text)
        log(traceback.format_exc())
        self.errors.append(text)

    # -- library pieces ----------------------------------------------------------------------------

    def hf(self, name):
        value = getattr(self.transformers, name, None)
        if value is None:
            raise ImportError(f"transformers {self.transformers.__version__} has no {name}")
        return value

    def check_library_filterbank(self):
        """The filterbank transformers will use (the stand-in's or a real librosa's) against the
        value table, librosa's whisper filterbanks, the extractor's copy, and transformers' own
        float64 mel_filter_bank."""
        import librosa

        np = self.np
        ok, report = check_filterbank(librosa.filters.mel)
        report["ok"] = ok
        report["librosa_module"] = getattr(librosa, "__file__", "?")
        try:
            from transformers.audio_utils import mel_filter_bank

            for n_mels in (80, 128):
                theirs = mel_filter_bank(num_frequency_bins=257, num_mel_filters=n_mels, min_frequency=0.0,
                                         max_frequency=8000.0, sampling_rate=SAMPLE_RATE, norm="slaney",
                                         mel_scale="slaney").T
                mine = librosa.filters.mel(sr=SAMPLE_RATE, n_fft=512, n_mels=n_mels, fmin=0.0, fmax=8000.0,
                                           norm="slaney")
                report[f"vs_audio_utils_mel_filter_bank_{n_mels}"] = float(np.abs(theirs - mine).max())
        except Exception as exc:
            report["vs_audio_utils_mel_filter_bank"] = f"{type(exc).__name__}: {exc}"
        try:
            for n_mels in (80, 128):
                fe = self.hf("ParakeetFeatureExtractor")(feature_size=n_mels)
                mine = librosa.filters.mel(sr=SAMPLE_RATE, n_fft=512, n_mels=n_mels, fmin=0.0, fmax=8000.0,
                                           norm="slaney")
                theirs = getattr(fe, "mel_filters", None)
                report[f"feature_extractor_mel_filters_equal_{n_mels}"] = (
                    None if theirs is None else bool(np.array_equal(np.asarray(theirs, dtype=np.float32), mine)))
        except Exception as exc:
            report["feature_extractor_mel_filters"] = f"{type(exc).__name__}: {exc}"
        log("filterbank check:", json.dumps(jsonable(report)))
        if not ok:
            self.errors.append(f"filterbank check failed: {report}")
        return report

    def build_tokenizer(self, kind, layout):
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        bpe = models.BPE(vocab=layout["bpe_vocab"], merges=layout["merges"], unk_token="<unk>", fuse_unk=True,
                         byte_fallback=False, dropout=None)
        tok = Tokenizer(bpe)
        try:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="always", split=True)
            tok.decoder = decoders.Metaspace(replacement=WORD_START, prepend_scheme="always", split=True)
        except TypeError:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=WORD_START, add_prefix_space=True)
            tok.decoder = decoders.Metaspace(replacement=WORD_START, add_prefix_space=True)
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in layout["head"]])
        tok.add_special_tokens([AddedToken(layout["tail"], special=True, normalized=False)])
        for i, piece in enumerate(layout["pieces"]):
            if tok.token_to_id(piece) != i:
                raise ValueError(f"tokenizer id of {piece!r} is {tok.token_to_id(piece)}, expected {i}")
        cls = (getattr(self.transformers, "ParakeetTokenizer", None)
               or getattr(self.transformers, "ParakeetTokenizerFast", None)
               or self.hf("PreTrainedTokenizerFast"))
        pad = layout["pieces"][layout["tokenizer_pad"]]
        hf_tok = cls(tokenizer_object=tok, unk_token="<unk>", pad_token=pad, clean_up_tokenization_spaces=False)
        if hf_tok.pad_token_id != layout["tokenizer_pad"]:
            raise ValueError(f"pad token id {hf_tok.pad_token_id}, expected {layout['tokenizer_pad']}")
        return hf_tok

    def build_processor(self, kind, spec, hf_tok):
        fe_cls = self.hf("ParakeetFeatureExtractor")
        fe = fe_cls(feature_size=spec["num_mel_bins"], sampling_rate=SAMPLE_RATE, hop_length=160, n_fft=512,
                    win_length=400, preemphasis=0.97, padding_value=0.0)
        proc_cls = self.hf("ParakeetProcessor")
        try:
            processor = proc_cls(feature_extractor=fe, tokenizer=hf_tok, decoder_type=kind)
            note = "decoder_type=" + kind
        except TypeError as exc:
            processor = proc_cls(feature_extractor=fe, tokenizer=hf_tok)
            note = f"no decoder_type ({exc})"
        return processor, fe, note

    def features(self, processor, audio):
        """(input_features float32 [B, N, M], attention_mask bool [B, N]) as the processor makes them."""
        torch = self.torch
        out = processor(audio=audio, sampling_rate=SAMPLE_RATE, return_tensors="pt")
        feats = out["input_features"].to(torch.float32)
        mask = out["attention_mask"].to(torch.bool)
        return feats, mask

    # -- model -----------------------------------------------------------------------------------

    def make_model_config(self, spec, layout, notes):
        kind = spec["kind"]
        encoder_cls = self.hf("ParakeetEncoderConfig")
        encoder = make_config(
            encoder_cls, notes,
            hidden_size=TINY["hidden_size"], num_hidden_layers=TINY["num_hidden_layers"],
            num_attention_heads=TINY["num_attention_heads"], intermediate_size=TINY["intermediate_size"],
            hidden_act="silu", attention_bias=spec["bias"], convolution_bias=spec["bias"], conv_kernel_size=9,
            subsampling_factor=8, subsampling_conv_channels=TINY["subsampling_conv_channels"],
            num_mel_bins=spec["num_mel_bins"], subsampling_conv_kernel_size=3, subsampling_conv_stride=2,
            dropout=0.1, dropout_positions=0.0, layerdrop=0.0, activation_dropout=0.1, attention_dropout=0.1,
            max_position_embeddings=5000, scale_input=spec["scale_input"], initializer_range=0.02,
        )
        common = dict(vocab_size=layout["vocab_size"], encoder_config=encoder.to_dict(),
                      pad_token_id=layout["config_pad"])
        if kind == "ctc":
            return make_config(self.hf("ParakeetCTCConfig"), notes, ctc_loss_reduction="mean",
                               ctc_zero_infinity=True, **common)
        cls = self.hf("ParakeetRNNTConfig" if kind == "rnnt" else "ParakeetTDTConfig")
        extra = dict(decoder_hidden_size=TINY["decoder_hidden_size"], num_decoder_layers=TINY["num_decoder_layers"],
                     hidden_act="relu", max_symbols_per_step=spec["max_symbols_per_step"],
                     blank_token_id=layout["blank"])
        keys = accepted_keys(cls)
        if keys is not None and "joint_hidden_size" in keys:
            extra["joint_hidden_size"] = TINY["decoder_hidden_size"]
        if kind == "tdt":
            extra["durations"] = list(spec["durations"])
        return make_config(cls, notes, **extra, **common)

    @staticmethod
    def gain(module_name):
        name = "." + module_name
        if ".subsampling.layers." in name:
            return math.sqrt(2.0)  # a ReLU follows
        if name.endswith((".q_proj", ".k_proj")):
            return 1.5  # attention a little sharper than uniform
        if name.endswith((".ctc_head", ".joint.head")):
            return HEAD_GAIN
        return 1.0

    def randomize(self, model, seed):
        """Seeded weights with O(1) activations: linear/conv weights N(0, gain^2 / fan_in), biases
        N(0, 0.1^2), LayerNorm weights 1 + N(0, 0.1^2), BatchNorm running mean N(0, 0.2^2) and
        variance U(0.5, 2), bias_u/bias_v N(0, 0.3^2), embeddings N(0, 1) (the blank row too: hark
        must look it up), LSTM weights N(0, 1/H), LSTM biases N(0, 0.2^2). Norms and biases are
        random so that a swapped or missing one cannot go unnoticed."""
        torch = self.torch
        nn = torch.nn
        gen = torch.Generator().manual_seed(seed)

        def normal(shape, std, mean=0.0):
            return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

        def uniform(shape, low, high):
            return low + (high - low) * torch.rand(shape, generator=gen, dtype=torch.float32)

        touched, generic = set(), []
        with torch.no_grad():
            for name, module in model.named_modules():
                if isinstance(module, nn.LayerNorm):
                    module.weight.copy_(normal(module.weight.shape, 0.1, 1.0))
                    module.bias.copy_(normal(module.bias.shape, 0.1))
                elif isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.weight.copy_(normal(module.weight.shape, 0.1, 1.0))
                    module.bias.copy_(normal(module.bias.shape, 0.1))
                    module.running_mean.copy_(normal(module.running_mean.shape, 0.2))
                    module.running_var.copy_(uniform(module.running_var.shape, 0.5, 2.0))
                elif isinstance(module, nn.LSTM):
                    for pname, p in module.named_parameters(recurse=False):
                        if pname.startswith("weight"):
                            p.copy_(normal(p.shape, 1.0 / math.sqrt(module.hidden_size)))
                        else:
                            p.copy_(normal(p.shape, 0.2))
                elif isinstance(module, nn.Embedding):
                    module.weight.copy_(normal(module.weight.shape, 1.0))
                elif isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
                    fan_in = module.weight[0].numel()
                    module.weight.copy_(normal(module.weight.shape, self.gain(name) / math.sqrt(fan_in)))
                    if module.bias is not None:
                        module.bias.copy_(normal(module.bias.shape, 0.1))
                else:
                    continue
                for p in module.parameters(recurse=False):
                    touched.add(id(p))
            for name, p in model.named_parameters():
                if id(p) in touched:
                    continue
                if name.endswith(("bias_u", "bias_v")):
                    p.copy_(normal(p.shape, 0.3))
                else:
                    p.copy_(normal(p.shape, 1.0 / math.sqrt(p[0].numel()) if p.dim() >= 2 else 0.1))
                    generic.append(name)
                touched.add(id(p))
        return generic

    def weights64(self, model):
        return {k: v.detach().to(self.torch.float64).cpu().numpy() for k, v in model.state_dict().items()}

    @staticmethod
    def encoder_weights(weights):
        """Encoder-relative names for spec_encoder (strip 'encoder.' or whatever prefix holds it)."""
        suffix = "subsampling.layers.0.weight"
        prefixes = [k[: -len(suffix)] for k in weights if k.endswith(suffix)]
        if len(prefixes) != 1:
            raise KeyError(f"cannot locate the encoder in the state dict ({prefixes})")
        prefix = prefixes[0]
        return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}

    def spec_transducer(self, spec, layout, weights):
        return make_spec_transducer(spec, layout, weights, TINY["num_decoder_layers"])

    def decide(self, spec, layout, weights, enc_outs, padded_frames):
        return judge_decisions(spec, layout, weights, enc_outs, padded_frames, self.args.gap_target,
                               TINY["num_decoder_layers"])

    def calibrate(self, model, spec, layout, enc_outs):
        """calibrate_heads on this model's weights, its bias changes added to the parameters."""
        torch = self.torch
        deltas, report = calibrate_heads(spec, layout, self.weights64(model), enc_outs, TINY["num_decoder_layers"])
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, delta in deltas.items():
                found = [k for k in params if k == name or k.endswith("." + name)]
                if len(found) != 1:
                    raise KeyError(f"{name}: {found}")
                params[found[0]] += torch.as_tensor(delta, dtype=params[found[0]].dtype)
        return report

    def encoder_outputs(self, model, kind, inputs):
        """{clip: float64 [T, d]} valid frames of transformers' encoder output."""
        torch = self.torch
        out = {}
        with torch.no_grad():
            for clip, (feats, mask) in inputs.items():
                t_valid = valid_encoder_frames(int(mask.sum()))
                enc = model.encoder(input_features=feats, attention_mask=mask)
                out[clip] = enc.last_hidden_state[0, :t_valid].to(torch.float64).numpy()
        return out

    def prepare(self, model, spec, layout, seed, inputs, padded_frames):
        generic = self.randomize(model, seed)
        enc_outs = self.encoder_outputs(model, spec["kind"], inputs)
        offset = self.calibrate(model, spec, layout, enc_outs)
        verdict = self.decide(spec, layout, self.weights64(model), enc_outs, padded_frames)
        return dict(seed=seed, offset=offset, generic=generic, verdict=verdict)

    def search_seed(self, name, model, spec, layout, inputs, padded_frames):
        best = None
        tried = []
        t0 = time.time()
        for seed in range(self.args.first_seed, self.args.first_seed + self.args.max_seeds):
            result = self.prepare(model, spec, layout, seed, inputs, padded_frames)
            verdict = result["verdict"]
            tried.append(dict(seed=seed, min_gap=verdict["stats"]["min_gap"], required=verdict["required"],
                              optional=verdict["optional"]))
            if best is None or verdict["score"] > best["verdict"]["score"]:
                best = result
            if not verdict["required"] and not verdict["optional"]:
                break
            if time.time() - t0 > self.args.seed_budget:
                log(f"{name}: seed budget spent after {len(tried)} seeds")
                break
        log(f"{name}: seed {best['seed']} after {len(tried)} tries ({time.time() - t0:.1f} s): "
            f"{json.dumps(jsonable(best['verdict']['stats']))}; unmet: "
            f"{best['verdict']['required'] + best['verdict']['optional']}")
        return best, tried

    # -- final model and references --------------------------------------------------------------

    def set_generation_config(self, model, spec, layout, inputs):
        """As convert_nemo_to_hf.py leaves it: transducers start from the blank; TDT suppresses the
        duration columns. A smoke-test generate() on the shortest clip proves the settings work."""
        torch = self.torch
        gc = getattr(model, "generation_config", None)
        if gc is None:
            return "model has no generation_config"
        gc.pad_token_id = layout["config_pad"]
        if spec["kind"] == "ctc":
            return "pad_token_id set"
        gc.decoder_start_token_id = layout["blank"]
        note = "decoder_start_token_id = blank"
        if spec["kind"] == "tdt":
            gc.suppress_tokens = list(range(layout["vocab_size"], layout["vocab_size"] + len(spec["durations"])))
            note += ", suppress_tokens = duration columns"
        feats, mask = inputs[CLIPS[-1]]
        try:
            with torch.no_grad():
                model.generate(input_features=feats, attention_mask=mask)
        except Exception as exc:
            if spec["kind"] != "tdt":
                raise
            gc.suppress_tokens = None
            note += f"; dropped suppress_tokens after {type(exc).__name__}: {exc}"
            with torch.no_grad():
                model.generate(input_features=feats, attention_mask=mask)
        return note

    def reload(self, model_cls, folder):
        torch = self.torch
        try:
            model = model_cls.from_pretrained(folder, dtype=torch.float32)
        except TypeError:
            model = model_cls.from_pretrained(folder, torch_dtype=torch.float32)
        return model.eval()

    @staticmethod
    def tidy_tokenizer_config(folder):
        """save_pretrained may record loading options that describe this run, not the tokenizer."""
        path = os.path.join(folder, "tokenizer_config.json")
        if not os.path.exists(path):
            return
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
        changed = False
        for key in ("is_local", "local_files_only", "name_or_path"):
            if key in content:
                content.pop(key)
                changed = True
        if changed:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(content, f, indent=2, ensure_ascii=False)
                f.write("\n")

    def audio_features(self, model, feats, mask):
        """(encoder last_hidden_state, encoder_projector output) of a transducer."""
        if hasattr(model, "get_audio_features"):
            out = model.get_audio_features(input_features=feats, attention_mask=mask)
            return out.last_hidden_state, out.pooler_output, getattr(out, "attention_mask", None)
        enc = model.encoder(input_features=feats, attention_mask=mask)
        return enc.last_hidden_state, model.encoder_projector(enc.last_hidden_state), enc.attention_mask

    def generate_transducer(self, model, feats, mask):
        """(sequences, durations) of greedy generate(); some versions hand out the durations only
        with return_timestamps=True."""
        out = model.generate(input_features=feats, attention_mask=mask, return_dict_in_generate=True)
        sequences = out.sequences if hasattr(out, "sequences") else out
        durations = getattr(out, "durations", None)
        if durations is None:
            out = model.generate(input_features=feats, attention_mask=mask, return_dict_in_generate=True,
                                 return_timestamps=True)
            durations = getattr(out, "durations", None)
            if durations is None:
                durations = getattr(out, "token_durations", None)
        return sequences, durations

    @staticmethod
    def walk_transducer(sequence, durations, blank, frames_valid):
        """Emitted tokens of one generate() row: steps after the start token whose frame pointer
        (sum of the earlier durations) is still inside the utterance."""
        tokens, frames, token_durations = [], [], []
        t, used = 0, 0
        for s in range(1, len(sequence)):
            if t >= frames_valid:
                break
            k, d = int(sequence[s]), int(durations[s])
            used += 1
            if k != blank:
                tokens.append(k)
                frames.append(t)
                token_durations.append(d)
            t += d
        return dict(tokens=tokens, frames=frames, durations=token_durations, steps=used,
                    finished=t >= frames_valid, final_frame=t)

    @staticmethod
    def collapse(best, blank):
        tokens, frames = [], []
        previous = None
        for t, k in enumerate(int(v) for v in best):
            if k != blank and k != previous:
                tokens.append(k)
                frames.append(t)
            previous = k
        return tokens, frames

    def texts(self, processor, layout, kind, sequence, durations, emitted):
        torch = self.torch
        out = {"spec": spec_text(emitted, layout)}
        try:
            out["transformers"] = processor.batch_decode(torch.tensor([list(sequence)]), skip_special_tokens=True)[0]
        except Exception as exc:
            out["transformers_error"] = f"{type(exc).__name__}: {exc}"
        if kind != "ctc" and durations is not None:
            seq_t = torch.tensor([list(sequence)])
            dur_t = torch.tensor([list(durations)])
            try:
                decoded = processor.decode(seq_t, durations=dur_t, skip_special_tokens=True)
            except Exception as first:
                try:
                    decoded = processor.decode(seq_t[0], durations=dur_t, skip_special_tokens=True)
                except Exception as exc:
                    decoded = None
                    out["timestamps_error"] = f"{type(first).__name__}: {first} / {type(exc).__name__}: {exc}"
            if decoded is not None:
                text, stamps = decoded if isinstance(decoded, tuple) else (decoded, None)
                out["transformers_decode_with_durations"] = text
                out["timestamps"] = stamps
        return out

    def build(self, name, spec):
        torch = self.torch
        kind = spec["kind"]
        t_start = time.time()
        folder = os.path.join(self.out_dir, name)
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.makedirs(folder)
        notes = []
        layout = token_layout(kind)
        hf_tok = self.build_tokenizer(kind, layout)
        processor, _, processor_note = self.build_processor(kind, spec, hf_tok)
        notes.append("processor: " + processor_note)
        inputs = {clip: self.features(processor, self.audio[clip]) for clip in CLIPS}
        padded_frames = {clip: valid_encoder_frames(inputs[clip][0].shape[1]) for clip in CLIPS}
        config = self.make_model_config(spec, layout, notes)
        model_cls = self.hf({"ctc": "ParakeetForCTC", "rnnt": "ParakeetForRNNT", "tdt": "ParakeetForTDT"}[kind])
        model = model_cls(config).eval()
        log(f"{name}: {model_cls.__name__}, {sum(p.numel() for p in model.parameters())} parameters, "
            f"attention {getattr(model.config, '_attn_implementation', '?')}")

        tried = []
        seed = self.args.first_seed
        try:
            best, tried = self.search_seed(name, model, spec, layout, inputs, padded_frames)
            seed = best["seed"]
        except Exception as exc:
            self.error(f"{name}: seed search (spec decoder; using seed {seed} unchecked)", exc)
        generic = self.randomize(model, seed)
        if generic:
            notes.append(f"parameters without a specific init rule (generic N(0, 1/fan_in)): {generic}")
        offset = None
        try:
            offset = self.calibrate(model, spec, layout, self.encoder_outputs(model, kind, inputs))
        except Exception as exc:
            self.error(f"{name}: head offsets", exc)
        generation_note = self.set_generation_config(model, spec, layout, inputs)
        processor.save_pretrained(folder)
        model.save_pretrained(folder)
        self.tidy_tokenizer_config(folder)
        saved_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

        reloaded = self.reload(model_cls, folder)
        reloaded_state = reloaded.state_dict()
        reload_equal = set(saved_state) == set(reloaded_state) and all(
            torch.equal(saved_state[k], v) for k, v in reloaded_state.items())
        try:
            processor_reloaded = self.hf("ParakeetProcessor").from_pretrained(folder)
            processor_note = type(processor_reloaded).__name__
        except Exception as exc:
            self.error(f"{name}: reloading the processor", exc)
            processor_reloaded, processor_note = processor, f"reload failed, in-memory processor used: {exc}"

        tensors, info = self.references(name, spec, layout, reloaded, processor_reloaded, processor, padded_frames)
        from safetensors.torch import save_file

        save_file(tensors, os.path.join(folder, "reference.safetensors"), metadata={"format": "pt"})
        state = reloaded.state_dict()
        info.update(
            model=name,
            kind=kind,
            like=spec["like"],
            architecture=model_cls.__name__,
            tiny=TINY,
            settings={k: v for k, v in spec.items() if k not in ("kind", "like")},
            seed=seed,
            seeds_tried=len(tried),
            seed_search=tried[-10:],
            head_calibration=offset,
            init=self.randomize.__doc__.split("\n\n")[0].replace("\n", " "),
            head_gain=HEAD_GAIN,
            gap_target=self.args.gap_target,
            generation_config=generation_note,
            reloaded_weights_equal=reload_equal,
            processor_reloaded_as=processor_note,
            attention_implementation=getattr(reloaded.config, "_attn_implementation", None),
            tokenizer=dict(class_=type(hf_tok).__name__, vocab_size=layout["vocab_size"], blank=layout["blank"],
                           tokenizer_pad=layout["tokenizer_pad"], config_pad=layout["config_pad"],
                           special_ids=layout["special_ids"], merges=len(layout["merges"]),
                           encodings={t: dict(transformers=hf_tok(t, add_special_tokens=False)["input_ids"],
                                              spec=bpe_encode(t, layout))
                                      for t in ("And so, my fellow Americans: ask not", "Is it? Yes - 100% fine.",
                                                "the lazy dog jumps")}),
            checkpoint_tensors={k: [str(v.dtype).replace("torch.", "")] + list(v.shape) for k, v in state.items()},
            audio_to_float="int16 / 32768",
            versions=self.versions,
            notes=REFERENCE_NOTES + notes,
        )
        with open(os.path.join(folder, "reference.json"), "w", encoding="utf-8") as f:
            json.dump(jsonable(info), f, indent=1, ensure_ascii=False)
            f.write("\n")
        sizes = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))}
        total = sum(sizes.values())
        log(f"{name}: wrote {total} bytes in {time.time() - t_start:.1f} s: {sizes}")
        self.summary[name] = dict(
            seed=seed, bytes=total, files=sizes, stats=info.get("stats"), margins=info.get("margins"),
            spec_check_summary=info.get("spec_check_summary"), batch_summary=info.get("batch_summary"),
            reloaded_weights_equal=reload_equal,
        )

    def references(self, name, spec, layout, model, processor, processor_original, padded_frames):
        torch, np = self.torch, self.np
        import librosa

        kind = spec["kind"]
        blank = layout["blank"]
        tensors, described = {}, {}
        clips_info, decode, spec_check = {}, {}, {}
        weights = self.weights64(model)
        encoder_cfg = dict(hidden_size=TINY["hidden_size"], num_attention_heads=TINY["num_attention_heads"],
                           num_hidden_layers=TINY["num_hidden_layers"], scale_input=spec["scale_input"],
                           subsampling_factor=8, conv_kernel_size=9)
        bank = librosa.filters.mel(sr=SAMPLE_RATE, n_fft=512, n_mels=spec["num_mel_bins"], fmin=0.0, fmax=8000.0,
                                   norm="slaney")

        def put(key, value, what, integer=False):
            """F32 tensors, or I32 for ids, frames and lengths (also when the list is empty)."""
            t = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
            t = t.to(torch.int32 if integer else torch.float32).contiguous().clone()
            tensors[key] = t
            described[key] = dict(shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""), what=what)

        def diff(a, b):
            a = np.asarray(a, dtype=np.float64)
            b = np.asarray(b, dtype=np.float64)
            if a.shape != b.shape:
                return dict(shape_mismatch=[list(a.shape), list(b.shape)])
            err = float(np.abs(a - b).max()) if a.size else 0.0
            scale = float(np.abs(b).max()) if b.size else 0.0
            return dict(max_abs_diff=err, max_abs=scale, rel=err / scale if scale else None)

        try:
            encoder_w = self.encoder_weights(weights)
        except Exception as exc:
            encoder_w = None
            self.error(f"{name}: encoder weights for the spec check", exc)
        spec_decoder = None
        if kind != "ctc":
            try:
                spec_decoder = self.spec_transducer(spec, layout, weights)
            except Exception as exc:
                self.error(f"{name}: spec transducer", exc)

        enc_hf, singles = {}, {}
        for clip in CLIPS:
            audio = self.audio[clip]
            feats, mask = self.features(processor, audio)
            feats0, _ = self.features(processor_original, audio)
            n_frames = feats.shape[1]
            L = int(mask.sum())
            T = valid_encoder_frames(L)
            info = dict(file=f"audio/{clip}.wav", samples=len(audio), feature_frames_returned=n_frames,
                        valid_feature_frames=L, valid_encoder_frames=T,
                        padded_encoder_frames=padded_frames[clip],
                        features_same_as_in_memory_processor=bool(torch.equal(feats, feats0)),
                        padding_frames_zero=bool((feats[0, L:] == 0).all()))
            with torch.no_grad():
                if kind == "ctc":
                    enc = model.encoder(input_features=feats, attention_mask=mask)
                    hidden = enc.last_hidden_state
                    encoder_mask = getattr(enc, "attention_mask", None)
                    logits = model(input_features=feats, attention_mask=mask).logits
                    generated = model.generate(input_features=feats, attention_mask=mask)
                    sequences = generated.sequences if hasattr(generated, "sequences") else generated
                    durations = None
                else:
                    hidden, projected, encoder_mask = self.audio_features(model, feats, mask)
                    sequences, durations = self.generate_transducer(model, feats, mask)
            info["encoder_frames_returned"] = int(hidden.shape[1])
            if encoder_mask is not None:
                info["encoder_attention_mask_sum"] = int(encoder_mask.sum())
            info["nan_in_encoder_output"] = bool(torch.isnan(hidden).any())
            E = hidden[0, :T]
            enc_hf[clip] = E.to(torch.float64).numpy()
            put(f"features.{clip}", feats[0, :L], "input_features, valid frames [L, M]")
            put(f"encoder.{clip}", E, "encoder last_hidden_state, valid frames [T, d]")
            seq = [int(v) for v in sequences[0]]
            put(f"hf_sequences.{clip}", seq, "generate() output for the clip alone", integer=True)
            if kind == "ctc":
                put(f"logits.{clip}", logits[0, :T], "ctc_head logits, valid frames [T, V]")
                tokens, frames = self.collapse(seq[:T], blank)
                info["generate_pads_past_T"] = all(v == layout["config_pad"] for v in seq[T:])
                result = dict(tokens=tokens, frames=frames)
            else:
                put(f"projected.{clip}", projected[0, :T], "encoder_projector output, valid frames [T, H]")
                if durations is None:
                    raise RuntimeError("generate() returned no durations")
                dur = [int(v) for v in durations[0]]
                put(f"hf_durations.{clip}", dur, "generate() durations for the clip alone (first = 0)", integer=True)
                info["sequence_and_durations_same_length"] = len(dur) == len(seq)
                result = self.walk_transducer(seq, dur, blank, T)
                info["generate_steps"] = len(seq) - 1
                info["generate_finished_inside_output"] = result["finished"]
            put(f"tokens.{clip}", result["tokens"], "emitted token ids", integer=True)
            put(f"frames.{clip}", result["frames"], "encoder frame of each emitted token", integer=True)
            if kind == "tdt":
                put(f"durations.{clip}", result["durations"], "TDT duration (frames) of each emitted token",
                    integer=True)
            singles[clip] = result
            texts = self.texts(processor, layout, kind, seq, None if kind == "ctc" else dur, result["tokens"])
            decode[clip] = dict(result, text=texts)
            clips_info[clip] = info

            # docs/parakeet.md against transformers
            check = {}
            try:
                f_spec = spec_features(audio, bank)
                check["features"] = diff(f_spec, feats[0, :L].numpy())
            except Exception as exc:
                check["features"] = f"{type(exc).__name__}: {exc}"
            e_spec = None
            if encoder_w is not None:
                try:
                    e_spec = spec_encoder(encoder_w, encoder_cfg, feats[0, :L].to(torch.float64).numpy())
                    check["encoder"] = diff(e_spec, enc_hf[clip])
                except Exception as exc:
                    check["encoder"] = f"{type(exc).__name__}: {exc}"
                    log(traceback.format_exc())
            try:
                if kind == "ctc":
                    w = pick_weights(weights, ["ctc_head.weight", "ctc_head.bias"])
                    spec_logits = enc_hf[clip] @ w["ctc_head.weight"][:, :, 0].T + w["ctc_head.bias"]
                    check["logits"] = diff(spec_logits, logits[0, :T].numpy())
                    s_tokens, s_frames, _, _ = spec_ctc(spec_logits, blank)
                    check["decode_equal"] = s_tokens == result["tokens"] and s_frames == result["frames"]
                    if e_spec is not None:
                        c_tokens, c_frames, _, _ = spec_ctc(
                            e_spec @ w["ctc_head.weight"][:, :, 0].T + w["ctc_head.bias"], blank)
                        check["chain_decode_equal"] = c_tokens == result["tokens"] and c_frames == result["frames"]
                elif spec_decoder is not None:
                    check["projected"] = diff(spec_decoder.project(enc_hf[clip]), projected[0, :T].numpy())
                    mine = spec_decoder.decode(spec_decoder.project(enc_hf[clip]))
                    keys = ("tokens", "frames", "durations")
                    check["decode_equal"] = all(mine[k] == result[k] for k in keys)
                    if not check["decode_equal"]:
                        check["decode_spec"] = {k: mine[k] for k in keys}
                    if e_spec is not None:
                        chain = spec_decoder.decode(spec_decoder.project(e_spec))
                        check["chain_decode_equal"] = all(chain[k] == result[k] for k in keys)
            except Exception as exc:
                check["decode"] = f"{type(exc).__name__}: {exc}"
                log(traceback.format_exc())
            check["text_equal"] = texts.get("transformers") == texts["spec"]
            spec_check[clip] = check
            log(f"{name} {clip}: L={L} T={T} tokens={len(result['tokens'])} {json.dumps(jsonable(check))}")

        # activation statistics (jfk): every block output at the valid frames
        activations = {}
        try:
            feats, mask = self.features(processor, self.audio[CLIPS[0]])
            T = valid_encoder_frames(int(mask.sum()))
            with torch.no_grad():
                enc = model.encoder(input_features=feats, attention_mask=mask, output_hidden_states=True)
            for i, h in enumerate(enc.hidden_states or ()):
                h = h[0, :T]
                activations[f"hidden_states[{i}]"] = dict(std=float(h.std()), max_abs=float(h.abs().max()))
            E = enc_hf[CLIPS[0]]
            cos = (E[1:] * E[:-1]).sum(1) / (np.linalg.norm(E[1:], axis=1) * np.linalg.norm(E[:-1], axis=1))
            activations["encoder_output_consecutive_frame_cosine_mean"] = float(cos.mean())
        except Exception as exc:
            activations["error"] = f"{type(exc).__name__}: {exc}"

        # the three clips as one padded batch
        batch = {}
        try:
            feats_b, mask_b = self.features(processor, [self.audio[c] for c in CLIPS])
            with torch.no_grad():
                if kind == "ctc":
                    hidden_b = model.encoder(input_features=feats_b, attention_mask=mask_b).last_hidden_state
                    generated = model.generate(input_features=feats_b, attention_mask=mask_b)
                    seq_b = generated.sequences if hasattr(generated, "sequences") else generated
                    dur_b = None
                else:
                    hidden_b, _, _ = self.audio_features(model, feats_b, mask_b)
                    seq_b, dur_b = self.generate_transducer(model, feats_b, mask_b)
            put("batch.sequences", seq_b, "generate() output for the padded batch of the three clips", integer=True)
            if dur_b is not None:
                put("batch.durations", dur_b, "generate() durations for the batch", integer=True)
            lengths = [int(v) for v in mask_b.sum(-1)]
            put("batch.feature_frames", lengths, "valid feature frames per row", integer=True)
            put("batch.encoder_frames", [valid_encoder_frames(v) for v in lengths], "valid encoder frames per row",
                integer=True)
            for row, clip in enumerate(CLIPS):
                L = lengths[row]
                T = valid_encoder_frames(L)
                seq = [int(v) for v in seq_b[row]]
                if kind == "ctc":
                    tokens, frames = self.collapse(seq[:T], blank)
                    res = dict(tokens=tokens, frames=frames)
                else:
                    res = self.walk_transducer(seq, [int(v) for v in dur_b[row]], blank, T)
                batch[clip] = dict(
                    features=diff(feats_b[row, :L].numpy(), tensors[f"features.{clip}"].numpy()),
                    encoder=diff(hidden_b[row, :T].numpy(), tensors[f"encoder.{clip}"].numpy()),
                    decode_equal_to_single=all(res[k] == singles[clip][k] for k in res if k in
                                               ("tokens", "frames", "durations")),
                    nan_in_padded_rows=bool(torch.isnan(hidden_b[row]).any()),
                )
        except Exception as exc:
            self.error(f"{name}: batched run", exc)
            batch["error"] = f"{type(exc).__name__}: {exc}"

        verdict = None
        try:
            verdict = self.decide(spec, layout, weights, enc_hf, padded_frames)
        except Exception as exc:
            self.error(f"{name}: statistics", exc)
        stats = dict(verdict["stats"]) if verdict else {}
        if verdict:
            stats["unmet_wishes"] = verdict["required"] + verdict["optional"]
            stats["per_clip"] = {c: {k: v for k, v in verdict["per_clip"][c].items() if k not in ("tokens", "frames",
                                                                                                   "durations")}
                                 for c in CLIPS}
            for key in ("_advances", "_zero_duration_tokens", "_forced_advances"):
                if key in verdict["per_clip"]:
                    stats[key.strip("_")] = verdict["per_clip"][key]
        stats["activations"] = activations
        margins = dict(min_top2_gap=stats.get("min_gap"),
                       what="smallest top-2 logit gap over every greedy decision of the three clips "
                            "(CTC: each valid frame; RNN-T: each step's token; TDT: each step's token and "
                            "duration), float64 from transformers' encoder output")

        def all_true(key):
            values = [c.get(key) for c in spec_check.values()]
            return all(v is True for v in values)

        def worst(key):
            values = [c[key]["rel"] for c in spec_check.values()
                      if isinstance(c.get(key), dict) and c[key].get("rel") is not None]
            return max(values) if values else None

        spec_summary = dict(features_rel=worst("features"), encoder_rel=worst("encoder"),
                            logits_rel=worst("logits"), projected_rel=worst("projected"),
                            decode_equal=all_true("decode_equal"), chain_decode_equal=all_true("chain_decode_equal"),
                            text_equal=all_true("text_equal"))
        batch_summary = dict(
            decode_equal_to_single=all(b.get("decode_equal_to_single") is True for k, b in batch.items()
                                       if k in CLIPS) if "error" not in batch else False,
            encoder_max_abs_diff=max((b["encoder"].get("max_abs_diff", float("inf")) for k, b in batch.items()
                                      if k in CLIPS), default=None),
        )
        log(f"{name}: spec check {json.dumps(jsonable(spec_summary))}; batch {json.dumps(jsonable(batch_summary))}")
        info = dict(audio=clips_info, tensors=described, decode=decode, batch=batch, stats=stats, margins=margins,
                    spec_check=spec_check, spec_check_summary=spec_summary, batch_summary=batch_summary,
                    library_messages=sorted(set(LOG.messages))[:50])
        return tensors, info


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------


def run_check():
    """The stand-in filterbank against the value table and librosa's whisper filterbanks, directly
    and through an installed stand-in package."""
    ok, report = check_filterbank(slaney_module()["mel"])
    print("filterbank (direct):", "OK" if ok else "FAILED", json.dumps(report))
    root = tempfile.mkdtemp(prefix="parakeet-check-")
    try:
        installed = install_stand_in_packages(root)
        import importlib
        import importlib.metadata

        import librosa

        ok2, report2 = check_filterbank(librosa.filters.mel)
        print(f"filterbank via `import librosa` ({librosa.__file__}, version "
              f"{importlib.metadata.version('librosa')}, installed here: {installed}):",
              "OK" if ok2 else "FAILED", json.dumps(report2))
        importlib.import_module("soxr")  # transformers.audio_utils imports it next to librosa

        ok = ok and ok2
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("check:", "OK" if ok else "FAILED")
    return 0 if ok else 1


def run_selftest():
    """The numpy parts: tokenizer layout, convolution, relative shift, encoder and decoders on
    random weights, features of a real clip."""
    import numpy as np

    rng = np.random.default_rng(0)
    # tokenizer layouts
    for kind in TOKEN_LAYOUT:
        a, b = token_layout(kind), token_layout(kind)
        assert a == b, "BPE training must be deterministic"
        assert len(a["pieces"]) == TINY["vocab_size"] and a["pieces"][a["blank"]] == TOKEN_LAYOUT[kind]["tail"]
        vocab = set(a["bpe_vocab"])
        for left, right in a["merges"]:
            assert left in vocab and right in vocab and left + right in vocab, (left, right)
        ids = bpe_encode("And so, my fellow Americans: ask not", a)
        assert spec_text(ids, a) == "And so, my fellow Americans: ask not"
        print(f"layout {kind}: {len(a['merges'])} merges, specials {a['special_ids']}, blank {a['blank']}, "
              f"pad tok/config {a['tokenizer_pad']}/{a['config_pad']}, e.g. {ids} -> {spec_text(ids, a)!r}")
    # convolution against a direct loop
    x = rng.standard_normal((3, 7, 6))
    w = rng.standard_normal((4, 3, 3, 3))
    b = rng.standard_normal(4)
    got = spec_conv2d(x, w, b, 2, 1, 1)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    want = np.zeros_like(got)
    for o in range(4):
        for i in range(got.shape[1]):
            for j in range(got.shape[2]):
                want[o, i, j] = (xp[:, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3] * w[o]).sum() + b[o]
    assert np.allclose(got, want)
    wd = rng.standard_normal((3, 1, 3, 3))
    got = spec_conv2d(x, wd, b[:3], 2, 1, 3)
    for o in range(3):
        for i in range(got.shape[1]):
            for j in range(got.shape[2]):
                want[o, i, j] = (xp[o, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3] * wd[o, 0]).sum() + b[o]
    assert np.allclose(got, want[:3])
    # Transformer-XL shift as transformers does it == the gather of spec_encoder
    T, H = 6, 2
    raw = rng.standard_normal((H, T, 2 * T - 1))  # columns: positions T-1 .. -(T-1)
    shifted = np.concatenate([np.zeros((H, T, 1)), raw], axis=-1).reshape(H, 2 * T, T)[:, 1:]
    shifted = shifted.reshape(H, T, 2 * T - 1)[:, :, :T]
    by_r = raw[:, :, ::-1]  # columns: positions -(T-1) .. T-1, i.e. index r + T - 1
    index = np.arange(T)[:, None] - np.arange(T)[None, :] + T - 1
    gathered = np.take_along_axis(by_r, np.broadcast_to(index[None], (H, T, T)), axis=2)
    assert np.allclose(shifted, gathered)
    # subsampled lengths
    for L in range(0, 3000):
        assert valid_encoder_frames(L) == -(-L // 8), L
    # encoder and transducer on random weights
    d, heads, f, C, M, Hd, V = 16, 2, 32, 4, 80, 12, 20
    F3 = conv_out(conv_out(conv_out(M)))
    W = {"subsampling.layers.0.weight": rng.standard_normal((C, 1, 3, 3)) / 3,
         "subsampling.layers.0.bias": rng.standard_normal(C) * 0.1,
         "subsampling.linear.weight": rng.standard_normal((d, C * F3)) / math.sqrt(C * F3),
         "subsampling.linear.bias": rng.standard_normal(d) * 0.1}
    for dw, pw in ((2, 3), (5, 6)):
        W[f"subsampling.layers.{dw}.weight"] = rng.standard_normal((C, 1, 3, 3)) / 3
        W[f"subsampling.layers.{dw}.bias"] = rng.standard_normal(C) * 0.1
        W[f"subsampling.layers.{pw}.weight"] = rng.standard_normal((C, C, 1, 1)) / math.sqrt(C)
        W[f"subsampling.layers.{pw}.bias"] = rng.standard_normal(C) * 0.1
    p = "layers.0."
    for n in ("norm_feed_forward1", "norm_self_att", "norm_conv", "norm_feed_forward2", "norm_out"):
        W[p + n + ".weight"] = 1 + 0.1 * rng.standard_normal(d)
        W[p + n + ".bias"] = 0.1 * rng.standard_normal(d)
    for n in ("feed_forward1", "feed_forward2"):
        W[p + n + ".linear1.weight"] = rng.standard_normal((f, d)) / math.sqrt(d)
        W[p + n + ".linear2.weight"] = rng.standard_normal((d, f)) / math.sqrt(f)
    for n in ("q_proj", "k_proj", "v_proj", "o_proj", "relative_k_proj"):
        W[p + "self_attn." + n + ".weight"] = rng.standard_normal((d, d)) / math.sqrt(d)
    W[p + "self_attn.bias_u"] = rng.standard_normal((heads, d // heads)) * 0.3
    W[p + "self_attn.bias_v"] = rng.standard_normal((heads, d // heads)) * 0.3
    W[p + "conv.pointwise_conv1.weight"] = rng.standard_normal((2 * d, d, 1)) / math.sqrt(d)
    W[p + "conv.depthwise_conv.weight"] = rng.standard_normal((d, 1, 9)) / 3
    W[p + "conv.pointwise_conv2.weight"] = rng.standard_normal((d, d, 1)) / math.sqrt(d)
    W[p + "conv.norm.weight"] = 1 + 0.1 * rng.standard_normal(d)
    W[p + "conv.norm.bias"] = 0.1 * rng.standard_normal(d)
    W[p + "conv.norm.running_mean"] = 0.2 * rng.standard_normal(d)
    W[p + "conv.norm.running_var"] = rng.uniform(0.5, 2.0, d)
    audio = read_wav(os.path.join(AUDIO_DIR, "jfk.wav"))
    feats = spec_features(audio, slaney_module()["mel"](sr=16000, n_fft=512, n_mels=M))
    assert feats.shape == (len(audio) // 160, M) and np.isfinite(feats).all()
    assert np.abs(feats.mean(0)).max() < 1e-9 and np.abs(feats.std(0, ddof=1) - 1).max() < 1e-3
    cfg = dict(hidden_size=d, num_attention_heads=heads, num_hidden_layers=1, scale_input=True,
               subsampling_factor=8, conv_kernel_size=9)
    enc = spec_encoder(W, cfg, feats)
    assert enc.shape == (valid_encoder_frames(feats.shape[0]), d) and np.isfinite(enc).all()
    D = {"encoder_projector.weight": rng.standard_normal((Hd, d)) / math.sqrt(d),
         "encoder_projector.bias": 0.1 * rng.standard_normal(Hd),
         "decoder.embedding.weight": rng.standard_normal((V, Hd)),
         "decoder.decoder_projector.weight": rng.standard_normal((Hd, Hd)) / math.sqrt(Hd),
         "decoder.decoder_projector.bias": 0.1 * rng.standard_normal(Hd)}
    for layer in range(2):
        D[f"decoder.lstm.weight_ih_l{layer}"] = rng.standard_normal((4 * Hd, Hd)) / math.sqrt(Hd)
        D[f"decoder.lstm.weight_hh_l{layer}"] = rng.standard_normal((4 * Hd, Hd)) / math.sqrt(Hd)
        D[f"decoder.lstm.bias_ih_l{layer}"] = 0.2 * rng.standard_normal(4 * Hd)
        D[f"decoder.lstm.bias_hh_l{layer}"] = 0.2 * rng.standard_normal(4 * Hd)
    for kind in ("rnnt", "tdt"):
        out_dim = V + (5 if kind == "tdt" else 0)
        D["joint.head.weight"] = rng.standard_normal((out_dim, Hd)) * 6 / math.sqrt(Hd)
        D["joint.head.bias"] = 0.1 * rng.standard_normal(out_dim)
        D["joint.head.bias"][V - 1] += 4.0
        if kind == "tdt":
            D["joint.head.bias"][V] -= 6.0  # duration 0 rarely: random weights loop on one frame
        st = SpecTransducer(D, 2, V, V - 1, durations=[0, 1, 2, 3, 4] if kind == "tdt" else None, max_symbols=3)
        res = st.decode(st.project(enc))
        steps = res["steps"]
        assert not res["hit_step_limit"] and steps[-1]["frame"] + steps[-1]["advance"] >= enc.shape[0]
        run = 0
        for a, s in enumerate(steps):
            assert s["advance"] >= (1 if s["token"] == V - 1 else 0)
            if a:
                assert s["frame"] == steps[a - 1]["frame"] + steps[a - 1]["advance"]
            run = run + 1 if (s["token"] != V - 1 and s["advance"] == 0) else 0
            if kind == "rnnt":
                assert s["advance"] in (0, 1) and run < 3
        print(f"{kind} on random weights: {len(steps)} steps over {enc.shape[0]} frames, {len(res['tokens'])} "
              f"tokens, forced advances {res['forced_advances']}")
        # the seed search's calibration and judgement on these weights
        spec = dict(MODELS["tiny-random-" + kind], max_symbols_per_step=3)
        layout = dict(blank=V - 1, vocab_size=V)
        deltas, report = calibrate_heads(spec, layout, D, {"jfk": enc}, 2)
        calibrated = dict(D, **{k: D[k] + v for k, v in deltas.items()})
        verdict = judge_decisions(spec, layout, calibrated, {"jfk": enc}, {"jfk": enc.shape[0] + 1}, 2e-3, 2)
        print(f"  calibrated {report}: {verdict['stats']['nonblank_fraction']:.2f} non-blank, "
              f"unmet {verdict['required'] + verdict['optional']}")
    C_W = {"ctc_head.weight": rng.standard_normal((V, d, 1)) * 6 / math.sqrt(d), "ctc_head.bias": np.zeros(V)}
    deltas, report = calibrate_heads(MODELS["tiny-random-ctc"], dict(blank=V - 1, vocab_size=V), C_W, {"jfk": enc}, 2)
    C_W["ctc_head.bias"] = C_W["ctc_head.bias"] + deltas["ctc_head.bias"]
    verdict = judge_decisions(MODELS["tiny-random-ctc"], dict(blank=V - 1, vocab_size=V), C_W, {"jfk": enc}, {},
                              2e-3, 2)
    assert abs(verdict["stats"]["nonblank_fraction"] - (1 - MODELS["tiny-random-ctc"]["blank_fraction"])) < 0.02
    print(f"ctc calibrated {report}: {verdict['stats']['nonblank_fraction']:.2f} non-blank")
    print(f"features of jfk.wav: {feats.shape}; encoder output {enc.shape}")
    print("selftest: OK")
    return 0


def print_short_summary(summary):
    """The few numbers that say whether the run is good (the full summary is at the end of log.txt)."""
    print(f"\n== parakeet oracle: {summary.get('seconds')} s, {len(summary.get('errors', []))} errors")
    fb = summary.get("filterbank") or {}
    print(f"filterbank: ok={fb.get('ok')} table max ulps={fb.get('table', {}).get('max_ulps')} "
          f"vs transformers mel_filter_bank 128: {fb.get('vs_audio_utils_mel_filter_bank_128')}")
    for name, m in (summary.get("models") or {}).items():
        stats = m.get("stats") or {}
        spec = m.get("spec_check_summary") or {}
        batch = m.get("batch_summary") or {}
        print(f"{name}: seed {m.get('seed')}, {m.get('bytes')} bytes, reload equal {m.get('reloaded_weights_equal')}")
        print(f"  decisions {stats.get('decisions')}, non-blank {stats.get('nonblank_fraction')}, emitted "
              f"{stats.get('emitted_tokens')} ({stats.get('distinct_tokens')} distinct), min gap {stats.get('min_gap')}, "
              f"advances {stats.get('advances')}, forced {stats.get('forced_advances')}, unmet {stats.get('unmet_wishes')}")
        print(f"  spec vs transformers: features rel {spec.get('features_rel')}, encoder rel {spec.get('encoder_rel')}, "
              f"logits rel {spec.get('logits_rel')}, projected rel {spec.get('projected_rel')}, decode "
              f"{spec.get('decode_equal')}, chain {spec.get('chain_decode_equal')}, text {spec.get('text_equal')}")
        print(f"  batch: decode equal to alone {batch.get('decode_equal_to_single')}, encoder max abs diff "
              f"{batch.get('encoder_max_abs_diff')}")
    for error in summary.get("errors", []):
        print("ERROR:", error[:300])


def write_readme(out_dir, summary):
    """README.md for the output folder: what the files are and where they came from."""
    lines = [
        "# Parakeet reference data",
        "",
        "Made by `tools/oracle/parakeet.py` (its header says how to run it again; docs/parakeet.md is the",
        "specification these files test). Three random-weight models with the real Parakeet structure, shrunk:",
        "",
    ]
    for name, spec in MODELS.items():
        lines.append(f"- `{name}/`: like {spec['like']} ({spec['kind'].upper()}, {spec['num_mel_bins']} mels, "
                     f"biases {'on' if spec['bias'] else 'off'}, scale_input {spec['scale_input']})")
    lines += [
        "",
        "Each folder: the files `save_pretrained` writes for the model and its ParakeetProcessor (config.json,",
        "generation_config.json, model.safetensors in F32, tokenizer and feature-extractor files), plus",
        "`reference.safetensors` and `reference.json` with transformers' outputs on tests/data/audio/{jfk,beckett,",
        "librivox-0870}.wav, computed in float32 on the CPU from the re-loaded files:",
        "",
    ]
    lines += [f"- {note}" for note in REFERENCE_NOTES]
    lines += [
        "",
        "The weights are random (no license terms); the tokenizer is a 128-token BPE learnt by the oracle from",
        "a few sentences (the jfk and librivox transcripts and some of its own).",
        "",
        "Run: " + json.dumps({k: summary[k] for k in ("seconds",) if k in summary}) + "; versions: "
        + json.dumps(summary.get("versions", {})),
        "",
    ]
    with open(os.path.join(out_dir, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def run_oracle(args):
    out_dir = os.path.abspath(args.out or DEFAULT_OUT)
    os.makedirs(out_dir, exist_ok=True)
    LOG.path = os.path.join(out_dir, "log.txt")
    with open(LOG.path, "w", encoding="utf-8"):
        pass
    # Before transformers is imported: it decides at import time whether librosa exists.
    stand_ins = install_stand_in_packages(tempfile.mkdtemp(prefix="parakeet-oracle-"))
    log("stand-in packages:", stand_ins or "none needed")
    t0 = time.time()
    oracle = None
    try:
        LOG.capture_library_messages("default")
        try:
            dump_library_sources(out_dir)
        except Exception as exc:
            log("could not pack the transformers sources:", exc)
        oracle = Oracle(out_dir, args, stand_ins)
        for name, spec in MODELS.items():
            if args.only and name not in args.only:
                continue
            try:
                oracle.build(name, spec)
            except Exception as exc:
                oracle.error(f"{name}: build", exc)
    except Exception as exc:
        log("FATAL", type(exc).__name__, exc)
        log(traceback.format_exc())
    finally:
        summary = {"seconds": round(time.time() - t0, 1)}
        if oracle is not None:
            summary.update(models=oracle.summary, errors=oracle.errors, versions=oracle.versions,
                           filterbank=oracle.filterbank_report)
        log("SUMMARY", json.dumps(jsonable(summary), indent=1), quiet=True)
        print_short_summary(summary)
        try:
            write_readme(out_dir, jsonable(summary))
        except Exception as exc:
            log("could not write README.md:", exc)
    return 1 if oracle is None or oracle.errors else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", help="output folder (default: tests/data/parakeet; on the GPU machine: $OUT)")
    parser.add_argument("--check", action="store_true", help="check the stand-in librosa filterbank only (numpy)")
    parser.add_argument("--selftest", action="store_true", help="check the numpy parts only")
    parser.add_argument("--only", nargs="*", help="model names to build (default: all)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--max-seeds", type=int, default=400)
    parser.add_argument("--seed-budget", type=float, default=90.0, help="seconds of seed search per model")
    parser.add_argument("--gap-target", type=float, default=2e-3,
                        help="wanted minimum top-2 logit gap over all greedy decisions")
    args = parser.parse_args()
    if args.check:
        sys.exit(run_check())
    if args.selftest:
        sys.exit(run_selftest())
    sys.exit(run_oracle(args))


if __name__ == "__main__":
    main()
