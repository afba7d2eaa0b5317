#pragma once
// A FIFO for tests of readers that must refuse one. A reader that opens it anyway would block
// for ever, so the test would hang rather than fail: FifoUnblocker opens the write end as
// soon as a reader waits (a non-blocking open succeeds only then) and closes it, so the
// reader goes on and the test fails on its assertions instead.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

namespace tessera::testing {

class FifoUnblocker {
 public:
  explicit FifoUnblocker(const std::filesystem::path& fifo)
      : thread_([this, fifo] {
          while (!stop_) {
            const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
            if (fd >= 0) ::close(fd);  // a reader was waiting: let it see the end of the file
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  ~FifoUnblocker() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Makes a FIFO at `path`; true on success.
inline bool make_fifo(const std::filesystem::path& path) {
  return ::mkfifo(path.c_str(), 0600) == 0;
}

}  // namespace tessera::testing
