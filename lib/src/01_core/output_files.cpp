// output_files.cpp: atomic output files, multi-file commits, output-location checks, folder locks, and
// write errors as one clear message.
#include "oscar/01_core/output_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "oscar/01_core/error.h"
#include "oscar/01_core/interrupts.h"

namespace fs = std::filesystem;

namespace oscar {

namespace {

fs::path folder_of(const fs::path& file) { return file.has_parent_path() ? file.parent_path() : fs::path("."); }

std::string advice(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT: return "free space on that disk or choose another output location";
    case EFBIG:
      return "the file-size limit (ulimit -f) or the file system's largest file was reached: raise the limit or "
             "choose another output location";
    case EACCES:
    case EPERM: return "the location is not writable for this user: fix its permissions or choose another output location";
    case EROFS: return "the file system is read-only: choose another output location";
    case ENOENT:
    case ENOTDIR: return "the folder does not exist: create it or choose another output location";
    case EIO: return "the disk reported an I/O error: check it or choose another output location";
    default: return "choose another output location";
  }
}

std::string unique_suffix() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  return fmt::format("{}-{:08x}", ::getpid(), static_cast<unsigned>(rng()));
}

std::string mb(std::uint64_t b) { return fmt::format("{:.1f} MB", static_cast<double>(b) / 1e6); }

// Creates and removes a probe file in `dir`; failures name `what` (the output the user asked for).
void probe(const fs::path& dir, const std::string& what) {
  const fs::path p = dir / (".oscar-probe-" + unique_suffix());
  const int slot = interrupts::remember(p.c_str());
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    interrupts::forget(slot);
    fail_write(what, e);
  }
  ::close(fd);
  ::unlink(p.c_str());
  interrupts::forget(slot);
}

void check_room(const fs::path& dir, const std::string& what, std::uint64_t bytes) {
  if (bytes == 0) return;
  struct statvfs vs {};
  if (::statvfs(dir.c_str(), &vs) == 0) {
    const std::uint64_t avail = static_cast<std::uint64_t>(vs.f_bavail) * vs.f_frsize;
    if (bytes > avail)
      fail("{}: needs about {} but its file system has {} free; free space on that disk or choose another output "
           "location",
           what, mb(bytes), mb(avail));
  }
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && bytes > rl.rlim_cur)
    fail("{}: needs about {} but the file-size limit (ulimit -f) allows {}; raise the limit or choose another output "
         "location",
         what, mb(bytes), mb(rl.rlim_cur));
}

// The folder `dir` must be a folder (errors name `what`).
void check_is_folder(const fs::path& dir, const std::string& what) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT)
      fail("{}: output folder '{}' does not exist; create it first or choose another output location", what, dir.string());
    if (e == ENOTDIR)
      fail("{}: '{}' cannot be a folder (part of that path is a file); choose another output location", what, dir.string());
    fail_write(what, e);
  }
  if (!S_ISDIR(st.st_mode)) fail("{}: '{}' is a file, not a folder; choose another output location", what, dir.string());
}

}  // namespace

std::string write_error_message(const std::string& file, int err) {
  return fmt::format("{}: could not write (reason: {}); {}", file, std::strerror(err), advice(err));
}

void fail_write(const std::string& file, int err) { throw Error(write_error_message(file, err)); }

void check_output_file(const fs::path& file, std::uint64_t bytes) {
  const std::string what = file.string();
  const fs::path dir = folder_of(file);
  std::error_code ec;
  if (!fs::exists(dir, ec) && !ec) {  // a missing folder is created when the file is written (every tool alike)
    check_output_folder(dir, bytes);
    return;
  }
  check_is_folder(dir, what);
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail("{}: is a folder, expected a file name; choose another output file", what);
    if (!S_ISREG(st.st_mode))
      fail("{}: exists and is not a regular file (a device, FIFO or socket), which an output never replaces; choose a "
           "file name",
           what);
  }
  probe(dir, what);
  check_room(dir, what, bytes);
}

void check_output_folder(const fs::path& dir, std::uint64_t bytes) {
  const std::string what = dir.string();
  // Nothing is created before the work: the nearest existing ancestor must be a writable folder.
  fs::path probe_dir = dir;
  std::error_code ec;
  while (!fs::exists(probe_dir, ec)) {
    if (ec && ec.value() == ENOTDIR)
      fail("{}: cannot be created (part of that path is a file, not a folder); choose another output folder", what);
    const fs::path up = probe_dir.has_parent_path() ? probe_dir.parent_path() : fs::path(".");
    if (up == probe_dir) break;
    probe_dir = up;
  }
  struct stat st {};
  if (::stat(probe_dir.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOTDIR)
      fail("{}: cannot be created (part of that path is a file, not a folder); choose another output folder", what);
    fail_write(what, e);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (probe_dir == dir) fail("{}: is a file, expected an output folder; choose another output folder", what);
    fail("{}: cannot be created ('{}' is a file, not a folder); choose another output folder", what, probe_dir.string());
  }
  probe(probe_dir, what);
  check_room(probe_dir, what, bytes);
}

void check_not_input(const fs::path& output, const std::vector<fs::path>& inputs) {
  struct stat out {};
  const bool exists = ::stat(output.c_str(), &out) == 0;
  std::error_code ec;
  const fs::path out_abs = fs::weakly_canonical(fs::absolute(output, ec), ec);
  for (const fs::path& in : inputs) {
    if (in.empty()) continue;
    struct stat st {};
    bool same = false;
    if (exists && ::stat(in.c_str(), &st) == 0) {
      same = st.st_dev == out.st_dev && st.st_ino == out.st_ino;
    } else {
      std::error_code ec2;
      same = !out_abs.empty() && fs::weakly_canonical(fs::absolute(in, ec2), ec2) == out_abs;
    }
    if (same)
      fail("{}: is also an input of this run ({}); writing it would destroy that input: choose another output name",
           output.string(), in.string());
  }
}

void check_not_input(const fs::path& dir, const std::vector<std::string>& names, const std::vector<fs::path>& inputs) {
  for (const std::string& n : names) check_not_input(dir / n, inputs);
}

// ---------------- AtomicOutput ----------------
AtomicOutput::AtomicOutput(fs::path final_path) : final_(std::move(final_path)) {
  const fs::path dir = folder_of(final_);
  std::error_code ec;
  if (!fs::exists(dir, ec) && !ec) {  // the output's folder, created with its parents (checked before the work)
    fs::create_directories(dir, ec);
    if (ec) fail_write(final_.string(), ec.value());
  }
  check_is_folder(dir, final_.string());
  temp_ = dir / fmt::format(".{}.tmp-{}", final_.filename().string(), unique_suffix());
  slot_ = interrupts::remember(temp_.c_str());  // published before the file exists
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int e = errno;
    interrupts::forget(slot_);
    fail_write(final_.string(), e);
  }
  ::close(fd);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_) ::unlink(temp_.c_str());
  interrupts::forget(slot_);
}

void AtomicOutput::write(std::string_view data) {
  const std::string name = final_.string();
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) fail_write(name, errno);
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      fail_write(name, e);
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int e = errno;
    ::close(fd);
    fail_write(name, e);
  }
  if (::close(fd) != 0 && errno != EINTR) fail_write(name, errno);
}

void AtomicOutput::commit() {
  if (::rename(temp_.c_str(), final_.c_str()) != 0) {
    const int e = errno;
    if (e == EISDIR || e == ENOTEMPTY || e == EEXIST)
      fail("{}: is a folder, so the finished file cannot take its name; choose another output file", final_.string());
    fail("{}: could not move the finished file into place (reason: {}); {}", final_.string(), std::strerror(e), advice(e));
  }
  committed_ = true;
  interrupts::note_committed();
  interrupts::forget(slot_);
  slot_ = -1;
}

// ---------------- OutputSet ----------------
AtomicOutput& OutputSet::add(const fs::path& final_path) {
  files_.push_back(std::make_unique<AtomicOutput>(final_path));
  return *files_.back();
}

void OutputSet::commit() {
  const interrupts::HoldSignals hold;
  for (auto& f : files_) f->commit();
}

// ---------------- ScratchFile ----------------
ScratchFile::ScratchFile(fs::path path) : path_(std::move(path)), slot_(interrupts::remember(path_.c_str())) {}

ScratchFile::~ScratchFile() {
  ::unlink(path_.c_str());
  interrupts::forget(slot_);
}

// ---------------- OutputLock ----------------
OutputLock::OutputLock(const fs::path& dir, const std::string& tool) {
  std::error_code ec;
  dir_ = dir;
  created_dir_ = !fs::exists(dir, ec);
  if (created_dir_) dir_slot_ = interrupts::remember_folder(dir.c_str());
  fs::create_directories(dir, ec);
  if (ec) fail("{}: could not create the output folder (reason: {}); {}", dir.string(), ec.message(), advice(ec.value()));
  path_ = dir / (".oscar-" + (tool.rfind("oscar-", 0) == 0 ? tool.substr(6) : tool) + ".lock");
  for (int attempt = 0; attempt < 10; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fail_write(path_.string(), errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      char buf[32] = {};
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      ::close(fd);
      if (e == EWOULDBLOCK) {
        const std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
        fail("{}: another {} (pid {}) is writing this folder (lock {}); wait for it to finish or choose another output "
             "folder",
             dir.string(), tool, pid.substr(0, pid.find('\n')), path_.filename().string());
      }
      fail("{}: could not lock (reason: {}); {}", path_.string(), std::strerror(e), advice(e));
    }
    // The previous holder removes the file when it finishes: make sure ours is still the one under the name.
    struct stat a {}, b {};
    if (::fstat(fd, &a) != 0 || ::stat(path_.c_str(), &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
      ::close(fd);
      continue;
    }
    slot_ = interrupts::remember(path_.c_str());
    const std::string pid = fmt::format("{}\n", ::getpid());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      const int e = errno;
      ::unlink(path_.c_str());
      interrupts::forget(slot_);
      ::close(fd);
      fail_write(path_.string(), e);
    }
    fd_ = fd;
    return;
  }
  fail("{}: could not take the lock (it kept being replaced); retry", path_.string());
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still holding the lock
  interrupts::forget(slot_);
  ::close(fd_);
  if (created_dir_) ::rmdir(dir_.c_str());  // fails, as it should, when the run wrote its outputs there
  interrupts::forget(dir_slot_);
}

}  // namespace oscar
