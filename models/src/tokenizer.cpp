#include "luminal/models/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "chat_template.hpp"
#include "luminal/error.hpp"
#include "unicode_util.hpp"

namespace luminal::models {

using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace detail;

namespace {

// GPT-2's reversible byte <-> printable-unicode mapping.
struct ByteMap {
  std::array<std::string, 256> byte_to_str;
  std::unordered_map<char32_t, uint8_t> cp_to_byte;
  ByteMap() {
    std::vector<int> bs;
    for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
    std::array<char32_t, 256> cp{};
    std::array<bool, 256> seen{};
    for (int b : bs) {
      cp[static_cast<size_t>(b)] = static_cast<char32_t>(b);
      seen[static_cast<size_t>(b)] = true;
    }
    char32_t n = 0;
    for (int b = 0; b < 256; ++b)
      if (!seen[static_cast<size_t>(b)]) cp[static_cast<size_t>(b)] = 256 + n++;
    for (int b = 0; b < 256; ++b) {
      utf8_append(byte_to_str[static_cast<size_t>(b)], cp[static_cast<size_t>(b)]);
      cp_to_byte[cp[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokStep {
  enum Kind { Split, ByteLevel, Digits } kind;
  std::shared_ptr<Regex> regex;  // Split, ByteLevel(use_regex), Digits
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;
};

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, single_word, normalized;
};

// Byte trie over added-token contents for leftmost-longest matching.
struct Trie {
  struct Node {
    std::map<unsigned char, int> next;
    int token = -1;  // index into the added-token list
  };
  std::vector<Node> nodes{1};
  bool empty() const { return nodes.size() == 1; }
  void insert(std::string_view s, int token) {
    int n = 0;
    for (unsigned char c : s) {
      auto it = nodes[static_cast<size_t>(n)].next.find(c);
      if (it == nodes[static_cast<size_t>(n)].next.end()) {
        nodes.emplace_back();
        const int id = static_cast<int>(nodes.size()) - 1;
        nodes[static_cast<size_t>(n)].next[c] = id;
        n = id;
      } else {
        n = it->second;
      }
    }
    if (nodes[static_cast<size_t>(n)].token < 0) nodes[static_cast<size_t>(n)].token = token;
  }
  // Non-overlapping leftmost-longest matches: (start, end, token index).
  std::vector<std::tuple<size_t, size_t, int>> find_all(std::string_view s) const {
    std::vector<std::tuple<size_t, size_t, int>> out;
    size_t i = 0;
    while (i < s.size()) {
      int n = 0, best = -1;
      size_t best_end = 0;
      for (size_t j = i; j < s.size(); ++j) {
        auto it = nodes[static_cast<size_t>(n)].next.find(static_cast<unsigned char>(s[j]));
        if (it == nodes[static_cast<size_t>(n)].next.end()) break;
        n = it->second;
        if (nodes[static_cast<size_t>(n)].token >= 0) {
          best = nodes[static_cast<size_t>(n)].token;
          best_end = j + 1;
        }
      }
      if (best >= 0) {
        out.emplace_back(i, best_end, best);
        i = best_end;
      } else {
        ++i;
      }
    }
    return out;
  }
};

// A piece of the input: raw text still to tokenize, or an already-recognised added token.
struct Piece {
  std::string text;
  int32_t id = -1;
};

enum class NormForm { NFC, NFD, NFKC, NFKD };

struct PostStep {
  enum Kind { Template, Noop, ClsSep } kind;
  std::vector<std::variant<int, std::vector<int32_t>>> items;  // Template: 0 = $A, else ids
  std::vector<int32_t> cls, sep;
};

}  // namespace

struct Tokenizer::Impl {
  std::string path;

  // BPE model.
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_tok;  // vocab + added tokens, indexed by id
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (a,b) -> (rank, new id)
  bool ignore_merges = false;
  bool byte_fallback = false;
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;

  std::vector<AddedToken> added;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::vector<bool> special_ids;  // by id
  Trie raw_trie, norm_trie;

  std::vector<NormForm> normalizers;
  std::vector<PreTokStep> pre;
  std::vector<PostStep> post;
  enum class Decoder { None, ByteLevel } decoder = Decoder::None;

  std::optional<int32_t> bos_id, eos_id;
  std::string chat_template;
  ChatTemplateFamily family = ChatTemplateFamily::None;
  std::string bos_token, eos_token;

  std::shared_ptr<Regex> word_char;  // for single_word added tokens

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  [[noreturn]] void bad(const std::string& what) const { fail("tokenizer ", path, ": ", what); }

  void load_model(const json& m);
  void load_added(const json& a);
  void load_normalizer(const json& n);
  void load_pre_tokenizer(const json& p);
  void load_post_processor(const json& p);
  void load_decoder(const json& d);
  void load_config(const fs::path& dir);

  std::string normalize(std::string s) const;
  std::vector<Piece> split_added(std::vector<Piece> pieces, const Trie& trie) const;
  std::vector<std::string> pre_tokenize(const std::string& s) const;
  void bpe(const std::string& word, std::vector<int32_t>& out) const;
  void bpe_uncached(const std::string& word, std::vector<int32_t>& out) const;
};

// ------------------------------------------------------------------------------------
// Loading
// ------------------------------------------------------------------------------------

void Tokenizer::Impl::load_model(const json& m) {
  if (!m.is_object()) bad("missing \"model\" object");
  const std::string type = m.value("type", std::string("BPE"));
  if (type != "BPE") bad("unsupported model type \"" + type + "\" (only BPE is supported)");
  if (m.contains("continuing_subword_prefix") && m["continuing_subword_prefix"].is_string() &&
      !m["continuing_subword_prefix"].get<std::string>().empty())
    bad("unsupported BPE option continuing_subword_prefix");
  if (m.contains("end_of_word_suffix") && m["end_of_word_suffix"].is_string() &&
      !m["end_of_word_suffix"].get<std::string>().empty())
    bad("unsupported BPE option end_of_word_suffix");
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0.0)
    bad("unsupported BPE option dropout (must be null for deterministic encoding)");
  ignore_merges = m.value("ignore_merges", false);
  byte_fallback = m.value("byte_fallback", false);
  fuse_unk = m.value("fuse_unk", false);

  if (!m.contains("vocab") || !m["vocab"].is_object()) bad("BPE model has no \"vocab\" object");
  int32_t max_id = -1;
  for (const auto& [tok, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      bad("vocab entry \"" + tok + "\" has an invalid id");
    const auto i = id.get<int32_t>();
    vocab.emplace(tok, i);
    max_id = std::max(max_id, i);
  }
  id_to_tok.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [tok, id] : vocab) id_to_tok[static_cast<size_t>(id)] = tok;

  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = vocab.find(m["unk_token"].get<std::string>());
    if (it != vocab.end()) unk_id = it->second;
  }

  const json& mj = m.contains("merges") ? m["merges"] : json::array();
  if (!mj.is_array()) bad("BPE \"merges\" is not an array");
  merges.reserve(mj.size() * 2);
  int32_t rank = 0;
  for (const auto& e : mj) {
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ', 1);  // the first token is never empty
      if (sp == std::string::npos) bad("merge \"" + s + "\" is not of the form \"a b\"");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      bad("merge #" + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end())
      bad("merge \"" + a + " " + b + "\" uses a token missing from the vocabulary");
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) |
                         static_cast<uint32_t>(ib->second);
    merges.emplace(key, std::make_pair(rank, iab->second));
    ++rank;
  }
}

void Tokenizer::Impl::load_added(const json& a) {
  if (a.is_null()) return;
  if (!a.is_array()) bad("\"added_tokens\" is not an array");
  for (const auto& t : a) {
    AddedToken tok{t.at("id").get<int32_t>(),  t.at("content").get<std::string>(),
                   t.value("special", false),   t.value("lstrip", false),
                   t.value("rstrip", false),    t.value("single_word", false),
                   t.value("normalized", false)};
    if (tok.id < 0) bad("added token \"" + tok.content + "\" has a negative id");
    if (tok.content.empty()) bad("added token with id " + std::to_string(tok.id) + " is empty");
    if (static_cast<size_t>(tok.id) >= id_to_tok.size()) id_to_tok.resize(static_cast<size_t>(tok.id) + 1);
    id_to_tok[static_cast<size_t>(tok.id)] = tok.content;
    added_by_content[tok.content] = tok.id;
    added.push_back(std::move(tok));
  }
  special_ids.assign(id_to_tok.size(), false);
  for (const auto& t : added)
    if (t.special) special_ids[static_cast<size_t>(t.id)] = true;
}

void Tokenizer::Impl::load_normalizer(const json& n) {
  if (n.is_null()) return;
  const std::string type = n.value("type", std::string());
  if (type == "Sequence") {
    for (const auto& s : n.at("normalizers")) load_normalizer(s);
  } else if (type == "NFC") {
    normalizers.push_back(NormForm::NFC);
  } else if (type == "NFD") {
    normalizers.push_back(NormForm::NFD);
  } else if (type == "NFKC") {
    normalizers.push_back(NormForm::NFKC);
  } else if (type == "NFKD") {
    normalizers.push_back(NormForm::NFKD);
  } else {
    bad("unsupported normalizer \"" + type + "\" (supported: NFC, NFD, NFKC, NFKD, Sequence)");
  }
}

void Tokenizer::Impl::load_pre_tokenizer(const json& p) {
  if (p.is_null()) return;
  const std::string type = p.value("type", std::string());
  auto compile = [&](std::string_view pat, bool literal) {
    try {
      return std::make_shared<Regex>(pat, literal);
    } catch (const std::exception& e) {
      bad(std::string("pre_tokenizer: ") + e.what());
    }
  };
  if (type == "Sequence") {
    for (const auto& s : p.at("pretokenizers")) load_pre_tokenizer(s);
  } else if (type == "Split") {
    PreTokStep st{PreTokStep::Split, nullptr};
    const json& pat = p.at("pattern");
    if (pat.contains("Regex")) {
      st.regex = compile(pat["Regex"].get<std::string>(), false);
    } else if (pat.contains("String")) {
      st.regex = compile(pat["String"].get<std::string>(), true);
    } else {
      bad("Split pre_tokenizer pattern is neither Regex nor String");
    }
    const std::string b = p.value("behavior", std::string("Isolated"));
    if (b == "Removed") st.behavior = SplitBehavior::Removed;
    else if (b == "Isolated") st.behavior = SplitBehavior::Isolated;
    else if (b == "MergedWithPrevious") st.behavior = SplitBehavior::MergedWithPrevious;
    else if (b == "MergedWithNext") st.behavior = SplitBehavior::MergedWithNext;
    else if (b == "Contiguous") st.behavior = SplitBehavior::Contiguous;
    else bad("unknown Split behavior \"" + b + "\"");
    st.invert = p.value("invert", false);
    pre.push_back(std::move(st));
  } else if (type == "ByteLevel") {
    PreTokStep st{PreTokStep::ByteLevel, nullptr};
    st.add_prefix_space = p.value("add_prefix_space", true);
    if (p.value("use_regex", true)) st.regex = compile(kGpt2Pattern, false);
    pre.push_back(std::move(st));
  } else if (type == "Digits") {
    PreTokStep st{PreTokStep::Digits, nullptr};
    st.regex = compile(p.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+", false);
    st.behavior = SplitBehavior::Isolated;
    pre.push_back(std::move(st));
  } else {
    bad("unsupported pre_tokenizer \"" + type + "\" (supported: ByteLevel, Split, Digits, Sequence)");
  }
}

void Tokenizer::Impl::load_post_processor(const json& p) {
  if (p.is_null()) return;
  const std::string type = p.value("type", std::string());
  auto ids_of = [&](const std::string& tok) -> int32_t {
    if (auto it = added_by_content.find(tok); it != added_by_content.end()) return it->second;
    if (auto it = vocab.find(tok); it != vocab.end()) return it->second;
    bad("post_processor token \"" + tok + "\" is not in the vocabulary");
  };
  if (type == "Sequence") {
    for (const auto& s : p.at("processors")) load_post_processor(s);
  } else if (type == "ByteLevel") {
    post.push_back({PostStep::Noop, {}, {}, {}});  // only trims offsets: no effect on ids
  } else if (type == "TemplateProcessing") {
    PostStep st{PostStep::Template, {}, {}, {}};
    const json& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
    for (const auto& item : p.at("single")) {
      if (item.contains("Sequence")) {
        st.items.emplace_back(0);
      } else if (item.contains("SpecialToken")) {
        const std::string id = item["SpecialToken"].at("id").get<std::string>();
        std::vector<int32_t> ids;
        if (specials.contains(id)) {
          for (const auto& v : specials[id].at("ids")) ids.push_back(v.get<int32_t>());
        } else {
          ids.push_back(ids_of(id));
        }
        st.items.emplace_back(std::move(ids));
      } else {
        bad("TemplateProcessing item is neither Sequence nor SpecialToken");
      }
    }
    post.push_back(std::move(st));
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    PostStep st{PostStep::ClsSep, {}, {}, {}};
    st.cls = {p.at("cls").at(1).get<int32_t>()};
    st.sep = {p.at("sep").at(1).get<int32_t>()};
    post.push_back(std::move(st));
  } else {
    bad("unsupported post_processor \"" + type +
        "\" (supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence)");
  }
}

void Tokenizer::Impl::load_decoder(const json& d) {
  if (d.is_null()) return;
  const std::string type = d.value("type", std::string());
  if (type == "ByteLevel") {
    decoder = Decoder::ByteLevel;
  } else if (type == "Sequence" && d.contains("decoders") && d["decoders"].size() == 1) {
    load_decoder(d["decoders"][0]);
  } else {
    bad("unsupported decoder \"" + type + "\" (supported: ByteLevel)");
  }
}

namespace {
std::optional<std::string> token_name(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}
}  // namespace

void Tokenizer::Impl::load_config(const fs::path& dir) {
  const fs::path cfg_path = dir / "tokenizer_config.json";
  json cfg = json::object();
  if (fs::exists(cfg_path)) {
    std::ifstream f(cfg_path, std::ios::binary);
    try {
      cfg = json::parse(f);
    } catch (const json::exception& e) {
      fail("tokenizer config ", cfg_path.string(), ": malformed JSON: ", e.what());
    }
  }
  if (!cfg.is_object()) fail("tokenizer config ", cfg_path.string(), ": not a JSON object");
  auto lookup = [&](const std::optional<std::string>& name) -> std::optional<int32_t> {
    if (!name) return std::nullopt;
    if (auto it = added_by_content.find(*name); it != added_by_content.end()) return it->second;
    if (auto it = vocab.find(*name); it != vocab.end()) return it->second;
    return std::nullopt;
  };
  if (auto b = token_name(cfg, "bos_token")) bos_token = *b;
  if (auto e = token_name(cfg, "eos_token")) eos_token = *e;
  bos_id = lookup(token_name(cfg, "bos_token"));
  eos_id = lookup(token_name(cfg, "eos_token"));

  if (cfg.contains("chat_template")) {
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{name, template}, ...]: prefer "default"
      for (const auto& t : ct)
        if (t.value("name", std::string()) == "default") chat_template = t.value("template", std::string());
      if (chat_template.empty() && !ct.empty()) chat_template = ct[0].value("template", std::string());
    }
  }
  if (chat_template.empty() && fs::exists(dir / "chat_template.jinja")) {
    std::ifstream f(dir / "chat_template.jinja", std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    chat_template = ss.str();
  }
  family = detect_chat_template_family(chat_template);
}

Tokenizer Tokenizer::from_file(const std::string& path_in) {
  fs::path p(path_in);
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "tokenizer.json";
  if (!fs::exists(p, ec)) fail("tokenizer ", p.string(), ": file not found");
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("tokenizer ", p.string(), ": cannot open file");

  auto impl = std::make_unique<Impl>();
  impl->path = p.string();
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    fail("tokenizer ", p.string(), ": malformed JSON: ", e.what());
  }
  if (!j.is_object()) impl->bad("top level is not a JSON object");
  try {
    impl->load_model(j.contains("model") ? j["model"] : json());
    impl->load_added(j.contains("added_tokens") ? j["added_tokens"] : json());
    impl->load_normalizer(j.contains("normalizer") ? j["normalizer"] : json());
    impl->load_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json());
    impl->load_post_processor(j.contains("post_processor") ? j["post_processor"] : json());
    impl->load_decoder(j.contains("decoder") ? j["decoder"] : json());
  } catch (const json::exception& e) {
    impl->bad(std::string("unexpected structure: ") + e.what());
  }
  if (impl->special_ids.size() < impl->id_to_tok.size()) impl->special_ids.resize(impl->id_to_tok.size(), false);

  for (size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& t = impl->added[i];
    if (t.normalized && !impl->normalizers.empty())
      impl->norm_trie.insert(impl->normalize(t.content), static_cast<int>(i));
    else if (t.normalized)
      impl->norm_trie.insert(t.content, static_cast<int>(i));
    else
      impl->raw_trie.insert(t.content, static_cast<int>(i));
  }
  // Rust regex's Unicode \w, which `tokenizers` uses for single_word.
  impl->word_char = std::make_shared<Regex>("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]", false);
  impl->load_config(p.parent_path());
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// ------------------------------------------------------------------------------------
// Encoding
// ------------------------------------------------------------------------------------

std::string Tokenizer::Impl::normalize(std::string s) const {
  for (NormForm f : normalizers) {
    int opts = UTF8PROC_STABLE;
    switch (f) {
      case NormForm::NFC: opts |= UTF8PROC_COMPOSE; break;
      case NormForm::NFD: opts |= UTF8PROC_DECOMPOSE; break;
      case NormForm::NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
      case NormForm::NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                            static_cast<utf8proc_ssize_t>(s.size()), &out,
                                            static_cast<utf8proc_option_t>(opts));
    if (n < 0) fail("tokenizer ", path, ": normalization failed: ", utf8proc_errmsg(n));
    s.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }
  return s;
}

namespace {
size_t leftmost_space_at_end(std::string_view s) {
  // Start of the trailing run of whitespace characters.
  size_t start = s.size();
  size_t i = 0;
  std::vector<std::pair<size_t, bool>> chars;
  while (i < s.size()) {
    size_t len;
    const char32_t cp = utf8_decode(s, i, len);
    chars.emplace_back(i, is_unicode_whitespace(cp));
    i += len;
  }
  for (auto it = chars.rbegin(); it != chars.rend() && it->second; ++it) start = it->first;
  return start;
}
size_t space_len_at_start(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    if (!is_unicode_whitespace(utf8_decode(s, i, len))) break;
    i += len;
  }
  return i;
}
}  // namespace

std::vector<Piece> Tokenizer::Impl::split_added(std::vector<Piece> pieces, const Trie& trie) const {
  if (trie.empty()) return pieces;
  std::vector<Piece> out;
  for (Piece& pc : pieces) {
    if (pc.id >= 0) {
      out.push_back(std::move(pc));
      continue;
    }
    const std::string& s = pc.text;
    size_t start_offset = 0;
    for (auto [b, e, ti] : trie.find_all(s)) {
      const AddedToken& t = added[static_cast<size_t>(ti)];
      size_t start = b, stop = e;
      if (start < start_offset) continue;  // overlaps what a previous rstrip consumed
      if (t.single_word) {
        bool start_ok = true, stop_ok = true;
        if (start > 0) {  // the character before must not be a word character
          size_t k = start - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          start_ok = !word_char->matches_at(s, k);
        }
        if (stop < s.size()) stop_ok = !word_char->matches_at(s, stop);
        if (!start_ok || !stop_ok) continue;
      }
      if (t.lstrip) start = std::max(leftmost_space_at_end(std::string_view(s).substr(0, start)), start_offset);
      if (t.rstrip) stop += space_len_at_start(std::string_view(s).substr(stop));
      if (start_offset < start) out.push_back({s.substr(start_offset, start - start_offset), -1});
      out.push_back({std::string(), t.id});
      start_offset = stop;
    }
    if (start_offset < s.size()) out.push_back({s.substr(start_offset), -1});
  }
  return out;
}

namespace {
// Split s by regex matches per the `tokenizers` SplitDelimiterBehavior rules.
std::vector<std::pair<size_t, size_t>> split_ranges(std::string_view s, const Regex& re, SplitBehavior behavior,
                                                    bool invert) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> m;  // ((start, end), is_match)
  size_t prev = 0;
  for (auto [b, e] : re.find_all(s)) {
    if (prev != b) m.push_back({{prev, b}, invert});
    m.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev != s.size()) m.push_back({{prev, s.size()}, invert});

  std::vector<std::pair<size_t, size_t>> out;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (auto& [r, is] : m) out.push_back(r);
      break;
    case SplitBehavior::Removed:
      for (auto& [r, is] : m)
        if (!is) out.push_back(r);
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& [r, is] : m) {
        if (is && !prev_match && !out.empty()) out.back().second = r.second;
        else out.push_back(r);
        prev_match = is;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->second && !prev_match && !out.empty()) out.back().first = it->first.first;
        else out.push_back(it->first);
        prev_match = it->second;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (auto& [r, is] : m) {
        if (is == prev_match && !out.empty()) out.back().second = r.second;
        else out.push_back(r);
        prev_match = is;
      }
      break;
    }
  }
  std::erase_if(out, [](const auto& r) { return r.first == r.second; });
  return out;
}
}  // namespace

std::vector<std::string> Tokenizer::Impl::pre_tokenize(const std::string& text) const {
  std::vector<std::string> cur{text};
  for (const PreTokStep& st : pre) {
    std::vector<std::string> next;
    for (std::string& s : cur) {
      switch (st.kind) {
        case PreTokStep::Split:
        case PreTokStep::Digits:
          for (auto [b, e] : split_ranges(s, *st.regex, st.behavior, st.invert)) next.push_back(s.substr(b, e - b));
          break;
        case PreTokStep::ByteLevel: {
          if (st.add_prefix_space && s[0] != ' ') s.insert(s.begin(), ' ');
          std::vector<std::pair<size_t, size_t>> ranges;
          if (st.regex) ranges = split_ranges(s, *st.regex, SplitBehavior::Isolated, false);
          else ranges.emplace_back(0, s.size());
          const ByteMap& bm = byte_map();
          for (auto [b, e] : ranges) {
            std::string mapped;
            mapped.reserve((e - b) * 2);
            for (size_t i = b; i < e; ++i) mapped += bm.byte_to_str[static_cast<unsigned char>(s[i])];
            next.push_back(std::move(mapped));
          }
          break;
        }
      }
    }
    cur = std::move(next);
  }
  return cur;
}

void Tokenizer::Impl::bpe_uncached(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    if (auto it = vocab.find(word); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  size_t i = 0;
  while (i < word.size()) {
    const size_t len = utf8_len(static_cast<unsigned char>(word[i]));
    const std::string ch = word.substr(i, len);
    i += len;
    if (auto it = vocab.find(ch); it != vocab.end()) {
      syms.push_back({it->second, 0, 0, true});
      continue;
    }
    if (byte_fallback) {
      std::vector<int32_t> ids;
      for (unsigned char b : ch) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
        auto it = vocab.find(buf);
        if (it == vocab.end()) break;
        ids.push_back(it->second);
      }
      if (ids.size() == ch.size()) {
        for (int32_t id : ids) syms.push_back({id, 0, 0, true});
        continue;
      }
    }
    if (unk_id) {
      if (fuse_unk && !syms.empty() && syms.back().id == *unk_id) continue;
      syms.push_back({*unk_id, 0, 0, true});
    }
    // Otherwise the character is dropped, as `tokenizers` does without an unk token.
  }
  const int n = static_cast<int>(syms.size());
  for (int k = 0; k < n; ++k) {
    syms[static_cast<size_t>(k)].prev = k - 1;
    syms[static_cast<size_t>(k)].next = k + 1 < n ? k + 1 : -1;
  }
  struct Cand {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  auto lookup = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
    auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  for (int k = 0; k + 1 < n; ++k)
    if (auto* m = lookup(syms[static_cast<size_t>(k)].id, syms[static_cast<size_t>(k + 1)].id))
      q.push({m->first, k, m->second});
  while (!q.empty()) {
    const Cand top = q.top();
    q.pop();
    Sym& left = syms[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Sym& right = syms[static_cast<size_t>(left.next)];
    const auto* m = lookup(left.id, right.id);
    if (!m || m->second != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0)
      if (auto* pm = lookup(syms[static_cast<size_t>(left.prev)].id, left.id)) q.push({pm->first, left.prev, pm->second});
    if (left.next >= 0)
      if (auto* nm = lookup(left.id, syms[static_cast<size_t>(left.next)].id)) q.push({nm->first, top.pos, nm->second});
  }
  for (const Sym& s : syms)
    if (s.alive) out.push_back(s.id);
}

void Tokenizer::Impl::bpe(const std::string& word, std::vector<int32_t>& out) const {
  {
    std::lock_guard<std::mutex> lk(cache_mu);
    if (auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  bpe_uncached(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (word.size() <= 256) {
    std::lock_guard<std::mutex> lk(cache_mu);
    if (cache.size() >= 200000) cache.clear();
    cache.emplace(word, std::move(ids));
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& im = *impl_;
  if (size_t bad = utf8_first_invalid(text); bad != std::string_view::npos)
    fail("tokenizer ", im.path, ": input text is not valid UTF-8 (byte offset ", bad, ")");

  std::vector<Piece> pieces{{std::string(text), -1}};
  pieces = im.split_added(std::move(pieces), im.raw_trie);
  if (!im.normalizers.empty())
    for (Piece& p : pieces)
      if (p.id < 0) p.text = im.normalize(std::move(p.text));
  pieces = im.split_added(std::move(pieces), im.norm_trie);

  std::vector<int32_t> ids;
  for (const Piece& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    if (p.text.empty()) continue;
    for (const std::string& w : im.pre_tokenize(p.text)) im.bpe(w, ids);
  }
  if (!add_special_tokens) return ids;
  for (const PostStep& st : im.post) {
    if (st.kind == PostStep::Template) {
      std::vector<int32_t> out;
      for (const auto& item : st.items) {
        if (std::holds_alternative<int>(item)) out.insert(out.end(), ids.begin(), ids.end());
        else {
          const auto& v = std::get<std::vector<int32_t>>(item);
          out.insert(out.end(), v.begin(), v.end());
        }
      }
      ids = std::move(out);
    } else if (st.kind == PostStep::ClsSep) {
      std::vector<int32_t> out(st.cls);
      out.insert(out.end(), ids.begin(), ids.end());
      out.insert(out.end(), st.sep.begin(), st.sep.end());
      ids = std::move(out);
    }
  }
  return ids;
}

// ------------------------------------------------------------------------------------
// Decoding and lookups
// ------------------------------------------------------------------------------------

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& im = *impl_;
  std::vector<const std::string*> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= im.id_to_tok.size())
      fail("tokenizer ", im.path, ": cannot decode id ", id, " (vocabulary size ", im.id_to_tok.size(), ")");
    if (skip_special_tokens && im.special_ids[static_cast<size_t>(id)]) continue;
    toks.push_back(&im.id_to_tok[static_cast<size_t>(id)]);
  }
  if (im.decoder == Impl::Decoder::None) {
    std::string out;
    for (size_t k = 0; k < toks.size(); ++k) {
      if (k) out += ' ';
      out += *toks[k];
    }
    return out;
  }
  const ByteMap& bm = byte_map();
  std::string bytes;
  for (const std::string* t : toks) {
    std::string tb;
    bool ok = true;
    size_t i = 0;
    while (i < t->size()) {
      size_t len;
      const char32_t cp = utf8_decode(*t, i, len);
      auto it = bm.cp_to_byte.find(cp);
      if (it == bm.cp_to_byte.end()) {
        ok = false;
        break;
      }
      tb.push_back(static_cast<char>(it->second));
      i += len;
    }
    bytes += ok ? tb : *t;
  }
  return utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const std::string t(token);
  if (auto it = impl_->added_by_content.find(t); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->vocab.find(t); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_tok.size()) return std::nullopt;
  return impl_->id_to_tok[static_cast<size_t>(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special_ids.size() && impl_->special_ids[static_cast<size_t>(id)];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_tok.size()); }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos_id; }
const std::string& Tokenizer::path() const { return impl_->path; }
ChatTemplateFamily Tokenizer::chat_template_family() const { return impl_->family; }

std::string Tokenizer::apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  const Impl& im = *impl_;
  if (im.chat_template.empty())
    fail("tokenizer ", im.path, ": no chat_template in tokenizer_config.json or chat_template.jinja");
  if (im.family == ChatTemplateFamily::None)
    fail("tokenizer ", im.path,
         ": unsupported chat template family (supported: Llama 3 header-id, ChatML/Qwen, Gemma turns)");
  return render_chat_template(im.family, im.chat_template, im.bos_token, messages, add_generation_prompt);
}

}  // namespace luminal::models
