// Greedy decoding's rules (docs/parakeet.md §5): a model computes the logits of a step and their
// argmax, and these rules decide what is emitted and where each utterance goes next. The CPU model
// runs them as they are, the CUDA model the CTC collapse; its transducer search runs on the device
// and repeats TransducerSearch's rules there (compute/cuda/kernels_transducer.cu, tested against
// this class): a change to them must be made in both places.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/parakeet/config.h"
#include "models/parakeet/model.h"

namespace hark::parakeet {

// The index of the largest of `count` values; the first one on ties, as torch.argmax.
int32_t argmax(const float* values, int count);

// CTC (§5.1): one utterance's emissions from the argmax of each of its frames: repeats
// collapsed, blanks dropped, each token timed at the first frame of its run. With a pattern, its
// tokens replace the argmax (Model::decode_pattern).
std::vector<Emission> collapse_ctc(std::span<const int32_t> frame_tokens, const Config& config,
                                   const EmissionPattern* pattern = nullptr);

// RNN-T (§5.2) and TDT (§5.3) for B utterances decoded in lockstep, each with its own frame
// pointer. A step goes:
//   next_step()             collects the utterances that still decode (false: none does);
//   active(), frame(b)      which ones need the joint network, and on which encoder frame;
//   decide(b, token, d)     for each of them, with the argmax of its token logits and (TDT) of
//                           its duration logits; returns the token b emitted, which its
//                           prediction network must take before the next step, or −1 for a
//                           blank (nothing to take).
// With a pattern (Model::decode_pattern), its decisions replace the argmax's.
class TransducerSearch {
 public:
  // frames[b]: the valid encoder frames T of utterance b. The pattern, if any, must outlive the
  // search.
  TransducerSearch(const Config& config, std::vector<int64_t> frames,
                   const EmissionPattern* pattern = nullptr);

  bool next_step();
  const std::vector<int64_t>& active() const { return active_; }
  int64_t frame(int64_t utterance) const { return frame_[utterance]; }
  // duration: the index of the largest duration logit (TDT; ignored for RNN-T).
  int32_t decide(int64_t utterance, int32_t token, int32_t duration);
  // The emissions per utterance; the search is spent afterwards.
  std::vector<std::vector<Emission>> take_emissions() { return std::move(emissions_); }

 private:
  const Config& config_;
  const EmissionPattern* pattern_;
  bool tdt_;
  int32_t blank_;
  std::vector<int64_t> frames_;
  std::vector<int64_t> frame_, steps_;
  std::vector<int> symbols_;  // RNN-T: tokens emitted on the current frame
  std::vector<int64_t> active_;
  std::vector<std::vector<Emission>> emissions_;
};

}  // namespace hark::parakeet
