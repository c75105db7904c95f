// The registry guards that read the sources, so that what no test links or calls is still seen:
// - every op recorded under a literal name is declared (QKV_RECORDED_OP) somewhere;
// - every declared op has a gradcheck case, whatever its layer;
// - every concrete nn::Module type in nn/ and models/ has a gradcheck case named after it
//   ("nn.<Type>[.<variant>]", "models.<Type>[.<variant>]"), or is inference-only and shown to be.
// The sources are found through QKV_SOURCE_DIR, which ctest sets to the repository root.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "engine/op_registry.h"
#include "engine/ops.h"
#include "models/gradcheck_cases.h"
#include "nn/gradcheck_cases.h"
#include "nn/quantized.h"

using namespace qkv;
namespace fs = std::filesystem;

namespace {

struct SourceFile {
  std::string path;  // relative to the repository root
  std::string text;  // with comments removed
};

// The text without // and /* */ comments (comments show example declarations that are not real).
// String and character literals are kept whole, so "//" inside one is not taken for a comment.
std::string without_comments(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i], next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '/' && next == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
      out += '\n';
    } else if (c == '/' && next == '*') {
      size_t end = text.find("*/", i + 2);
      i = end == std::string::npos ? text.size() : end + 1;
      out += ' ';
    } else if (c == '"' || c == '\'') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != c) j += text[j] == '\\' ? 2 : 1;
      out.append(text, i, j - i + 1);
      i = j;
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<SourceFile> read_sources() {
  const char* root = std::getenv("QKV_SOURCE_DIR");
  BOOST_REQUIRE_MESSAGE(root, "QKV_SOURCE_DIR is not set (ctest sets it to the repository root)");
  std::vector<SourceFile> files;
  for (const char* layer : {"engine", "nn", "models", "train", "cuda"}) {
    if (!fs::exists(fs::path(root) / layer)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(root) / layer)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu")) continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      files.push_back({fs::relative(entry.path(), root).string(), without_comments(text.str())});
    }
  }
  BOOST_REQUIRE_GT(files.size(), 50u);
  return files;
}

std::vector<std::string> matches(const std::string& text, const std::regex& pattern) {
  std::vector<std::string> found;
  for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it)
    found.push_back((*it)[1]);
  return found;
}

std::vector<std::string> declared_names(const std::string& text) {
  static const std::regex pattern(R"re(QKV_RECORDED_OP\(\s*"([^"]+)")re");
  return matches(text, pattern);
}

std::vector<std::string> literal_recorded_names(const std::string& text) {
  static const std::regex pattern(R"re(\brecord\(\s*"([^"]+)")re");
  return matches(text, pattern);
}

struct ModuleType {
  std::string name, file;
};

// Concrete classes deriving, directly or through others, from Module. A class whose body declares
// a pure virtual function (`= 0;`) is abstract: its concrete subclasses carry the cases.
std::vector<ModuleType> module_types(const std::vector<SourceFile>& files) {
  static const std::regex declaration(
      R"((?:class|struct)\s+(\w+)\s*(?:final\s*)?:\s*public\s+(?:qkv::)?(?:nn::)?(\w+)\s*\{)");
  std::map<std::string, std::string> parent;
  std::map<std::string, ModuleType> where;
  std::set<std::string> abstract;
  for (const SourceFile& f : files) {
    for (std::sregex_iterator it(f.text.begin(), f.text.end(), declaration), end; it != end; ++it) {
      const std::string name = (*it)[1];
      parent[name] = (*it)[2];
      where[name] = {name, f.path};
      size_t open = size_t(it->position(0) + it->length(0)) - 1, depth = 0, close = open;
      for (; close < f.text.size(); ++close) {
        if (f.text[close] == '{') ++depth;
        if (f.text[close] == '}' && --depth == 0) break;
      }
      static const std::regex pure_virtual(R"(\)\s*(?:const\s*)?=\s*0\s*;)");
      if (std::regex_search(f.text.substr(open, close - open), pure_virtual)) abstract.insert(name);
    }
  }
  std::vector<ModuleType> modules;
  for (const auto& [name, type] : where) {
    std::string up = name;
    for (int hops = 0; hops < 16 && up != "Module" && parent.count(up); ++hops) up = parent[up];
    if (up == "Module" && !abstract.count(name)) modules.push_back(type);
  }
  return modules;
}

// Every case of every layer, as `qkv gradcheck` runs them.
const OpRegistry& all_cases() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    register_engine_gradcheck_cases(*r);
    nn::register_gradcheck_cases(*r);
    models::register_gradcheck_cases(*r);
    return r;
  }();
  return *registry;
}

bool has_case_for_type(const OpRegistry& registry, const std::string& prefix) {
  for (const GradcheckCase& c : registry.cases())
    if (c.op == prefix || c.op.rfind(prefix + ".", 0) == 0) return true;
  return false;
}

// Module types that compute no gradient by design; each is shown to be so below.
const std::set<std::string> inference_only{"QuantizedLinear"};

}  // namespace

BOOST_AUTO_TEST_SUITE(registry_scan)

BOOST_AUTO_TEST_CASE(every_op_recorded_by_name_is_declared) {
  std::set<std::string> declared;
  std::vector<std::pair<std::string, std::string>> recorded;  // name, file
  for (const SourceFile& f : read_sources()) {
    for (const std::string& n : declared_names(f.text)) declared.insert(n);
    for (const std::string& n : literal_recorded_names(f.text)) recorded.push_back({n, f.path});
  }
  BOOST_CHECK_GE(declared.size(), 45u);
  BOOST_CHECK_GE(recorded.size(), 35u);
  for (const auto& [name, file] : recorded)
    BOOST_CHECK_MESSAGE(declared.count(name),
                        file << " records op '" << name << "' that no QKV_RECORDED_OP declares");
}

BOOST_AUTO_TEST_CASE(every_declared_op_in_the_sources_has_a_case) {
  for (const SourceFile& f : read_sources())
    for (const std::string& name : declared_names(f.text))
      BOOST_CHECK_MESSAGE(all_cases().has_case(name), "op '" << name << "' (declared in " << f.path
                                                             << ") has no gradcheck case");
}

BOOST_AUTO_TEST_CASE(every_module_type_has_a_case) {
  std::vector<ModuleType> types = module_types(read_sources());
  BOOST_CHECK_GE(types.size(), 30u);
  for (const ModuleType& t : types) {
    if (inference_only.count(t.name)) continue;
    const std::string layer = t.file.substr(0, t.file.find('/'));
    BOOST_CHECK_MESSAGE(has_case_for_type(all_cases(), layer + "." + t.name),
                        "module type " << t.name << " (" << t.file
                                       << ") has no gradcheck case named " << layer << "." << t.name
                                       << "[.<variant>]");
  }
}

BOOST_AUTO_TEST_CASE(the_scan_sees_a_new_module_type_and_skips_abstract_ones) {
  std::vector<SourceFile> fake{
      {"nn/softplus.h", without_comments("class Softplus : public Module {\n public:\n"
                                         "  Tensor forward(const Tensor& x) override;\n};\n"
                                         "// class Commented : public Module {};\n")},
      {"nn/base.h",
       "class Base : public Module {\n  virtual Tensor f(const Tensor& x) const = 0;\n};"
       "\nclass Leaf final : public nn::Base { int x = 0; };"},
  };
  std::vector<ModuleType> types = module_types(fake);
  std::set<std::string> names;
  for (const ModuleType& t : types) names.insert(t.name);
  BOOST_CHECK(names == (std::set<std::string>{"Leaf", "Softplus"}));
  BOOST_CHECK(!has_case_for_type(all_cases(), "nn.Softplus"));
  BOOST_CHECK(has_case_for_type(all_cases(), "nn.MultiheadAttention"));
}

BOOST_AUTO_TEST_CASE(inference_only_modules_compute_no_gradient) {
  nn::Linear linear(4, 3);
  nn::QuantizedLinear quantized(linear);
  Tensor x = ones({2, 4}, {.requires_grad = true});
  Tensor y = quantized.forward(x);
  BOOST_CHECK_MESSAGE(!y.requires_grad(),
                      "QuantizedLinear now passes a gradient: give it a gradcheck case");
}

BOOST_AUTO_TEST_SUITE_END()
