#include "qwen3tts/kernels.hpp"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "qwen3tts/quantized_matrix.hpp"

namespace qwen3tts {

// AVX-512 with VNNI: a 16-lane vector is one register; u8·s8 dot products are one instruction.
namespace avx512 {
namespace {
#define QWEN3TTS_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,fma")))
constexpr int kRows = 4;  // activation rows per pass over a block (registers: 32 of them)
using F = __m512;
using I = __m512i;
QWEN3TTS_TARGET inline F fzero() { return _mm512_setzero_ps(); }
QWEN3TTS_TARGET inline F fset(float v) { return _mm512_set1_ps(v); }
QWEN3TTS_TARGET inline F fload(const float* p) { return _mm512_loadu_ps(p); }
QWEN3TTS_TARGET inline void fstore(float* p, F v) { _mm512_storeu_ps(p, v); }
QWEN3TTS_TARGET inline F load_u8(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
QWEN3TTS_TARGET inline F fmul(F a, F b) { return _mm512_mul_ps(a, b); }
QWEN3TTS_TARGET inline F fadd(F a, F b) { return _mm512_add_ps(a, b); }
QWEN3TTS_TARGET inline F fdiv(F a, F b) { return _mm512_div_ps(a, b); }
QWEN3TTS_TARGET inline F fmin(F a, F b) { return _mm512_min_ps(a, b); }
QWEN3TTS_TARGET inline F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a·b
// 2^n for integer lanes n in [-126, 127]: n + 127 in the exponent field
QWEN3TTS_TARGET inline F pow2(I n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
}
QWEN3TTS_TARGET inline F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
QWEN3TTS_TARGET inline F fmax(F a, F b) { return _mm512_max_ps(a, b); }
QWEN3TTS_TARGET inline F fabs(F a) { return _mm512_abs_ps(a); }
QWEN3TTS_TARGET inline float reduce_max(F a) { return _mm512_reduce_max_ps(a); }
QWEN3TTS_TARGET inline float reduce_add(F a) { return _mm512_reduce_add_ps(a); }
QWEN3TTS_TARGET inline F to_float(I a) { return _mm512_cvtepi32_ps(a); }
QWEN3TTS_TARGET inline I round_to_int(F a) { return _mm512_cvtps_epi32(a); }
QWEN3TTS_TARGET inline void store_int8(int8_t* p, I v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtsepi32_epi8(v));
}
QWEN3TTS_TARGET inline I iset(int32_t v) { return _mm512_set1_epi32(v); }
QWEN3TTS_TARGET inline I iadd(I a, I b) { return _mm512_add_epi32(a, b); }
QWEN3TTS_TARGET inline I iload(const uint8_t* p) { return _mm512_loadu_si512(p); }
QWEN3TTS_TARGET inline int32_t reduce_add(I a) { return _mm512_reduce_add_epi32(a); }
QWEN3TTS_TARGET inline I low_nibbles(I a) { return _mm512_and_si512(a, _mm512_set1_epi8(0x0F)); }
QWEN3TTS_TARGET inline I high_nibbles(I a) { return _mm512_and_si512(_mm512_srli_epi16(a, 4), _mm512_set1_epi8(0x0F)); }
// acc + Σ u·x over each lane's 4 bytes: u unsigned (any byte), x the 4 signed bytes of x4
QWEN3TTS_TARGET inline I dot_bytes(I acc, I u, int32_t x4) { return _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(x4)); }
QWEN3TTS_TARGET inline I dot_nibbles(I acc, I u, int32_t x4) { return dot_bytes(acc, u, x4); }
#include "kernel_body.inc"
#undef QWEN3TTS_TARGET
#include "amx_products.inc"
}  // namespace
const Kernels kKernels{Isa::avx512_vnni, "avx512_vnni", quantize, int8_blocks, int4_blocks, dot, dot_u8, axpy, axpy_u8, swiglu};
// The same with AMX tiles for the INT8 and INT4 products of several rows (amx_products.inc).
const Kernels kAmxKernels{Isa::avx512_amx, "avx512_amx", quantize, amx_int8_blocks, amx_int4_blocks, dot, dot_u8,
                          axpy, axpy_u8, swiglu};
}  // namespace avx512

// AVX2 with FMA: a 16-lane vector is two registers; VNNI's dot products become 16-bit
// multiply-adds whose operands cannot saturate them (unsigned bytes of at most 15 times signed
// bytes: a byte is split into its nibbles), so every integer sum equals VNNI's.
namespace avx2 {
namespace {
#define QWEN3TTS_TARGET __attribute__((target("avx2,fma")))
#include "avx2_vectors.inc"
// Σ over each 32-bit lane's 4 bytes of u·x, u ≤ 15: pairs of products fit 16 bits (≤ 2·15·128).
QWEN3TTS_TARGET inline __m256i dot4_small(__m256i u, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}
// The same for any unsigned byte: 16·(high nibble · x) + (low nibble · x).
QWEN3TTS_TARGET inline __m256i dot4(__m256i u, __m256i x) {
  const __m256i high = _mm256_maddubs_epi16(nibbles_of(_mm256_srli_epi16(u, 4)), x);
  const __m256i low = _mm256_maddubs_epi16(nibbles_of(u), x);
  return _mm256_add_epi32(_mm256_madd_epi16(high, _mm256_set1_epi16(16)), _mm256_madd_epi16(low, _mm256_set1_epi16(1)));
}
QWEN3TTS_TARGET inline I dot_bytes(I acc, I u, int32_t x4) {
  const __m256i x = _mm256_set1_epi32(x4);
  return {_mm256_add_epi32(acc.lo, dot4(u.lo, x)), _mm256_add_epi32(acc.hi, dot4(u.hi, x))};
}
QWEN3TTS_TARGET inline I dot_nibbles(I acc, I u, int32_t x4) {
  const __m256i x = _mm256_set1_epi32(x4);
  return {_mm256_add_epi32(acc.lo, dot4_small(u.lo, x)), _mm256_add_epi32(acc.hi, dot4_small(u.hi, x))};
}
#include "kernel_body.inc"
#undef QWEN3TTS_TARGET
}  // namespace
const Kernels kKernels{Isa::avx2, "avx2", quantize, int8_blocks, int4_blocks, dot, dot_u8, axpy, axpy_u8, swiglu};
}  // namespace avx2

// AVX2 with AVX-VNNI (the VEX form of VNNI: Intel since Alder Lake, the N100 class and Core
// Ultra AI PCs included, which have no AVX-512): AVX2's vectors, with its u8·s8 dot products one
// instruction each, as on AVX-512 VNNI.
namespace avx_vnni {
namespace {
#define QWEN3TTS_TARGET __attribute__((target("avx2,fma,avxvnni")))
#include "avx2_vectors.inc"
QWEN3TTS_TARGET inline I dot_bytes(I acc, I u, int32_t x4) {
  const __m256i x = _mm256_set1_epi32(x4);
  return {_mm256_dpbusd_avx_epi32(acc.lo, u.lo, x), _mm256_dpbusd_avx_epi32(acc.hi, u.hi, x)};
}
QWEN3TTS_TARGET inline I dot_nibbles(I acc, I u, int32_t x4) { return dot_bytes(acc, u, x4); }
#include "kernel_body.inc"
#undef QWEN3TTS_TARGET
}  // namespace
const Kernels kKernels{Isa::avx_vnni, "avx_vnni", quantize, int8_blocks, int4_blocks, dot, dot_u8, axpy, axpy_u8,
                       swiglu};
}  // namespace avx_vnni

namespace {

constexpr Isa kAll[] = {Isa::avx512_amx, Isa::avx512_vnni, Isa::avx_vnni, Isa::avx2};  // fastest first

// AMX-TILE and AMX-INT8 (CPUID leaf 7: EDX bits 24 and 25), and the kernel's leave to use the
// tiles' 8 KB of register state in this process (Linux asks each process to request it; the
// first tile instruction without it is killed with SIGILL). Asked once.
bool tiles_granted() {
  static const bool granted = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 24)) || !(edx & (1u << 25))) return false;
    constexpr long kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kTileData = 18;               // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
  }();
  return granted;
}

bool runs(Isa isa) {
  switch (isa) {
    case Isa::avx512_amx:
      return runs(Isa::avx512_vnni) && tiles_granted();
    case Isa::avx512_vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
    case Isa::avx_vnni:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avxvnni");
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
}

}  // namespace

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : kAll)
    if (runs(isa)) isas.push_back(isa);
  return isas;
}

const Kernels& kernels(Isa isa) {
  if (!runs(isa)) throw std::runtime_error(std::string("this CPU does not run the ") + isa_name(isa) + " kernels");
  switch (isa) {
    case Isa::avx512_amx:
      return avx512::kAmxKernels;
    case Isa::avx512_vnni:
      return avx512::kKernels;
    case Isa::avx_vnni:
      return avx_vnni::kKernels;
    case Isa::avx2:
      break;
  }
  return avx2::kKernels;
}

const Kernels& best_kernels() {
  const std::vector<Isa> isas = supported_isas();
  if (isas.empty()) throw std::runtime_error("the runner's own kernels need a CPU with AVX2 and FMA");
  return kernels(isas.front());
}

const Kernels& kernels_named(const std::string& name) {
  return name.empty() ? best_kernels() : kernels(isa_from_name(name));
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512_amx:
      return "avx512_amx";
    case Isa::avx512_vnni:
      return "avx512_vnni";
    case Isa::avx_vnni:
      return "avx_vnni";
    case Isa::avx2:
      break;
  }
  return "avx2";
}

Isa isa_from_name(const std::string& name) {
  for (Isa isa : kAll)
    if (name == isa_name(isa)) return isa;
  throw std::invalid_argument("unknown kernel instruction set '" + name + "' (avx512_amx, avx512_vnni, avx_vnni or avx2)");
}

}  // namespace qwen3tts
