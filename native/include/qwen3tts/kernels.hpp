// The runner's own arithmetic for one instruction set: int8 activation quantization, the
// INT8 and INT4 weight products, and the float dot products and sums of attention
// (docs/OPENVINO.md §10).
//
// The same kernel source is compiled once per instruction set (kernels.cpp): AVX-512 VNNI
// (Xeons, Zen 4 and later), AVX-VNNI (AVX2 with VNNI's dot products in VEX form: Intel's
// Alder Lake and later, so the N100 class and Core Ultra AI PCs, which have no AVX-512) and
// AVX2 (every x86-64 CPU since 2013). All compute the same integer dot products exactly and
// sum them in the same order, so a product gives the same floats on each: the AVX2 path
// emulates VNNI's u8·s8 dot products with 16-bit multiply-adds that cannot saturate for these
// operands. A fourth copy, AVX-512 AMX, is the AVX-512 VNNI one with the INT8 and INT4 products
// of several activation rows on AMX tiles (Xeons since Sapphire Rapids), which sum the same
// integers exactly (native/src/amx_products.inc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qwen3tts {

struct QuantizedRows;

// The weights' layout: blocks of 16 output rows side by side (one 32-bit lane each), as
// 64-byte lines of 4 INT8 inputs per row, or 8 INT4 inputs (each byte holds inputs k and k+4).
constexpr int64_t kBlockRows = 16;
constexpr int64_t kInt8LineInputs = 4;
constexpr int64_t kInt4LineInputs = 8;

// An instruction set the kernels are compiled for, fastest first.
enum class Isa { avx512_amx, avx512_vnni, avx_vnni, avx2 };

struct Kernels {
  Isa isa;
  const char* name;
  // x [cols] quantized to int8 per group of `group` inputs: values q, scale max|x|/127 and Σq per group.
  void (*quantize)(const float* x, int64_t cols, int64_t group, int8_t* q, float* scales, int32_t* sums);
  // y[r, 16·b ...] for every activation row r and the 16-row INT8 blocks [begin, end): bytes
  // [blocks][K/4][64] (q + 128), scales [N]; y rows `stride_y` apart.
  void (*int8_blocks)(const uint8_t* bytes, const float* scales, const QuantizedRows& x, int64_t begin, int64_t end,
                      int64_t stride_y, float* y);
  // The same for INT4: nibbles [blocks][K/8][64] (q + 8), scales [blocks][K/group][16].
  void (*int4_blocks)(const uint8_t* nibbles, const float* scales, const QuantizedRows& x, int64_t begin, int64_t end,
                      int64_t stride_y, float* y);
  // Σ a·b over n values, n a multiple of 16.
  float (*dot)(const float* a, const float* b, int64_t n);
  // Σ a·b over n values, b bytes taken as unsigned integers (a u8 KV cache row), n a multiple of 16.
  float (*dot_u8)(const float* a, const uint8_t* b, int64_t n);
  // y += a·x over n values (one fused multiply-add each), n a multiple of 16.
  void (*axpy)(float a, const float* x, int64_t n, float* y);
  // The same with x bytes taken as unsigned integers.
  void (*axpy_u8)(float a, const uint8_t* x, int64_t n, float* y);
  // out = silu(gate)·up over n values (a polynomial e^x, within 2e-7 of expf), n a multiple of 16.
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out);
};

// The instruction sets this CPU runs, fastest first (empty: no AVX2 with FMA).
std::vector<Isa> supported_isas();
// The kernels of `isa`; throws std::runtime_error if this CPU does not run them.
const Kernels& kernels(Isa isa);
// The fastest kernels this CPU runs; throws std::runtime_error if it runs none.
const Kernels& best_kernels();
// best_kernels() for "", else the copy of that name (a smaller CPU's, to measure it on a larger
// one); throws as kernels() and isa_from_name() do.
const Kernels& kernels_named(const std::string& name);
// "avx512_amx", "avx512_vnni", "avx_vnni" or "avx2", and back (std::invalid_argument for another name).
const char* isa_name(Isa isa);
Isa isa_from_name(const std::string& name);

}  // namespace qwen3tts
