#include "nn/quantized.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "engine/ops.h"
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
  std::vector<int8_t> rows(size_t(out_features * in_features));
  scales.resize(size_t(out_features));
  for (int64_t o = 0; o < out_features; ++o) {
    const float* row = w.data() + o * in_features;
    float mx = 0;
    for (int64_t k = 0; k < in_features; ++k) mx = std::max(mx, std::abs(row[k]));
    const double scale = mx > 0 ? mx / 127.0 : 1.0;
    scales[size_t(o)] = float(scale);
    for (int64_t k = 0; k < in_features; ++k)
      rows[size_t(o * in_features + k)] = quantize(row[k], 1.0 / scale);
  }
  set_weights(rows);
  if (linear.bias.defined()) bias = linear.bias.detach().to(DType::f32).contiguous();
}

QuantizedLinear::QuantizedLinear(const Tensor& weight_int8, const Tensor& weight_scale,
                                 const Tensor& bias_in) {
  const char* op = "QuantizedLinear";
  QKV_CHECK(weight_int8.defined() && weight_int8.dim() == 2 && weight_int8.dtype() == DType::i8, op,
            "weight_int8 must be an int8 [out, in] tensor, got ",
            weight_int8.defined() ? dtype_name(weight_int8.dtype()) : "nothing", " ",
            weight_int8.defined() ? shape_str(weight_int8.shape()) : "");
  out_features = weight_int8.size(0);
  in_features = weight_int8.size(1);
  padded_in = (in_features + 63) / 64 * 64;
  QKV_CHECK(weight_scale.defined() && weight_scale.dim() == 1 &&
                weight_scale.size(0) == out_features && is_floating(weight_scale.dtype()),
            op, "weight_scale must be a float [", out_features, "] tensor");
  scales = weight_scale.to_vector<float>();
  for (float s : scales)
    QKV_CHECK(std::isfinite(s) && s > 0, op, "weight_scale holds ", s,
              "; scales must be positive and finite");
  std::vector<int64_t> values = weight_int8.to_vector<int64_t>();
  set_weights(std::vector<int8_t>(values.begin(), values.end()));
  if (bias_in.defined()) {
    QKV_CHECK(bias_in.dim() == 1 && bias_in.size(0) == out_features, op, "bias must be [",
              out_features, "], got ", shape_str(bias_in.shape()));
    bias = bias_in.detach().to(DType::f32).contiguous();
  }
}

void QuantizedLinear::set_weights(const std::vector<int8_t>& rows) {
  weight.assign(size_t(out_features * padded_in), 0);
  row_sums.assign(size_t(out_features), 0);
  for (int64_t o = 0; o < out_features; ++o)
    for (int64_t k = 0; k < in_features; ++k) {
      const int8_t q = rows[size_t(o * in_features + k)];
      weight[size_t(o * padded_in + k)] = q;
      row_sums[size_t(o)] += q;
    }
}

Tensor QuantizedLinear::weight_int8() const {
  Tensor t = Tensor::empty({out_features, in_features}, DType::i8);
  int8_t* p = t.data<int8_t>();
  for (int64_t o = 0; o < out_features; ++o)
    for (int64_t k = 0; k < in_features; ++k)
      p[o * in_features + k] = weight[size_t(o * padded_in + k)];
  return t;
}

Tensor QuantizedLinear::weight_scale() const {
  return tensor(std::vector<double>(scales.begin(), scales.end()), {out_features});
}

Tensor QuantizedLinear::dequantized() const {
  Tensor t = Tensor::empty({out_features, in_features}, DType::f32);
  float* p = t.data<float>();
  for (int64_t o = 0; o < out_features; ++o)
    for (int64_t k = 0; k < in_features; ++k)
      p[o * in_features + k] = float(weight[size_t(o * padded_in + k)]) * scales[size_t(o)];
  return t;
}

Tensor QuantizedLinear::forward(const Tensor& x) {
  const char* op = "QuantizedLinear";
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == in_features && is_floating(x.dtype()), op,
            "expected a floating input with last dim ", in_features, ", got ",
            shape_str(x.shape()));
  // The int8 weights and their integer products live in host memory: an input on another
  // device is brought here, and its output taken back.
  Tensor xf = x.detach().to(DType::f32).to(Device::cpu()).contiguous();
  const int64_t rows = xf.numel() / in_features;
  const float* xs = xf.data<float>();
  // Dynamic per-row quantization of the activations, in float so that the loops vectorize. The
  // buffers are reused across calls: at batch 1 a call is a couple of microseconds.
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> row_scale;
  thread_local std::vector<int32_t> acc;
  xq.assign(size_t(rows * padded_in), 0);
  row_scale.resize(size_t(rows));
  acc.resize(size_t(rows * out_features));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xs + r * in_features;
    int8_t* q = xq.data() + r * padded_in;
    float mx = 0;
    _Pragma("omp simd reduction(max : mx)") for (int64_t k = 0; k < in_features; ++k) {
      mx = std::max(mx, std::abs(row[k]));
    }
    const float scale = mx > 0 ? mx / 127.0f : 1.0f, inv = 1.0f / scale;
    row_scale[size_t(r)] = scale;
    _Pragma("omp simd") for (int64_t k = 0; k < in_features; ++k) {
      q[k] = int8_t(std::clamp(std::nearbyint(row[k] * inv), -127.0f, 127.0f));
    }
  }
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
  return (x.dtype() == DType::f32 ? y : y.to(x.dtype())).to(x.device());
}

std::string QuantizedLinear::describe() const {
  return "QuantizedLinear(" + std::to_string(in_features) + " -> " + std::to_string(out_features) +
         ", int8)";
}

namespace {

// Calls fn(path, linear) for every Linear in the tree; paths are state_dict's dotted prefixes.
template <typename ModuleT, typename F>
void for_each_linear(ModuleT& m, const std::string& path, F&& fn) {
  using LinearT = std::conditional_t<std::is_const_v<ModuleT>, const Linear, Linear>;
  if (auto* linear = dynamic_cast<LinearT*>(&m)) fn(path, *linear);
  for (auto& [name, child] : m.named_children())
    for_each_linear(*child, path.empty() ? name : path + "." + name, fn);
}

std::string prefixed(const std::string& path, const char* name) {
  return path.empty() ? name : path + "." + name;
}

}  // namespace

int64_t quantize_linear_layers(Module& module) {
  int64_t n = 0;
  for_each_linear(module, "", [&](const std::string&, Linear& l) {
    l.quantized = std::make_shared<QuantizedLinear>(l);
    ++n;
  });
  return n;
}

void dequantize_linear_layers(Module& module) {
  for_each_linear(module, "", [](const std::string&, Linear& l) { l.quantized.reset(); });
}

StateDict quantized_state_dict(const Module& module) {
  StateDict state = module.state_dict();
  for_each_linear(module, "", [&](const std::string& path, const Linear& l) {
    auto* q = dynamic_cast<QuantizedLinear*>(l.quantized.get());
    QKV_CHECK(q, "quantized_state_dict", "Linear '", path,
              "' is not quantized; call quantize_linear_layers first");
    state.erase(prefixed(path, "weight"));
    state[prefixed(path, "weight_int8")] = q->weight_int8();
    state[prefixed(path, "weight_scale")] = q->weight_scale();
  });
  return state;
}

void load_quantized_state_dict(Module& module, const StateDict& state) {
  const char* op = "load_quantized_state_dict";
  StateDict rest = state;
  for_each_linear(module, "", [&](const std::string& path, Linear& l) {
    const std::string w = prefixed(path, "weight_int8"), s = prefixed(path, "weight_scale");
    QKV_CHECK(rest.count(w) && rest.count(s), op, "missing '", w, "' or '", s,
              "': not a quantized checkpoint of this model");
    Tensor bias = l.bias.defined() && rest.count(prefixed(path, "bias"))
                      ? rest.at(prefixed(path, "bias"))
                      : Tensor();
    auto q = std::make_shared<QuantizedLinear>(rest.at(w), rest.at(s), bias);
    QKV_CHECK(q->in_features == l.in_features && q->out_features == l.out_features, op, "'", w,
              "' is [", q->out_features, ", ", q->in_features, "], the model's Linear is [",
              l.out_features, ", ", l.in_features, "]");
    rest.erase(w);
    rest.erase(s);
    rest[prefixed(path, "weight")] = q->dequantized();
    l.quantized = q;
  });
  module.load_state_dict(rest);
}

}  // namespace qkv::nn
