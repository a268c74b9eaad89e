// app_main.h: shared main() wrapper of the CLI tools. Installs the signal handling of lib/ (SIGINT/SIGTERM/SIGHUP
// remove every temporary file and exit 128+signal with "tool: error: interrupted ..."; SIGXFSZ ignored, so a
// file-size limit gives a write error), parses the flags, runs the body and turns every failure into exactly
// one line on stderr:
//   usage errors (CLI11):  "tool: error: --option: what is wrong; see --help"      exit 2
//   everything else:       "tool: error: FILE: what is wrong; what to do"           exit 1
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fmt/format.h>
#include <regex>
#include <string>

#include "oscar/01_core/error.h"
#include "oscar/01_core/interrupts.h"
#include "oscar/01_core/output_files.h"
#include "oscar/01_core/parallel.h"
#include "oscar/01_core/printable.h"
#include "oscar/01_core/version.h"
#include "oscar/02_model/tokenizers/passage.h"

namespace oscar {

inline constexpr int kUsageExit = 2;  // bad flags or arguments (README, Tools)

namespace cli {

// Every option added after this shows its default in --help (the bound variable's value when the option is added).
inline void show_defaults(CLI::App& app) { app.option_defaults()->always_capture_default(); }

// Validator for a positional or option naming an input file: a folder given instead says so at once
// (a missing file is left to the library, whose message says what the file should be).
inline CLI::Validator not_a_folder() {
  return CLI::Validator(
      [](std::string& p) -> std::string {
        std::error_code ec;
        if (std::filesystem::is_directory(p, ec)) return "'" + p + "' is a folder, expected a file";
        return {};
      },
      "FILE", "not_a_folder");
}

// Validator for a number that must be finite and positive ("nan", "inf", 0 and negatives are refused).
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !std::isfinite(v) || v <= 0) return "'" + s + "' is not a positive number";
        return {};
      },
      "POSITIVE", "positive");
}

// Validator for a whole number within [lo, hi].
inline CLI::Validator whole_number_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        long long v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec == std::errc::invalid_argument || r.ptr != s.data() + s.size()) return "'" + s + "' is not a whole number";
        if (r.ec == std::errc::result_out_of_range || v < lo || v > hi)
          return fmt::format("'{}' is out of range ({}..{})", s, lo, hi);
        return {};
      },
      fmt::format("{}..{}", lo, hi), "whole_number_in");
}

// Validator for a passage length: a whole number of at least 2, or "all".
inline CLI::Validator tokens_or_all() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s == "all") return {};
        long long v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return "'" + s + "' is neither a whole number nor all";
        if (v < 2 || v > (1LL << 30)) return fmt::format("'{}' is out of range (2..{}, or all)", s, 1LL << 30);
        return {};
      },
      "N|all", "tokens_or_all");
}
// A whole number given to a string option (one that also takes a word); Error naming the option otherwise.
inline long parse_long(const char* option, const std::string& s) {
  long v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) fail("{}: '{}' is not a whole number; see --help", option, s);
  return v;
}
// The value a tokens_or_all() option holds: the number, or kAllTokens.
inline int parse_tokens(const std::string& s) { return s == "all" ? kAllTokens : std::stoi(s); }

// Added by run_app to every integer option: a value past the range of 64-bit integers is an error (CLI11 2.1
// would silently clamp it for `long` options).
inline CLI::Validator in_range_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        long long v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec == std::errc::result_out_of_range) return "'" + s + "' is out of range";
        return {};  // anything else is left to the conversion, which reports non-numbers
      },
      "", "in_range_integer");
}

// Added by run_app to every floating-point option: "nan" and "inf" are refused.
inline CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        if (CLI::detail::lexical_cast(s, v) && !std::isfinite(v)) return "'" + s + "' is not a finite number";
        return {};
      },
      "", "finite_number");
}

// One line for a CLI11 parse error: the option, what is wrong with it, and the value given.
inline std::string usage_message(const CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what();
  std::smatch m;
  static const std::regex convert(R"(Could not convert: (\S+) = (.*))");
  static const std::regex required_value(R"((\S+): (\d+) required (\S+) missing)");
  static const std::regex required(R"((\S+) is required)");
  static const std::regex extra(R"(The following arguments? (?:was|were) not expected: (.*))");
  if (std::regex_match(what, m, convert)) {
    std::string type = "value";
    if (const CLI::Option* o = app.get_option_no_throw(m[1].str())) type = o->get_type_name();
    const std::string kind = type == "INT"     ? "a whole number (or is out of range)"
                             : type == "UINT"  ? "a non-negative whole number (or is out of range)"
                             : type == "FLOAT" ? "a number (or is out of range)"
                                               : "a valid " + type;
    return fmt::format("{}: '{}' is not {}", m[1].str(), m[2].str(), kind);
  }
  if (std::regex_match(what, m, required_value)) return fmt::format("{}: needs a value ({})", m[1].str(), m[3].str());
  if (std::regex_match(what, m, required)) return fmt::format("{}: missing; it is required", m[1].str());
  if (std::regex_match(what, m, extra)) return fmt::format("unexpected argument(s) {}", m[1].str());
  return what;
}

}  // namespace cli

// Ends the process with `code` once stdio is flushed, without exit-time teardown: HDF5 1.10's teardown crashes
// (SIGSEGV) on a file whose close failed on a full disk, and nothing of the tools needs static destructors.
[[noreturn]] inline void finish(int code) {
  std::fflush(nullptr);
  std::_Exit(code);
}

template <class Body>
int run_app_body(const char* tool, CLI::App& app, int argc, char** argv, Body& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "{}: error: {}; see --help\n", tool, cli::usage_message(app, e));
    return kUsageExit;
  }
  try {
    return body();
  } catch (const oscar::Error& e) {
    fmt::print(stderr, "{}: error: {}\n", tool, printable(e.what()));  // file-derived text: no escape codes, one line
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "{}: error: out of memory; use a smaller input or a machine with more memory\n", tool);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: unexpected failure: {}\n", tool, printable(e.what()));
  }
  return 1;
}

// Runs a tool: the signal handling of interrupts.h, the flags (with every tool's --version and --threads), the body;
// never returns.
template <class Body>
int run_app(const char* tool, CLI::App& app, int argc, char** argv, Body body) {
  interrupts::install(tool);
  app.set_version_flag("--version", std::string(tool) + " (oscar-kv) " + version());
  int threads = 0;
  app.add_option("--threads", threads, "threads to use (default: every core, or OMP_NUM_THREADS)")
      ->check(cli::whole_number_in(1, 4096))
      ->default_str("every core");
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    if (type == "INT" || type == "UINT") o->check(cli::in_range_integer());
    if (type == "FLOAT") o->check(cli::finite_number());
  }
  auto with_threads = [&] {
    if (threads > 0) set_threads(threads);
    return body();
  };
  int code = run_app_body(tool, app, argc, argv, with_threads);
  if ((std::fflush(stdout) != 0 || std::ferror(stdout)) && code == 0) {
    fmt::print(stderr, "{}: error: {}\n", tool, write_error_message("standard output", errno));
    code = 1;
  }
  finish(code);
}

}  // namespace oscar
