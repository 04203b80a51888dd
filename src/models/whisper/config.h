// Whisper's hyper-parameters and vocabulary, read from (and checked against) GGUF keys
// (docs/formats.md).
#pragma once

#include "models/whisper/model.h"

namespace hark::gguf {
class Writer;
}

namespace hark::whisper {

// Reads the whisper.* size keys; throws hark::Error naming the file and key when one is missing,
// not positive, or inconsistent (d_model not divisible by the heads, an architecture other
// than whisper).
Config read_config(const gguf::File& file);

// Reads whisper.token.*, whisper.languages and the generation rules; throws hark::Error naming
// the key when a required one is missing or an id falls outside the vocabulary.
Vocabulary read_vocabulary(const gguf::File& file, const Config& config);

// The inverse of the readers: the whisper.* keys of `config` and `vocabulary`.
void write_config(gguf::Writer& writer, const Config& config);
void write_vocabulary(gguf::Writer& writer, const Vocabulary& vocabulary);

}  // namespace hark::whisper
