#include "nn/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/error.h"
#include "engine/ops.h"
#include "nn/unique_keys_json.h"

namespace qkv::nn {

namespace {

using nlohmann::json;

const char* dtype_tag(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::i64:
      return "I64";
    case DType::bf16:
      return "BF16";
    case DType::b8:
      return "BOOL";
    case DType::i8:
      return "I8";
  }
  return "?";
}

bool parse_dtype_tag(const std::string& tag, DType& out) {
  for (DType t : {DType::f32, DType::f64, DType::i64, DType::bf16, DType::b8, DType::i8})
    if (tag == dtype_tag(t)) return out = t, true;
  return false;
}

// A JSON value for an error message. Arrays and objects are named, not printed: dump() recurses
// once per nesting level, and a header of [[[[...]]]] 100,000 deep would overflow the stack.
std::string brief(const json& v) { return v.is_structured() ? v.type_name() : v.dump(); }

// The format is little-endian; so is every machine qkv runs on (x86-64, and the GPUs' hosts).
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little endian");

}  // namespace

std::string safetensors_bytes(const TensorMap& tensors,
                              const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    QKV_CHECK(name != "__metadata__", "save_safetensors", "'__metadata__' is not a tensor name");
    Tensor c = t.detach().cpu().contiguous();
    uint64_t bytes = uint64_t(c.numel()) * dtype_size(c.dtype());
    header[name] = {{"dtype", dtype_tag(c.dtype())},
                    {"shape", c.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(c);
  }
  std::string text = header.dump();
  // Pad the header with spaces so the data starts 8-byte aligned (allowed by the format).
  while ((8 + text.size()) % 8 != 0) text += ' ';

  std::string out;
  out.reserve(8 + text.size() + offset);
  uint64_t n = text.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += text;
  for (const Tensor& c : host)
    out.append(static_cast<const char*>(c.raw_data()), uint64_t(c.numel()) * dtype_size(c.dtype()));
  return out;
}

void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string bytes = safetensors_bytes(tensors, metadata);
  const std::string tmp = path + ".tmp";
  bool written = false;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    QKV_CHECK(out.good(), "save_safetensors", "cannot open '", tmp,
              "' for writing: ", std::strerror(errno));
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.flush();
    written = out.good();
  }
  if (!written) {
    std::remove(tmp.c_str());  // a half-written temporary would only confuse whoever looks
    throw Error("save_safetensors: writing '" + path + "' failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw Error("save_safetensors: cannot rename '" + tmp + "' to '" + path +
                "': " + std::strerror(err));
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  // The whole file is read at once: checkpoints here are megabytes, and parsing from memory is what
  // the fuzz target exercises, so the two paths cannot drift apart.
  // A folder opens as a stream on Linux and fails only when read, with a message naming no file.
  QKV_CHECK(!std::filesystem::is_directory(path), "load_safetensors(" + path + ")",
            "is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in.good(), "load_safetensors(" + path + ")", "cannot open the file");
  std::string bytes(std::istreambuf_iterator<char>(in), {});
  QKV_CHECK(!in.bad(), "load_safetensors(" + path + ")", "read error");
  return parse_safetensors(bytes, path);
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& what) {
  const std::string op = "load_safetensors(" + what + ")";
  const uint64_t file_size = bytes.size();
  QKV_CHECK(file_size >= 8, op, "file of ", file_size, " bytes is too short for a header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  QKV_CHECK(header_len <= file_size - 8, op, "header length ", header_len,
            " exceeds the file's remaining ", file_size - 8,
            " bytes: the file is truncated or corrupt");
  const std::string_view text = bytes.substr(8, header_len);
  const std::string_view data = bytes.substr(8 + header_len);

  json header;
  try {
    header = parse_json_unique_keys(text, op);
  } catch (const json::exception& e) {
    throw Error(op + ": header is not valid JSON: " + e.what());
  }
  QKV_CHECK(header.is_object(), op, "header is not a JSON object");

  SafetensorsFile result;
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      QKV_CHECK(entry.is_object(), op, "__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        QKV_CHECK(m.value().is_string(), op, "__metadata__ value of '", m.key(),
                  "' is not a string");
        result.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    QKV_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                  entry.contains("data_offsets"),
              op, "tensor '", name, "' lacks dtype, shape or data_offsets");
    DType dtype;
    QKV_CHECK(
        entry["dtype"].is_string() && parse_dtype_tag(entry["dtype"].get<std::string>(), dtype), op,
        "tensor '", name, "' has unknown dtype ", brief(entry["dtype"]));
    const json& js = entry["shape"];
    const json& jo = entry["data_offsets"];
    QKV_CHECK(js.is_array(), op, "tensor '", name, "' shape is not an array");
    Shape shape;
    for (const json& d : js) {
      QKV_CHECK(d.is_number_unsigned() && d.get<uint64_t>() < (uint64_t(1) << 40), op, "tensor '",
                name, "' has a bad dimension ", brief(d));
      shape.push_back(int64_t(d.get<uint64_t>()));
    }
    // The element count is bounded before it is multiplied out: [2^39, 2^39, 1] wraps a uint64 to
    // 0 and would pass as an empty tensor whose shape overflows every later stride computation.
    uint64_t count = 1;
    const uint64_t max_count = uint64_t(1) << 48;
    for (int64_t d : shape) {
      QKV_CHECK(d == 0 || count <= max_count / uint64_t(d), op, "tensor '", name, "' shape ",
                shape_str(shape), " is implausibly large");
      count *= uint64_t(d);
    }
    QKV_CHECK(
        jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned(),
        op, "tensor '", name, "' data_offsets is not [begin, end]");
    uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    QKV_CHECK(begin <= end && end <= data.size(), op, "tensor '", name, "' data_offsets [", begin,
              ", ", end, "] out of range (data section is ", data.size(),
              " bytes): the file is truncated or corrupt");
    QKV_CHECK(end - begin == count * dtype_size(dtype), op, "tensor '", name, "' shape ",
              shape_str(shape), " x ", dtype_tag(dtype), " needs ", count * dtype_size(dtype),
              " bytes but data_offsets span ", end - begin);
    spans.push_back({begin, end, name});
    Tensor t = Tensor::empty(shape, dtype);
    if (end > begin) std::memcpy(t.raw_data(), data.data() + begin, end - begin);
    result.tensors[name] = t;
  }
  // Empty tensors take no bytes and may sit anywhere; each other span must start at or after the
  // end of the last non-empty one (comparing only neighbours let an empty span in between hide an
  // overlap).
  std::sort(spans.begin(), spans.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  const Span* previous = nullptr;
  for (const Span& span : spans) {
    if (span.begin == span.end) continue;
    QKV_CHECK(!previous || span.begin >= previous->end, op, "tensors '", previous->name, "' and '",
              span.name, "' overlap");
    previous = &span;
  }
  return result;
}

}  // namespace qkv::nn
