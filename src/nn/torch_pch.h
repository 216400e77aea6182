// Precompiled header for the libtorch layers: torch/torch.h costs ~30 s per translation
// unit otherwise. Only targets that need libtorch use it.
#pragma once

#include <torch/torch.h>
