#include <ka/core/device.hpp>
#include <ka/core/dtype.hpp>
#include <ka/core/error.hpp>

#include <charconv>

namespace ka {

std::string_view to_string(DeviceType type) {
  switch (type) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return "cuda";
    case DeviceType::kPrivateUse1:
      return "privateuse1";
  }
  return "unknown";
}

std::string Device::str() const {
  std::string out(to_string(type));
  if (type != DeviceType::kCPU || index != 0) {
    out += ':' + std::to_string(index);
  }
  return out;
}

Device Device::parse(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  Device device;
  if (name == "cpu") {
    device.type = DeviceType::kCPU;
  } else if (name == "cuda") {
    device.type = DeviceType::kCUDA;
  } else if (name == "privateuse1") {
    device.type = DeviceType::kPrivateUse1;
  } else {
    KA_THROW(ValueError, "unknown device '", text, "' (expected cpu, cuda[:N] or privateuse1[:N])");
  }
  if (colon != std::string_view::npos) {
    const std::string_view digits = text.substr(colon + 1);
    int index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    KA_CHECK(ec == std::errc() && end == digits.data() + digits.size() && index >= 0 &&
                 index < 1024,
             "bad device index in '", text, "'");
    device.index = static_cast<std::int16_t>(index);
  }
  return device;
}

std::string_view short_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "f32";
    case DType::kFloat64:
      return "f64";
    case DType::kFloat16:
      return "f16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kInt32:
      return "i32";
    case DType::kInt64:
      return "i64";
    case DType::kBool:
      return "b8";
  }
  return "unknown";
}

std::string_view long_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
  }
  return "unknown";
}

DType parse_dtype(std::string_view text) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                  DType::kInt32, DType::kInt64, DType::kBool}) {
    if (text == short_name(d) || text == long_name(d)) {
      return d;
    }
  }
  if (text == "float") return DType::kFloat32;
  if (text == "half") return DType::kFloat16;
  if (text == "double") return DType::kFloat64;
  KA_THROW(ValueError, "unknown dtype '", text,
           "' (expected one of float32, float64, float16, bfloat16, int32, int64, bool)");
}

std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kBool:
      return 1;
  }
  return 0;
}

}  // namespace ka
