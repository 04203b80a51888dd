#!/usr/bin/env python3
"""The speed of Hugging Face transformers' Whisper on a CUDA GPU, as a baseline for `hark bench`.

A real Whisper configuration with random weights (built from WhisperConfig, no download), float16,
SDPA attention, plain eager PyTorch (no torch.compile, no static cache, no CUDA graphs): how
transformers runs out of the box. Timed with CUDA events after a warm-up:

  encoder   one forward of the encoder on B random 30-s log-mels; ms per window = median / B
  prompt    the decoder on the 4-token prompt <|startoftranscript|><|en|><|transcribe|>
            <|notimestamps|> for B sequences, encoder output given (this also computes the
            cross-attention K/V); ms per window = median / B
  step      one decoder forward of B sequences, 1 new token each, the K/V cache (past_key_values)
            and the encoder output reused, logits over the whole vocabulary, next token = argmax;
            median (and fastest) of --steps steps after the prompt. At small batches the step is
            bound by Python and kernel launches, and its time varies a lot from step to step
  RTFx      of hark bench's standard workload, 1 h of audio = 120 windows x 120 tokens:
            3600 s / (120 x (encoder + prompt per window) + 120 x 120 x step / B)
  peak      torch.cuda.max_memory_allocated() while timing that batch size (weights included)

    python3 bench/transformers_whisper.py --model large-v3 --batches 1,16

prints a table and, last, one line `JSON {...}` for scripts. About 30 s for large-v3 on an H200.
"""

import argparse
import json
import platform
import statistics
import time

# name: (d_model, encoder layers, decoder layers, heads, mels, vocab); ffn = 4 x d_model.
# The openai/whisper-* checkpoints' config.json values (the .en models are the same size).
CONFIGS = {
    "tiny": (384, 4, 4, 6, 80, 51865),
    "base": (512, 6, 6, 8, 80, 51865),
    "small": (768, 12, 12, 12, 80, 51865),
    "medium": (1024, 24, 24, 16, 80, 51865),
    "large-v2": (1280, 32, 32, 20, 80, 51865),
    "large-v3": (1280, 32, 32, 20, 128, 51866),
    "large-v3-turbo": (1280, 32, 4, 20, 128, 51866),
}

# <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>: large-v3 added one language
# token (<|yue|>), which moves the task and control tokens up by one.
PROMPTS = {51865: [50258, 50259, 50359, 50363], 51866: [50258, 50259, 50360, 50364]}

WINDOWS, TOKENS = 120, 120  # the standard workload: 1 h of 30-s windows, 120 tokens each


def make_model(name):
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    d_model, encoder_layers, decoder_layers, heads, mels, vocab = CONFIGS[name]
    config = WhisperConfig(
        vocab_size=vocab, num_mel_bins=mels, d_model=d_model, encoder_layers=encoder_layers,
        decoder_layers=decoder_layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
        encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model, max_source_positions=1500,
        max_target_positions=448, decoder_start_token_id=50258, bos_token_id=50257,
        eos_token_id=50257, pad_token_id=50256, scale_embedding=False, tie_word_embeddings=True,
        use_cache=True)
    config._attn_implementation = "sdpa"
    torch.set_default_dtype(torch.float16)  # parameters made in float16 straight away
    try:
        with torch.device("cuda"):
            model = WhisperForConditionalGeneration(config).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    if model.config._attn_implementation != "sdpa":
        model.set_attn_implementation("sdpa")
    return model


def timed(fn, repeats, warmup):
    """Median ms of fn() over `repeats` runs after `warmup` runs, by CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        times.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in times)


def decode(model, encoder_outputs, prompt, steps, events=None):
    """The prompt, then `steps` greedy steps of one token per sequence; with `events`, each step
    is bracketed by a pair of CUDA events appended there."""
    import torch

    out = model(encoder_outputs=encoder_outputs, decoder_input_ids=prompt, use_cache=True)
    cache = out.past_key_values
    token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
    for _ in range(steps):
        if events is not None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        out = model(encoder_outputs=encoder_outputs, decoder_input_ids=token, past_key_values=cache,
                    use_cache=True)
        cache = out.past_key_values
        token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
        if events is not None:
            end.record()
            events.append((start, end))
    return token


def bench_batch(model, name, batch, steps, repeats):
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    mels, vocab = CONFIGS[name][4:]
    torch.cuda.reset_peak_memory_stats()
    features = torch.randn(batch, mels, 3000, device="cuda", dtype=torch.float16)
    prompt = torch.tensor([PROMPTS[vocab]] * batch, device="cuda")
    with torch.no_grad():
        encoder_ms = timed(lambda: model.model.encoder(features), repeats, warmup=2)
        encoder_outputs = BaseModelOutput(last_hidden_state=model.model.encoder(features).last_hidden_state)
        prompt_ms = timed(
            lambda: model(encoder_outputs=encoder_outputs, decoder_input_ids=prompt, use_cache=True),
            repeats, warmup=2)
        decode(model, encoder_outputs, prompt, 8)  # warm-up of the cached path
        events = []
        decode(model, encoder_outputs, prompt, steps, events)
        torch.cuda.synchronize()
    step_times = [s.elapsed_time(e) for s, e in events]
    step_ms = statistics.median(step_times)
    encoder_per_window, prompt_per_window = encoder_ms / batch, prompt_ms / batch
    workload_s = (WINDOWS * (encoder_per_window + prompt_per_window)
                  + WINDOWS * TOKENS * step_ms / batch) / 1000
    return {
        "encoder_ms_per_window": round(encoder_per_window, 3),
        "prompt_ms_per_window": round(prompt_per_window, 3),
        "step_ms": round(step_ms, 3),
        "step_ms_min": round(min(step_times), 3),
        "workload_s": round(workload_s, 2),
        "rtfx": round(3600 / workload_s, 1),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="large-v3", choices=sorted(CONFIGS))
    parser.add_argument("--batches", default="1,16", help="batch sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=50, help="decoder steps timed (median)")
    parser.add_argument("--repeats", type=int, default=5, help="encoder/prompt runs timed (median)")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if not 8 <= args.steps <= 448 - 4:
        parser.error("--steps must be at least 8 and fit the decoder context (448) after the prompt")

    import torch
    import transformers

    if not torch.cuda.is_available():
        raise SystemExit("transformers_whisper.py needs a CUDA GPU")
    t0 = time.time()
    model = make_model(args.model)
    weights_gib = torch.cuda.memory_allocated() / 2**30
    print(f"model     {args.model} (random weights, float16, attention "
          f"{model.config._attn_implementation}), {weights_gib:.2f} GiB on "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    print(f"{'batch':>6} {'encoder ms/win':>15} {'prompt ms/win':>14} {'step ms':>9} "
          f"{'(fastest)':>9} {'peak GiB':>9} {'RTFx':>7}", flush=True)
    results = {}
    for batch in batches:
        r = bench_batch(model, args.model, batch, args.steps, args.repeats)
        results[str(batch)] = r
        print(f"{batch:>6} {r['encoder_ms_per_window']:>15.2f} {r['prompt_ms_per_window']:>14.2f} "
              f"{r['step_ms']:>9.3f} {r['step_ms_min']:>9.3f} {r['peak_gib']:>9.2f} "
              f"{r['rtfx']:>7.1f}", flush=True)
    print(f"RTFx: 1 h of audio = {WINDOWS} windows x (encoder + prompt + {TOKENS} steps), "
          f"steps shared by B windows; {time.time() - t0:.0f} s in all")
    line = {
        "tool": "transformers",
        "model": args.model,
        "dtype": "float16",
        "attention": model.config._attn_implementation,
        "weights_gib": round(weights_gib, 2),
        "steps_timed": args.steps,
        "repeats": args.repeats,
        "batches": results,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version(), "gpu": torch.cuda.get_device_name(0)},
    }
    print("JSON " + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
