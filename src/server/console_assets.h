// The web console's files (web/console), embedded at build time by embed_assets.cmake.
#pragma once

#include <span>
#include <string_view>

namespace gemma::server {

struct Asset {
  std::string_view path;  // URL path, e.g. "/app.js"; "/index.html" is also served at "/"
  std::string_view mime;
  std::string_view data;
};

std::span<const Asset> ConsoleAssets();

}  // namespace gemma::server
