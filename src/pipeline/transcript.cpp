#include "pipeline/transcript.h"

namespace hark {

std::string Transcript::text() const {
  std::string joined;
  for (const Segment& segment : segments) joined += segment.text;
  return joined;
}

}  // namespace hark
