// Fault injection for reliability runs (`gemma-engine soak`, docs/reliability.md) and tests.
#pragma once

#include "backend/backend.h"
#include "gemma/engine.h"

namespace gemma {

// Makes the engine's device suffer `fault` at its next submission (kDeviceLoss) or device-memory
// allocation (kOutOfDeviceMemory), whichever session causes it. False where the engine's backend
// has no device (the CPU backends): nothing is injected.
bool InjectDeviceFault(Engine& engine, DeviceFault fault);

// The LM head's SRQ output quantum (0: a dense head) and the final logit softcap (0: none) of the
// engine's model: the unit of a device backend's QAT allowance (an SRQ flip moves logits by whole
// quanta before the softcap; docs/vulkan.md, "Numerics").
struct HeadQuantization {
  float quantum = 0;
  float softcap = 0;
};
HeadQuantization EngineHeadQuantization(const Engine& engine);

}  // namespace gemma
