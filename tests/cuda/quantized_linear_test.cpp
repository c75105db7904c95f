// QuantizedLinear on a device tensor: its int8 products run in host memory, where the weights
// are, and the output comes back to the input's device, equal to the CPU's output bit for bit.
#include <boost/test/unit_test.hpp>

#include "nn/linear.h"
#include "nn/quantized.h"
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

BOOST_AUTO_TEST_SUITE(quantized_linear)

BOOST_AUTO_TEST_CASE(device_input_gives_the_cpu_output_on_the_device,
                     *utf::precondition(gpu_present)) {
  manual_seed(31);
  nn::Linear fp(10, 6);
  nn::QuantizedLinear q(fp);
  const Tensor x = randn({3, 10});
  const Tensor want = q.forward(x);
  const Tensor got = q.forward(x.to(Device::cuda()));
  BOOST_TEST((got.device() == Device::cuda()));
  BOOST_TEST((got.shape() == want.shape()));
  const std::vector<double> a = got.to(Device::cpu()).to_vector<double>(),
                            b = want.to_vector<double>();
  BOOST_TEST(a == b, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
