#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace kvlab {
namespace {

std::runtime_error system_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " '" + path + "': " + std::strerror(errno));
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw system_error("cannot create", temp);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const auto error = system_error("cannot write", temp);
      ::close(fd);
      ::unlink(temp.c_str());
      throw error;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const auto error = system_error("cannot flush", temp);
    ::unlink(temp.c_str());
    throw error;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const auto error = system_error("cannot rename onto", path);
    ::unlink(temp.c_str());
    throw error;
  }
}

void append_line(const std::string& path, std::string_view line) {
  std::string bytes(line);
  bytes += '\n';
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw system_error("cannot open", path);
  // one write: O_APPEND places it whole at the end, so concurrent writers never interleave
  const ssize_t n = ::write(fd, bytes.data(), bytes.size());
  if (n != static_cast<ssize_t>(bytes.size()) || ::fsync(fd) != 0) {
    const auto error = n < 0 || n == static_cast<ssize_t>(bytes.size())
                           ? system_error("cannot append to", path)
                           : std::runtime_error("cannot append to '" + path + "': short write");
    ::close(fd);
    throw error;
  }
  if (::close(fd) != 0) throw system_error("cannot close", path);
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw system_error("cannot open", path);
  if (S_ISDIR(info.st_mode)) throw std::runtime_error("'" + path + "' is a directory, not a file");
  auto too_large = [&] {
    return std::runtime_error("'" + path + "' holds more than " + std::to_string(max_bytes) +
                              " bytes, the most kvlab reads from such a file");
  };
  if (S_ISREG(info.st_mode) && static_cast<uint64_t>(info.st_size) > max_bytes) throw too_large();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw system_error("cannot open", path);
  std::string text;
  if (S_ISREG(info.st_mode)) text.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const auto error = system_error("cannot read", path);
      ::close(fd);
      throw error;
    }
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      throw too_large();
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace kvlab
