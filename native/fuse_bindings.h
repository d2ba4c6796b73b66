// What the kernel's open files read from, and the re-open rules.
//
// A handle JS answered with bytes is bound to them (a Binding); a re-open
// binds another handle to the same bytes. JS numbers every handle it
// answers (src/fs/handles.ts) and hears that number back when nothing
// reads the handle's bytes or file any more: one table of handles, JS's.
//
// Re-opens (docs/design.md, "Loaders"): some loaders open a file twice, a
// probe and then the decode (cv2.imread, PIL's verify then re-open). A
// thread that opens the sample it opened last, while that handle is open or
// within the re-open window after closing it, and before opening any other
// sample, is bound to the same bytes again: no second sample is consumed.
// Its stats of that path see the bound size too. Stats never bind: a stat
// with no open after it takes and holds nothing. But a thread that stats a
// sample path and then opens it within the window (torchvision's read_file
// maps exactly the size stat reported) has its open marked exact: JS serves
// the file itself. A plain open sends the daemon exactly one getattr first
// (the kernel's permission check: a sample's attributes are never cached),
// and a stat one more, so the mark does not touch ordinary loaders.
#pragma once

#include <napi.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "fuse_events.h"
#include "fuse_tree.h"

namespace redirfs {

using Clock = std::chrono::steady_clock;

// Bytes in JS memory that one or more handles of a path read from; `ref`
// keeps them alive until the binding ends, and only then is JS told (as a
// release of handle `jsNumber`, the handle JS answered).
struct Binding {
  const char* data = nullptr;
  size_t length = 0;
  Napi::Reference<Napi::Buffer<char>>* ref = nullptr;
  uint64_t ino = 0;
  uint64_t jsNumber = 0;
  int open = 0;                // handles reading from it
  pid_t thread = 0;            // the thread whose open JS answered
  Clock::time_point closedAt;  // when `open` last fell to 0
};

// An open file of the kernel's: its fh is this object's address, so reads
// and fstat find it with no lookup and no lock (the kernel sends no release
// while a read or fstat of the file is under way).
struct Handle {
  std::shared_ptr<Binding> bytes;  // or a file descriptor owned by JS:
  int fd = -1;
  off_t offset = 0;
  uint64_t ino = 0;
  uint64_t number = 0;  // JS's number for it (a pass-through file; a binding's is its jsNumber)
};

class Bindings {
 public:
  // `reopenWindow` 0: no re-opens, no stat marks.
  Bindings(const Tree& tree, EventQueue& events, std::chrono::microseconds reopenWindow);

  bool Reopening() const { return reopenWindow_.count() > 0; }

  // A handle JS answered (bytes or a file, numbered by JS): open from now on.
  void Add(Handle* handle);
  // An answer its opener never got (the reply failed: interrupted, killed); frees the handle. True when
  // its bytes were re-opened meanwhile by the same thread (its open restarted), which then has them; else
  // they end now, never kept for a re-open, since JS gives them back at once.
  bool Abandon(Handle* handle);
  // The kernel released the handle (or its opener went away before the answer reached it); frees it.
  void Release(Handle* handle);
  // A re-open of the thread's last sample, as a new handle on its binding; nullptr when the rule does not
  // apply (and then that binding cannot be re-opened any more). `exact`: the thread stat'ed this path just before.
  Handle* Reopen(fuse_ino_t ino, pid_t thread, bool* exact);
  // A stat of a sample path with no handle: remembered, so that an open right after it can be made exact.
  void NoteStat(pid_t thread, fuse_ino_t ino);
  // The size a stat of `ino` by `thread` sees: the thread's re-openable binding of it, else the newest
  // open binding of it, else `otherwise`.
  size_t BoundSize(fuse_ino_t ino, pid_t thread, size_t otherwise);
  // Ends the bindings whose re-open window has passed.
  void Sweep();

  struct Counts {
    int64_t openHandles;
    size_t keptForReopen;
  };
  Counts Count();

 private:
  // All below: mutex_ held.
  std::shared_ptr<Binding> ReopenableLocked(pid_t thread, uint64_t ino, Clock::time_point now);
  void Forget(std::unordered_map<pid_t, std::shared_ptr<Binding>>::iterator last);
  void SweepLocked(Clock::time_point now);
  void End(const std::shared_ptr<Binding>& b);

  const Tree& tree_;
  EventQueue& events_;
  const std::chrono::microseconds reopenWindow_;
  // A stat's mark may wait longer than a re-open: between a loader's stat and
  // its open lies Python code that a busy machine can stall for more than the
  // re-open window, and a mark that turns a later open of the same path into
  // an exact one costs only redirection's savings, never exactness.
  const std::chrono::microseconds statWindow_;
  static constexpr int64_t kStatWindowMin = 1'000'000;  // 1 s

  // Lock order: this mutex, then the event queue's (End posts releases); never the other way.
  std::mutex mutex_;
  int64_t openHandles_ = 0;
  std::unordered_map<uint64_t, std::vector<std::shared_ptr<Binding>>> bound_;  // ino -> bindings, oldest first
  std::unordered_map<pid_t, std::shared_ptr<Binding>> lastOpened_;             // thread -> the sample it opened last
  std::deque<std::shared_ptr<Binding>> closing_;                               // closed bindings that may still be re-opened, oldest first
  // A thread's getattrs of one sample with no handle, since its last open: the kernel sends one
  // for every open (its permission check, default_permissions), so only more means a stat.
  struct StatMark {
    uint64_t ino;
    Clock::time_point at;
    int getattrs;
  };
  static constexpr int kGetattrsPerOpen = 1;
  std::unordered_map<pid_t, StatMark> statted_;  // thread -> the sample it asked about last, when, how often
};

}  // namespace redirfs
