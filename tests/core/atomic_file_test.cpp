#include "luminal/atomic_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace luminal {
namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("luminal_atomic_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// Creates missing folders, replaces what is there, keeps binary bytes (a NUL included),
// and leaves no temporary file behind.
TEST(AtomicFile, WritesReplacesAndLeavesNoTemporaries) {
  const auto dir = fresh_dir("write");
  const auto path = dir / "sub" / "x.bin";
  const std::string first("one\0two", 7), second = "replaced";
  ASSERT_TRUE(write_file_atomically(path, first));
  EXPECT_EQ(read_all(path), first);
  ASSERT_TRUE(write_file_atomically(path, second));
  EXPECT_EQ(read_all(path), second);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "sub")) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  std::filesystem::remove_all(dir);
}

// Writers racing on one name: every reader sees one writer's whole contents.
TEST(AtomicFile, ConcurrentWritersNeverLeaveHalfAFile) {
  const auto dir = fresh_dir("race");
  const auto path = dir / "x.bin";
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&, t] {
      const std::string bytes(100000, static_cast<char>('a' + t));
      for (int i = 0; i < 20; ++i) EXPECT_TRUE(write_file_atomically(path, bytes));
    });
  for (int i = 0; i < 50; ++i) {
    const std::string seen = read_all(path);
    if (seen.empty()) continue;  // not written yet
    ASSERT_EQ(seen.size(), 100000u);
    EXPECT_EQ(seen.find_first_not_of(seen[0]), std::string::npos);
  }
  for (auto& w : writers) w.join();
  std::filesystem::remove_all(dir);
}

// A folder that cannot be made: false, not an exception.
TEST(AtomicFile, AnUnwritablePlaceIsReportedNotThrown) {
  const auto dir = fresh_dir("blocked");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "file") << "x";  // a file where a folder should be
  EXPECT_FALSE(write_file_atomically(dir / "file" / "y.bin", "bytes"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace luminal
