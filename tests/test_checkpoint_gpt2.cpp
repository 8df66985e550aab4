// GPT-2's weight files (Note [GPT-2 weight files]): a GPT-2-shaped model written as llm.c's checkpoint and as Hugging
// Face's model.safetensors, each file read by an independent GPT-2 forward written here in Python from the published
// architecture (numpy: LayerNorm eps 1e-5, tanh GELU, causal attention, the head tied or not), whose logits must be
// ours; each format read back to the same logits; Hugging Face's own spellings (no prefix, mask buffers, bfloat16,
// config.json) and llm.c's bfloat16 version 5; every refusal, naming what and where.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "checkpoint/gpt2_weights.hpp"
#include "checkpoint/safetensors.hpp"
#include "model/gpt_spec.hpp"
#include "model/layer_spec.hpp"
#include "model/sequential.hpp"
#include "data_files.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

// A GPT-2-shaped model whose LM head is its own (a plain gpt spec's: an untied Linear).
const std::string untied_spec = "gpt:layers=2,dim=64,heads=4,context=64,vocab=50257,init=gpt2";

// Every parameter moved off its initial value (LayerNorm weights of 1, biases of 0 would hide a swapped pair).
sequential gpt_model(const std::string& spec, std::uint64_t seed) {
  sequential model = sequential::from_spec(spec, sequential_options{"relu", seed});
  std::uint64_t i = seed * 1000;
  for (const parameter& p : model.parameters()) *p.value += random_tensor(p.value->shape(), ++i, 0.1f);
  return model;
}

// The LM head set to the embedding's wte: its weight to wte^T (a tied head's copy equal again), a bias to 0.
void tie_head(sequential& model) {
  const std::vector<parameter> params = model.parameters();
  const tensor& wte = *params.front().value;
  const std::size_t V = wte.shape()[0], C = wte.shape()[1];
  const std::string head = std::to_string(model.size() - 1) + ".";
  for (const parameter& p : params) {
    if (p.name == head + "bias") p.value->fill(0.0f);
    if (p.name == head + "weight")
      for (std::size_t v = 0; v < V; ++v)
        for (std::size_t c = 0; c < C; ++c) p.value->data()[c * V + v] = wte.data()[v * C + c];
  }
}

// Token ids (2, 12) as floats, spread over the vocabulary.
tensor token_ids(std::size_t vocabulary) {
  tensor ids = tensor::from_shape({2, 12});
  splitmix64 random(5);
  for (float& v : ids) v = float(random.next() % vocabulary);
  return ids;
}

// GPT-2's forward from its published architecture, on the file alone: llm.c's (out, in) weights or Hugging
// Face's Conv1D (in, out) ones, the heads from the header or the metadata; float64; writes the logits as float32.
const char* reference_gpt2 = R"(
import json, struct

def read_llmc(path):
    b = open(path, 'rb').read()
    h = np.frombuffer(b[:1024], dtype='<i4')
    assert h[0] == 20240326 and h[1] == 3, h[:2]
    T, V, L, H, C, Vp = (int(x) for x in h[2:8])
    assert Vp % 128 == 0 and Vp >= V and not h[8:].any()
    f = np.frombuffer(b[1024:], dtype='<f4').astype(np.float64)
    at = [0]
    def take(*shape):
        n = int(np.prod(shape)); t = f[at[0]:at[0] + n].reshape(shape); at[0] += n; return t
    wte, wpe = take(Vp, C), take(T, C)
    assert not wte[V:].any()
    k = {}
    for name, shape in [('ln1w', (C,)), ('ln1b', (C,)), ('qkvw', (3*C, C)), ('qkvb', (3*C,)), ('attprojw', (C, C)),
                        ('attprojb', (C,)), ('ln2w', (C,)), ('ln2b', (C,)), ('fcw', (4*C, C)), ('fcb', (4*C,)),
                        ('fcprojw', (C, 4*C)), ('fcprojb', (C,))]:
        k[name] = take(L, *shape)
    lnfw, lnfb = take(C), take(C)
    assert at[0] == len(f)
    blocks = [dict(ln1=(k['ln1w'][l], k['ln1b'][l]), qkv=(k['qkvw'][l], k['qkvb'][l]), proj=(k['attprojw'][l], k['attprojb'][l]),
                   ln2=(k['ln2w'][l], k['ln2b'][l]), fc=(k['fcw'][l], k['fcb'][l]), fcproj=(k['fcprojw'][l], k['fcprojb'][l]))
              for l in range(L)]
    return dict(wte=wte[:V], wpe=wpe, blocks=blocks, lnf=(lnfw, lnfb), head=(wte[:V], 0.0), heads=H)

def read_hf(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop('__metadata__', {})
    t = {}
    for name, e in header.items():
        assert e['dtype'] == 'F32', e
        s, end = e['data_offsets']
        t[name[len('transformer.'):] if name.startswith('transformer.') else name] = \
            np.frombuffer(b[8 + n + s:8 + n + end], dtype='<f4').reshape(e['shape']).astype(np.float64)
    L = len({k.split('.')[1] for k in t if k.startswith('h.')})
    W = lambda name: (t[name + '.weight'].T, t[name + '.bias'])  # Conv1D (in, out) -> (out, in)
    blocks = [dict(ln1=(t[f'h.{l}.ln_1.weight'], t[f'h.{l}.ln_1.bias']), qkv=W(f'h.{l}.attn.c_attn'),
                   proj=W(f'h.{l}.attn.c_proj'), ln2=(t[f'h.{l}.ln_2.weight'], t[f'h.{l}.ln_2.bias']),
                   fc=W(f'h.{l}.mlp.c_fc'), fcproj=W(f'h.{l}.mlp.c_proj')) for l in range(L)]
    head = (t['lm_head.weight'], t.get('lm_head.bias', 0.0)) if 'lm_head.weight' in t else (t['wte.weight'], 0.0)
    return dict(wte=t['wte.weight'], wpe=t['wpe.weight'], blocks=blocks, lnf=(t['ln_f.weight'], t['ln_f.bias']),
                head=head, heads=int(meta['n_head']))

def layernorm(x, wb):
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * wb[0] + wb[1]

def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

def linear(x, wb):  # PyTorch's: weight (out, in)
    return x @ wb[0].T + wb[1]

def forward(p, ids):
    T = len(ids); C = p['wte'].shape[1]; H = p['heads']; d = C // H
    x = p['wte'][ids] + p['wpe'][:T]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for blk in p['blocks']:
        q, k, v = np.split(linear(layernorm(x, blk['ln1']), blk['qkv']), 3, axis=-1)
        q, k, v = (z.reshape(T, H, d).transpose(1, 0, 2) for z in (q, k, v))
        att = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        att[:, mask] = -np.inf
        att = np.exp(att - att.max(-1, keepdims=True)); att /= att.sum(-1, keepdims=True)
        x = x + linear((att @ v).transpose(1, 0, 2).reshape(T, C), blk['proj'])
        x = x + linear(gelu(linear(layernorm(x, blk['ln2']), blk['fc'])), blk['fcproj'])
    return linear(layernorm(x, p['lnf']), p['head'])

def logits_of(path, llmc, ids_path, out_path):
    p = read_llmc(path) if llmc else read_hf(path)
    ids = np.fromfile(ids_path, dtype='<i4').reshape(2, -1)
    np.stack([forward(p, row) for row in ids]).astype('<f4').tofile(out_path)
)";

// The reference's logits (2, 12, V) of `file`, on `ids`.
tensor reference_logits(const scratch_dir& dir, const std::string& file, bool llmc, const tensor& ids, std::size_t vocabulary) {
  std::vector<std::int32_t> raw(ids.begin(), ids.end());
  std::ofstream(dir.file("ids.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(raw.data()), std::streamsize(raw.size() * 4));
  numpy(dir, std::string(reference_gpt2) + "\nlogits_of('" + file + "', " + (llmc ? "True" : "False") + ", d + 'ids.bin', d + 'logits.bin')\n");
  tensor logits = tensor::from_shape({ids.shape()[0], ids.shape()[1], vocabulary});
  std::ifstream in(dir.file("logits.bin"), std::ios::binary);
  REQUIRE(in.read(reinterpret_cast<char*>(logits.data()), std::streamsize(logits.byte_size())));
  return logits;
}

// A fresh model of `spec` (its own initial weights) with the file loaded.
sequential loaded(const std::string& spec, const std::string& file) {
  sequential model = sequential::from_spec(spec, sequential_options{"relu", 99});
  load_gpt2_weights(file, model, parse_gpt_spec(spec));
  return model;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

TEST_CASE("gpt2 weights: a tied gpt2-tiny written as llm.c's and Hugging Face's files gives GPT-2's logits, and reads back") {
  scratch_dir dir{"gpt2_tied"};
  const std::string spec = "gpt2-tiny";  // tied=1
  sequential model = gpt_model(spec, 3);
  tie_head(model);
  const gpt_config config = parse_gpt_spec(spec);
  const tensor ids = token_ids(config.vocabulary);
  const tensor ours = model.forward(ids);
  for (const std::string name : {"gpt2_tiny.bin", "model.safetensors"}) {
    CAPTURE(name);
    const std::string file = dir.file(name);
    const gpt2_format format = gpt2_format_for_path(file);
    write_gpt2_weights(file, format, config, model);
    CHECK(detect_gpt2_format(file) == format);
    CHECK(check_close(ours, reference_logits(dir, file, format == gpt2_format::llmc, ids, config.vocabulary), 1e-4, 1e-4,
                      "logits of " + name));

    const gpt2_file_info info = read_gpt2_info(file);
    CHECK(info.tied);
    CHECK(info.config.layers == 2);
    CHECK(info.config.dim == 64);
    CHECK(info.config.heads == 4);
    CHECK(info.config.context == 64);
    CHECK(info.config.vocabulary == 50257);
    CHECK(info.heads_from == (format == gpt2_format::llmc ? "the header" : "the metadata"));
    CHECK(read_bytes(file).size() == (format == gpt2_format::llmc
                                          ? 1024 + 4 * (50304 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64)
                                          : read_bytes(file).size()));
    // Back into a fresh model: the very same weights, so the very same logits.
    CHECK(loaded(spec, file).forward(ids) == ours);
    const gpt2_weights read = read_gpt2_weights(file);
    CHECK(read.info.config == info.config);
    sequential rebuilt = sequential::from_layer_specs(gpt_layer_specs(read.info.config));
    tensor_sources sources;
    REQUIRE(add_sources(sources, read.tensors).empty());
    REQUIRE(bind_named_tensors(parameter_targets(rebuilt.parameters(), "the parameter"), sources, "?").empty());
    CHECK(rebuilt.forward(ids) == ours);
  }
}

TEST_CASE("gpt2 weights: an untied head is Hugging Face's lm_head, and llm.c's format refuses it naming why") {
  scratch_dir dir{"gpt2_untied"};
  sequential model = gpt_model(untied_spec, 4);
  const gpt_config config = parse_gpt_spec(untied_spec);
  const tensor ids = token_ids(config.vocabulary);
  const tensor ours = model.forward(ids);
  const std::string file = dir.file("model.safetensors");
  write_gpt2_weights(file, gpt2_format::huggingface, config, model);
  const safetensors_header header = read_safetensors_header(file);
  CHECK(header.tensors.at("lm_head.weight").shape == shape_t{50257, 64});
  CHECK(header.tensors.at("transformer.h.1.attn.c_attn.weight").shape == shape_t{64, 192});
  CHECK(header.tensors.at("transformer.h.1.mlp.c_proj.weight").shape == shape_t{256, 64});
  CHECK(header.metadata.at("format") == "pt");
  CHECK_FALSE(read_gpt2_info(file).tied);
  CHECK(check_close(ours, reference_logits(dir, file, false, ids, config.vocabulary), 1e-4, 1e-4, "logits"));
  CHECK(loaded(untied_spec, file).forward(ids) == ours);
  // A tied model cannot take a head of its own.
  CHECK(contains(error_of([&] { loaded("gpt2-tiny", file); }),
                 "its lm_head.weight is not its wte.weight, and the model's LM head is tied to the embedding"));
  // The same weights with the head tied to wte: written without lm_head, read back as tied.
  tie_head(model);
  write_gpt2_weights(file, gpt2_format::huggingface, config, model);
  CHECK(read_gpt2_info(file).tied);
  CHECK(read_gpt2_info(file).config.tied);
  CHECK(check_close(loaded("gpt2-tiny", file).forward(ids), model.forward(ids), 1e-6, 1e-6, "tied logits"));
  model = gpt_model(untied_spec, 4);

  const std::string why = error_of([&] { write_gpt2_weights(dir.file("m.bin"), gpt2_format::llmc, config, model); });
  CHECK(contains(why, "llm.c's format holds no LM head of its own"));
  CHECK(contains(why, "layer 5"));
  CHECK_FALSE(std::filesystem::exists(dir.file("m.bin")));
}

TEST_CASE("gpt2 weights: Hugging Face's spellings: no prefix, mask buffers, bfloat16, config.json's n_head") {
  scratch_dir dir{"gpt2_hf"};
  sequential model = gpt_model("gpt2-tiny", 5);
  tie_head(model);
  const gpt_config config = parse_gpt_spec("gpt2-tiny");
  write_gpt2_weights(dir.file("ours.safetensors"), gpt2_format::huggingface, config, model);
  // As openai-community/gpt2's file is: GPT2Model's names, the causal mask buffers beside, no metadata; bfloat16.
  const safetensors_file ours = read_safetensors(dir.file("ours.safetensors"));
  std::map<std::string, tensor> theirs;
  for (const auto& [name, t] : ours.tensors) theirs[name.substr(std::string("transformer.").size())] = t.astype(dtype::bfloat16);
  for (int i = 0; i < 2; ++i) theirs["h." + std::to_string(i) + ".attn.bias"] = zeros({1, 1, 64, 64});
  std::filesystem::create_directories(dir.file("hub"));
  const std::string file = dir.file("hub/model.safetensors");
  write_safetensors(file, theirs);
  gpt2_file_info info = read_gpt2_info(file);
  CHECK(info.heads_from == "GPT-2's head width of 64");
  CHECK(info.config.heads == 1);
  std::ofstream(dir.file("hub/config.json")) << R"({"model_type": "gpt2", "n_head": 4, "n_embd": 64,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05})";
  info = read_gpt2_info(file);
  CHECK(info.heads_from == "config.json");
  CHECK(info.config.heads == 4);
  CHECK(info.tied);
  // The bfloat16 weights widened: the model's own weights rounded to bfloat16.
  const sequential back = loaded("gpt2-tiny", file);
  sequential rounded = model.clone();
  for (const parameter& p : rounded.parameters()) *p.value = p.value->astype(dtype::bfloat16).astype(dtype::float32);
  const tensor ids = token_ids(config.vocabulary);
  CHECK(back.forward(ids) == rounded.forward(ids));

  std::ofstream(dir.file("hub/config.json")) << R"({"n_head": 4, "activation_function": "relu"})";
  CHECK(contains(error_of([&] { read_gpt2_info(file); }), "activation_function \"relu\" is not GPT-2's tanh GELU"));
}

TEST_CASE("gpt2 weights: llm.c's bfloat16 version 5 reads as the float32 version 3 rounded") {
  scratch_dir dir{"gpt2_v5"};
  sequential model = gpt_model("gpt2-tiny", 6);
  tie_head(model);
  const gpt_config config = parse_gpt_spec("gpt2-tiny");
  write_gpt2_weights(dir.file("v3.bin"), gpt2_format::llmc, config, model);
  // train_gpt2.py's write_bf16: the upper halves, rounded to nearest even; the header's version 5.
  numpy(dir, R"(
b = open(d + 'v3.bin', 'rb').read()
h = np.frombuffer(b[:1024], dtype='<i4').copy(); h[1] = 5
u = np.frombuffer(b[1024:], dtype='<u4').astype(np.uint64)
bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype('<u2')
open(d + 'v5.bin', 'wb').write(h.tobytes() + bf.tobytes())
)");
  const gpt2_file_info info = read_gpt2_info(dir.file("v5.bin"));
  CHECK(info.llmc_version == 5);
  const sequential back = loaded("gpt2-tiny", dir.file("v5.bin"));
  sequential rounded = model.clone();
  for (const parameter& p : rounded.parameters()) *p.value = p.value->astype(dtype::bfloat16).astype(dtype::float32);
  const tensor ids = token_ids(config.vocabulary);
  CHECK(back.forward(ids) == rounded.forward(ids));
}

TEST_CASE("gpt2 weights: bad files and models are refused, naming what and where") {
  scratch_dir dir{"gpt2_bad"};
  sequential model = gpt_model("gpt2-tiny", 7);
  tie_head(model);
  const gpt_config config = parse_gpt_spec("gpt2-tiny");
  const std::string bin = dir.file("good.bin"), st = dir.file("good.safetensors");
  write_gpt2_weights(bin, gpt2_format::llmc, config, model);
  write_gpt2_weights(st, gpt2_format::huggingface, config, model);
  const std::string good = read_bytes(bin);
  const auto patched = [&](std::size_t field, std::int32_t value) {
    std::string bytes = good;
    std::memcpy(bytes.data() + 4 * field, &value, 4);
    write_bytes(dir.file("bad.bin"), bytes);
    return error_of([&] { read_gpt2_info(dir.file("bad.bin")); });
  };

  SUBCASE("wrong magic: what it is and what was expected") {
    const std::string why = patched(0, 20240520);
    CHECK(contains(why, "llm.c checkpoint " + dir.file("bad.bin")));
    CHECK(contains(why, "wrong magic 20240520 (llm.c's GPT-2 token data file)"));
    CHECK(contains(why, "starts with 20240326"));
    write_bytes(dir.file("text.bin"), "hello, world: not weights at all");
    CHECK(contains(error_of([&] { read_gpt2_info(dir.file("text.bin")); }),
                   "neither an llm.c GPT-2 checkpoint (int32 magic 20240326) nor a safetensors file"));
    CHECK(contains(error_of([&] { read_gpt2_info(dir.file("none.bin")); }), "no such file"));
  }
  SUBCASE("unsupported version, a header field out of range") {
    CHECK(contains(patched(1, 4), "version 4 is not supported: 3 (float32 tensors) and 5 (bfloat16 tensors) are"));
    CHECK(contains(patched(4, 0), "header field 4 (layers) is 0, not a positive count"));
    CHECK(contains(patched(5, 5), "heads 5 do not divide channels 64"));
  }
  SUBCASE("a file shorter or longer than its header says") {
    write_bytes(dir.file("short.bin"), good.substr(0, good.size() - 8));
    const std::string why = error_of([&] { load_gpt2_weights(dir.file("short.bin"), model, config); });
    CHECK(contains(why, "the file is " + std::to_string(good.size() - 8) + " bytes, shorter than the " +
                            std::to_string(good.size())));
    CHECK(contains(why, "truncated?"));
    write_bytes(dir.file("long.bin"), good + "xx");
    CHECK(contains(error_of([&] { read_gpt2_info(dir.file("long.bin")); }), "longer than the"));
    write_bytes(dir.file("tiny.bin"), good.substr(0, 100));
    CHECK(contains(error_of([&] { read_gpt2_info(dir.file("tiny.bin")); }), "shorter than llm.c's 1024-byte header"));
  }
  SUBCASE("a checkpoint of another shape than the model: the fields named") {
    const std::string spec = "gpt2-tiny:layers=3,dim=128";
    sequential other = sequential::from_spec(spec);
    const tensor before = *other.parameters()[0].value;
    for (const std::string& file : {bin, st}) {
      const std::string why = error_of([&] { load_gpt2_weights(file, other, parse_gpt_spec(spec)); });
      CHECK(contains(why, file + " holds a model of another shape than gpt:layers=3,dim=128,"));
      CHECK(contains(why, "layers 2 vs 3, dim 64 vs 128, mlp 256 vs 512 (the file's vs the model's)"));
    }
    CHECK(*other.parameters()[0].value == before);  // nothing changed
    // A shorter context takes wpe's first rows; a longer one is refused.
    const tensor ids = token_ids(50257);
    CHECK(loaded("gpt2-tiny:context=16", bin).forward(ids) == model.forward(ids));
    CHECK(contains(error_of([&] { loaded("gpt2-tiny:context=128", bin); }), "context 64 vs 128"));
  }
  SUBCASE("a safetensors tensor missing, of the wrong shape, or unexpected: named") {
    safetensors_file f = read_safetensors(st);
    std::map<std::string, tensor> t = f.tensors;
    t.erase("transformer.h.1.mlp.c_fc.bias");
    write_safetensors(dir.file("missing.safetensors"), t, f.metadata);
    CHECK(contains(error_of([&] { load_gpt2_weights(dir.file("missing.safetensors"), model, config); }),
                   "Hugging Face GPT-2 file " + dir.file("missing.safetensors") + ": missing tensor h.1.mlp.c_fc.bias"));
    t = f.tensors;
    t["transformer.h.0.attn.c_proj.weight"] = zeros({64, 63});
    write_safetensors(dir.file("shape.safetensors"), t, f.metadata);
    CHECK(contains(error_of([&] { read_gpt2_info(dir.file("shape.safetensors")); }),
                   "tensor transformer.h.0.attn.c_proj.weight has shape (64, 63)"));
    t = f.tensors;
    t["transformer.h.0.attn.rotary"] = zeros({4});
    write_safetensors(dir.file("extra.safetensors"), t, f.metadata);
    CHECK(contains(error_of([&] { read_gpt2_info(dir.file("extra.safetensors")); }),
                   "unexpected tensor transformer.h.0.attn.rotary"));
    t = f.tensors;
    t["wte.weight"] = t.at("transformer.wte.weight");
    write_safetensors(dir.file("twice.safetensors"), t, f.metadata);
    CHECK(contains(error_of([&] { read_gpt2_info(dir.file("twice.safetensors")); }),
                   "tensor wte.weight is given twice, as transformer.wte.weight and wte.weight"));
    std::map<std::string, tensor> other{{"0.weight", zeros({4, 4})}};
    write_safetensors(dir.file("ours.safetensors"), other, {{"format", "actorpipe-checkpoint-1"}});
    CHECK(contains(error_of([&] { read_gpt2_info(dir.file("ours.safetensors")); }), "this is an actorpipe file"));
  }
  SUBCASE("a model GPT-2's files cannot hold: the keys named") {
    for (const std::string spec : {"gpt2-tiny:norm=rms", "gpt2-tiny:gelu=exact", "gpt2-tiny:bias=0", "gpt2-tiny:pos=rope",
                                   "gpt2-tiny:kv_heads=2", "gpt2-tiny:act=swiglu"}) {
      CAPTURE(spec);
      sequential m = sequential::from_spec(spec);
      const std::string key = spec.substr(spec.find(':') + 1);
      const std::string why = error_of([&] { write_gpt2_weights(dir.file("x.safetensors"), gpt2_format::huggingface, parse_gpt_spec(spec), m); });
      CHECK(contains(why, "is not GPT-2's architecture"));
      CHECK(contains(why, key + ": GPT-2"));
      CHECK(contains(error_of([&] { load_gpt2_weights(st, m, parse_gpt_spec(spec)); }), key + ": GPT-2"));
    }
    sequential wide = sequential::from_spec("gpt2-tiny:mlp=128");
    CHECK(contains(error_of([&] { write_gpt2_weights(dir.file("x.bin"), gpt2_format::llmc, parse_gpt_spec("gpt2-tiny:mlp=128"), wide); }),
                   "mlp=128: llm.c's format holds an MLP of 4 x dim (mlp=256)"));
    CHECK(contains(error_of([&] { write_gpt2_weights(dir.file("x.bin"), gpt2_format::llmc, parse_gpt_spec("gpt2-tiny:layers=3"), model); }),
                   "the model is not the whole model gpt:layers=3"));
    CHECK(contains(error_of([] { gpt2_format_for_path("weights.pt"); }), "must end in .bin"));
    CHECK_FALSE(std::filesystem::exists(dir.file("x.bin")));
  }
}
