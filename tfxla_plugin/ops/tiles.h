// Batch tiles for the TfxlaLaunch op (included by tfxla_launch.cc only, hence the unnamed namespace): a
// call with any batch size runs kernels compiled for fixed tile sizes (the `batch_tiles` attr), tile by
// tile, the last one padded with zero rows whose results are dropped (hlo/analysis/batch.py proved
// that equivalent). PlanTiles chooses the steps; the op stages padded tiles.
#ifndef TFXLA_OPS_TILES_H_
#define TFXLA_OPS_TILES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernel_table.h"
#include "tensorflow/core/framework/types.h"

namespace tfxla {
namespace {

// Bytes of one row (dim 0 dropped) of a tensor of `spec`.
int64_t RowBytes(const TensorSpec& spec) {
  int64_t n = tensorflow::DataTypeSize(spec.dtype);
  for (size_t d = 1; d < spec.dims.size(); ++d) n *= spec.dims[d];
  return n;
}

// One launch of a tiled call: rows [start, start + rows) through kernel `tile` (rows < its tile size
// means the tile is padded with zero rows whose results are dropped).
struct TileStep {
  int64_t start;
  int tile;
  int64_t rows;
};

// Full tiles of the largest size first; a remainder more than half of a tile size (or any remainder
// at the smallest size) becomes one padded tile of that size, otherwise it moves down a size.
std::vector<TileStep> PlanTiles(const std::vector<int64_t>& tiles, int64_t n, bool need_one) {
  std::vector<int> order(tiles.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return tiles[a] > tiles[b]; });
  std::vector<TileStep> plan;
  int64_t start = 0, left = n;
  for (size_t o = 0; o < order.size(); ++o) {
    const int t = order[o];
    for (; left >= tiles[t]; left -= tiles[t], start += tiles[t]) plan.push_back({start, t, tiles[t]});
    if (left > 0 && (o + 1 == order.size() || 2 * left > tiles[t])) {
      plan.push_back({start, t, left});
      start += left;
      left = 0;
    }
  }
  if (plan.empty() && need_one) plan.push_back({0, order.back(), 0});
  return plan;
}

}  // namespace
}  // namespace tfxla

#endif  // TFXLA_OPS_TILES_H_
