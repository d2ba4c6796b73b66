// Chunk I/O that Node cannot do well by itself, off the JS thread.
//
// readAligned: one aligned read of a byte range, for a file opened with
//   O_DIRECT (so the page cache keeps no second copy of what the daemon
//   holds in its budget). Where O_DIRECT is not available the file is
//   opened buffered and the range is dropped from the page cache after the
//   read with posix_fadvise(DONTNEED).
// readChunk: one aligned read of a pack chunk, its CRC-32, and the files the
//   protocol asked for copied into buffers JS lends, all on a pool thread;
//   the chunk buffer itself never reaches JS.
// readFiles: many small whole files in one trip to the thread pool, each
//   into a buffer JS lends, for the plain-directory source (fs.readFile
//   costs four trips per file).
// discard: frees a Buffer's memory the moment its handle is released.
// crc32: the chunk reader's CRC-32 (native/crc32.h), for tests.
// listDirectory: a directory's entries and their attributes (links
//   followed) in one trip, for the scan at mount: a stat per file through
//   fs.promises made the scan of a 500,000-file tree take seconds.
//
// Work happens in AsyncWorker::Execute; results become JS values in OnOK;
// buffers made here are handed to JS without copying and freed by their
// finalizer. Sample bytes go into buffers JS keeps and reuses: at thousands
// of samples a second, a fresh buffer per sample (an ArrayBuffer for V8 to
// collect, page faults, zeroing, a TLB shootdown on unmap) cost more CPU
// than serving it.
#include <napi.h>

#include "chunk_pieces.h"
#include "crc32.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kAlignment = 4096;

// Where sample bytes go: the caller's buffers. JS keeps sample-sized
// buffers and reuses them (src/chunks/sample-buffers.ts): a fresh
// ArrayBuffer per sample, thousands a second, was most of the daemon's
// garbage-collection work and a page fault per 4 KiB.
constexpr size_t kMmapFrom = 64 * 1024;  // glibc's mmap threshold, set by tuneAllocator

// Aligned buffers for chunk reads, kept for the next read: a fresh 8 MiB
// buffer per chunk made every O_DIRECT read fault its pages in first.
// Capacities are whole MiB; at most kMaxIdleBytes wait (a few reads' worth).
class ChunkBuffers {
 public:
  static constexpr size_t kStep = 1u << 20;

  // A buffer of at least `size` bytes and its capacity, or null.
  char* Take(size_t size, size_t* capacity) {
    *capacity = (std::max<size_t>(size, 1) + kStep - 1) / kStep * kStep;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto best = idle_.end();
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        if (it->second >= *capacity && (best == idle_.end() || it->second < best->second)) best = it;
      }
      if (best != idle_.end()) {
        char* buffer = best->first;
        *capacity = best->second;
        idleBytes_ -= best->second;
        idle_.erase(best);
        return buffer;
      }
    }
    void* buffer = nullptr;
    return posix_memalign(&buffer, kAlignment, *capacity) == 0 ? static_cast<char*>(buffer) : nullptr;
  }

  void Give(char* buffer, size_t capacity) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (idleBytes_ + capacity <= kMaxIdleBytes) {
        idle_.emplace_back(buffer, capacity);
        idleBytes_ += capacity;
        return;
      }
    }
    std::free(buffer);
  }

 private:
  static constexpr size_t kMaxIdleBytes = 32u << 20;
  std::mutex mutex_;
  std::vector<std::pair<char*, size_t>> idle_;
  size_t idleBytes_ = 0;
};

ChunkBuffers chunkBuffers;

// Buffers handed to JS are malloc'd outside V8's heap. V8 counts every
// ArrayBuffer's bytes as external memory by itself (and uncounts them when
// discard detaches one), which is what makes it collect them in time; telling
// it again with AdjustExternalMemory counted each sample twice and doubled
// the daemon's full garbage collections.
struct Allocation {
  void* base;
  int64_t size;
};

void FreeBuffer(Napi::Env, char*, Allocation* allocation) {
  std::free(allocation->base);
  delete allocation;
}

Napi::Buffer<char> HandToJs(Napi::Env env, void* base, char* data, size_t length, size_t allocated) {
  return Napi::Buffer<char>::New(env, data, length, FreeBuffer, new Allocation{base, static_cast<int64_t>(allocated)});
}

std::string ErrnoMessage(const std::string& what, int error) { return what + ": " + std::strerror(error); }

// An Error whose `code` names the errno (ENOENT, EIO, ...) as Node's own errors do, so JS decides
// by the code, never by the message.
Napi::Value ErrorWithCode(Napi::Env env, const std::string& message, int error) {
  Napi::Error js = Napi::Error::New(env, message);
  const char* name = error != 0 ? strerrorname_np(error) : nullptr;
  if (name != nullptr) {
    js.Set("code", Napi::String::New(env, name));
    js.Set("errno", Napi::Number::New(env, -error));
  }
  return js.Value();
}

class ReadAlignedWorker : public Napi::AsyncWorker {
 public:
  ReadAlignedWorker(Napi::Env env, int fd, uint64_t offset, uint64_t length, bool direct)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), fd_(fd), offset_(offset), length_(length), direct_(direct) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    const auto [start, size] = chunkpieces::AlignedSpan(offset_, length_, kAlignment);
    allocated_ = size == 0 ? kAlignment : size;
    if (posix_memalign(&base_, kAlignment, allocated_) != 0) {
      errorCode_ = ENOMEM;
      SetError("cannot allocate an aligned buffer");
      return;
    }
    size_t done = 0;
    while (done < size) {
      ssize_t n = pread(fd_, static_cast<char*>(base_) + done, size - done, start + done);
      if (n < 0) {
        if (errno == EINTR) continue;
        errorCode_ = errno;
        SetError(ErrnoMessage("pread", errorCode_));
        return;
      }
      if (n == 0) break;  // end of file: the caller checks the length it got
      done += n;
    }
    if (!direct_) posix_fadvise(fd_, start, size, POSIX_FADV_DONTNEED);
    skip_ = offset_ - start;
    available_ = done > skip_ ? std::min<uint64_t>(done - skip_, length_) : 0;
  }

  void OnOK() override {
    void* base = base_;
    base_ = nullptr;
    deferred_.Resolve(HandToJs(Env(), base, static_cast<char*>(base) + skip_, available_, allocated_));
  }

  void OnError(const Napi::Error& error) override {
    std::free(base_);
    base_ = nullptr;
    deferred_.Reject(ErrorWithCode(Env(), error.Message(), errorCode_));
  }

 private:
  Napi::Promise::Deferred deferred_;
  int errorCode_ = 0;  // the errno behind SetError
  int fd_;
  uint64_t offset_, length_;
  bool direct_;
  void* base_ = nullptr;
  uint64_t skip_ = 0, available_ = 0;
  size_t allocated_ = 0;
};

// Buffers JS lends a read to fill, kept alive (by a reference to the array
// holding them) until the read is done. On the JS thread only.
class Targets {
 public:
  explicit Targets(Napi::Array array) : keep_(Napi::Persistent(array)) {
    for (uint32_t i = 0; i < array.Length(); i++) {
      Napi::Value value = array.Get(i);
      if (!value.IsBuffer()) {
        spans_.emplace_back(nullptr, 0);
        continue;
      }
      Napi::Buffer<char> buffer = value.As<Napi::Buffer<char>>();
      spans_.emplace_back(buffer.Data(), buffer.Length());
    }
  }
  size_t Count() const { return spans_.size(); }
  char* Data(size_t i) const { return spans_[i].first; }
  size_t Length(size_t i) const { return spans_[i].second; }
  const std::vector<chunkpieces::Target>& Spans() const { return spans_; }

 private:
  Napi::Reference<Napi::Array> keep_;
  std::vector<chunkpieces::Target> spans_;
};

// Reads [offset, offset + length) like ReadAlignedWorker, checks nothing
// itself (JS compares the CRCs with the pack index), and copies the pieces
// (start relative to offset, size) into the targets JS lent, piece i into
// target i. Each byte is summed once: the span's CRC is combined from the
// pieces' and the gaps'.
class ReadChunkWorker : public Napi::AsyncWorker {
 public:
  ReadChunkWorker(Napi::Env env, int fd, uint64_t offset, uint64_t length, bool direct, std::vector<std::pair<uint64_t, uint64_t>> pieces, Napi::Array targets)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        fd_(fd),
        offset_(offset),
        length_(length),
        direct_(direct),
        pieces_(std::move(pieces)),
        targets_(targets) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    const auto [start, size] = chunkpieces::AlignedSpan(offset_, length_, kAlignment);
    size_t capacity = 0;
    char* base = chunkBuffers.Take(size, &capacity);
    if (base == nullptr) {
      errorCode_ = ENOMEM;
      SetError("cannot allocate an aligned buffer");
      return;
    }
    size_t done = 0;
    while (done < size) {
      ssize_t n = pread(fd_, base + done, size - done, start + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        chunkBuffers.Give(base, capacity);
        errorCode_ = errno;
        SetError(ErrnoMessage("pread", errorCode_));
        return;
      }
      if (n == 0) break;
      done += n;
    }
    if (!direct_) posix_fadvise(fd_, start, size, POSIX_FADV_DONTNEED);
    available_ = done > offset_ - start ? std::min<uint64_t>(done - (offset_ - start), length_) : 0;
    crc_ = chunkpieces::CopyPieces(base + (offset_ - start), available_, length_, pieces_, targets_.Spans(), &pieceCrcs_);
    chunkBuffers.Give(base, capacity);
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object out = Napi::Object::New(env);
    out.Set("length", Napi::Number::New(env, static_cast<double>(available_)));
    out.Set("crc", Napi::Number::New(env, static_cast<double>(crc_)));
    out.Set("copied", Napi::Number::New(env, static_cast<double>(pieceCrcs_.size())));
    Napi::Array crcs = Napi::Array::New(env, pieceCrcs_.size());
    for (size_t i = 0; i < pieceCrcs_.size(); i++) crcs.Set(i, Napi::Number::New(env, pieceCrcs_[i]));
    out.Set("fileCrcs", crcs);
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& error) override { deferred_.Reject(ErrorWithCode(Env(), error.Message(), errorCode_)); }

 private:
  Napi::Promise::Deferred deferred_;
  int errorCode_ = 0;  // the errno behind SetError
  int fd_;
  uint64_t offset_, length_;
  bool direct_;
  std::vector<std::pair<uint64_t, uint64_t>> pieces_;
  Targets targets_;
  std::vector<uint32_t> pieceCrcs_;  // of the pieces copied, in order
  uint64_t available_ = 0;
  unsigned long crc_ = 0;
};

struct FileResult {
  size_t size = 0;      // bytes read into the target
  char* own = nullptr;  // or, for a file that did not fit it, a buffer of its own
  size_t ownCapacity = 0;
  std::string error;
  int code = 0;  // the errno behind error
};

// Reads each file into the target JS lent for it (sized from the scan,
// plus one byte, so a file that did not change is read in one call plus
// the end-of-file read). A file that fills its target has grown since the
// scan: it is read whole into a buffer of its own; never served cut short.
class ReadFilesWorker : public Napi::AsyncWorker {
 public:
  // What the scan saw of each file, when given (src/chunks/native.ts, Expected).
  enum ExpectedField { kExpectMtimeSec, kExpectMtimeNsec, kExpectDev, kExpectIno, kExpectMode, kExpectUid, kExpectGid, kExpectedFields };

  ReadFilesWorker(Napi::Env env, std::vector<std::string> paths, Napi::Array targets, std::vector<double> expected)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        paths_(std::move(paths)),
        targets_(targets),
        expected_(std::move(expected)),
        results_(paths_.size()) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    for (size_t i = 0; i < paths_.size(); i++) {
      bool lent = i < targets_.Count() && targets_.Data(i) != nullptr;
      const double* expected = kExpectedFields * (i + 1) <= expected_.size() ? &expected_[kExpectedFields * i] : nullptr;
      ReadOne(paths_[i], lent ? targets_.Data(i) : nullptr, lent ? targets_.Length(i) : 0, expected, results_[i]);
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Array out = Napi::Array::New(env, results_.size());
    for (size_t i = 0; i < results_.size(); i++) {
      FileResult& r = results_[i];
      if (!r.error.empty()) {
        out.Set(i, ErrorWithCode(env, r.error, r.code));
      } else if (r.own != nullptr) {
        char* own = r.own;
        r.own = nullptr;
        out.Set(i, HandToJs(env, own, own, r.size, r.ownCapacity));
      } else {
        out.Set(i, Napi::Number::New(env, static_cast<double>(r.size)));
      }
    }
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }  // each file's own error is in its result

  ~ReadFilesWorker() override {
    for (FileResult& r : results_) std::free(r.own);
  }

 private:
  // Why the file now at `path` is not the one the scan saw (`expected`), or
  // empty: another file (a link or a rename put in its place), one modified
  // since, or one whose owner or mode no longer allow what the mount shows
  // (a chmod after the mount must not leave a file readable through it).
  static std::string Changed(const struct stat& st, const double* expected, int& code) {
    code = ESTALE;
    if (static_cast<double>(st.st_dev) != expected[kExpectDev] || static_cast<double>(st.st_ino) != expected[kExpectIno]) return "replaced in the source since the mount";
    if (static_cast<double>(st.st_mtim.tv_sec) != expected[kExpectMtimeSec] || static_cast<double>(st.st_mtim.tv_nsec) != expected[kExpectMtimeNsec])
      return "modified in the source since the mount";
    code = EACCES;
    unsigned shown = static_cast<unsigned>(expected[kExpectMode]) & 0777;
    if (static_cast<double>(st.st_uid) != expected[kExpectUid] || static_cast<double>(st.st_gid) != expected[kExpectGid] || (shown & ~st.st_mode) != 0)
      return "owner or permissions changed in the source since the mount";
    return "";
  }

  // Opens without blocking (a FIFO put in a file's place must not hang the
  // reader) and reads regular files only.
  static void ReadOne(const std::string& path, char* target, size_t targetLength, const double* expected, FileResult& result) {
    // Looked at before it is opened for reading: an O_PATH open has no effect on what it names (a
    // device or a FIFO put in a file's place is never really opened), and the reading open goes
    // through it, so what is read is what was checked.
    int pathFd = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (pathFd < 0) {
      result.code = errno;
      result.error = ErrnoMessage(path, result.code);
      return;
    }
    struct stat st;
    std::string why;
    if (fstat(pathFd, &st) != 0) {
      result.code = errno;
      why = std::strerror(result.code);
    } else if (!S_ISREG(st.st_mode)) {
      result.code = expected != nullptr ? ESTALE : EINVAL;
      why = "not a regular file";
    } else if (expected != nullptr) {
      why = Changed(st, expected, result.code);
    }
    int fd = -1;
    if (why.empty()) {
      fd = open(("/proc/self/fd/" + std::to_string(pathFd)).c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
      if (fd < 0) {
        result.code = errno;
        why = std::strerror(result.code);
      }
    }
    close(pathFd);
    if (!why.empty()) {
      result.error = path + ": " + why;
      return;
    }
    char* into = target;
    size_t capacity = targetLength;
    while (true) {
      if (result.size == capacity && expected != nullptr && target != nullptr) {  // it grew past its scanned size (the target has one byte more)
        result.code = ESTALE;
        result.error = path + ": modified in the source since the mount";
        break;
      }
      if (result.size == capacity) {  // no target, or the file outgrew it: a buffer of its own, twice as large
        size_t bigger = std::max<size_t>(capacity * 2, kMmapFrom);
        char* own = static_cast<char*>(std::realloc(result.own, bigger));
        if (own == nullptr) {  // never serve a file cut short
          result.code = ENOMEM;
          result.error = path + ": out of memory";
          break;
        }
        if (result.own == nullptr && result.size > 0) std::memcpy(own, target, result.size);  // an empty target may have no memory (null)
        result.own = into = own;
        result.ownCapacity = capacity = bigger;
      }
      ssize_t n = pread(fd, into + result.size, capacity - result.size, result.size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        result.code = errno;
        result.error = ErrnoMessage(path, result.code);
        break;
      }
      if (n == 0) break;
      result.size += n;
    }
    // Written to while it was read: the bytes may be torn.
    if (result.error.empty() && expected != nullptr &&
        (fstat(fd, &st) != 0 || static_cast<double>(st.st_mtim.tv_sec) != expected[kExpectMtimeSec] || static_cast<double>(st.st_mtim.tv_nsec) != expected[kExpectMtimeNsec])) {
      result.code = ESTALE;
      result.error = path + ": modified in the source while it was read";
    }
    close(fd);
  }

  Napi::Promise::Deferred deferred_;
  std::vector<std::string> paths_;
  Targets targets_;
  std::vector<double> expected_;
  std::vector<FileResult> results_;
};

// Offsets, lengths and pieces from JS are checked as whole numbers before any arithmetic (chunk_pieces.h).
bool ByteCount(const Napi::Value& value, uint64_t* out) { return value.IsNumber() && chunkpieces::ByteCount(value.As<Napi::Number>().DoubleValue(), out); }

Napi::Value ReadAligned(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsBoolean()) {
    Napi::TypeError::New(env, "readAligned(fd, offset, length, direct)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  uint64_t offset, length;
  if (!ByteCount(info[1], &offset) || !ByteCount(info[2], &length)) {
    Napi::RangeError::New(env, "readAligned: offset and length must be whole numbers from 0 to 2^53").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* worker = new ReadAlignedWorker(env, info[0].As<Napi::Number>().Int32Value(), offset, length, info[3].As<Napi::Boolean>().Value());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value ReadChunk(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 6 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsBoolean() || !info[4].IsTypedArray() || !info[5].IsArray()) {
    Napi::TypeError::New(env, "readChunk(fd, offset, length, direct, pieces: Float64Array of start, size pairs, targets: Buffer[])").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  uint64_t offset, length;
  if (!ByteCount(info[1], &offset) || !ByteCount(info[2], &length) || info[4].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    Napi::RangeError::New(env, "readChunk: offset and length must be whole numbers from 0 to 2^53, pieces a Float64Array").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Float64Array flat = info[4].As<Napi::Float64Array>();
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for (size_t i = 0; i + 1 < flat.ElementLength(); i += 2) {
    std::pair<uint64_t, uint64_t> piece;
    if (!chunkpieces::PieceInside(flat[i], flat[i + 1], length, &piece)) {
      Napi::RangeError::New(env, "readChunk: every piece must lie inside the range read").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    pieces.push_back(piece);
  }
  auto* worker =
      new ReadChunkWorker(env, info[0].As<Napi::Number>().Int32Value(), offset, length, info[3].As<Napi::Boolean>().Value(), std::move(pieces), info[5].As<Napi::Array>());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value ReadFiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsArray() || !info[1].IsArray()) {
    Napi::TypeError::New(env, "readFiles(paths, targets: Buffer[], expected?: Float64Array)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Array array = info[0].As<Napi::Array>();
  std::vector<std::string> paths;
  paths.reserve(array.Length());
  for (uint32_t i = 0; i < array.Length(); i++) paths.push_back(array.Get(i).As<Napi::String>().Utf8Value());
  std::vector<double> expected;
  if (info.Length() > 2 && info[2].IsTypedArray()) {
    Napi::Float64Array given = info[2].As<Napi::Float64Array>();
    expected.assign(given.Data(), given.Data() + given.ElementLength());
  }
  auto* worker = new ReadFilesWorker(env, std::move(paths), info[1].As<Napi::Array>(), std::move(expected));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

// Whether an entry has an ACL, which can keep a user from what its mode bits allow (user:bob:---)
// where the mount's mode check cannot see it: a POSIX access ACL or an NFSv4 one. An error other
// than "no such attribute" or "not supported" counts as one: the scan then narrows, never widens.
static bool HasAcl(const std::string& path) {
  for (const char* name : {"system.posix_acl_access", "system.nfs4_acl"}) {
    ssize_t n = getxattr(path.c_str(), name, nullptr, 0);
    if (n > 0) return true;
    if (n < 0 && errno != ENODATA && errno != ENOTSUP && errno != EOPNOTSUPP) return true;
  }
  return false;
}

// The attributes listDirectory gives per entry, as numbers in this order.
enum ListedField { kMode, kSize, kUid, kGid, kNlink, kAtimeSec, kAtimeNsec, kMtimeSec, kMtimeNsec, kCtimeSec, kCtimeNsec, kErrno, kDev, kIno, kLink, kAcl, kListedFields };

class ListDirectoryWorker : public Napi::AsyncWorker {
 public:
  ListDirectoryWorker(Napi::Env env, std::string path) : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), path_(std::move(path)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    DIR* dir = opendir(path_.c_str());
    if (dir == nullptr) {
      errorCode_ = errno;
      SetError(ErrnoMessage(path_, errorCode_));
      return;
    }
    int dirFd = dirfd(dir);
    while (true) {
      errno = 0;
      struct dirent* entry = readdir(dir);
      if (entry == nullptr) {
        if (errno != 0) {
          errorCode_ = errno;
          SetError(ErrnoMessage(path_, errorCode_));
        }
        break;
      }
      if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
      names_.emplace_back(entry->d_name);
      double fields[kListedFields] = {};
      // A symbolic link: where it really leads (every link on the way resolved), for the scan's
      // access rule (src/chunks/access.ts); empty for anything else, or when it leads nowhere.
      bool link = entry->d_type == DT_LNK;
      struct stat own;
      if (entry->d_type == DT_UNKNOWN && fstatat(dirFd, entry->d_name, &own, AT_SYMLINK_NOFOLLOW) == 0) link = S_ISLNK(own.st_mode);
      targets_.emplace_back();
      if (link) fields[kLink] = 1;
      // Everything else comes from one open of the entry (O_PATH: links followed as ImageFolder
      // follows them, nothing read, no effect on a device), so where a link leads, what the
      // entry is and whether it has an ACL cannot be of two files when the link is switched
      // meanwhile. A broken link is ENOENT.
      int fd = openat(dirFd, entry->d_name, O_PATH | O_CLOEXEC);
      struct stat st;
      if (fd < 0 || fstat(fd, &st) != 0) {
        fields[kErrno] = errno;
      } else {
        fields[kMode] = st.st_mode;
        fields[kSize] = static_cast<double>(st.st_size);
        fields[kUid] = st.st_uid;
        fields[kGid] = st.st_gid;
        fields[kNlink] = static_cast<double>(st.st_nlink);
        fields[kAtimeSec] = static_cast<double>(st.st_atim.tv_sec);
        fields[kAtimeNsec] = static_cast<double>(st.st_atim.tv_nsec);
        fields[kMtimeSec] = static_cast<double>(st.st_mtim.tv_sec);
        fields[kMtimeNsec] = static_cast<double>(st.st_mtim.tv_nsec);
        fields[kCtimeSec] = static_cast<double>(st.st_ctim.tv_sec);
        fields[kCtimeNsec] = static_cast<double>(st.st_ctim.tv_nsec);
        fields[kDev] = static_cast<double>(st.st_dev);
        fields[kIno] = static_cast<double>(st.st_ino);
        std::string self = "/proc/self/fd/" + std::to_string(fd);
        if (link) {
          char real[PATH_MAX];
          ssize_t n = readlink(self.c_str(), real, sizeof(real));
          if (n > 0 && static_cast<size_t>(n) < sizeof(real)) targets_.back().assign(real, static_cast<size_t>(n));
        }
        fields[kAcl] = HasAcl(self) ? 1 : 0;
      }
      if (fd >= 0) close(fd);
      fields_.insert(fields_.end(), fields, fields + kListedFields);
    }
    closedir(dir);
  }

  // { names: Buffer[] (the bytes as the directory has them), fields: Float64Array, kListedFields per entry }
  void OnOK() override {
    Napi::Env env = Env();
    Napi::Array names = Napi::Array::New(env, names_.size());
    for (size_t i = 0; i < names_.size(); i++) names.Set(i, Napi::Buffer<char>::Copy(env, names_[i].data(), names_[i].size()));
    Napi::Float64Array fields = Napi::Float64Array::New(env, fields_.size());
    std::memcpy(fields.Data(), fields_.data(), fields_.size() * sizeof(double));
    Napi::Object out = Napi::Object::New(env);
    Napi::Array targets = Napi::Array::New(env, targets_.size());
    for (size_t i = 0; i < targets_.size(); i++) targets.Set(i, Napi::Buffer<char>::Copy(env, targets_[i].data(), targets_[i].size()));
    out.Set("names", names);
    out.Set("fields", fields);
    out.Set("targets", targets);
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& error) override { deferred_.Reject(ErrorWithCode(Env(), error.Message(), errorCode_)); }

 private:
  Napi::Promise::Deferred deferred_;
  std::string path_;
  std::vector<std::string> names_;
  std::vector<std::string> targets_;
  std::vector<double> fields_;
  int errorCode_ = 0;
};

Napi::Value ListDirectory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) {
    Napi::TypeError::New(env, "listDirectory(path)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* worker = new ListDirectoryWorker(env, info[0].As<Napi::String>().Utf8Value());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

// discard(buffer): frees a Buffer's memory now rather than at some later
// garbage collection, when the Buffer is the only view of that memory (a
// sample's bytes once its handle is released). Every view of the memory
// becomes empty, so a Buffer that shares its memory is left alone.
// Returns whether the memory was let go.
Napi::Value Discard(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) {
    Napi::TypeError::New(env, "discard(buffer)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Buffer<char> buffer = info[0].As<Napi::Buffer<char>>();
  Napi::ArrayBuffer memory = buffer.ArrayBuffer();
  bool sole = buffer.ByteOffset() == 0 && buffer.ByteLength() == memory.ByteLength() && memory.ByteLength() > 0;
  if (!sole || memory.IsDetached()) return Napi::Boolean::New(env, false);
  memory.Detach();
  return Napi::Boolean::New(env, true);
}

// Sample-sized buffers (the reused ones, and chunk reads' results) are
// freed on the JS thread, some allocated on pool threads. With glibc's
// defaults (a per-thread arena each, and an mmap threshold that rises after
// the first frees) their memory stays in the arenas and the daemon's RSS
// sits far above its budget. Serving them by mmap returns memory to the
// system the moment it is freed. Process-wide,
// so the daemon asks for it when it starts; loading the addon changes nothing.
Napi::Value TuneAllocator(const Napi::CallbackInfo& info) {
  mallopt(M_MMAP_THRESHOLD, kMmapFrom);
  mallopt(M_ARENA_MAX, 2);
  return info.Env().Undefined();
}

// crc32(bytes, initial = 0): the CRC-32 the chunk reader computes, as zlib's crc32 would (for tests).
Napi::Value Crc32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) {
    Napi::TypeError::New(env, "crc32(buffer, initial)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Buffer<char> bytes = info[0].As<Napi::Buffer<char>>();
  uint32_t initial = info.Length() > 1 ? info[1].ToNumber().Uint32Value() : 0;
  return Napi::Number::New(env, crc32fast::Crc32(initial, bytes.Data(), bytes.Length()));
}

// Change notification for a directory source (src/chunks/source-watch.ts): an inotify instance,
// watches on directories, and its pending events read without blocking, on the JS thread, before
// each open is decided: a change made before the open reached the daemon is always seen.
Napi::Value WatchOpen(const Napi::CallbackInfo& info) {
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    Napi::Error::New(info.Env(), ErrnoMessage("inotify_init1", errno)).ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }
  return Napi::Number::New(info.Env(), fd);
}

// watchAdd(fd, path, directory): the watch descriptor, or an Error whose code names the errno (ENOSPC: out of
// watches; ENOTDIR: `directory` and the path is not one).
Napi::Value WatchAdd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsString() || !info[2].IsBoolean()) {
    Napi::TypeError::New(env, "watchAdd(fd, path, directory)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  std::string path = info[1].As<Napi::String>().Utf8Value();
  // What can make an entry less readable, or another entry: its mode, owner, ACL (IN_ATTRIB), and names
  // moved, created or deleted; the entry itself moved or deleted. A file (one with other hard links) is
  // watched for its own changes; a directory must be one.
  constexpr uint32_t kMask = IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF;
  uint32_t mask = info[2].As<Napi::Boolean>().Value() ? kMask | IN_ONLYDIR : kMask;
  int wd = inotify_add_watch(info[0].As<Napi::Number>().Int32Value(), path.c_str(), mask);
  if (wd < 0) return ErrorWithCode(env, ErrnoMessage(path, errno), errno);
  return Napi::Number::New(env, wd);
}

// watchRead(fd): every event pending now, as { wds, masks, names } (a name is empty for the watched
// directory's own events); undefined when none is.
Napi::Value WatchRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(env, "watchRead(fd)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int fd = info[0].As<Napi::Number>().Int32Value();
  std::vector<int32_t> wds;
  std::vector<uint32_t> masks;
  std::vector<std::string> names;
  alignas(struct inotify_event) char buffer[64 * 1024];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: nothing more pending
    for (char* at = buffer; at < buffer + n;) {
      const auto* event = reinterpret_cast<const struct inotify_event*>(at);
      wds.push_back(event->wd);
      masks.push_back(event->mask);
      names.emplace_back(event->len > 0 ? event->name : "");
      at += sizeof(struct inotify_event) + event->len;
    }
  }
  if (wds.empty()) return env.Undefined();  // the usual answer, at every open: nothing to build
  Napi::Object out = Napi::Object::New(env);
  Napi::Int32Array wdArray = Napi::Int32Array::New(env, wds.size());
  Napi::Uint32Array maskArray = Napi::Uint32Array::New(env, masks.size());
  Napi::Array nameArray = Napi::Array::New(env, names.size());
  for (size_t i = 0; i < wds.size(); i++) {
    wdArray[i] = wds[i];
    maskArray[i] = masks[i];
    nameArray.Set(i, Napi::Buffer<char>::Copy(env, names[i].data(), names[i].size()));
  }
  out.Set("wds", wdArray);
  out.Set("masks", maskArray);
  out.Set("names", nameArray);
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("watchOpen", Napi::Function::New(env, WatchOpen));
  exports.Set("watchAdd", Napi::Function::New(env, WatchAdd));
  exports.Set("watchRead", Napi::Function::New(env, WatchRead));
  exports.Set("crc32", Napi::Function::New(env, Crc32));
  exports.Set("tuneAllocator", Napi::Function::New(env, TuneAllocator));
  exports.Set("readAligned", Napi::Function::New(env, ReadAligned));
  exports.Set("readChunk", Napi::Function::New(env, ReadChunk));
  exports.Set("readFiles", Napi::Function::New(env, ReadFiles));
  exports.Set("hasAcl", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
                if (info.Length() < 1 || !info[0].IsString()) {
                  Napi::TypeError::New(info.Env(), "hasAcl(path)").ThrowAsJavaScriptException();
                  return info.Env().Undefined();
                }
                return Napi::Boolean::New(info.Env(), HasAcl(info[0].As<Napi::String>().Utf8Value()));
              }));
  exports.Set("discard", Napi::Function::New(env, Discard));
  exports.Set("listDirectory", Napi::Function::New(env, ListDirectory));
  return exports;
}

}  // namespace

NODE_API_MODULE(redirfs_native, Init)
