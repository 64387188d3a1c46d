// Server overhead against the library, in one process on one engine: TTFT and decode tok/s of the
// same greedy requests through Session::Generate and through HTTP streaming (loopback, measured at
// the client), then aggregate throughput of 4 and 8 concurrent streams, and memory per slot.
//
//   gemma_server_bench MODEL_DIR [TOKENS=64] [RUNS=7]
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "gemma/engine.h"
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
  s.Generate(gemma::Input::Messages(kMessages), o, [&](const gemma::TokenEvent& ev) {
    if (!ev.delta.empty()) at.push_back(Clock::now());
  });
  return {Ms(t0, at.front()), (at.size() - 1) * 1000.0 / Ms(at.front(), at.back())};
}

// One streamed request; arrival times of the content chunks.
double g_server_ttft = 0;  // the engine's own TTFT inside the server (final chunk's timings)

std::vector<Clock::time_point> Http(int port, int tokens, Clock::time_point* sent) {
  httplib::Client c("127.0.0.1", port);
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
    std::fprintf(stderr, "usage: %s MODEL_DIR [TOKENS] [RUNS]\n", argv[0]);
    return 2;
  }
  const int tokens = argc > 2 ? std::atoi(argv[2]) : 64;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 7;
  auto engine = gemma::Engine::Load({.model_path = argv[1], .context_capacity = 1024});
  std::printf("model %s, backend %s, %d tokens, %d runs (medians)\n", argv[1],
              engine->backend_name().c_str(), tokens, runs);
  {
    gemma::server::Server srv(engine, {.port = 0, .slots = 1, .model_id = "m"});
    const int port = srv.Bind();
    std::thread t([&] { srv.Run(); });
    std::vector<double> lt, ls, ht, hs, et;
    auto session = engine->NewSession();
    Library(*session, 8);  // warm both paths
    Clock::time_point sent;
    Http(port, 8, &sent);
    for (int r = 0; r < runs; ++r) {
      const Sample l = Library(*session, tokens);
      lt.push_back(l.ttft_ms);
      ls.push_back(l.tok_s);
      auto at = Http(port, tokens, &sent);
      ht.push_back(Ms(sent, at.front()));
      et.push_back(g_server_ttft);
      hs.push_back((at.size() - 1) * 1000.0 / Ms(at.front(), at.back()));
    }
    std::vector<double> pt;
    for (int r = 0; r < runs; ++r) {
      const auto a = Clock::now();
      engine->PromptTokens(gemma::Input::Messages(kMessages));
      pt.push_back(Ms(a, Clock::now()));
    }
    std::printf("PromptTokens (template + tokenize, done again by the handler): %.2f ms\n",
                Median(pt));
    std::printf("library: TTFT %.2f ms, decode %.1f tok/s\n", Median(lt), Median(ls));
    std::printf(
        "server : TTFT %.2f ms (+%.2f ms; the engine's own TTFT in the server %.2f ms), "
        "decode %.1f tok/s (%.1f%%)\n",
        Median(ht), Median(ht) - Median(lt), Median(et), Median(hs), 100 * Median(hs) / Median(ls));
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
        "MiB for %d slot(s) after the run\n",
        streams, total * 1000.0 / wall, Median(per), (rss1 - rss0) / 1048576.0, streams);
    srv.Stop();
    t.join();
  }
  return 0;
}
