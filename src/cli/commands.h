// The subcommands of `hark`. Each lives in its own file (src/cli/<name>.cpp) and defines one
// Command; commands.cpp lists them, and `hark --help` shows exactly that list. Adding `pull`,
// `serve`, ... is a new file plus one line there.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "cli/args.h"

namespace hark::cli {

struct Command {
  std::string_view name;
  std::string_view summary;      // one line, for `hark --help`
  std::string_view usage;        // "hark run MODEL AUDIO... [options]"
  std::string_view description;  // paragraphs shown by `hark help NAME` before the options
  std::span<const Option> options;
  // Runs the command; returns the exit code. Throws UsageError / hark::Error on failure.
  int (*run)(const ParsedArgs& args);
};

extern const Command bench_command;
extern const Command convert_command;
extern const Command run_command;

std::span<const Command* const> commands();
const Command* find_command(std::string_view name);

// The full help of one command: usage, description, options.
std::string command_help(const Command& command);
// `hark --help`: usage, the command list, global options.
std::string general_help();

}  // namespace hark::cli
