#include "cli/args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace hark::cli {

namespace {

const Option help_option{"help", 'h', "", "Show this help."};

const Option* find_long(std::span<const Option> options, std::string_view name) {
  if (name == help_option.name) return &help_option;
  for (const Option& option : options) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

const Option* find_short(std::span<const Option> options, char name) {
  if (name == help_option.short_name) return &help_option;
  for (const Option& option : options) {
    if (option.short_name != 0 && option.short_name == name) return &option;
  }
  return nullptr;
}

std::string option_label(const Option& option) {
  std::string label = option.short_name != 0 ? std::string("-") + option.short_name + ", " : "    ";
  label += "--";
  label += option.name;
  if (!option.value_name.empty()) {
    label += ' ';
    label += option.value_name;
  }
  return label;
}

}  // namespace

bool ParsedArgs::has(std::string_view name) const {
  return std::any_of(given_.begin(), given_.end(),
                     [&](const auto& entry) { return entry.first == name; });
}

std::optional<std::string> ParsedArgs::value(std::string_view name) const {
  for (auto entry = given_.rbegin(); entry != given_.rend(); ++entry) {
    if (entry->first == name) return entry->second;
  }
  return std::nullopt;
}

std::string ParsedArgs::value_or(std::string_view name, std::string fallback) const {
  std::optional<std::string> given = value(name);
  return given ? *given : std::move(fallback);
}

int ParsedArgs::int_or(std::string_view name, int fallback, int min, int max) const {
  const std::optional<std::string> given = value(name);
  if (!given) return fallback;
  int number = 0;
  const char* end = given->data() + given->size();
  const auto [stop, error] = std::from_chars(given->data(), end, number);
  if (given->empty() || error != std::errc() || stop != end) {
    usage_fail("--", name, " expects a whole number, got '", *given, "'");
  }
  if (number < min || number > max) {
    usage_fail("--", name, " must be between ", min, " and ", max, ", got ", number);
  }
  return number;
}

double ParsedArgs::float_or(std::string_view name, double fallback, double min, double max) const {
  const std::optional<std::string> given = value(name);
  if (!given) return fallback;
  char* stop = nullptr;
  const double number = std::strtod(given->c_str(), &stop);
  if (given->empty() || stop != given->c_str() + given->size() || !std::isfinite(number)) {
    usage_fail("--", name, " expects a number, got '", *given, "'");
  }
  if (number < min || number > max) {
    usage_fail("--", name, " must be between ", min, " and ", max, ", got ", *given);
  }
  return number;
}

void ParsedArgs::add(std::string_view name, std::string value) {
  given_.emplace_back(std::string(name), std::move(value));
}

ParsedArgs parse_args(std::string_view command, std::span<const std::string> args,
                      std::span<const Option> options) {
  ParsedArgs parsed;
  bool options_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (options_ended || word.size() < 2 || word[0] != '-') {
      parsed.positionals.push_back(word);
      continue;
    }
    if (word == "--") {
      options_ended = true;
      continue;
    }

    const Option* option = nullptr;
    std::optional<std::string> inline_value;
    if (word[1] == '-') {
      const size_t equals = word.find('=');
      const std::string_view name = std::string_view(word).substr(2, equals - 2);
      option = find_long(options, name);
      if (equals != std::string::npos) inline_value = word.substr(equals + 1);
    } else if (word.size() == 2) {
      option = find_short(options, word[1]);
    }
    if (option == nullptr) {
      usage_fail("unknown option '", word, "' for 'hark ", command, "' (see 'hark help ", command,
                 "')");
    }

    if (option->value_name.empty()) {
      if (inline_value) usage_fail("option --", option->name, " takes no value");
      parsed.add(option->name, "");
    } else if (inline_value) {
      parsed.add(option->name, *inline_value);
    } else {
      if (i + 1 >= args.size()) {
        usage_fail("option ", word, " needs a value (", option->value_name, ")");
      }
      parsed.add(option->name, args[++i]);
    }
  }
  return parsed;
}

std::string format_options(std::span<const Option> options) {
  size_t width = option_label(help_option).size();
  for (const Option& option : options) width = std::max(width, option_label(option).size());
  width += 2;

  std::string text = "Options:\n";
  auto add = [&](const Option& option) {
    std::string label = option_label(option);
    label.resize(width, ' ');
    std::string_view help = option.help;
    bool first_line = true;
    while (true) {
      const size_t newline = help.find('\n');
      text += "  ";
      text += first_line ? label : std::string(width, ' ');
      text += help.substr(0, newline);
      text += '\n';
      if (newline == std::string_view::npos) break;
      help.remove_prefix(newline + 1);
      first_line = false;
    }
  };
  for (const Option& option : options) add(option);
  add(help_option);
  return text;
}

}  // namespace hark::cli
