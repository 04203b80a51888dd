#!/usr/bin/env python3
"""Whisper reference oracle: random-weight Whisper models and the Hugging Face outputs on them.

README
======
hark cannot download trained Whisper weights, so its Whisper code is proven against Hugging Face
`transformers` on small random-weight models that keep the REAL vocabularies, token ids, mel sizes,
generation settings and tokenizer files of two real checkpoints, with everything else shrunk
(d_model 64, 2 encoder + 2 decoder layers, 4 heads, ffn 256):

  tests/data/whisper/tiny-random-large-v3/   like openai/whisper-large-v3 (51866 tokens, 128 mels,
                                              100 languages); tokenizer as tokenizer.json
  tests/data/whisper/tiny-random-tiny.en/    like openai/whisper-tiny.en (51864 tokens, 80 mels,
                                              English-only); tokenizer as vocab.json + merges.txt +
                                              added_tokens.json (no tokenizer.json)
  tests/data/whisper/tokenizer_cases.json    [{"vocab": "gpt2"|"multilingual", "text", "ids"}]

Each model folder holds what `save_pretrained` writes (config.json, generation_config.json,
model.safetensors in F16, preprocessor_config.json, tokenizer files) plus reference.safetensors
(F32 tensors) and reference.json (prompts, generate() cases, long-form segments, versions). Every
reference is computed in float32 on the CPU from the model re-loaded from its F16 files, so the
F16-rounded weights are exact; the seed is chosen so that no greedy step hinges on a near-tie.

Run it on the GPU machine (Python 3.12, torch 2.11, transformers 5.17, tiktoken; it computes on
that machine's CPU), from the repository root, writing into the folder the run tool provides:

    PYTHONUNBUFFERED=1 python3 tools/oracle/whisper.py --out "$OUT"

It writes $OUT/<model>.model.tar.gz and $OUT/<model>.ref.tar.gz for both models,
$OUT/tokenizer_cases.json, $OUT/log.txt (ends with a JSON summary: seeds, margins, sizes, errors)
and $OUT/transformers-whisper-src.tar.gz (the library sources whose behaviour was recorded, for
reading). It takes about 70 s (most of it the seed search). Unpack the results here with

    for f in <fetched>/tiny-random-*.tar.gz; do tar -xzf "$f" -C tests/data/whisper/; done
    cp <fetched>/tokenizer_cases.json tests/data/whisper/

The files in the repository came from one such run (transformers 5.17.0, torch 2.11.0, tokenizers
0.23.2, tiktoken 0.14.0; seeds 14 and 1); everything is seeded and computed on the CPU, so the
same versions should give the same files again.
tests/data/whisper/README.md describes what the files hold.

The pure-Python parts (tiktoken ranks -> vocab.json / merges.txt, special tokens) can be checked
anywhere, without torch or numpy:

    python3 tools/oracle/whisper.py --selftest

Inputs: tests/data/tokenizers/whisper/{gpt2,multilingual}.tiktoken and tests/data/audio/{jfk,
beckett,librivox-0870,long}.wav (16 kHz mono s16; long.wav = jfk + beckett + librivox-0870 + jfk).
"""

import argparse
import base64
import json
import math
import os
import platform
import tarfile
import tempfile
import time
import traceback
import wave

from oracle_log import OracleLog, pack_library_sources

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIKTOKEN_DIR = os.path.join(REPO, "tests", "data", "tokenizers", "whisper")
AUDIO_DIR = os.path.join(REPO, "tests", "data", "audio")

# The pre-tokenizer regex of GPT-2 and Whisper (tiktoken's "gpt2" pattern).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Whisper's language codes in token order (openai-whisper tokenizer.py LANGUAGES); English-only
# vocabularies hold the first 99, large-v3 all 100 (it added "yue").
LANGUAGES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur "
    "hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si "
    "km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln "
    "ha ba jw su yue"
).split()
assert len(LANGUAGES) == 100

# The two models: the real checkpoint's vocabulary and ids, shrunk everywhere else.
MODELS = {
    "tiny-random-large-v3": dict(
        like="openai/whisper-large-v3",
        vocab="multilingual",
        n_languages=100,
        no_speech="<|nospeech|>",
        num_mel_bins=128,
        vocab_size=51866,
        bos=50257,
        eos=50257,
        pad=50256,  # config.json of large-v3; its generation_config.json says 50257
        decoder_start=50258,
    ),
    "tiny-random-tiny.en": dict(
        like="openai/whisper-tiny.en",
        vocab="gpt2",
        n_languages=99,
        no_speech="<|nocaptions|>",
        num_mel_bins=80,
        vocab_size=51864,
        bos=50257,
        eos=50256,
        pad=50256,
        decoder_start=50257,
    ),
}
TINY = dict(d_model=64, layers=2, heads=4, ffn=256, max_source_positions=1500, max_target_positions=448)

# suppress_tokens of the real generation_config.json files (openai/whisper-large-v3 and
# openai/whisper-tiny.en): openai-whisper's non-speech symbols plus the control tokens.
REAL_SUPPRESS = {
    "multilingual": [
        1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 359,
        503, 522, 542, 873, 893, 902, 918, 922, 931, 1350, 1853, 1982, 2460, 2627, 3246, 3253, 3268,
        3536, 3846, 3961, 4183, 4667, 6585, 6647, 7273, 9061, 9383, 10428, 10929, 11938, 12033,
        12331, 12562, 13793, 14157, 14635, 15265, 15618, 16553, 16604, 18362, 18956, 20075, 21675,
        22520, 26130, 26161, 26435, 28279, 29464, 31650, 32302, 32470, 36865, 42863, 47425, 49870,
        50254, 50258, 50359, 50360, 50361, 50362, 50363,
    ],
    "gpt2": [
        1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 357,
        366, 438, 532, 685, 705, 796, 930, 1058, 1220, 1267, 1279, 1303, 1343, 1377, 1391, 1635,
        1782, 1875, 2162, 2361, 2488, 3467, 4008, 4211, 4600, 4808, 5299, 5855, 6329, 7203, 9609,
        9959, 10563, 10786, 11420, 11709, 11907, 13163, 13697, 13700, 14808, 15306, 16410, 16791,
        17992, 19203, 19510, 20724, 22305, 22935, 27007, 30109, 30420, 33409, 34949, 40283, 40493,
        40549, 47282, 49146, 50257, 50357, 50358, 50359, 50360, 50361,
    ],
}

# Strings for tokenizer_cases.json: ASCII corner cases of the pre-tokenizer regex, several
# scripts, emoji, Unicode white space and numbers.
TOKENIZER_TEXTS = [
    "Hello world",
    " Hello world.",
    "Hello world ",
    "  Hello   world  ",
    "And so, my fellow Americans: ask not what your country can do for you, ask what you can do "
    "for your country.",
    "I'm sure they'll say it's fine, but we'd've known. YOU'RE 'S 't",
    "It's 3.14159 and 1,000,000 or 2024-11-29 at 10:30pm; 0123456789012345678901234567890.",
    "Line one\nLine two\n\nLine four\r\n",
    "\tTabs\tand  \n  spaces\t\n",
    "Wait... what?! (Really?) [yes] {no} <maybe> -- \"quoted\" 'single'",
    "e-mail: someone@example.com, URL: https://example.org/a?b=c&d=e#f",
    "Grüß Gott! Die Straße ist schön, und die Bäume blühen.",
    "L'été dernier, nous étions à Paris ; c'était très agréable.",
    "¿Dónde está la biblioteca? ¡Aquí! São Paulo, coração.",
    "Привет, как дела? Всё хорошо, спасибо.",
    "Καλημέρα κόσμε",
    "我们今天去公园散步，天气很好。",
    "今日はいい天気ですね。カタカナとひらがな。",
    "안녕하세요, 만나서 반갑습니다.",
    "مرحبا بالعالم ١٢٣",
    "नमस्ते दुनिया",
    "I love 🍕 and 🎉🎉! 👍🏽 ❤️",
    "♪ la la la ♪ ♫♬",
    "Café naïve coöperate résumé x² ½",
    "a\u00a0b\u3000c\u2009d",
    "!!!???...---***",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    " ",
    "\n\n\n",
    "",
    "   leading and trailing   ",
    " Hello world. And so my fellow Americans ask not what your country can do for you.",
]


# ----------------------------------------------------------------------------------------------
# Pure Python: tiktoken ranks -> Hugging Face byte-level BPE files (no torch, no numpy needed).
# ----------------------------------------------------------------------------------------------


def load_tiktoken_ranks(path):
    """Reads a tiktoken rank file: one 'base64(token) rank' per line."""
    ranks = {}
    with open(path, "rb") as f:
        for line_number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{path}:{line_number}: expected 'token rank', got {line!r}")
            ranks[base64.b64decode(parts[0])] = int(parts[1])
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"{path}: ranks are not 0..{len(ranks) - 1}")
    return ranks


def byte_to_unicode():
    """GPT-2's printable stand-in for every byte: printable Latin-1 bytes map to themselves, the
    other 68 bytes to U+0100 onwards, in byte order."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\u00a1"), ord("\u00ac") + 1))
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    )
    table = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_UNICODE = byte_to_unicode()


def token_string(token_bytes):
    return "".join(BYTE_TO_UNICODE[b] for b in token_bytes)


def split_by_lower_ranks(ranks, token, max_rank):
    """Runs tiktoken's BPE on `token` using only merges of rank < max_rank; what is left is the pair
    whose merge produced the token (its 'parents')."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < max_rank and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            break
        i = best[1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


def tiktoken_to_vocab_merges(ranks):
    """vocab {GPT-2 string: id} in id order and merges [(left, right)] in priority order, the way
    transformers' convert_openai_to_hf.py recovers them."""
    vocab = {}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        vocab[token_string(token)] = rank
        if len(token) < 2:
            continue  # single bytes are the alphabet; b"" (multilingual rank 50256) has no parents
        parents = split_by_lower_ranks(ranks, token, rank)
        if len(parents) != 2:
            raise ValueError(f"token {token!r} (rank {rank}) does not split into two lower ranks")
        merges.append((token_string(parents[0]), token_string(parents[1])))
    return vocab, merges


def special_tokens(n_languages, no_speech):
    """Added tokens in id order, as the Hugging Face Whisper tokenizers list them."""
    control = ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", no_speech,
               "<|notimestamps|>"]
    specials = ["<|endoftext|>", "<|startoftranscript|>"]
    specials += [f"<|{code}|>" for code in LANGUAGES[:n_languages]] + control
    timestamps = ["<|%.2f|>" % (i * 0.02) for i in range(1501)]
    return specials, timestamps


def bpe_by_ranks(ranks, piece):
    """tiktoken's byte-pair encoding of one pre-tokenized piece (lowest-rank pair merged first)."""
    return split_by_lower_ranks(ranks, piece, len(ranks) + 1)


def bpe_by_merges(merge_priority, piece_string):
    """Hugging Face BPE of one piece in GPT-2 characters: lowest-priority merge applied first."""
    parts = list(piece_string)
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            priority = merge_priority.get((parts[i], parts[i + 1]))
            if priority is not None and (best is None or priority < best[0]):
                best = (priority, i)
        if best is None:
            break
        i = best[1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


def write_vocab_merges(folder, vocab, merges):
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for left, right in merges:
            f.write(f"{left} {right}\n")


def selftest():
    """Checks the conversion without torch: merges rebuild every token, and Hugging Face-style BPE
    (merge priorities) equals tiktoken-style BPE (byte-pair ranks) on many pieces."""
    import random

    rng = random.Random(0)
    for name, expected_size in (("gpt2", 50256), ("multilingual", 50257)):
        t0 = time.time()
        ranks = load_tiktoken_ranks(os.path.join(TIKTOKEN_DIR, f"{name}.tiktoken"))
        assert len(ranks) == expected_size, (name, len(ranks))
        vocab, merges = tiktoken_to_vocab_merges(ranks)
        assert len(vocab) == len(ranks), "GPT-2 strings must be unique"
        empty = 1 if b"" in ranks else 0
        assert len(merges) == len(ranks) - 256 - empty, (len(merges), len(ranks))
        assert len(set(merges)) == len(merges)
        for left, right in merges:
            assert left in vocab and right in vocab and (left + right) in vocab
        merge_priority = {pair: i for i, pair in enumerate(merges)}
        # Each merge's result has a higher id than its parents, so merges are in rank order.
        for i, (left, right) in enumerate(merges):
            assert vocab[left + right] > max(vocab[left], vocab[right])
            if i:
                assert vocab[left + right] > vocab["".join(merges[i - 1])]
        # BPE agreement: every token's own bytes, plus random byte strings built from tokens.
        inverse = {rank: token for token, rank in ranks.items()}
        pieces = [inverse[i] for i in rng.sample(range(len(ranks)), 4000)]
        for _ in range(3000):
            pieces.append(b"".join(inverse[rng.randrange(len(ranks))] for _ in range(rng.randint(2, 4))))
        pieces += [t.encode("utf-8") for t in TOKENIZER_TEXTS if t]
        for piece in pieces:
            if not piece:
                continue
            by_ranks = [token_string(p) for p in bpe_by_ranks(ranks, piece)]
            by_merges = bpe_by_merges(merge_priority, token_string(piece))
            assert by_ranks == by_merges, (piece, by_ranks, by_merges)
        print(f"{name}: {len(vocab)} tokens, {len(merges)} merges, BPE agrees on {len(pieces)} pieces"
              f" ({time.time() - t0:.1f} s)")
    for n_languages, no_speech, total in ((100, "<|nospeech|>", 51866 - 50257),
                                          (99, "<|nocaptions|>", 51864 - 50256)):
        specials, timestamps = special_tokens(n_languages, no_speech)
        assert len(specials) + len(timestamps) == total, (len(specials), len(timestamps), total)
        assert timestamps[0] == "<|0.00|>" and timestamps[-1] == "<|30.00|>"
        assert timestamps[1] == "<|0.02|>" and timestamps[750] == "<|15.00|>"
    assert len(set(TOKENIZER_TEXTS)) == len(TOKENIZER_TEXTS)
    print("selftest passed")


# ----------------------------------------------------------------------------------------------
# On the GPU machine (its CPU): torch, transformers, tiktoken, tokenizers, safetensors.
# ----------------------------------------------------------------------------------------------

LOG = OracleLog()  # console and $OUT/log.txt; LOG.messages: what transformers said
log = LOG


def dump_library_sources(out_dir):
    """Packs the transformers sources that define the behaviour recorded here, for reading."""
    pack_library_sources(out_dir, "transformers-whisper-src.tar.gz",
                         ("models/whisper", "generation/logits_process.py", "generation/utils.py",
                          "audio_utils.py", "tokenization_utils_tokenizers.py",
                          "tokenization_utils_base.py"))


def read_wav(path):
    with wave.open(path, "rb") as w:
        if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, 16000):
            raise ValueError(f"{path}: expected 16 kHz mono s16")
        raw = w.readframes(w.getnframes())
    import numpy as np

    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0


def jsonable(value):
    """Tensors, numpy values and tuples to plain JSON values."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return jsonable(value.detach().cpu().tolist())
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class Oracle:
    def __init__(self, out_dir, work_dir, seed_budget_s, gap_target, max_seeds):
        import numpy as np
        import tiktoken
        import tokenizers
        import torch
        import transformers

        self.np, self.torch, self.transformers = np, torch, transformers
        self.tiktoken, self.tokenizers = tiktoken, tokenizers
        self.out_dir, self.work_dir = out_dir, work_dir
        self.seed_budget_s, self.gap_target, self.max_seeds = seed_budget_s, gap_target, max_seeds
        self.errors = []
        self.summary = {}
        torch.set_num_threads(16)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.versions = {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "tiktoken": getattr(tiktoken, "__version__", "?"),
            "numpy": np.__version__,
        }
        try:
            import safetensors

            self.versions["safetensors"] = safetensors.__version__
        except Exception:
            pass
        log("versions", json.dumps(self.versions))
        try:
            from transformers.models.whisper.tokenization_whisper import LANGUAGES as HF_LANGUAGES

            self.languages_check = list(HF_LANGUAGES)[:100] == LANGUAGES
        except Exception as exc:
            self.languages_check = f"{type(exc).__name__}: {exc}"
        log("language codes equal transformers' LANGUAGES:", self.languages_check)
        if self.languages_check is not True:
            self.errors.append(f"language list differs from transformers': {self.languages_check}")
        self.audio = {
            name: read_wav(os.path.join(AUDIO_DIR, f"{name}.wav"))
            for name in ("jfk", "beckett", "librivox-0870", "long")
        }
        self.install_timestamp_margin_probe()

    def error(self, where, exc):
        text = f"{where}: {type(exc).__name__}: {exc}"
        log("ERROR", text)
        log(traceback.format_exc())
        self.errors.append(text)

    # -- tokenizers ------------------------------------------------------------------------------

    def tiktoken_encoding(self, vocab_name, ranks, added):
        return self.tiktoken.Encoding(
            name=f"whisper-{vocab_name}",
            pat_str=GPT2_PATTERN,
            mergeable_ranks=ranks,
            special_tokens={tok: len(ranks) + i for i, tok in enumerate(added)},
        )

    def build_tokenizer(self, spec, folder):
        """Writes the tokenizer files into `folder` and returns (hf tokenizer, tiktoken encoding,
        info). The tokenizer is built with the `tokenizers` library from the converted vocab and
        merges, then loaded and re-saved by transformers so its own files are what it writes."""
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
        from transformers import AutoTokenizer

        ranks = load_tiktoken_ranks(os.path.join(TIKTOKEN_DIR, f"{spec['vocab']}.tiktoken"))
        vocab, merges = tiktoken_to_vocab_merges(ranks)
        specials, timestamps = special_tokens(spec["n_languages"], spec["no_speech"])
        added = specials + timestamps
        assert len(ranks) + len(added) == spec["vocab_size"]
        encoding = self.tiktoken_encoding(spec["vocab"], ranks, added)

        bpe = models.BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None,
                         continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                         byte_fallback=False)
        tok = Tokenizer(bpe)
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        # As convert_openai_to_hf.py adds them: control tokens special, timestamps not.
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        tok.add_tokens([AddedToken(t, special=False, normalized=True) for t in timestamps])
        for i, t in enumerate(added):
            assert tok.token_to_id(t) == len(ranks) + i, (t, tok.token_to_id(t))

        staging = os.path.join(self.work_dir, f"staging-{spec['vocab']}")
        os.makedirs(staging, exist_ok=True)
        tok.save(os.path.join(staging, "tokenizer.json"))
        with open(os.path.join(staging, "tokenizer_config.json"), "w") as f:
            json.dump({
                "tokenizer_class": "WhisperTokenizer",
                "bos_token": "<|endoftext|>",
                "eos_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "add_prefix_space": False,
                "errors": "replace",
                "model_max_length": 1024,
            }, f, indent=2)
        hf = AutoTokenizer.from_pretrained(staging)
        log(f"tokenizer {spec['vocab']}: loaded as {type(hf).__name__}")
        hf.save_pretrained(folder)
        # save_pretrained also writes the loading options of from_pretrained; they describe this
        # staging folder, not the tokenizer.
        path = os.path.join(folder, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            tokenizer_config = json.load(f)
        for key in ("is_local", "local_files_only"):
            tokenizer_config.pop(key, None)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tokenizer_config, f, indent=2, ensure_ascii=False)
            f.write("\n")
        info = {"class": type(hf).__name__, "files_written_by_save_pretrained": sorted(os.listdir(folder))}
        return hf, encoding, ranks, vocab, merges, added, info

    def check_tokenizer(self, hf, encoding, vocab_name, texts):
        """Asserts HF ids == tiktoken ids; returns the tokenizer_cases entries."""
        cases = []
        mismatches = []
        for text in texts:
            ids = encoding.encode_ordinary(text)
            hf_ids = list(hf(text, add_special_tokens=False)["input_ids"])
            entry = {"vocab": vocab_name, "text": text, "ids": ids}
            if hf_ids != ids:
                entry["hf_ids"] = hf_ids
                mismatches.append(text)
            elif encoding.decode(ids) != text:
                mismatches.append("decode:" + text)
            cases.append(entry)
        return cases, mismatches

    def non_speech_tokens(self, encoding):
        """openai-whisper's rule for the tokens to suppress as non-speech: single-token symbols
        (with or without a leading space), the first token of musical symbols, and ' -' and ' \''
        at the start of a word."""
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        musical = set("♩♪♫♬♭♮♯")
        found = {encoding.encode_ordinary(" -")[0], encoding.encode_ordinary(" '")[0]}
        for symbol in symbols + sorted(musical):
            for ids in (encoding.encode_ordinary(symbol), encoding.encode_ordinary(" " + symbol)):
                if len(ids) == 1 or symbol in musical:
                    found.add(ids[0])
        return sorted(found)

    # -- model -----------------------------------------------------------------------------------

    def make_config(self, spec):
        from transformers import WhisperConfig

        return WhisperConfig(
            vocab_size=spec["vocab_size"],
            num_mel_bins=spec["num_mel_bins"],
            d_model=TINY["d_model"],
            encoder_layers=TINY["layers"],
            decoder_layers=TINY["layers"],
            encoder_attention_heads=TINY["heads"],
            decoder_attention_heads=TINY["heads"],
            encoder_ffn_dim=TINY["ffn"],
            decoder_ffn_dim=TINY["ffn"],
            max_source_positions=TINY["max_source_positions"],
            max_target_positions=TINY["max_target_positions"],
            bos_token_id=spec["bos"],
            eos_token_id=spec["eos"],
            pad_token_id=spec["pad"],
            decoder_start_token_id=spec["decoder_start"],
            activation_function="gelu",
            scale_embedding=False,
            tie_word_embeddings=True,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            use_cache=True,
            begin_suppress_tokens=[220, spec["eos"]],
        )

    def generation_config(self, spec, tok_ids, suppress):
        """The real generation_config.json of the checkpoint, minus alignment_heads (they name
        heads of the real depth) and the legacy forced_decoder_ids."""
        eos = spec["eos"]
        g = {
            "begin_suppress_tokens": [220, eos],
            "bos_token_id": spec["bos"],
            "decoder_start_token_id": spec["decoder_start"],
            "eos_token_id": eos,
            "is_multilingual": spec["vocab"] == "multilingual",
            "max_initial_timestamp_index": 50,
            "max_length": 448,
            "no_timestamps_token_id": tok_ids["<|notimestamps|>"],
            "pad_token_id": eos,
            "prev_sot_token_id": tok_ids["<|startofprev|>"],
            "return_timestamps": False,
            "suppress_tokens": suppress,
        }
        if g["is_multilingual"]:
            g["lang_to_id"] = {f"<|{c}|>": tok_ids[f"<|{c}|>"] for c in LANGUAGES[: spec["n_languages"]]}
            g["task_to_id"] = {"transcribe": tok_ids["<|transcribe|>"], "translate": tok_ids["<|translate|>"]}
        g["transformers_version"] = self.transformers.__version__
        return dict(sorted(g.items()))

    # Gains of the random init (see randomize); chosen with a numpy model of the decoder so that
    # greedy decoding neither repeats one token nor ignores the audio.
    INIT = dict(embed_std=0.15, timestamp_row_scale=1.2, eot_row_scale=1.6, decoder_positions_std=1.0,
                final_norm_scale=4.0, qk_gain=3.0, v_gain=2.0, out_gain=2.0, fc2_gain=2.0)

    def randomize(self, model, seed, spec, tok_ids):
        """Seeded random weights. With tied embeddings the residual stream carries the input
        token's own embedding to the output, and a plain init makes the decoder repeat one token
        whatever the audio; so the token embedding is small (std 0.15) and the final layer norm
        scales the logits back up (weight ~4: logit std ~ 0.15 * sqrt(64) * 4 ~ 5), the decoder
        positions are large, and the attention and MLP branches have gains > 1 (sharper
        cross-attention, so the text depends on the audio). Timestamp rows are scaled up a little
        so that timestamps compete with text, the <|endoftext|> row more so that some decodes stop
        early (x2 stopped nearly every decode within a few tokens, x1.3 none within 40). Layer
        norms and biases are random too, so a swapped or missing one cannot go
        unnoticed. Weights are N(0, gain^2 / fan_in)."""
        init = self.INIT
        torch = self.torch
        gen = torch.Generator().manual_seed(seed)

        def normal(shape, std):
            return torch.randn(shape, generator=gen) * std

        d = TINY["d_model"]
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("encoder.embed_positions.weight"):
                    continue  # sinusoids, set below
                elif "layer_norm" in name:
                    scale = init["final_norm_scale"] if name == "model.decoder.layer_norm.weight" else 1.0
                    if name.endswith("weight"):
                        p.copy_(scale * (1.0 + normal(p.shape, 0.1)))
                    else:
                        p.copy_(normal(p.shape, 0.1))
                elif name.endswith("embed_tokens.weight"):
                    w = normal(p.shape, init["embed_std"])
                    w[tok_ids["<|0.00|>"]:] *= init["timestamp_row_scale"]
                    w[spec["eos"]] *= init["eot_row_scale"]
                    p.copy_(w)
                elif name.endswith("decoder.embed_positions.weight"):
                    p.copy_(normal(p.shape, init["decoder_positions_std"]))
                elif name.endswith("bias"):
                    p.copy_(normal(p.shape, 0.1))
                elif p.dim() >= 2:
                    gain = 1.0
                    if name.endswith(("q_proj.weight", "k_proj.weight")):
                        gain = init["qk_gain"]
                    elif name.endswith("v_proj.weight"):
                        gain = init["v_gain"]
                    elif name.endswith("out_proj.weight"):
                        gain = init["out_gain"]
                    elif name.endswith("fc2.weight"):
                        gain = init["fc2_gain"]
                    fan_in = p[0].numel()
                    p.copy_(normal(p.shape, gain / math.sqrt(fan_in)))
                else:
                    raise ValueError(f"no init rule for {name} {tuple(p.shape)}")
            positions = model.model.encoder.embed_positions.weight
            half = d // 2
            inv = torch.exp(-math.log(10000) / (half - 1) * torch.arange(half, dtype=torch.float64))
            t = torch.arange(positions.shape[0], dtype=torch.float64)[:, None] * inv[None, :]
            positions.copy_(torch.cat([t.sin(), t.cos()], dim=1).float())  # as in real checkpoints
            model.tie_weights()
            if model.proj_out.weight.data_ptr() != model.model.decoder.embed_tokens.weight.data_ptr():
                log("note: proj_out was not tied to embed_tokens; tying it by hand")
                model.proj_out.weight = model.model.decoder.embed_tokens.weight
            # Round to F16 now, so that this model computes exactly what the saved one will.
            for p in list(model.parameters()) + [positions]:
                p.copy_(p.half().float())

    # -- probes ----------------------------------------------------------------------------------

    def install_timestamp_margin_probe(self):
        """Wraps WhisperTimeStampLogitsProcessor to measure, at every step, how far the 'sum of
        timestamp probabilities vs. best text token' decision is from a tie."""
        from transformers.generation.logits_process import WhisperTimeStampLogitsProcessor

        oracle = self
        original = WhisperTimeStampLogitsProcessor.__call__
        self.timestamp_margins = []
        self.timestamp_probe_exact = None  # set at the first call: can the rule be switched off?

        # Exactly (input_ids, scores): LogitsProcessorList passes any further parameter it sees
        # in the signature as a required keyword.
        def probed(self_, input_ids, scores):
            torch = oracle.torch
            oracle.timestamp_probe_exact = hasattr(self_, "_detect_timestamp_from_logprob")
            if oracle.timestamp_probe_exact:
                flag = self_._detect_timestamp_from_logprob
                self_._detect_timestamp_from_logprob = False
                before = original(self_, input_ids, scores)
                self_._detect_timestamp_from_logprob = flag
            else:
                before = scores
            logprobs = torch.nn.functional.log_softmax(before.float(), dim=-1)
            for k in range(logprobs.shape[0]):
                ts = logprobs[k, self_.timestamp_begin:].logsumexp(dim=-1).item()
                text = logprobs[k, : self_.timestamp_begin].max().item()
                if math.isfinite(ts) and math.isfinite(text):
                    oracle.timestamp_margins.append(abs(ts - text))
            return original(self_, input_ids, scores)

        WhisperTimeStampLogitsProcessor.__call__ = probed

    def make_recorder(self):
        """A logits processor placed after Whisper's own: it sees the final scores of each step
        (greedy takes their argmax) and the decoder input, so it records the prompt each window
        started from, the chosen tokens and the top-2 gap."""
        from transformers import LogitsProcessor

        torch = self.torch

        class Recorder(LogitsProcessor):
            def __init__(self):
                self.windows = []
                self.last_len = None

            def __call__(self, input_ids, scores):
                length = input_ids.shape[1]
                if self.last_len is None or length != self.last_len + 1:
                    self.windows.append({"decoder_prompt": input_ids[0].tolist(), "chosen": [],
                                         "gaps": [], "batch": input_ids.shape[0]})
                self.last_len = length
                w = self.windows[-1]
                row = scores[0].float()
                finite = row[torch.isfinite(row)]
                if finite.numel() >= 2:
                    top = torch.topk(finite, 2).values
                    w["gaps"].append((top[0] - top[1]).item())
                else:
                    w["gaps"].append(float("inf"))
                w["chosen"].append(int(torch.argmax(row).item()))
                return scores

        return Recorder()

    # -- generate cases --------------------------------------------------------------------------

    def cases_for(self, spec, prompt_ids_tensor):
        """(name, audio, kwargs) for every greedy case, in order."""
        multilingual = spec["vocab"] == "multilingual"
        cases = []
        greedy = dict(do_sample=False, num_beams=1, max_new_tokens=40)
        en = dict(greedy, language="en", task="transcribe")
        if multilingual:
            variants = [
                ("notimestamps", dict(en, return_timestamps=False)),
                ("timestamps", dict(en, return_timestamps=True)),
                ("detect_language", dict(greedy, task="transcribe", return_timestamps=True)),
                ("translate_de", dict(greedy, language="de", task="translate", return_timestamps=False)),
                ("prompt", dict(en, return_timestamps=False, prompt_ids=prompt_ids_tensor)),
            ]
        else:  # English-only: transformers refuses language and task
            variants = [
                ("notimestamps", dict(greedy, return_timestamps=False)),
                ("timestamps", dict(greedy, return_timestamps=True)),
            ]
        for audio in ("jfk", "beckett", "librivox-0870"):
            for variant, kwargs in variants:
                cases.append((f"{audio}.{variant}", audio, kwargs))
        return cases

    def run_case(self, model, features, kwargs, attention_mask=None):
        from transformers import LogitsProcessorList

        recorder = self.make_recorder()
        margins_before = len(self.timestamp_margins)
        messages_before = len(LOG.messages)
        extra = {} if attention_mask is None else {"attention_mask": attention_mask}
        with self.torch.no_grad():
            out = model.generate(input_features=features, logits_processor=LogitsProcessorList([recorder]),
                                 **extra, **kwargs)
        margins = self.timestamp_margins[margins_before:]
        recorder.messages = sorted(set(LOG.messages[messages_before:]))
        return out, recorder, margins

    def describe_output(self, out):
        """(sequences as lists, segments or None, output type name)."""
        torch = self.torch
        segments = None
        if isinstance(out, torch.Tensor):
            sequences = out
        elif isinstance(out, dict) or hasattr(out, "keys"):
            sequences = out["sequences"]
            if "segments" in out:
                segments = out["segments"]
        else:
            sequences = out.sequences
        return sequences.tolist(), segments, type(out).__name__

    def language_margin(self, model, features, lang_ids):
        torch = self.torch
        with torch.no_grad():
            sot = torch.tensor([[model.generation_config.decoder_start_token_id]])
            logits = model(input_features=features, decoder_input_ids=sot).logits[0, -1]
        lang_logits = logits[lang_ids]
        top = torch.topk(lang_logits, 2)
        return lang_ids[int(top.indices[0])], (top.values[0] - top.values[1]).item()

    def screen_seed(self, model, spec, feats, prompt_ids_tensor, lang_ids):
        """Min top-2 gap over every greedy step of every case, min timestamp-rule margin, min
        language margin; returns early (as a failure) once any falls below the target."""
        worst = {"top2_gap": float("inf"), "timestamp_margin": float("inf"), "language_margin": float("inf")}

        def bad():
            return min(worst.values()) < self.gap_target

        if lang_ids:
            for audio in ("jfk", "beckett", "librivox-0870"):
                _, margin = self.language_margin(model, feats[audio], lang_ids)
                worst["language_margin"] = min(worst["language_margin"], margin)
                if bad():
                    return worst
        for name, audio, kwargs in self.cases_for(spec, prompt_ids_tensor):
            try:
                _, recorder, margins = self.run_case(model, feats[audio], kwargs)
            except Exception as exc:  # judged again (and recorded) in the final pass
                log(f"screen: {name} failed:", type(exc).__name__, exc)
                continue
            for w in recorder.windows:
                worst["top2_gap"] = min([worst["top2_gap"]] + w["gaps"])
            worst["timestamp_margin"] = min([worst["timestamp_margin"]] + margins)
            if bad():
                return worst
        long_kwargs, long_feats, long_mask = self.long_form_inputs(spec)
        try:
            _, recorder, margins = self.run_case(model, long_feats, long_kwargs, long_mask)
            for w in recorder.windows:
                worst["top2_gap"] = min([worst["top2_gap"]] + w["gaps"])
            worst["timestamp_margin"] = min([worst["timestamp_margin"]] + margins)
        except Exception as exc:  # judged again (and recorded) in the final pass
            log("screen: long-form failed:", type(exc).__name__, exc)
        return worst

    def long_form_inputs(self, spec):
        torch = self.torch
        fe = self.feature_extractor(spec)
        inputs = fe(self.audio["long"], sampling_rate=16000, truncation=False, padding="longest",
                    return_attention_mask=True, return_tensors="pt")
        kwargs = dict(do_sample=False, num_beams=1, return_timestamps=True, condition_on_prev_tokens=False,
                      max_new_tokens=40, return_segments=True)
        if spec["vocab"] == "multilingual":
            kwargs.update(language="en", task="transcribe")
        return kwargs, inputs["input_features"].to(torch.float32), inputs["attention_mask"]

    def feature_extractor(self, spec):
        from transformers import WhisperFeatureExtractor

        return WhisperFeatureExtractor(feature_size=spec["num_mel_bins"])

    # -- one model -------------------------------------------------------------------------------

    def build(self, name, spec):
        torch = self.torch
        from transformers import GenerationConfig, WhisperForConditionalGeneration

        t_start = time.time()
        folder = os.path.join(self.work_dir, name)
        os.makedirs(folder, exist_ok=True)
        log(f"== {name} ({spec['like']})")

        hf_tok, encoding, ranks, vocab, merges, added, tok_info = self.build_tokenizer(spec, folder)
        tok_ids = {t: len(ranks) + i for i, t in enumerate(added)}
        cases, mismatches = self.check_tokenizer(hf_tok, encoding, spec["vocab"], TOKENIZER_TEXTS)
        tok_info["mismatches_vs_tiktoken"] = mismatches
        log(f"tokenizer {spec['vocab']}: {len(cases)} strings, mismatches vs tiktoken: {mismatches}")
        # A broader check: random runs of vocabulary text through both.
        import random

        rng = random.Random(1)
        inverse = {r: t for t, r in ranks.items()}
        bulk_bad = 0
        for _ in range(300):
            raw = b"".join(inverse[rng.randrange(len(ranks))] for _ in range(rng.randint(1, 12)))
            text = raw.decode("utf-8", errors="ignore")
            if encoding.encode_ordinary(text) != list(hf_tok(text, add_special_tokens=False)["input_ids"]):
                bulk_bad += 1
        tok_info["random_texts_checked"] = 300
        tok_info["random_texts_mismatched"] = bulk_bad
        log(f"tokenizer {spec['vocab']}: random texts mismatched: {bulk_bad}/300")
        special_check = {t: hf_tok.convert_tokens_to_ids(t) for t in
                         ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>",
                          "<|notimestamps|>", "<|0.00|>", "<|30.00|>", spec["no_speech"]]}
        for t, i in special_check.items():
            if i != tok_ids[t]:
                self.errors.append(f"{name}: HF id of {t} is {i}, expected {tok_ids[t]}")
        tok_info["special_ids"] = special_check

        # Suppress list: the real one, cross-checked against openai-whisper's rule.
        rule = self.non_speech_tokens(encoding)
        control = [tok_ids[t] for t in ["<|startoftranscript|>", "<|translate|>", "<|transcribe|>",
                                        "<|startoflm|>", "<|startofprev|>", spec["no_speech"]]]
        computed = sorted(set(rule) | set(control))
        real = REAL_SUPPRESS[spec["vocab"]]
        suppress_check = {
            "equal": computed == real,
            "only_in_real": sorted(set(real) - set(computed)),
            "only_in_rule": sorted(set(computed) - set(real)),
        }
        log(f"suppress_tokens vs openai rule: {suppress_check}")

        # Prompt ids for case (e), the way HF users make them.
        try:
            prompt_ids_tensor = hf_tok.get_prompt_ids(" Hello world.", return_tensors="pt")
            prompt_ids_source = "tokenizer.get_prompt_ids"
        except Exception as exc:
            self.error(f"{name}: get_prompt_ids", exc)
            prompt_ids_tensor = torch.tensor([tok_ids["<|startofprev|>"]] + encoding.encode_ordinary(" Hello world."))
            prompt_ids_source = "manual [<|startofprev|>] + encode(' Hello world.')"

        fe = self.feature_extractor(spec)
        feats = {}
        for audio in ("jfk", "beckett", "librivox-0870"):
            feats[audio] = fe(self.audio[audio], sampling_rate=16000, return_tensors="pt")["input_features"].to(torch.float32)
        config = self.make_config(spec)
        gen_dict = self.generation_config(spec, tok_ids, REAL_SUPPRESS[spec["vocab"]])
        lang_ids = list(gen_dict.get("lang_to_id", {}).values())

        # Seed search on the in-memory (F16-rounded) model.
        best = None
        seeds_tried = []
        t_search = time.time()
        for seed in range(1, self.max_seeds + 1):
            torch.manual_seed(seed)
            model = WhisperForConditionalGeneration(config).eval()
            model.generation_config = GenerationConfig(**{k: v for k, v in gen_dict.items() if k != "transformers_version"})
            self.randomize(model, seed, spec, tok_ids)
            try:
                worst = self.screen_seed(model, spec, feats, prompt_ids_tensor, lang_ids)
            except Exception as exc:
                self.error(f"{name}: screening seed {seed}", exc)
                worst = {"top2_gap": -1.0, "timestamp_margin": -1.0, "language_margin": -1.0}
            score = min(worst.values())
            seeds_tried.append({"seed": seed, **worst})
            log(f"seed {seed}: {worst} ({time.time() - t_search:.1f} s)")
            if best is None or score > best[0]:
                best = (score, seed)
            if score >= self.gap_target or time.time() - t_search > self.seed_budget_s:
                break
        seed = best[1]
        log(f"chosen seed {seed} (min margin {best[0]})")

        # Build, save in F16, reload in F32.
        torch.manual_seed(seed)
        model = WhisperForConditionalGeneration(config).eval()
        self.randomize(model, seed, spec, tok_ids)
        model.generation_config = GenerationConfig(**{k: v for k, v in gen_dict.items() if k != "transformers_version"})
        model.half().save_pretrained(folder)
        with open(os.path.join(folder, "generation_config.json"), "w") as f:
            json.dump(gen_dict, f, indent=2)
            f.write("\n")
        fe.save_pretrained(folder)
        try:
            model = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
        except TypeError:
            model = WhisperForConditionalGeneration.from_pretrained(folder, torch_dtype=torch.float32).eval()
        assert next(model.parameters()).dtype == torch.float32
        weights_check = self.compare_with_file(model, os.path.join(folder, "model.safetensors"))
        log(f"reloaded: {weights_check}")
        if weights_check["mismatched"]:
            # The references must come from the stored values: put them back where loading did not.
            from safetensors.torch import load_file

            stored = load_file(os.path.join(folder, "model.safetensors"))
            result = model.load_state_dict({k: v.float() for k, v in stored.items()}, strict=False)
            weights_check["restored_from_file"] = weights_check["mismatched"]
            weights_check["after_restore"] = self.compare_with_file(model, os.path.join(folder, "model.safetensors"))
            log(f"restored {weights_check['mismatched']} from the file: {result}")
        tied = model.proj_out.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr()
        weights_check["proj_out_tied"] = tied
        if not tied:
            self.errors.append(f"{name}: proj_out is not tied to embed_tokens after reload")

        reference = self.references(name, spec, model, hf_tok, encoding, feats, prompt_ids_tensor,
                                    prompt_ids_source, tok_ids, lang_ids, folder)
        reference.update({
            "model": name,
            "like": spec["like"],
            "versions": self.versions,
            "seed": seed,
            "seeds_tried": seeds_tried,
            "init": {
                "what": ("torch.Generator(seed); matrices N(0, gain^2/fan_in) (gain 1 unless listed); "
                         "biases N(0, 0.1^2); layer-norm weight 1 + N(0, 0.1^2) (the decoder's final "
                         "one times final_norm_scale), bias N(0, 0.1^2); token embedding "
                         "N(0, embed_std^2) with timestamp rows and the <|endoftext|> row scaled; "
                         "decoder positions N(0, decoder_positions_std^2); encoder positions the usual "
                         "sinusoids; everything rounded to F16"),
                **self.INIT,
            },
            "weights_check": weights_check,
            "tokenizer": tok_info,
            "suppress_tokens_check": suppress_check,
            "language_codes_match_transformers": self.languages_check,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
        })

        # Tokenizer file layout of the model folder.
        tok_files = self.finish_tokenizer_files(name, spec, folder, vocab, merges, added, encoding)
        reference["tokenizer"]["files"] = tok_files
        with open(os.path.join(folder, "reference.json"), "w", encoding="utf-8") as f:
            json.dump(jsonable(reference), f, indent=1, ensure_ascii=False)
            f.write("\n")
        self.summary[name] = {
            "seed": seed,
            "min_top2_gap": reference["margins"]["min_top2_gap"],
            "min_timestamp_margin": reference["margins"]["min_timestamp_margin"],
            "min_language_margin": reference["margins"].get("min_language_margin"),
            "files": {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))},
            "seconds": round(time.time() - t_start, 1),
        }
        log(f"{name} done in {time.time() - t_start:.1f} s")
        return cases

    def compare_with_file(self, model, path):
        from safetensors.torch import load_file

        stored = load_file(path)
        state = model.state_dict()
        mismatched, missing = [], []
        dtypes = sorted({str(t.dtype) for t in stored.values()})
        for key, tensor in stored.items():
            mine = state.get(key)
            if mine is None:
                mine = state.get("model." + key)
            if mine is None:
                missing.append(key)
                continue
            if not self.torch.equal(mine.float(), tensor.float()):
                mismatched.append(key)
        return {"stored_tensors": len(stored), "stored_dtypes": dtypes, "mismatched": mismatched,
                "not_in_model": missing, "stored_names_sample": sorted(stored)[:5]}

    def references(self, name, spec, model, hf_tok, encoding, feats, prompt_ids_tensor, prompt_ids_source,
                   tok_ids, lang_ids, folder):
        torch = self.torch
        from safetensors.torch import save_file
        from transformers import WhisperFeatureExtractor
        from transformers.utils import is_torch_available

        tensors = {}
        described = {}
        multilingual = spec["vocab"] == "multilingual"

        # Log-mel: which path transformers takes by default, and how far the other is.
        import inspect

        source = inspect.getsource(WhisperFeatureExtractor.__call__)
        mel_path = "torch" if (is_torch_available() and "_torch_extract_fbank_features" in source) else "numpy"
        mel_info = {"path": mel_path, "call": "WhisperFeatureExtractor(feature_size=n_mels)(audio, "
                    "sampling_rate=16000, return_tensors='pt') with defaults (pad/truncate to 30 s)"}
        try:
            fe = self.feature_extractor(spec)
            padded = self.np.zeros(480000, dtype=self.np.float32)
            audio = self.audio["jfk"]
            padded[: len(audio)] = audio
            np_mel = fe._np_extract_fbank_features(padded[None, :], "cpu")
            np_mel = self.np.asarray(np_mel, dtype=self.np.float32).reshape(feats["jfk"].shape[1:])
            mel_info["numpy_path_max_abs_diff_jfk"] = float(self.np.abs(np_mel - feats["jfk"][0].numpy()).max())
        except Exception as exc:
            mel_info["numpy_path_error"] = f"{type(exc).__name__}: {exc}"
        mel_audios = ("jfk",) if multilingual else ("jfk", "beckett")
        for audio in mel_audios:
            tensors[f"mel.{audio}"] = feats[audio][0].contiguous()
            described[f"mel.{audio}"] = f"log-mel of {audio}.wav, [n_mels, 3000]"

        prompt = ([tok_ids["<|startoftranscript|>"], tok_ids["<|en|>"], tok_ids["<|transcribe|>"],
                   tok_ids["<|notimestamps|>"]] if multilingual else
                  [tok_ids["<|startoftranscript|>"], tok_ids["<|notimestamps|>"]])
        with torch.no_grad():
            for audio in ("jfk", "beckett", "librivox-0870"):
                enc = model.get_encoder()(feats[audio]).last_hidden_state[0]
                tensors[f"encoder.{audio}"] = enc.contiguous()
                described[f"encoder.{audio}"] = f"encoder output (after its final layer norm), [1500, {TINY['d_model']}]"
                logits = model(input_features=feats[audio], decoder_input_ids=torch.tensor([prompt])).logits[0]
                if audio == "jfk":
                    tensors[f"logits.{audio}"] = logits.contiguous()
                    described[f"logits.{audio}"] = "decoder logits at every prompt position, [n_prompt, vocab]"
                else:
                    tensors[f"logits.{audio}"] = logits[-1].contiguous()
                    described[f"logits.{audio}"] = "decoder logits at the last prompt position, [vocab]"
        save_file({k: v.float() for k, v in tensors.items()}, os.path.join(folder, "reference.safetensors"),
                  metadata={"format": "pt"})
        all_gaps, all_margins = [], []

        # Language detection margins (multilingual only).
        language = {}
        for audio in ("jfk", "beckett", "librivox-0870"):
            if lang_ids:
                lid, margin = self.language_margin(model, feats[audio], lang_ids)
                language[audio] = {"token": lid, "language": LANGUAGES[lid - tok_ids["<|en|>"]], "margin": margin}
                try:
                    hf_lid = model.detect_language(input_features=feats[audio])
                    language[audio]["hf_detect_language"] = jsonable(hf_lid)
                except Exception as exc:
                    language[audio]["hf_detect_language_error"] = f"{type(exc).__name__}: {exc}"

        generate = []
        for case_name, audio, kwargs in self.cases_for(spec, prompt_ids_tensor):
            entry = {"name": case_name, "audio": audio, "kwargs": jsonable(kwargs)}
            try:
                out, recorder, margins = self.run_case(model, feats[audio], kwargs)
                sequences, segments, out_type = self.describe_output(out)
                entry.update(self.summarize_windows(recorder, sequences[0], spec["eos"], kwargs["max_new_tokens"]))
                entry["output_type"] = out_type
                entry["sequences"] = sequences[0]
                entry["text"] = hf_tok.decode(sequences[0], skip_special_tokens=False)
                entry["min_timestamp_margin"] = min(margins) if margins else None
                entry["library_messages"] = recorder.messages
                if case_name.endswith("detect_language"):
                    p = entry["decoder_prompt"]
                    entry["detected_language"] = LANGUAGES[p[1] - tok_ids["<|en|>"]] if len(p) > 1 else None
                all_gaps += [g for w in recorder.windows for g in w["gaps"]]
                all_margins += margins
            except Exception as exc:
                self.error(f"{name}: generate {case_name}", exc)
                entry["error"] = f"{type(exc).__name__}: {exc}"
            generate.append(entry)
            log(f"  {case_name}: prompt {entry.get('decoder_prompt')} -> {entry.get('generated')} "
                f"stop={entry.get('stopped')} gap={entry.get('min_top2_gap')}")

        beam = None
        if multilingual:
            kwargs = dict(do_sample=False, num_beams=5, max_new_tokens=20, language="en", task="transcribe",
                          return_timestamps=False)
            beam = {"name": "jfk.beam5", "audio": "jfk", "kwargs": jsonable(kwargs)}
            try:
                out, recorder, _ = self.run_case(model, feats["jfk"], kwargs)
                sequences, _, out_type = self.describe_output(out)
                beam["output_type"] = out_type
                beam["sequences"] = sequences[0]
                beam["decoder_prompt"] = recorder.windows[0]["decoder_prompt"] if recorder.windows else None
                beam["steps"] = len(recorder.windows[0]["chosen"]) if recorder.windows else 0
                beam["window_prompts"] = [w["decoder_prompt"] for w in recorder.windows]
                p = beam["decoder_prompt"] or []
                beam["sequences_include_prompt"] = sequences[0][: len(p)] == p
                beam["generated"] = sequences[0][len(p):] if beam["sequences_include_prompt"] else sequences[0]
                beam["text"] = hf_tok.decode(sequences[0], skip_special_tokens=False)
                beam["library_messages"] = recorder.messages
                try:
                    with torch.no_grad():
                        scored = model.generate(input_features=feats["jfk"], return_dict_in_generate=True,
                                                output_scores=True, **kwargs)
                    if hasattr(scored, "sequences_scores") and scored.sequences_scores is not None:
                        beam["sequences_scores"] = jsonable(scored.sequences_scores)
                except Exception as exc:
                    beam["sequences_scores_error"] = f"{type(exc).__name__}: {exc}"
            except Exception as exc:
                self.error(f"{name}: beam", exc)
                beam["error"] = f"{type(exc).__name__}: {exc}"
            log(f"  beam: {beam.get('generated')}")

        long_form = self.long_form(name, spec, model, hf_tok)
        all_gaps += long_form.pop("_gaps", [])
        all_margins += long_form.pop("_margins", [])

        margins = {
            "min_top2_gap": min(all_gaps) if all_gaps else None,
            "greedy_steps": len(all_gaps),
            "min_timestamp_margin": min(all_margins) if all_margins else None,
            "timestamp_decisions": len(all_margins),
            "timestamp_margin_exact": self.timestamp_probe_exact,
            "what": ("top2_gap: final processed scores (after suppression and timestamp rules), best "
                     "minus second best, at every greedy step of every case incl. long-form; "
                     "timestamp_margin: |logsumexp(timestamp logprobs) - max text logprob| at every "
                     "step of the timestamp rule; language_margin: top-2 gap of the language-token "
                     "logits after <|startoftranscript|>"),
        }
        if language:
            margins["min_language_margin"] = min(v["margin"] for v in language.values())
        return {
            "audio": {a: {"file": f"audio/{a}.wav", "samples": len(self.audio[a])} for a in self.audio},
            "audio_to_float": "int16 / 32768",
            "mel": mel_info,
            "tensors": {k: {"shape": list(v.shape), "dtype": "F32", "what": described[k]} for k, v in tensors.items()},
            "prompt": prompt,
            "prompt_tokens": [hf_tok.convert_ids_to_tokens(i) for i in prompt],
            "prompt_ids_for_prompt_case": jsonable(prompt_ids_tensor),
            "prompt_ids_source": prompt_ids_source,
            "language_detection": language,
            "generate": generate,
            "beam": beam,
            "long_form": long_form,
            "margins": margins,
            "notes": [
                "generate[*].sequences is what transformers returned: the tokens of the segments it "
                "kept, concatenated, without the decoder prompt and without <|endoftext|>.",
                "transformers 5.17 runs its long-form loop for 30-s inputs too: when a window's "
                "output holds two consecutive timestamp tokens (random weights emit them even under "
                "<|notimestamps|>, which suppresses nothing), it seeks to the last timestamp and "
                "decodes the rest of the 3000 frames as another window, its mel slice padded to 3000 "
                "frames with 0.0; generate[*].windows lists every such call in order.",
                "windows[i].steps_chosen are the greedy choices (argmax of the processed scores) of "
                "one decoding call, <|endoftext|> included; windows[0] is what one decode of the "
                "30-s window gives. With timestamps, tokens after the last complete segment are not "
                "in sequences (the next window starts at that segment's end).",
                "logits.* are raw decoder logits (no suppression); mel.* come from the extractor's "
                "default path named in mel.path.",
            ],
        }

    @staticmethod
    def window_rows(recorder, eos, max_new_tokens):
        """One row per call of GenerationMixin.generate that transformers made (one per 30-s
        window it decoded): the decoder prompt it started from, the token chosen at each step
        (the greedy argmax of the final scores, <|endoftext|> included) and why it stopped."""
        rows = []
        for w in recorder.windows:
            chosen = w["chosen"]
            if chosen and chosen[-1] == eos:
                stopped = "eos"
            elif max_new_tokens is not None and len(chosen) >= max_new_tokens:
                stopped = "max_new_tokens"
            else:
                stopped = "other"
            rows.append({
                "decoder_prompt": w["decoder_prompt"],
                "steps_chosen": chosen,
                "n_steps": len(chosen),
                "stopped": stopped,
                "min_top2_gap": min(w["gaps"]) if w["gaps"] else None,
            })
        return rows

    def summarize_windows(self, recorder, sequence, eos, max_new_tokens):
        windows = self.window_rows(recorder, eos, max_new_tokens)
        first = windows[0]
        prompt = first["decoder_prompt"]
        include = sequence[: len(prompt)] == prompt
        gaps = recorder.windows[0]["gaps"]
        return {
            "decoder_prompt": prompt,
            "sequences_include_prompt": include,
            "generated": sequence[len(prompt):] if include else list(sequence),
            "steps_chosen": first["steps_chosen"],
            "stopped": first["stopped"],
            "n_steps": first["n_steps"],
            "min_top2_gap": min(g for w in recorder.windows for g in w["gaps"]),
            "min_top2_gap_step": gaps.index(min(gaps)) if gaps else None,
            "n_windows": len(windows),
            "windows": windows,
        }

    def long_form(self, name, spec, model, hf_tok):
        info = {"audio": "long", "file": "audio/long.wav"}
        kwargs, feats, mask = self.long_form_inputs(spec)
        info["extractor_call"] = ("WhisperFeatureExtractor(feature_size=n_mels)(audio, sampling_rate=16000, "
                                  "truncation=False, padding='longest', return_attention_mask=True, "
                                  "return_tensors='pt')")
        info["input_features_shape"] = list(feats.shape)
        info["attention_mask_sum"] = int(mask.sum())
        for attempt in ("with max_new_tokens", "default max_new_tokens"):
            if attempt == "default max_new_tokens":
                kwargs = {k: v for k, v in kwargs.items() if k != "max_new_tokens"}
            info["kwargs"] = jsonable(kwargs)
            try:
                out, recorder, margins = self.run_case(model, feats, kwargs, mask)
                break
            except Exception as exc:
                self.error(f"{name}: long-form ({attempt})", exc)
                info.setdefault("errors", []).append(f"{attempt}: {type(exc).__name__}: {exc}")
                out = None
        if out is None:
            return info
        info["attempt"] = attempt
        sequences, segments, out_type = self.describe_output(out)
        info["output_type"] = out_type
        info["sequences"] = sequences[0]
        info["text"] = hf_tok.decode(sequences[0], skip_special_tokens=False)
        info["_margins"] = margins
        info["library_messages"] = recorder.messages
        info["windows"] = self.window_rows(recorder, spec["eos"], kwargs.get("max_new_tokens"))
        info["_gaps"] = [g for w in recorder.windows for g in w["gaps"]]
        if segments is not None:
            rows = []
            for seg in segments[0]:
                row = {}
                for key, value in seg.items():
                    if key == "result":
                        row["result_type"] = type(value).__name__
                        continue
                    row[key] = jsonable(value)
                rows.append(row)
            info["segments"] = rows
        log(f"  long-form: {len(recorder.windows)} windows, {len(info.get('segments', []))} segments, "
            f"prompts {[w['decoder_prompt'] for w in recorder.windows]}")
        return info

    def finish_tokenizer_files(self, name, spec, folder, vocab, merges, added, encoding):
        """A keeps tokenizer.json; B keeps vocab.json + merges.txt + added_tokens.json (no
        tokenizer.json), and is re-loaded from those to prove they suffice."""
        from transformers import AutoTokenizer

        info = {}
        if spec["vocab"] == "multilingual":
            for big in ("vocab.json", "merges.txt"):
                if os.path.exists(os.path.join(folder, big)):
                    os.remove(os.path.join(folder, big))
                    info.setdefault("removed", []).append(big)
            # Same content without the indentation (halves the file).
            path = os.path.join(folder, "tokenizer.json")
            with open(path, encoding="utf-8") as f:
                content = json.load(f)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(content, f, ensure_ascii=False, separators=(",", ":"))
            info["tokenizer_json"] = "as save_pretrained wrote it, re-serialized without indentation"
            reloaded = AutoTokenizer.from_pretrained(folder)
            _, mismatches = self.check_tokenizer(reloaded, encoding, spec["vocab"], TOKENIZER_TEXTS)
            info["reload"] = {"class": type(reloaded).__name__, "mismatches_vs_tiktoken": mismatches}
            log(f"{name}: reload from compact tokenizer.json: {info['reload']}")
        else:
            write_vocab_merges(folder, vocab, merges)
            with open(os.path.join(folder, "added_tokens.json"), "w", encoding="utf-8") as f:
                json.dump({t: len(vocab) + i for i, t in enumerate(added)}, f, indent=2, ensure_ascii=False)
                f.write("\n")
            if os.path.exists(os.path.join(folder, "tokenizer.json")):
                os.remove(os.path.join(folder, "tokenizer.json"))
                info["removed"] = ["tokenizer.json"]
            try:
                reloaded = AutoTokenizer.from_pretrained(folder)
                _, mismatches = self.check_tokenizer(reloaded, encoding, spec["vocab"], TOKENIZER_TEXTS)
                ids_ok = all(reloaded.convert_tokens_to_ids(t) == len(vocab) + i for i, t in enumerate(added))
                info["reload_without_tokenizer_json"] = {"class": type(reloaded).__name__,
                                                         "mismatches_vs_tiktoken": mismatches,
                                                         "added_token_ids_ok": ids_ok}
            except Exception as exc:
                info["reload_without_tokenizer_json"] = {"error": f"{type(exc).__name__}: {exc}"}
            log(f"{name}: reload from vocab.json + merges.txt: {info['reload_without_tokenizer_json']}")
        info["final_files"] = sorted(os.listdir(folder))
        return info


def run_oracle(args):
    out_dir = os.path.abspath(args.out)
    work_dir = os.path.join(args.work or tempfile.gettempdir(), "whisper-oracle")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(work_dir, exist_ok=True)
    LOG.path = os.path.join(out_dir, "log.txt")
    t0 = time.time()
    oracle = None
    try:
        LOG.capture_library_messages("always")
        try:
            dump_library_sources(out_dir)
        except Exception as exc:
            log("could not pack the transformers sources:", exc)
        oracle = Oracle(out_dir, work_dir, args.seed_budget, args.gap_target, args.max_seeds)
        tokenizer_cases = []
        for name, spec in MODELS.items():
            if args.only and name not in args.only:
                continue
            try:
                tokenizer_cases += oracle.build(name, spec)
            except Exception as exc:
                oracle.error(f"{name}: build", exc)
            folder = os.path.join(work_dir, name)
            if os.path.isdir(folder):
                pack(folder, name, out_dir)
        order = {"gpt2": 0, "multilingual": 1}
        tokenizer_cases.sort(key=lambda c: order[c["vocab"]])
        with open(os.path.join(out_dir, "tokenizer_cases.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_cases, f, indent=1, ensure_ascii=False)
            f.write("\n")
    except Exception as exc:
        log("FATAL", type(exc).__name__, exc)
        log(traceback.format_exc())
    finally:
        summary = {"seconds": round(time.time() - t0, 1)}
        if oracle is not None:
            summary.update(models=oracle.summary, errors=oracle.errors, versions=oracle.versions)
        log("SUMMARY", json.dumps(jsonable(summary), indent=1))


def pack(folder, name, out_dir):
    """Two gzip'd tars per model (each well under the 16 MiB a returned file may have)."""
    files = sorted(os.listdir(folder))
    groups = {
        "model": [f for f in files if not f.startswith("reference.")],
        "ref": [f for f in files if f.startswith("reference.")],
    }
    for part, members in groups.items():
        path = os.path.join(out_dir, f"{name}.{part}.tar.gz")
        with tarfile.open(path, "w:gz") as tar:
            for member in members:
                tar.add(os.path.join(folder, member), arcname=f"{name}/{member}")
        log(f"packed {path}: {os.path.getsize(path)} bytes, {members}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="output folder (on the GPU machine: $OUT)")
    parser.add_argument("--work", help="scratch folder (default: the system's temporary folder)")
    parser.add_argument("--selftest", action="store_true", help="check the pure-Python parts only")
    parser.add_argument("--only", nargs="*", help="model names to build (default: all)")
    parser.add_argument("--seed-budget", type=float, default=120.0, help="seconds of seed search per model")
    parser.add_argument("--max-seeds", type=int, default=40)
    parser.add_argument("--gap-target", type=float, default=3e-3,
                        help="wanted minimum top-2 gap / decision margin over all greedy steps")
    args = parser.parse_args()
    if args.selftest:
        selftest()
        return
    if not args.out:
        parser.error("--out is required (or --selftest)")
    run_oracle(args)


if __name__ == "__main__":
    main()
