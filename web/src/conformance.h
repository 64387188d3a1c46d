// Conformance operations: the same requests answered by the WebAssembly module and by a native
// program built from the same sources (gemma_web_oracle), so the Node tests (web/test/) can
// require the two builds to agree on the project's golden sets. Each request is one JSON object
// with an "op":
//
//   {"op": "tokenize", "tokenizer": PATH, "special": "match" | "text", "texts": [STRING...]}
//       -> {"ids": [[ID...]...]}
//   {"op": "render_chat", "cases": [JSONL LINE...]}   (tests/goldens/chat/cases.jsonl's rows)
//       -> {"rendered": [TEXT | {"error": CODE}...]}
//   {"op": "sample", "cases": [CASE...]}   (tests/goldens/sampling's cases: logits recipe,
//       options, input ids) -> {"results": [{"input_fnv", "out_fnv", "n_kept", "raw_top",
//       "final_top"}...]} (out_fnv: FNV-1a over the processed logits' float32 bytes)
//   {"op": "derive_gemma4_tokenizer", "gemma3": PATH, "out": PATH} -> {"bytes": N}
//   {"op": "model", "model": DIR, "backend": NAME, "prompt": [ID...], "steps": N}
//       -> {"tokens": [greedy ids, EOS ignored], "vocab": V, "positions": P,
//           "logits": BASE64 of float32 little-endian [P][V] over prompt + tokens but the last}
//   {"op": "vision", "model": DIR, "backend": NAME, "ids": [ID...], "images": [PATH...],
//    "budgets": [N...], "steps": N} -> as "model", with the images spliced at their placeholders
//   {"op": "decode_image", "path": PATH} -> {"width", "height", "rgb": BASE64 of the RGB bytes}
//
// Errors are gemma::Error as everywhere (the module's wrapper turns them into its error JSON).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gemma::web {

nlohmann::json RunConformance(const nlohmann::json& request);
// The same on JSON text: {"ok": answer} or {"error": {"code", "message"}}.
std::string Conformance(const std::string& request_json);

}  // namespace gemma::web
