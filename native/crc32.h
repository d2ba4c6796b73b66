// CRC-32 (zlib's: reflected, polynomial 0x04C11DB7), as zlib computes it
// but several times faster where the CPU multiplies carry-less
// (PCLMULQDQ, every x86-64 since 2010): the bulk is folded 64 bytes at a
// time, then reduced to 32 bits by Barrett reduction; the tail under 16
// bytes, and CPUs without the instruction, go to zlib. Every pack byte the
// daemon serves is checked, so this is a large share of its CPU per sample.
// The constants are powers of x modulo the polynomial for each fold
// distance, bit-reflected, and the polynomial with its Barrett quotient, as
// Intel's white paper on CRC computation with PCLMULQDQ derives them;
// test/chunks/native.test.ts checks the result against zlib's.
#pragma once

#include <immintrin.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>

namespace crc32fast {

__attribute__((target("pclmul,sse4.1"))) inline __m128i Fold(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

// The CRC register (not inverted) after `length` bytes: at least 64, a multiple of 16.
__attribute__((target("pclmul,sse4.1"))) inline uint32_t FoldBlocks(uint32_t state, const unsigned char* p, size_t length) {
  const __m128i by64 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
  const __m128i by16 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
  const __m128i by64bits = _mm_set_epi64x(0, 0x163cd6124);
  const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
  const __m128i barrett = _mm_set_epi64x(0x1f7011641, 0x1db710641);
  auto load = [](const unsigned char* at) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)); };
  __m128i x1 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(state)));
  __m128i x2 = load(p + 16), x3 = load(p + 32), x4 = load(p + 48);
  p += 64;
  length -= 64;
  for (; length >= 64; p += 64, length -= 64) {
    x1 = Fold(x1, by64, load(p));
    x2 = Fold(x2, by64, load(p + 16));
    x3 = Fold(x3, by64, load(p + 32));
    x4 = Fold(x4, by64, load(p + 48));
  }
  x1 = Fold(Fold(Fold(x1, by16, x2), by16, x3), by16, x4);
  for (; length >= 16; p += 16, length -= 16) x1 = Fold(x1, by16, load(p));
  // 128 bits to 64 (appending the 32 zero bits a CRC implies), then to 32 + 32.
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(by16, x1, 0x01));
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), by64bits, 0x00), _mm_srli_si128(x1, 4));
  __m128i quotient = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), barrett, 0x10), low32);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(quotient, barrett, 0x00), x1);
  return static_cast<uint32_t>(_mm_extract_epi32(x1, 1));
}

// zlib's crc32_z(crc, bytes, length), faster.
inline uint32_t Crc32(uint32_t crc, const void* bytes, size_t length) {
  static const bool folds = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  const unsigned char* p = static_cast<const unsigned char*>(bytes);
  if (folds && length >= 64) {
    size_t bulk = length & ~static_cast<size_t>(15);
    crc = ~FoldBlocks(~crc, p, bulk);
    p += bulk;
    length -= bulk;
  }
  return static_cast<uint32_t>(crc32_z(crc, p, length));
}

}  // namespace crc32fast
