#include "models/parakeet/transcribe.h"
#include <algorithm>

#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"

namespace hark::parakeet {

namespace {

// The marks NeMo (and transformers' ParakeetProcessor) attach to the preceding TDT token.
bool is_punctuation(const std::string& text) {
  static constexpr std::string_view kMarks[] = {"?", "'", "\u00a1", "\u00bf", "-", ":",
                                                ",", "%", "/",      ".",      "!"};
  for (std::string_view mark : kMarks) {
    if (text == mark) return true;
  }
  return false;
}

void check_piece(const Model& model, const Piece& piece) {
  if (piece.samples.empty()) fail("Parakeet transcribe: the audio is empty (0 samples)");
  if (static_cast<int64_t>(piece.samples.size()) > model.max_samples()) {
    fail("Parakeet transcribe: a piece of ", piece.samples.size(), " samples (",
         static_cast<double>(piece.samples.size()) / model.config().sample_rate,
         " s) is longer than the ", model.max_samples(),
         " the model takes at once; split it first");
  }
}

}  // namespace

Segment make_segment(const Model& model, std::span<const Emission> emissions, const Piece& piece) {
  const Config& config = model.config();
  const Detokenizer& detokenizer = model.detokenizer();
  const double frame_seconds = model.frame_seconds();
  Segment segment;
  segment.start = piece.offset;
  segment.end = piece.offset + static_cast<double>(piece.samples.size()) / config.sample_rate;
  for (const Emission& emission : emissions) segment.tokens.push_back(emission.token);
  const std::string text = detokenizer.decode(segment.tokens);
  if (!text.empty()) segment.text = " " + text;

  // Times within the piece first (the punctuation rule copies them), the offset last.
  TextStream stream(detokenizer);
  std::optional<size_t> previous;  // the last token with text, in token_times
  for (const Emission& emission : emissions) {
    TimedText timed;
    const int span = config.head == Head::tdt ? emission.duration : 1;
    // Frames to seconds as transformers does: frame × seconds per frame.
    timed.start = emission.frame * frame_seconds;
    timed.end = (emission.frame + span) * frame_seconds;
    if (std::optional<std::string> added = stream.step(emission.token)) {
      timed.text = std::move(*added);
      if (config.head == Head::tdt && previous && is_punctuation(timed.text)) {
        timed.start = timed.end = segment.token_times[*previous].end;
      }
      previous = segment.token_times.size();
    }
    segment.token_times.push_back(std::move(timed));
  }

  for (const TimedText& token : segment.token_times) {
    if (token.text.empty()) continue;
    const bool new_word = token.text.front() == ' ';
    if (segment.words.empty() || new_word) segment.words.push_back({token.start, token.end, ""});
    TimedText& word = segment.words.back();
    word.text += word.text.empty() && new_word ? token.text.substr(1) : token.text;
    word.end = token.end;
  }
  std::erase_if(segment.words, [](const TimedText& word) { return word.text.empty(); });

  // The last encoder frame covers audio past the piece's end (frames are rounded up), and a
  // token there may claim a few frames more: no time runs past the piece, or joined pieces
  // would overlap.
  const double piece_seconds = segment.end - segment.start;
  for (std::vector<TimedText>* timed : {&segment.token_times, &segment.words}) {
    for (TimedText& entry : *timed) {
      entry.start = std::min(entry.start, piece_seconds) + piece.offset;
      entry.end = std::min(entry.end, piece_seconds) + piece.offset;
    }
  }
  return segment;
}

std::vector<std::vector<size_t>> batches_longest_first(std::span<const size_t> lengths,
                                                       size_t batch_size) {
  std::vector<size_t> order(lengths.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
  if (batch_size == 0) batch_size = std::max<size_t>(order.size(), 1);
  std::vector<std::vector<size_t>> batches;
  for (size_t j = 0; j < order.size(); ++j) {
    if (j % batch_size == 0) batches.emplace_back();
    batches.back().push_back(order[j]);
  }
  return batches;
}

std::vector<Segment> transcribe_pieces(const Model& model, std::span<const Piece> pieces,
                                       size_t batch_size,
                                       const std::function<void(size_t)>& progress) {
  std::vector<size_t> batched;  // the pieces that go to the model
  std::vector<size_t> lengths;
  for (size_t i = 0; i < pieces.size(); ++i) {
    check_piece(model, pieces[i]);
    if (static_cast<int64_t>(pieces[i].samples.size()) < model.min_samples()) continue;
    batched.push_back(i);
    lengths.push_back(pieces[i].samples.size());
  }
  // Pieces of many files (or a recording's last, short piece) would otherwise pad short ones to
  // long ones. A piece's result does not depend on its batch.
  const std::vector<std::vector<size_t>> order = batches_longest_first(lengths, batch_size);
  std::vector<std::vector<std::span<const float>>> batches;
  for (const std::vector<size_t>& members : order) {
    batches.emplace_back();
    for (size_t j : members) batches.back().push_back(pieces[batched[j]].samples);
  }
  std::vector<std::vector<Emission>> decoded(pieces.size());
  // Pieces done: the short ones at once, then each batch's.
  size_t done = pieces.size() - batched.size();
  encode_and_decode(model, batches, nullptr,
                    [&](size_t batch, std::vector<std::vector<Emission>> emissions) {
                      for (size_t k = 0; k < emissions.size(); ++k) {
                        decoded[batched[order[batch][k]]] = std::move(emissions[k]);
                      }
                      done += emissions.size();
                      if (progress) progress(done);
                    });
  std::vector<Segment> segments;
  for (size_t i = 0; i < pieces.size(); ++i) {
    segments.push_back(make_segment(model, decoded[i], pieces[i]));
  }
  return segments;
}

Transcript transcribe(const Model& model, std::span<const float> samples) {
  const Piece piece{samples, 0.0};
  Transcript transcript;
  transcript.duration = static_cast<double>(samples.size()) / model.config().sample_rate;
  for (Segment& segment : transcribe_pieces(model, std::span<const Piece>(&piece, 1))) {
    if (!segment.text.empty()) transcript.segments.push_back(std::move(segment));
  }
  return transcript;
}

}  // namespace hark::parakeet
