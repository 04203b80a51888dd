#include "pipeline/output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"

namespace hark::output {
namespace {

Segment make_segment(double start, double end, std::string text) {
  Segment segment;
  segment.start = start;
  segment.end = end;
  segment.text = std::move(text);
  return segment;
}

// Two ordinary segments, one past the hour mark.
Transcript sample_transcript() {
  Transcript transcript;
  transcript.language = "en";
  transcript.duration = 3725.5;
  transcript.segments.push_back(make_segment(0.0, 2.54, " Hello there."));
  transcript.segments.back().tokens = {50364, 2425, 50491};
  transcript.segments.back().avg_logprob = -0.25f;
  transcript.segments.back().no_speech_prob = 0.1f;
  transcript.segments.back().temperature = 0.2f;
  transcript.segments.back().compression_ratio = 1.5f;
  transcript.segments.push_back(make_segment(3723.0, 3725.5, " General Kenobi! "));
  return transcript;
}

TEST(Output, FormatNamesRoundTrip) {
  for (Format format : {Format::txt, Format::json, Format::srt, Format::vtt}) {
    EXPECT_EQ(format_from_name(format_name(format)), format);
  }
  EXPECT_THROW(format_from_name("verbose_json"), Error);
  EXPECT_THROW(format_from_name("TXT"), Error);
}

TEST(Output, TimestampsRoundToMillisecondsAndGrowPastAnHour) {
  EXPECT_EQ(timestamp(0, ','), "00:00:00,000");
  EXPECT_EQ(timestamp(2.54, ','), "00:00:02,540");
  EXPECT_EQ(timestamp(59.9996, '.'), "00:01:00.000");
  EXPECT_EQ(timestamp(3725.5, '.'), "01:02:05.500");
  EXPECT_EQ(timestamp(100 * 3600 + 1.001, ','), "100:00:01,001");
  EXPECT_EQ(timestamp(-1, ','), "00:00:00,000");
  EXPECT_EQ(timestamp(std::numeric_limits<double>::quiet_NaN(), '.'), "00:00:00.000");
}

TEST(Output, TxtIsOneStrippedSegmentPerLine) {
  Transcript transcript = sample_transcript();
  transcript.segments.push_back(make_segment(4000, 4001, "  \n"));
  EXPECT_EQ(to_txt(transcript), "Hello there.\nGeneral Kenobi!\n");
  EXPECT_EQ(to_txt(Transcript{}), "");
}

TEST(Output, ControlCharactersNeverReachTheTerminal) {
  Transcript transcript;
  transcript.segments.push_back(make_segment(0, 1, " \x1b[31mred\x1b[0m\x07 \x7f"));
  transcript.segments.push_back(make_segment(1, 2, "\x1b"));
  EXPECT_EQ(to_txt(transcript), "[31mred[0m\n");
  EXPECT_EQ(to_srt(transcript), "1\n00:00:00,000 --> 00:00:01,000\n[31mred[0m\n\n");
  EXPECT_EQ(to_vtt(transcript), "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n[31mred[0m\n\n");
  EXPECT_NE(to_json(transcript).find("\\u001b[31m"), std::string::npos);
}

TEST(Output, SrtNumbersCuesFromOne) {
  EXPECT_EQ(to_srt(sample_transcript()),
            "1\n"
            "00:00:00,000 --> 00:00:02,540\n"
            "Hello there.\n"
            "\n"
            "2\n"
            "01:02:03,000 --> 01:02:05,500\n"
            "General Kenobi!\n"
            "\n");
}

TEST(Output, SrtSkipsEmptyCuesAndNeutralisesArrowsAndLineBreaks) {
  Transcript transcript;
  transcript.segments.push_back(make_segment(0, 1, " "));
  transcript.segments.push_back(make_segment(1, 2, " a --> b\n\nc"));
  EXPECT_EQ(to_srt(transcript), "1\n00:00:01,000 --> 00:00:02,000\na -> b  c\n\n");
}

TEST(Output, VttHasHeaderAndDotMilliseconds) {
  EXPECT_EQ(to_vtt(sample_transcript()),
            "WEBVTT\n"
            "\n"
            "00:00:00.000 --> 00:00:02.540\n"
            "Hello there.\n"
            "\n"
            "01:02:03.000 --> 01:02:05.500\n"
            "General Kenobi!\n"
            "\n");
  EXPECT_EQ(to_vtt(Transcript{}), "WEBVTT\n\n");
}

TEST(Output, VttEscapesMarkup) {
  Transcript transcript;
  transcript.segments.push_back(make_segment(0, 1, " <b>Tom & Jerry</b> --> "));
  EXPECT_EQ(
      to_vtt(transcript),
      "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n&lt;b&gt;Tom &amp; Jerry&lt;/b&gt; --&gt;\n\n");
}

TEST(Output, JsonHasEveryFieldInOrder) {
  EXPECT_EQ(to_json(sample_transcript(), -1),
            R"({"language":"en","duration":3725.5,"text":" Hello there. General Kenobi! ",)"
            R"("segments":[{"id":0,"start":0.0,"end":2.54,"text":" Hello there.",)"
            R"("tokens":[50364,2425,50491],"avg_logprob":-0.25,"no_speech_prob":0.1,)"
            R"("temperature":0.2,"compression_ratio":1.5},)"
            R"({"id":1,"start":3723.0,"end":3725.5,"text":" General Kenobi! ","tokens":[],)"
            R"("avg_logprob":0.0,"no_speech_prob":0.0,"temperature":0.0,"compression_ratio":0.0}]})"
            "\n");
}

TEST(Output, JsonEscapesTextAndRoundsTimes) {
  Transcript transcript;
  transcript.language = "fr";
  transcript.duration = 1.23456;
  transcript.segments.push_back(make_segment(0.0004, 1.23456, "\"quoted\"\\ back\nslash\t\x01 é"));
  const std::string text = to_json(transcript);
  const auto parsed = nlohmann::json::parse(text);
  EXPECT_EQ(parsed["segments"][0]["text"], "\"quoted\"\\ back\nslash\t\x01 é");
  EXPECT_EQ(parsed["segments"][0]["start"], 0.0);
  EXPECT_EQ(parsed["segments"][0]["end"], 1.235);
  EXPECT_EQ(parsed["duration"], 1.235);
  EXPECT_NE(text.find(R"(\"quoted\"\\ back\nslash\t\u0001 é)"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST(Output, JsonReplacesInvalidUtf8InsteadOfThrowing) {
  Transcript transcript;
  transcript.segments.push_back(make_segment(0, 1, "bad \xff byte"));
  const auto parsed = nlohmann::json::parse(to_json(transcript));
  EXPECT_EQ(parsed["text"], "bad \xEF\xBF\xBD byte");
}

// A segment as Parakeet returns it: words and one time per token.
Segment timed_segment() {
  Segment segment = make_segment(0.48, 1.6, " Hi, you.");
  segment.tokens = {7, 8, 9, 10};
  segment.words = {{0.48, 0.8, "Hi,"}, {1.12, 1.6, "you."}};
  segment.token_times = {
      {0.48, 0.8, "\u2581Hi"}, {0.8, 0.8, ","}, {1.12, 1.52, "\u2581you"}, {1.52, 1.6, "."}};
  return segment;
}

TEST(Output, JsonAddsWordsAndTokenTimesWhenTheSegmentHasThem) {
  Transcript transcript;
  transcript.segments.push_back(timed_segment());
  transcript.segments.push_back(make_segment(2, 3, " untimed"));
  const auto parsed = nlohmann::json::parse(to_json(transcript));
  const auto& timed = parsed["segments"][0];
  ASSERT_EQ(timed["words"].size(), 2u);
  EXPECT_EQ(timed["words"][1], nlohmann::json::parse(R"({"word":"you.","start":1.12,"end":1.6})"));
  ASSERT_EQ(timed["token_times"].size(), 4u);
  EXPECT_EQ(timed["token_times"][1],
            nlohmann::json::parse(R"({"token":8,"text":",","start":0.8,"end":0.8})"));
  EXPECT_EQ(timed["token_times"][2]["text"], "\u2581you");
  // The timing fields follow Whisper's, in this order.
  const nlohmann::ordered_json document = to_json_value(transcript);
  std::vector<std::string> keys;
  for (const auto& [key, value] : document["segments"][0].items()) keys.push_back(key);
  ASSERT_GE(keys.size(), 2u);
  EXPECT_EQ(keys[keys.size() - 2], "words");
  EXPECT_EQ(keys.back(), "token_times");
  EXPECT_FALSE(parsed["segments"][1].contains("words"));
  EXPECT_FALSE(parsed["segments"][1].contains("token_times"));
}

TEST(Output, JsonWordTimesRoundToMilliseconds) {
  Transcript transcript;
  transcript.segments.push_back(make_segment(0, 1, " a"));
  transcript.segments.back().words = {{0.12345, 0.98765, "a"}};
  const auto parsed = nlohmann::json::parse(to_json(transcript));
  EXPECT_EQ(parsed["segments"][0]["words"][0]["start"], 0.123);
  EXPECT_EQ(parsed["segments"][0]["words"][0]["end"], 0.988);
  EXPECT_FALSE(parsed["segments"][0].contains("token_times"));
}

TEST(Output, JsonRejectsTokenTimesThatDoNotMatchTheTokens) {
  Transcript transcript;
  transcript.segments.push_back(timed_segment());
  transcript.segments.back().token_times.pop_back();
  EXPECT_THROW(to_json(transcript), Error);
}

TEST(Output, SubtitlesIgnoreWordTimings) {
  Transcript plain;
  plain.segments.push_back(make_segment(0.48, 1.6, " Hi, you."));
  Transcript timed;
  timed.segments.push_back(timed_segment());
  EXPECT_EQ(to_srt(timed), to_srt(plain));
  EXPECT_EQ(to_vtt(timed), to_vtt(plain));
  EXPECT_EQ(to_txt(timed), to_txt(plain));
}

TEST(Output, RenderDispatchesOnFormat) {
  const Transcript transcript = sample_transcript();
  EXPECT_EQ(render(transcript, Format::txt), to_txt(transcript));
  EXPECT_EQ(render(transcript, Format::json), to_json(transcript));
  EXPECT_EQ(render(transcript, Format::srt), to_srt(transcript));
  EXPECT_EQ(render(transcript, Format::vtt), to_vtt(transcript));
}

}  // namespace
}  // namespace hark::output
