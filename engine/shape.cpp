#include "engine/shape.h"

#include "engine/error.h"

namespace qkv {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t s = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    QKV_CHECK(da == db || da == 1 || db == 1, op, "shapes do not broadcast: ", shape_str(a),
              " and ", shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_dim(int dim, int rank, const char* op) {
  int r = std::max(rank, 1);
  QKV_CHECK(dim >= -r && dim < r, op, "dim ", dim, " out of range for a tensor of rank ", rank);
  return dim < 0 ? dim + r : dim;
}

}  // namespace qkv
