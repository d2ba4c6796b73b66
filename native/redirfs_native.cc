// Chunk I/O that Node cannot do well by itself, off the JS thread.
//
// readAligned: one aligned read of a byte range, for a file opened with
//   O_DIRECT (so the page cache keeps no second copy of what the daemon
//   holds in its budget). Where O_DIRECT is not available the file is
//   opened buffered and the range is dropped from the page cache after the
//   read with posix_fadvise(DONTNEED).
// readFiles: many small whole files in one trip to the thread pool, for the
//   plain-directory source (fs.readFile costs four trips per file).
//
// Work happens in AsyncWorker::Execute; results become JS values in OnOK;
// buffers are handed to JS without copying and freed by their finalizer.
#include <napi.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <malloc.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr size_t kAlignment = 4096;

// Buffers handed to JS are malloc'd outside V8's heap. V8 is told their size
// (and told again when they are freed), or it would not collect them in time
// and the daemon would hold far more than its memory budget.
struct Allocation {
  void* base;
  int64_t size;
};

void FreeBuffer(Napi::Env env, char*, Allocation* allocation) {
  Napi::MemoryManagement::AdjustExternalMemory(env, -allocation->size);
  std::free(allocation->base);
  delete allocation;
}

Napi::Buffer<char> HandToJs(Napi::Env env, void* base, char* data, size_t length, size_t allocated) {
  Napi::MemoryManagement::AdjustExternalMemory(env, static_cast<int64_t>(allocated));
  return Napi::Buffer<char>::New(env, data, length, FreeBuffer, new Allocation{base, static_cast<int64_t>(allocated)});
}

std::string ErrnoMessage(const std::string& what, int error) {
  return what + ": " + std::strerror(error);
}

class ReadAlignedWorker : public Napi::AsyncWorker {
 public:
  ReadAlignedWorker(Napi::Env env, int fd, uint64_t offset, uint64_t length, bool direct)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)),
        fd_(fd), offset_(offset), length_(length), direct_(direct) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    const uint64_t start = offset_ & ~(uint64_t)(kAlignment - 1);
    const uint64_t end = (offset_ + length_ + kAlignment - 1) & ~(uint64_t)(kAlignment - 1);
    const size_t size = end - start;
    allocated_ = size == 0 ? kAlignment : size;
    if (posix_memalign(&base_, kAlignment, allocated_) != 0) {
      SetError("cannot allocate an aligned buffer");
      return;
    }
    size_t done = 0;
    while (done < size) {
      ssize_t n = pread(fd_, static_cast<char*>(base_) + done, size - done, start + done);
      if (n < 0) {
        if (errno == EINTR) continue;
        SetError(ErrnoMessage("pread", errno));
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
    deferred_.Reject(error.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  int fd_;
  uint64_t offset_, length_;
  bool direct_;
  void* base_ = nullptr;
  uint64_t skip_ = 0, available_ = 0;
  size_t allocated_ = 0;
};

struct FileResult {
  char* data = nullptr;
  size_t size = 0;
  size_t capacity = 0;
  std::string error;
};

class ReadFilesWorker : public Napi::AsyncWorker {
 public:
  ReadFilesWorker(Napi::Env env, std::vector<std::string> paths)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), paths_(std::move(paths)), results_(paths_.size()) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    for (size_t i = 0; i < paths_.size(); i++) ReadOne(paths_[i], results_[i]);
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Array out = Napi::Array::New(env, results_.size());
    for (size_t i = 0; i < results_.size(); i++) {
      FileResult& r = results_[i];
      if (!r.error.empty()) {
        out.Set(i, Napi::Error::New(env, r.error).Value());
      } else {
        char* data = r.data;
        r.data = nullptr;
        out.Set(i, HandToJs(env, data, data, r.size, r.capacity));
      }
    }
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

  ~ReadFilesWorker() override {
    for (FileResult& r : results_) std::free(r.data);
  }

 private:
  static void ReadOne(const std::string& path, FileResult& result) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      result.error = ErrnoMessage(path, errno);
      return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      result.error = ErrnoMessage(path, errno);
      close(fd);
      return;
    }
    size_t capacity = st.st_size > 0 ? st.st_size : 1;
    result.data = static_cast<char*>(std::malloc(capacity));
    while (result.data != nullptr) {
      ssize_t n = pread(fd, result.data + result.size, capacity - result.size, result.size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        result.error = ErrnoMessage(path, errno);
        break;
      }
      if (n == 0) break;
      result.size += n;
      if (result.size == capacity) {  // the file grew since fstat: keep reading
        capacity *= 2;
        char* bigger = static_cast<char*>(std::realloc(result.data, capacity));
        if (bigger == nullptr) break;
        result.data = bigger;
      }
    }
    result.capacity = capacity;
    if (result.data == nullptr && result.error.empty()) result.error = path + ": out of memory";
    close(fd);
  }

  Napi::Promise::Deferred deferred_;
  std::vector<std::string> paths_;
  std::vector<FileResult> results_;
};

Napi::Value ReadAligned(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsBoolean()) {
    Napi::TypeError::New(env, "readAligned(fd, offset, length, direct)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* worker = new ReadAlignedWorker(env, info[0].As<Napi::Number>().Int32Value(),
                                       static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value()),
                                       static_cast<uint64_t>(info[2].As<Napi::Number>().Int64Value()),
                                       info[3].As<Napi::Boolean>().Value());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value ReadFiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArray()) {
    Napi::TypeError::New(env, "readFiles(paths)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Array array = info[0].As<Napi::Array>();
  std::vector<std::string> paths;
  paths.reserve(array.Length());
  for (uint32_t i = 0; i < array.Length(); i++) paths.push_back(array.Get(i).As<Napi::String>().Utf8Value());
  auto* worker = new ReadFilesWorker(env, std::move(paths));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  // Sample-sized buffers are allocated on pool threads and freed on the JS
  // thread. With glibc's defaults (a per-thread arena each, and an mmap
  // threshold that rises after the first frees) their memory stays in the
  // arenas and the daemon's RSS sits far above its budget. Serve them by
  // mmap, which returns memory to the system the moment it is freed.
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  mallopt(M_ARENA_MAX, 2);
  exports.Set("readAligned", Napi::Function::New(env, ReadAligned));
  exports.Set("readFiles", Napi::Function::New(env, ReadFiles));
  exports.Set("alignment", Napi::Number::New(env, kAlignment));
  return exports;
}

}  // namespace

NODE_API_MODULE(redirfs_native, Init)
