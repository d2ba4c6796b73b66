// What FUSE threads hand to JS: opens to decide, releases to forget. They
// queue here and reach JS in batches (one wake per batch, however many are
// queued), as flat arrays of numbers: an open is a record of
// OpenRecord::kFields numbers at the offsets below, a release one handle
// number. JS reads the layout from the addon (`openRecord`), so both sides
// name the same fields.
#pragma once

#include <napi.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace redirfs {

// The layout of one open in the opens array JS receives.
struct OpenRecord {
  static constexpr uint32_t kRequest = 0;  // the id JS answers with (replyBytes, replyFd, replyError)
  static constexpr uint32_t kInode = 1;
  static constexpr uint32_t kFlags = 2;
  static constexpr uint32_t kThread = 3;  // the calling thread (a run's process tree is found from it)
  static constexpr uint32_t kExact = 4;   // 1: the thread stat'ed this path just before (serve the file itself)
  static constexpr uint32_t kFields = 5;
};

struct Event {
  enum Type { kOpen, kRelease } type;
  uint64_t id;  // open: request id; release: the handle number JS gave the answer
  uint64_t ino;
  int flags;
  pid_t pid;
  Napi::Reference<Napi::Buffer<char>>* ref;  // release: to free on the JS thread
  bool exact;                                // open: the thread stat'ed this path just before
};

class EventQueue {
 public:
  // `wake` is called when an event lands in an empty queue: JS then takes the whole batch.
  explicit EventQueue(std::function<void()> wake) : wake_(std::move(wake)) {}

  void Post(const Event& event) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      wake = events_.empty();
      events_.push_back(event);
    }
    if (wake) wake_();
  }

  std::vector<Event> TakeAll() {
    std::vector<Event> batch;
    std::lock_guard<std::mutex> lock(mutex_);
    batch.swap(events_);
    return batch;
  }

 private:
  // Lock order: taken last (Bindings posts releases while holding its own mutex); nothing is locked inside it.
  std::mutex mutex_;
  std::vector<Event> events_;
  std::function<void()> wake_;
};

}  // namespace redirfs
