// `hark`: dispatches to a subcommand and turns every failure into one line on stderr.
//
// Exit codes: 0 success, 1 the work failed (bad model, unreadable audio, ...), 2 the command line
// itself was wrong.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"

namespace {

using hark::cli::usage_fail;
using hark::cli::UsageError;

void print_error(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "hark: error: %s\n", message.c_str());
}

int dispatch(const std::vector<std::string>& words) {
  if (words.empty()) usage_fail("no command given (see 'hark --help')");
  const std::string& first = words[0];
  if (first == "-h" || first == "--help") {
    std::fputs(hark::cli::general_help().c_str(), stdout);
    return 0;
  }
  if (first == "-V" || first == "--version") {
    std::puts("hark " HARK_VERSION);
    return 0;
  }
  if (first == "help") {
    if (words.size() == 1) {
      std::fputs(hark::cli::general_help().c_str(), stdout);
      return 0;
    }
    if (words.size() > 2) usage_fail("'hark help' takes one command name");
    const hark::cli::Command* command = hark::cli::find_command(words[1]);
    if (command == nullptr) usage_fail("unknown command '", words[1], "' (see 'hark --help')");
    std::fputs(hark::cli::command_help(*command).c_str(), stdout);
    return 0;
  }
  if (!first.empty() && first[0] == '-') {
    usage_fail("unknown option '", first, "' (see 'hark --help')");
  }

  const hark::cli::Command* command = hark::cli::find_command(first);
  if (command == nullptr) usage_fail("unknown command '", first, "' (see 'hark --help')");
  const std::vector<std::string> rest(words.begin() + 1, words.end());
  const hark::cli::ParsedArgs args = hark::cli::parse_args(command->name, rest, command->options);
  if (args.has("help")) {
    std::fputs(hark::cli::command_help(*command).c_str(), stdout);
    return 0;
  }
  return command->run(args);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> words(argv + 1, argv + argc);
    const int status = dispatch(words);
    // A full disk or a closed pipe shows up only when stdout is flushed.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      print_error("could not write the output to stdout");
      return 1;
    }
    return status;
  } catch (const UsageError& error) {
    print_error(error.what());
    return 2;
  } catch (const hark::Error& error) {
    print_error(error.what());
    return 1;
  } catch (const std::bad_alloc&) {
    print_error("out of memory");
    return 1;
  } catch (const std::exception& error) {
    print_error(std::string("unexpected failure: ") + error.what());
    return 1;
  } catch (...) {
    print_error("unexpected failure");
    return 1;
  }
}
