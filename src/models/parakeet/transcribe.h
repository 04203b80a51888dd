// Parakeet transcription: pieces of audio encoded and decoded as one batch, their tokens turned
// into text with token and word timestamps (docs/parakeet.md §6, and transformers'
// ParakeetProcessor.decode(..., durations=...) for the token times).
//
// Token times: start = frame × frame_seconds; end = start + duration frames for TDT (a token of
// duration 0 has start = end), start + 1 frame for RNN-T and CTC. A TDT token whose text is one
// punctuation mark (? ' ¡ ¿ - : , % / . !) gets start = end = the previous token's end.
// Times past the end of the piece (its last encoder frame covers a little more than the audio)
// are clamped to that end, where transformers' would run on. Words
// start at each token whose text starts with a space (and at the first) and run from the start
// of their first token to the end of their last.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "models/parakeet/model.h"
#include "pipeline/transcript.h"

namespace hark::parakeet {

// A piece of 16-kHz mono audio and where it sits in the recording.
struct Piece {
  std::span<const float> samples;
  double offset = 0;  // seconds from the start of the recording to the piece's first sample
};

// One segment per piece, in order: start and end are the piece's bounds; text, tokens (the
// emitted ones, specials included), token_times (one per token; a token that adds no text, a
// special one, has empty text) and words as above, all times offset by the piece's offset. Text
// starts with a space unless empty, as Whisper's segments do, so that segments join into
// Transcript::text(). A piece shorter than model.min_samples() holds no speech: its segment has
// no text. The other pieces are encoded and decoded in batches of batch_size (0: all in one),
// longest first so that a batch holds pieces of similar lengths, by encode_and_decode (model.h:
// on a GPU the next batch encodes while one decodes); after each batch, progress(pieces done so
// far) when given. Throws hark::Error on an empty piece or one
// longer than model.max_samples().
std::vector<Segment> transcribe_pieces(const Model& model, std::span<const Piece> pieces,
                                       size_t batch_size = 0,
                                       const std::function<void(size_t)>& progress = {});

// Batches of at most batch_size (0: one batch of all) of the items whose lengths are given, as
// their indices, longest first: a batch is padded to its longest item, so that items of similar
// lengths share one. Equal lengths keep their order.
std::vector<std::vector<size_t>> batches_longest_first(std::span<const size_t> lengths,
                                                       size_t batch_size);

// The segment of one decoded piece (what transcribe_pieces does after decoding).
Segment make_segment(const Model& model, std::span<const Emission> emissions, const Piece& piece);

// A recording of at most model.max_samples() samples as one piece; the transcript keeps its
// segment only when it has text. Language is left empty (Parakeet does not report one). Throws
// hark::Error on empty audio, as Whisper's transcribe does.
Transcript transcribe(const Model& model, std::span<const float> samples);

}  // namespace hark::parakeet
