// libFuzzer: the folding CRC-32 (native/crc32.h) is zlib's, for any bytes,
// any alignment and any initial value, and chains: the CRC of a run cut
// anywhere, carried from the first part into the second, is the run's.
// Every pack byte served is checked with it, so a wrong CRC either serves
// damaged bytes or refuses good ones.
#include <fuzzer/FuzzedDataProvider.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../crc32.h"

static void Require(bool holds, const char* what) {
  if (holds) return;
  std::fprintf(stderr, "crc32_fuzzer: %s\n", what);
  std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const uint32_t initial = in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint32_t>();
  const size_t misalign = in.ConsumeIntegralInRange<size_t>(0, 63);
  const size_t cut = in.ConsumeIntegral<uint16_t>();
  std::vector<uint8_t> bytes = in.ConsumeRemainingBytes<uint8_t>();
  // Copied to an exact allocation at the chosen misalignment, so a read past either end is caught.
  uint8_t* block = static_cast<uint8_t*>(std::malloc(misalign + bytes.size()));
  uint8_t* run = block + misalign;
  if (!bytes.empty()) std::memcpy(run, bytes.data(), bytes.size());
  uint8_t* exact = static_cast<uint8_t*>(std::malloc(bytes.size()));
  if (!bytes.empty()) std::memcpy(exact, bytes.data(), bytes.size());

  const uint32_t zlib = static_cast<uint32_t>(crc32_z(initial, exact, bytes.size()));
  Require(crc32fast::Crc32(initial, exact, bytes.size()) == zlib, "differs from zlib's");
  Require(crc32fast::Crc32(initial, run, bytes.size()) == zlib, "differs from zlib's at another alignment");
  const size_t first = bytes.empty() ? 0 : cut % (bytes.size() + 1);
  Require(crc32fast::Crc32(crc32fast::Crc32(initial, exact, first), exact + first, bytes.size() - first) == zlib, "does not chain across a cut");
  std::free(exact);
  std::free(block);
  return 0;
}
