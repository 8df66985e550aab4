// Integrity against silent corruption, end to end through the actorpipe program (Note [checksums] in
// failure/crc32c.hpp): `train --resume` of a checkpoint with one flipped bit is refused, naming the file and the
// tensor, and never trained from.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

const std::string actorpipe = std::string(AP_BINARY_DIR) + "/cli/actorpipe";

}  // namespace

TEST_CASE("train --resume of a checkpoint with a flipped bit is refused, naming the file and the tensor") {
  test::scratch_dir dir{"cli_integrity_resume"};
  const std::string good = dir.file("run.safetensors"), bad = dir.file("bad.safetensors");
  const std::vector<std::string> run = {actorpipe, "train", "--model", "784-64-10", "--train-limit", "256",
                                        "--batch-size", "64"};
  std::vector<std::string> first = run;
  first.insert(first.end(), {"--max-steps", "2", "--checkpoint", good});
  test::child_process writer(first);
  REQUIRE(writer.wait_exit(120s) == 0);
  std::ifstream in(good, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  REQUIRE(bytes.size() > 2192);
  bytes[2192] = static_cast<char>(bytes[2192] ^ 0x08);  // a weight's bit, as once resumed from silently
  std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

  std::vector<std::string> resume = run;
  resume.insert(resume.end(), {"--max-steps", "4", "--resume", bad});
  test::child_process resumed(resume);
  const std::string line = resumed.read_line(120s);
  CHECK(resumed.wait_exit(120s) == 1);
  const std::string log = resumed.stderr_text();
  INFO(log);
  CHECK(line.empty());  // no result: nothing trained
  CHECK(test::contains(log, "error: checkpoint " + bad + ": tensor "));
  CHECK(test::contains(log, " fails its checksum (CRC32C "));
  CHECK(!test::contains(log, "epoch"));
}
