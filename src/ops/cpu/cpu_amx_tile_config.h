// The tile configuration (ldtilecfg's 64-byte operand, palette 1) that the *_amx.cc files load.
// Include it from those files only: LoadTileConfig is compiled with their AMX flags, and the
// unnamed namespace gives each of them its own copy, so the linker never hands one to a caller
// built without them.
#pragma once

#include <cstdint>

namespace uniprefill::ops::cpu::amx {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile register i
  uint8_t rows[16] = {};    // rows of tile register i
};

// Not _tile_loadconfig: GCC 12's version names only 8 bytes of the 64 as its asm operand, so the
// stores of rows and colsb were dropped as dead and the tiles stayed unconfigured.
inline void LoadTileConfig(const TileConfig& cfg) {
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

}  // namespace
}  // namespace uniprefill::ops::cpu::amx
