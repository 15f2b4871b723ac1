// The `luminal` command line. Each subcommand is one `add_*` function that registers its
// options and its run callback; add a new one next to the others and call it from main().
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "luminal/error.hpp"
#include "luminal/models/tokenizer.hpp"

namespace {

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

nlohmann::json ids_to_json(const std::vector<int32_t>& ids) { return nlohmann::json(ids); }

std::vector<int32_t> json_to_ids(const nlohmann::json& j) {
  if (!j.is_array()) luminal::fail("decode: expected a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (const auto& v : j) {
    if (!v.is_number_integer()) luminal::fail("decode: token ids must be integers, got ", v.dump());
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

// ---- luminal tokenize ---------------------------------------------------------------
struct TokenizeOptions {
  std::string tokenizer;
  bool decode = false;
  bool lines = false;
  bool no_special = false;
  bool skip_special = false;
};

void run_tokenize(const TokenizeOptions& o) {
  const auto tok = luminal::models::Tokenizer::from_file(o.tokenizer);
  const std::string input = read_stdin();
  auto one = [&](const nlohmann::json& item) -> nlohmann::json {
    if (o.decode) {
      const auto ids = json_to_ids(item);
      return tok.decode(ids, o.skip_special);
    }
    if (!item.is_string()) luminal::fail("encode: expected a JSON string per line");
    return ids_to_json(tok.encode(item.get<std::string>(), !o.no_special));
  };
  if (o.lines) {  // batch mode: one JSON value per input line, one JSON result per output line
    size_t start = 0;
    while (start < input.size()) {
      size_t end = input.find('\n', start);
      if (end == std::string::npos) end = input.size();
      const std::string line = input.substr(start, end - start);
      start = end + 1;
      if (line.empty()) continue;
      nlohmann::json item;
      try {
        item = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        luminal::fail("tokenize --lines: malformed JSON line: ", e.what());
      }
      std::cout << one(item).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
    return;
  }
  if (o.decode) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(input);
    } catch (const nlohmann::json::exception& e) {
      luminal::fail("tokenize --decode: stdin is not a JSON array of ids: ", e.what());
    }
    std::cout << tok.decode(json_to_ids(j), o.skip_special);
  } else {
    std::cout << ids_to_json(tok.encode(input, !o.no_special)).dump() << '\n';
  }
}

void add_tokenize(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand(
      "tokenize", "Encode stdin text to a JSON array of token ids (or, with --decode, decode a JSON id array)");
  sub->add_option("--tokenizer,-t", opts->tokenizer, "tokenizer.json or a directory holding one")->required();
  sub->add_flag("--decode,-d", opts->decode, "read a JSON array of ids from stdin and print the text");
  sub->add_flag("--lines", opts->lines,
                "batch mode: each stdin line is a JSON string (or id array with --decode); "
                "prints one JSON result per line");
  sub->add_flag("--no-special", opts->no_special, "encode without the post-processor's special tokens (BOS...)");
  sub->add_flag("--skip-special", opts->skip_special, "decode: drop special tokens");
  sub->callback([opts] { run_tokenize(*opts); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"luminal: a search-based deep-learning compiler"};
  app.require_subcommand(1);
  add_tokenize(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const luminal::Error& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
  std::cout.flush();
  return 0;
}
