#include "checkpoint/gpt2_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.hpp"
#include "model/layer_spec.hpp"
#include "model/spec_text.hpp"

// llm.c's header and tensors are little-endian and read as this host's memory.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gpt2_weights.cpp reads llm.c's little-endian data as memory: port it before using a big-endian host"
#endif

namespace ap {

namespace {

constexpr std::int32_t llmc_model_magic = 20240326;
constexpr std::size_t llmc_header_ints = 256;
constexpr std::size_t llmc_header_bytes = llmc_header_ints * sizeof(std::int32_t);
constexpr std::size_t llmc_vocab_multiple = 128;  // train_gpt2.py's pad_vocab
constexpr std::size_t gpt2_head_width = 64;       // every GPT-2 size's C / heads
const std::string hf_prefix = "transformer.";
const std::string llmc_kind = "llm.c checkpoint";
const std::string hf_kind = "Hugging Face GPT-2 file";

const std::string& kind_of(gpt2_format f) { return f == gpt2_format::llmc ? llmc_kind : hf_kind; }

[[noreturn]] void refuse(const std::string& kind, const std::string& path, const std::string& what) {
  throw std::runtime_error(kind + " " + path + ": " + what);
}

// GPT-2's tensors in Hugging Face's names without the prefix and layouts, float32.
using gpt2_tensors = std::map<std::string, tensor>;

std::string block_name(std::size_t i, const std::string& leaf) { return "h." + std::to_string(i) + "." + leaf; }

// A block's tensors: GPT-2's name after "h.{i}." and ours after the block's index.
struct leaf_pair {
  const char* gpt2;
  const char* ours;
};
constexpr leaf_pair block_leaves[] = {
    {"ln_1.weight", "0.0.gamma"},         {"ln_1.bias", "0.0.beta"},
    {"attn.c_attn.weight", "0.1.qkv.weight"}, {"attn.c_attn.bias", "0.1.qkv.bias"},
    {"attn.c_proj.weight", "0.1.proj.weight"}, {"attn.c_proj.bias", "0.1.proj.bias"},
    {"ln_2.weight", "1.0.gamma"},         {"ln_2.bias", "1.0.beta"},
    {"mlp.c_fc.weight", "1.1.weight"},    {"mlp.c_fc.bias", "1.1.bias"},
    {"mlp.c_proj.weight", "1.3.weight"},  {"mlp.c_proj.bias", "1.3.bias"},
};

// Every tensor of GPT-2 `c` but the head, with its shape, in Hugging Face's file order.
std::vector<std::pair<std::string, shape_t>> gpt2_shapes(const gpt_config& c) {
  const std::size_t C = c.dim, M = c.mlp_width();
  std::vector<std::pair<std::string, shape_t>> shapes{{"wte.weight", {c.vocabulary, C}}, {"wpe.weight", {c.context, C}}};
  for (std::size_t i = 0; i < c.layers; ++i) {
    const std::map<std::string, shape_t> leaf{
        {"ln_1.weight", {C}},          {"ln_1.bias", {C}},           {"attn.c_attn.weight", {C, 3 * C}},
        {"attn.c_attn.bias", {3 * C}}, {"attn.c_proj.weight", {C, C}}, {"attn.c_proj.bias", {C}},
        {"ln_2.weight", {C}},          {"ln_2.bias", {C}},           {"mlp.c_fc.weight", {C, M}},
        {"mlp.c_fc.bias", {M}},        {"mlp.c_proj.weight", {M, C}}, {"mlp.c_proj.bias", {C}}};
    for (const leaf_pair& l : block_leaves) shapes.emplace_back(block_name(i, l.gpt2), leaf.at(l.gpt2));
  }
  shapes.emplace_back("ln_f.weight", shape_t{C});
  shapes.emplace_back("ln_f.bias", shape_t{C});
  return shapes;
}

tensor transposed(const tensor& t) {
  const std::size_t r = t.shape().at(0), c = t.shape().at(1);
  tensor out = tensor::from_shape({c, r});
  const float* in = t.data();
  float* o = out.data();
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j) o[j * r + i] = in[i * c + j];
  return out;
}

bool all_zero(const tensor& t) {
  return std::all_of(t.begin(), t.end(), [](float v) { return v == 0.0f; });
}

// The config a file describes: GPT-2's choices with the file's shapes and heads.
gpt_config gpt2_config(std::size_t layers, std::size_t dim, std::size_t heads, std::size_t context,
                       std::size_t vocabulary, std::size_t mlp, bool tied) {
  gpt_config c = parse_gpt_spec("gpt2");
  c.layers = layers, c.dim = dim, c.heads = heads, c.context = context, c.vocabulary = vocabulary;
  c.mlp = mlp == 4 * dim ? 0 : mlp;
  c.tied = tied;
  return c;
}

// ---- our model's LM head

// How the last layer, a Linear (C, V), holds the LM head: with or without bias, tied (Note [tied weights]) or
// not.
struct head_layout {
  bool bias = false;
  bool tied = false;
};

head_layout head_of(const std::string& spec) {
  const layer_spec s = parse_layer_spec(spec);
  if (s.kind != "linear") throw std::invalid_argument("the model's last layer " + spec + " is no LM head (linear:D:V)");
  return {parse_init_options(s).bias, s.option("tie") == "0"};
}

void check_model(const sequential& model, const gpt_config& config, const std::string& what) {
  if (model.first_index() != 0 || model.layer_specs() != gpt_layer_specs(config))
    throw std::invalid_argument(what + ": the model is not the whole model " + gpt_spec_text(config) + " builds");
}

// ---- llm.c

// Other llm.c files' magics, to name a file given in place of a model.
std::string llmc_magic_name(std::int32_t magic) {
  switch (magic) {
    case 20240327: return "llm.c's debug state file (train_gpt2.py's write_state)";
    case 20240328: return "llm.c's tokenizer file";
    case 20240520: return "llm.c's GPT-2 token data file";
    case 20240522: return "llm.c's eval data file";
    case 20240527: return "llm.c's training state file";
    case 20240801: return "llm.c's LLaMA 3 token data file";
    case 20240803: return "llm.c's LLaMA 3 model file";
    default: return "";
  }
}

struct llmc_header {
  std::int32_t field[llmc_header_ints] = {};
};

struct llmc_shape {
  std::uint64_t context = 0, vocabulary = 0, layers = 0, heads = 0, channels = 0, padded = 0;
  int version = 0;
  std::uint64_t parameters() const {  // train_gpt2.c's fill_in_parameter_sizes
    const std::uint64_t C = channels, L = layers;
    return padded * C + context * C + L * (C + C + 3 * C * C + 3 * C + C * C + C + C + C + 4 * C * C + 4 * C + 4 * C * C + C) +
           2 * C;
  }
  std::uint64_t element_bytes() const { return version == 5 ? 2 : 4; }
};

llmc_shape parse_llmc_header(const std::string& path, const llmc_header& h, std::uint64_t file_size) {
  if (h.field[0] != llmc_model_magic) {
    const std::string known = llmc_magic_name(h.field[0]);
    refuse(llmc_kind, path, "wrong magic " + std::to_string(h.field[0]) + (known.empty() ? "" : " (" + known + ")") +
                                ": an llm.c GPT-2 checkpoint starts with 20240326");
  }
  llmc_shape s;
  s.version = h.field[1];
  if (s.version != 3 && s.version != 5)
    refuse(llmc_kind, path, "version " + std::to_string(s.version) +
                                " is not supported: 3 (float32 tensors) and 5 (bfloat16 tensors) are");
  const char* names[] = {"max context", "vocab", "layers", "heads", "channels", "padded vocab"};
  std::uint64_t* fields[] = {&s.context, &s.vocabulary, &s.layers, &s.heads, &s.channels, &s.padded};
  for (int i = 0; i < 6; ++i) {
    const std::int32_t v = h.field[2 + i];
    if (v <= 0)
      refuse(llmc_kind, path, "header field " + std::to_string(2 + i) + " (" + names[i] + ") is " + std::to_string(v) +
                                  ", not a positive count");
    *fields[i] = std::uint64_t(v);
  }
  if (s.padded < s.vocabulary)
    refuse(llmc_kind, path, "padded vocab " + std::to_string(s.padded) + " is below vocab " + std::to_string(s.vocabulary));
  if (s.channels % s.heads != 0)
    refuse(llmc_kind, path, "heads " + std::to_string(s.heads) + " do not divide channels " + std::to_string(s.channels));
  // Counts below 2^31 each: the products stay below 2^64 except 4 C^2 L, bounded first.
  if (s.channels > (std::uint64_t(1) << 24) || s.layers > (std::uint64_t(1) << 12))
    refuse(llmc_kind, path, "channels " + std::to_string(s.channels) + " and layers " + std::to_string(s.layers) +
                                " describe a model too large to read");
  const std::uint64_t expected = llmc_header_bytes + s.parameters() * s.element_bytes();
  const std::string described =
      " its header describes (" + std::to_string(llmc_header_bytes) + " bytes of header and " +
      std::to_string(s.parameters()) + " parameters of " + std::to_string(s.element_bytes()) + " bytes: context " +
      std::to_string(s.context) + ", padded vocab " + std::to_string(s.padded) + ", layers " + std::to_string(s.layers) +
      ", channels " + std::to_string(s.channels) + ")";
  if (file_size < expected)
    refuse(llmc_kind, path, "the file is " + std::to_string(file_size) + " bytes, shorter than the " +
                                std::to_string(expected) + described + ": truncated?");
  if (file_size > expected)
    refuse(llmc_kind, path, "the file is " + std::to_string(file_size) + " bytes, longer than the " +
                                std::to_string(expected) + described);
  return s;
}

llmc_shape read_llmc_shape(const std::string& path, std::ifstream& in) {
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) refuse(llmc_kind, path, "cannot read its size: " + ec.message());
  in.open(path, std::ios::binary);
  if (!in) refuse(llmc_kind, path, "cannot open it");
  if (size < llmc_header_bytes)
    refuse(llmc_kind, path, "the file is " + std::to_string(size) + " bytes, shorter than llm.c's " +
                                std::to_string(llmc_header_bytes) + "-byte header");
  llmc_header h;
  if (!in.read(reinterpret_cast<char*>(h.field), llmc_header_bytes)) refuse(llmc_kind, path, "cannot read its header");
  return parse_llmc_header(path, h, size);
}

gpt2_file_info llmc_info(const llmc_shape& s) {
  gpt2_file_info info;
  info.format = gpt2_format::llmc;
  info.config = gpt2_config(s.layers, s.channels, s.heads, s.context, s.vocabulary, 4 * s.channels, true);
  info.heads_from = "the header";
  info.tied = true;
  info.llmc_version = s.version;
  return info;
}

// The next `shape` of the file as float32 (version 5's bfloat16 widened).
tensor read_llmc_tensor(const std::string& path, std::ifstream& in, const shape_t& shape, int version) {
  tensor t = tensor::from_shape(shape, version == 5 ? dtype::bfloat16 : dtype::float32);
  if (!in.read(reinterpret_cast<char*>(t.bytes()), std::streamsize(t.byte_size())))
    refuse(llmc_kind, path, "cannot read its parameters (file truncated?)");
  return version == 5 ? t.astype(dtype::float32) : t;
}

tensor layer_of(const tensor& all, std::size_t i, const shape_t& shape) {
  tensor t = tensor::from_shape(shape);
  std::copy_n(all.data() + i * t.size(), t.size(), t.data());
  return t;
}

// llm.c's tensor kinds after wte and wpe, in file order, each (L, ...): GPT-2's leaf, and whether it is a
// Linear weight stored (out, in).
struct llmc_kind_entry {
  const char* leaf;
  bool weight;
};
constexpr llmc_kind_entry llmc_kinds[] = {
    {"ln_1.weight", false},        {"ln_1.bias", false},       {"attn.c_attn.weight", true}, {"attn.c_attn.bias", false},
    {"attn.c_proj.weight", true},  {"attn.c_proj.bias", false}, {"ln_2.weight", false},      {"ln_2.bias", false},
    {"mlp.c_fc.weight", true},     {"mlp.c_fc.bias", false},    {"mlp.c_proj.weight", true}, {"mlp.c_proj.bias", false},
};

gpt2_tensors read_llmc_tensors(const std::string& path, gpt2_file_info& info) {
  std::ifstream in;
  const llmc_shape s = read_llmc_shape(path, in);
  info = llmc_info(s);
  const std::map<std::string, shape_t> shapes = [&] {
    std::map<std::string, shape_t> m;
    for (auto& [name, shape] : gpt2_shapes(info.config)) m.emplace(name, shape);
    return m;
  }();
  gpt2_tensors g;
  const std::size_t C = s.channels, V = s.vocabulary;
  const tensor wte = read_llmc_tensor(path, in, {s.padded, C}, s.version);
  g["wte.weight"] = layer_of(wte, 0, {V, C});
  g["wpe.weight"] = read_llmc_tensor(path, in, {s.context, C}, s.version);
  for (const llmc_kind_entry& k : llmc_kinds) {
    const shape_t ours = shapes.at(block_name(0, k.leaf));
    const shape_t stored = k.weight ? shape_t{ours[1], ours[0]} : ours;
    shape_t all{s.layers};
    all.insert(all.end(), stored.begin(), stored.end());
    const tensor t = read_llmc_tensor(path, in, all, s.version);
    for (std::size_t i = 0; i < s.layers; ++i) {
      tensor one = layer_of(t, i, stored);
      g[block_name(i, k.leaf)] = k.weight ? transposed(one) : std::move(one);
    }
  }
  g["ln_f.weight"] = read_llmc_tensor(path, in, {C}, s.version);
  g["ln_f.bias"] = read_llmc_tensor(path, in, {C}, s.version);
  return g;
}

void write_llmc(const std::string& path, const gpt_config& c, const gpt2_tensors& g) {
  const std::size_t V = c.vocabulary, C = c.dim;
  const std::size_t padded = (V + llmc_vocab_multiple - 1) / llmc_vocab_multiple * llmc_vocab_multiple;
  for (const std::size_t n : {c.context, V, c.layers, c.heads, C, padded})
    if (n > std::size_t(std::numeric_limits<std::int32_t>::max()))
      throw std::invalid_argument(llmc_kind + " " + path + ": " + std::to_string(n) + " does not fit its int32 header");
  llmc_header h;
  h.field[0] = llmc_model_magic;
  h.field[1] = 3;
  h.field[2] = std::int32_t(c.context);
  h.field[3] = std::int32_t(V);
  h.field[4] = std::int32_t(c.layers);
  h.field[5] = std::int32_t(c.heads);
  h.field[6] = std::int32_t(C);
  h.field[7] = std::int32_t(padded);
  write_file_atomically(path, llmc_kind, [&](const byte_writer& write) {
    write(h.field, llmc_header_bytes);
    const auto put = [&](const tensor& t) { write(t.data(), t.byte_size()); };
    put(g.at("wte.weight"));
    const std::vector<float> padding((padded - V) * C, 0.0f);
    write(padding.data(), padding.size() * sizeof(float));
    put(g.at("wpe.weight"));
    for (const llmc_kind_entry& k : llmc_kinds)
      for (std::size_t i = 0; i < c.layers; ++i) {
        const tensor& t = g.at(block_name(i, k.leaf));
        put(k.weight ? transposed(t) : t);
      }
    put(g.at("ln_f.weight"));
    put(g.at("ln_f.bias"));
  });
}

// ---- Hugging Face

bool is_mask_buffer(const std::string& name) {  // h.{i}.attn.bias, h.{i}.attn.masked_bias
  const auto ends = [&](const std::string& tail) {
    return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return name.rfind("h.", 0) == 0 && (ends(".attn.bias") || ends(".attn.masked_bias"));
}

// The heads of a Hugging Face file: our metadata's n_head, config.json beside the file, or GPT-2's head width.
std::size_t hf_heads(const std::string& path, const std::map<std::string, std::string>& metadata, std::size_t dim,
                     std::string& from) {
  const auto positive = [](const std::string& text) -> std::size_t {
    try {
      std::size_t used = 0;
      const unsigned long long v = std::stoull(text, &used);
      return used == text.size() && text[0] != '-' ? std::size_t(v) : 0;
    } catch (const std::exception&) {
      return 0;
    }
  };
  if (const auto it = metadata.find("n_head"); it != metadata.end()) {
    const std::size_t n = positive(it->second);
    if (!n) refuse(hf_kind, path, "metadata n_head is '" + it->second + "', not a positive count");
    from = "the metadata";
    return n;
  }
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config, ec)) {
    nlohmann::json j;
    try {
      std::ifstream in(config);
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      refuse(hf_kind, path, "its " + config.string() + " is not valid JSON: " + e.what());
    }
    const std::string where = "its " + config.string() + ": ";
    if (j.contains("activation_function") && j["activation_function"] != "gelu_new" &&
        j["activation_function"] != "gelu_pytorch_tanh")
      refuse(hf_kind, path, where + "activation_function " + j["activation_function"].dump() +
                                " is not GPT-2's tanh GELU (gelu_new)");
    if (j.contains("layer_norm_epsilon") &&
        (!j["layer_norm_epsilon"].is_number() || std::abs(j["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12))
      refuse(hf_kind, path, where + "layer_norm_epsilon " + j["layer_norm_epsilon"].dump() + " is not GPT-2's 1e-05");
    if (j.contains("n_head")) {
      if (!j["n_head"].is_number_unsigned() || j["n_head"].get<std::size_t>() == 0)
        refuse(hf_kind, path, where + "n_head " + j["n_head"].dump() + " is not a positive count");
      from = "config.json";
      return j["n_head"].get<std::size_t>();
    }
  }
  if (dim % gpt2_head_width == 0) {
    from = "GPT-2's head width of 64";
    return dim / gpt2_head_width;
  }
  from.clear();  // unknown: one head stands in
  return 1;
}

// A Hugging Face header checked against GPT-2: each of GPT-2's names (without prefix) mapped to the file's.
struct hf_layout {
  gpt2_file_info info;
  std::map<std::string, std::string> file_name;
};

hf_layout hf_layout_of(const std::string& path, const std::map<std::string, shape_t>& shapes,
                       const std::map<std::string, std::string>& metadata) {
  if (const auto it = metadata.find("format"); it != metadata.end() && it->second.rfind("actorpipe-", 0) == 0)
    refuse(hf_kind, path, "this is an actorpipe file (format " + it->second +
                              "), not GPT-2's weights: resume training from it with --resume");
  hf_layout out;
  std::map<std::string, shape_t> by_gpt2_name;
  for (const auto& [name, shape] : shapes) {
    const std::string gpt2 = name.rfind(hf_prefix, 0) == 0 ? name.substr(hf_prefix.size()) : name;
    if (is_mask_buffer(gpt2)) continue;
    if (const auto [it, added] = out.file_name.emplace(gpt2, name); !added)
      refuse(hf_kind, path, "tensor " + gpt2 + " is given twice, as " + it->second + " and " + name);
    by_gpt2_name.emplace(gpt2, shape);
  }
  const auto shape_of_2d = [&](const std::string& gpt2) -> const shape_t& {
    const auto it = by_gpt2_name.find(gpt2);
    if (it == by_gpt2_name.end()) {
      std::string some;
      std::size_t n = 0;
      for (const auto& [name, shape] : shapes)
        if (n++ < 4) some += (some.empty() ? "" : ", ") + name;
      refuse(hf_kind, path, "missing tensor " + gpt2 + " (or " + hf_prefix + gpt2 + "): not GPT-2's weights? it holds " +
                                (some.empty() ? std::string("no tensors") : some + (n > 4 ? ", ..." : "")));
    }
    if (it->second.size() != 2)
      refuse(hf_kind, path, "tensor " + out.file_name.at(gpt2) + " has shape " + shape_string(it->second) +
                                ", not (rows, dim)");
    return it->second;
  };
  const shape_t& wte = shape_of_2d("wte.weight");
  const shape_t& wpe = shape_of_2d("wpe.weight");
  const std::size_t V = wte[0], C = wte[1], T = wpe[0];
  std::size_t layers = 0;
  for (const auto& [gpt2, shape] : by_gpt2_name) {
    if (gpt2.rfind("h.", 0) != 0) continue;
    const std::size_t dot = gpt2.find('.', 2);
    const std::string index = gpt2.substr(2, dot == std::string::npos ? std::string::npos : dot - 2);
    if (index.empty() || index.size() > 6 || !std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      refuse(hf_kind, path, "unexpected tensor " + out.file_name.at(gpt2) + ": not one of GPT-2's");
    layers = std::max(layers, std::size_t(std::stoul(index)) + 1);
  }
  if (layers == 0) refuse(hf_kind, path, "holds no blocks (h.0.ln_1.weight, ...)");
  std::size_t mlp = 4 * C;
  if (const auto it = by_gpt2_name.find(block_name(0, "mlp.c_fc.weight")); it != by_gpt2_name.end() && it->second.size() == 2)
    mlp = it->second[1];
  std::string heads_from;
  const std::size_t heads = hf_heads(path, metadata, C, heads_from);
  if (C % heads != 0)
    refuse(hf_kind, path, "n_head " + std::to_string(heads) + " (from " + heads_from + ") does not divide dim " + std::to_string(C));
  out.info.format = gpt2_format::huggingface;
  out.info.tied = !by_gpt2_name.count("lm_head.weight");
  out.info.config = gpt2_config(layers, C, heads, T, V, mlp, out.info.tied);
  out.info.heads_from = heads_from;

  std::set<std::string> expected;
  const std::string shapes_of = "GPT-2 of dim " + std::to_string(C) + ", vocab " + std::to_string(V) + ", context " +
                                std::to_string(T) + ", " + std::to_string(layers) + " layers and mlp " + std::to_string(mlp);
  for (const auto& [gpt2, shape] : gpt2_shapes(out.info.config)) {
    expected.insert(gpt2);
    const auto it = by_gpt2_name.find(gpt2);
    if (it == by_gpt2_name.end()) refuse(hf_kind, path, "missing tensor " + gpt2 + " (" + shapes_of + " has it)");
    if (it->second != shape)
      refuse(hf_kind, path, "tensor " + out.file_name.at(gpt2) + " has shape " + shape_string(it->second) + ", " +
                                shapes_of + " needs " + shape_string(shape));
  }
  for (const auto& [gpt2, shape] : std::map<std::string, shape_t>{{"lm_head.weight", {V, C}}, {"lm_head.bias", {V}}}) {
    const auto it = by_gpt2_name.find(gpt2);
    if (it == by_gpt2_name.end()) continue;
    expected.insert(gpt2);
    if (it->second != shape)
      refuse(hf_kind, path, "tensor " + out.file_name.at(gpt2) + " has shape " + shape_string(it->second) + ", " +
                                shapes_of + " needs " + shape_string(shape));
  }
  if (by_gpt2_name.count("lm_head.bias") && !by_gpt2_name.count("lm_head.weight"))
    refuse(hf_kind, path, "tensor lm_head.bias without lm_head.weight");
  for (const auto& [gpt2, shape] : by_gpt2_name)
    if (!expected.count(gpt2))
      refuse(hf_kind, path, "unexpected tensor " + out.file_name.at(gpt2) + ": not one of " + shapes_of + "'s");
  return out;
}

hf_layout read_hf_layout(const std::string& path) {
  const safetensors_header header = read_safetensors_header(path);
  std::map<std::string, shape_t> shapes;
  for (const auto& [name, e] : header.tensors) shapes.emplace(name, e.shape);
  return hf_layout_of(path, shapes, header.metadata);
}

gpt2_tensors read_hf_tensors(const std::string& path, gpt2_file_info& info) {
  const hf_layout layout = read_hf_layout(path);
  info = layout.info;
  std::map<std::string, std::string> gpt2_name;
  for (const auto& [gpt2, name] : layout.file_name) gpt2_name.emplace(name, gpt2);
  safetensors_file file = read_safetensors(path, [&](const std::string& name) { return gpt2_name.count(name) > 0; });
  gpt2_tensors g;
  for (auto& [name, t] : file.tensors)
    g[gpt2_name.at(name)] = t.type() == dtype::float32 ? std::move(t) : t.astype(dtype::float32);
  return g;
}

void write_hf(const std::string& path, const gpt_config& c, const gpt2_tensors& g) {
  tensor_refs refs;
  for (const auto& [gpt2, shape] : gpt2_shapes(c)) refs.emplace_back(hf_prefix + gpt2, &g.at(gpt2));
  for (const char* head : {"lm_head.weight", "lm_head.bias"})
    if (const auto it = g.find(head); it != g.end()) refs.emplace_back(head, &it->second);
  write_safetensors(path, refs,
                    {{"format", "pt"},  // what transformers' from_pretrained checks
                     {"n_head", std::to_string(c.heads)},
                     {"n_layer", std::to_string(c.layers)},
                     {"n_embd", std::to_string(c.dim)},
                     {"n_positions", std::to_string(c.context)},
                     {"vocab_size", std::to_string(c.vocabulary)}});
}

// ---- GPT-2's tensors and our parameters

// Our names and tensors for `model_config` (its context at most the file's: wpe's first rows).
named_tensors to_ours(gpt2_tensors g, const gpt_config& model_config, const head_layout& head, const std::string& where) {
  named_tensors out;
  const auto add = [&](const std::string& name, tensor t) {
    out.names.push_back(name);
    out.values.push_back(std::move(t));
  };
  const std::size_t L = model_config.layers;
  const tensor wte = g.at("wte.weight");
  add("0.weight", wte);
  const tensor& wpe = g.at("wpe.weight");
  add("1.weight", wpe.shape()[0] == model_config.context ? wpe : layer_of(wpe, 0, {model_config.context, model_config.dim}));
  for (std::size_t i = 0; i < L; ++i)
    for (const leaf_pair& l : block_leaves) add(std::to_string(2 + i) + "." + l.ours, std::move(g.at(block_name(i, l.gpt2))));
  add(std::to_string(L + 2) + ".gamma", std::move(g.at("ln_f.weight")));
  add(std::to_string(L + 2) + ".beta", std::move(g.at("ln_f.bias")));
  const std::string h = std::to_string(L + 3) + ".";
  const auto lm_head = g.find("lm_head.weight");
  const auto lm_bias = g.find("lm_head.bias");
  const bool has_bias = lm_bias != g.end() && !all_zero(lm_bias->second);
  if (head.tied && lm_head != g.end() && !(lm_head->second == wte))
    throw std::invalid_argument(where + ": its lm_head.weight is not its wte.weight, and the model's LM head is tied "
                                        "to the embedding: give a model with an untied head (tied=0)");
  if (has_bias && !head.bias)
    throw std::invalid_argument(where + ": its lm_head.bias is not zero, and the model's LM head has no bias");
  add(h + "weight", transposed(lm_head != g.end() ? lm_head->second : wte));
  if (head.bias) add(h + "bias", has_bias ? lm_bias->second : zeros({model_config.vocabulary}));
  return out;
}

// GPT-2's tensors of our model; `tied`: the head is wte (no lm_head written).
gpt2_tensors from_ours(sequential& model, const gpt_config& c, bool& tied) {
  std::map<std::string, const tensor*> p;
  for (const parameter& q : model.parameters()) p.emplace(q.name, q.value);
  gpt2_tensors g;
  const std::size_t L = c.layers;
  g["wte.weight"] = *p.at("0.weight");
  g["wpe.weight"] = *p.at("1.weight");
  for (std::size_t i = 0; i < L; ++i)
    for (const leaf_pair& l : block_leaves) g[block_name(i, l.gpt2)] = *p.at(std::to_string(2 + i) + "." + l.ours);
  g["ln_f.weight"] = *p.at(std::to_string(L + 2) + ".gamma");
  g["ln_f.bias"] = *p.at(std::to_string(L + 2) + ".beta");
  const std::string h = std::to_string(L + 3) + ".";
  const head_layout head = head_of(model.layer_specs().back());
  if (head.tied) {  // the copy equals the embedding: wte is written
    tied = true;
    return g;
  }
  tensor weight = transposed(*p.at(h + "weight"));
  const tensor* bias = head.bias ? p.at(h + "bias") : nullptr;
  tied = weight == g.at("wte.weight") && (!bias || all_zero(*bias));
  if (!tied) {
    g["lm_head.weight"] = std::move(weight);
    if (bias && !all_zero(*bias)) g["lm_head.bias"] = *bias;
  }
  return g;
}

}  // namespace

// ---- public

const char* gpt2_format_name(gpt2_format format) {
  return format == gpt2_format::llmc ? "llm.c" : "Hugging Face safetensors";
}

gpt2_format gpt2_format_for_path(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".bin") return gpt2_format::llmc;
  if (ext == ".safetensors") return gpt2_format::huggingface;
  throw std::invalid_argument(path + ": the file name must end in .bin (llm.c's GPT-2 checkpoint) or .safetensors "
                                     "(Hugging Face's GPT-2 weights), not '" + ext + "'");
}

gpt2_format detect_gpt2_format(const std::string& path) {
  const std::string kind = "GPT-2 weights";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) refuse(kind, path, "no such file");
  if (!std::filesystem::is_regular_file(path, ec)) refuse(kind, path, "not a regular file");
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  unsigned char start[9] = {};
  in.read(reinterpret_cast<char*>(start), std::streamsize(std::min<std::uint64_t>(size, 9)));
  std::int32_t magic = 0;
  std::memcpy(&magic, start, 4);
  if (size >= 4 && (magic == llmc_model_magic || !llmc_magic_name(magic).empty())) return gpt2_format::llmc;
  std::uint64_t header = 0;
  std::memcpy(&header, start, 8);
  if (size >= 9 && header <= size - 8 && start[8] == '{') return gpt2_format::huggingface;
  char bytes[64];
  std::snprintf(bytes, sizeof bytes, "%02x %02x %02x %02x", start[0], start[1], start[2], start[3]);
  refuse(kind, path, "neither an llm.c GPT-2 checkpoint (int32 magic 20240326) nor a safetensors file (a u64 "
                     "header length, then '{'): it starts with the bytes " + std::string(bytes) +
                         (size >= 4 ? " (int32 " + std::to_string(magic) + ")" : "") + ", " + std::to_string(size) +
                         " bytes in all");
}

gpt2_file_info read_gpt2_info(const std::string& path) {
  if (detect_gpt2_format(path) == gpt2_format::huggingface) return read_hf_layout(path).info;
  std::ifstream in;
  return llmc_info(read_llmc_shape(path, in));
}

void check_gpt2_architecture(const gpt_config& config, gpt2_format format, const std::string& what) {
  gpt_config g;  // a plain gpt spec's choices are GPT-2's
  g.layers = config.layers, g.dim = config.dim, g.heads = config.heads, g.context = config.context;
  g.vocabulary = config.vocabulary, g.init = config.init;
  if (format == gpt2_format::huggingface) g.mlp = config.mlp;
  const auto items = [](const std::string& text) {
    const std::vector<std::string> all = split_fields(text.substr(text.find(':') + 1), ',');
    return std::set<std::string>(all.begin(), all.end());
  };
  const std::set<std::string> gpt2 = items(gpt_spec_text(g));
  std::string differing;
  for (const std::string& item : items(gpt_spec_text(config))) {
    if (gpt2.count(item) || item.rfind("tied=", 0) == 0) continue;
    const std::string key = item.substr(0, item.find('='));
    const std::string why = key == "norm"   ? "GPT-2 normalises with LayerNorm (norm=layer)"
                            : key == "gelu" ? "GPT-2's GELU is the tanh approximation (gelu=tanh)"
                            : key == "bias" ? "GPT-2's Linear layers and LayerNorms have biases (bias=1)"
                            : key == "mlp"  ? "llm.c's format holds an MLP of 4 x dim (mlp=" + std::to_string(4 * config.dim) + ")"
                            : key == "pos"  ? "GPT-2 learns its positions (pos=learned: wpe)"
                            : key == "kv_heads" ? "GPT-2's attention has a key and value head for every head"
                            : key == "act"  ? "GPT-2's MLP is Linear, GELU, Linear (act=gelu)"
                                            : "GPT-2 has no such choice";
    differing += (differing.empty() ? "" : "; ") + item + ": " + why;
  }
  if (!differing.empty())
    throw std::invalid_argument(what + ": " + gpt_spec_text(config) + " is not GPT-2's architecture, which " +
                                gpt2_format_name(format) + " files hold: " + differing);
}

bool has_tied_head(const gpt_config& config) { return head_of(gpt_layer_specs(config).back()).tied; }

std::string gpt2_shape_mismatch(const gpt_config& file, const gpt_config& model, bool heads_known) {
  std::string text;
  const auto field = [&](const char* name, std::size_t a, std::size_t b, bool differs) {
    if (differs) text += (text.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(a) + " vs " + std::to_string(b);
  };
  field("layers", file.layers, model.layers, file.layers != model.layers);
  field("dim", file.dim, model.dim, file.dim != model.dim);
  field("heads", file.heads, model.heads, heads_known && file.heads != model.heads);
  field("context", file.context, model.context, model.context > file.context);
  field("vocab", file.vocabulary, model.vocabulary, file.vocabulary != model.vocabulary);
  field("mlp", file.mlp_width(), model.mlp_width(), file.mlp_width() != model.mlp_width());
  return text;
}

gpt2_weights read_gpt2_weights(const std::string& path) {
  gpt2_weights out;
  gpt2_tensors g = detect_gpt2_format(path) == gpt2_format::huggingface ? read_hf_tensors(path, out.info)
                                                                        : read_llmc_tensors(path, out.info);
  const gpt_config& c = out.info.config;
  out.tensors = to_ours(std::move(g), c, head_of(gpt_layer_specs(c).back()), kind_of(out.info.format) + " " + path);
  return out;
}

void load_gpt2_weights(const std::string& path, sequential& model, const gpt_config& config) {
  check_model(model, config, "GPT-2 weights " + path);
  const gpt2_format format = detect_gpt2_format(path);
  const std::string where = kind_of(format) + " " + path;
  check_gpt2_architecture(config, gpt2_format::huggingface, "cannot load " + where);
  const gpt2_file_info info = read_gpt2_info(path);
  if (const std::string differs = gpt2_shape_mismatch(info.config, config, info.heads_stated()); !differs.empty())
    throw std::invalid_argument(where + " holds a model of another shape than " + gpt_spec_text(config) + ": " + differs +
                                " (the file's vs the model's)");
  gpt2_file_info read;
  gpt2_tensors g = format == gpt2_format::huggingface ? read_hf_tensors(path, read) : read_llmc_tensors(path, read);
  const named_tensors ours = to_ours(std::move(g), config, head_of(model.layer_specs().back()), where);
  tensor_sources sources;
  if (const std::string why = add_sources(sources, ours, path); !why.empty()) refuse(kind_of(format), path, why);
  if (const std::string why = bind_named_tensors(parameter_targets(model.parameters(), "the model's parameter"), sources,
                                                 "no parameter of the model");
      !why.empty())
    refuse(kind_of(format), path, why);
}

void write_gpt2_weights(const std::string& path, gpt2_format format, const gpt_config& config, sequential& model) {
  const std::string where = "cannot write " + path + " as " + gpt2_format_name(format);
  check_model(model, config, where);
  check_gpt2_architecture(config, format, where);
  bool tied = false;
  const gpt2_tensors g = from_ours(model, config, tied);
  if (format == gpt2_format::llmc) {
    if (!tied)
      throw std::invalid_argument(where + ": llm.c's format holds no LM head of its own (its logits are x wte^T), and "
                                          "this model's head (layer " + std::to_string(config.layers + 3) + ", " +
                                  model.layer_specs().back() + ") is untied and differs from the token embedding: "
                                  "write .safetensors, or train a model with a tied head (tied=1)");
    write_llmc(path, config, g);
  } else {
    write_hf(path, config, g);
  }
}

}  // namespace ap
