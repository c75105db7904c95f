#include "nn/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/error.h"
#include "engine/ops.h"

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
  const std::string op = "load_safetensors(" + path + ")";
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  QKV_CHECK(in.good(), op, "cannot open the file");
  const uint64_t file_size = uint64_t(in.tellg());
  in.seekg(0);
  QKV_CHECK(file_size >= 8, op, "file of ", file_size, " bytes is too short for a header length");
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  QKV_CHECK(header_len <= file_size - 8, op, "header length ", header_len,
            " exceeds the file's remaining ", file_size - 8,
            " bytes: the file is truncated or corrupt");
  std::string text(header_len, '\0');
  in.read(text.data(), std::streamsize(header_len));
  const uint64_t data_size = file_size - 8 - header_len;

  json header;
  try {
    header = json::parse(text);
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
        "tensor '", name, "' has unknown dtype ", entry["dtype"].dump());
    const json& js = entry["shape"];
    const json& jo = entry["data_offsets"];
    QKV_CHECK(js.is_array(), op, "tensor '", name, "' shape is not an array");
    Shape shape;
    uint64_t count = 1;
    for (const json& d : js) {
      QKV_CHECK(d.is_number_unsigned() && d.get<uint64_t>() < (uint64_t(1) << 40), op, "tensor '",
                name, "' has a bad dimension ", d.dump());
      shape.push_back(int64_t(d.get<uint64_t>()));
      count *= d.get<uint64_t>();
      QKV_CHECK(count < (uint64_t(1) << 48), op, "tensor '", name, "' is implausibly large");
    }
    QKV_CHECK(
        jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned(),
        op, "tensor '", name, "' data_offsets is not [begin, end]");
    uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    QKV_CHECK(begin <= end && end <= data_size, op, "tensor '", name, "' data_offsets [", begin,
              ", ", end, "] out of range (data section is ", data_size,
              " bytes): the file is truncated or corrupt");
    QKV_CHECK(end - begin == count * dtype_size(dtype), op, "tensor '", name, "' shape ",
              shape_str(shape), " x ", dtype_tag(dtype), " needs ", count * dtype_size(dtype),
              " bytes but data_offsets span ", end - begin);
    spans.push_back({begin, end, name});
    Tensor t = Tensor::empty(shape, dtype);
    if (end > begin) {
      in.seekg(std::streamoff(8 + header_len + begin));
      in.read(static_cast<char*>(t.raw_data()), std::streamsize(end - begin));
      QKV_CHECK(in.good(), op, "reading tensor '", name, "' failed");
    }
    result.tensors[name] = t;
  }
  std::sort(spans.begin(), spans.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i)
    QKV_CHECK(spans[i].begin >= spans[i - 1].end || spans[i].begin == spans[i].end, op, "tensors '",
              spans[i - 1].name, "' and '", spans[i].name, "' overlap");
  return result;
}

}  // namespace qkv::nn
