// SPDX-License-Identifier: Apache-2.0
#pragma once
// One command-line grammar for cudapmr's programs, over CLI11: counts are whole
// numbers within a range, sizes are bytes or a number with KiB, MiB, GiB or
// TiB ("4KiB", "1MiB", "2GiB"), every program has --help and --version, and an
// unusable argument ends the program with exit status 2 and one line on stderr
// that names it.

#include <cudapmr/version.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace cudapmr::apps {

/// An argument that cannot be used; the message names it.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `text`, a whole number in [minimum, maximum], for `flag`.
template <class Integer>
Integer parse_integer(std::string_view flag, std::string_view text, Integer minimum = std::numeric_limits<Integer>::min(),
                      Integer maximum = std::numeric_limits<Integer>::max()) {
  Integer value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) throw usage_error(fmt::format("{} {}: out of range", flag, text));
  if (error != std::errc{} || end != text.data() + text.size() || text.empty())
    throw usage_error(
        fmt::format("{} {}: not {} integer", flag, text, std::is_signed_v<Integer> ? "an" : "a non-negative"));
  if (value < minimum || value > maximum)
    throw usage_error(fmt::format("{} {}: must be from {} to {}", flag, text, minimum, maximum));
  return value;
}

/// `text`, a size in bytes ("4096", "64KiB", "1MiB", "2GiB", "1TiB"), in [minimum, maximum], for `flag`.
inline std::size_t parse_size(std::string_view flag, std::string_view text, std::size_t minimum = 0,
                              std::size_t maximum = std::numeric_limits<std::size_t>::max()) {
  static constexpr std::array<std::pair<std::string_view, unsigned>, 4> units{
      {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}}};
  std::string_view digits = text;
  unsigned shift = 0;
  for (const auto& [suffix, bits] : units) {
    if (digits.size() > suffix.size() && digits.ends_with(suffix)) {
      digits.remove_suffix(suffix.size());
      shift = bits;
      break;
    }
  }
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc{} || end != digits.data() + digits.size() || digits.empty()) {
    if (error == std::errc::result_out_of_range) throw usage_error(fmt::format("{} {}: out of range", flag, text));
    throw usage_error(fmt::format("{} {}: not a size (bytes, or a whole number with KiB, MiB, GiB or TiB)", flag, text));
  }
  if (shift != 0 && value > (std::numeric_limits<std::size_t>::max() >> shift))
    throw usage_error(fmt::format("{} {}: out of range", flag, text));
  value <<= shift;
  if (value < minimum || value > maximum)
    throw usage_error(fmt::format("{} {}: must be from {} to {} bytes", flag, text, minimum, maximum));
  return value;
}

/// Adds `flag` N, a whole number in [minimum, maximum] stored in `value`.
template <class Integer>
CLI::Option* add_integer(CLI::App& app, const std::string& flag, Integer& value, Integer minimum, Integer maximum,
                         const std::string& help) {
  return app
      .add_option_function<std::string>(
          flag, [&value, flag, minimum, maximum](const std::string& text) {
            value = parse_integer<Integer>(flag, text, minimum, maximum);
          },
          help)
      ->type_name("N");
}

/// Adds `flag` SIZE, a size in [minimum, maximum] bytes stored in `value`.
template <class Size>
CLI::Option* add_size(CLI::App& app, const std::string& flag, Size& value, std::size_t minimum, std::size_t maximum,
                      const std::string& help) {
  return app
      .add_option_function<std::string>(
          flag, [&value, flag, minimum, maximum](const std::string& text) {
            value = parse_size(flag, text, minimum, maximum);
          },
          help)
      ->type_name("SIZE");
}

/// Adds --version, which prints the program's name and the library's version.
inline void add_version(CLI::App& app) {
  app.set_version_flag("--version", fmt::format("{} (cudapmr {})", app.get_name(), cudapmr::version_string()));
}

/// Parses the command line: --help and --version print and exit 0; an
/// unknown or unusable argument prints "program: what" on stderr and exits 2.
inline void parse_or_exit(CLI::App& app, int argc, char** argv) {
  app.allow_extras();
  try {
    app.parse(argc, argv);
    if (!app.remaining().empty()) throw usage_error(fmt::format("unknown argument {}", app.remaining().front()));
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::CallForVersion&) {
    std::fputs((app.version() + "\n").c_str(), stdout);
    std::exit(0);
  } catch (const CLI::Error& error) {
    std::fprintf(stderr, "%s: %s (--help for usage)\n", app.get_name().c_str(), error.what());
    std::exit(2);
  } catch (const usage_error& error) {
    std::fprintf(stderr, "%s: %s\n", app.get_name().c_str(), error.what());
    std::exit(2);
  }
}

}  // namespace cudapmr::apps
