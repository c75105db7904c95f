#define BOOST_TEST_MODULE op_guard
#include <boost/test/unit_test.hpp>
