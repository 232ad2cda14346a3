#include "common/file_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

namespace cohort {
namespace {

namespace fs = std::filesystem;

std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* root = std::getenv("COHORT_TEST_TMP");
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::path(root != nullptr ? root : ::testing::TempDir()) /
            (std::string("FileUtilTest.") + info->name() + "." + std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

TEST_F(FileUtilTest, ScopedFdClosesUnlessReleased) {
  int raw = ::open(dir_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  { ScopedFd fd(raw); }
  EXPECT_FALSE(IsOpen(raw));

  raw = ::open(dir_.c_str(), O_RDONLY | O_CLOEXEC);
  {
    ScopedFd fd(raw);
    EXPECT_EQ(fd.release(), raw);
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_TRUE(IsOpen(raw));

  // Moving hands ownership over; reset closes what was held.
  ScopedFd a(raw);
  ScopedFd b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(b.get(), raw);
  b.reset();
  EXPECT_FALSE(IsOpen(raw));
  EXPECT_TRUE(b.Close("nothing").ok());  // holds nothing: nothing to report
}

TEST_F(FileUtilTest, WriteAllWritesEverythingThroughAPipe) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ScopedFd read_end(p[0]);
  ScopedFd write_end(p[1]);
  // Four times a default pipe's capacity: the writer blocks and resumes mid-buffer.
  std::string data(size_t{256} << 10, '\0');
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>(i * 7);
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(read_end.get(), buf, sizeof(buf))) > 0) got.append(buf, n);
  });
  Status s = WriteAll(write_end.get(), Bytes(data), "pipe");
  ASSERT_TRUE(write_end.Close("pipe").ok());
  reader.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, data);

  Status bad = WriteAll(-1, Bytes("x"), "nowhere");
  EXPECT_EQ(bad.message().rfind("write nowhere: ", 0), 0u) << bad.ToString();
}

TEST_F(FileUtilTest, ReadFileToString) {
  ASSERT_TRUE(WriteFileAtomically(Path("f"), {Bytes("hello")}).ok());
  auto text = ReadFileToString(Path("f"));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "hello");
  Status missing = ReadFileToString(Path("missing")).status();
  EXPECT_TRUE(missing.IsNotFound());
  EXPECT_NE(missing.message().find("open " + Path("missing")), std::string::npos);
}

TEST_F(FileUtilTest, LastNonEmptyLine) {
  ASSERT_TRUE(
      WriteFileAtomically(Path("log"), {Bytes("Traceback:\n  x\nValueError: bad y\r\n\n  \n")})
          .ok());
  EXPECT_EQ(LastNonEmptyLine(Path("log")), "ValueError: bad y");
  ASSERT_TRUE(WriteFileAtomically(Path("one"), {Bytes("only")}).ok());
  EXPECT_EQ(LastNonEmptyLine(Path("one")), "only");
  ASSERT_TRUE(WriteFileAtomically(Path("blank"), {Bytes("\n\n")}).ok());
  EXPECT_EQ(LastNonEmptyLine(Path("blank")), "");
  EXPECT_EQ(LastNonEmptyLine(Path("missing")), "");
  std::string long_line(70000, 'a');
  ASSERT_TRUE(WriteFileAtomically(Path("long"), {Bytes(long_line)}).ok());
  EXPECT_EQ(LastNonEmptyLine(Path("long")), std::string(300, 'a') + "...");
}

TEST_F(FileUtilTest, ParentDir) {
  EXPECT_EQ(ParentDir("a/b"), "a");
  EXPECT_EQ(ParentDir("a/b/c.npy"), "a/b");
  EXPECT_EQ(ParentDir("b"), ".");
  EXPECT_EQ(ParentDir("/b"), "/");
  EXPECT_EQ(ParentDir("a/b/"), "a");
  EXPECT_EQ(ParentDir("/"), "/");
}

TEST_F(FileUtilTest, SyncDir) {
  EXPECT_TRUE(SyncDir(dir_).ok());
  Status s = SyncDir(Path("missing"));
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_NE(s.message().find("open directory " + Path("missing")), std::string::npos);
}

TEST_F(FileUtilTest, WriteFileAtomicallyReplacesWholeFiles) {
  std::string path = Path("data");
  ASSERT_TRUE(WriteFileAtomically(path, {Bytes("old")}).ok());
  ASSERT_TRUE(WriteFileAtomically(path, {Bytes("new "), Bytes(""), Bytes("content")}).ok());
  EXPECT_EQ(*ReadFileToString(path), "new content");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::owner_read, fs::perms::owner_read);
}

TEST_F(FileUtilTest, WriteFileAtomicallyFailsWithoutTouchingTheTarget) {
  std::string path = Path("missing-dir/data");
  Status s = WriteFileAtomically(path, {Bytes("x")});
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.message().find(path + ".tmp"), std::string::npos);

  // A directory in the target's place: the rename fails, the old entry stays, the temp goes.
  path = Path("a-dir");
  fs::create_directories(path + "/inside");
  s = WriteFileAtomically(path, {Bytes("x")});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rename " + path + ".tmp to " + path), std::string::npos)
      << s.ToString();
  EXPECT_TRUE(fs::is_directory(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(FileUtilTest, PublishFileMovesAFinishedTempFileIntoPlace) {
  std::string path = Path("ckpt");
  std::string tmp = path + ".tmp.42";
  ASSERT_TRUE(WriteFileAtomically(tmp, {Bytes("archive")}).ok());
  ASSERT_TRUE(PublishFile(tmp, path).ok());
  EXPECT_EQ(*ReadFileToString(path), "archive");
  EXPECT_FALSE(fs::exists(tmp));

  Status s = PublishFile(Path("never-written"), path);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_EQ(*ReadFileToString(path), "archive");
}

TEST_F(FileUtilTest, StaleTempFilesOfDeadWritersOnThisHostAreRemoved) {
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  const std::string path = Path("checkpoint.pt");
  const std::string mine = UniqueTempName(path);
  EXPECT_EQ(mine.rfind(path + ".tmp." + host + "." + std::to_string(::getpid()) + ".", 0), 0u);
  EXPECT_NE(UniqueTempName(path), mine);
  const std::string d = std::to_string(dead);
  const std::vector<std::string> stale = {path + ".tmp." + host + "." + d + ".0",
                                          path + ".tmp." + d + ".3"};
  const std::vector<std::string> kept = {
      mine,                                           // a live writer: this process
      path + ".tmp.other.host.example." + d + ".0",   // another host's writer
      Path("other.pt.tmp.") + host + "." + d + ".0",  // another file's
      path + ".tmp.notapid.0", path + ".tmp"};
  for (const auto& f : stale) ASSERT_TRUE(WriteFileAtomically(f, {Bytes("x")}).ok());
  for (const auto& f : kept) ASSERT_TRUE(WriteFileAtomically(f, {Bytes("x")}).ok());
  EXPECT_EQ(RemoveStaleTempFiles(path), 2);
  for (const auto& f : stale) EXPECT_FALSE(fs::exists(f)) << f;
  for (const auto& f : kept) EXPECT_TRUE(fs::exists(f)) << f;
  EXPECT_EQ(RemoveStaleTempFiles(Path("missing-dir/x")), 0);
}

}  // namespace
}  // namespace cohort
