// output_files.h: the one way lib/ writes outputs. A file is written under a temporary name in its own folder
// (".NAME.tmp-PID-RAND", removed on any exception and on SIGINT/SIGTERM) and renamed into place on commit, so
// an older file under the same name survives every failure intact; OutputSet renames all of a run's outputs
// together. Write errors become one message naming the file, the system's reason and what to do. The output
// location is checked before the work (check_output_file / check_output_folder); OutputLock keeps two runs out
// of one folder.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

// "FILE: could not write (reason: No space left on device); free space on that disk or choose another output
// location" -- the advice depends on errno `err` (ENOSPC, EDQUOT, EFBIG, EACCES, EPERM, EROFS, ENOENT, EIO...).
std::string write_error_message(const std::string& file, int err);
[[noreturn]] void fail_write(const std::string& file, int err);

// Checks, before any work, that `file` can be written: its folder is a folder, or is missing and can be created (its
// nearest existing ancestor is a writable folder; AtomicOutput creates it when it writes), a file can be created
// there (a probe file is made and removed, which also catches read-only file systems and root-owned paths),
// `file` is not a folder, and an existing `file` is a regular file (a device, FIFO or socket is never replaced); and when `bytes` > 0, that the free space and the file-size limit (ulimit -f) leave
// room for about that many bytes. Throws Error naming `file`, the reason and what to do.
void check_output_file(const std::filesystem::path& file, std::uint64_t bytes = 0);
// The same for an output folder, which is created (with its parents) when missing.
void check_output_folder(const std::filesystem::path& dir, std::uint64_t bytes = 0);

// Refuses, before any work, an output that would replace one of the run's inputs: the same file by device and inode
// (hard links and other spellings of one path included), or the same path when the output does not exist yet.
// Empty inputs are skipped. Throws Error naming both and what to do.
void check_not_input(const std::filesystem::path& output, const std::vector<std::filesystem::path>& inputs);
// The same for every file `names` that a run writes into the folder `dir`.
void check_not_input(const std::filesystem::path& dir, const std::vector<std::string>& names,
                     const std::vector<std::filesystem::path>& inputs);

// One output file, written under a temporary name in the destination folder (created empty by the
// constructor); nothing appears under the final name until commit(). The destructor removes the temporary
// when commit() was not reached (never throws); a SIGINT/SIGTERM removes it too (interrupts.h).
class AtomicOutput {
 public:
  explicit AtomicOutput(std::filesystem::path final_path);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  const std::filesystem::path& temp_path() const { return temp_; }
  const std::filesystem::path& final_path() const { return final_; }
  // Replaces the temporary's content with `data` and flushes it to disk (write errors: fail_write).
  void write(std::string_view data);
  void commit();  // renames the temporary to the final name

 private:
  std::filesystem::path final_, temp_;
  int slot_ = -1;
  bool committed_ = false;
};

// All outputs of one run: add() each (in the order they are written), write their temporaries, then
// commit() renames them all, with SIGINT/SIGTERM held back meanwhile: they appear together or not at all.
class OutputSet {
 public:
  AtomicOutput& add(const std::filesystem::path& final_path);
  void commit();

 private:
  std::vector<std::unique_ptr<AtomicOutput>> files_;
};

// A scratch file of the run (e.g. oscar-eval's calibration dump): removed by the destructor and on
// SIGINT/SIGTERM. Name it with a leading ".oscar-" so that any leftover is recognisable.
class ScratchFile {
 public:
  explicit ScratchFile(std::filesystem::path path);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int slot_ = -1;
};

// Takes DIR/.oscar-TOOL.lock (flock, non-blocking) for the lifetime of the object, so that a second run
// writing the same folder fails at once with a clear error instead of both "succeeding". The lock file is
// removed by the destructor and on SIGINT/SIGTERM.
class OutputLock {
 public:
  OutputLock(const std::filesystem::path& dir, const std::string& tool);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  std::filesystem::path dir_, path_;
  int fd_ = -1, slot_ = -1, dir_slot_ = -1;
  bool created_dir_ = false;  // the folder was made by this lock: removed again when left empty
};

}  // namespace oscar
