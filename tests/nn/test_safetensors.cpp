// safetensors: round trips, the bytes read back by an independent reader written here, and every
// kind of damaged file answered by a clear error.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/ops.h"
#include "nn/linear.h"
#include "nn/safetensors.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::check_error;

namespace {

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "qkv_test_nn";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A valid file from a header and data, built by hand.
std::string make_file(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors)

BOOST_AUTO_TEST_CASE(round_trip_all_dtypes_equal_bytes) {
  manual_seed(1);
  TensorMap m{{"a.f32", randn({3, 4})},
              {"b.f64", randn({2}, {DType::f64})},
              {"c.i64", tensor_i64({-5, 7, 1LL << 40}, {3})},
              {"d.bf16", randn({2, 2}).to(DType::bf16)},
              {"e.scalar", full({}, 2.5)},
              {"f.bool", tensor({1, 0, 1}).to(DType::b8)}};
  std::string path = temp_path("round.safetensors");
  save_safetensors(path, m, {{"step", "12"}});
  BOOST_CHECK(!std::filesystem::exists(path + ".tmp"));
  SafetensorsFile f = load_safetensors(path);
  BOOST_CHECK_EQUAL(f.metadata.at("step"), "12");
  BOOST_REQUIRE_EQUAL(f.tensors.size(), m.size());
  for (auto& [name, t] : m) {
    const Tensor& g = f.tensors.at(name);
    BOOST_CHECK(g.dtype() == t.dtype());
    BOOST_CHECK(g.shape() == t.shape());
    size_t bytes = size_t(t.numel()) * dtype_size(t.dtype());
    BOOST_CHECK_MESSAGE(std::memcmp(g.raw_data(), t.contiguous().raw_data(), bytes) == 0, name);
  }
}

BOOST_AUTO_TEST_CASE(independent_reader_sees_the_layout) {
  Tensor w = tensor({1.5, -2.0, 3.25}, {3});
  Tensor ids = tensor_i64({4, 5}, {2});
  std::string path = temp_path("layout.safetensors");
  save_safetensors(path, {{"w", w}, {"ids", ids}});
  std::string bytes = read_all(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  BOOST_CHECK_EQUAL(header["w"]["dtype"], "F32");
  BOOST_CHECK(header["w"]["shape"] == nlohmann::json({3}));
  BOOST_CHECK_EQUAL(header["ids"]["dtype"], "I64");
  auto off = header["w"]["data_offsets"];
  BOOST_REQUIRE_EQUAL(off[1].get<uint64_t>() - off[0].get<uint64_t>(), 12u);
  float v[3];
  std::memcpy(v, bytes.data() + 8 + n + off[0].get<uint64_t>(), 12);
  BOOST_CHECK_EQUAL(v[0], 1.5f);
  BOOST_CHECK_EQUAL(v[1], -2.0f);
  BOOST_CHECK_EQUAL(v[2], 3.25f);
  auto io = header["ids"]["data_offsets"];
  int64_t i[2];
  std::memcpy(i, bytes.data() + 8 + n + io[0].get<uint64_t>(), 16);
  BOOST_CHECK_EQUAL(i[1], 5);
  BOOST_CHECK_EQUAL(bytes.size(), 8 + n + 12 + 16);
}

BOOST_AUTO_TEST_CASE(a_module_checkpoint_restores_it) {
  Linear a(3, 2), b(3, 2);
  std::string path = temp_path("linear.safetensors");
  save_safetensors(path, a.state_dict());
  b.load_state_dict(load_safetensors(path).tensors);
  qkv::testing::check_values(b.weight, a.weight.to_vector<double>(), 0);
}

BOOST_AUTO_TEST_CASE(damaged_files_give_clear_errors) {
  std::string path = temp_path("bad.safetensors");
  auto expect = [&](const std::string& bytes, std::vector<std::string> fragments) {
    write_all(path, bytes);
    fragments.push_back("bad.safetensors");
    check_error([&] { load_safetensors(path); }, fragments);
  };
  std::string eight(8, '\0');
  expect("abc", {"too short"});
  {
    uint64_t huge = 1000;
    expect(std::string(reinterpret_cast<char*>(&huge), 8) + "{}", {"header length 1000"});
  }
  expect(make_file("{not json", ""), {"not valid JSON"});
  expect(
      make_file(R"({"x":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", std::string(4, 'a')),
      {"unknown dtype", "F17"});
  expect(
      make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", std::string(8, 'a')),
      {"'x'", "out of range"});
  expect(
      make_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'a')),
      {"'x'", "needs 12 bytes", "span 8"});
  expect(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   std::string(12, 'a')),
         {"overlap"});
  expect(make_file(R"({"x":{"dtype":"F32","shape":[1]}})", ""), {"lacks"});
  expect(make_file(R"({"__metadata__":{"k":3}})", ""), {"__metadata__", "not a string"});
  check_error([&] { load_safetensors(temp_path("does_not_exist")); }, {"cannot open"});
}

// A tensor named twice in the header is refused rather than one copy silently winning, and a path
// that is a folder gets an error naming the file, not one from deep in the stream library.
BOOST_AUTO_TEST_CASE(a_repeated_tensor_name_or_a_folder_is_refused) {
  const std::string path = temp_path("twice.safetensors");
  write_all(path, make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            std::string(8, 'a')));
  check_error([&] { load_safetensors(path); }, {"twice.safetensors", "key 'x' appears twice"});
  // The same in __metadata__.
  write_all(path, make_file(R"({"__metadata__":{"k":"a","k":"b"}})", ""));
  check_error([&] { load_safetensors(path); }, {"key 'k' appears twice"});
  const std::string folder = temp_path("a_folder.safetensors");
  std::filesystem::create_directories(folder);
  check_error([&] { load_safetensors(folder); }, {"a_folder.safetensors", "is a folder"});
}

// A NaN or Inf weight is refused by load_state_dict, naming the tensor.
BOOST_AUTO_TEST_CASE(a_checkpoint_holding_nan_or_inf_is_refused_naming_the_tensor) {
  Linear a(3, 2), b(3, 2);
  const std::vector<double> before = b.weight.to_vector<double>();
  for (double bad : {double(NAN), double(INFINITY), -double(INFINITY)}) {
    StateDict state = a.state_dict();
    std::vector<double> bias = state["bias"].to_vector<double>();
    bias[1] = bad;
    state["bias"] = tensor(bias, {2});
    check_error([&] { b.load_state_dict(state); },
                {"load_state_dict", "tensor 'bias'", std::isnan(bad) ? "NaN" : "Inf", "element 1"});
    // Refused before anything is copied: b keeps its own weights.
    qkv::testing::check_values(b.weight, before, 0);
  }
}

// The element count of [2^39, 2^39, 1] wraps a uint64 to 0, which must not pass as an empty
// tensor (a regression input in tests/fuzz/corpus/safetensors/ replays it).
BOOST_AUTO_TEST_CASE(a_shape_whose_size_overflows_is_rejected) {
  std::string bytes = make_file(
      R"({"x":{"dtype":"F32","shape":[549755813888,549755813888,1],"data_offsets":[0,0]}})", "");
  check_error([&] { parse_safetensors(bytes, "wrap.safetensors"); },
              {"wrap.safetensors", "tensor 'x'", "implausibly large"});
}

// An empty tensor sorted between two overlapping ones does not hide their overlap.
BOOST_AUTO_TEST_CASE(an_empty_tensor_does_not_hide_an_overlap) {
  std::string bytes = make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                R"("b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                R"("c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                std::string(16, 'a'));
  check_error([&] { parse_safetensors(bytes, "hidden.safetensors"); },
              {"hidden.safetensors", "'a' and 'c' overlap"});
}

BOOST_AUTO_TEST_CASE(parse_from_memory_matches_the_file_loader) {
  std::string path = temp_path("memory.safetensors");
  save_safetensors(path, {{"w", tensor({1, 2, 3}, {3})}}, {{"k", "v"}});
  SafetensorsFile f = parse_safetensors(read_all(path), "memory");
  BOOST_TEST(f.metadata.at("k") == "v");
  BOOST_TEST((f.tensors.at("w").to_vector<float>() == std::vector<float>{1, 2, 3}));
  check_error([&] { parse_safetensors("\x05\x00", "tiny.bin"); }, {"load_safetensors(tiny.bin)"});
}

// As in the config loader, the error message names a nested value's type instead of dump()ing it,
// which recurses once per level and would overflow the stack.
BOOST_AUTO_TEST_CASE(deeply_nested_dtype_gives_an_error_not_a_stack_overflow) {
  const size_t depth = 1'000'000;
  std::string bytes = make_file(R"({"x":{"shape":[],"data_offsets":[0,0],"dtype":)" +
                                    std::string(depth, '[') + std::string(depth, ']') + "}}",
                                "");
  check_error([&] { parse_safetensors(bytes, "deep.safetensors"); },
              {"deep.safetensors", "unknown dtype array"});
}

BOOST_AUTO_TEST_SUITE_END()
