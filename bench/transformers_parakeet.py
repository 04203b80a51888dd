#!/usr/bin/env python3
"""The speed of Hugging Face transformers' Parakeet on a CUDA GPU, as a baseline for `hark bench`.

A real Parakeet configuration with random weights (ParakeetForTDT / ForRNNT / ForCTC built from a
config, no download), bfloat16, SDPA attention, plain eager PyTorch: how transformers runs out of
the box. Input: noise at speech level (RMS 0.1), which costs what speech costs. Two cases:

  clip      one 10-s clip at batch 1 (latency)
  batch     --batch utterances of --seconds each, 64 x 20 s by default (offline throughput)

and for each, timed with wall clock and torch.cuda.synchronize() after a warm-up (median):

  features  ParakeetFeatureExtractor on the raw audio (on the GPU where its `device` argument
            works, else on the CPU) and the copy of its output to the GPU
  encoder   model.encoder alone on those features
  generate  model.generate(): the encoder again, then greedy decoding (CTC: the argmax)
  e2e       features + generate; RTFx = audio seconds / e2e seconds

Random weights emit arbitrarily, so, as `hark bench` does, the transducers follow a fixed pattern:
a forward hook on the joint network's output layer (`joint.head`) replaces its logits so that the
argmax is a token on every 4th encoder frame (id 1 + frame % (V - 2), TDT duration 2) and a blank
(TDT duration 1) elsewhere. transformers takes its decisions, and its frame pointers, from those
logits; the hook keeps its own pointers on the GPU, in step. Everything else of generate() runs
as usual (decoder LSTM and joint network for the whole batch every step).

ParakeetFeatureExtractor needs librosa (for its mel filterbank), which the GPU machine lacks: the
stand-in of tools/oracle/parakeet.py is installed into a temporary folder first, as the oracle does.

    python3 bench/transformers_parakeet.py --model parakeet-tdt-0.6b-v2

prints a table and, last, one line `JSON {...}` for scripts.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_RATE = 16000

# The configurations of src/models/parakeet/synthetic.cpp (docs/parakeet.md §1); keep them equal.
# Every one: d_model 1024, 8 heads, ffn 4096, conv kernel 9, 8x subsampling with 256 channels;
# transducers: a 2-layer LSTM of 640, joint 640. name: (head, vocab incl. blank, layers, mels,
# biases, scale_input).
CONFIGS = {
    "parakeet-tdt-0.6b-v2": ("tdt", 1025, 24, 128, False, False),
    "parakeet-tdt-0.6b-v3": ("tdt", 8193, 24, 128, False, False),
    "parakeet-ctc-1.1b": ("ctc", 1025, 42, 80, True, True),
    "parakeet-rnnt-1.1b": ("rnnt", 1025, 42, 80, True, True),
    "parakeet-ctc-0.6b": ("ctc", 1025, 24, 80, True, True),
}
DURATIONS = [0, 1, 2, 3, 4]
FRAMES_PER_TOKEN, TOKEN_DURATION = 4, 2  # the pattern of hark bench (model.h EmissionPattern)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def make_model(name, dtype):
    import torch
    import transformers

    head, vocab, layers, mels, bias, scale_input = CONFIGS[name]
    encoder = transformers.ParakeetEncoderConfig(
        hidden_size=1024, num_hidden_layers=layers, num_attention_heads=8, intermediate_size=4096,
        hidden_act="silu", attention_bias=bias, convolution_bias=bias, conv_kernel_size=9,
        subsampling_factor=8, subsampling_conv_channels=256, subsampling_conv_kernel_size=3,
        subsampling_conv_stride=2, num_mel_bins=mels, scale_input=scale_input,
        max_position_embeddings=5000, dropout=0.0, dropout_positions=0.0, layerdrop=0.0,
        activation_dropout=0.0, attention_dropout=0.0)
    blank = vocab - 1
    common = dict(vocab_size=vocab, encoder_config=encoder.to_dict())
    if head == "ctc":
        config = transformers.ParakeetCTCConfig(pad_token_id=blank, **common)
        cls = transformers.ParakeetForCTC
    else:
        extra = dict(decoder_hidden_size=640, num_decoder_layers=2, hidden_act="relu",
                     max_symbols_per_step=10, blank_token_id=blank, pad_token_id=blank)
        if head == "tdt":
            config = transformers.ParakeetTDTConfig(durations=DURATIONS, **extra, **common)
            cls = transformers.ParakeetForTDT
        else:
            config = transformers.ParakeetRNNTConfig(**extra, **common)
            cls = transformers.ParakeetForRNNT
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = cls(config).eval()
    if model.config._attn_implementation != "sdpa":
        model.set_attn_implementation("sdpa")
    model.to(dtype)
    generation = model.generation_config
    generation.pad_token_id = blank
    if head != "ctc":
        generation.decoder_start_token_id = blank
    return model, head, vocab, mels


class PatternHook:
    """Forward hook on joint.head: its logits [..., V (+ D)] replaced by the pattern's decisions
    for the rows of one generate() call. Each call of the head is one decoding step of every row."""

    def __init__(self, batch, head, vocab, device):
        import torch

        self.head, self.vocab, self.blank = head, vocab, vocab - 1
        self.frame = torch.zeros(batch, dtype=torch.long, device=device)
        self.emitted_here = torch.zeros(batch, dtype=torch.bool, device=device)  # RNN-T
        self.steps = 0

    def __call__(self, module, inputs, output):
        import torch

        flat = output.reshape(-1, output.shape[-1])
        if flat.shape[0] != self.frame.shape[0]:
            raise RuntimeError(f"joint.head output {tuple(output.shape)}: expected one row per utterance")
        emit = self.frame % FRAMES_PER_TOKEN == 0
        if self.head == "rnnt":
            emit &= ~self.emitted_here
        token = torch.where(emit, 1 + self.frame % (self.vocab - 2), torch.full_like(self.frame, self.blank))
        logits = torch.full_like(flat, -30.0)
        logits.scatter_(1, token[:, None], 30.0)
        if self.head == "tdt":
            duration = torch.where(emit, torch.full_like(self.frame, TOKEN_DURATION), torch.ones_like(self.frame))
            # Below the token's logit: generate() may take its argmax over all V + D columns.
            logits.scatter_(1, (self.vocab + duration)[:, None], 20.0)
            self.frame += duration
        else:
            self.frame += (~emit).long()
            self.emitted_here = emit
        self.steps += 1
        return logits.reshape(output.shape)


def noise(batch, seconds, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    return [(0.17 * rng.uniform(-1.0, 1.0, int(seconds * SAMPLE_RATE))).astype(np.float32) for _ in range(batch)]


def wall_ms(fn, repeats, warmup):
    """Median wall-clock ms of fn() (GPU work included) over `repeats` runs after `warmup` runs."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def make_features(extractor, dtype):
    """f(audio) -> (input_features, attention_mask) on the GPU; and where the extractor computes."""
    import torch

    def on(device):
        def features(audio):
            out = extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt", device=device)
            return out["input_features"].to("cuda", dtype), out["attention_mask"].to("cuda")
        return features

    for device in ("cuda", "cpu"):
        try:
            on(device)(noise(2, 1.0, 0))
            return on(device), device
        except Exception as error:  # some versions compute on the CPU only
            print(f"features on {device}: {type(error).__name__}: {error}", flush=True)
    raise SystemExit("ParakeetFeatureExtractor failed on both the GPU and the CPU")


def bench_case(model, head, vocab, features, batch, seconds, repeats):
    import torch

    audio = noise(batch, seconds, 1)
    torch.cuda.reset_peak_memory_stats()
    hooks = []

    def generate():
        feats, mask = features(audio)
        hook = PatternHook(batch, head, vocab, "cuda") if head != "ctc" else None
        handle = model.get_submodule("joint.head").register_forward_hook(hook) if hook else None
        try:
            model.generate(input_features=feats, attention_mask=mask)
        finally:
            if handle:
                handle.remove()
        hooks.append(hook)

    with torch.no_grad():
        features_ms = wall_ms(lambda: features(audio), repeats, warmup=1)
        feats, mask = features(audio)
        encoder_ms = wall_ms(lambda: model.encoder(input_features=feats, attention_mask=mask), repeats, warmup=1)
        e2e_ms = wall_ms(generate, repeats, warmup=1)
    audio_s = batch * seconds
    return {
        "batch": batch,
        "seconds": seconds,
        "features_ms": round(features_ms, 2),
        "encoder_ms": round(encoder_ms, 2),
        "e2e_ms": round(e2e_ms, 2),  # features + generate (encoder + decoding)
        "decode_steps": hooks[-1].steps if hooks[-1] else None,
        "rtfx_encoder": round(audio_s / (encoder_ms / 1000), 1),
        "rtfx_e2e": round(audio_s / (e2e_ms / 1000), 1),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="parakeet-tdt-0.6b-v2", choices=sorted(CONFIGS))
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--batch", type=int, default=64, help="utterances of the throughput case")
    parser.add_argument("--seconds", type=float, default=20.0, help="their length")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per measure (median)")
    args = parser.parse_args()

    sys.path.insert(0, os.path.join(REPO, "tools", "oracle"))
    import parakeet as oracle  # tools/oracle/parakeet.py: the stand-in librosa

    stand_ins = oracle.install_stand_in_packages(tempfile.mkdtemp(prefix="hark-bench-"))
    import torch
    import transformers

    if not torch.cuda.is_available():
        raise SystemExit("transformers_parakeet.py needs a CUDA GPU")
    t0 = time.time()
    dtype = getattr(torch, DTYPES[args.dtype])
    model, head, vocab, mels = make_model(args.model, dtype)
    weights_gib = torch.cuda.memory_allocated() / 2**30
    extractor = transformers.ParakeetFeatureExtractor(feature_size=mels, sampling_rate=SAMPLE_RATE)
    features, features_device = make_features(extractor, dtype)
    print(f"model     {args.model} (random weights, {DTYPES[args.dtype]}, attention "
          f"{model.config._attn_implementation}), {weights_gib:.2f} GiB on {torch.cuda.get_device_name(0)}; "
          f"features on {features_device}", flush=True)
    if head != "ctc":
        print(f"decoding  a token every {FRAMES_PER_TOKEN} encoder frames"
              f"{f', duration {TOKEN_DURATION}' if head == 'tdt' else ''}, blanks elsewhere", flush=True)
    print(f"{'case':<6} {'batch':>5} {'audio s':>8} {'features ms':>12} {'encoder ms':>11} {'e2e ms':>10} "
          f"{'steps':>6} {'RTFx enc':>9} {'RTFx e2e':>9} {'peak GiB':>9}", flush=True)
    results = {}
    for case, batch, seconds in (("clip", 1, 10.0), ("batch", args.batch, args.seconds)):
        r = bench_case(model, head, vocab, features, batch, seconds, args.repeats)
        results[case] = r
        print(f"{case:<6} {batch:>5} {batch * seconds:>8.0f} {r['features_ms']:>12.2f} {r['encoder_ms']:>11.2f} "
              f"{r['e2e_ms']:>10.2f} {str(r['decode_steps']):>6} {r['rtfx_encoder']:>9.1f} "
              f"{r['rtfx_e2e']:>9.1f} {r['peak_gib']:>9.2f}", flush=True)
    print(f"{time.time() - t0:.0f} s in all")
    line = {
        "tool": "transformers",
        "model": args.model,
        "dtype": DTYPES[args.dtype],
        "attention": model.config._attn_implementation,
        "weights_gib": round(weights_gib, 2),
        "features_device": features_device,
        "pattern": {"frames_per_token": FRAMES_PER_TOKEN, "duration": TOKEN_DURATION} if head != "ctc" else None,
        "repeats": args.repeats,
        "cases": results,
        "stand_ins": stand_ins,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version(), "gpu": torch.cuda.get_device_name(0)},
    }
    print("JSON " + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
