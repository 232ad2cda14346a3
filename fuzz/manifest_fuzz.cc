// gen-NNNNNN.json: DecodeManifest on arbitrary text (the "#crc32=" trailer is fixed up for
// half the inputs so the JSON behind it is reached), and a manifest it accepts must encode and
// decode back to itself. Also the store's file-name classifier on the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz/fuzz_util.h"
#include "store/manifest.h"

using namespace cohort::store;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string text(cohort::fuzz::AsText(data + 1, size - 1));
  (void)ParseManifestFileName(text);
  (void)ClassifyStoreFile(text);
  if (data[0] & 1) {
    // Append a valid trailer: the body is then parsed as JSON and checked field by field.
    char trailer[32];
    std::snprintf(trailer, sizeof(trailer), "#crc32=%08x\n", Crc32(text));
    text += trailer;
  }
  auto manifest = DecodeManifest(text, "gen-000001.json");
  if (!manifest.ok()) return 0;
  std::string again = EncodeManifest(*manifest);
  auto back = DecodeManifest(again, "gen-000001.json");
  if (!back.ok() || EncodeManifest(*back) != again) __builtin_trap();
  (void)manifest->Files();
  return 0;
}
