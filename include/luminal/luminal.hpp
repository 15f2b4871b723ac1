// luminal: a search-based deep-learning compiler. One header for the public API.
#pragma once

#include "luminal/compile.hpp"
#include "luminal/dtype.hpp"
#include "luminal/error.hpp"
#include "luminal/expression.hpp"
#include "luminal/graph.hpp"
#include "luminal/host_tensor.hpp"
#include "luminal/reference_runtime.hpp"
#include "luminal/runtime.hpp"
#include "luminal/shape.hpp"
#include "luminal/tensor.hpp"
