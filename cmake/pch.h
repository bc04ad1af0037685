// Precompiled header shared by every zest target (see CMakeLists.txt).
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
