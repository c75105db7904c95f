// Dropout masks that belong to examples, not to the batch they are in.
//
// A fill normally draws element i of a tensor from the generator counter offset + i, so the mask
// an example gets depends on its row in the batch and on the batch's padded sizes: cut a batch
// into micro-batches (--accumulate, mpirun) and every example gets another mask. While an
// ExampleDraws is alive, dropout() on a tensor whose first dim is the batch draws row b from the
// id of example b instead: each dropout call takes one generator counter and derives its own
// Philox key from it, and an element's block is addressed by (its coordinates, its example's id)
// (philox::example_bernoulli in engine/random.h). The same example at the same call of the same
// step then gets the same mask in any batch, at any row, padded to any length.
//
// What it needs of the caller: every batch that is to agree starts its calls at the same
// generator offset (train/trainer/micro_batches.h resets it for each micro-batch), and runs the
// same dropout calls in the same order (the same model).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/random.h"
#include "engine/shape.h"

namespace qkv {

// The trailing dims of a mask of `shape` whose rows are `examples` examples; an Error naming `op`
// when the first dim is not the batch or the dims do not fit the example counters.
inline philox::ExampleLayout example_layout(const Shape& shape, size_t examples, const char* op) {
  QKV_CHECK(!shape.empty() && shape[0] == int64_t(examples), op,
            "drawing by example for a batch of ", examples, " examples, but the tensor of shape ",
            shape_str(shape), " does not have them as its first dim");
  QKV_CHECK(int(shape.size()) - 1 <= philox::kExampleTrailingDims, op,
            "drawing by example needs at most ", philox::kExampleTrailingDims,
            " dims after the batch, got ", shape_str(shape));
  philox::ExampleLayout l{{1, 1, 1, 1}};
  for (size_t j = 1; j < shape.size(); ++j) {
    QKV_CHECK(shape[j] < philox::kExampleDimLimit, op, "drawing by example needs dims below ",
              philox::kExampleDimLimit, " after the batch, got ", shape_str(shape));
    l.d[philox::kExampleTrailingDims - (shape.size() - j)] = uint64_t(shape[j]);
  }
  return l;
}

class ExampleDraws {
 public:
  ExampleDraws(Generator& gen, std::vector<uint64_t> example_ids)
      : gen_(gen), saved_(gen.example_ids()) {
    gen_.set_example_ids(std::move(example_ids));
  }
  ~ExampleDraws() { gen_.set_example_ids(std::move(saved_)); }
  ExampleDraws(const ExampleDraws&) = delete;
  ExampleDraws& operator=(const ExampleDraws&) = delete;

 private:
  Generator& gen_;
  std::vector<uint64_t> saved_;
};

}  // namespace qkv
