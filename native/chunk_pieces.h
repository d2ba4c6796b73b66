// The arithmetic of a chunk read that numbers from JS (and so from a pack
// index) reach: offsets and sizes checked as whole numbers, the aligned
// span read around a range, and the pieces copied out of what was read with
// their CRC-32s and the span's. Pure (no I/O, no Node), so that a libFuzzer
// harness (native/fuzz/chunk_pieces_fuzzer.cc) runs exactly what the
// reader (redirfs_native.cc, readChunk) runs.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "crc32.h"

namespace chunkpieces {

// A byte offset, length or count from JS: a whole number from 0 to 2^53. Anything else (negative,
// fractional, NaN, infinite) is refused before any arithmetic on it, which is unsigned here: a
// negative double cast to uint64_t wraps, and a wrapped bound lets a read past its buffer.
inline bool ByteCount(double number, uint64_t* out) {
  if (!(number >= 0 && number <= 9007199254740992.0) || number != static_cast<double>(static_cast<uint64_t>(number))) return false;
  *out = static_cast<uint64_t>(number);
  return true;
}

// A piece (start from the range's start, size) as JS gives it, checked to lie inside a range of `length` bytes.
inline bool PieceInside(double start, double size, uint64_t length, std::pair<uint64_t, uint64_t>* out) {
  uint64_t s, n;
  if (!ByteCount(start, &s) || !ByteCount(size, &n) || s > length || n > length - s) return false;
  *out = {s, n};
  return true;
}

// The aligned span an O_DIRECT read of [offset, offset + length) covers. Both are at most 2^53, so nothing wraps.
struct Span {
  uint64_t start, size;
};
inline Span AlignedSpan(uint64_t offset, uint64_t length, uint64_t alignment) {
  const uint64_t start = offset & ~(alignment - 1);
  const uint64_t end = (offset + length + alignment - 1) & ~(alignment - 1);
  return {start, end - start};
}

// The CRC of a run followed by `length` bytes whose own CRC is `next`.
inline uint32_t Append(uint32_t crc, uint32_t next, uint64_t length) {
  return length == 0 ? crc : static_cast<uint32_t>(crc32_combine64(crc, next, static_cast<z_off64_t>(length)));
}

// Where piece i goes: a buffer JS lent, and its length (null and 0 where what JS lent is not a Buffer).
using Target = std::pair<char*, size_t>;

// Copies the pieces (start, size, from the range's start) out of `range`,
// of which `available` bytes were read out of the `length` asked for,
// into their targets, piece i into target i, and returns the CRC-32 of
// what was read. Pieces are copied only from a whole read, in order, up
// to the first that does not lie inside it or fit its target; `crcs` gets
// the CRC-32 of each piece copied. Each byte is summed once: the range's
// CRC is combined from the pieces' and the gaps' while the pieces come in
// order, and summed whole otherwise.
inline uint32_t CopyPieces(const char* range, uint64_t available, uint64_t length, const std::vector<std::pair<uint64_t, uint64_t>>& pieces, const std::vector<Target>& targets,
                           std::vector<uint32_t>* crcs) {
  uint32_t crc = 0;
  uint64_t summed = 0;
  if (available == length) {
    for (const auto& [pieceStart, pieceSize] : pieces) {
      size_t i = crcs->size();
      // In integer arithmetic that cannot wrap: a piece must lie inside what was read and fit its target.
      if (pieceSize > available || pieceStart > available - pieceSize || i >= targets.size() || targets[i].second < pieceSize) break;
      if (pieceSize > 0) std::memcpy(targets[i].first, range + pieceStart, pieceSize);  // an empty Buffer may have no memory (null): memcpy must not see it
      uint32_t pieceCrc = crc32fast::Crc32(0, range + pieceStart, pieceSize);
      if (pieceStart >= summed && summed != UINT64_MAX) {
        crc = Append(Append(crc, crc32fast::Crc32(0, range + summed, pieceStart - summed), pieceStart - summed), pieceCrc, pieceSize);
        summed = pieceStart + pieceSize;
      } else {
        summed = UINT64_MAX;  // out of order: the span is summed whole below
      }
      crcs->push_back(pieceCrc);
    }
  }
  return summed <= available ? Append(crc, crc32fast::Crc32(0, range + summed, available - summed), available - summed) : crc32fast::Crc32(0, range, available);
}

}  // namespace chunkpieces
