#include "pipeline/transcript.h"

#include <gtest/gtest.h>

TEST(Transcript, TextJoinsSegmentsInOrder) {
  hark::Transcript transcript;
  transcript.segments.resize(2);
  transcript.segments[0].text = " Hello";
  transcript.segments[1].text = " world.";
  EXPECT_EQ(transcript.text(), " Hello world.");
}
