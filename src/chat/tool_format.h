// Gemma 4's tool syntax, as the canonical chat template's macros write it: tool declarations
// (`format_function_declaration` + `format_parameters`), argument values (`format_argument`) and
// tool response blocks (`format_tool_response_block`). Keys are dictsort'ed, strings are wrapped in
// `<|"|>`, schema types are upper-cased.
#pragma once

#include <string>
#include <string_view>

#include "chat/py_value.h"

namespace gemma::chat {

// The template's string delimiter in tool declarations, arguments and responses.
inline constexpr std::string_view kQuote = "<|\"|>";

// The template's `format_argument(argument, escape_keys)`. `argument` may be Undefined (nullptr).
std::string FormatArgument(const Json* argument, bool escape_keys);

// `format_function_declaration(tool) | trim`, without the surrounding `<|tool>`/`<tool|>`.
// `tool` is `{type: function, function: {name, description, parameters, response?}}`. Throws
// gemma::Error(kTemplate) naming `where` for schemas the template cannot render.
std::string FormatFunctionDeclaration(const Json& tool, std::string_view where);

// `format_tool_response_block(tool_name, response)`, including
// `<|tool_response>`/`<tool_response|>`.
std::string FormatToolResponseBlock(std::string_view tool_name, const Json* response);

}  // namespace gemma::chat
