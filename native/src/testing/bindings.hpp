// The test-only submodule of wyoming_qwen3tts._native (bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace qwen3tts::testing {

// Adds the test-only functions and classes to `m` (the submodule _native.testing).
void bind(pybind11::module_& m);
// _native.testing.ProductStacks (product_times.cpp).
void bind_product_times(pybind11::module_& m);

}  // namespace qwen3tts::testing
