// Bad user input must raise luminal::Error naming the problem, never crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "luminal/luminal.hpp"
#include "luminal/safetensors.hpp"

using namespace luminal;

namespace {
std::string temp_file(const std::string& name, const std::string& bytes) {
  std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string with_header(const std::string& json, const std::string& data) {
  uint64_t n = json.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + json + data;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST(Errors, MalformedSafetensors) {
  EXPECT_NE(error_of([] { SafetensorsFile::open("/nonexistent/x.safetensors"); }).find("cannot open"),
            std::string::npos);
  EXPECT_NE(error_of([] { SafetensorsFile::open(temp_file("short.st", "abc")); }).find("too short"),
            std::string::npos);
  std::string huge(8, '\xff');
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("len.st", huge + "{}")); }).find("header"),
            std::string::npos);
  EXPECT_NE(error_of([] { SafetensorsFile::open(temp_file("json.st", with_header("{not json", ""))); })
                .find("malformed JSON"),
            std::string::npos);
  auto bad_offsets = with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,64]}})", std::string(8, '\0'));
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("off.st", bad_offsets)); }).find("outside"),
            std::string::npos);
  auto bad_size = with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("size.st", bad_size)); }).find("need"),
            std::string::npos);
  auto bad_dtype = with_header(R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("dt.st", bad_dtype)); }).find("dtype"),
            std::string::npos);
  auto missing = with_header(R"({"w":{"dtype":"F32","shape":[1]}})", std::string(4, '\0'));
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("miss.st", missing)); }).find("data_offsets"),
            std::string::npos);
}

TEST(Errors, SafetensorsShapeMismatchAndMissingTensor) {
  std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "-w.safetensors";
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  write_safetensors(path, {{"w", HostTensor::from<float>(v, DType::F32, {2, 3})}});
  Graph cx;
  auto w = cx.named_tensor("w", {3, 2}).persist();
  auto out = (w * 2.0).output();
  auto rt = cx.compile(ReferenceRuntime{}, CompileOptions{});
  EXPECT_NE(error_of([&] { rt.load_safetensors(cx, path); }).find("has shape [2, 3] but the graph expects [3, 2]"),
            std::string::npos);
  Graph cx2;
  cx2.named_tensor("other", {2}).persist();
  auto rt2 = cx2.compile(ReferenceRuntime{}, CompileOptions{});
  EXPECT_NE(error_of([&] { rt2.load_safetensors(cx2, path, /*allow_missing=*/false); }).find("'other' not found"),
            std::string::npos);
  // Loading converts dtypes: a BF16 input takes the F32 file.
  Graph cx3;
  auto w3 = cx3.named_tensor("w", {2, 3}, DType::BF16).persist();
  auto o3 = w3.cast(DType::F32).output();
  auto rt3 = cx3.compile(ReferenceRuntime{}, CompileOptions{});
  EXPECT_EQ(rt3.load_safetensors(cx3, path), std::vector<std::string>{"w"});
  rt3.execute(cx3.dim_map());
  EXPECT_EQ(rt3.get_f32(o3), v);
}

TEST(Errors, ShapesAndAxes) {
  Graph cx;
  auto a = cx.tensor({2, 3});
  auto b = cx.tensor({4, 3});
  EXPECT_NE(error_of([&] { a + b; }).find("cannot broadcast shapes [2, 3] and [4, 3]"), std::string::npos);
  EXPECT_NE(error_of([&] { a.permute({0, 0}); }).find("appears twice"), std::string::npos);
  EXPECT_NE(error_of([&] { a.permute({0}); }).find("rank"), std::string::npos);
  EXPECT_NE(error_of([&] { a.sum({2}); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { a.matmul(b); }).find("inner dimensions"), std::string::npos);
  EXPECT_NE(error_of([&] { a.reshape({4, 2}); }).find("cannot reshape"), std::string::npos);
  EXPECT_NE(error_of([&] { a.expand({4, 3}); }).find("cannot expand"), std::string::npos);
  // squeeze of a dim that is not 1 is a no-op in torch: no error, same shape.
  EXPECT_EQ(error_of([&] { a.squeeze(0); }), "<no error>");
  EXPECT_EQ(a.squeeze(0).shape(), a.shape());
  EXPECT_NE(error_of([&] { (a + 1.0).persist(); }).find("only input tensors"), std::string::npos);
}

TEST(Errors, RuntimeMisuse) {
  Graph cx;
  auto seq = Expression::var("seq");
  auto x = cx.tensor({seq, 2});
  auto y = (x * 2.0).output();
  auto rt = cx.compile(ReferenceRuntime{}, CompileOptions{});
  EXPECT_NE(error_of([&] { rt.execute({{"seq", 2}}); }).find("has no data"), std::string::npos);
  rt.set_data(x, {1.f, 2.f, 3.f});
  EXPECT_NE(error_of([&] { rt.execute({}); }).find("dimension 'seq' has no value"), std::string::npos);
  EXPECT_NE(error_of([&] { rt.execute({{"seq", 2}}); }).find("has 3 elements"), std::string::npos);
  EXPECT_NE(error_of([&] { rt.get_f32(y); }).find("execute has not run"), std::string::npos);
  EXPECT_NE(error_of([&] { cx.set_dim("z", 3); }).find("reserved"), std::string::npos);
  Graph other;
  auto z = other.tensor({2});
  EXPECT_NE(error_of([&] { rt.set_data(z, {1.f, 2.f}); }).find("different graph"), std::string::npos);
}

// A header is validated completely at open: sizes that overflow, overlapping tensors,
// unknown dtypes, entries too large for int64.
TEST(Errors, SafetensorsHeaderValidatedAtOpen) {
  auto overflow = with_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "");
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("ovf.st", overflow)); })
                .find("tensor 'w': shape [4294967296,4294967296] has more elements than memory can hold"),
            std::string::npos);
  // 2^62 elements of 4 bytes: the element count fits, the byte count wraps to 0.
  auto bytes_overflow = with_header(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", "");
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("ovf2.st", bytes_overflow)); }).find("more elements"),
            std::string::npos);
  auto huge_dim = with_header(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", "");
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("big.st", huge_dim)); }).find("too large"),
            std::string::npos);
  auto overlap = with_header(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})",
      std::string(12, '\0'));
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(temp_file("overlap.st", overlap)); }).substr(0, 13), "safetensors: ");
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("overlap.st", overlap)); }).find("'a' [0, 8) and 'b' [4, 12) overlap"),
            std::string::npos);
  auto reversed = with_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", std::string(4, '\0'));
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("rev.st", reversed)); }).find("data_offsets [4, 0)"),
            std::string::npos);
  auto bad_dtype = with_header(R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", std::string(1, '\0'));
  EXPECT_NE(error_of([&] { SafetensorsFile::open(temp_file("dt2.st", bad_dtype)); }).find("tensor 'w'"),
            std::string::npos);
  // Empty tensors and tensors laid back to back are fine.
  auto fine = with_header(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]},"b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})",
      std::string(12, '\0'));
  EXPECT_EQ(SafetensorsFile::open(temp_file("fine.st", fine)).entries().size(), 3u);
}
