// engine/dispatch.h, the dtype -> element type dispatch every backend's kernels use: each dtype
// binds the element type of its size and kind, the body's result comes back, and a dtype outside
// a dispatch's list is refused with a message naming the op and the dtype.
#include <boost/test/unit_test.hpp>
#include <string>
#include <type_traits>

#include "engine/dispatch.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_error;

namespace {

const DType kAll[] = {DType::f32, DType::f64, DType::i64, DType::b8, DType::bf16, DType::i8};

// What a kernel body sees of its element type, spelled from the C++ type alone.
template <typename T>
std::string kind_of() {
  if constexpr (std::is_same_v<T, bf16_t>) return "bf16";
  const char* kind = std::is_floating_point_v<T> ? "float" : std::is_signed_v<T> ? "int" : "uint";
  return kind + std::to_string(8 * sizeof(T));
}

std::string float_kind(DType t) {
  return QKV_DISPATCH_FLOAT(t, "float_op", [&] { return kind_of<T>(); });
}
std::string all_kind(DType t) {
  return QKV_DISPATCH_ALL(t, "all_op", [&] { return kind_of<T>(); });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dispatch)

BOOST_AUTO_TEST_CASE(every_dtype_binds_its_own_element_type) {
  const char* expected[] = {"float32", "float64", "int64", "uint8", "bf16", "int8"};
  for (size_t i = 0; i < std::size(kAll); ++i) {
    const DType t = kAll[i];
    dispatch_any_dtype(t, "copy", [&](auto v) {
      using T = decltype(v);
      BOOST_CHECK_EQUAL(kind_of<T>(), expected[i]);
      BOOST_CHECK_EQUAL(sizeof(T), dtype_size(t));
      BOOST_CHECK(dtype_of<T>() == t);
    });
  }
}

BOOST_AUTO_TEST_CASE(the_float_and_all_dispatches_bind_their_types_and_refuse_the_rest) {
  BOOST_CHECK_EQUAL(float_kind(DType::f32), "float32");
  BOOST_CHECK_EQUAL(float_kind(DType::f64), "float64");
  for (DType t : {DType::i64, DType::b8, DType::bf16, DType::i8})
    check_error([&] { float_kind(t); },
                {std::string("float_op: expected float32 or float64, got ") + dtype_name(t)});
  BOOST_CHECK_EQUAL(all_kind(DType::f32), "float32");
  BOOST_CHECK_EQUAL(all_kind(DType::f64), "float64");
  BOOST_CHECK_EQUAL(all_kind(DType::i64), "int64");
  BOOST_CHECK_EQUAL(all_kind(DType::b8), "uint8");
  for (DType t : {DType::bf16, DType::i8})
    check_error([&] { all_kind(t); }, {std::string("all_op: unsupported dtype ") + dtype_name(t)});
}

BOOST_AUTO_TEST_SUITE_END()
