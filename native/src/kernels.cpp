#include "qwen3tts/kernels.hpp"

#include <immintrin.h>

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
}  // namespace
const Kernels kKernels{Isa::avx512_vnni, "avx512_vnni", quantize, int8_blocks, int4_blocks, dot, dot_u8, axpy, axpy_u8, swiglu};
}  // namespace avx512

// AVX2 with FMA: a 16-lane vector is two registers; VNNI's dot products become 16-bit
// multiply-adds whose operands cannot saturate them (unsigned bytes of at most 15 times signed
// bytes: a byte is split into its nibbles), so every integer sum equals VNNI's.
namespace avx2 {
namespace {
#define QWEN3TTS_TARGET __attribute__((target("avx2,fma")))
constexpr int kRows = 2;  // activation rows per pass over a block (registers: 16 of them)
struct F {
  __m256 lo, hi;
};
struct I {
  __m256i lo, hi;
};
QWEN3TTS_TARGET inline F fzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
QWEN3TTS_TARGET inline F fset(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
QWEN3TTS_TARGET inline F fload(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
QWEN3TTS_TARGET inline void fstore(float* p, F v) {
  _mm256_storeu_ps(p, v.lo);
  _mm256_storeu_ps(p + 8, v.hi);
}
QWEN3TTS_TARGET inline F load_u8(const uint8_t* p) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))),
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))))};
}
QWEN3TTS_TARGET inline F fmul(F a, F b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
QWEN3TTS_TARGET inline F fadd(F a, F b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
QWEN3TTS_TARGET inline F fdiv(F a, F b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
QWEN3TTS_TARGET inline F fmin(F a, F b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
QWEN3TTS_TARGET inline F fnmadd(F a, F b, F c) {
  return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
}
QWEN3TTS_TARGET inline __m256 pow2_half(__m256i n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}
QWEN3TTS_TARGET inline F pow2(I n) { return {pow2_half(n.lo), pow2_half(n.hi)}; }
QWEN3TTS_TARGET inline F fma(F a, F b, F c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
QWEN3TTS_TARGET inline F fmax(F a, F b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
QWEN3TTS_TARGET inline F fabs(F a) {
  const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  return {_mm256_and_ps(a.lo, mask), _mm256_and_ps(a.hi, mask)};
}
// In _mm512_reduce_max_ps's order and operand order too (max returns its second operand when
// either is NaN), so that even a NaN activation gives both copies the same scale.
QWEN3TTS_TARGET inline float reduce_max(F a) {
  const __m256 m = _mm256_max_ps(a.hi, a.lo);
  __m128 v = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
  v = _mm_max_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_max_ss(v, _mm_shuffle_ps(v, v, 1)));
}
// In _mm512_reduce_add_ps's order (halves, quarters, pairs), so that a dot product's float
// sum is the AVX-512 kernel's to the bit.
QWEN3TTS_TARGET inline float reduce_add(F a) {
  const __m256 half = _mm256_add_ps(a.hi, a.lo);
  const __m128 quarter = _mm_add_ps(_mm256_extractf128_ps(half, 1), _mm256_castps256_ps128(half));
  const __m128 pairs = _mm_add_ps(quarter, _mm_shuffle_ps(quarter, quarter, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(pairs) + _mm_cvtss_f32(_mm_shuffle_ps(pairs, pairs, 1));
}
QWEN3TTS_TARGET inline F to_float(I a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
QWEN3TTS_TARGET inline I round_to_int(F a) { return {_mm256_cvtps_epi32(a.lo), _mm256_cvtps_epi32(a.hi)}; }
QWEN3TTS_TARGET inline void store_int8(int8_t* p, I v) {  // signed saturation, as _mm512_cvtsepi32_epi8
  const __m256i words = _mm256_packs_epi32(v.lo, v.hi);  // per 128-bit lane: lo 0-3, hi 0-3 | lo 4-7, hi 4-7
  const __m256i bytes = _mm256_packs_epi16(words, words);
  const __m256i order = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(order));
}
QWEN3TTS_TARGET inline I iset(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
QWEN3TTS_TARGET inline I iadd(I a, I b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
QWEN3TTS_TARGET inline I iload(const uint8_t* p) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32))};
}
QWEN3TTS_TARGET inline int32_t reduce_add(I a) {
  const __m256i half = _mm256_add_epi32(a.lo, a.hi);
  __m128i v = _mm_add_epi32(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1))));
}
QWEN3TTS_TARGET inline __m256i nibbles_of(__m256i a) { return _mm256_and_si256(a, _mm256_set1_epi8(0x0F)); }
QWEN3TTS_TARGET inline I low_nibbles(I a) { return {nibbles_of(a.lo), nibbles_of(a.hi)}; }
QWEN3TTS_TARGET inline I high_nibbles(I a) {
  return {nibbles_of(_mm256_srli_epi16(a.lo, 4)), nibbles_of(_mm256_srli_epi16(a.hi, 4))};
}
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

namespace {

bool runs(Isa isa) {
  switch (isa) {
    case Isa::avx512_vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
}

}  // namespace

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::avx512_vnni, Isa::avx2})
    if (runs(isa)) isas.push_back(isa);
  return isas;
}

const Kernels& kernels(Isa isa) {
  if (!runs(isa)) throw std::runtime_error(std::string("this CPU does not run the ") + isa_name(isa) + " kernels");
  return isa == Isa::avx512_vnni ? avx512::kKernels : avx2::kKernels;
}

const Kernels& best_kernels() {
  const std::vector<Isa> isas = supported_isas();
  if (isas.empty()) throw std::runtime_error("the runner's own kernels need a CPU with AVX2 and FMA, or AVX-512 VNNI");
  return kernels(isas.front());
}

const char* isa_name(Isa isa) { return isa == Isa::avx512_vnni ? "avx512_vnni" : "avx2"; }

Isa isa_from_name(const std::string& name) {
  for (Isa isa : {Isa::avx512_vnni, Isa::avx2})
    if (name == isa_name(isa)) return isa;
  throw std::invalid_argument("unknown kernel instruction set '" + name + "' (avx512_vnni or avx2)");
}

}  // namespace qwen3tts
