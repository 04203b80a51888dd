// Subtitle cues from word timings: a model that times its words (Parakeet) returns one segment
// per piece of audio, up to 20 minutes long, which no subtitle player can show as one cue.
// split_by_words() cuts such a segment into cues a viewer can read.
//
// Conventions of the segments it returns:
// - A word's text carries no surrounding space; a cue's text is its words joined by single
//   spaces, with one leading space as Whisper's segments have, so Transcript::text() still reads
//   as running text.
// - A cue runs from its first word's start to its last word's end. avg_logprob, no_speech_prob,
//   temperature and compression_ratio describe the decoded window, so every cue keeps the
//   source segment's values.
// - tokens[i] and token_times[i] stay paired. Each token goes to the cue of the word it belongs
//   to: by text where the tokens spell the words (a piece's "▁" or leading space marks nothing
//   but a word start), otherwise by time (the word the token starts in; a zero-length token at
//   a word's end, as TDT times punctuation, stays with that word). A segment with words but no
//   token times cannot place its tokens: the first cue keeps them all.
#pragma once

#include <cstddef>
#include <vector>

#include "pipeline/transcript.h"

namespace hark {

struct CueLimits {
  // A cue is cut before it would run longer than this, or hold more characters (Unicode code
  // points, spaces included) than max_chars: two lines of 42, the common subtitle standard. A
  // single word beyond either limit still makes one cue of its own.
  double max_seconds = 6.5;
  size_t max_chars = 84;
  // A cue ends after a sentence (. ? ! … 。 ？ ！ ؟ । and the like, closing quotes allowed after
  // them) once it has lasted this long; shorter, it would flash by, so the next sentence joins it.
  double min_sentence_seconds = 1.0;
  // A silence between two words longer than this always ends a cue, so no cue hangs on screen
  // through a pause.
  double pause_seconds = 0.6;
};

// Cuts `segment` into cues along its words. Where a cue must be cut for length, the cut goes
// to the best place in its second half: after a clause mark (, ; : and the like) or at the
// longest silence between words. A segment without words is returned unchanged, as the only
// element. Throws hark::Error when the limits are not positive or token_times is neither empty
// nor one per token.
std::vector<Segment> split_by_words(const Segment& segment, const CueLimits& limits = {});

// Every segment of `transcript` split by split_by_words(); language and duration are kept.
Transcript split_by_words(const Transcript& transcript, const CueLimits& limits = {});

}  // namespace hark
