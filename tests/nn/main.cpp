#define BOOST_TEST_MODULE nn
#include <boost/test/unit_test.hpp>
