// The target attribute of the AVX-512 VNNI kernels: compiled for it whatever the build's
// -march, called only where vnni_supported() (quantized_matrix.hpp) says the CPU runs it.
#pragma once

#define QWEN3TTS_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
