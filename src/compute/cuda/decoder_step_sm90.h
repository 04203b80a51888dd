// A single sequence's decode step through every layer of a pre-norm transformer decoder with
// self- and cross-attention (Whisper's), in one persistent launch (decoder_step_sm90.cu).
//
// One token at a time, a step is bound by reading the weights once: large-v3's 32 layers take
// 1.6 GB, 0.48 ms at an H100's 3.35 TB/s. As a chain of one launch per product and attention
// (7 a layer), the step takes 1.46 ms on an H200 (bench/RESULTS.md): each launch fills the GPU
// with loads, drains, and waits for the one before it. Here one CTA an SM runs the whole step:
// its phases (8 a layer) wait for each other's data (tagged vectors), not by grid-wide barriers,
// and a copy warp in each CTA streams its share of the weights (and of the attentions' keys and
// values that earlier steps or the encoder wrote) into a ring of shared memory, as far ahead as
// the ring holds, with few bytes in flight at a time.
//
// It gives the launches' tokens (its GPU tests, at large-v3's widths over 100 and 400 tokens),
// and on an H100 it is 19 % faster than them: large-v3 1.283-1.296 ms against 1.580-1.592,
// turbo 0.234-0.236 against 0.261-0.265 (bench/RESULTS.md, forty-eighth session). On an H200
// its last measurement is of a form 0.29 ms slower on an H100 (the forty-first session: large-v3
// 1.500 against 1.461). Over Q8_0 weights (half the bytes to copy) large-v3 steps in 1.274 ms
// on an H100 against the launches' 1.423 (forty-ninth session). The Whisper decoder takes it by
// default for one sequence over native K/V; HARK_CUDA_STEP_KERNEL=0 turns it off.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

// One layer's weights, device pointers of the element type: the norms' γ and β, matrices [out,
// in] row-major, biases (null: none). qkv stacks the query, key and value rows [3d, d]; fc1 is
// [ffn, d], fc2 [d, ffn]; the other matrices [d, d]. With StepShape::q8_0 every matrix is Q8_0 in
// the device layout (kernels.h: its quants, then its scales), the rest of the element type.
struct StepLayer {
  const void* self_gamma = nullptr;
  const void* self_beta = nullptr;
  const void* qkv = nullptr;
  const void* qkv_bias = nullptr;
  const void* self_out = nullptr;
  const void* self_out_bias = nullptr;
  const void* cross_gamma = nullptr;
  const void* cross_beta = nullptr;
  const void* cross_q = nullptr;
  const void* cross_q_bias = nullptr;
  const void* cross_out = nullptr;
  const void* cross_out_bias = nullptr;
  const void* ffn_gamma = nullptr;
  const void* ffn_beta = nullptr;
  const void* fc1 = nullptr;
  const void* fc1_bias = nullptr;
  const void* fc2 = nullptr;
  const void* fc2_bias = nullptr;
  float self_eps = 1e-5f, cross_eps = 1e-5f, ffn_eps = 1e-5f;
};

// The sizes a step depends on: the model's width d (heads of 64), its feed-forward width, its
// layers, the frames of the cross-attention and the positions the self-attention caches hold;
// and the form of its matrices (16-bit, or Q8_0), which sets the bytes of a CTA's share.
struct StepShape {
  int64_t d = 0, ffn = 0;
  int heads = 0, layers = 0, frames = 0, capacity = 0;
  bool q8_0 = false;  // the matrices are Q8_0 (StepLayer), the activations 16-bit
};

// One step: the token's embedding x [d] goes through every layer; x is left holding the last
// layer's output (before the final norm). The caches hold position p of layer l at keys + l ·
// cache_layer_stride + p · d (values likewise), the step's own K and V are written at
// positions[0], and the self-attention reads lengths[0] positions. The caches are one matrix of
// rows of d values: cache_layer_stride is a whole number of rows, and so is values − keys, which
// is at least the capacity's rows. The cross-attention reads cross_lengths[0] frames; frame f of
// layer l at cross_keys + l · cross_layer_stride + f · cross_row_stride (values likewise).
// Strides count elements. scale multiplies the scores.
// scratch: decoder_step_scratch_bytes(shape), 16-byte aligned.
struct DecoderStep {
  Element e = Element::f16;
  StepShape shape;
  const StepLayer* layers = nullptr;  // device array [shape.layers]
  float scale = 1.0f;
  void* x = nullptr;
  void* keys = nullptr;
  void* values = nullptr;
  int64_t cache_layer_stride = 0;
  const int32_t* positions = nullptr;
  const int32_t* lengths = nullptr;
  const void* cross_keys = nullptr;
  const void* cross_values = nullptr;
  int64_t cross_layer_stride = 0, cross_row_stride = 0;
  const int32_t* cross_lengths = nullptr;
  void* scratch = nullptr;
};

// Whether decoder_step runs such a step on this GPU: an H100/H200, 16-bit elements, heads of 64
// values, d up to 3584 and ffn multiples of 8 (of 32 with Q8_0 matrices), no more heads than SMs,
// and each CTA's largest share of a phase twice in its shared memory. Every Whisper size fits an
// H100 SXM or H200.
bool decoder_step_runs(Element e, const StepShape& shape);
// decoder_step_runs's test of the shape and the layout alone, for a GPU of `multiprocessors`
// SMs (a CTA each) and `shared_per_block` bytes of shared memory a block: no GPU is needed
// (the tests check every Whisper size against an H100's 132 SMs and 227 KB).
bool decoder_step_fits(Element e, const StepShape& shape, int multiprocessors,
                       int64_t shared_per_block);
size_t decoder_step_scratch_bytes(const StepShape& shape);

// Runs the step (a cooperative launch: every CTA is resident at once). Pointers must be 16-byte
// aligned. Fails (hark::Error) for what decoder_step_runs refuses.
void decoder_step(const DecoderStep& step, cudaStream_t stream);

}  // namespace hark::compute::cuda
