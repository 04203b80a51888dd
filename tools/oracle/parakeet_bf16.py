#!/usr/bin/env python3
"""What bfloat16 costs transformers itself on the Parakeet reference models.

For each tests/data/parakeet/tiny-random-* model: the encoder output of the model loaded in
bfloat16 (weights and activations, on the GPU when there is one) against the float32
reference.safetensors encoder.<clip>, as the largest absolute difference over the largest
reference value (the relative error hark's tests use). Prints one line per model and clip and
writes tests/data/parakeet/transformers_bf16.json, to which tests/parity/parakeet_cuda_test.cpp
holds hark's BF16.

    python3 tools/oracle/parakeet_bf16.py     # from the repository root, needs torch + transformers
"""
import json
import os

import torch
import transformers
from safetensors.torch import load_file

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "parakeet")
CLIPS = ("jfk", "beckett", "librivox-0870")


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    summary = {}
    for kind in ("ctc", "rnnt", "tdt"):
        folder = os.path.join(ROOT, f"tiny-random-{kind}")
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            architecture = json.load(f)["architectures"][0]
        model = getattr(transformers, architecture).from_pretrained(folder, dtype=torch.bfloat16)
        model = model.to(device).eval()
        reference = load_file(os.path.join(folder, "reference.safetensors"))
        errors = {}
        for clip in CLIPS:
            features = reference[f"features.{clip}"][None].to(device, torch.bfloat16)
            mask = torch.ones(features.shape[:2], dtype=torch.long, device=device)
            with torch.no_grad():
                hidden = model.encoder(input_features=features, attention_mask=mask).last_hidden_state
            expected = reference[f"encoder.{clip}"].double()
            actual = hidden[0, : expected.shape[0]].double().cpu()
            errors[clip] = ((actual - expected).abs().max() / expected.abs().max()).item()
            print(f"tiny-random-{kind} {clip}: transformers bfloat16 encoder error {errors[clip]:.2e}")
        summary[kind] = errors
    with open(os.path.join(ROOT, "transformers_bf16.json"), "w", encoding="utf-8") as f:
        json.dump({"what": "transformers bfloat16 encoder output vs the float32 reference "
                           "encoder.<clip>: max |diff| / max |reference|, by "
                           "tools/oracle/parakeet_bf16.py",
                   "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                   "encoder_error": summary}, f, indent=1)
        f.write("\n")
    print("JSON", json.dumps(summary))


if __name__ == "__main__":
    main()
