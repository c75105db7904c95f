// index_select / index_add / gather / scatter_add on the GPU against the CPU, with repeated
// indices so the atomic adds collide.
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

BOOST_AUTO_TEST_SUITE(index_kernels)

BOOST_AUTO_TEST_CASE(index_select_and_index_add_along_each_dim, *utf::precondition(gpu_present)) {
  const Shape shape{4, 6, 5};
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t size = shape[dim];
    Tensor index = random_tensor({9}, DType::i64, 0, double(size), 101 + dim);  // repeats
    Shape picked = shape;
    picked[dim] = 9;
    for (DType t : {DType::f32, DType::f64, DType::i64}) {
      Tensor x = random_tensor(shape, t, -5, 5, 102);
      Tensor want = Tensor::empty(picked, t), got = Tensor::empty(picked, t, Device::cuda());
      host().index_select(x, dim, index, want);
      gpu().index_select(on_gpu(x), dim, on_gpu(index), got);
      check_equal(got, want, "index_select dim " + std::to_string(dim) + " " + dtype_name(t));
    }
    for (DType t : {DType::f32, DType::f64}) {
      Tensor base = random_tensor(shape, t, -1, 1, 103), src = random_tensor(picked, t, -1, 1, 104);
      Tensor want = base.clone(), got = on_gpu(base);
      host().index_add(want, dim, index, src);
      gpu().index_add(got, dim, on_gpu(index), on_gpu(src));
      check_close(got, want, 4 * tolerance(t), "index_add dim " + std::to_string(dim));
    }
  }
}

BOOST_AUTO_TEST_CASE(gather_and_scatter_add_along_each_dim, *utf::precondition(gpu_present)) {
  const Shape shape{4, 6, 5};
  for (int dim = 0; dim < 3; ++dim) {
    Shape ishape{3, 4, 2};  // smaller than x in every dim, as torch.gather allows
    Tensor index = random_tensor(ishape, DType::i64, 0, double(shape[dim]), 111 + dim);
    for (DType t : {DType::f32, DType::f64, DType::i64}) {
      Tensor x = random_tensor(shape, t, -5, 5, 112);
      Tensor want = Tensor::empty(ishape, t), got = Tensor::empty(ishape, t, Device::cuda());
      host().gather(x, dim, index, want);
      gpu().gather(on_gpu(x), dim, on_gpu(index), got);
      check_equal(got, want, "gather dim " + std::to_string(dim) + " " + dtype_name(t));
    }
    for (DType t : {DType::f32, DType::f64}) {
      Tensor base = random_tensor(shape, t, -1, 1, 113), src = random_tensor(ishape, t, -1, 1, 114);
      Tensor want = base.clone(), got = on_gpu(base);
      host().scatter_add(want, dim, index, src);
      gpu().scatter_add(got, dim, on_gpu(index), on_gpu(src));
      check_close(got, want, 4 * tolerance(t), "scatter_add dim " + std::to_string(dim));
    }
  }
}

BOOST_AUTO_TEST_CASE(embedding_sized_index_add, *utf::precondition(gpu_present)) {
  // the embedding backward: 4096 token gradients into a 100-row table, many collisions
  Tensor index = random_tensor({4096}, DType::i64, 0, 100, 121);
  Tensor src = random_tensor({4096, 64}, DType::f32, -1, 1, 122);
  Tensor want = Tensor::empty({100, 64}),
         got = Tensor::empty({100, 64}, DType::f32, Device::cuda());
  host().fill(want, 0);
  gpu().fill(got, 0);
  host().index_add(want, 0, index, src);
  gpu().index_add(got, 0, on_gpu(index), on_gpu(src));
  check_close(got, want, 1e-4, "embedding backward");  // ~40 adds per element, any order
}

BOOST_AUTO_TEST_SUITE_END()
