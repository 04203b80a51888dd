// Cross-attention over INT8 frames on Hopper's asynchronous tensor cores (frame_attention_sm90.cu):
// frame_attention (kernels.h) where each frame is read as width bytes instead of width 16-bit
// values. A decoder step of large-v3 at batch 120 reads its windows' frames 32 times, once a layer:
// 7.4 GB in INT8, where the INT8 K/V cache takes 15.7 GB.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

// Whether frame_attention_int8 runs these shapes: a GPU of compute capability 9.0, F16 queries,
// at most 24 heads, a width that is a multiple of 128 up to 1280 (every Whisper size).
bool frame_attention_int8_runs(Element e, int heads, int64_t width);

// out [rows, heads, width] F16: frame_attention (kernels.h) over the quantised frames of
// `frames` (quantize_frames), row r reading window r / rows_per_window (or the one window of all
// rows). F32 accumulation and softmax; the scores in integers, the queries times the channel
// scales split in two signed bytes (about 15 bits); the frames' codes and the probabilities enter
// the values' product as F16.
void frame_attention_int8(Element e, const void* queries, int64_t rows, int heads, int64_t width,
                          const Int8Frames& frames, int frame_count, int64_t rows_per_window,
                          void* out, cudaStream_t stream);

}  // namespace hark::compute::cuda
