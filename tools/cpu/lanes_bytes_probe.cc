// Development probe of the Q8_0 lanes kernel on the activations' bytes (issue 22's batched
// decode; not built by CMake, like tools/gpu/wgmma_attention_probe.cu). The pairs kernel
// (LanesBlocks32<34, DecodeQ8_0>, the tree's Q8_0 lanes kernel before 6232fd2) decodes each block
// to int16 pairs on the stack and runs 16 vpdpwssd per weight row and block, each with its own
// broadcast. The byte variant keeps the activations as int16 but splits x + 32768 into a high and
// a low byte, so vpdpbusd multiplies the file's int8 quants directly (one broadcast feeds two
// vpdpbusd, no decode):
//   sum(w * x) = 256 * sum(w * hi) + sum(w * lo) - 32768 * sum(w)   (exact in int32)
// so its block sums, and with the same f32 steps its outputs, equal the pairs kernel's bit for
// bit. The tree runs it now (LanesQ8_0Bytes, 4 rows a pass); this probe keeps the pairs kernel and
// the variants beside it. Measured on the 2-vCPU Emerald Rapids VM (2026-12-04, one thread,
// Gemma 3's head 640 -> 262144 x 16 rows): pairs 46-49 ms, bytes with 4 weight rows a pass 37-40
// ms (1.22-1.25x; 8 rows a pass spilled: 40-51 ms), 30-32 ms without the weight-sum term (a
// vpsadbw and a horizontal add per row and block): a per-block sum table made at load (2 bytes per
// 34-byte block) would remove that.
//
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq \
//     -mavx512vnni -Isrc tools/cpu/lanes_bytes_probe.cc -o lanes_bytes_probe
//   ./lanes_bytes_probe [weight rows, default 262144]
#include "ops/cpu/cpu_quant_dot_i16_avx512_kernels.h"
#include "ops/cpu/cpu_quant_rows_i16_avx512_kernels.h"
#include "ops/cpu/cpu_quant_lanes_i16_avx512_kernels.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

using namespace uniprefill::ops::cpu;

// x' = xq + 32768 split into bytes: per quad q of activations, 16 lanes of the 4 low bytes, then
// 16 lanes of the 4 high bytes.
struct ByteLanes {
  const uint32_t* xb;  // [n / 4][2][16]
  const float* scale;  // [groups][16]
};

template <int kW, int kAhead = 1, bool kCorrect = true>
void ProbeBytes(const void* w, int64_t row_bytes, int nw, const ByteLanes& x, int nlanes,
                    int64_t n, float* out, int64_t os) {
  const uint8_t* base = static_cast<const uint8_t*>(w);
  for (int o0 = 0; o0 < nw; o0 += kW) {
    const uint8_t* rows[kW];
    for (int j = 0; j < kW; ++j) rows[j] = base + std::min(o0 + j, nw - 1) * row_bytes;
    __m512 total[kW];
    for (int j = 0; j < kW; ++j) total[j] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < n; g0 += kI16ScaleGroup) {
      const int nb = static_cast<int>(std::min(kI16ScaleGroup, n - g0) / 32);
      const __m512 s = _mm512_loadu_ps(x.scale + (g0 / kI16ScaleGroup) * kI16Lanes);
      for (int k = 0; k < nb; ++k) {
        const int64_t blk = g0 / 32 + k;
        for (int j = 0; j < kW; ++j) {
          const uint8_t* next = base + (o0 + kAhead * kW + j) * row_bytes + blk * 34;
          _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T0);
        }
        __m512i lo[kW], hi[kW];
        for (int j = 0; j < kW; ++j) lo[j] = hi[j] = _mm512_setzero_si512();
        const uint32_t* xq = x.xb + blk * 8 * 32;
        for (int p = 0; p < 8; ++p) {
          const __m512i xl = _mm512_loadu_si512(xq + p * 32);
          const __m512i xh = _mm512_loadu_si512(xq + p * 32 + 16);
          for (int j = 0; j < kW; ++j) {
            int32_t quad;
            std::memcpy(&quad, rows[j] + blk * 34 + 2 + 4 * p, 4);
            const __m512i wb = _mm512_set1_epi32(quad);
            lo[j] = _mm512_dpbusd_epi32(lo[j], xl, wb);
            hi[j] = _mm512_dpbusd_epi32(hi[j], xh, wb);
          }
        }
        for (int j = 0; j < kW; ++j) {
          const uint8_t* b = rows[j] + blk * 34;
          const __m512i sum = _mm512_sub_epi32(
              _mm512_add_epi32(_mm512_slli_epi32(hi[j], 8), lo[j]),
              _mm512_set1_epi32(kCorrect ? BlockQuantSum(b + 2) << 15 : 0));
          const __m512 ds = _mm512_mul_ps(_mm512_set1_ps(Half(b)), s);
          total[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), ds, total[j]);
        }
      }
    }
    for (int j = 0; j < kW && o0 + j < nw; ++j) {
      alignas(64) float lane[kI16Lanes];
      _mm512_store_ps(lane, total[j]);
      for (int r = 0; r < nlanes; ++r) out[r * os + o0 + j] = lane[r];
    }
  }
}

int main(int argc, char** argv) {
  const int64_t n = 640, nw = argc > 1 ? atoi(argv[1]) : 262144, row_bytes = n / 32 * 34;
  std::mt19937 rng(1);
  std::vector<uint8_t> w(nw * row_bytes);
  std::uniform_int_distribution<int> q(-127, 127), hs(0, 1);
  for (int64_t o = 0; o < nw; ++o) {
    for (int64_t b = 0; b < n / 32; ++b) {
      uint8_t* blk = w.data() + o * row_bytes + b * 34;
      const uint16_t h = 0x2000 + (rng() % 0x800);  // f16 scales around 0.008
      std::memcpy(blk, &h, 2);
      for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(q(rng));
    }
  }
  std::uniform_int_distribution<int> xd(-32767, 32767);
  std::vector<int16_t> xq(16 * n);
  for (auto& v : xq) v = static_cast<int16_t>(xd(rng));
  const int64_t groups = (n + kI16ScaleGroup - 1) / kI16ScaleGroup;
  std::vector<float> scale(groups * 16);
  for (auto& v : scale) v = 1e-4f * (1 + rng() % 100);
  // Pairs lanes (the existing kernel) and byte lanes (the new one) of the same xq.
  std::vector<int32_t> pairs(n / 2 * 16);
  for (int64_t k = 0; k < n / 2; ++k) {
    for (int r = 0; r < 16; ++r) {
      const uint16_t a = static_cast<uint16_t>(xq[r * n + 2 * k]);
      const uint16_t b = static_cast<uint16_t>(xq[r * n + 2 * k + 1]);
      pairs[k * 16 + r] = static_cast<int32_t>(a | (uint32_t{b} << 16));
    }
  }
  std::vector<uint32_t> bytes(n / 4 * 32);
  for (int64_t qd = 0; qd < n / 4; ++qd) {
    for (int r = 0; r < 16; ++r) {
      uint32_t lo = 0, hi = 0;
      for (int e = 0; e < 4; ++e) {
        const uint16_t u = static_cast<uint16_t>(xq[r * n + 4 * qd + e] + 32768);
        lo |= uint32_t{static_cast<uint8_t>(u & 0xff)} << (8 * e);
        hi |= uint32_t{static_cast<uint8_t>(u >> 8)} << (8 * e);
      }
      bytes[qd * 32 + r] = lo;
      bytes[qd * 32 + 16 + r] = hi;
    }
  }
  std::vector<float> out_old(16 * nw), out_new(16 * nw);
  const I16Lanes lanes{pairs.data(), nullptr, scale.data()};
  const ByteLanes blanes{bytes.data(), scale.data()};
  auto old_kernel = &LanesBlocks32<34, DecodeQ8_0>;  // the pairs kernel
  const auto time = [&](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
        .count();
  };
  float* y = out_new.data();
  const auto bytes_kernel = [&](auto kernel) {
    return [&, kernel] { kernel(w.data(), row_bytes, nw, blanes, 16, n, y, nw); };
  };
  struct Variant {
    const char* name;
    std::function<void()> run;
  };
  const Variant variants[] = {
      {"pairs (the tree's Q8_0 kernel before 6232fd2)",
       [&] { old_kernel(w.data(), row_bytes, nullptr, nw, lanes, 16, n, out_old.data(), nw); }},
      {"bytes, 8 rows a pass", bytes_kernel(&ProbeBytes<8>)},
      {"bytes, 4 rows a pass", bytes_kernel(&ProbeBytes<4>)},
      {"bytes, 4 rows, prefetch 4 passes ahead", bytes_kernel(&ProbeBytes<4, 4>)},
      {"bytes, 4 rows, no weight-sum term (wrong sums)",
       bytes_kernel(&ProbeBytes<4, 1, false>)},
  };
  const double macs = 16.0 * n * nw;
  for (int rep = 0; rep < 3; ++rep) {
    for (const Variant& v : variants) {
      const double ms = time(v.run);
      std::printf("rep %d  %-48s %7.2f ms  %6.1f G MAC/s\n", rep, v.name, ms, macs / ms / 1e6);
    }
  }
  ProbeBytes<4>(w.data(), row_bytes, nw, blanes, 16, n, y, nw);
  size_t diff = 0;
  for (size_t i = 0; i < out_old.size(); ++i) diff += std::memcmp(&out_old[i], &out_new[i], 4) != 0;
  std::printf("outputs differing bitwise: %zu of %zu\n", diff, out_old.size());
}
