// gemma-engine's OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models,
// /health, /metrics, /tokenize, /detokenize, /props, and the web console at /.
//
//   gemma::server::Server s(engine, {.port = 8080, .slots = 2});
//   s.Bind();      // throws Error(kIo) when the address is taken
//   s.Run();       // blocks until Stop() (from another thread or a signal watcher)
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "gemma/engine.h"

namespace gemma::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 8080;                 // 0: any free port (see Server::port())
  int slots = 1;                   // sessions generating at once
  int max_queue = 16;              // requests waiting for a slot; beyond: 429
  std::string api_key;             // non-empty: Bearer token required on the API
  std::string cors_origin;         // non-empty: Access-Control-Allow-Origin value
  size_t body_limit = 8u << 20;    // bytes; larger bodies get 413
  std::string model_id;            // the name /v1/models reports and requests may use
  // Non-empty: a folder whose files image, audio and video parts may name ("path" relative to it
  // or absolute inside it, or a file:// URL); symlinks out of it are refused. Empty: media parts
  // carry their bytes, and video (which only comes as a file) is refused.
  std::string media_dir;
  // Speculative decoding for every request that does not set its own "speculative" (off by
  // default; draft_model needs the engine's draft model, EngineOptions::draft_model_path).
  SpeculativeOptions speculative;
};

class Server {
 public:
  Server(std::shared_ptr<Engine> engine, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port.
  int Bind();
  // Serves until Stop(). Bind() first.
  void Run();
  // Cancels generations in flight (their streams end cleanly), refuses queued requests and stops
  // the listener. Safe from any thread; Run() returns once open requests have finished.
  void Stop();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gemma::server
