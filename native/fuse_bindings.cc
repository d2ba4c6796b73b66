// The bindings and the re-open rules; see fuse_bindings.h.
#include "fuse_bindings.h"

#include <algorithm>

namespace redirfs {

Bindings::Bindings(const Tree& tree, EventQueue& events, std::chrono::microseconds reopenWindow)
    : tree_(tree),
      events_(events),
      reopenWindow_(reopenWindow),
      statWindow_(reopenWindow.count() > 0 ? std::max(reopenWindow, std::chrono::microseconds(kStatWindowMin)) : reopenWindow) {}

void Bindings::Add(Handle* handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  openHandles_++;
  Binding* b = handle->bytes.get();
  if (b == nullptr) return;
  b->open = 1;
  bound_[b->ino].push_back(handle->bytes);
  if (Reopening() && tree_.IsSample(b->ino)) {
    auto last = lastOpened_.find(b->thread);
    if (last != lastOpened_.end()) Forget(last);
    lastOpened_[b->thread] = handle->bytes;
  }
}

bool Bindings::Abandon(Handle* abandoned) {
  std::unique_ptr<Handle> handle(abandoned);
  std::lock_guard<std::mutex> lock(mutex_);
  openHandles_--;
  if (handle->bytes == nullptr) {
    events_.Post({Event::kRelease, handle->number, handle->ino, 0, 0, nullptr, false});
    return false;
  }
  Binding& b = *handle->bytes;
  if (--b.open > 0) return true;
  auto last = lastOpened_.find(b.thread);
  if (last != lastOpened_.end() && last->second == handle->bytes) lastOpened_.erase(last);
  End(handle->bytes);
  return false;
}

void Bindings::Release(Handle* released) {
  std::unique_ptr<Handle> handle(released);
  std::lock_guard<std::mutex> lock(mutex_);
  openHandles_--;
  if (handle->bytes == nullptr) {
    events_.Post({Event::kRelease, handle->number, handle->ino, 0, 0, nullptr, false});
    return;
  }
  Binding& b = *handle->bytes;
  if (--b.open > 0) return;
  b.closedAt = Clock::now();
  auto last = lastOpened_.find(b.thread);
  if (last != lastOpened_.end() && last->second == handle->bytes && Reopening()) {
    closing_.push_back(handle->bytes);  // kept for a re-open until the window passes
  } else {
    End(handle->bytes);
  }
  SweepLocked(b.closedAt);
}

Handle* Bindings::Reopen(fuse_ino_t ino, pid_t thread, bool* exact) {
  std::lock_guard<std::mutex> lock(mutex_);
  Clock::time_point now = Clock::now();
  SweepLocked(now);
  auto mark = statted_.find(thread);
  // The kernel's own permission check (default_permissions) asks once for every open,
  // since a sample's attributes are never cached: a stat before it is one more.
  *exact = mark != statted_.end() && mark->second.ino == ino && mark->second.getattrs > kGetattrsPerOpen;
  if (mark != statted_.end()) statted_.erase(mark);
  std::shared_ptr<Binding> b = ReopenableLocked(thread, ino, now);
  if (b == nullptr) {
    auto last = lastOpened_.find(thread);
    if (last != lastOpened_.end()) Forget(last);
    return nullptr;
  }
  auto handle = new Handle();
  handle->bytes = b;
  handle->ino = ino;
  b->open++;
  openHandles_++;
  return handle;
}

void Bindings::NoteStat(pid_t thread, fuse_ino_t ino) {
  std::lock_guard<std::mutex> lock(mutex_);
  Clock::time_point now = Clock::now();
  if (ReopenableLocked(thread, ino, now) != nullptr) return;
  auto mark = statted_.find(thread);
  if (mark != statted_.end() && mark->second.ino == ino)
    mark->second = {ino, now, mark->second.getattrs + 1};
  else
    statted_[thread] = {ino, now, 1};
}

size_t Bindings::BoundSize(fuse_ino_t ino, pid_t thread, size_t otherwise) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto mine = ReopenableLocked(thread, ino, Clock::now())) return mine->length;
  auto it = bound_.find(ino);
  if (it == bound_.end()) return otherwise;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b)
    if ((*b)->open > 0) return (*b)->length;
  return otherwise;
}

void Bindings::Sweep() {
  std::lock_guard<std::mutex> lock(mutex_);
  SweepLocked(Clock::now());
}

Bindings::Counts Bindings::Count() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t kept = 0;
  for (const auto& last : lastOpened_) kept += last.second->open == 0 ? 1 : 0;
  return {openHandles_, kept};
}

std::shared_ptr<Binding> Bindings::ReopenableLocked(pid_t thread, uint64_t ino, Clock::time_point now) {
  auto last = lastOpened_.find(thread);
  if (last == lastOpened_.end()) return nullptr;
  const Binding& b = *last->second;
  if (b.ino == ino && (b.open > 0 || now - b.closedAt <= reopenWindow_)) return last->second;
  return nullptr;
}

// A thread opens another sample: its last one can no longer be re-opened.
void Bindings::Forget(std::unordered_map<pid_t, std::shared_ptr<Binding>>::iterator last) {
  std::shared_ptr<Binding> b = last->second;
  lastOpened_.erase(last);
  if (b->open == 0) End(b);
}

// Ends bindings whose window has passed, oldest first; stat marks likewise.
void Bindings::SweepLocked(Clock::time_point now) {
  for (auto mark = statted_.begin(); mark != statted_.end();) { mark = now - mark->second.at > statWindow_ ? statted_.erase(mark) : std::next(mark); }
  while (!closing_.empty() && now - closing_.front()->closedAt > reopenWindow_) {
    std::shared_ptr<Binding> b = closing_.front();
    closing_.pop_front();
    auto last = lastOpened_.find(b->thread);
    if (b->open == 0 && last != lastOpened_.end() && last->second == b) Forget(last);
  }
}

// No handle reads these bytes any more: JS may free them.
void Bindings::End(const std::shared_ptr<Binding>& b) {
  if (b->ref == nullptr) return;  // ended already
  auto list = bound_.find(b->ino);
  if (list != bound_.end()) {
    list->second.erase(std::remove(list->second.begin(), list->second.end(), b), list->second.end());
    if (list->second.empty()) bound_.erase(list);
  }
  events_.Post({Event::kRelease, b->jsNumber, b->ino, 0, 0, b->ref, false});
  b->ref = nullptr;
}

}  // namespace redirfs
