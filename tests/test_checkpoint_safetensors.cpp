// safetensors files: byte-exact round trips, the layout other tools read, atomic writes, and every refusal.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.hpp"
#include "test_support.hpp"

using namespace ap;
namespace fs = std::filesystem;

namespace {

using namespace ap::test;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string u64_le(std::uint64_t n) {
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[i] = char((n >> (8 * i)) & 0xff);
  return b;
}

// A hand-made file: length, header text (unpadded: padding is optional for readers), `data_bytes` zero bytes.
std::string craft(const scratch_dir& dir, const std::string& header, std::size_t data_bytes,
                  const std::string& name = "crafted.safetensors") {
  const std::string path = dir.file(name);
  write_bytes(path, u64_le(header.size()) + header + std::string(data_bytes, '\0'));
  return path;
}

// Same shape and the same bytes (so NaN, -0 and infinities count too).
bool same_bits(const tensor& a, const tensor& b) {
  return a.shape() == b.shape() && (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::map<std::string, tensor> sample_tensors() {
  std::map<std::string, tensor> t;
  t["0.weight"] = from_values({2, 3}, {1.5f, -2.0f, 3.25f, 0.1f, -0.0f, 1e-38f});
  t["0.bias"] = from_values({3}, {std::numeric_limits<float>::infinity(), std::nanf(""), 7.0f});
  t["scalar"] = tensor(42.0f);  // rank 0: shape []
  t["empty"] = zeros({0, 4});
  t["cube"] = from_values({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  return t;
}

}  // namespace

TEST_CASE("safetensors round trip: tensors and metadata come back byte-exact") {
  scratch_dir dir{"checkpoint_safetensors"};
  const auto tensors = sample_tensors();
  const std::map<std::string, std::string> metadata = {
      {"format", "test"}, {"empty", ""}, {"unicode", "\xc3\xa9t\xc3\xa9"}, {"quote", "a \"b\" \\ c\n"}};
  const std::string path = dir.file("a.safetensors");
  write_safetensors(path, tensors, metadata);
  const safetensors_file back = read_safetensors(path);
  CHECK(back.metadata == metadata);
  REQUIRE(back.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(back.tensors.count(name) == 1);
    CHECK(same_bits(back.tensors.at(name), t));
  }
  // Writing what was read gives the same file, byte for byte.
  write_safetensors(dir.file("b.safetensors"), back.tensors, back.metadata);
  CHECK(read_bytes(path) == read_bytes(dir.file("b.safetensors")));

  // The pointer-map and list overloads write the same thing; without metadata, no __metadata__ entry.
  std::map<std::string, const tensor*> pointers;
  for (const auto& [name, t] : tensors) pointers[name] = &t;
  write_safetensors(dir.file("c.safetensors"), pointers, metadata);
  CHECK(read_bytes(path) == read_bytes(dir.file("c.safetensors")));
  write_safetensors(dir.file("d.safetensors"), tensor_refs{{"x", &tensors.at("cube")}});
  const safetensors_file d = read_safetensors(dir.file("d.safetensors"));
  CHECK(d.metadata.empty());
  CHECK(same_bits(d.tensors.at("x"), tensors.at("cube")));
}

TEST_CASE("safetensors layout: u64 header length, JSON header padded to 8, then the data in list order") {
  scratch_dir dir{"checkpoint_safetensors"};
  const tensor a = from_values({2, 2}, {1, 2, 3, 4});
  const tensor b = from_values({3}, {-1, -2, -3});
  const std::string path = dir.file("layout.safetensors");
  write_safetensors(path, tensor_refs{{"b", &b}, {"a", &a}}, {{"k", "v"}});  // file order: b then a

  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);
  REQUIRE(8 + n <= bytes.size());
  const std::string header_text = bytes.substr(8, n);
  CHECK(header_text.front() == '{');
  const nlohmann::json header = nlohmann::json::parse(header_text);  // trailing spaces are JSON whitespace
  CHECK(header["__metadata__"] == nlohmann::json{{"k", "v"}});
  CHECK(header["b"]["dtype"] == "F32");
  CHECK(header["b"]["shape"] == nlohmann::json{3});
  CHECK(header["b"]["data_offsets"] == nlohmann::json{0, 12});
  CHECK(header["a"]["shape"] == nlohmann::json{2, 2});
  CHECK(header["a"]["data_offsets"] == nlohmann::json{12, 28});
  CHECK(bytes.size() == 8 + n + 28);
  CHECK(std::memcmp(bytes.data() + 8 + n, b.data(), 12) == 0);
  CHECK(std::memcmp(bytes.data() + 8 + n + 12, a.data(), 16) == 0);
}

TEST_CASE("safetensors files read by an independent reader (Python struct + json), when python3 is here") {
  if (std::system("python3 -c pass > /dev/null 2>&1") != 0) {
    MESSAGE("python3 not available: skipped");
    return;
  }
  scratch_dir dir{"checkpoint_safetensors"};
  const auto tensors = sample_tensors();
  const std::string path = dir.file("py.safetensors");
  write_safetensors(path, tensors, {{"format", "test"}});
  const std::string script = dir.file("read.py");
  const std::string out = dir.file("out.json");
  write_bytes(script, R"(import json, math, struct, sys
data = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', data[:8])
header = json.loads(data[8:8 + n])
body = data[8 + n:]
out = {'__metadata__': header.pop('__metadata__', {}), 'n': n}
end = 0
for name, e in sorted(header.items(), key=lambda kv: kv[1]['data_offsets']):
    b, f = e['data_offsets']
    assert e['dtype'] == 'F32' and b == end, (name, e)
    count = math.prod(e['shape'])
    assert f - b == 4 * count, (name, e)
    values = struct.unpack('<%df' % count, body[b:f])
    out[name] = {'shape': e['shape'], 'values': [v if math.isfinite(v) else repr(v) for v in values]}
    end = f
assert end == len(body)
json.dump(out, open(sys.argv[2], 'w'))
)");
  REQUIRE(std::system(("python3 " + script + " " + path + " " + out).c_str()) == 0);
  const nlohmann::json seen = nlohmann::json::parse(read_bytes(out));
  CHECK(seen["__metadata__"] == nlohmann::json{{"format", "test"}});
  CHECK(seen["n"].get<std::uint64_t>() % 8 == 0);
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(seen.contains(name));
    CHECK(seen[name]["shape"] == nlohmann::json(shape_of(t)));
    const nlohmann::json& values = seen[name]["values"];
    REQUIRE(values.size() == t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
      const float v = t.data()[i];
      if (std::isnan(v))
        CHECK(values[i] == "nan");
      else if (std::isinf(v))
        CHECK(values[i] == "inf");
      else {
        const float read_back = static_cast<float>(values[i].get<double>());  // float -> double -> float: exact
        CHECK(std::memcmp(&read_back, &v, sizeof(float)) == 0);             // bit for bit, -0 included
      }
    }
  }
}

TEST_CASE("safetensors atomic write: no temporary file is left, and a crash never touches the final file") {
  scratch_dir dir{"checkpoint_safetensors"};
  const std::string path = dir.file("model.safetensors");
  const tensor v1 = from_values({2}, {1, 1});
  const tensor v2 = from_values({2}, {2, 2});

  // A live process (our parent) is writing the same path: the final file does not exist yet.
  const std::string live_other = path + ".tmp-" + std::to_string(::getppid());
  write_bytes(live_other, "half a file");
  CHECK(contains(error_of([&] { read_safetensors(path); }), "no such file"));

  write_safetensors(path, tensor_refs{{"w", &v1}});
  CHECK(same_bits(read_safetensors(path).tensors.at("w"), v1));
  CHECK(read_bytes(live_other) == "half a file");  // a live writer's file: left alone
  fs::remove(live_other);
  CHECK(dir.temporaries().empty());

  // A crash of this process in the middle of writing v2: its temporary file is half written, the final file
  // still holds v1 in full.
  const std::string own_tmp = path + ".tmp-" + std::to_string(::getpid());
  write_bytes(own_tmp, read_bytes(path).substr(0, 20));
  CHECK(same_bits(read_safetensors(path).tensors.at("w"), v1));
  // The next write replaces the stale temporary file and leaves none behind.
  write_safetensors(path, tensor_refs{{"w", &v2}});
  CHECK(same_bits(read_safetensors(path).tensors.at("w"), v2));
  CHECK(dir.temporaries().empty());

  // A write that fails (its temporary file cannot be created) leaves the final file as it was.
  fs::create_directory(own_tmp);
  const std::string error = error_of([&] { write_safetensors(path, tensor_refs{{"w", &v1}}); });
  CHECK(contains(error, path));
  CHECK(contains(error, "cannot create temporary file"));
  CHECK(same_bits(read_safetensors(path).tensors.at("w"), v2));
  fs::remove(own_tmp);

  // A refused write creates nothing at all.
  const std::string fresh = dir.file("fresh.safetensors");
  CHECK(contains(error_of([&] { write_safetensors(fresh, tensor_refs{{"w", &v1}, {"w", &v2}}); }),
                 "tensor w given twice"));
  CHECK(contains(error_of([&] { write_safetensors(fresh, tensor_refs{{"__metadata__", &v1}}); }),
                 "__metadata__"));
  CHECK(contains(error_of([&] { write_safetensors(fresh, tensor_refs{{"", &v1}}); }), "empty name"));
  CHECK(contains(error_of([&] { write_safetensors(fresh, tensor_refs{{"w", &v1}}, {{"bad", "\xff"}}); }),
                 "cannot write the header"));
  CHECK(!fs::exists(fresh));
  CHECK(dir.temporaries().empty());
}

TEST_CASE("safetensors reading refuses broken files, naming the file and what is wrong") {
  scratch_dir dir{"checkpoint_safetensors"};
  const auto refusal = [&](const std::string& path) {
    const std::string message = error_of([&] { read_safetensors(path); });
    INFO(message);
    CHECK(contains(message, "safetensors file " + path + ": "));
    return message;
  };

  CHECK(contains(refusal(dir.file("absent.safetensors")), "no such file"));
  CHECK(contains(refusal(dir.path.string()), "not a regular file"));

  write_bytes(dir.file("short"), "12345");
  CHECK(contains(refusal(dir.file("short")), "file is 5 bytes, shorter than the 8-byte header length"));

  write_bytes(dir.file("long_header"), u64_le(1000) + "{}");
  CHECK(contains(refusal(dir.file("long_header")), "header length 1000 goes beyond the end of the file (10 bytes"));

  CHECK(contains(refusal(craft(dir, "{\"a\": ", 0)), "header is not valid JSON"));
  CHECK(contains(refusal(craft(dir, "[1, 2]", 0)), "header is not a JSON object"));
  CHECK(contains(refusal(craft(dir, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                         "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                               8)),
                 "header names a twice"));
  CHECK(contains(refusal(craft(dir, R"({"__metadata__": {"k": 1}})", 0)), "__metadata__ value of k is not a string"));
  CHECK(contains(refusal(craft(dir, R"({"a": [0, 4]})", 4)), "tensor a: header entry is not an object"));
  CHECK(contains(refusal(craft(dir, R"({"a": {"dtype": "F32", "shape": [1]}})", 4)),
                 "tensor a: header entry has no \"data_offsets\""));

  CHECK(contains(refusal(craft(dir, R"({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})", 4)),
                 "tensor w: unsupported dtype F16 (F32 and BF16 are supported)"));
  CHECK(contains(refusal(craft(dir, R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8)),
                 "tensor w: shape [-2] has a non-integer or negative size"));
  CHECK(contains(refusal(craft(dir, R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20)),
                 "tensor w: shape (2, 3) needs 24 bytes of F32 but data_offsets [0, 20) hold 20"));
  CHECK(contains(refusal(craft(dir, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8)),
                 "tensor w: data_offsets [8, 4) end before they begin"));
  CHECK(contains(refusal(craft(dir, R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})", 16)),
                 "tensor w: data_offsets [0, 24) out of range: the data section holds 16 bytes"));
  CHECK(contains(refusal(craft(dir, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                         "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                               24)),
                 "tensor b: data_offsets [8, 24) overlap tensor a [0, 16)"));
  CHECK(contains(refusal(craft(dir, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})",
                               24)),
                 "tensor b: data_offsets [16, 24) leave a gap: bytes [8, 16) belong to no tensor"));
  CHECK(contains(refusal(craft(dir, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 20)),
                 "data section size mismatch: the file holds 20 bytes of data but the tensors cover 16"));
}

TEST_CASE("safetensors reading accepts what the format allows: padding, empty tensors, a file of no tensors") {
  scratch_dir dir{"checkpoint_safetensors"};
  const safetensors_file nothing = read_safetensors(craft(dir, "{}", 0));
  CHECK(nothing.tensors.empty());
  CHECK(nothing.metadata.empty());
  const safetensors_file padded = read_safetensors(
      craft(dir, R"({"e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
                     "w": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}})"
                 "      ",
            4));
  CHECK(padded.tensors.at("e").shape() == tensor::shape_type{0, 3});
  CHECK(padded.tensors.at("w").dimension() == 0);
  CHECK(padded.tensors.at("w")() == 0.0f);
}

TEST_CASE("safetensors reading of some tensors only still validates the whole file") {
  scratch_dir dir{"checkpoint_safetensors"};
  const auto tensors = sample_tensors();
  const std::string path = dir.file("part.safetensors");
  write_safetensors(path, tensors);
  std::vector<std::string> asked;
  const safetensors_file part = read_safetensors(path, [&](const std::string& name) {
    asked.push_back(name);
    return name.rfind("0.", 0) == 0;
  });
  CHECK(asked.size() == tensors.size());
  CHECK(part.tensors.size() == 2);
  CHECK(same_bits(part.tensors.at("0.weight"), tensors.at("0.weight")));

  // Cut the file short: even a reader that wants nothing refuses it.
  const std::string bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, bytes.size() - 4));
  CHECK(contains(error_of([&] { read_safetensors(path, [](const std::string&) { return false; }); }),
                 "out of range"));
}

TEST_CASE("safetensors BF16: written as the format defines it (2 bytes each), read back bit for bit, mixed with F32") {
  scratch_dir dir{"checkpoint_safetensors"};
  const tensor w = from_values({2, 3}, {1.5f, -2.0f, 3.25f, 0.1f, -0.0f, 1e-30f}).astype(dtype::bfloat16);
  const tensor b = from_values({3}, {1.0f, 2.0f, 3.0f});
  const std::string path = dir.file("bf16.safetensors");
  write_safetensors(path, tensor_refs{{"w", &w}, {"b", &b}});

  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["w"]["dtype"] == "BF16");
  CHECK(header["w"]["data_offsets"] == nlohmann::json{0, 12});
  CHECK(header["b"]["dtype"] == "F32");
  CHECK(header["b"]["data_offsets"] == nlohmann::json{12, 24});
  CHECK(std::memcmp(bytes.data() + 8 + n, w.bytes(), 12) == 0);  // the upper halves of the floats, little-endian

  const safetensors_file read = read_safetensors(path);
  CHECK(read.tensors.at("w") == w);
  CHECK(read.tensors.at("w").type() == dtype::bfloat16);
  CHECK(read.tensors.at("b") == b);

  // An independent reader: BF16 is the upper 16 bits of a float32.
  if (std::system("python3 -c pass > /dev/null 2>&1") == 0) {
    const std::string script = dir.file("read_bf16.py");
    write_bytes(script, R"(import json, struct, sys
data = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', data[:8])
e = json.loads(data[8:8 + n])['w']
assert e['dtype'] == 'BF16' and e['shape'] == [2, 3], e
b, f = e['data_offsets']
halves = struct.unpack('<6H', data[8 + n + b:8 + n + f])
values = [struct.unpack('<f', struct.pack('<I', h << 16))[0] for h in halves]
assert values[:3] == [1.5, -2.0, 3.25], values
assert abs(values[3] - 0.1) < 0.001 and abs(values[5] - 1e-30) < 1e-32, values
)");
    CHECK(std::system(("python3 " + script + " " + path).c_str()) == 0);
  }

  const auto refusal = [&](const std::string& file) { return error_of([&] { read_safetensors(file); }); };
  CHECK(contains(refusal(craft(dir, R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 24]}})", 24)),
                 "tensor w: shape (2, 3) needs 12 bytes of BF16 but data_offsets [0, 24) hold 24"));
  CHECK(contains(refusal(craft(dir, R"({"w": {"dtype": "bf16", "shape": [1], "data_offsets": [0, 2]}})", 2)),
                 "tensor w: unsupported dtype bf16"));
}

// The pid of a process that has exited and been reaped: no process has it (until the kernel reuses it).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST_CASE("safetensors write removes the temporary files killed writers left, and only those") {
  scratch_dir dir{"checkpoint_safetensors_stale"};
  const std::string path = dir.file("model.safetensors");
  const tensor v1 = from_values({2}, {1, 1});
  // Two kills during earlier writes (processes now gone), a live writer (our parent), another file's
  // temporary, and a name that only looks like one.
  const std::string dead1 = path + ".tmp-" + std::to_string(dead_pid());
  const std::string dead2 = path + ".tmp-" + std::to_string(dead_pid());
  const std::string live = path + ".tmp-" + std::to_string(::getppid());
  const std::string other_file = dir.file("other.safetensors.tmp-" + std::to_string(dead_pid()));
  const std::string not_a_pid = path + ".tmp-12ab";
  for (const auto& f : {dead1, dead2, live, other_file, not_a_pid}) write_bytes(f, "half a file");

  write_safetensors(path, tensor_refs{{"w", &v1}});
  CHECK(same_bits(read_safetensors(path).tensors.at("w"), v1));
  CHECK(!fs::exists(dead1));
  CHECK(!fs::exists(dead2));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other_file));  // another path's: its own next write cleans it
  CHECK(fs::exists(not_a_pid));

  // The function itself reports what it removed.
  write_bytes(dead1, "again");
  const auto removed = remove_stale_temporaries(path);
  REQUIRE(removed.size() == 1);
  CHECK(removed[0] == dead1);
  CHECK(fs::exists(live));
}
