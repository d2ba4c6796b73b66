// The FUSE operations, on libfuse's threads. Everything but an open is
// answered here from the tree (fuse_tree.h) and the bindings
// (fuse_bindings.h); an open that is not a re-open is queued for JS.
//
// Kernel caching per node (docs/design.md, "The FUSE layer"): directories
// and non-samples get long entry and attribute timeouts and the page cache;
// samples (and the control files) get uncached attributes and direct_io,
// because a redirected handle serves another length than the path's.
// While a handle of a path is bound, getattr of that path reports the bound
// size, as fstat on the handle does.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "fuse_server.h"

namespace redirfs {

bool Server::Attributes(fuse_ino_t ino, struct stat* st, const Handle* handle, pid_t thread) {
  memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  if (IsControl(ino)) {
    // Anyone who may see the mount may read its stats; only its owner (and root) may reset it.
    st->st_mode = ino == controlDirIno_ ? (S_IFDIR | 0555) : ino == resetIno_ ? (S_IFREG | 0400) : (S_IFREG | 0444);
    st->st_nlink = ino == controlDirIno_ ? 2 : 1;
    st->st_uid = ino == resetIno_ ? ownerUid_ : tree_.uid[0];
    st->st_gid = ino == resetIno_ ? ownerGid_ : tree_.gid[0];
    st->st_atim = st->st_mtim = st->st_ctim = mountedAt_;
    st->st_size = handle != nullptr && handle->bytes != nullptr ? static_cast<off_t>(handle->bytes->length) : static_cast<off_t>(bindings_->BoundSize(ino, thread, 0));
    return true;
  }
  if (!tree_.Has(ino)) return false;
  tree_.Fill(ino, st);
  if (handle != nullptr && handle->bytes != nullptr)
    st->st_size = static_cast<off_t>(handle->bytes->length);
  else if (tree_.IsSample(ino))
    st->st_size = static_cast<off_t>(bindings_->BoundSize(ino, thread, static_cast<size_t>(st->st_size)));
  st->st_blksize = BlockSizeFor(st->st_size);
  st->st_blocks = (st->st_size + 511) / 512;
  return true;
}

void Server::Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server* s = Of(req);
  s->lookups_++;
  fuse_ino_t found = 0;
  if (parent == 1 && s->controlName_ == name)
    found = s->controlDirIno_;
  else if (parent == s->controlDirIno_)
    found = strcmp(name, "stats") == 0 ? s->statsIno_ : strcmp(name, "reset") == 0 ? s->resetIno_ : 0;
  else
    found = s->tree_.Child(parent, name);
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
  entry.attr_timeout = s->tree_.TimeoutOf(found);
  entry.entry_timeout = s->IsControl(found) ? 0.0 : kStableTimeout;
  fuse_reply_entry(req, &entry);
}

void Server::GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server* s = Of(req);
  s->getattrs_++;
  const Handle* handle = HandleOf(fi);
  pid_t thread = fuse_req_ctx(req)->pid;
  if (fi == nullptr && s->bindings_->Reopening() && s->tree_.IsSample(ino)) s->bindings_->NoteStat(thread, ino);
  struct stat st;
  if (!s->Attributes(ino, &st, handle, thread)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_reply_attr(req, &st, s->tree_.TimeoutOf(ino));
}

// Offsets are positions in the listing ".", "..", then the children in name order.
void Server::ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  Server* s = Of(req);
  const Tree& t = s->tree_;
  bool control = ino == s->controlDirIno_;
  if (!control && !t.Has(ino)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  if (!control && !t.IsDirectory(ino)) {
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

void Server::Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server* s = Of(req);
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC) != 0) {
    fuse_reply_err(req, EROFS);
    return;
  }
  if (ino == s->controlDirIno_) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if (!s->tree_.Has(ino) && ino != s->statsIno_ && ino != s->resetIno_) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  if (s->tree_.IsDirectory(ino)) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if (s->Stopping()) {  // closed, its mount gone: no JS will answer
    fuse_reply_err(req, ENOTCONN);
    return;
  }
  s->opens_++;
  pid_t thread = fuse_req_ctx(req)->pid;
  bool exact = false;
  if (s->bindings_->Reopening() && s->tree_.IsSample(ino)) {
    // A re-open is answered here with the thread's last binding, no JS.
    if (Handle* handle = s->bindings_->Reopen(ino, thread, &exact)) {
      s->reopens_++;
      struct fuse_file_info answer;
      memset(&answer, 0, sizeof(answer));
      answer.fh = reinterpret_cast<uintptr_t>(handle);
      answer.direct_io = 1;
      if (fuse_reply_open(req, &answer) != 0) s->bindings_->Release(handle);
      return;
    }
    if (exact) s->exactOpens_++;
  }
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(s->pendingMutex_);
    id = s->nextRequest_++;
    s->pending_[id] = {req, ino, thread};
  }
  s->events_->Post({Event::kOpen, id, ino, fi->flags, thread, nullptr, exact});
}

void Server::Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, struct fuse_file_info* fi) {
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

void Server::Release(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  if (Handle* handle = HandleOf(fi)) Of(req)->bindings_->Release(handle);
  fuse_reply_err(req, 0);
}

void Server::StatFs(fuse_req_t req, fuse_ino_t) {
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

void Server::Access(fuse_req_t req, fuse_ino_t ino, int mask) {
  Server* s = Of(req);
  if (!s->tree_.Has(ino) && !s->IsControl(ino)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_reply_err(req, (mask & W_OK) != 0 ? EROFS : 0);
}

struct fuse_lowlevel_ops Server::Operations() {
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

}  // namespace redirfs
