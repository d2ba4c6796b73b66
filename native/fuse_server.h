// The native FUSE server (libfuse3, low-level API, multi-threaded): the
// class JS constructs (src/fs/native-mount.ts).
//
// Everything that does not need a decision is answered on libfuse's
// threads, with no JS: lookup, getattr, readdir, read, release, statfs,
// access, and EROFS for every change (fuse_ops.cc). JS decides once per
// open: an open is queued (fuse_events.h) and JS answers later with
// replyBytes / replyFd / replyError, from its own thread (fuse_server.cc,
// the bridge): the low-level API lets a reply come from any thread, so no
// FUSE thread waits on JS. A bytes answer binds the handle to a Buffer that
// stays where the chunk reader put it (fuse_bindings.h): reads copy from it
// straight into the kernel's reply.
//
// Threads: as many FUSE threads as JS says (cores, by default), since
// nothing they do waits: replies come from memory, opens are handed to JS
// (docs/design.md, "The FUSE layer", has the measurement). What may wait
// on storage (a pass-through file's read, statfs) runs on a small pool of
// its own, so a slow disk never stalls samples.
//
// Node owns the process's signals: no libfuse signal handlers are set.
#pragma once

#include <napi.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "fuse_bindings.h"
#include "fuse_events.h"
#include "fuse_tree.h"

namespace redirfs {

// Runs jobs that may wait on storage, off the FUSE threads. Its threads
// start with the first job and are detached, like the FUSE loop: they
// share only `State` with the pool, so they may outlive the server object,
// and jobs capture what they need by value.
class BlockingPool {
 public:
  static constexpr int kThreads = 4;

  void Run(std::function<void()> job);
  // The threads end once the jobs queued so far are done.
  void Stop();

 private:
  struct State {
    std::mutex mutex;  // never held with another lock
    std::condition_variable wake;
    std::deque<std::function<void()>> jobs;
    bool stopping = false;
  };
  static void Work(std::shared_ptr<State> state);

  std::shared_ptr<State> state_ = std::make_shared<State>();
  bool started_ = false;  // guarded by state_->mutex
};

// An open waiting for JS's answer.
struct Pending {
  fuse_req_t req;
  uint64_t ino;
  pid_t thread;
};

class Server : public Napi::ObjectWrap<Server> {
 public:
  static Napi::Function Define(Napi::Env env);
  Server(const Napi::CallbackInfo& info);
  ~Server() override { Stop(); }

 private:
  // --- the bridge to JS (fuse_server.cc) ---
  Napi::Value Mount(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value Counters(const Napi::CallbackInfo& info);
  Napi::Value Invalidate(const Napi::CallbackInfo& info);
  Napi::Value Sweep(const Napi::CallbackInfo& info);
  Napi::Value ReplyBytes(const Napi::CallbackInfo& info);
  Napi::Value ReplyFd(const Napi::CallbackInfo& info);
  Napi::Value ReplyError(const Napi::CallbackInfo& info);
  bool Stop();
  bool AbortConnection();
  bool Stopping();  // JS is told nothing more: a new open fails at once
  static int ConnectionOf(const std::string& mountpoint);
  Pending TakeRequest(const Napi::Value& id);
  // Answers the open with the handle; false when its opener went away (the handle is released).
  bool Answer(const Pending& pending, Handle* handle, bool directIo);
  void Deliver(Napi::Env env, Napi::Function callback);

  // --- the FUSE operations (fuse_ops.cc) ---
  static struct fuse_lowlevel_ops Operations();
  static Server* Of(fuse_req_t req) { return static_cast<Server*>(fuse_req_userdata(req)); }
  static Handle* HandleOf(const struct fuse_file_info* fi) { return fi != nullptr ? reinterpret_cast<Handle*>(static_cast<uintptr_t>(fi->fh)) : nullptr; }
  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  static void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi);
  static void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*);
  static void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi);
  static void Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, struct fuse_file_info* fi);
  static void Release(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi);
  static void StatFs(fuse_req_t req, fuse_ino_t);
  static void Access(fuse_req_t req, fuse_ino_t ino, int mask);
  static void ReadOnly(fuse_req_t req) { fuse_reply_err(req, EROFS); }
  bool IsControl(fuse_ino_t ino) const { return ino == controlDirIno_ || ino == statsIno_ || ino == resetIno_; }
  // What a stat shows: the tree's attributes, with the size a handle (or the caller's binding) reads.
  bool Attributes(fuse_ino_t ino, struct stat* st, const Handle* handle, pid_t thread = 0);

  Tree tree_;
  Napi::ObjectReference treeRef_;  // keeps the columns alive
  std::string controlName_;
  fuse_ino_t controlDirIno_ = 0, statsIno_ = 0, resetIno_ = 0;
  uid_t ownerUid_ = 0;  // who mounted: the owner of the reset file
  gid_t ownerGid_ = 0;
  struct timespec mountedAt_;
  std::string mountpoint_, statfsPath_;
  struct fuse_session* session_ = nullptr;
  std::thread loop_;
  int fuseThreads_ = 2;
  BlockingPool blocking_;
  Napi::ThreadSafeFunction onEvents_;
  std::unique_ptr<EventQueue> events_;
  std::unique_ptr<Bindings> bindings_;

  // Lock order: pendingMutex_ is never held with another lock; the bindings' mutex comes before the
  // event queue's (fuse_bindings.h) and before releaseMutex_.
  // Lock order: releaseMutex_ may be taken while the bindings' mutex is held (an event's wake), never the other way.
  std::mutex releaseMutex_;  // released_: JS is told nothing more (events, the loop's end)
  bool released_ = false;
  bool tsfnReleased_ = false;  // on the JS thread only
  int connection_ = -1;        // the kernel's FUSE connection number, for an abort at close
  std::mutex pendingMutex_;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t nextRequest_ = 1;

  std::atomic<uint64_t> lookups_{0}, getattrs_{0}, reads_{0}, opens_{0}, reopens_{0}, exactOpens_{0};
};

}  // namespace redirfs
