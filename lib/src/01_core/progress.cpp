// progress.cpp: the progress bar.
#include "oscar/01_core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace oscar {

Progress::Progress(std::string label, long total, bool enabled)
    : label_(std::move(label)), total_(total > 0 ? total : 1), enabled_(enabled), tty_(::isatty(2) != 0),
      start_(std::chrono::steady_clock::now()) {
  if (enabled_) draw(false);
}

Progress::~Progress() {
  if (enabled_ && !finished_ && tty_) std::fputs("\n", stderr);
}

void Progress::advance(long n) {
  count_ += n;
  if (enabled_) draw(count_ >= total_ && !tty_);
}

void Progress::done() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  if (count_ == total_ && !tty_) return;  // the last advance() already printed the full bar
  count_ = total_;
  draw(true);
}

void Progress::pause_line(const std::string& line) {
  if (enabled_ && tty_ && !finished_) fmt::print(stderr, "\r\033[K");
  fmt::print(stderr, "{}\n", line);
  if (enabled_ && tty_ && !finished_) draw(false);
  std::fflush(stderr);
}

void Progress::draw(bool final) {
  const double frac = static_cast<double>(count_) / static_cast<double>(total_);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int decile = static_cast<int>(frac * 10);
  if (!tty_ && !final && decile == last_decile_) return;
  last_decile_ = decile;
  constexpr int kWidth = 30;
  const int fill = static_cast<int>(frac * kWidth);
  const std::string bar = std::string(fill, '#') + std::string(kWidth - fill, '.');
  const std::string eta = (count_ > 0 && count_ < total_) ? fmt::format(", eta {:.0f}s", secs / frac - secs) : "";
  fmt::print(stderr, "{}{} [{}] {}/{} ({:.1f}s{}){}", tty_ ? "\r" : "", label_, bar, count_, total_, secs, eta,
             (tty_ && !final) ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace oscar
