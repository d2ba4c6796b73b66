// libFuzzer: the chunk reader's arithmetic (native/chunk_pieces.h) on any
// numbers JS could pass it, as readChunk (redirfs_native.cc) runs it: the
// range and its pieces as doubles, checked; the aligned span around the
// range; what came back (all of it, or cut short); the targets JS lent (of
// any length, or not Buffers). Pieces are copied only from a whole read, in
// order, up to the first that does not fit its target, each exactly; the
// CRC returned is zlib's of the bytes read, however the pieces lie (in
// order, with gaps, touching, overlapping, out of order). The bytes read
// and every target are exact allocations: a read or write past one is an
// AddressSanitizer report.
#include <fuzzer/FuzzedDataProvider.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "../chunk_pieces.h"

static void Require(bool holds, const char* what) {
  if (holds) return;
  std::fprintf(stderr, "chunk_pieces_fuzzer: %s\n", what);
  std::abort();
}

// A number as JS could send it: mostly small whole numbers near the range's bounds, sometimes anything a double can be.
static double Number(FuzzedDataProvider& in, uint64_t near) {
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
      return -static_cast<double>(in.ConsumeIntegralInRange<uint32_t>(0, 1 << 16));
    case 1:
      return in.ConsumeFloatingPoint<double>();
    case 2:
      return in.PickValueInArray({std::nan(""), std::numeric_limits<double>::infinity(), -0.0, 9007199254740992.0, 9007199254740993.0, 18446744073709551616.0, 0.5});
    case 3:
      return static_cast<double>(near) + in.ConsumeIntegralInRange<int>(-2, 2);
    default:
      return static_cast<double>(in.ConsumeIntegralInRange<uint64_t>(0, near + 1));
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  // The range asked for: readChunk refuses one that is not whole numbers up to 2^53.
  uint64_t offset, length;
  if (!chunkpieces::ByteCount(Number(in, 1 << 20), &offset) || !chunkpieces::ByteCount(Number(in, 4096), &length)) return 0;
  const chunkpieces::Span span = chunkpieces::AlignedSpan(offset, length, 4096);
  Require(span.start <= offset && span.start % 4096 == 0 && span.size % 4096 == 0 && span.start + span.size >= offset + length && span.size - length < 2 * 4096,
          "the aligned span does not cover the range");
  if (length > (1 << 16)) return 0;  // the bytes below are made, not read: keep them small

  // Its pieces: one that is not inside the range refuses the whole call before anything is read.
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  const size_t count = in.ConsumeIntegralInRange<size_t>(0, 12);
  for (size_t i = 0; i < count; i++) {
    std::pair<uint64_t, uint64_t> piece;
    const double start = Number(in, length), pieceSize = Number(in, length);
    if (!chunkpieces::PieceInside(start, pieceSize, length, &piece)) return 0;
    Require(piece.first <= length && piece.second <= length - piece.first, "a piece accepted outside the range");
    pieces.push_back(piece);
  }

  // What the read got: all of it, or a file cut short. Only those bytes exist.
  const uint64_t available = in.ConsumeBool() ? length : in.ConsumeIntegralInRange<uint64_t>(0, length);
  std::vector<uint8_t> content = in.ConsumeBytes<uint8_t>(available);
  content.resize(available, 0x5a);
  char* range = static_cast<char*>(std::malloc(available));
  if (available > 0) std::memcpy(range, content.data(), available);

  // The targets JS lent: a Buffer of any length (a zero-length one may have no memory), or something else.
  std::vector<chunkpieces::Target> targets;
  const size_t lent = in.ConsumeIntegralInRange<size_t>(0, count + 1);
  for (size_t i = 0; i < lent; i++) {
    const uint64_t want = i < pieces.size() ? pieces[i].second : 8;
    const int choice = in.ConsumeIntegralInRange<int>(0, 5);
    if (choice == 0) {
      targets.emplace_back(nullptr, 0);
    } else {
      const size_t bytes = choice == 1 ? static_cast<size_t>(want > 0 ? want - 1 : 0) : choice == 2 ? static_cast<size_t>(want) + 3 : static_cast<size_t>(want);
      targets.emplace_back(static_cast<char*>(std::malloc(bytes)), bytes);
    }
  }

  std::vector<uint32_t> crcs;
  const uint32_t crc = chunkpieces::CopyPieces(range, available, length, pieces, targets, &crcs);

  Require(crc == static_cast<uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(range), available)), "the CRC is not zlib's of the bytes read");
  size_t fitting = 0;
  if (available == length) {
    while (fitting < pieces.size() && fitting < targets.size() && targets[fitting].second >= pieces[fitting].second) fitting++;
  }
  Require(crcs.size() == fitting, "copied another number of pieces than fit their targets");
  for (size_t i = 0; i < crcs.size(); i++) {
    const auto [start, pieceSize] = pieces[i];
    Require(pieceSize == 0 || std::memcmp(targets[i].first, range + start, pieceSize) == 0, "a piece's copy differs from its bytes");
    Require(crcs[i] == static_cast<uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(range + start), pieceSize)), "a piece's CRC is not zlib's");
  }
  for (auto& target : targets) std::free(target.first);
  std::free(range);
  return 0;
}
