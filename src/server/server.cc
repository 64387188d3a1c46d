#include "server/server.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "server/api_error.h"
#include "server/console_assets.h"
#include "server/metrics.h"
#include "server/openai_format.h"
#include "server/openai_run.h"
#include "server/request_parse.h"
#include "server/slot_pool.h"

namespace gemma::server {
namespace {

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SendJson(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(Dump(j), "application/json");
}

void SendError(httplib::Response& res, const ApiError& e) {
  SendJson(res, e.status(), e.ToJson());
  if (e.status() == 429) res.set_header("Retry-After", "1");
}

json ParseBody(const httplib::Request& req) {
  if (req.body.empty()) throw ApiError(400, "the request body is empty; send a JSON object");
  try {
    return json::parse(req.body);
  } catch (const json::exception& e) {
    // nlohmann reports invalid UTF-8 here too, with the byte offset; a number beyond double's
    // range (1e999) is its out_of_range 406, also the client's fault (fuzz/fuzz_server.cc found
    // it answered 500).
    throw ApiError(400, std::string("malformed JSON: ") + e.what(), "", "invalid_json");
  }
}

constexpr auto kWatchEvery = std::chrono::milliseconds(20);

// The descriptor of the request's connection: the socket whose local and peer addresses are the
// request's (httplib 0.11 does not hand it to handlers). It stays open until the handler returns.
// -1 when none matches.
int ConnectionSocket(const httplib::Request& req) {
  auto address = [](const sockaddr_storage& a, socklen_t len, std::string* host, int* port) {
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
      return false;
    *host = h;
    *port = std::atoi(p);
    return true;
  };
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == ::dirfd(dir)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof peer, local_len = sizeof local;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    std::string peer_host, local_host;
    int peer_port = -1, local_port = -1;
    if (address(peer, peer_len, &peer_host, &peer_port) && peer_port == req.remote_port &&
        peer_host == req.remote_addr && address(local, local_len, &local_host, &local_port) &&
        local_port == req.local_port && local_host == req.local_addr) {
      found = fd;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

// The client closed its side: its end of the stream was read (recv returns 0), or the socket
// failed. Bytes it sent meanwhile (a pipelined request) are not read.
bool PeerClosed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return true;
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

bool SameSecret(const std::string& a, const std::string& b) {
  // Length leaks; the bytes do not.
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

// A streamed request. Its generation runs on the slot's worker and says when the request passed
// its checks: the handler then answers 200 and httplib writes the headers while the prompt is
// evaluated. The response's content provider (on the HTTP thread) writes the events the worker
// queues, except the first token's: the worker writes those to the socket itself when the writer
// is idle, so the first token reaches the client with no thread hand-off. (Writing every token
// itself would put a send() on the decode loop: ~60 us a token here, 11% of the tiny model's
// decode rate.)
struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::string out;                    // events not written yet
  httplib::DataSink* sink = nullptr;  // the response's writer, while the provider runs
  bool writing = false;               // the provider is writing (without the lock)
  bool accepted = false;              // the status is 200: what follows goes in the stream
  bool done = false;
  bool broken = false;                // a write failed: the client is gone
  std::optional<ApiError> early;      // failed before it was accepted: answered with a status
  std::stop_source stop;
  // On the generating thread.
  void Push(std::string s, bool direct) {
    {
      std::lock_guard lock(mu);
      if (broken) return;
      if (direct && sink && !writing && out.empty()) {
        if (!sink->write(s.data(), s.size())) Broken();
        return;
      }
      out += s;
    }
    cv.notify_all();
  }
  void Accept() {
    {
      std::lock_guard lock(mu);
      accepted = true;
    }
    cv.notify_all();
  }
  void Broken() {  // with mu held
    broken = true;
    out.clear();
    stop.request_stop();  // the client is gone: cancel at the next token
  }
};

// Counts streams whose responses are still being written, so Stop() can let them end cleanly.
struct StreamCount {
  std::mutex mu;
  std::condition_variable cv;
  int n = 0;
};

// Outlives a stream's generation (run on its slot's worker); cancels it and waits for its end
// when the response is over.
struct Runner {
  explicit Runner(StreamCount* c) : count(c) {
    std::lock_guard lock(count->mu);
    ++count->n;
  }
  ~Runner() {
    state->stop.request_stop();
    {
      std::unique_lock lock(state->mu);
      state->cv.wait(lock, [&] { return state->done; });
    }
    {
      std::lock_guard lock(count->mu);
      --count->n;
    }
    count->cv.notify_all();
  }
  StreamCount* count;
  std::shared_ptr<StreamState> state;
};

// httplib's ThreadPool, except that a new connection goes to the thread that went idle last
// (httplib's wakes them in turn). The handlers tokenize every prompt (the slot choice and the
// context checks need its ids) and the tokenizer keeps per-thread caches whose first use costs
// ~1.5 ms of page faults on this machine: taken in turn, each of the pool's threads paid it inside
// a request's TTFT. The last idle thread is also the one whose caches are warm. (Warming every
// thread up front instead costs ~0.4 MiB of RSS a thread.)
class LastIdleFirstPool : public httplib::TaskQueue {
 public:
  explicit LastIdleFirstPool(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      workers_.push_back(std::make_unique<Worker>());
      Worker* w = workers_.back().get();
      w->thread = std::thread([this, w] { Loop(*w); });
    }
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock lock(mu_);
    if (idle_.empty()) {
      backlog_.push_back(std::move(fn));
      return;
    }
    Worker* w = idle_.back();
    idle_.pop_back();
    w->job = std::move(fn);
    lock.unlock();
    w->cv.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      shutdown_ = true;
    }
    for (auto& w : workers_) w->cv.notify_one();
    for (auto& w : workers_) w->thread.join();
  }

 private:
  struct Worker {
    std::condition_variable cv;
    std::function<void()> job;
    std::thread thread;
  };
  void Loop(Worker& w) {
    std::unique_lock lock(mu_);
    while (true) {
      std::function<void()> fn;
      if (w.job) {
        fn = std::move(w.job);
        w.job = nullptr;
      } else if (!backlog_.empty()) {
        fn = std::move(backlog_.front());
        backlog_.pop_front();
      } else if (shutdown_) {
        return;
      } else {
        idle_.push_back(&w);
        w.cv.wait(lock, [&] { return w.job || shutdown_; });
        if (!w.job) idle_.erase(std::find(idle_.begin(), idle_.end(), &w));
        continue;
      }
      lock.unlock();
      fn();
      fn = nullptr;
      lock.lock();
    }
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;  // the last to go idle at the back
  std::deque<std::function<void()>> backlog_;
  bool shutdown_ = false;
};

}  // namespace

struct Server::Impl {
  Impl(std::shared_ptr<Engine> e, ServerOptions o)
      : engine(std::move(e)),
        opt(std::move(o)),
        pool(*engine, std::max(1, opt.slots), std::max(0, opt.max_queue)) {
    ctx.engine = engine.get();
    ctx.model_id = opt.model_id;
    ctx.speculative = opt.speculative;
    if (opt.speculative.mode == SpeculativeOptions::Mode::kDraftModel && !engine->has_draft_model())
      throw Error(ErrorCode::kInvalidArgument,
                  "speculative decoding with a draft model: the engine has none");
    if (!opt.media_dir.empty()) {
      std::error_code ec;
      ctx.media_dir = std::filesystem::canonical(opt.media_dir, ec);
      if (ec || !std::filesystem::is_directory(ctx.media_dir))
        throw Error(ErrorCode::kInvalidArgument,
                    "media folder '" + opt.media_dir + "' is not a directory");
    }
  }

  std::shared_ptr<Engine> engine;
  ServerOptions opt;
  ParseContext ctx;
  Metrics metrics;
  httplib::Server http;
  int port = 0;

  // Every generation's stop source, so Stop() can cancel them all.
  std::mutex inflight_mu;
  std::multiset<std::stop_source*> inflight;
  bool stopping = false;
  StreamCount streams;
  // Last, so it is destroyed first: its workers' jobs use everything above (metrics, the
  // in-flight set, the stream count) until they return.
  SlotPool pool;

  struct InFlight {
    Impl* impl;
    std::stop_source* src;
    InFlight(Impl* i, std::stop_source* s) : impl(i), src(s) {
      std::lock_guard lock(impl->inflight_mu);
      impl->inflight.insert(src);
      if (impl->stopping) src->request_stop();
    }
    ~InFlight() {
      std::lock_guard lock(impl->inflight_mu);
      impl->inflight.erase(impl->inflight.find(src));
    }
  };

  void Setup();
  void Route(const std::string& name, const std::string& method, const std::string& path,
             std::function<void(const httplib::Request&, httplib::Response&)> fn);
  void HandleGenerate(const httplib::Request& req, httplib::Response& res, bool chat);
  // POST /v1/audio/transcriptions and /v1/audio/translations (OpenAI's multipart shape).
  void HandleAudio(const httplib::Request& req, httplib::Response& res, bool translate);
  // Checks the prompt against the context and takes a slot (ApiError 400 / 429 / 503).
  std::unique_ptr<SlotPool::Lease> Admit(ParsedRequest& pr, const char* prompt_field);
  // Runs a request to its end on its slot; cancels it when the client hangs up.
  std::vector<Result> RunToEnd(const httplib::Request& req,
                               std::shared_ptr<const ParsedRequest> pr,
                               std::unique_ptr<SlotPool::Lease> lease);
  std::vector<Result> RunSamples(const ParsedRequest& pr, Session& s, std::stop_token stop,
                                 StreamFormatter* fmt,
                                 const std::function<void(std::string, bool)>& emit,
                                 const std::function<void()>& on_accepted = {});
  json Props() const;
};

void Server::Impl::Route(const std::string& name, const std::string& method,
                         const std::string& path,
                         std::function<void(const httplib::Request&, httplib::Response&)> fn) {
  auto wrapped = [this, name, fn](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const ApiError& e) {
      if (e.status() == 429) metrics.CountRejected();
      SendError(res, e);
    } catch (const Error& e) {
      SendError(res, FromEngineError(e));
    } catch (const std::exception& e) {
      SendError(res, ApiError(500, std::string("internal error: ") + e.what()));
    }
    metrics.CountRequest(name, res.status);
  };
  if (method == "GET")
    http.Get(path, wrapped);
  else
    http.Post(path, wrapped);
}

std::vector<Result> Server::Impl::RunSamples(const ParsedRequest& pr, Session& s,
                                             std::stop_token stop, StreamFormatter* fmt,
                                             const std::function<void(std::string, bool)>& emit,
                                             const std::function<void()>& on_accepted) {
  return server::RunSamples(pr, s, stop, fmt, emit, on_accepted, [&](const Result& r) {
    metrics.ObserveGeneration(r.telemetry, r.tokens.size());
  });
}

std::unique_ptr<SlotPool::Lease> Server::Impl::Admit(ParsedRequest& pr, const char* prompt_field) {
  const std::vector<int32_t> prompt = PrepareRequest(&pr, *engine, prompt_field);
  std::unique_ptr<SlotPool::Lease> lease = pool.Acquire(prompt);
  if (!lease) {
    {
      std::lock_guard lock(inflight_mu);
      if (stopping) throw ApiError(503, "the server is shutting down", "", "shutting_down");
    }
    throw ApiError(429,
                   "all " + std::to_string(pool.size()) + " slots are busy and " +
                       std::to_string(opt.max_queue) + " requests are waiting; retry later",
                   "", "queue_full");
  }
  return lease;
}

std::vector<Result> Server::Impl::RunToEnd(const httplib::Request& req,
                                           std::shared_ptr<const ParsedRequest> pr,
                                           std::unique_ptr<SlotPool::Lease> lease) {
  // Generation runs on the slot's worker, like streams: the few threads that touch the large
  // per-token buffers keep the allocator's footprint flat under load.
  std::stop_source stop;
  InFlight guard(this, &stop);
  // The job owns what it touches after handing over its result: the handler may be gone by
  // the time set_value returns.
  auto done = std::make_shared<std::promise<std::vector<Result>>>();
  std::future<std::vector<Result>> future = done->get_future();
  SlotPool::Lease* slot = lease.get();
  std::shared_ptr<SlotPool::Lease> held(std::move(lease));
  slot->Post([this, pr, held, stop, done]() mutable {
    std::vector<Result> results;
    std::exception_ptr failure;
    try {
      results = RunSamples(*pr, held->session(), stop.get_token(), nullptr, {});
    } catch (...) {
      failure = std::current_exception();
    }
    held.reset();  // free before the answer, so the client's next request finds it idle
    if (failure)
      done->set_exception(failure);
    else
      done->set_value(std::move(results));
  });
  // cpp-httplib 0.11 tells a handler nothing of its connection: watch the socket meanwhile,
  // and cancel at the next token when the client has hung up.
  if (future.wait_for(kWatchEvery) != std::future_status::ready) {
    const int fd = ConnectionSocket(req);
    while (future.wait_for(kWatchEvery) != std::future_status::ready) {
      if (fd >= 0 && PeerClosed(fd)) {
        stop.request_stop();
        break;
      }
    }
  }
  try {
    return future.get();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kCancelled) metrics.CountCancelled();
    throw FromEngineError(e, *pr);
  }
}

void Server::Impl::HandleAudio(const httplib::Request& req, httplib::Response& res,
                              bool translate) {
  if (!req.is_multipart_form_data())
    throw ApiError(400, "send multipart/form-data with the audio in a 'file' field", "file");
  std::multimap<std::string, std::string> fields;
  const std::string* file = nullptr;
  for (const auto& [name, part] : req.files) {
    if (name != "file") {
      fields.emplace(name, part.content);
    } else if (file) {
      throw BadField("file", "is given more than once");
    } else {
      file = &part.content;
    }
  }
  auto ar = std::make_shared<AudioRequest>(ParseAudioRequest(fields, file, translate, ctx));
  // The request shares `ar`'s lifetime with the slot's job.
  std::shared_ptr<const ParsedRequest> pr(ar, &ar->chat);
  std::unique_ptr<SlotPool::Lease> lease = Admit(ar->chat, "file");
  const std::vector<Result> results = RunToEnd(req, pr, std::move(lease));
  const AudioBody out = AudioResponse(*ar, results.at(0));
  res.status = 200;
  res.set_content(out.body, out.content_type);
}

void Server::Impl::HandleGenerate(const httplib::Request& req, httplib::Response& res, bool chat) {
  const json body = ParseBody(req);
  auto pr = std::make_shared<ParsedRequest>(chat ? ParseChatRequest(body, ctx)
                                                 : ParseCompletionRequest(body, ctx));
  std::unique_ptr<SlotPool::Lease> lease = Admit(*pr, chat ? "messages" : "prompt");

  if (!pr->stream) {
    const std::vector<Result> results = RunToEnd(req, pr, std::move(lease));
    const std::string id = NewId(chat ? "chatcmpl-" : "cmpl-");
    SendJson(res, 200,
             chat ? ChatResponse(*pr, results, *engine, id, UnixNow())
                  : CompletionResponse(*pr, results, *engine, id, UnixNow()));
    return;
  }

  auto st = std::make_shared<StreamState>();
  auto runner = std::make_shared<Runner>(&streams);
  runner->state = st;
  SlotPool::Lease* slot = lease.get();
  // std::function needs a copyable job: the lease travels in a shared_ptr.
  std::shared_ptr<SlotPool::Lease> held(std::move(lease));
  slot->Post([this, st, pr, held]() mutable {
    std::stop_source stop = st->stop;
    InFlight guard(this, &stop);
    StreamFormatter fmt(*pr, *engine, opt.model_id);
    auto emit = [&](std::string events, bool first) { st->Push(std::move(events), first); };
    std::string tail;  // sent after the slot is free, so a client that reads the end and asks
                       // again at once finds the slot idle
    std::optional<ApiError> early;
    try {
      std::vector<Result> results = RunSamples(*pr, held->session(), stop.get_token(), &fmt, emit,
                                               [&] { st->Accept(); });
      if (pr->include_usage) tail += SseEvent(fmt.UsageChunk(results));
      tail += "data: [DONE]\n\n";
    } catch (const std::exception& ex) {
      const Error* ge = dynamic_cast<const Error*>(&ex);
      if (ge && ge->code() == ErrorCode::kCancelled) metrics.CountCancelled();
      ApiError err = ge ? FromEngineError(*ge, *pr) : ApiError(500, ex.what());
      std::lock_guard lock(st->mu);
      if (!st->accepted) {
        early = err;
      } else {
        // Headers are gone: the error travels in the stream, as OpenAI's API does.
        tail = SseEvent(err.ToJson()) + "data: [DONE]\n\n";
      }
    }
    held.reset();
    if (!tail.empty()) st->Push(std::move(tail), false);
    {
      std::lock_guard lock(st->mu);
      st->early = early;
      st->done = true;
    }
    st->cv.notify_all();
  });
  {
    std::unique_lock lock(st->mu);
    st->cv.wait(lock, [&] { return st->accepted || st->done; });
    if (st->early) {
      ApiError e = *st->early;
      lock.unlock();
      runner.reset();  // joins
      throw e;
    }
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [st, runner](size_t, httplib::DataSink& sink) {
        std::unique_lock lock(st->mu);
        st->sink = &sink;
        while (true) {
          st->cv.wait(lock, [&] { return !st->out.empty() || st->done || st->broken; });
          if (st->broken || st->out.empty()) break;
          const std::string events = std::move(st->out);
          st->out.clear();
          st->writing = true;
          lock.unlock();
          const bool ok = sink.write(events.data(), events.size());
          lock.lock();
          st->writing = false;
          if (!ok) st->Broken();
        }
        st->sink = nullptr;  // under the lock: the worker writes through it no more
        if (st->broken) return false;
        sink.done();
        return true;
      });
}

json Server::Impl::Props() const {
  return {
      {"model", opt.model_id},
      {"backend", engine->backend_name()},
      {"context", engine->context_capacity()},
      {"vocab_size", engine->vocab_size()},
      {"has_tokenizer", engine->has_tokenizer()},
      {"load_ms", engine->load_ms()},
      {"slots", pool.size()},
      {"max_queue", opt.max_queue},
      {"auth", !opt.api_key.empty()},
      {"shared_bytes", engine->shared_bytes()},
      {"resident_bytes", ResidentBytes()},
      {"chat_template", engine->chat_template_info().ToJson()},
      {"generation_defaults", SamplingDefaultsJson(*engine)},
      {"draft_model", engine->has_draft_model()},
      {"modalities", {{"image", engine->has_vision()}, {"audio", engine->has_audio()}}},
      {"speculative",
       {{"mode", opt.speculative.mode == SpeculativeOptions::Mode::kPromptLookup ? "prompt_lookup"
                 : opt.speculative.mode == SpeculativeOptions::Mode::kDraftModel ? "draft_model"
                 : opt.speculative.mode == SpeculativeOptions::Mode::kCustom     ? "custom"
                                                                                 : "off"},
        {"max_draft", opt.speculative.max_draft}}}};
}

void Server::Impl::Setup() {
  // Enough HTTP threads for every slot, every queued request and a few cheap requests (health,
  // metrics, the console) beside them; admission itself is the slot pool's job.
  const size_t threads = static_cast<size_t>(std::max(1, opt.slots) + opt.max_queue + 8);
  http.new_task_queue = [threads] { return new LastIdleFirstPool(threads); };
  http.set_payload_max_length(opt.body_limit);
  http.set_keep_alive_timeout(2);
  // httplib closes a kept-alive connection after 5 requests by default: a client would pay a new
  // connection (connect, accept, a thread hand-off) on every fifth request.
  http.set_keep_alive_max_count(1000);
  // One small SSE event per token: without this, Nagle's algorithm holds an event back until the
  // client's delayed ACK (tens of ms of added latency per token).
  http.set_tcp_nodelay(true);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opt.api_key.empty() || req.method == "OPTIONS")
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string& p = req.path;
    const bool open = p == "/" || p == "/health" || p.rfind("/console/", 0) == 0 ||
                      (p.find('/', 1) == std::string::npos && p.find('.') != std::string::npos);
    if (open) return httplib::Server::HandlerResponse::Unhandled;
    if (!SameSecret(req.get_header_value("Authorization"), "Bearer " + opt.api_key)) {
      SendError(res, ApiError(401, "invalid or missing API key: send 'Authorization: Bearer KEY'",
                              "", "invalid_api_key"));
      // A browser only shows the 401 to the page when the CORS header is on it too.
      if (!opt.cors_origin.empty()) res.set_header("Access-Control-Allow-Origin", opt.cors_origin);
      metrics.CountRequest("auth", 401);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 413) {
          SendError(res, ApiError(413,
                                  "the request body is larger than " +
                                      std::to_string(opt.body_limit) + " bytes",
                                  "", "request_too_large"));
        } else if (res.status == 404) {
          SendError(res, ApiError(404, "no route " + req.method + " " + req.path, "", "not_found"));
        } else {
          SendError(res, ApiError(res.status, "HTTP " + std::to_string(res.status)));
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        SendError(res, ApiError(500, "internal error: " + what));
      });
  if (!opt.cors_origin.empty()) {
    http.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      res.set_header("Access-Control-Allow-Origin", opt.cors_origin);
      res.set_header("Vary", "Origin");
    });
    http.Options(".*", [this](const httplib::Request&, httplib::Response& res) {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
    });
  }

  Route("chat", "POST", "/v1/chat/completions",
        [this](const auto& q, auto& r) { HandleGenerate(q, r, true); });
  Route("chat", "POST", "/chat/completions",
        [this](const auto& q, auto& r) { HandleGenerate(q, r, true); });
  Route("transcriptions", "POST", "/v1/audio/transcriptions",
        [this](const auto& q, auto& r) { HandleAudio(q, r, false); });
  Route("translations", "POST", "/v1/audio/translations",
        [this](const auto& q, auto& r) { HandleAudio(q, r, true); });
  Route("completions", "POST", "/v1/completions",
        [this](const auto& q, auto& r) { HandleGenerate(q, r, false); });
  Route("completions", "POST", "/completions",
        [this](const auto& q, auto& r) { HandleGenerate(q, r, false); });
  auto models = [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", opt.model_id},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "gemma-engine"},
              {"meta", Props()}};
    SendJson(res, 200, {{"object", "list"}, {"data", json::array({m})}});
  };
  Route("models", "GET", "/v1/models", models);
  Route("models", "GET", "/models", models);
  Route("health", "GET", "/health", [this](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200,
             {{"status", "ok"},
              {"slots_idle", pool.size() - pool.busy()},
              {"slots_processing", pool.busy()},
              {"queue", pool.queued()}});
  });
  Route("props", "GET", "/props",
        [this](const httplib::Request&, httplib::Response& res) { SendJson(res, 200, Props()); });
  Route("metrics", "GET", "/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Render(pool.size(), pool.busy(), pool.queued()),
                    "text/plain; version=0.0.4");
  });
  Route("tokenize", "POST", "/tokenize",
        [this](const httplib::Request& req, httplib::Response& res) {
          const json body = ParseBody(req);
          if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
          // Optional booleans: anything else is the client's 400 (j.value() with a bool default
          // would throw nlohmann's type_error, answered 500).
          auto flag = [&](const char* name) {
            if (!body.contains(name)) return false;
            if (!body[name].is_boolean()) throw BadField(name, "must be true or false");
            return body[name].get<bool>();
          };
          std::vector<int32_t> ids;
          try {
            if (body.contains("messages")) {
              ids = engine->PromptTokens(Input::Messages(NormalizeMessages(body["messages"], ctx),
                                                         body.value("tools", json::array()),
                                                         flag("enable_thinking")));
            } else {
              if (!body.contains("content") || !body["content"].is_string())
                throw BadField("content", "must be a string (or send 'messages')");
              const bool special = flag("add_special");
              Input in = Input::Text(body["content"].get<std::string>());
              in.add_bos = special;
              ids = special ? engine->PromptTokens(in) : engine->Tokenize(*in.text);
            }
          } catch (const Error& e) {
            throw FromEngineError(e);
          }
          json out = {{"tokens", ids}};
          if (flag("with_pieces")) {
            json pieces = json::array();
            for (int32_t id : ids)
              pieces.push_back({{"id", id}, {"piece", engine->Detokenize({id})}});
            out["tokens"] = pieces;
          }
          SendJson(res, 200, out);
        });
  Route("detokenize", "POST", "/detokenize",
        [this](const httplib::Request& req, httplib::Response& res) {
          const json body = ParseBody(req);
          if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
            throw BadField("tokens", "must be an array of token ids");
          std::vector<int32_t> ids;
          for (const json& v : body["tokens"]) {
            if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
                v.get<int64_t>() >= engine->vocab_size())
              throw BadField("tokens", "ids must be integers in [0, " +
                                           std::to_string(engine->vocab_size()) + ")");
            ids.push_back(v.get<int32_t>());
          }
          try {
            SendJson(res, 200, {{"content", engine->Detokenize(ids)}});
          } catch (const Error& e) {
            throw FromEngineError(e);
          }
        });
  for (const Asset& a : ConsoleAssets()) {
    auto serve = [a](const httplib::Request&, httplib::Response& res) {
      res.set_content(a.data.data(), a.data.size(), std::string(a.mime).c_str());
      // The console talks only to this origin; nothing may frame or inject into it.
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
                     "frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
    };
    http.Get(std::string(a.path), serve);
    if (a.path == "/index.html") http.Get("/", serve);
  }
}

Server::Server(std::shared_ptr<Engine> engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(engine), std::move(options))) {
  if (impl_->opt.model_id.empty()) impl_->opt.model_id = "gemma";
  impl_->ctx.model_id = impl_->opt.model_id;
  impl_->Setup();
}

Server::~Server() { Stop(); }

namespace {

// Debian's cpp-httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into
// its shared library): a burst of new connections beyond it while the accept loop is busy may be
// dropped. listen() again on the bound socket raises it (Linux updates a listening socket's
// backlog); the socket is found by its port.
void RaiseListenBacklog(int port) {
  for (int fd = 0; fd < 4096; ++fd) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) continue;
    int p = -1;
    if (ss.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    if (ss.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    if (p == port) ::listen(fd, SOMAXCONN);
  }
}

}  // namespace

int Server::Bind() {
  Impl& m = *impl_;
  if (m.opt.port == 0) {
    m.port = m.http.bind_to_any_port(m.opt.host);
    if (m.port < 0) throw Error(ErrorCode::kIo, "cannot bind " + m.opt.host);
  } else {
    if (!m.http.bind_to_port(m.opt.host, m.opt.port))
      throw Error(ErrorCode::kIo, "cannot bind " + m.opt.host + ":" + std::to_string(m.opt.port) +
                                      " (in use, or not an address of this machine)");
    m.port = m.opt.port;
  }
  RaiseListenBacklog(m.port);
  return m.port;
}

void Server::Run() {
  {
    std::lock_guard lock(impl_->inflight_mu);
    if (impl_->stopping)
      return;  // stopped before it ran: httplib's stop() only acts on a running server
  }
  impl_->http.listen_after_bind();
}

void Server::Stop() {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.inflight_mu);
    m.stopping = true;
    for (std::stop_source* s : m.inflight) s->request_stop();
  }
  m.pool.Shutdown();
  // The listener's stop also ends chunked responses mid-write, so let the cancelled streams
  // write their last events first (each is at most one token away from seeing its stop).
  {
    std::unique_lock lock(m.streams.mu);
    m.streams.cv.wait_for(lock, std::chrono::seconds(5), [&] { return m.streams.n == 0; });
  }
  m.http.stop();
}

int Server::port() const { return impl_->port; }

}  // namespace gemma::server
