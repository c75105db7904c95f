#define BOOST_TEST_MODULE train
#include <boost/test/unit_test.hpp>
