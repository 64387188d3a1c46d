// --model resolution for the CLI: a local path wins; otherwise ORG/NAME[@REV] names a Hub
// repository, found in the Hugging Face cache or pulled into it (unless HF_HUB_OFFLINE is set).
#pragma once

#include <string>

#include "hub/hub_client.h"

namespace gemma::hub {

// Returns a path the loaders accept (a directory or a .safetensors file). `spec` that exists on
// disk is returned unchanged. A cached snapshot of the revision that is loadable is used as is,
// with no network (a branch revision resolves through refs/, as last pulled). Otherwise the
// repository is pulled with `options` (text-only subset when `text_only`). Throws HubError.
std::string ResolveModelPath(const std::string& spec, const HubOptions& options,
                             bool text_only = true);
// The same with HubOptions::FromEnvironment() and progress on stderr.
std::string ResolveModelPath(const std::string& spec);

}  // namespace gemma::hub
