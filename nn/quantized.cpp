#include "nn/quantized.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "nn/int8_gemm.h"

namespace qkv::nn {

namespace {

int8_t quantize(double v, double inv_scale) {
  return int8_t(std::clamp(std::nearbyint(v * inv_scale), -127.0, 127.0));
}

}  // namespace

QuantizedLinear::QuantizedLinear(const Linear& linear)
    : in_features(linear.in_features),
      out_features(linear.out_features),
      padded_in((linear.in_features + 63) / 64 * 64) {
  std::vector<float> w = linear.weight.to_vector<float>();
  weight.assign(size_t(out_features * padded_in), 0);
  scales.resize(size_t(out_features));
  row_sums.resize(size_t(out_features));
  for (int64_t o = 0; o < out_features; ++o) {
    const float* row = w.data() + o * in_features;
    float mx = 0;
    for (int64_t k = 0; k < in_features; ++k) mx = std::max(mx, std::abs(row[k]));
    const double scale = mx > 0 ? mx / 127.0 : 1.0;
    scales[size_t(o)] = float(scale);
    int32_t sum = 0;
    for (int64_t k = 0; k < in_features; ++k)
      sum += weight[size_t(o * padded_in + k)] = quantize(row[k], 1.0 / scale);
    row_sums[size_t(o)] = sum;
  }
  if (linear.bias.defined()) bias = linear.bias.detach().to(DType::f32).contiguous();
}

Tensor QuantizedLinear::forward(const Tensor& x) {
  const char* op = "QuantizedLinear";
  QKV_CHECK(
      x.dim() >= 1 && x.size(-1) == in_features && x.device().is_cpu() && is_floating(x.dtype()),
      op, "expected a floating CPU input with last dim ", in_features, ", got ",
      shape_str(x.shape()));
  Tensor xf = x.detach().to(DType::f32).contiguous();
  const int64_t rows = xf.numel() / in_features;
  const float* xs = xf.data<float>();
  // Dynamic per-row quantization of the activations.
  std::vector<int8_t> xq(size_t(rows * padded_in), 0);
  std::vector<float> row_scale(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xs + r * in_features;
    float mx = 0;
    for (int64_t k = 0; k < in_features; ++k) mx = std::max(mx, std::abs(row[k]));
    const double scale = mx > 0 ? mx / 127.0 : 1.0;
    row_scale[size_t(r)] = float(scale);
    for (int64_t k = 0; k < in_features; ++k)
      xq[size_t(r * padded_in + k)] = quantize(row[k], 1.0 / scale);
  }
  std::vector<int32_t> acc(size_t(rows * out_features));
  int8_matmul(xq.data(), rows, weight.data(), row_sums.data(), out_features, padded_in, acc.data(),
              use_vnni);

  Shape shape = x.shape();
  shape.back() = out_features;
  Tensor y = Tensor::empty(shape, DType::f32);
  float* ys = y.data<float>();
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out_features; ++o)
      ys[r * out_features + o] =
          float(acc[size_t(r * out_features + o)]) * row_scale[size_t(r)] * scales[size_t(o)] +
          (b ? b[o] : 0.f);
  return x.dtype() == DType::f32 ? y : y.to(x.dtype());
}

std::string QuantizedLinear::describe() const {
  return "QuantizedLinear(" + std::to_string(in_features) + " -> " + std::to_string(out_features) +
         ", int8)";
}

namespace {
template <typename F>
void for_each_linear(Module& m, F&& fn) {
  if (auto* linear = dynamic_cast<Linear*>(&m)) fn(*linear);
  for (auto& [name, child] : m.named_children()) for_each_linear(*child, fn);
}
}  // namespace

int64_t quantize_linear_layers(Module& module) {
  int64_t n = 0;
  for_each_linear(module, [&](Linear& l) {
    l.quantized = std::make_shared<QuantizedLinear>(l);
    ++n;
  });
  return n;
}

void dequantize_linear_layers(Module& module) {
  for_each_linear(module, [](Linear& l) { l.quantized.reset(); });
}

}  // namespace qkv::nn
