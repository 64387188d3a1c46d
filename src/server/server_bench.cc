// Server overhead against the library, in one process on one engine: TTFT and decode tok/s of the
// same greedy requests through Session::Generate and through HTTP streaming (loopback, measured at
// the client), then aggregate throughput of 1, 4 and 8 concurrent streams, and memory per slot.
// The same work on both paths: the same messages, greedy, no prefix reuse, one long-lived session,
// the clock started before the template is rendered, and a token counted when it brings text.
// The HTTP client runs in this process: on a machine with few cores it takes CPU the engine's
// threads would have (THREADS=1 leaves it a core).
//
//   [GEMMA_BENCH_SYNTH=PRESET] gemma_server_bench MODEL_DIR [TOKENS=64] [RUNS=7] [THREADS=0 (all
//   cores)] [BACKEND=cpu]
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "gemma/engine.h"
#include "model/synth.h"
#include "server/metrics.h"
#include "server/server.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

const json kMessages = json::array(
    {{{"role", "user"}, {"content", "Write a long story about a lighthouse keeper and the sea."}}});

struct Sample {
  double ttft_ms, tok_s;
  double engine_tok_s;  // as the server's timings.predicted_per_second counts it
};

// The same work as a server slot: one long-lived session, no prefix reuse; a token counts when it
// brings text (what a client can see).
Sample Library(gemma::Session& s, int tokens) {
  gemma::GenerateOptions o;
  o.max_new_tokens = tokens;
  o.ignore_eos = true;
  o.reuse_prompt_cache = false;
  const auto t0 = Clock::now();
  std::vector<Clock::time_point> at;
  const gemma::Result r =
      s.Generate(gemma::Input::Messages(kMessages), o, [&](const gemma::TokenEvent& ev) {
        if (!ev.delta.empty()) at.push_back(Clock::now());
      });
  const double predicted_ms = r.telemetry.total_ms - r.telemetry.prefill_ms;
  return {Ms(t0, at.front()), (at.size() - 1) * 1000.0 / Ms(at.front(), at.back()),
          r.tokens.size() * 1000.0 / predicted_ms};
}

// One streamed request; arrival times of the content chunks.
double g_server_ttft = 0;  // the engine's own TTFT inside the server (final chunk's timings)
double g_server_rate = 0;  // and its decode rate there (predicted_per_second)

std::vector<Clock::time_point> Http(int port, int tokens, Clock::time_point* sent,
                                    httplib::Client* keep = nullptr) {
  httplib::Client fresh("127.0.0.1", port);
  httplib::Client& c = keep ? *keep : fresh;
  c.set_read_timeout(300);
  c.set_tcp_nodelay(true);  // as browsers and node's fetch do; else the body waits for an ACK
  json body = {{"messages", kMessages}, {"max_tokens", tokens}, {"temperature", 0},
               {"ignore_eos", true},    {"stream", true},       {"cache_prompt", false}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::vector<Clock::time_point> at;
  std::string buf;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    buf.append(d, n);
    size_t cut;
    while ((cut = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, cut);
      buf.erase(0, cut + 2);
      // Every generated token is one chunk with a non-empty "content" or an empty delta; count
      // the chunks that carry generated text, as a client sees them.
      if (const size_t k = ev.find("\"ttft_ms\":"); k != std::string::npos)
        g_server_ttft = std::atof(ev.c_str() + k + 10);
      if (const size_t k = ev.find("\"predicted_per_second\":"); k != std::string::npos)
        g_server_rate = std::atof(ev.c_str() + k + 23);
      if (ev.find("\"content\":\"") != std::string::npos &&
          ev.find("\"role\"") == std::string::npos)
        at.push_back(Clock::now());
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  *sent = Clock::now();
  c.send(req, res, err);
  return at;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [TOKENS] [RUNS] [THREADS] [BACKEND]\n", argv[0]);
    return 2;
  }
  const int tokens = argc > 2 ? std::atoi(argv[2]) : 64;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 7;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 0;
  const std::string backend = argc > 5 ? argv[5] : "cpu";
  // GEMMA_BENCH_SYNTH=PRESET: synthesize MODEL_DIR first when it holds no model (machines that
  // only carry the bench).
  if (const char* preset = std::getenv("GEMMA_BENCH_SYNTH");
      preset && *preset && !std::filesystem::exists(std::filesystem::path(argv[1]) / "config.json"))
    gemma::Synthesize({.preset = preset, .out_dir = argv[1]});
  auto engine = gemma::Engine::Load(
      {.model_path = argv[1], .backend = backend, .context_capacity = 1024, .threads = threads});
  std::printf("model %s, backend %s, %d tokens, %d runs (medians), %d engine threads (0: all)\n",
              argv[1], engine->backend_name().c_str(), tokens, runs, threads);
  {
    gemma::server::Server srv(engine, {.port = 0, .slots = 1, .model_id = "m"});
    const int port = srv.Bind();
    std::thread t([&] { srv.Run(); });
    // Three paths, interleaved so that the machine's load falls on all of them alike: the library,
    // HTTP on one kept-alive connection (what the openai clients and browsers do), and HTTP with a
    // new connection per request (connect + accept + a fresh handler thread).
    std::vector<double> lt, ls, kt, ks, ke, nt, ns, engine_rate, lib_rate;
    auto session = engine->NewSession();
    httplib::Client keep("127.0.0.1", port);
    keep.set_keep_alive(true);
    Library(*session, 8);  // warm every path
    Clock::time_point sent;
    Http(port, 8, &sent, &keep);
    Http(port, 8, &sent);
    auto server_run = [&](httplib::Client* c, std::vector<double>* ttft, std::vector<double>* rate,
                          std::vector<double>* engine_ttft) {
      auto at = Http(port, tokens, &sent, c);
      ttft->push_back(Ms(sent, at.front()));
      rate->push_back((at.size() - 1) * 1000.0 / Ms(at.front(), at.back()));
      if (engine_ttft) {
        engine_ttft->push_back(g_server_ttft);
        engine_rate.push_back(g_server_rate);
      }
    };
    for (int r = 0; r < runs; ++r) {
      for (int k = 0; k < 3; ++k) {
        switch ((r + k) % 3) {
          case 0: {
            const Sample l = Library(*session, tokens);
            lt.push_back(l.ttft_ms);
            ls.push_back(l.tok_s);
            lib_rate.push_back(l.engine_tok_s);
            break;
          }
          case 1:
            server_run(&keep, &kt, &ks, &ke);
            break;
          default:
            server_run(nullptr, &nt, &ns, nullptr);
        }
      }
    }
    std::vector<double> pt;
    for (int r = 0; r < runs; ++r) {
      const auto a = Clock::now();
      engine->PromptTokens(gemma::Input::Messages(kMessages));
      pt.push_back(Ms(a, Clock::now()));
    }
    std::printf("PromptTokens (template + tokenize, done again by the handler): %.3f ms\n",
                Median(pt));
    std::printf("library: TTFT %.2f ms, decode %.1f tok/s\n", Median(lt), Median(ls));
    std::printf(
        "server, kept-alive connection: TTFT %.2f ms (%+.2f ms; the engine's own TTFT in the "
        "server %.2f ms), decode %.1f tok/s (%.1f%%)\n",
        Median(kt), Median(kt) - Median(lt), Median(ke), Median(ks), 100 * Median(ks) / Median(ls));
    // Per request, the client's TTFT less the engine's own (timings.ttft_ms, from the start of
    // Session::Generate's work to its first token): what the server adds, with the engine's
    // run-to-run noise (large on a shared machine) taken out.
    std::vector<double> outside;
    for (size_t i = 0; i < kt.size(); ++i) outside.push_back(kt[i] - ke[i]);
    std::printf("server, kept-alive connection: TTFT outside the engine %.2f ms (median)\n",
                Median(outside));
    std::printf(
        "decode rate as the engine counts it (timings.predicted_per_second): library %.1f, "
        "server %.1f tok/s (%.1f%%)\n",
        Median(lib_rate), Median(engine_rate), 100 * Median(engine_rate) / Median(lib_rate));
    std::printf(
        "server, new connection each  : TTFT %.2f ms (%+.2f ms), decode %.1f tok/s (%.1f%%)\n",
        Median(nt), Median(nt) - Median(lt), Median(ns), 100 * Median(ns) / Median(ls));
    srv.Stop();
    t.join();
  }
  for (int streams : {1, 4, 8}) {
    const size_t rss0 = gemma::server::ResidentBytes();
    gemma::server::Server srv(engine, {.port = 0, .slots = streams, .model_id = "m"});
    const int port = srv.Bind();
    std::thread t([&] { srv.Run(); });
    std::vector<std::thread> clients;
    std::vector<double> per(streams);
    std::vector<size_t> got(streams);
    const auto t0 = Clock::now();
    for (int i = 0; i < streams; ++i) {
      clients.emplace_back([&, i] {
        Clock::time_point sent;
        auto at = Http(port, tokens, &sent);
        got[i] = at.size();
        per[i] = (at.size() - 1) * 1000.0 / Ms(at.front(), at.back());
      });
    }
    for (auto& c : clients) c.join();
    const double wall = Ms(t0, Clock::now());
    size_t total = 0;
    for (size_t g : got) total += g;
    const size_t rss1 = gemma::server::ResidentBytes();
    std::printf(
        "%d concurrent streams: %.1f tok/s aggregate, %.1f tok/s per stream (median), RSS +%.1f "
        "MiB for %d slot(s) after the run (%.1f MiB per slot)\n",
        streams, total * 1000.0 / wall, Median(per), (rss1 - rss0) / 1048576.0, streams,
        (rss1 - rss0) / 1048576.0 / streams);
    srv.Stop();
    t.join();
  }
  return 0;
}
