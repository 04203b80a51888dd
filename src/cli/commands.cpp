#include "cli/commands.h"

#include <algorithm>
#include <array>

namespace hark::cli {

namespace {

const auto all_commands = std::to_array<const Command*>({
    &convert_command,
    &run_command,
    &bench_command,
});

}  // namespace

std::span<const Command* const> commands() {
  return all_commands;
}

const Command* find_command(std::string_view name) {
  for (const Command* command : all_commands) {
    if (command->name == name) return command;
  }
  return nullptr;
}

std::string command_help(const Command& command) {
  std::string text = "Usage: ";
  text += command.usage;
  text += "\n\n";
  text += command.summary;
  text += "\n\n";
  if (!command.description.empty()) {
    text += command.description;
    if (text.back() != '\n') text += '\n';
    text += '\n';
  }
  text += format_options(command.options);
  return text;
}

std::string general_help() {
  std::string text =
      "Usage: hark COMMAND [ARGS...]\n"
      "\n"
      "hark " HARK_VERSION
      " transcribes speech with Whisper models stored as GGUF.\n"
      "\n"
      "Commands:\n";
  size_t width = 0;
  for (const Command* command : all_commands) width = std::max(width, command->name.size());
  for (const Command* command : all_commands) {
    std::string name(command->name);
    name.resize(width + 2, ' ');
    text += "  " + name + std::string(command->summary) + "\n";
  }
  text +=
      "\n"
      "Options:\n"
      "  -h, --help     Show this help.\n"
      "  -V, --version  Show the version.\n"
      "\n"
      "Run 'hark help COMMAND' (or 'hark COMMAND --help') for a command's arguments and options.\n";
  return text;
}

}  // namespace hark::cli
