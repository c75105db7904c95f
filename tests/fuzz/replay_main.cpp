// A stand-in for libFuzzer's main, so the fuzz targets build with any compiler and ctest can run
// every input of a corpus through them in each build (the committed corpus doubles as regression
// tests). Arguments are files or folders (every regular file inside, recursively); arguments that
// start with '-' are libFuzzer flags and are ignored, so one command line serves both builds.
//
// An input that makes the loader misbehave ends this program the way it would end libFuzzer's: an
// exception other than qkv::Error escaping (std::terminate), a failed FUZZ_CHECK (abort), or a
// sanitizer report in a sanitized build.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.starts_with("-")) continue;
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg))
        if (entry.is_regular_file()) inputs.push_back(entry.path());
    } else if (fs::is_regular_file(arg)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: no such file or folder: %s\n", arg.c_str());
      return 1;
    }
  }
  // An empty corpus replays nothing and would pass; that is a broken test, not a passing one.
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs given\n");
    return 1;
  }
  std::sort(inputs.begin(), inputs.end());
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes(std::istreambuf_iterator<char>(in), {});
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::fprintf(stderr, "replay: %zu inputs, no failure\n", inputs.size());
  return 0;
}
