// Integrity against silent corruption, end to end through the actorpipe program (Note [checksums] in
// failure/crc32c.hpp): `train --resume` of a checkpoint with one flipped bit is refused, naming the file and the
// tensor, and never trained from.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli_runs.hpp"
#include "test_support.hpp"

using namespace ap;

TEST_CASE("train --resume of a checkpoint with a flipped bit is refused, naming the file and the tensor") {
  test::scratch_dir dir{"cli_integrity_resume"};
  const std::string good = dir.file("run.safetensors"), bad = dir.file("bad.safetensors");
  const std::vector<std::string> run = {"train", "--model", "784-64-10", "--train-limit", "256", "--batch-size", "64"};
  std::vector<std::string> first = run;
  first.insert(first.end(), {"--max-steps", "2", "--checkpoint", good});
  const test::program_run written = test::run_actorpipe(first);
  INFO(written.err);
  REQUIRE(written.code == 0);
  std::ifstream in(good, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  REQUIRE(bytes.size() > 2192);
  bytes[2192] = static_cast<char>(bytes[2192] ^ 0x08);  // a weight's bit, as once resumed from silently
  std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

  std::vector<std::string> resume = run;
  resume.insert(resume.end(), {"--max-steps", "4", "--resume", bad});
  const test::program_run resumed = test::run_actorpipe(resume);
  INFO(resumed.err);
  CHECK(resumed.code == 1);
  CHECK(resumed.lines.empty());  // no result: nothing trained
  CHECK(test::contains(resumed.err, "error: checkpoint " + bad + ": tensor "));
  CHECK(test::contains(resumed.err, " fails its checksum (CRC32C "));
  CHECK(!test::contains(resumed.err, "epoch"));
}
