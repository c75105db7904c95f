#include "engine/op_declaration.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

namespace qkv {

namespace {

// Filled during static initialization only (before main), read afterwards: no lock needed.
std::unordered_map<std::string_view, OpDeclaration>& declarations() {
  static auto* table = new std::unordered_map<std::string_view, OpDeclaration>();
  return *table;
}

}  // namespace

OpDeclarer::OpDeclarer(const OpDeclaration& d) {
  auto [it, inserted] = declarations().emplace(d.name, d);
  const OpDeclaration& first = it->second;
  if (!inserted && (first.layer != d.layer || first.backward != d.backward)) {
    std::fprintf(stderr, "op '%s' declared differently at %s:%d and %s:%d\n",
                 std::string(d.name).c_str(), std::string(first.file).c_str(), first.line,
                 std::string(d.file).c_str(), d.line);
    std::abort();
  }
}

std::vector<OpDeclaration> declared_ops() {
  std::vector<OpDeclaration> all;
  for (const auto& [name, d] : declarations()) all.push_back(d);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return all;
}

const OpDeclaration* find_declared_op(std::string_view name) {
  auto it = declarations().find(name);
  return it == declarations().end() ? nullptr : &it->second;
}

}  // namespace qkv
