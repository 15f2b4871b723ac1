// A Hugging Face `tokenizer.json` loader and byte-level BPE tokenizer.
//
// Supported (anything else throws luminal::Error naming the problem and the file):
//   model          BPE (vocab, merges as "a b" strings or ["a", "b"] pairs, ignore_merges,
//                  byte_fallback, unk_token)
//   normalizer     null, NFC, NFD, NFKC, NFKD, Sequence of those
//   pre_tokenizer  ByteLevel (add_prefix_space, use_regex -> GPT-2 pattern), Split (Regex or
//                  String pattern, all behaviours, invert), Digits, Sequence of those
//   post_processor TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence
//   decoder        ByteLevel
//   added tokens   matched before pre-tokenization (leftmost-longest), honoring special,
//                  normalized, lstrip, rstrip and single_word
// The pre-tokenizer regexes are run by PCRE2 (UTF + UCP, JIT when available), so the
// file's own pattern (Llama 3, Qwen 2/3, GPT-2...) is used verbatim.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace luminal::models {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

// The chat-template families apply_chat_template knows, detected from the
// `chat_template` string of tokenizer_config.json (or chat_template.jinja).
enum class ChatTemplateFamily { None, Llama3, ChatML, Gemma };

class Tokenizer {
 public:
  // Load a tokenizer.json file, or a directory holding one. tokenizer_config.json next to
  // it (optional) provides the chat template and bos/eos names.
  static Tokenizer from_file(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text -> ids. Added/special tokens written in the text are always recognised;
  // add_special_tokens only controls the post-processor (e.g. the BOS of Llama 3).
  // Throws luminal::Error if text is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids -> text (invalid UTF-8 byte sequences become U+FFFD, as in `tokenizers`).
  // Throws luminal::Error for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Id of a token (vocabulary entry or added token) given its exact string.
  std::optional<int32_t> token_id(std::string_view token) const;
  // String of a token id (its raw vocabulary form, e.g. "Ġthe"); nullopt when out of range.
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // One past the largest id (vocabulary + added tokens).
  int32_t vocab_size() const;

  // bos/eos from tokenizer_config.json when present (else nullopt).
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;

  // Render a conversation with the chat-template family of tokenizer_config.json.
  // The result already contains the template's BOS (if any): encode it with
  // add_special_tokens = false. Throws luminal::Error when there is no template or
  // its family is not one of Llama 3, ChatML (Qwen) and Gemma.
  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const;
  ChatTemplateFamily chat_template_family() const;

  const std::string& path() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace luminal::models
