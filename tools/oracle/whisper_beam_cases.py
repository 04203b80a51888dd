# Beam-search references for tests/parity/whisper_generate_parity_test.cpp: transformers'
# generate(num_beams=n) on the random-weight models of tests/data/whisper (made by whisper.py), in
# settings where beams end at different lengths, the early-stopping heuristic fires, and the
# timestamp rules ban many tokens. Together these cases tell transformers' beam search apart from
# openai-whisper's (renormalisation after the rules, length normalisation, stopping).
#
# Run from the repository root on the machine with transformers (5.17 when these were made):
#   python3 tools/oracle/whisper_beam_cases.py [OUTPUT]   (default tests/data/whisper/beam_cases.json)
import json, sys, wave
import numpy as np
import torch
from transformers import (LogitsProcessor, LogitsProcessorList, WhisperFeatureExtractor,
                          WhisperForConditionalGeneration)

DATA = "tests/data"

def read_wav(path):
    with wave.open(path, "rb") as w:
        raw = w.readframes(w.getnframes())
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0

class Recorder(LogitsProcessor):
    def __init__(self):
        self.windows, self.last_len = [], None
    def __call__(self, input_ids, scores):
        length = input_ids.shape[1]
        if self.last_len is None or length != self.last_len + 1:
            self.windows.append({"decoder_prompt": input_ids[0].tolist(), "steps": 0,
                                 "batch": input_ids.shape[0]})
        self.last_len = length
        self.windows[-1]["steps"] += 1
        return scores

CASES = []
for audio in ("jfk", "beckett", "librivox-0870"):
    for beams in (2, 5):
        for ts in (False, True):
            CASES.append(("tiny-random-tiny.en", audio, dict(num_beams=beams, max_new_tokens=40,
                                                             return_timestamps=ts)))
for audio in ("jfk", "librivox-0870"):
    for beams, ts in ((3, True), (4, False)):
        CASES.append(("tiny-random-large-v3", audio, dict(num_beams=beams, max_new_tokens=30,
                                                          language="en", task="transcribe",
                                                          return_timestamps=ts)))

results = []
models = {}
for name, audio, kwargs in CASES:
    if name not in models:
        m = WhisperForConditionalGeneration.from_pretrained(f"{DATA}/whisper/{name}",
                                                            torch_dtype=torch.float32).eval()
        models[name] = m
    model = models[name]
    fe = WhisperFeatureExtractor(feature_size=model.config.num_mel_bins)
    samples = read_wav(f"{DATA}/audio/{audio}.wav")
    feats = fe(samples, sampling_rate=16000, return_tensors="pt").input_features
    rec = Recorder()
    with torch.no_grad():
        out = model.generate(input_features=feats, do_sample=False,
                             logits_processor=LogitsProcessorList([rec]), **kwargs)
    seq = out if isinstance(out, torch.Tensor) else out["sequences"]
    results.append({"model": name, "audio": audio, "kwargs": kwargs,
                    "sequences": seq[0].tolist(), "windows": rec.windows})
    print(name, audio, kwargs, len(seq[0]), [w["steps"] for w in rec.windows], flush=True)

output = sys.argv[1] if len(sys.argv) > 1 else f"{DATA}/whisper/beam_cases.json"
header = {
    "made_by": "tools/oracle/whisper_beam_cases.py",
    "what": "generate(input_features, do_sample=False, **kwargs) on the WhisperFeatureExtractor "
            "log-mel (padded to 30 s) of tests/data/audio/<audio>.wav (int16 / 32768); sequences: "
            "what generate() returned (no prompt, no <|endoftext|>); windows: one per decoding call "
            "transformers made (its decoder prompt, the steps it ran, the number of beams)",
    "versions": {"transformers": __import__("transformers").__version__, "torch": torch.__version__},
}
# One case per line, so that a diff shows which case changed.
lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in header.items()] + [' "cases": [']
lines += ["  " + json.dumps(c) + ("," if i + 1 < len(results) else "") for i, c in enumerate(results)]
lines += [" ]", "}"]
with open(output, "w") as f:
    f.write("\n".join(lines) + "\n")
