// libFuzzer: the FUSE server's tree (native/fuse_tree.h) on crafted
// columns. Columns the server's check (Tree::Problem) accepts are read
// only inside their bounds by everything the FUSE operations do with them
// (fuse_ops.cc: lookups, listings, attributes, timeouts); and where each
// directory's children are sorted, a lookup of each child's name finds it.
// Every column and the names are exact allocations: a read past one is an
// AddressSanitizer report; a time or size that does not fit a timespec or
// an off_t is an UndefinedBehaviorSanitizer one.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../fuse_tree.h"

static void Require(bool holds, const char* what) {
  if (holds) return;
  std::fprintf(stderr, "fuse_tree_fuzzer: %s\n", what);
  std::abort();
}

// A column in an allocation of its own, exactly `count` long.
template <typename T>
static T* Column(const std::vector<T>& values) {
  T* column = static_cast<T*>(std::malloc(values.size() * sizeof(T)));
  if (!values.empty()) std::memcpy(column, values.data(), values.size() * sizeof(T));
  return column;
}

static double Seconds(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return in.ConsumeFloatingPoint<double>();
    case 1:
      return in.PickValueInArray({std::nan(""), std::numeric_limits<double>::infinity(), -1e300, 9223372036854775807.0, -9223372036854775808.0});
    default:
      return static_cast<double>(in.ConsumeIntegralInRange<int64_t>(-1, 4102444800));
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const size_t count = in.ConsumeIntegralInRange<size_t>(0, 48);
  // Names: mostly well formed (each name's bytes and its 0 byte, back to back), sometimes any bytes and ends.
  const bool wellFormedNames = in.ConsumeProbability<float>() < 0.8f;
  std::string names;
  std::vector<uint32_t> nameEnd(count);
  for (size_t e = 0; e < count; e++) {
    if (wellFormedNames) {
      names += e == 0 ? std::string() : in.ConsumeRandomLengthString(6);
      names.push_back('\0');
      nameEnd[e] = static_cast<uint32_t>(names.size());
    } else {
      names += in.ConsumeRandomLengthString(4);
      nameEnd[e] = in.ConsumeIntegralInRange<uint32_t>(0, static_cast<uint32_t>(names.size() + 2));
    }
  }
  std::vector<uint32_t> parent(count), firstChild(count), childCount(count), mode(count), u32s(count), atimeNsec(count), mtimeNsec(count), ctimeNsec(count);
  std::vector<uint8_t> kind(count);
  std::vector<double> fileSize(count), atimeSec(count), mtimeSec(count), ctimeSec(count);
  for (size_t e = 0; e < count; e++) {
    parent[e] = in.ConsumeIntegralInRange<uint32_t>(0, static_cast<uint32_t>(count + 1));
    kind[e] = e == 0 ? (in.ConsumeProbability<float>() < 0.9f ? 0 : 1) : in.ConsumeIntegralInRange<uint8_t>(0, 3);
    firstChild[e] = in.ConsumeIntegralInRange<uint32_t>(0, static_cast<uint32_t>(count + 1));
    childCount[e] = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint32_t>(0, static_cast<uint32_t>(count)) : in.ConsumeIntegral<uint32_t>();
    mode[e] = (kind[e] == 0 ? S_IFDIR : S_IFREG) | in.ConsumeIntegralInRange<uint32_t>(0, 07777);
    u32s[e] = in.ConsumeIntegral<uint32_t>();
    atimeNsec[e] = in.ConsumeIntegralInRange<uint32_t>(0, 1000000000);
    mtimeNsec[e] = in.ConsumeIntegralInRange<uint32_t>(0, 999999999);
    ctimeNsec[e] = in.ConsumeIntegralInRange<uint32_t>(0, 999999999);
    fileSize[e] = in.ConsumeBool() ? static_cast<double>(in.ConsumeIntegralInRange<uint32_t>(0, 1 << 24)) : in.ConsumeFloatingPoint<double>();
    atimeSec[e] = Seconds(in);
    mtimeSec[e] = Seconds(in);
    ctimeSec[e] = Seconds(in);
  }

  redirfs::Tree tree;
  tree.count = count;
  char* nameBytes = static_cast<char*>(std::malloc(names.size()));
  if (!names.empty()) std::memcpy(nameBytes, names.data(), names.size());
  tree.names = nameBytes;
  tree.namesLength = names.size();
  tree.parent = Column(parent);
  tree.nameEnd = Column(nameEnd);
  tree.firstChild = Column(firstChild);
  tree.childCount = Column(childCount);
  tree.mode = Column(mode);
  tree.uid = Column(u32s);
  tree.gid = Column(u32s);
  tree.nlink = Column(u32s);
  tree.kind = Column(kind);
  tree.size = Column(fileSize);
  tree.atimeSec = Column(atimeSec);
  tree.mtimeSec = Column(mtimeSec);
  tree.ctimeSec = Column(ctimeSec);
  tree.atimeNsec = Column(atimeNsec);
  tree.mtimeNsec = Column(mtimeNsec);
  tree.ctimeNsec = Column(ctimeNsec);

  if (tree.Problem() == nullptr) {
    const std::string wanted = in.ConsumeRandomLengthString(8);
    for (fuse_ino_t ino = 0; ino <= count + 4; ino++) {
      (void)tree.TimeoutOf(ino);
      if (!tree.Has(ino)) continue;
      struct stat st;
      tree.Fill(ino, &st);
      (void)redirfs::BlockSizeFor(st.st_size);
      Require(std::strlen(tree.Name(ino - 1)) < tree.namesLength, "a name runs past the names");
      (void)tree.Child(ino, wanted.c_str());
      if (!tree.IsDirectory(ino)) continue;
      // A listing (fuse_ops.cc, ReadDir): "..", then each child's name and mode.
      (void)(ino == 1 ? 1 : tree.parent[ino - 1] + 1);
      const uint32_t first = tree.firstChild[ino - 1], children = tree.childCount[ino - 1];
      bool sorted = true;
      for (uint32_t i = 0; i < children; i++) {
        (void)(tree.mode[first + i] & S_IFMT);
        if (i > 0 && std::strcmp(tree.Name(first + i - 1), tree.Name(first + i)) >= 0) sorted = false;
      }
      for (uint32_t i = 0; sorted && i < children; i++) Require(tree.Child(ino, tree.Name(first + i)) == first + i + 1, "a lookup of a child's own name does not find it");
    }
  }

  std::free(nameBytes);
  for (const void* column :
       {static_cast<const void*>(tree.parent), static_cast<const void*>(tree.nameEnd), static_cast<const void*>(tree.firstChild), static_cast<const void*>(tree.childCount),
        static_cast<const void*>(tree.mode), static_cast<const void*>(tree.uid), static_cast<const void*>(tree.gid), static_cast<const void*>(tree.nlink),
        static_cast<const void*>(tree.kind), static_cast<const void*>(tree.size), static_cast<const void*>(tree.atimeSec), static_cast<const void*>(tree.mtimeSec),
        static_cast<const void*>(tree.ctimeSec), static_cast<const void*>(tree.atimeNsec), static_cast<const void*>(tree.mtimeNsec), static_cast<const void*>(tree.ctimeNsec)})
    std::free(const_cast<void*>(column));
  return 0;
}
