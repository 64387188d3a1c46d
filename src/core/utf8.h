// Well-formed UTF-8 (Unicode table 3-7): the one validator the rooms and the CLI share.
#pragma once

#include <cstddef>
#include <string_view>

namespace gemma {

// Offset of the first byte of `s` that is not part of well-formed UTF-8, or npos.
size_t InvalidUtf8Offset(std::string_view s);

}  // namespace gemma
