// The native FUSE server (libfuse3, low-level API, multi-threaded).
//
// Everything that does not need a decision is answered here, on libfuse's
// threads, with no JS: lookup, getattr, readdir, read, release, statfs,
// access, and EROFS for every change (flush is left out on purpose: the
// kernel then stops sending it). The tree lives in native
// memory, built once at mount from arrays JS hands over; inode i + 1 is
// entry i (the root is entry 0, inode 1).
//
// JS decides once per open. An open is queued and JS is woken through a
// thread-safe function (one wake per batch, however many opens are queued);
// JS runs the protocol and answers later with replyBytes / replyFd /
// replyError, from its own thread: the low-level API lets a reply come from
// any thread, so no FUSE thread waits on JS. A bytes answer binds the handle
// to a Buffer that stays where the chunk reader put it (a reference keeps it
// alive until release): reads copy from it straight into the kernel's reply.
//
// Kernel caching per node (docs/design.md, "The FUSE layer"): directories
// and non-samples get long entry and attribute timeouts and the page cache;
// samples (and the control files) get uncached attributes and direct_io,
// because a redirected handle serves another length than the path's.
// While a handle of a path is bound, getattr of that path reports the bound
// size, as fstat on the handle does.
//
// Re-opens (docs/design.md, "Loaders"): some loaders open a file twice,
// a probe and then the decode (cv2.imread, PIL's verify then re-open). A
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
//
// Threads: as many FUSE threads as cores (JS says how many), since nothing
// they do waits: replies come from memory, opens are handed to JS. More
// threads than cores only add sleeps and wake-ups per request (the hot
// path measured 74 µs of FUSE-thread CPU per file with 16, 56 with 2, on
// 2 cores). What may wait on storage (a pass-through file's read, statfs)
// runs on a small pool of its own, so a slow disk never stalls samples.
//
// Node owns the process's signals: no libfuse signal handlers are set.
#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <napi.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

enum Kind : uint8_t { kDirectory = 0, kSample = 1, kOther = 2 };

// Entries' kernel cache time for everything that cannot change under a read-only mount.
constexpr double kStableTimeout = 3600.0;

// The block size a file reports: the smallest power of two that holds it,
// from 4 KiB to 1 MiB. Buffered readers size their buffer from it (Python's
// open, hence PIL and ImageFolder's loader), and a sample's reads are
// direct_io, each a round trip through this server: at 4 KiB a 110 KB JPEG
// took four reads, now one and the read that finds its end. The kernel
// keeps only a power of two.
blksize_t BlockSizeFor(off_t size) {
  blksize_t block = 4096;
  while (block < size && block < (1 << 20)) block <<= 1;
  return block;
}

// The tree's columns (src/chunks/tree.ts), read in place: JS holds them
// for the mount's life and never changes them. Entry i is inode i + 1; a
// directory's children are consecutive entries sorted by name bytes; each
// name is followed by a 0 byte.
struct Tree {
  size_t count = 0;
  const uint32_t *parent, *nameEnd, *firstChild, *childCount, *mode, *uid, *gid, *nlink;
  const uint8_t* kind;
  const double *size, *atimeSec, *mtimeSec, *ctimeSec;
  const uint32_t *atimeNsec, *mtimeNsec, *ctimeNsec;
  const char* names;

  const char* Name(size_t e) const { return names + (e == 0 ? 0 : nameEnd[e - 1]); }
  static struct timespec Time(double sec, uint32_t nsec) { return {static_cast<time_t>(sec), static_cast<long>(nsec)}; }
};

using Clock = std::chrono::steady_clock;

// Runs jobs that may wait on storage, off the FUSE threads. Its threads
// start with the first job and are detached, like the FUSE loop: they
// share only `State` with the pool, so they may outlive the server object,
// and jobs capture what they need by value.
class BlockingPool {
 public:
  static constexpr int kThreads = 4;

  void Run(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (!state_->stopping) {
        if (!started_) {
          started_ = true;
          for (int i = 0; i < kThreads; i++) std::thread(Work, state_).detach();
        }
        state_->jobs.push_back(std::move(job));
        state_->wake.notify_one();
        return;
      }
    }
    job();  // stopping: a late request is still answered, on its own thread
  }

  // The threads end once the jobs queued so far are done.
  void Stop() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
    state_->wake.notify_all();
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::function<void()>> jobs;
    bool stopping = false;
  };

  static void Work(std::shared_ptr<State> state) {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(state->mutex);
        state->wake.wait(lock, [&] { return state->stopping || !state->jobs.empty(); });
        if (state->jobs.empty()) return;
        job = std::move(state->jobs.front());
        state->jobs.pop_front();
      }
      job();
    }
  }

  std::shared_ptr<State> state_ = std::make_shared<State>();
  bool started_ = false;  // guarded by state_->mutex
};

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
  uint64_t number = 0;  // how JS knows it
};

// An open waiting for JS's answer.
struct Pending {
  fuse_req_t req;
  uint64_t ino;
  pid_t thread;
};

// What FUSE threads hand to JS: opens to decide, releases to forget.
struct Event {
  enum Type { kOpen, kRelease } type;
  uint64_t id;  // open: request id; release: handle number
  uint64_t ino;
  int flags;
  pid_t pid;
  Napi::Reference<Napi::Buffer<char>>* ref;  // release: to free on the JS thread
  bool exact;                                // open: the thread stat'ed this path just before
};

class Server : public Napi::ObjectWrap<Server> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "FuseServer",
                       {
                           InstanceMethod<&Server::Mount>("mount"),
                           InstanceMethod<&Server::ReplyBytes>("replyBytes"),
                           InstanceMethod<&Server::ReplyFd>("replyFd"),
                           InstanceMethod<&Server::ReplyError>("replyError"),
                           InstanceMethod<&Server::Close>("close"),
                           InstanceMethod<&Server::Counters>("counters"),
                           InstanceMethod<&Server::Sweep>("sweep"),
                           InstanceMethod<&Server::Invalidate>("invalidate"),
                       });
  }

  // new FuseServer(tree, onEvents, { reopenWindowMs, fuseThreads, ownerUid, ownerGid }): tree = the tree's columns (parent, names, nameEnd, firstChild,
  // childCount, kind, mode, uid, gid, nlink, size, atimeSec, mtimeSec, ctimeSec, atimeNsec, mtimeNsec, ctimeNsec) and controlName
  Server(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Server>(info) {
    Napi::Env env = info.Env();
    Napi::Object tree = info[0].As<Napi::Object>();
    auto u32 = [&](const char* name) { return tree.Get(name).As<Napi::Uint32Array>().Data(); };
    auto f64 = [&](const char* name) { return tree.Get(name).As<Napi::Float64Array>().Data(); };
    tree_.count = tree.Get("parent").As<Napi::Uint32Array>().ElementLength();
    tree_.parent = u32("parent");
    tree_.nameEnd = u32("nameEnd");
    tree_.firstChild = u32("firstChild");
    tree_.childCount = u32("childCount");
    tree_.mode = u32("mode");
    tree_.uid = u32("uid");
    tree_.gid = u32("gid");
    tree_.nlink = u32("nlink");
    tree_.kind = tree.Get("kind").As<Napi::Uint8Array>().Data();
    tree_.size = f64("size");
    tree_.atimeSec = f64("atimeSec");
    tree_.mtimeSec = f64("mtimeSec");
    tree_.ctimeSec = f64("ctimeSec");
    tree_.atimeNsec = u32("atimeNsec");
    tree_.mtimeNsec = u32("mtimeNsec");
    tree_.ctimeNsec = u32("ctimeNsec");
    tree_.names = tree.Get("names").As<Napi::Buffer<char>>().Data();
    treeRef_ = Napi::Persistent(tree);
    size_t count = tree_.count;
    controlName_ = tree.Get("controlName").As<Napi::String>().Utf8Value();
    controlDirIno_ = count + 1;
    statsIno_ = count + 2;
    resetIno_ = count + 3;
    clock_gettime(CLOCK_REALTIME, &mountedAt_);
    onEvents_ = Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "redirfs-fuse", 0, 1);
    Napi::Object options = info[2].IsObject() ? info[2].As<Napi::Object>() : Napi::Object::New(env);
    double windowMs = options.Has("reopenWindowMs") ? options.Get("reopenWindowMs").ToNumber().DoubleValue() : 0;
    if (options.Has("fuseThreads")) fuseThreads_ = std::max(1, options.Get("fuseThreads").ToNumber().Int32Value());
    if (options.Has("ownerUid")) ownerUid_ = options.Get("ownerUid").ToNumber().Uint32Value();
    if (options.Has("ownerGid")) ownerGid_ = options.Get("ownerGid").ToNumber().Uint32Value();
    reopenWindow_ = std::chrono::microseconds(static_cast<int64_t>(windowMs * 1000));
    // A stat's mark may wait longer than a re-open: between a loader's stat and
    // its open lies Python code that a busy machine can stall for more than the
    // re-open window, and a mark that turns a later open of the same path into
    // an exact one costs only redirection's savings, never exactness.
    statWindow_ = reopenWindow_.count() > 0 ? std::max(reopenWindow_, std::chrono::microseconds(kStatWindowMin)) : reopenWindow_;
  }

  ~Server() override { Stop(); }

 private:
  // mount(mountpoint, statfsPath, { allowOther, nonempty }): throws with the reason when the mount fails.
  Napi::Value Mount(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    mountpoint_ = info[0].As<Napi::String>().Utf8Value();
    statfsPath_ = info[1].As<Napi::String>().Utf8Value();
    Napi::Object options = info[2].As<Napi::Object>();
    // default_permissions: the kernel checks every access against each entry's
    // owner and mode as the source has them (the scan's, src/chunks/scan.ts),
    // so --allow-other never lets a user read what the source would refuse.
    std::vector<std::string> argv = {"redirfs", "-o", "fsname=redirfs,subtype=redirfs,ro,default_permissions"};
    if (options.Get("allowOther").ToBoolean()) argv.back() += ",allow_other";
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    struct fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(args.size()), args.data());
    struct fuse_lowlevel_ops ops = Operations();
    session_ = fuse_session_new(&fargs, &ops, sizeof(ops), this);
    if (session_ == nullptr) {
      Napi::Error::New(env, "fuse_session_new failed (see the daemon log for libfuse's reason)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (fuse_session_mount(session_, mountpoint_.c_str()) != 0) {
      fuse_session_destroy(session_);
      session_ = nullptr;
      Napi::Error::New(env, "fuse_session_mount failed for " + mountpoint_ + " (is /dev/fuse there, and are you root?)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    loop_ = std::thread([this] {
      struct fuse_loop_config* config = fuse_loop_cfg_create();
      fuse_loop_cfg_set_clone_fd(config, 0);
      fuse_loop_cfg_set_max_threads(config, fuseThreads_);
      fuse_loop_cfg_set_idle_threads(config, fuseThreads_);  // as many idle as at most: no thread churn under load
      fuse_session_loop_mt(session_, config);
      fuse_loop_cfg_destroy(config);
      // The loop ends when the kernel ends the connection: an unmount from outside (umount,
      // fusermount -u) unless JS asked for it. JS hears of it as events of null, and stops.
      std::lock_guard<std::mutex> lock(releaseMutex_);
      if (!released_) onEvents_.NonBlockingCall([](Napi::Env env, Napi::Function callback) { callback.Call({env.Null(), env.Null()}); });
    });
    return env.Undefined();
  }

  // close(): ends the loop once the mount is gone (the caller unmounts first), frees everything.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    Stop();
    return info.Env().Undefined();
  }

  // Never blocks the JS thread: the loop's threads end when the kernel ends the
  // connection (after the caller's lazy unmount, at the latest when the process exits).
  void Stop() {
    if (session_ != nullptr) {
      fuse_session_exit(session_);
      if (loop_.joinable()) loop_.detach();
      session_ = nullptr;
    }
    blocking_.Stop();
    std::lock_guard<std::mutex> lock(releaseMutex_);
    if (!released_) {
      released_ = true;
      onEvents_.Release();
    }
  }

  Napi::Value Counters(const Napi::CallbackInfo& info) {
    Napi::Object out = Napi::Object::New(info.Env());
    out.Set("lookups", static_cast<double>(lookups_.load()));
    out.Set("getattrs", static_cast<double>(getattrs_.load()));
    out.Set("reads", static_cast<double>(reads_.load()));
    out.Set("opens", static_cast<double>(opens_.load()));
    out.Set("reopens", static_cast<double>(reopens_.load()));
    out.Set("statThenOpens", static_cast<double>(exactOpens_.load()));
    std::lock_guard<std::mutex> lock(handlesMutex_);
    out.Set("openHandles", static_cast<double>(openHandles_));
    size_t kept = 0;
    for (const auto& last : lastOpened_) kept += last.second->open == 0 ? 1 : 0;
    out.Set("keptForReopen", static_cast<double>(kept));
    return out;
  }

  // invalidate(ino): the kernel forgets the attributes it cached for `ino`
  // (a non-sample that changed in the source since the scan: JS updated its
  // columns), so the next stat, or a read past the old end, asks again.
  Napi::Value Invalidate(const Napi::CallbackInfo& info) {
    if (session_ != nullptr) fuse_lowlevel_notify_inval_inode(session_, static_cast<fuse_ino_t>(info[0].ToNumber().Int64Value()), -1, 0);
    return info.Env().Undefined();
  }

  // sweep(): ends the bindings whose re-open window has passed (JS calls it
  // now and then, so an idle mount does not keep them).
  Napi::Value Sweep(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(handlesMutex_);
    SweepLocked(Clock::now());
    return info.Env().Undefined();
  }

  // replyBytes(id, buffer, directIo) -> handle number (0: the opener is gone, nobody got the bytes): bound to these bytes until release.
  Napi::Value ReplyBytes(const Napi::CallbackInfo& info) {
    Pending pending = TakeRequest(info[0]);
    if (pending.req == nullptr) return Napi::Number::New(info.Env(), 0);
    Napi::Buffer<char> bytes = info[1].As<Napi::Buffer<char>>();
    auto binding = std::make_shared<Binding>();
    binding->data = bytes.Data();
    binding->length = bytes.Length();
    binding->ref = new Napi::Reference<Napi::Buffer<char>>(Napi::Persistent(bytes));
    binding->ino = pending.ino;
    binding->thread = pending.thread;
    auto handle = new Handle();
    handle->bytes = binding;
    return Napi::Number::New(info.Env(), static_cast<double>(Bind(pending, handle, info[2].ToBoolean())));
  }

  // replyFd(id, fd, offset) -> handle number: reads come from this descriptor (owned by JS) from `offset` on.
  Napi::Value ReplyFd(const Napi::CallbackInfo& info) {
    Pending pending = TakeRequest(info[0]);
    if (pending.req == nullptr) return Napi::Number::New(info.Env(), 0);
    auto handle = new Handle();
    handle->fd = info[1].As<Napi::Number>().Int32Value();
    handle->offset = static_cast<off_t>(info[2].As<Napi::Number>().Int64Value());
    return Napi::Number::New(info.Env(), static_cast<double>(Bind(pending, handle, false)));
  }

  Napi::Value ReplyError(const Napi::CallbackInfo& info) {
    Pending pending = TakeRequest(info[0]);
    if (pending.req != nullptr) fuse_reply_err(pending.req, info[1].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  // The open waiting for this answer; req is null when it is unknown (answered already).
  Pending TakeRequest(const Napi::Value& id) {
    std::lock_guard<std::mutex> lock(pendingMutex_);
    auto it = pending_.find(static_cast<uint64_t>(id.As<Napi::Number>().Int64Value()));
    if (it == pending_.end()) return {nullptr, 0, 0};
    Pending pending = it->second;
    pending_.erase(it);
    return pending;
  }

  uint64_t Bind(const Pending& pending, Handle* handle, bool directIo) {
    fuse_req_t req = pending.req;
    struct fuse_file_info fi;
    memset(&fi, 0, sizeof(fi));
    handle->ino = pending.ino;
    fi.fh = reinterpret_cast<uintptr_t>(handle);
    uint64_t number;
    {
      std::lock_guard<std::mutex> lock(handlesMutex_);
      number = handle->number = nextHandle_++;
      openHandles_++;
      if (Binding* b = handle->bytes.get()) {
        b->jsNumber = number;
        b->open = 1;
        bound_[b->ino].push_back(handle->bytes);
        if (reopenWindow_.count() > 0 && IsSample(b->ino)) {
          auto last = lastOpened_.find(b->thread);
          if (last != lastOpened_.end()) Forget(last);
          lastOpened_[b->thread] = handle->bytes;
        }
      }
    }
    fi.direct_io = directIo ? 1 : 0;
    fi.keep_cache = directIo ? 0 : 1;
    if (fuse_reply_open(req, &fi) != 0) {
      // The opener went away (interrupted, killed): nothing will release this
      // handle, so release it here, and tell JS (0) that nobody got the bytes.
      ReleaseHandle(handle);
      return 0;
    }
    return number;
  }

  static Handle* HandleOf(const struct fuse_file_info* fi) { return fi != nullptr ? reinterpret_cast<Handle*>(static_cast<uintptr_t>(fi->fh)) : nullptr; }

  void ReleaseHandle(Handle* released) {
    std::unique_ptr<Handle> handle(released);
    std::lock_guard<std::mutex> lock(handlesMutex_);
    openHandles_--;
    if (handle->bytes == nullptr) {
      Post({Event::kRelease, handle->number, handle->ino, 0, 0, nullptr, false});
      return;
    }
    Binding& b = *handle->bytes;
    if (--b.open > 0) return;
    b.closedAt = Clock::now();
    auto last = lastOpened_.find(b.thread);
    if (last != lastOpened_.end() && last->second == handle->bytes && reopenWindow_.count() > 0) {
      closing_.push_back(handle->bytes);  // kept for a re-open until the window passes
    } else {
      End(handle->bytes);
    }
    SweepLocked(b.closedAt);
  }

  // The re-open rule (see the top of this file); handlesMutex_ held.
  std::shared_ptr<Binding> ReopenableLocked(pid_t thread, uint64_t ino, Clock::time_point now) {
    auto last = lastOpened_.find(thread);
    if (last == lastOpened_.end()) return nullptr;
    const Binding& b = *last->second;
    if (b.ino == ino && (b.open > 0 || now - b.closedAt <= reopenWindow_)) return last->second;
    return nullptr;
  }

  // A thread opens another sample: its last one can no longer be re-opened.
  void Forget(std::unordered_map<pid_t, std::shared_ptr<Binding>>::iterator last) {
    std::shared_ptr<Binding> b = last->second;
    lastOpened_.erase(last);
    if (b->open == 0) End(b);
  }

  // Ends bindings whose window has passed, oldest first; handlesMutex_ held.
  void SweepLocked(Clock::time_point now) {
    for (auto mark = statted_.begin(); mark != statted_.end();) { mark = now - mark->second.at > statWindow_ ? statted_.erase(mark) : std::next(mark); }
    while (!closing_.empty() && now - closing_.front()->closedAt > reopenWindow_) {
      std::shared_ptr<Binding> b = closing_.front();
      closing_.pop_front();
      auto last = lastOpened_.find(b->thread);
      if (b->open == 0 && last != lastOpened_.end() && last->second == b) Forget(last);
    }
  }

  // No handle reads these bytes any more: JS may free them. handlesMutex_ held.
  void End(const std::shared_ptr<Binding>& b) {
    if (b->ref == nullptr) return;  // ended already
    auto list = bound_.find(b->ino);
    if (list != bound_.end()) {
      list->second.erase(std::remove(list->second.begin(), list->second.end(), b), list->second.end());
      if (list->second.empty()) bound_.erase(list);
    }
    Post({Event::kRelease, b->jsNumber, b->ino, 0, 0, b->ref, false});
    b->ref = nullptr;
  }

  // Queues an event for JS; wakes JS only when the queue was empty (one wake per batch).
  void Post(Event event) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(eventsMutex_);
      wake = events_.empty();
      events_.push_back(event);
    }
    if (wake) onEvents_.NonBlockingCall([this](Napi::Env env, Napi::Function callback) { Deliver(env, callback); });
  }

  // On the JS thread: frees released bindings, hands the batch to JS as flat numbers.
  void Deliver(Napi::Env env, Napi::Function callback) {
    std::vector<Event> batch;
    {
      std::lock_guard<std::mutex> lock(eventsMutex_);
      batch.swap(events_);
    }
    if (batch.empty()) return;
    Napi::Array opens = Napi::Array::New(env);
    Napi::Array releases = Napi::Array::New(env);
    uint32_t o = 0, r = 0;
    for (Event& e : batch) {
      if (e.type == Event::kOpen) {
        opens.Set(o++, Napi::Number::New(env, static_cast<double>(e.id)));
        opens.Set(o++, Napi::Number::New(env, static_cast<double>(e.ino)));
        opens.Set(o++, Napi::Number::New(env, e.flags));
        opens.Set(o++, Napi::Number::New(env, e.pid));
        opens.Set(o++, Napi::Number::New(env, e.exact ? 1 : 0));
      } else {
        delete e.ref;
        releases.Set(r++, Napi::Number::New(env, static_cast<double>(e.id)));
      }
    }
    callback.Call({opens, releases});
  }

  // --- the FUSE operations ---

  static Server* Of(fuse_req_t req) { return static_cast<Server*>(fuse_req_userdata(req)); }

  bool IsControl(fuse_ino_t ino) const { return ino == controlDirIno_ || ino == statsIno_ || ino == resetIno_; }
  bool InTree(fuse_ino_t ino) const { return ino >= 1 && ino <= tree_.count; }

  bool Attributes(fuse_ino_t ino, struct stat* st, const Handle* handle, pid_t thread = 0) {
    memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    if (IsControl(ino)) {
      // Anyone who may see the mount may read its stats; only its owner (and root) may reset it.
      st->st_mode = ino == controlDirIno_ ? (S_IFDIR | 0555) : ino == resetIno_ ? (S_IFREG | 0400) : (S_IFREG | 0444);
      st->st_nlink = ino == controlDirIno_ ? 2 : 1;
      st->st_uid = ino == resetIno_ ? ownerUid_ : tree_.uid[0];
      st->st_gid = ino == resetIno_ ? ownerGid_ : tree_.gid[0];
      st->st_atim = st->st_mtim = st->st_ctim = mountedAt_;
      st->st_size = handle != nullptr && handle->bytes != nullptr ? static_cast<off_t>(handle->bytes->length) : static_cast<off_t>(BoundSize(ino, thread, 0));
      return true;
    }
    if (!InTree(ino)) return false;
    const Tree& t = tree_;
    size_t e = ino - 1;
    st->st_mode = t.mode[e];
    st->st_uid = t.uid[e];
    st->st_gid = t.gid[e];
    st->st_nlink = t.nlink[e];
    st->st_atim = Tree::Time(t.atimeSec[e], t.atimeNsec[e]);
    st->st_mtim = Tree::Time(t.mtimeSec[e], t.mtimeNsec[e]);
    st->st_ctim = Tree::Time(t.ctimeSec[e], t.ctimeNsec[e]);
    double size = t.size[e];
    if (handle != nullptr && handle->bytes != nullptr)
      size = static_cast<double>(handle->bytes->length);
    else if (t.kind[e] == kSample)
      size = static_cast<double>(BoundSize(ino, thread, static_cast<size_t>(t.size[e])));
    st->st_size = static_cast<off_t>(size);
    st->st_blksize = BlockSizeFor(st->st_size);
    st->st_blocks = (st->st_size + 511) / 512;
    return true;
  }

  // The size a stat of `ino` by `thread` sees: the thread's re-openable
  // binding of it, else the newest open binding of it, else `otherwise`.
  size_t BoundSize(uint64_t ino, pid_t thread, size_t otherwise) {
    std::lock_guard<std::mutex> lock(handlesMutex_);
    if (auto mine = ReopenableLocked(thread, ino, Clock::now())) return mine->length;
    auto it = bound_.find(ino);
    if (it == bound_.end()) return otherwise;
    for (auto b = it->second.rbegin(); b != it->second.rend(); ++b)
      if ((*b)->open > 0) return (*b)->length;
    return otherwise;
  }

  bool IsSample(uint64_t ino) const { return InTree(ino) && tree_.kind[ino - 1] == kSample; }
  bool IsDirectory(uint64_t ino) const { return InTree(ino) && tree_.kind[ino - 1] == kDirectory; }

  double TimeoutOf(fuse_ino_t ino) const { return InTree(ino) && tree_.kind[ino - 1] != kSample ? kStableTimeout : 0.0; }

  // The child of directory `parent` named `name`, as an inode; 0 when none.
  fuse_ino_t Child(fuse_ino_t parent, const char* name) const {
    if (!IsDirectory(parent)) return 0;
    uint32_t low = tree_.firstChild[parent - 1], high = low + tree_.childCount[parent - 1];
    while (low < high) {
      uint32_t middle = low + (high - low) / 2;
      int order = strcmp(tree_.Name(middle), name);
      if (order == 0) return middle + 1;
      if (order < 0)
        low = middle + 1;
      else
        high = middle;
    }
    return 0;
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Server* s = Of(req);
    s->lookups_++;
    fuse_ino_t found = 0;
    if (parent == 1 && s->controlName_ == name)
      found = s->controlDirIno_;
    else if (parent == s->controlDirIno_)
      found = strcmp(name, "stats") == 0 ? s->statsIno_ : strcmp(name, "reset") == 0 ? s->resetIno_ : 0;
    else
      found = s->Child(parent, name);
    if (found == 0) {
      // A negative entry is cached too: the tree never changes.
      struct fuse_entry_param none;
      memset(&none, 0, sizeof(none));
      none.entry_timeout = kStableTimeout;
      fuse_reply_entry(req, &none);
      return;
    }
    struct fuse_entry_param entry;
    memset(&entry, 0, sizeof(entry));
    entry.ino = found;
    s->Attributes(found, &entry.attr, nullptr);
    entry.attr_timeout = s->TimeoutOf(found);
    entry.entry_timeout = s->IsControl(found) ? 0.0 : kStableTimeout;
    fuse_reply_entry(req, &entry);
  }

  static void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
    Server* s = Of(req);
    s->getattrs_++;
    const Handle* handle = HandleOf(fi);
    pid_t thread = fuse_req_ctx(req)->pid;
    if (fi == nullptr && s->reopenWindow_.count() > 0 && s->IsSample(ino)) s->NoteStat(thread, ino);
    struct stat st;
    if (!s->Attributes(ino, &st, handle, thread)) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    fuse_reply_attr(req, &st, s->TimeoutOf(ino));
  }

  // Offsets are positions in the listing ".", "..", then the children in name order.
  static void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
    Server* s = Of(req);
    const Tree& t = s->tree_;
    bool control = ino == s->controlDirIno_;
    if (!control && !s->InTree(ino)) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if (!control && !s->IsDirectory(ino)) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    size_t count = 2 + (control ? 2 : t.childCount[ino - 1]);
    std::vector<char> buffer(size);
    size_t used = 0;
    for (size_t i = static_cast<size_t>(std::max<off_t>(off, 0)); i < count; i++) {
      struct stat st;
      memset(&st, 0, sizeof(st));
      const char* name;
      if (i == 0) {
        name = ".";
        st.st_ino = ino;
        st.st_mode = S_IFDIR;
      } else if (i == 1) {
        name = "..";
        st.st_ino = control || ino == 1 ? 1 : t.parent[ino - 1] + 1;
        st.st_mode = S_IFDIR;
      } else if (control) {
        name = i == 2 ? "reset" : "stats";
        st.st_ino = i == 2 ? s->resetIno_ : s->statsIno_;
        st.st_mode = S_IFREG;
      } else {
        // Names and types only: ImageFolder's walk needs no stat per file.
        size_t child = t.firstChild[ino - 1] + (i - 2);
        name = t.Name(child);
        st.st_ino = child + 1;
        st.st_mode = t.mode[child] & S_IFMT;
      }
      size_t need = fuse_add_direntry(req, buffer.data() + used, size - used, name, &st, static_cast<off_t>(i) + 1);
      if (need > size - used) break;
      used += need;
    }
    fuse_reply_buf(req, buffer.data(), used);
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
    Server* s = Of(req);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC) != 0) {
      fuse_reply_err(req, EROFS);
      return;
    }
    if (ino == s->controlDirIno_) {
      fuse_reply_err(req, EISDIR);
      return;
    }
    if (!s->InTree(ino) && ino != s->statsIno_ && ino != s->resetIno_) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if (s->IsDirectory(ino)) {
      fuse_reply_err(req, EISDIR);
      return;
    }
    s->opens_++;
    pid_t thread = fuse_req_ctx(req)->pid;
    bool exact = false;
    if (s->reopenWindow_.count() > 0 && s->IsSample(ino) && s->Reopen(req, ino, thread, &exact)) return;
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(s->pendingMutex_);
      id = s->nextRequest_++;
      s->pending_[id] = {req, ino, thread};
    }
    s->Post({Event::kOpen, id, ino, fi->flags, thread, nullptr, exact});
  }

  // A stat of a sample path by a thread with no binding of it: remembered
  // (no bytes, no sample) so that an open right after it can be made exact.
  void NoteStat(pid_t thread, uint64_t ino) {
    std::lock_guard<std::mutex> lock(handlesMutex_);
    Clock::time_point now = Clock::now();
    if (ReopenableLocked(thread, ino, now) != nullptr) return;
    auto mark = statted_.find(thread);
    if (mark != statted_.end() && mark->second.ino == ino)
      mark->second = {ino, now, mark->second.getattrs + 1};
    else
      statted_[thread] = {ino, now, 1};
  }

  // Answers a re-open natively with the thread's last binding; false when
  // the rule does not apply (and then that binding cannot be re-opened any
  // more); `exact` then says whether the thread stat'ed this path just before.
  bool Reopen(fuse_req_t req, fuse_ino_t ino, pid_t thread, bool* exact) {
    struct fuse_file_info fi;
    memset(&fi, 0, sizeof(fi));
    Handle* handle;
    {
      std::lock_guard<std::mutex> lock(handlesMutex_);
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
        if (*exact) exactOpens_++;
        return false;
      }
      handle = new Handle();
      handle->bytes = b;
      handle->ino = ino;
      handle->number = nextHandle_++;
      b->open++;
      openHandles_++;
    }
    reopens_++;
    fi.fh = reinterpret_cast<uintptr_t>(handle);
    fi.direct_io = 1;
    if (fuse_reply_open(req, &fi) != 0) ReleaseHandle(handle);
    return true;
  }

  static void Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, struct fuse_file_info* fi) {
    Server* s = Of(req);
    s->reads_++;
    const Handle* handle = HandleOf(fi);
    if (handle == nullptr) {
      fuse_reply_err(req, EBADF);
      return;
    }
    if (handle->bytes != nullptr) {
      size_t length = handle->bytes->length;
      if (off < 0 || static_cast<size_t>(off) >= length) {
        fuse_reply_buf(req, nullptr, 0);
        return;
      }
      fuse_reply_buf(req, handle->bytes->data + off, std::min(size, length - static_cast<size_t>(off)));
      return;
    }
    // A pass-through file (its pages are cached by the kernel, so few reads come here) may be on a slow disk.
    int fd = handle->fd;
    off_t at = handle->offset + off;
    s->blocking_.Run([req, fd, size, at] {
      std::vector<char> buffer(size);
      ssize_t n = pread(fd, buffer.data(), size, at);
      if (n < 0)
        fuse_reply_err(req, errno);
      else
        fuse_reply_buf(req, buffer.data(), static_cast<size_t>(n));
    });
  }

  static void Release(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
    if (Handle* handle = HandleOf(fi)) Of(req)->ReleaseHandle(handle);
    fuse_reply_err(req, 0);
  }

  static void StatFs(fuse_req_t req, fuse_ino_t) {
    Server* s = Of(req);
    s->blocking_.Run([req, path = s->statfsPath_] {
      struct statvfs st;
      if (statvfs(path.c_str(), &st) != 0) {
        fuse_reply_err(req, errno);
        return;
      }
      st.f_bfree = st.f_bavail = 0;
      st.f_ffree = st.f_favail = 0;
      st.f_flag |= ST_RDONLY;
      fuse_reply_statfs(req, &st);
    });
  }

  static void Access(fuse_req_t req, fuse_ino_t ino, int mask) {
    Server* s = Of(req);
    if (!s->InTree(ino) && !s->IsControl(ino)) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    fuse_reply_err(req, (mask & W_OK) != 0 ? EROFS : 0);
  }

  static void ReadOnly(fuse_req_t req) { fuse_reply_err(req, EROFS); }

  static struct fuse_lowlevel_ops Operations() {
    struct fuse_lowlevel_ops ops;
    memset(&ops, 0, sizeof(ops));
    ops.lookup = Lookup;
    ops.getattr = GetAttr;
    ops.readdir = ReadDir;
    ops.open = Open;
    ops.read = Read;
    ops.release = Release;
    // No flush: libfuse answers the first one ENOSYS and the kernel sends no
    // more, which saves a round trip per close (nothing here is ever dirty).
    ops.statfs = StatFs;
    ops.access = Access;
    ops.setattr = [](fuse_req_t req, fuse_ino_t, struct stat*, int, struct fuse_file_info*) { ReadOnly(req); };
    ops.mknod = [](fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { ReadOnly(req); };
    ops.mkdir = [](fuse_req_t req, fuse_ino_t, const char*, mode_t) { ReadOnly(req); };
    ops.unlink = [](fuse_req_t req, fuse_ino_t, const char*) { ReadOnly(req); };
    ops.rmdir = [](fuse_req_t req, fuse_ino_t, const char*) { ReadOnly(req); };
    ops.symlink = [](fuse_req_t req, const char*, fuse_ino_t, const char*) { ReadOnly(req); };
    ops.rename = [](fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned int) { ReadOnly(req); };
    ops.link = [](fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { ReadOnly(req); };
    ops.write = [](fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, struct fuse_file_info*) { ReadOnly(req); };
    ops.create = [](fuse_req_t req, fuse_ino_t, const char*, mode_t, struct fuse_file_info*) { ReadOnly(req); };
    ops.setxattr = [](fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) { ReadOnly(req); };
    ops.removexattr = [](fuse_req_t req, fuse_ino_t, const char*) { ReadOnly(req); };
    ops.fallocate = [](fuse_req_t req, fuse_ino_t, int, off_t, off_t, struct fuse_file_info*) { ReadOnly(req); };
    return ops;
  }

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
  std::mutex releaseMutex_;  // released_ and the loop's last call to onEvents_
  bool released_ = false;

  std::mutex pendingMutex_;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t nextRequest_ = 1;

  std::mutex handlesMutex_;
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
  std::chrono::microseconds reopenWindow_{0};
  std::chrono::microseconds statWindow_{0};
  static constexpr int64_t kStatWindowMin = 1'000'000;  // 1 s
  uint64_t nextHandle_ = 1;

  std::mutex eventsMutex_;
  std::vector<Event> events_;

  std::atomic<uint64_t> lookups_{0}, getattrs_{0}, reads_{0}, opens_{0}, reopens_{0}, exactOpens_{0};
};

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("FuseServer", Server::Define(env));
  return exports;
}

NODE_API_MODULE(redirfs_fuse, Init)
