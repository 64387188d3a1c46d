// Fault injection for reliability runs (`gemma-engine soak`, docs/reliability.md) and tests.
#pragma once

#include "backend/backend.h"
#include "gemma/engine.h"

namespace gemma {

// Makes the engine's device suffer `fault` at its next submission (kDeviceLoss) or device-memory
// allocation (kOutOfDeviceMemory), whichever session causes it. False where the engine's backend
// has no device (the CPU backends): nothing is injected.
bool InjectDeviceFault(Engine& engine, DeviceFault fault);

}  // namespace gemma
