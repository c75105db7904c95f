// INT8 post-training quantization of Linear layers, for inference.
//
// Weights: symmetric per output channel, w_q = round(w / s_o) with s_o = max|w_o| / 127, stored
// int8 (rows padded to 64 bytes for the VNNI kernel). Activations: quantized on the fly per row,
// x_q = round(x / s_r) with s_r = max|x_r| / 127 (dynamic quantization: no calibration data).
// y = s_r s_o sum_k x_q w_q + b, with the sum in int32 (nn/int8_gemm.h). The error is bounded by
// the rounding of both operands, about 1/254 of each row's range relative.
//
// quantize_linear_layers() attaches a QuantizedLinear to every Linear of a module; Linear::forward
// then runs it whenever no graph is being recorded (inference), and the fp32 weights stay for
// training and checkpoints.
#pragma once

#include <vector>

#include "nn/linear.h"

namespace qkv::nn {

class QuantizedLinear : public Layer {
 public:
  explicit QuantizedLinear(const Linear& linear);
  // From stored int8 weights [out, in] and per-output-channel scales [out] (float32), as
  // quantized_state_dict() writes them, and an optional bias [out].
  QuantizedLinear(const Tensor& weight_int8, const Tensor& weight_scale, const Tensor& bias);
  Tensor weight_int8() const;   // [out, in], int8 (the padding dropped)
  Tensor weight_scale() const;  // [out], float32
  Tensor dequantized() const;   // [out, in], float32: weight_int8 * weight_scale per row
  // x [..., in] float32/float64 -> [..., out] in x's dtype and on x's device (the int8
  // products run in host memory, where the weights are). No gradient flows.
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  int64_t in_features, out_features, padded_in;
  std::vector<int8_t> weight;     // [out, padded_in]
  std::vector<float> scales;      // per output channel
  std::vector<int32_t> row_sums;  // sum of each weight row, for the VNNI kernel's shift
  Tensor bias;                    // float32 [out] or undefined
  bool use_vnni = true;           // used when the CPU has it; tests turn it off to compare

 private:
  void set_weights(const std::vector<int8_t>& rows);  // [out, in] -> padded rows and row sums
};

// Quantizes every Linear in `module` (recursively); returns how many.
int64_t quantize_linear_layers(Module& module);
// Detaches the quantized versions again (back to fp32 inference).
void dequantize_linear_layers(Module& module);

// A quantized model as a file holds it. Every quantized Linear at path P contributes
// "P.weight_int8" (int8 [out, in]) and "P.weight_scale" (float32 [out]) instead of its float32
// "P.weight"; everything else (biases, embeddings, norms) is as in state_dict(). About a quarter
// of the float32 checkpoint's size for Linear-heavy models. Requires quantize_linear_layers first.
StateDict quantized_state_dict(const Module& module);
// The reverse, into a module built with the same architecture: attaches a QuantizedLinear to every
// Linear, sets its float32 weight to the dequantized values (so a float32 forward, as in training
// mode, computes the same model), and loads the rest strictly. Errors name the missing keys.
void load_quantized_state_dict(Module& module, const StateDict& state);

}  // namespace qkv::nn
