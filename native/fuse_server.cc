// The native FUSE server's bridge to JS and its lifecycle (see
// fuse_server.h): construction from the tree's columns, mount, JS's
// answers to opens, the batches of events JS receives, counters, close.
#include "fuse_server.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace redirfs {

void BlockingPool::Run(std::function<void()> job) {
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

void BlockingPool::Stop() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stopping = true;
  state_->wake.notify_all();
}

void BlockingPool::Work(std::shared_ptr<State> state) {
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

Napi::Function Server::Define(Napi::Env env) {
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

// A column of the tree: its data, where it is a typed array of `type` with `count` elements; else null, and `sized` false.
template <typename T>
static const T* Column(Napi::Object tree, const char* name, napi_typedarray_type type, size_t count, bool* sized) {
  Napi::Value value = tree.Get(name);
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != type || value.As<Napi::TypedArray>().ElementLength() != count) {
    *sized = false;
    return nullptr;
  }
  return value.As<Napi::TypedArrayOf<T>>().Data();
}

// new FuseServer(tree, onEvents, { reopenWindowMs, fuseThreads, ownerUid, ownerGid }): tree = the tree's columns (parent, names, nameEnd, firstChild,
// childCount, kind, mode, uid, gid, nlink, size, atimeSec, mtimeSec, ctimeSec, atimeNsec, mtimeNsec, ctimeNsec) and controlName
Server::Server(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Server>(info) {
  Napi::Env env = info.Env();
  Napi::Object tree = info[0].As<Napi::Object>();
  Napi::Value parent = tree.Get("parent");
  tree_.count = parent.IsTypedArray() ? parent.As<Napi::TypedArray>().ElementLength() : 0;
  // Every column holds one row per entry, of its type, or the tree is refused (and with it the mount) before any is read.
  bool sized = true;
  auto u32 = [&](const char* name) { return Column<uint32_t>(tree, name, napi_uint32_array, tree_.count, &sized); };
  auto f64 = [&](const char* name) { return Column<double>(tree, name, napi_float64_array, tree_.count, &sized); };
  tree_.parent = u32("parent");
  tree_.nameEnd = u32("nameEnd");
  tree_.firstChild = u32("firstChild");
  tree_.childCount = u32("childCount");
  tree_.mode = u32("mode");
  tree_.uid = u32("uid");
  tree_.gid = u32("gid");
  tree_.nlink = u32("nlink");
  tree_.kind = Column<uint8_t>(tree, "kind", napi_uint8_array, tree_.count, &sized);
  tree_.size = f64("size");
  tree_.atimeSec = f64("atimeSec");
  tree_.mtimeSec = f64("mtimeSec");
  tree_.ctimeSec = f64("ctimeSec");
  tree_.atimeNsec = u32("atimeNsec");
  tree_.mtimeNsec = u32("mtimeNsec");
  tree_.ctimeNsec = u32("ctimeNsec");
  Napi::Value names = tree.Get("names");
  sized = sized && names.IsBuffer();
  if (sized) {
    tree_.names = names.As<Napi::Buffer<char>>().Data();
    tree_.namesLength = names.As<Napi::Buffer<char>>().Length();
  }
  const char* problem = sized ? tree_.Problem() : "a column is missing, of another type, or of another length than the others";
  if (problem != nullptr) {
    released_ = true;      // JS is told nothing
    tsfnReleased_ = true;  // and there is no thread-safe function to release (Stop, from the destructor, would release a null one)
    Napi::TypeError::New(env, std::string("FuseServer: the tree's columns are inconsistent: ") + problem).ThrowAsJavaScriptException();
    return;
  }
  treeRef_ = Napi::Persistent(tree);
  // The control directory and its two files follow the tree's inodes.
  controlName_ = tree.Get("controlName").As<Napi::String>().Utf8Value();
  controlDirIno_ = tree_.count + 1;
  statsIno_ = tree_.count + 2;
  resetIno_ = tree_.count + 3;
  clock_gettime(CLOCK_REALTIME, &mountedAt_);
  onEvents_ = Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "redirfs-fuse", 0, 1);
  Napi::Object options = info[2].IsObject() ? info[2].As<Napi::Object>() : Napi::Object::New(env);
  double windowMs = options.Has("reopenWindowMs") ? options.Get("reopenWindowMs").ToNumber().DoubleValue() : 0;
  if (options.Has("fuseThreads")) fuseThreads_ = std::max(1, options.Get("fuseThreads").ToNumber().Int32Value());
  if (options.Has("ownerUid")) ownerUid_ = options.Get("ownerUid").ToNumber().Uint32Value();
  if (options.Has("ownerGid")) ownerGid_ = options.Get("ownerGid").ToNumber().Uint32Value();
  events_ = std::make_unique<EventQueue>([this] {
    // Lock order: after the bindings' mutex (a release posts while holding it); nothing is taken inside.
    std::lock_guard<std::mutex> lock(releaseMutex_);
    if (!released_) onEvents_.NonBlockingCall([this](Napi::Env env, Napi::Function callback) { Deliver(env, callback); });
  });
  bindings_ = std::make_unique<Bindings>(tree_, *events_, std::chrono::microseconds(static_cast<int64_t>(windowMs * 1000)));
}

// mount(mountpoint, statfsPath, { allowOther }): throws with the reason when the mount fails.
Napi::Value Server::Mount(const Napi::CallbackInfo& info) {
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
  connection_ = ConnectionOf(mountpoint_);
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

// The kernel's number for the FUSE connection of the mount at `mountpoint` (the minor of its device,
// from /proc/self/mountinfo: a stat would wait for the loop, not running yet), or -1.
int Server::ConnectionOf(const std::string& mountpoint) {
  FILE* mounts = fopen("/proc/self/mountinfo", "re");
  if (mounts == nullptr) return -1;
  // mountinfo escapes a space, tab, newline and backslash in a path as \ooo.
  char* resolved = realpath(mountpoint.c_str(), nullptr);  // mountinfo shows the real path
  std::string real = resolved != nullptr ? resolved : mountpoint;
  free(resolved);
  std::string escaped;
  for (char c : real) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\\') {
      char octal[5];
      snprintf(octal, sizeof octal, "\\%03o", static_cast<unsigned char>(c));
      escaped += octal;
    } else {
      escaped += c;
    }
  }
  int found = -1;
  char* line = nullptr;
  size_t capacity = 0;
  while (getline(&line, &capacity, mounts) > 0) {
    unsigned major, minor;
    char point[4096], type[256];
    // id parent major:minor root mountpoint options [optional fields] - type source superoptions
    if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &major, &minor, point) != 3 || escaped != point) continue;
    const char* dash = strstr(line, " - ");
    if (dash != nullptr && sscanf(dash, " - %255s", type) == 1 && strcmp(type, "fuse.redirfs") == 0) found = static_cast<int>(minor);
  }
  free(line);
  fclose(mounts);
  return found;
}

// close(): ends the loop once the mount is gone (the caller unmounts first), frees everything.
Napi::Value Server::Close(const Napi::CallbackInfo& info) {
  // A loop that could not be ended (no fusectl to abort it) serves the files still open through a
  // lazy unmount until they close or the process exits, with no JS (opens fail, releases are
  // dropped): this object must live as long, so it is never collected.
  if (!Stop()) Ref();
  return info.Env().Undefined();
}

// Ends the loop: the caller has unmounted, lazily if files were still open there, so the kernel
// keeps the connection (and sends their reads and releases) until they are closed. Aborting it
// through fusectl ends it now (those files read ENOTCONN, as after the daemon exits), and the loop's
// threads with it, so they are joined and nothing of this object is reached afterwards. Without
// fusectl the loop goes on serving those files from their bound bytes, with no JS (a new open fails,
// releases are dropped), until they close or the process exits: false then, and this object must
// outlive it.
bool Server::Stop() {
  {
    std::lock_guard<std::mutex> lock(releaseMutex_);
    released_ = true;  // from now on JS hears nothing: it is stopping
  }
  bool ended = true;
  if (session_ != nullptr) {
    ended = AbortConnection();
    if (ended) {
      fuse_session_exit(session_);
      if (loop_.joinable()) loop_.join();
      fuse_session_destroy(session_);
    } else if (loop_.joinable()) {
      loop_.detach();
    }
    session_ = nullptr;
  }
  blocking_.Stop();
  if (!tsfnReleased_) {
    tsfnReleased_ = true;
    onEvents_.Release();
  }
  return ended;
}

// Whether the connection is gone, or aborted now, through fusectl (/sys/fs/fuse/connections/<n>/abort;
// systemd mounts it at boot, a container may not have it).
bool Server::AbortConnection() {
  constexpr long kFusectlMagic = 0x65735543;
  struct statfs fusectl;
  if (connection_ < 0 || statfs("/sys/fs/fuse/connections", &fusectl) != 0 || fusectl.f_type != kFusectlMagic) return false;
  std::string abort = "/sys/fs/fuse/connections/" + std::to_string(connection_) + "/abort";
  int fd = open(abort.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;  // fusectl lists no such connection: it has ended
  bool written = write(fd, "1", 1) == 1;
  close(fd);
  return written;
}

bool Server::Stopping() {
  std::lock_guard<std::mutex> lock(releaseMutex_);
  return released_;
}

Napi::Value Server::Counters(const Napi::CallbackInfo& info) {
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("lookups", static_cast<double>(lookups_.load()));
  out.Set("getattrs", static_cast<double>(getattrs_.load()));
  out.Set("reads", static_cast<double>(reads_.load()));
  out.Set("opens", static_cast<double>(opens_.load()));
  out.Set("reopens", static_cast<double>(reopens_.load()));
  out.Set("statThenOpens", static_cast<double>(exactOpens_.load()));
  Bindings::Counts counts = bindings_->Count();
  out.Set("openHandles", static_cast<double>(counts.openHandles));
  out.Set("keptForReopen", static_cast<double>(counts.keptForReopen));
  return out;
}

// invalidate(ino): the kernel forgets the attributes it cached for `ino`
// (a non-sample that changed in the source since the scan: JS updated its
// columns), so the next stat, or a read past the old end, asks again.
Napi::Value Server::Invalidate(const Napi::CallbackInfo& info) {
  if (session_ != nullptr) fuse_lowlevel_notify_inval_inode(session_, static_cast<fuse_ino_t>(info[0].ToNumber().Int64Value()), -1, 0);
  return info.Env().Undefined();
}

// sweep(): ends the bindings whose re-open window has passed (JS calls it
// now and then, so an idle mount does not keep them).
Napi::Value Server::Sweep(const Napi::CallbackInfo& info) {
  bindings_->Sweep();
  return info.Env().Undefined();
}

// replyBytes(request, handle, buffer, directIo) -> whether the opener got it: the handle JS numbered reads these bytes until release.
Napi::Value Server::ReplyBytes(const Napi::CallbackInfo& info) {
  Pending pending = TakeRequest(info[0]);
  if (pending.req == nullptr) return Napi::Boolean::New(info.Env(), false);
  Napi::Buffer<char> bytes = info[2].As<Napi::Buffer<char>>();
  auto binding = std::make_shared<Binding>();
  binding->data = bytes.Data();
  binding->length = bytes.Length();
  binding->ref = new Napi::Reference<Napi::Buffer<char>>(Napi::Persistent(bytes));
  binding->ino = pending.ino;
  binding->thread = pending.thread;
  binding->jsNumber = static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value());
  auto handle = new Handle();
  handle->bytes = binding;
  return Napi::Boolean::New(info.Env(), Answer(pending, handle, info[3].ToBoolean()));
}

// replyFd(request, handle, fd, offset) -> whether the opener got it: reads come from this descriptor (owned by JS) from `offset` on.
Napi::Value Server::ReplyFd(const Napi::CallbackInfo& info) {
  Pending pending = TakeRequest(info[0]);
  if (pending.req == nullptr) return Napi::Boolean::New(info.Env(), false);
  auto handle = new Handle();
  handle->number = static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value());
  handle->fd = info[2].As<Napi::Number>().Int32Value();
  handle->offset = static_cast<off_t>(info[3].As<Napi::Number>().Int64Value());
  return Napi::Boolean::New(info.Env(), Answer(pending, handle, false));
}

Napi::Value Server::ReplyError(const Napi::CallbackInfo& info) {
  Pending pending = TakeRequest(info[0]);
  if (pending.req != nullptr) fuse_reply_err(pending.req, info[1].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

// The open waiting for this answer; req is null when it is unknown (answered already).
Pending Server::TakeRequest(const Napi::Value& id) {
  std::lock_guard<std::mutex> lock(pendingMutex_);
  auto it = pending_.find(static_cast<uint64_t>(id.As<Napi::Number>().Int64Value()));
  if (it == pending_.end()) return {nullptr, 0, 0};
  Pending pending = it->second;
  pending_.erase(it);
  return pending;
}

bool Server::Answer(const Pending& pending, Handle* handle, bool directIo) {
  struct fuse_file_info fi;
  memset(&fi, 0, sizeof(fi));
  handle->ino = pending.ino;
  fi.fh = reinterpret_cast<uintptr_t>(handle);
  bindings_->Add(handle);
  fi.direct_io = directIo ? 1 : 0;
  fi.keep_cache = directIo ? 0 : 1;
  // The opener went away (interrupted, killed): nothing will release this handle, so it ends here, and
  // JS hears that nobody got it (unless the thread's restarted open re-opened the bytes meanwhile).
  if (fuse_reply_open(pending.req, &fi) != 0) return bindings_->Abandon(handle);
  return true;
}

// On the JS thread: frees released bindings, hands the batch to JS as flat numbers (fuse_events.h).
void Server::Deliver(Napi::Env env, Napi::Function callback) {
  std::vector<Event> batch = events_->TakeAll();
  if (batch.empty()) return;
  Napi::Array opens = Napi::Array::New(env);
  Napi::Array releases = Napi::Array::New(env);
  uint32_t o = 0, r = 0;
  for (Event& e : batch) {
    if (e.type == Event::kOpen) {
      opens.Set(o + OpenRecord::kRequest, Napi::Number::New(env, static_cast<double>(e.id)));
      opens.Set(o + OpenRecord::kInode, Napi::Number::New(env, static_cast<double>(e.ino)));
      opens.Set(o + OpenRecord::kFlags, Napi::Number::New(env, e.flags));
      opens.Set(o + OpenRecord::kThread, Napi::Number::New(env, e.pid));
      opens.Set(o + OpenRecord::kExact, Napi::Number::New(env, e.exact ? 1 : 0));
      o += OpenRecord::kFields;
    } else {
      delete e.ref;
      releases.Set(r++, Napi::Number::New(env, static_cast<double>(e.id)));
    }
  }
  callback.Call({opens, releases});
}

}  // namespace redirfs

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  using redirfs::OpenRecord;
  exports.Set("FuseServer", redirfs::Server::Define(env));
  // The layout of an open in the events JS receives, so JS reads fields by name.
  Napi::Object record = Napi::Object::New(env);
  record.Set("request", OpenRecord::kRequest);
  record.Set("inode", OpenRecord::kInode);
  record.Set("flags", OpenRecord::kFlags);
  record.Set("thread", OpenRecord::kThread);
  record.Set("exact", OpenRecord::kExact);
  record.Set("fields", OpenRecord::kFields);
  exports.Set("openRecord", record);
  return exports;
}

NODE_API_MODULE(redirfs_fuse, Init)
