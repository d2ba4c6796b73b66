// The dataset tree as the FUSE server reads it: the columns of
// src/chunks/tree.ts, in place. JS holds them for the mount's life and
// never changes them. Entry i is inode i + 1 (the root is entry 0, inode
// 1); a directory's children are consecutive entries sorted by name bytes;
// each name is followed by a 0 byte. The server checks the columns once,
// when it is made (Problem): every lookup, listing and stat after that
// reads inside them.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>
#include <string.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>

namespace redirfs {

enum Kind : uint8_t { kDirectory = 0, kSample = 1, kOther = 2 };

// Entries' kernel cache time for everything that cannot change under a read-only mount.
constexpr double kStableTimeout = 3600.0;

// The block size a file reports: the smallest power of two that holds it,
// from 4 KiB to 1 MiB. Buffered readers size their buffer from it (Python's
// open, hence PIL and ImageFolder's loader), and a sample's reads are
// direct_io, each a round trip through this server: a larger block makes a
// sample one read and the read that finds its end. The kernel keeps only a
// power of two.
inline blksize_t BlockSizeFor(off_t size) {
  blksize_t block = 4096;
  while (block < size && block < (1 << 20)) block <<= 1;
  return block;
}

struct Tree {
  size_t count = 0;
  const uint32_t *parent, *nameEnd, *firstChild, *childCount, *mode, *uid, *gid, *nlink;
  const uint8_t* kind;
  const double *size, *atimeSec, *mtimeSec, *ctimeSec;
  const uint32_t *atimeNsec, *mtimeNsec, *ctimeNsec;
  const char* names;
  size_t namesLength = 0;

  const char* Name(size_t e) const { return names + (e == 0 ? 0 : nameEnd[e - 1]); }
  static struct timespec Time(double sec, uint32_t nsec) { return {static_cast<time_t>(sec), static_cast<long>(nsec)}; }

  bool Has(fuse_ino_t ino) const { return ino >= 1 && ino <= count; }
  bool IsSample(fuse_ino_t ino) const { return Has(ino) && kind[ino - 1] == kSample; }
  bool IsDirectory(fuse_ino_t ino) const { return Has(ino) && kind[ino - 1] == kDirectory; }

  // Samples (and anything not in the tree) are never cached: a redirected handle serves another length than the path's.
  double TimeoutOf(fuse_ino_t ino) const { return Has(ino) && kind[ino - 1] != kSample ? kStableTimeout : 0.0; }

  // The child of directory `parent` named `name`, as an inode; 0 when none.
  fuse_ino_t Child(fuse_ino_t parent, const char* name) const {
    if (!IsDirectory(parent)) return 0;
    uint32_t low = firstChild[parent - 1], high = low + childCount[parent - 1];
    while (low < high) {
      uint32_t middle = low + (high - low) / 2;
      int order = strcmp(Name(middle), name);
      if (order == 0) return middle + 1;
      if (order < 0)
        low = middle + 1;
      else
        high = middle;
    }
    return 0;
  }

  // Why the columns cannot be read as a tree, or null: what every operation
  // relies on, so that columns a bug (or anything else) got wrong are refused
  // at the mount rather than read out of bounds by a FUSE thread. Names lie
  // back to back inside `names`, each ending in its 0 byte; each directory's
  // children are entries of the tree; parents are entries; kinds are known;
  // times and sizes are numbers a timespec and an off_t hold.
  const char* Problem() const {
    if (count == 0 || count > UINT32_MAX) return "the tree has no root, or more entries than inode numbers";
    if (kind[0] != kDirectory) return "the root is not a directory";
    uint64_t start = 0;
    for (size_t e = 0; e < count; e++) {
      if (nameEnd[e] <= start || nameEnd[e] > namesLength || names[nameEnd[e] - 1] != '\0') return "a name does not end in its 0 byte inside the names";
      start = nameEnd[e];
      if (parent[e] >= count) return "a parent is not an entry";
      if (kind[e] > kOther) return "an entry of an unknown kind";
      if (kind[e] == kDirectory && static_cast<uint64_t>(firstChild[e]) + childCount[e] > count) return "a directory's children are not entries";
      if (!(size[e] >= 0 && size[e] < 9223372036854775807.0)) return "a size that is not a file size";
      for (double sec : {atimeSec[e], mtimeSec[e], ctimeSec[e]}) {
        if (!(sec > -9223372036854775807.0 && sec < 9223372036854775807.0)) return "a time that is not a time";
      }
      if (atimeNsec[e] >= 1000000000 || mtimeNsec[e] >= 1000000000 || ctimeNsec[e] >= 1000000000) return "nanoseconds past a second";
    }
    return nullptr;
  }

  // An entry's attributes as the scan found them (the size is the path's, not a binding's).
  void Fill(fuse_ino_t ino, struct stat* st) const {
    size_t e = ino - 1;
    st->st_ino = ino;
    st->st_mode = mode[e];
    st->st_uid = uid[e];
    st->st_gid = gid[e];
    st->st_nlink = nlink[e];
    st->st_atim = Time(atimeSec[e], atimeNsec[e]);
    st->st_mtim = Time(mtimeSec[e], mtimeNsec[e]);
    st->st_ctim = Time(ctimeSec[e], ctimeNsec[e]);
    st->st_size = static_cast<off_t>(size[e]);
  }
};

}  // namespace redirfs
