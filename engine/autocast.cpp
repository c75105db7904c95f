#include "engine/autocast.h"

#include <string>

#include "engine/error.h"

namespace qkv {

namespace {
thread_local DType current_dtype = DType::f32;
}  // namespace

DType autocast_dtype() { return current_dtype; }

Autocast::Autocast(DType dtype) : previous_(current_dtype) {
  QKV_CHECK(dtype == DType::f32 || dtype == DType::bf16, "autocast",
            "compute dtype must be float32 or bfloat16, got ", dtype_name(dtype));
  current_dtype = dtype;
}

Autocast::~Autocast() { current_dtype = previous_; }

}  // namespace qkv
