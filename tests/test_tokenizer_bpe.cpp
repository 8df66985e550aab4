// GPT-2's byte-level BPE on a small vocabulary written in the test: encodings checked by hand, GPT-2's
// pre-tokenisation, the byte round trip on any bytes, and every refusal of vocab.json and merges.txt with the
// file and the line.
#include <doctest/doctest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer_files.hpp"

using namespace ap;
using ids = std::vector<std::uint32_t>;
using pieces = std::vector<std::string>;

namespace {

struct small_tokenizer {
  test::scratch_dir dir{"tokenizer_bpe"};
  std::string vocab = (dir.path / "vocab.json").string(), merges = (dir.path / "merges.txt").string();
  small_tokenizer() {
    test::write_vocab(vocab, test::small_vocab());
    test::write_merges(merges, test::small_merge_lines());
  }
  bpe_tokenizer load() const { return bpe_tokenizer::from_files(vocab, merges); }
};

pieces cut(const std::string& text) {
  pieces out;
  for (const std::string_view p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

// The message of the std::runtime_error that loading throws.
std::string refusal(const small_tokenizer& t) {
  try {
    t.load();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("the files were accepted");
  return "";
}

}  // namespace

TEST_CASE("GPT-2's byte alphabet: printable bytes stand for themselves, the rest from U+0100") {
  CHECK(gpt2_byte_char('a') == "a");
  CHECK(gpt2_byte_char('!') == "!");
  CHECK(gpt2_byte_char(' ') == "Ġ");     // U+0120
  CHECK(gpt2_byte_char('\n') == "Ċ");    // U+010A
  CHECK(gpt2_byte_char(0) == "Ā");       // U+0100
  CHECK(gpt2_byte_char(0xAD) == "Ń");    // U+0143, the last
  CHECK(gpt2_byte_char(0xE9) == "é");
  CHECK(gpt2_token_bytes("Ġthe") == std::string(" the"));
  CHECK(gpt2_token_bytes("âĢĻ") == std::string("\xE2\x80\x99"));  // GPT-2's right single quote
  CHECK(!gpt2_token_bytes(" the"));      // a raw space is outside the alphabet
  CHECK(!gpt2_token_bytes("\xFF"));
}

TEST_CASE("GPT-2's pre-tokenisation: contractions, letters, digits, punctuation, whitespace") {
  CHECK(cut("Hello world") == pieces{"Hello", " world"});
  CHECK(cut("I'm don't you'll we've they're she'd it's") ==
        pieces{"I", "'m", " don", "'t", " you", "'ll", " we", "'ve", " they", "'re", " she", "'d", " it", "'s"});
  CHECK(cut("abc123 4567x") == pieces{"abc", "123", " 4567", "x"});
  CHECK(cut("hello, world!!") == pieces{"hello", ",", " world", "!!"});
  CHECK(cut("a  b") == pieces{"a", " ", " b"});           // \s+(?!\S) leaves the last space to the word
  CHECK(cut("a\n\n b") == pieces{"a", "\n\n", " b"});
  CHECK(cut("end   ") == pieces{"end", "   "});
  CHECK(cut("\t\t") == pieces{"\t\t"});
  CHECK(cut("héllo wörld") == pieces{"héllo", " wörld"});  // \p{L} beyond ASCII
  CHECK(cut("你好 ٣٤") == pieces{"你好", " ٣٤"});            // letters and digits of other scripts
  CHECK(cut(" ...") == pieces{" ..."});
  CHECK(cut("'hello'") == pieces{"'", "hello", "'"});
  CHECK(cut("").empty());
}

TEST_CASE("pre-tokenisation cuts invalid UTF-8 into single bytes, and the pieces make up the text") {
  CHECK(cut("a\xFF" "b") == pieces{"a", "\xFF", "b"});
  CHECK(cut("x\xC3") == pieces{"x", "\xC3"});             // a sequence cut short at the end
  CHECK(cut("\x80\x80 hi") == pieces{"\x80", "\x80", " hi"});
  CHECK(cut("caf\xC3\xA9\xE9") == pieces{"caf\xC3\xA9", "\xE9"});
}

TEST_CASE("encodings checked by hand: merges apply by rank, every occurrence left to right") {
  small_tokenizer files;
  const bpe_tokenizer t = files.load();
  CHECK(t.vocab_size() == 264);
  CHECK(t.merge_count() == 7);
  CHECK(t.encode("the") == ids{'t', 257});               // t h e: "h e" (rank 1); "t he" is no merge
  CHECK(t.encode(" the") == ids{258});                    // "Ġ t" (0), "h e" (1), then "Ġt he" (2)
  CHECK(t.encode(" thing") == ids{256, 'h', 260});        // "Ġ t", "i n", then "in g"
  CHECK(t.encode("  the") == ids{' ', 258});              // pieces " " and " the"
  CHECK(t.encode("123") == ids{262, '3'});
  CHECK(t.encode("end   ") == ids{'e', 'n', 'd', 261, ' '});  // "Ġ Ġ" left to right: ĠĠ then Ġ
  CHECK(t.encode("the the") == ids{'t', 257, 258});
  CHECK(t.encode("") == ids{});
  CHECK(t.encode("<|endoftext|>") == ids{'<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>'});
  CHECK(t.find_token("<|endoftext|>") == test::small_end_of_text);
  CHECK(t.find_token("Ġthe") == 258u);
  CHECK(!t.find_token("Ġthey"));
  CHECK(t.decode({258, 256, 'h', 260}) == " the thing");
  CHECK(t.token_bytes(261) == "  ");
  CHECK_THROWS_AS(t.decode({264}), std::out_of_range);
}

TEST_CASE("decode(encode(text)) == text for random bytes: invalid UTF-8, whitespace runs, contractions") {
  small_tokenizer files;
  const bpe_tokenizer t = files.load();
  std::mt19937 random(7);
  const std::vector<std::string> parts = {" ", "  ", "\t", "\n", "\r\n", "the", " the", "ing", "'s", "'ll", "12",
                                          "3", "é", "你", "\xFF", "\xC3", "\x80", "\xE2\x80", "!", "?!", "\0"};
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 40)(random);
    for (int i = 0; i < n; ++i) {
      if (random() % 3 == 0) text += static_cast<char>(random() % 256);  // any byte
      else text += parts[random() % parts.size()];
    }
    const ids encoded = t.encode(text);
    REQUIRE(t.decode(encoded) == text);
    std::string joined;
    for (const std::string_view p : gpt2_pretokenize(text)) joined += p;
    REQUIRE(joined == text);
  }
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  CHECK(t.decode(t.encode(every_byte)) == every_byte);
  const std::string spaces(100000, ' ');  // one long whitespace run
  CHECK(t.decode(t.encode(spaces)) == spaces);
  CHECK(t.encode(spaces).size() == 50000);
}

TEST_CASE("vocab.json refusals name the file and the line") {
  small_tokenizer files;
  auto entries = test::small_vocab();
  SUBCASE("not JSON") {
    std::ofstream(files.vocab) << "{\n\"a\": 1,\n";
    const std::string e = refusal(files);
    CHECK(test::contains(e, files.vocab));
    CHECK(test::contains(e, "not JSON"));
    CHECK(test::contains(e, "line 3"));
  }
  SUBCASE("not an object") {
    std::ofstream(files.vocab) << "[1, 2]\n";
    const std::string e = refusal(files);
    CHECK(test::contains(e, files.vocab));
    CHECK(test::contains(e, "expected a JSON object of token -> id, got array"));
  }
  SUBCASE("a negative id") {
    std::ofstream(files.vocab) << "{\n\"a\": 0,\n\"b\": -4\n}\n";
    const std::string e = refusal(files);
    CHECK(test::contains(e, files.vocab + " line 3: token \"b\": its id -4 is not a non-negative integer"));
  }
  SUBCASE("an id that is not an integer") {
    std::ofstream(files.vocab) << "{\n\"a\": 0,\n\"b\": 1,\n\"c\": \"2\"\n}\n";
    CHECK(test::contains(refusal(files), files.vocab + " line 4: token \"c\": its id \"2\" is not a non-negative integer"));
    std::ofstream(files.vocab) << "{\n\"a\": 1.5\n}\n";
    CHECK(test::contains(refusal(files), files.vocab + " line 2: token \"a\": its id 1.5"));
  }
  SUBCASE("two tokens of one id") {
    entries[256].second = 7;  // entry 256 ("Ġt") takes the id of byte 7
    test::write_vocab(files.vocab, entries);
    const std::string e = refusal(files);
    CHECK(test::contains(e, files.vocab + " line 258: token \"Ġt\": its id 7 is also the id of \"ć\""));
  }
  SUBCASE("a token outside GPT-2's alphabet") {
    entries.emplace_back("a b", 300);  // a raw space
    test::write_vocab(files.vocab, entries);
    CHECK(test::contains(refusal(files), files.vocab + " line 266: token \"a b\": holds a character outside"));
  }
  SUBCASE("a byte token missing") {
    entries.erase(entries.begin() + 'q');
    test::write_vocab(files.vocab, entries);
    const std::string e = refusal(files);
    CHECK(test::contains(e, files.vocab));
    CHECK(test::contains(e, "lacks the token of byte 0x71 (\"q\")"));
  }
  SUBCASE("a file that cannot be read") {
    files.vocab = (files.dir.path / "missing.json").string();
    CHECK(test::contains(refusal(files), files.vocab + ": cannot be read"));
  }
}

TEST_CASE("merges.txt refusals name the file and the line") {
  small_tokenizer files;
  auto lines = test::small_merge_lines();
  SUBCASE("a line that is not two tokens") {
    lines.insert(lines.begin() + 2, "Ġt he x");
    test::write_merges(files.merges, lines);
    CHECK(test::contains(refusal(files), files.merges + " line 4: expected two tokens separated by one space"));
    lines[2] = "Ġthe";
    test::write_merges(files.merges, lines);
    CHECK(test::contains(refusal(files), files.merges + " line 4: expected two tokens"));
    lines[2] = "Ġt  he";
    test::write_merges(files.merges, lines);
    CHECK(test::contains(refusal(files), files.merges + " line 4: expected two tokens"));
  }
  SUBCASE("a merge of a token the vocabulary lacks") {
    lines.push_back("Ġthe y");
    lines.push_back("Ġx y");
    test::write_merges(files.merges, lines);
    CHECK(test::contains(refusal(files), files.merges + " line 9: the merge \"Ġthe y\" makes \"Ġthey\", which the vocabulary " + files.vocab + " lacks"));
    lines.pop_back();
    lines.back() = "Ġxyz y";
    test::write_merges(files.merges, lines);
    CHECK(test::contains(refusal(files), files.merges + " line 9: the merge \"Ġxyz y\" names \"Ġxyz\", which the vocabulary"));
  }
  SUBCASE("a file that cannot be read") {
    files.merges = (files.dir.path / "missing.txt").string();
    CHECK(test::contains(refusal(files), files.merges + ": cannot be read"));
  }
  SUBCASE("no #version line, CRLF line ends and a repeated merge are read") {
    std::ofstream(files.merges, std::ios::binary) << "Ġ t\r\nh e\r\nĠt he\r\nh e\r\n";
    const bpe_tokenizer t = files.load();
    CHECK(t.merge_count() == 3);
    CHECK(t.encode(" the") == ids{258});
  }
}
