// gemma_web_oracle: the conformance operations (conformance.h) in a native build, for the Node
// tests that compare the WebAssembly module with it. Reads one request (a file, or stdin with
// "-"), writes the answer's JSON to stdout; exit status 0 with {"ok"}, 2 with {"error"}.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "conformance.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gemma_web_oracle REQUEST.json|-\n");
    return 2;
  }
  const std::string arg = argv[1];
  std::string request;
  if (arg == "-") {
    request.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream f(arg, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "cannot read %s\n", arg.c_str());
      return 2;
    }
    request.assign(std::istreambuf_iterator<char>(f), {});
  }
  const std::string answer = gemma::web::Conformance(request);
  std::fwrite(answer.data(), 1, answer.size(), stdout);
  return answer.rfind("{\"ok\"", 0) == 0 ? 0 : 2;
}
