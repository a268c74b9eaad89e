// progress.h: a one-line progress bar on stderr (redrawn in place on a terminal, every 10% otherwise).
#pragma once
#include <chrono>
#include <string>

namespace oscar {

class Progress {
 public:
  Progress(std::string label, long total, bool enabled = true);
  ~Progress();
  void advance(long n = 1);
  void done();
  // Prints one line on stderr (a warning) without breaking the bar: on a terminal the bar is cleared, the line
  // printed, and the bar redrawn below it. Printed even when the bar is off.
  void pause_line(const std::string& line);

 private:
  void draw(bool final);
  std::string label_;
  long total_, count_ = 0;
  int last_decile_ = -1;
  bool enabled_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace oscar
