// Small images for `cohort report`: an 8-bit grayscale or RGB PNG encoder (zlib) and base64,
// so acquired samples can sit inside the HTML as data: URLs.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::cli {

// A PNG of `width` x `height` pixels with `channels` bytes each (1: gray, 3: RGB), rows top
// to bottom. `pixels` holds width * height * channels bytes.
std::string EncodePng(const std::vector<uint8_t>& pixels, int width, int height, int channels);

std::string Base64(std::string_view bytes);

}  // namespace cohort::cli
