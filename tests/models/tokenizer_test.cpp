#include "luminal/models/tokenizer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "luminal/error.hpp"

namespace fs = std::filesystem;
using luminal::models::ChatMessage;
using luminal::models::ChatTemplateFamily;
using luminal::models::Tokenizer;

namespace {

const std::string kDefault = std::string(LUMINAL_SOURCE_DIR) + "/models/default/tokenizer.json";

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::path(testing::TempDir()) / ("luminal_tok_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

// Expect `fn` to throw luminal::Error whose message contains every needle.
template <class F>
void expect_error(F fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected luminal::Error";
  } catch (const luminal::Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg << "\nmissing: " << n;
  }
}

// A hand-written byte-level-free BPE: merges given in both accepted forms.
std::string tiny_tokenizer_json(bool array_merges) {
  const std::string merges = array_merges ? R"([["b","c"],["a","bc"]])" : R"(["b c", "a bc"])";
  return R"({"version":"1.0","added_tokens":[{"id":6,"content":"<eos>","special":true,"lstrip":false,
    "rstrip":false,"normalized":false,"single_word":false}],"normalizer":null,"pre_tokenizer":null,
    "post_processor":null,"decoder":null,
    "model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5},"merges":)" +
         merges + "}}";
}

}  // namespace

TEST(Tokenizer, LoadsDefaultModelTokenizer) {
  const Tokenizer tok = Tokenizer::from_file(kDefault);
  EXPECT_EQ(tok.vocab_size(), 2048);
  ASSERT_TRUE(tok.token_id("<|begin_of_text|>").has_value());
  ASSERT_TRUE(tok.token_id("<|end_of_text|>").has_value());
  EXPECT_TRUE(tok.is_special(*tok.token_id("<|begin_of_text|>")));
  EXPECT_EQ(tok.bos_token_id(), tok.token_id("<|begin_of_text|>"));
  EXPECT_EQ(tok.eos_token_id(), tok.token_id("<|end_of_text|>"));
  // A directory works too.
  const Tokenizer dir_tok = Tokenizer::from_file(std::string(LUMINAL_SOURCE_DIR) + "/models/default");
  EXPECT_EQ(dir_tok.vocab_size(), tok.vocab_size());
}

TEST(Tokenizer, DefaultRoundTrips) {
  const Tokenizer tok = Tokenizer::from_file(kDefault);
  const std::vector<std::string> texts = {
      "Hello, world!",
      "It's a truth universally acknowledged, that 1234567 fortunes don't lie.\n\t-- Anonymous",
      "  multiple   spaces\n\n\nand\ttabs  ",
      "Caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x8E\x89",  // Café naïve 中文 🎉
      "",
  };
  const int32_t bos = *tok.token_id("<|begin_of_text|>");
  for (const auto& t : texts) {
    const auto ids = tok.encode(t);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), bos) << "post-processor adds BOS";
    EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), t);
    EXPECT_EQ(tok.decode(ids), "<|begin_of_text|>" + t);
    const auto raw = tok.encode(t, /*add_special_tokens=*/false);
    EXPECT_EQ(raw.size() + 1, ids.size());
    EXPECT_EQ(tok.decode(raw), t);
  }
}

TEST(Tokenizer, SpecialTokensInTextAreRecognised) {
  const Tokenizer tok = Tokenizer::from_file(kDefault);
  const int32_t eos = *tok.token_id("<|end_of_text|>");
  const auto ids = tok.encode("one<|end_of_text|>two", false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eos), 1);
  EXPECT_EQ(tok.decode(ids), "one<|end_of_text|>two");
  EXPECT_EQ(tok.decode(ids, true), "onetwo");
}

TEST(Tokenizer, MergesInStringAndArrayForm) {
  for (bool array_form : {false, true}) {
    const fs::path d = temp_dir(array_form ? "tiny_array" : "tiny_string");
    write(d / "tokenizer.json", tiny_tokenizer_json(array_form));
    const Tokenizer tok = Tokenizer::from_file((d / "tokenizer.json").string());
    EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{5}));
    EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{0, 1}));  // no "a b" merge
    EXPECT_EQ(tok.encode("abc<eos>bc"), (std::vector<int32_t>{5, 6, 4}));
    EXPECT_EQ(tok.vocab_size(), 7);
  }
}

TEST(Tokenizer, MissingFileIsAnError) {
  expect_error([] { Tokenizer::from_file("/nonexistent/dir/tokenizer.json"); },
               {"/nonexistent/dir/tokenizer.json", "not found"});
}

TEST(Tokenizer, MalformedJsonIsAnError) {
  const fs::path d = temp_dir("malformed");
  write(d / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  expect_error([&] { Tokenizer::from_file((d / "tokenizer.json").string()); },
               {(d / "tokenizer.json").string(), "malformed JSON"});
}

TEST(Tokenizer, UnsupportedComponentsAreErrors) {
  const fs::path d = temp_dir("unsupported");
  const auto p = (d / "tokenizer.json").string();
  write(p, R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  expect_error([&] { Tokenizer::from_file(p); }, {p, "unsupported model type", "WordPiece"});
  write(p, R"({"normalizer": {"type": "Lowercase"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  expect_error([&] { Tokenizer::from_file(p); }, {p, "unsupported normalizer", "Lowercase"});
  write(p, R"({"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  expect_error([&] { Tokenizer::from_file(p); }, {p, "unsupported pre_tokenizer", "Metaspace"});
  write(p, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})");
  expect_error([&] { Tokenizer::from_file(p); }, {p, "missing from the vocabulary"});
  write(p, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [42]}})");
  expect_error([&] { Tokenizer::from_file(p); }, {p, "merge"});
  write(p, R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"},
               "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  expect_error([&] { Tokenizer::from_file(p); }, {p, "bad regex"});
  write(p, R"([1, 2, 3])");
  expect_error([&] { Tokenizer::from_file(p); }, {p});
}

TEST(Tokenizer, BadInputIsAnError) {
  const Tokenizer tok = Tokenizer::from_file(kDefault);
  expect_error([&] { tok.encode("bad \xFF byte"); }, {"not valid UTF-8"});
  const std::vector<int32_t> ids = {1, 99999};
  expect_error([&] { tok.decode(ids); }, {"99999"});
}

TEST(Tokenizer, ChatTemplates) {
  const fs::path d = temp_dir("chat");
  fs::copy_file(kDefault, d / "tokenizer.json");
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", " Hi! "}, {"assistant", "Hello."}};

  // No template at all.
  {
    const Tokenizer tok = Tokenizer::from_file(d.string());
    EXPECT_EQ(tok.chat_template_family(), ChatTemplateFamily::None);
    expect_error([&] { tok.apply_chat_template(msgs, true); }, {"no chat_template"});
  }
  // Llama 3.
  write(d / "tokenizer_config.json",
        R"({"bos_token": "<|begin_of_text|>", "chat_template": "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>..."})");
  {
    const Tokenizer tok = Tokenizer::from_file(d.string());
    EXPECT_EQ(tok.chat_template_family(), ChatTemplateFamily::Llama3);
    EXPECT_EQ(tok.apply_chat_template(msgs, true),
              "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
  }
  // ChatML (Qwen 2) with a default system prompt.
  write(d / "tokenizer_config.json",
        R"({"chat_template": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"})");
  {
    const Tokenizer tok = Tokenizer::from_file(d.string());
    EXPECT_EQ(tok.chat_template_family(), ChatTemplateFamily::ChatML);
    EXPECT_EQ(tok.apply_chat_template({{"user", "Hi"}}, true),
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n");
    EXPECT_EQ(tok.apply_chat_template(msgs, false),
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi! <|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n");
  }
  // Gemma, with the template in chat_template.jinja.
  write(d / "tokenizer_config.json", R"({"bos_token": "<bos>"})");
  write(d / "chat_template.jinja", "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n...");
  {
    const Tokenizer tok = Tokenizer::from_file(d.string());
    EXPECT_EQ(tok.chat_template_family(), ChatTemplateFamily::Gemma);
    EXPECT_EQ(tok.apply_chat_template(msgs, true),
              "<bos><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
              "<start_of_turn>model\n");
  }
  // Unknown family.
  fs::remove(d / "chat_template.jinja");
  write(d / "tokenizer_config.json", R"({"chat_template": "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}"})");
  {
    const Tokenizer tok = Tokenizer::from_file(d.string());
    expect_error([&] { tok.apply_chat_template(msgs, true); }, {"unsupported chat template family"});
  }
  // Malformed config.
  write(d / "tokenizer_config.json", "{");
  expect_error([&] { Tokenizer::from_file(d.string()); }, {"tokenizer_config.json", "malformed JSON"});
}
