// The out-of-line parts of Highway that the WebAssembly build needs (it has Debian's headers but
// no libhwy for wasm32): the chosen-target table and the abort handler. One target is compiled
// there (HWY_COMPILE_ONLY_EMU128), so the table always selects it.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "hwy/targets.h"

namespace hwy {

HWY_DLLEXPORT ChosenTarget& GetChosenTarget() {
  static ChosenTarget chosen;
  return chosen;
}

HWY_DLLEXPORT int64_t SupportedTargets() { return HWY_EMU128; }

// The kernel tests (fast_ops_test.cc, compiled to WebAssembly by web/CMakeLists.txt) select each
// target in turn; there is one.
HWY_DLLEXPORT void SetSupportedTargetsForTest(int64_t) {}

HWY_DLLEXPORT HWY_NORETURN void HWY_FORMAT(3, 4) Abort(const char* file, int line, const char* format, ...) {
  char buf[800];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  std::fprintf(stderr, "Abort at %s:%d: %s\n", file, line, buf);
  std::abort();
}

}  // namespace hwy
