// The f32 FMA peak of this machine, measured (bench only).
#pragma once

namespace gemma::bench {

struct FmaPeak {
  double gflops = 0;           // on the threads asked for, together
  const char* target = "";     // the SIMD target that ran (Highway's name)
};
FmaPeak MeasureFmaPeak(int threads, double seconds = 1.0);

}  // namespace gemma::bench
