// An action prints as PyTorch's "1F0" (chunk, op letter, microbatch) and parses back exactly.
#include <cctype>
#include <stdexcept>

#include "schedule/schedule.hpp"

namespace ap {

std::string to_string(const action& a) {
  if (is_reduction(a)) return std::to_string(a.chunk) + op_letter(a.kind);  // Note [gradient reduction]
  return std::to_string(a.chunk) + op_letter(a.kind) +
         (a.microbatch == all_microbatches ? std::string("*") : std::to_string(a.microbatch));
}

namespace {

// Reads the digits at text[pos...]; at most 9 of them so that the value fits an int.
int read_number(const std::string& text, std::size_t& pos, const char* what) {
  const std::size_t begin = pos;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == begin)
    throw std::invalid_argument("action '" + text + "': missing " + what +
                                " number (expected <chunk><F|B|I|W><microbatch>, e.g. 1F0, 1B* for a whole-batch backward, or <chunk>R)");
  if (pos - begin > 9)
    throw std::invalid_argument("action '" + text + "': " + what + " number is too large");
  return std::stoi(text.substr(begin, pos - begin));
}

}  // namespace

action parse_action(const std::string& text, int stage) {
  std::size_t pos = 0;
  action a;
  a.stage = stage;
  a.chunk = read_number(text, pos, "chunk");
  if (pos == text.size())
    throw std::invalid_argument("action '" + text + "': missing op letter (expected F, B, I, W or R)");
  const char letter = text[pos++];
  const std::optional<op> kind = op_of_letter(letter);
  if (!kind)
    throw std::invalid_argument("action '" + text + "': unknown op letter '" + std::string(1, letter) +
                                "' (expected F, B, I, W or R)");
  a.kind = *kind;
  if (a.kind == op::reduce_grad) {  // the whole batch's, no microbatch (Note [gradient reduction])
    if (pos != text.size())
      throw std::invalid_argument("action '" + text + "': a gradient reduction R takes no microbatch (e.g. 1R)");
    a.microbatch = all_microbatches;
    return a;
  }
  if (pos < text.size() && text[pos] == '*') {  // Note [sync-backward]
    if (a.kind != op::backward)
      throw std::invalid_argument("action '" + text + "': only a full backward B runs all microbatches ('*')");
    a.microbatch = all_microbatches;
    ++pos;
  } else {
    a.microbatch = read_number(text, pos, "microbatch");
  }
  if (pos != text.size())
    throw std::invalid_argument("action '" + text + "': unexpected '" + text.substr(pos) +
                                "' after the microbatch number");
  return a;
}

}  // namespace ap
