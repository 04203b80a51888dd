// The command line's small argument parser, shared by every subcommand.
//
// A subcommand describes its options in a table; the same table drives parsing and the option list
// in its help text, so the two cannot drift apart. Accepted forms: `--name value`, `--name=value`,
// `-n value`, flags without a value, `--` to end options, and a lone `-` as a positional (stdin).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace hark::cli {

// A mistake in how the command was called (exit code 2), as opposed to a failure doing it (1).
class UsageError : public Error {
 public:
  using Error::Error;
};

template <class... Parts>
[[noreturn]] void usage_fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw UsageError(message.str());
}

struct Option {
  std::string_view name;        // long name without dashes: "output-format"
  char short_name = 0;          // 'o', or 0 for none
  std::string_view value_name;  // "FORMAT"; empty for a flag that takes no value
  std::string_view help;        // one sentence; may contain '\n' for more lines
};

class ParsedArgs {
 public:
  std::vector<std::string> positionals;

  bool has(std::string_view name) const;
  // The last value given for the option (a later --x overrides an earlier one).
  std::optional<std::string> value(std::string_view name) const;
  std::string value_or(std::string_view name, std::string fallback) const;
  // Numeric values; a malformed number or one outside [min, max] is a UsageError naming the option.
  int int_or(std::string_view name, int fallback, int min, int max) const;
  double float_or(std::string_view name, double fallback, double min, double max) const;

  // Used by the parser.
  void add(std::string_view name, std::string value);

 private:
  std::vector<std::pair<std::string, std::string>> given_;
};

// Parses `args` (the words after the subcommand name) against `options`; -h/--help is always
// accepted and recorded as the flag "help". `command` names the subcommand in error messages.
ParsedArgs parse_args(std::string_view command, std::span<const std::string> args,
                      std::span<const Option> options);

// The "Options:" block of a help text: one option per line, help aligned in a column.
std::string format_options(std::span<const Option> options);

}  // namespace hark::cli
