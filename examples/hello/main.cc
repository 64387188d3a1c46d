// The smallest gemma-engine program: load a checkpoint, open a session, generate greedily from
// token ids (or from text when the model has a tokenizer.json), print the tokens as they stream.
//   hello MODEL_DIR [PROMPT]
#include <gemma/engine.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: hello MODEL_DIR [PROMPT]\n";
    return 2;
  }
  try {
    auto engine = gemma::Engine::Load({.model_path = argv[1], .backend = "cpu"});
    auto session = engine->NewSession();
    gemma::GenerateOptions opt;
    opt.max_new_tokens = 8;
    const gemma::Input input = argc > 2 && engine->has_tokenizer()
                                   ? gemma::Input::Text(argv[2])
                                   : gemma::Input::Ids({2, 105, 2364, 107});
    gemma::Result r = session->Generate(input, opt, [](const gemma::TokenEvent& ev) {
      std::cout << ev.id << (ev.delta.empty() ? "" : " ") << ev.delta << "\n";
    });
    std::cout << "tokens: " << r.tokens.size() << ", stop: " << gemma::StopReasonName(r.stop_reason)
              << "\n";
  } catch (const gemma::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
