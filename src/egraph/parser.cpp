// The rule-file language: an s-expression reader and the loader that turns forms into
// sorts, constructors, functions, rules, terms and schedules (docs/EGRAPH.md).
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"

namespace luminal::egraph {
namespace {

struct SExpr {
  enum class Kind { List, Symbol, Int, Float, String };
  Kind kind = Kind::List;
  std::string text;          // Symbol, String (unescaped)
  int64_t i = 0;
  double f = 0;
  std::vector<SExpr> items;  // List
  int line = 0, col = 0;

  bool is_list() const { return kind == Kind::List; }
  bool is_symbol(std::string_view s = {}) const {
    return kind == Kind::Symbol && (s.empty() || text == s);
  }
  bool is_var() const { return kind == Kind::Symbol && text.size() > 1 && text[0] == '?'; }
  const std::string& head() const {
    static const std::string none;
    return is_list() && !items.empty() && items[0].kind == Kind::Symbol ? items[0].text : none;
  }
  std::string to_string() const {
    switch (kind) {
      case Kind::Symbol: return text;
      case Kind::Int: return std::to_string(i);
      case Kind::Float: return Value::f64(f).to_string();
      case Kind::String: return "\"" + text + "\"";
      case Kind::List: {
        std::string s = "(";
        for (size_t k = 0; k < items.size(); ++k) s += (k ? " " : "") + items[k].to_string();
        return s + ")";
      }
    }
    return "";
  }
};

class Reader {
 public:
  Reader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  std::vector<SExpr> read_all() {
    std::vector<SExpr> out;
    for (skip(); pos_ < text_.size(); skip()) out.push_back(read());
    return out;
  }

 private:
  [[noreturn]] void error(int line, int col, const std::string& msg) {
    fail(file_, ":", line, ":", col, ": ", msg);
  }
  void advance() {
    if (text_[pos_++] == '\n') ++line_, col_ = 1;
    else ++col_;
  }
  void skip() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ';') {
        while (pos_ < text_.size() && text_[pos_] != '\n') advance();
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else {
        break;
      }
    }
  }
  SExpr read() {
    SExpr e;
    e.line = line_;
    e.col = col_;
    char c = text_[pos_];
    if (c == ')') error(line_, col_, "unexpected ')'");
    if (c == '(') {
      advance();
      for (skip(); pos_ < text_.size() && text_[pos_] != ')'; skip()) e.items.push_back(read());
      if (pos_ >= text_.size()) error(e.line, e.col, "unterminated list: '(' is never closed");
      advance();
      return e;
    }
    if (c == '"') {
      advance();
      e.kind = SExpr::Kind::String;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        char ch = text_[pos_];
        if (ch == '\\' && pos_ + 1 < text_.size()) {
          advance();
          ch = text_[pos_] == 'n' ? '\n' : text_[pos_] == 't' ? '\t' : text_[pos_];
        }
        e.text += ch;
        advance();
      }
      if (pos_ >= text_.size()) error(e.line, e.col, "unterminated string");
      advance();
      return e;
    }
    size_t start = pos_;
    while (pos_ < text_.size() && !std::isspace(static_cast<unsigned char>(text_[pos_])) &&
           text_[pos_] != '(' && text_[pos_] != ')' && text_[pos_] != ';' && text_[pos_] != '"')
      advance();
    e.text = std::string(text_.substr(start, pos_ - start));
    e.kind = SExpr::Kind::Symbol;
    char* end = nullptr;
    if (std::isdigit(static_cast<unsigned char>(e.text[0])) ||
        (e.text.size() > 1 && (e.text[0] == '-' || e.text[0] == '+') && std::isdigit(static_cast<unsigned char>(e.text[1])))) {
      errno = 0;
      long long v = std::strtoll(e.text.c_str(), &end, 10);
      if (*end == '\0') {
        if (errno == ERANGE) error(e.line, e.col, "integer literal out of range: " + e.text);
        e.kind = SExpr::Kind::Int;
        e.i = v;
        return e;
      }
      double d = std::strtod(e.text.c_str(), &end);
      if (*end != '\0') error(e.line, e.col, "malformed number '" + e.text + "'");
      e.kind = SExpr::Kind::Float;
      e.f = d;
    }
    return e;
  }

  std::string_view text_;
  const std::string& file_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

}  // namespace

class Loader {
 public:
  Loader(EGraph& g, const std::string& file) : g_(g), file_(file) {}

  void load(std::string_view text) {
    for (const SExpr& form : Reader(text, file_).read_all()) top_level(form);
  }

  ClassId term_value(std::string_view text) {
    std::vector<SExpr> forms = Reader(text, file_).read_all();
    if (forms.size() != 1) fail(file_, ": expected exactly one term, got ", forms.size());
    Value v = eval_global(forms[0]);
    if (v.kind() != ValueKind::Class) error(forms[0], "term is a ", value_kind_name(v.kind()), ", not an e-class");
    return v.as_class();
  }

 private:
  // ------------------------------------------------------------ helpers
  template <class... Args>
  [[noreturn]] void error(const SExpr& at, const Args&... msg) {
    fail(file_, ":", at.line, ":", at.col, ": ", msg...);
  }

  const std::string& symbol(const SExpr& e, const char* what) {
    if (!e.is_symbol()) error(e, "expected ", what, ", got ", e.to_string());
    return e.text;
  }

  SortId sort_of(const SExpr& e) {
    auto s = g_.find_sort(symbol(e, "a sort name"));
    if (!s) error(e, "unknown sort '", e.text, "'");
    return *s;
  }

  std::string sort_name(SortId s) { return s == kInvalid ? "?" : g_.sort(s).name; }

  Value literal(const SExpr& e, SortId want) {
    Value v;
    switch (e.kind) {
      case SExpr::Kind::Int: v = Value::i64(e.i); break;
      case SExpr::Kind::Float: v = Value::f64(e.f); break;
      case SExpr::Kind::String: v = Value::string(e.text); break;
      case SExpr::Kind::Symbol:
        if (e.text == "true" || e.text == "false") { v = Value::boolean(e.text == "true"); break; }
        [[fallthrough]];
      default: error(e, "expected a literal, got ", e.to_string());
    }
    if (want != kInvalid) {
      ValueKind k = g_.sort(want).kind;
      if (k == ValueKind::F64 && v.kind() == ValueKind::I64) v = Value::f64(static_cast<double>(e.i));
      if (k != v.kind())
        error(e, "expected a ", sort_name(want), ", got the ", value_kind_name(v.kind()), " literal ", e.to_string());
    }
    return v;
  }

  static bool is_literal(const SExpr& e) {
    return e.kind == SExpr::Kind::Int || e.kind == SExpr::Kind::Float ||
           e.kind == SExpr::Kind::String || e.is_symbol("true") || e.is_symbol("false");
  }

  // Splits "(head pos... :key value ... :flag)" into positional items and options.
  struct Options {
    std::vector<const SExpr*> positional;
    std::map<std::string, const SExpr*> named;  // value may be nullptr for flags
  };
  Options options(const SExpr& form, size_t from, std::initializer_list<const char*> keys,
                  std::initializer_list<const char*> flags = {}) {
    Options o;
    for (size_t k = from; k < form.items.size(); ++k) {
      const SExpr& it = form.items[k];
      if (!(it.is_symbol() && it.text[0] == ':')) {
        if (!o.named.empty()) error(it, "positional argument after options");
        o.positional.push_back(&it);
        continue;
      }
      bool is_flag = std::any_of(flags.begin(), flags.end(), [&](const char* f) { return it.text == f; });
      bool is_key = std::any_of(keys.begin(), keys.end(), [&](const char* f) { return it.text == f; });
      if (!is_flag && !is_key) error(it, "unknown option '", it.text, "' for ", form.head());
      if (is_flag) {
        o.named[it.text] = nullptr;
        continue;
      }
      if (k + 1 >= form.items.size()) error(it, "option ", it.text, " needs a value");
      o.named[it.text] = &form.items[++k];
    }
    return o;
  }

  std::string string_option(const Options& o, const char* key, const std::string& def) {
    auto it = o.named.find(key);
    if (it == o.named.end()) return def;
    const SExpr& v = *it->second;
    if (v.kind != SExpr::Kind::String && v.kind != SExpr::Kind::Symbol) error(v, key, " expects a string");
    return v.text;
  }

  // ------------------------------------------------------------ declarations
  void top_level(const SExpr& f) {
    const std::string& h = f.head();
    if (h.empty()) error(f, "expected a form like (rule ...), got ", f.to_string());
    if (h == "sort") {
      expect_size(f, 2, "(sort Name)");
      declare_sort(f.items[1]);
    } else if (h == "datatype") {
      if (f.items.size() < 2) error(f, "expected (datatype Name (Ctor Sort...)...)");
      declare_sort(f.items[1]);
      for (size_t k = 2; k < f.items.size(); ++k) variant(f.items[k], f.items[1].text);
    } else if (h == "datatype*") {
      for (size_t k = 1; k < f.items.size(); ++k) {
        if (!f.items[k].is_list() || f.items[k].items.empty()) error(f.items[k], "expected (Name (Ctor Sort...)...)");
        declare_sort(f.items[k].items[0]);
      }
      for (size_t k = 1; k < f.items.size(); ++k)
        for (size_t v = 1; v < f.items[k].items.size(); ++v) variant(f.items[k].items[v], f.items[k].items[0].text);
    } else if (h == "constructor") {
      if (f.items.size() < 4 || !f.items[2].is_list()) error(f, "expected (constructor Name (Sort...) Sort)");
      std::vector<SortId> args;
      for (const SExpr& s : f.items[2].items) args.push_back(sort_of(s));
      Options o = options(f, 4, {":cost"}, {":unextractable"});
      declare_ctor(f.items[1], std::move(args), sort_of(f.items[3]), o);
    } else if (h == "function" || h == "relation") {
      function(f, h == "relation");
    } else if (h == "ruleset") {
      expect_size(f, 2, "(ruleset name)");
      g_.declare_ruleset(symbol(f.items[1], "a ruleset name"));
    } else if (h == "rule") {
      rule(f);
    } else if (h == "rewrite" || h == "birewrite") {
      rewrite(f, h == "birewrite");
    } else if (h == "let") {
      expect_size(f, 3, "(let name term)");
      const std::string& name = symbol(f.items[1], "a name");
      Value v = eval_global(f.items[2]);
      if (v.kind() != ValueKind::Class) error(f.items[2], "top-level let must name an e-class term");
      g_.globals_[name] = v.as_class();
    } else if (h == "union") {
      expect_size(f, 3, "(union a b)");
      Value a = eval_global(f.items[1]), b = eval_global(f.items[2]);
      if (a.kind() != ValueKind::Class || b.kind() != ValueKind::Class) error(f, "union needs two e-class terms");
      g_.union_classes(a.as_class(), b.as_class());
      g_.rebuild();
    } else if (h == "set") {
      expect_size(f, 3, "(set (f args...) value)");
      const SExpr& call = f.items[1];
      auto fn = g_.find_function(call.head());
      if (!fn) error(call, "set: '", call.head(), "' is not a function");
      std::vector<Value> args;
      for (size_t k = 1; k < call.items.size(); ++k) args.push_back(eval_global(call.items[k]));
      g_.set_function(*fn, args, eval_global(f.items[2]));
    } else if (h == "run-schedule") {
      std::vector<Schedule> body;
      if (g_.file_schedule_) body.push_back(*g_.file_schedule_);
      for (size_t k = 1; k < f.items.size(); ++k) body.push_back(schedule(f.items[k]));
      g_.file_schedule_ = Schedule::seq(std::move(body));
    } else {
      error(f.items[0], "unknown top-level form '", h, "'");
    }
  }

  void expect_size(const SExpr& f, size_t n, const char* shape) {
    if (f.items.size() != n) error(f, "expected ", shape);
  }

  void declare_sort(const SExpr& name) {
    if (g_.find_sort(symbol(name, "a sort name"))) error(name, "sort '", name.text, "' is already declared");
    g_.declare_sort(name.text);
  }

  void declare_ctor(const SExpr& name, std::vector<SortId> args, SortId sort, const Options& o) {
    const std::string& n = symbol(name, "a constructor name");
    if (g_.find_op(n) || g_.find_function(n)) error(name, "'", n, "' is already declared");
    double cost = 1;
    if (auto it = o.named.find(":cost"); it != o.named.end()) {
      if (it->second->kind != SExpr::Kind::Int && it->second->kind != SExpr::Kind::Float)
        error(*it->second, ":cost expects a number");
      cost = it->second->kind == SExpr::Kind::Int ? static_cast<double>(it->second->i) : it->second->f;
    }
    g_.declare_constructor(n, std::move(args), sort, cost, o.named.count(":unextractable") > 0,
                           SourceLoc{file_, name.line, name.col});
  }

  void variant(const SExpr& v, const std::string& sort_name) {
    if (!v.is_list() || v.items.empty()) error(v, "expected a constructor like (Add ", sort_name, " ", sort_name, ")");
    std::vector<SortId> args;
    size_t k = 1;
    for (; k < v.items.size() && !(v.items[k].is_symbol() && v.items[k].text[0] == ':'); ++k)
      args.push_back(sort_of(v.items[k]));
    Options o = options(v, k, {":cost"}, {":unextractable"});
    declare_ctor(v.items[0], std::move(args), *g_.find_sort(sort_name), o);
  }

  void function(const SExpr& f, bool relation) {
    size_t need = relation ? 3 : 4;
    if (f.items.size() < need || !f.items[2].is_list())
      error(f, relation ? "expected (relation name (Sort...))" : "expected (function name (Sort...) Sort :merge ...)");
    const std::string& name = symbol(f.items[1], "a function name");
    if (g_.find_op(name) || g_.find_function(name)) error(f.items[1], "'", name, "' is already declared");
    std::vector<SortId> args;
    for (const SExpr& s : f.items[2].items) args.push_back(sort_of(s));
    if (relation) {
      g_.declare_function(name, std::move(args), *g_.find_sort("bool"), MergeKind::Old);
      return;
    }
    SortId out = sort_of(f.items[3]);
    Options o = options(f, 4, {":merge"});
    MergeKind merge = MergeKind::Old;
    if (auto it = o.named.find(":merge"); it != o.named.end()) {
      const SExpr& m = *it->second;
      std::string s = m.to_string();
      if (s == "old") merge = MergeKind::Old;
      else if (s == "new") merge = MergeKind::New;
      else if (s == "min" || s == "(min old new)" || s == "(min new old)") merge = MergeKind::Min;
      else if (s == "max" || s == "(max old new)" || s == "(max new old)") merge = MergeKind::Max;
      else error(m, "unsupported :merge ", s, " (use old, new, (min old new) or (max old new))");
    }
    g_.declare_function(name, std::move(args), out, merge);
  }

  // ------------------------------------------------------------ rules
  struct Builder {
    Rule rule;
    std::map<std::string, int> vars;
    std::vector<bool> bound;   // bound by the query so far or by an earlier let
  };

  int var(Builder& b, const SExpr& e, SortId sort) {
    auto it = b.vars.find(e.text);
    if (it == b.vars.end()) {
      int id = static_cast<int>(b.rule.vars.size());
      b.rule.vars.push_back({e.text, sort});
      b.vars.emplace(e.text, id);
      b.bound.push_back(false);
      return id;
    }
    SortId& have = b.rule.vars[it->second].sort;
    if (have == kInvalid) have = sort;
    else if (sort != kInvalid && have != sort)
      error(e, "rule \"", b.rule.name, "\": ", e.text, " is used as ", sort_name(sort),
            " here but as ", sort_name(have), " elsewhere");
    return it->second;
  }

  int fresh(Builder& b, SortId sort) {
    int id = static_cast<int>(b.rule.vars.size());
    b.rule.vars.push_back({"?_" + std::to_string(id), sort});
    b.bound.push_back(false);
    return id;
  }

  // A pattern (constructor application) in a query: one atom per constructor, nested
  // patterns get fresh class variables. Returns the variable of its e-class.
  int pattern(Builder& b, const SExpr& e, int root) {
    auto op = g_.find_op(e.head());
    const OpInfo& info = g_.op(*op);
    if (e.items.size() - 1 != info.args.size())
      error(e, "constructor ", info.name, " expects ", info.args.size(), " argument",
            info.args.size() == 1 ? "" : "s", ", got ", e.items.size() - 1);
    if (root < 0) root = fresh(b, info.sort);
    check_sort(b, e, root, info.sort);
    Atom atom;
    atom.id = *op;
    atom.vars.push_back(root);
    atom.lits.emplace_back();
    for (size_t k = 0; k < info.args.size(); ++k) {
      auto [v, lit] = argument(b, e.items[k + 1], info.args[k], info.name, k);
      atom.vars.push_back(v);
      atom.lits.push_back(lit);
    }
    b.rule.atoms.push_back(std::move(atom));
    return root;
  }

  // A function application in a query: a row of its table. `out` binds its value.
  void function_atom(Builder& b, const SExpr& e, int out, Value out_lit) {
    FuncId f = *g_.find_function(e.head());
    const FunctionInfo& info = g_.function(f);
    if (e.items.size() - 1 != info.args.size())
      error(e, "function ", info.name, " expects ", info.args.size(), " arguments, got ", e.items.size() - 1);
    Atom atom;
    atom.is_function = true;
    atom.id = f;
    if (out >= 0) check_sort(b, e, out, info.out);
    atom.vars.push_back(out);
    atom.lits.push_back(out_lit);
    for (size_t k = 0; k < info.args.size(); ++k) {
      auto [v, lit] = argument(b, e.items[k + 1], info.args[k], info.name, k);
      atom.vars.push_back(v);
      atom.lits.push_back(lit);
    }
    b.rule.atoms.push_back(std::move(atom));
  }

  void check_sort(Builder& b, const SExpr& at, int v, SortId want) {
    SortId& have = b.rule.vars[v].sort;
    if (have == kInvalid) have = want;
    else if (have != want)
      error(at, "rule \"", b.rule.name, "\": ", b.rule.vars[v].name, " is a ", sort_name(have),
            " but this is a ", sort_name(want));
  }

  // One argument slot of an atom: a variable, a literal, a nested pattern or a
  // primitive expression (bound through a guard).
  std::pair<int, Value> argument(Builder& b, const SExpr& a, SortId sort, const std::string& owner, size_t k) {
    if (a.is_var()) return {var(b, a, sort), Value()};
    if (is_literal(a)) {
      if (g_.sort(sort).kind == ValueKind::Class)
        error(a, "argument ", k + 1, " of ", owner, " is a ", sort_name(sort), ", not a literal");
      return {-1, literal(a, sort)};
    }
    if (a.is_list() && g_.find_op(a.head())) {
      int v = pattern(b, a, -1);
      if (b.rule.vars[v].sort != sort)
        error(a, "argument ", k + 1, " of ", owner, " must be a ", sort_name(sort), ", got a ",
              sort_name(b.rule.vars[v].sort));
      return {v, Value()};
    }
    if (a.is_list() && g_.find_function(a.head())) {
      int v = fresh(b, sort);
      function_atom(b, a, v, Value());
      return {v, Value()};
    }
    if (a.is_list()) {
      int v = fresh(b, sort);
      b.rule.guards.push_back({term(b, a, false), v});
      return {v, Value()};
    }
    error(a, "unknown identifier '", a.text, "' (variables start with '?', nullary constructors are written (", a.text, "))");
  }

  bool is_query_app(const SExpr& e) {
    return e.is_list() && (g_.find_op(e.head()) || g_.find_function(e.head()));
  }

  void fact(Builder& b, const SExpr& f) {
    if (!f.is_list() || f.items.empty()) error(f, "expected a fact like (= ?x (Add ?a ?b)), got ", f.to_string());
    if (f.head() == "=" && f.items.size() == 3) {
      const SExpr& l = f.items[1];
      const SExpr& r = f.items[2];
      if (is_query_app(l) || is_query_app(r)) {
        const SExpr& app = is_query_app(r) ? r : l;
        const SExpr& other = &app == &r ? l : r;
        int root = -1;
        Value lit;
        if (other.is_var()) root = var(b, other, kInvalid);
        else if (is_literal(other)) lit = literal(other, kInvalid);
        else if (is_query_app(other)) root = query_app(b, other, -1, Value());
        else {  // a primitive expression: bind a fresh variable to it
          root = fresh(b, kInvalid);
          b.rule.guards.push_back({term(b, other, false), root});
        }
        query_app(b, app, root, lit);
        return;
      }
      if (l.is_var() || r.is_var()) {
        const SExpr& v = l.is_var() ? l : r;
        const SExpr& other = &v == &l ? r : l;
        int id = var(b, v, kInvalid);
        b.rule.guards.push_back({term(b, other, false), id});
        return;
      }
    }
    if (is_query_app(f)) {
      if (g_.find_function(f.head()) && g_.sort(g_.function(*g_.find_function(f.head())).out).kind == ValueKind::Bool)
        function_atom(b, f, -1, Value::boolean(true));  // relation membership
      else
        query_app(b, f, -1, Value());
      return;
    }
    b.rule.guards.push_back({term(b, f, false), -1});
  }

  int query_app(Builder& b, const SExpr& e, int root, Value lit) {
    if (g_.find_op(e.head())) {
      if (!lit.is_none()) error(e, "a constructor pattern cannot equal a literal");
      return pattern(b, e, root);
    }
    if (root < 0 && lit.is_none()) root = fresh(b, kInvalid);
    function_atom(b, e, root, lit);
    return root;
  }

  // A term of a guard or action. In actions (`action`), every variable must already be
  // bound; constructors build nodes. Top-level terms (no builder) may name globals.
  uint32_t term(Builder& b, const SExpr& e, bool action) {
    RuleTerm t;
    if (e.is_var()) {
      auto it = b.vars.find(e.text);
      if (action && (it == b.vars.end() || !b.bound[it->second]))
        error(e, "rule \"", b.rule.name, "\": variable ", e.text,
              " is used in an action but not bound by the rule's patterns");
      t.kind = RuleTerm::Kind::Var;
      t.var = var(b, e, kInvalid);
    } else if (is_literal(e)) {
      t.kind = RuleTerm::Kind::Literal;
      t.literal = literal(e, kInvalid);
    } else if (e.is_symbol()) {
      auto gl = g_.globals_.find(e.text);
      if (gl == g_.globals_.end())
        error(e, "unknown identifier '", e.text, "' (variables start with '?', nullary constructors are written (", e.text, "))");
      t.kind = RuleTerm::Kind::Literal;
      t.literal = Value::cls(gl->second);
    } else {
      const std::string& h = e.head();
      if (h.empty()) error(e, "expected a term, got ", e.to_string());
      size_t nargs = e.items.size() - 1;
      if (auto op = g_.find_op(h)) {
        const OpInfo& info = g_.op(*op);
        if (nargs != info.args.size())
          error(e, "constructor ", h, " expects ", info.args.size(), " argument",
                info.args.size() == 1 ? "" : "s", ", got ", nargs);
        t.kind = RuleTerm::Kind::Constructor;
        t.id = *op;
      } else if (auto fn = g_.find_function(h)) {
        if (nargs != g_.function(*fn).args.size())
          error(e, "function ", h, " expects ", g_.function(*fn).args.size(), " arguments, got ", nargs);
        t.kind = RuleTerm::Kind::Function;
        t.id = *fn;
      } else if (auto p = g_.find_primitive(h)) {
        t.kind = RuleTerm::Kind::Primitive;
        t.id = *p;
      } else {
        error(e.items[0], "unknown constructor, function or primitive '", h, "'");
      }
      for (size_t k = 1; k < e.items.size(); ++k) {
        uint32_t a = term(b, e.items[k], action);
        t.args.push_back(a);
        if (t.kind == RuleTerm::Kind::Constructor) check_term_sort(b, e.items[k], a, g_.op(t.id).args[k - 1], h, k);
        if (t.kind == RuleTerm::Kind::Function) check_term_sort(b, e.items[k], a, g_.function(t.id).args[k - 1], h, k);
      }
    }
    b.rule.terms.push_back(std::move(t));
    return static_cast<uint32_t>(b.rule.terms.size() - 1);
  }

  SortId term_sort(const Builder& b, uint32_t t) {
    const RuleTerm& term = b.rule.terms[t];
    switch (term.kind) {
      case RuleTerm::Kind::Var: return b.rule.vars[term.var].sort;
      case RuleTerm::Kind::Constructor: return g_.op(term.id).sort;
      case RuleTerm::Kind::Function: return g_.function(term.id).out;
      default: return kInvalid;
    }
  }

  void check_term_sort(Builder& b, const SExpr& at, uint32_t t, SortId want, const std::string& owner, size_t k) {
    SortId have = term_sort(b, t);
    const RuleTerm& term = b.rule.terms[t];
    if (term.kind == RuleTerm::Kind::Literal && term.literal.kind() != ValueKind::Class) {
      ValueKind wk = g_.sort(want).kind;
      if (wk == ValueKind::F64 && term.literal.kind() == ValueKind::I64)
        b.rule.terms[t].literal = Value::f64(static_cast<double>(term.literal.as_i64()));
      else if (wk != term.literal.kind())
        error(at, "argument ", k, " of ", owner, " must be a ", sort_name(want), ", got ", at.to_string());
      return;
    }
    if (have != kInvalid && have != want)
      error(at, "argument ", k, " of ", owner, " must be a ", sort_name(want), ", got a ", sort_name(have));
  }

  void mark_query_bound(Builder& b) {
    for (const Atom& a : b.rule.atoms)
      for (int v : a.vars)
        if (v >= 0) b.bound[v] = true;
    for (const Guard& gd : b.rule.guards)
      if (gd.bind >= 0) b.bound[gd.bind] = true;
  }

  void action(Builder& b, const SExpr& a) {
    const std::string& h = a.head();
    Action act;
    if (h == "let") {
      if (a.items.size() != 3 || !a.items[1].is_var()) error(a, "expected (let ?name term)");
      if (b.vars.count(a.items[1].text)) error(a.items[1], "let rebinds ", a.items[1].text);
      act.kind = Action::Kind::Let;
      act.a = term(b, a.items[2], true);
      act.var = var(b, a.items[1], term_sort(b, act.a));
      b.bound[act.var] = true;
    } else if (h == "union") {
      if (a.items.size() != 3) error(a, "expected (union a b)");
      act.kind = Action::Kind::Union;
      act.a = term(b, a.items[1], true);
      act.b = term(b, a.items[2], true);
      SortId sa = term_sort(b, act.a), sb = term_sort(b, act.b);
      if (sa != kInvalid && sb != kInvalid && sa != sb)
        error(a, "union of a ", sort_name(sa), " and a ", sort_name(sb));
      if ((sa != kInvalid && g_.sort(sa).kind != ValueKind::Class))
        error(a, "union needs e-class terms, got a ", sort_name(sa));
    } else if (h == "set") {
      if (a.items.size() != 3 || !g_.find_function(a.items[1].head())) error(a, "expected (set (function args...) value)");
      act.kind = Action::Kind::Set;
      act.a = term(b, a.items[1], true);
      act.b = term(b, a.items[2], true);
      check_term_sort(b, a.items[2], act.b, g_.function(b.rule.terms[act.a].id).out, "set", 2);
    } else if (h == "subsume" || h == "delete") {
      if (a.items.size() != 2 || !is_query_app(a.items[1])) error(a, "expected (", h, " (Constructor args...))");
      if (h == "subsume" && !g_.find_op(a.items[1].head())) error(a, "subsume needs a constructor term");
      act.kind = h == "subsume" ? Action::Kind::Subsume : Action::Kind::Delete;
      act.a = term(b, a.items[1], true);
    } else if (g_.find_function(h) && g_.sort(g_.function(*g_.find_function(h)).out).kind == ValueKind::Bool) {
      act.kind = Action::Kind::Set;  // (rel args...) inserts into a relation
      act.a = term(b, a, true);
      RuleTerm t;
      t.kind = RuleTerm::Kind::Literal;
      t.literal = Value::boolean(true);
      b.rule.terms.push_back(t);
      act.b = static_cast<uint32_t>(b.rule.terms.size() - 1);
    } else if (a.is_list() && !h.empty()) {
      act.kind = Action::Kind::Build;
      act.a = term(b, a, true);
    } else {
      error(a, "expected an action (let, union, set, subsume, delete or a term), got ", a.to_string());
    }
    b.rule.actions.push_back(act);
  }

  void finish_rule(Builder& b, const SExpr& form, const Options& o) {
    b.rule.ruleset = string_option(o, ":ruleset", "");
    b.rule.disabled = string_option(o, ":disabled", "");
    if (auto it = o.named.find(":tolerance"); it != o.named.end()) {
      const SExpr& v = *it->second;
      double t = v.kind == SExpr::Kind::Float ? v.f : v.kind == SExpr::Kind::Int ? static_cast<double>(v.i) : -1;
      if (!(t >= 0 && std::isfinite(t))) error(v, ":tolerance expects a finite number >= 0, got ", v.to_string());
      b.rule.tolerance = t;
    }
    if (!g_.has_ruleset(b.rule.ruleset)) {
      const SExpr& at = o.named.count(":ruleset") ? *o.named.at(":ruleset") : form;
      error(at, "rule \"", b.rule.name, "\": unknown ruleset '", b.rule.ruleset, "' (declare it with (ruleset ", b.rule.ruleset, "))");
    }
    g_.add_rule(std::move(b.rule));
  }

  Builder new_builder(const SExpr& form, const Options& o, const std::string& def_name) {
    Builder b;
    b.rule.loc = {file_, form.line, form.col};
    b.rule.name = string_option(o, ":name", def_name);
    return b;
  }

  void rule(const SExpr& f) {
    Options o = options(f, 1, {":name", ":ruleset", ":disabled", ":tolerance"});
    if (o.positional.size() != 2 || !o.positional[0]->is_list() || !o.positional[1]->is_list())
      error(f, "expected (rule (facts...) (actions...) :name \"...\")");
    Builder b = new_builder(f, o, "rule@" + std::to_string(f.line) + ":" + std::to_string(f.col));
    for (const SExpr& fact_e : o.positional[0]->items) fact(b, fact_e);
    mark_query_bound(b);
    for (const SExpr& a : o.positional[1]->items) action(b, a);
    finish_rule(b, f, o);
  }

  void rewrite(const SExpr& f, bool both) {
    Options o = options(f, 1, {":name", ":ruleset", ":disabled", ":tolerance", ":when"}, {":subsume"});
    if (o.positional.size() != 2) error(f, "expected (", f.head(), " lhs rhs :when (...) :name \"...\")");
    for (int dir = 0; dir < (both ? 2 : 1); ++dir) {
      const SExpr& lhs = *o.positional[dir];
      const SExpr& rhs = *o.positional[1 - dir];
      if (!lhs.is_list() || !g_.find_op(lhs.head()))
        error(lhs, "the left-hand side of a rewrite must be a constructor pattern");
      std::string name = lhs.to_string() + " => " + rhs.to_string();
      Builder b = new_builder(f, o, name);
      if (both) b.rule.name += dir ? " (backward)" : " (forward)";
      int root = pattern(b, lhs, -1);
      if (auto it = o.named.find(":when"); it != o.named.end()) {
        if (!it->second->is_list()) error(*it->second, ":when expects a list of facts");
        for (const SExpr& g : it->second->items) fact(b, g);
      }
      mark_query_bound(b);
      Action u;
      u.kind = Action::Kind::Union;
      RuleTerm rt;
      rt.kind = RuleTerm::Kind::Var;
      rt.var = root;
      b.rule.terms.push_back(rt);
      u.a = static_cast<uint32_t>(b.rule.terms.size() - 1);
      u.b = term(b, rhs, true);
      SortId rs = term_sort(b, u.b);
      if (rs != kInvalid && rs != b.rule.vars[root].sort)
        error(rhs, "rewrite: the right-hand side is a ", sort_name(rs), ", the left a ", sort_name(b.rule.vars[root].sort));
      b.rule.actions.push_back(u);
      if (o.named.count(":subsume")) {
        Action s;
        s.kind = Action::Kind::Subsume;
        s.a = term(b, lhs, true);
        b.rule.actions.push_back(s);
      }
      finish_rule(b, f, o);
    }
  }

  // ------------------------------------------------------------ top-level terms
  Value eval_global(const SExpr& e) {
    Builder b;
    b.rule.name = "<term>";
    uint32_t t = term(b, e, true);
    std::vector<Value> env;
    std::optional<Value> v = g_.eval_term(b.rule, t, env, true);
    if (!v) error(e, "term has no value: ", e.to_string());
    return *v;
  }

  Schedule schedule(const SExpr& s) {
    auto ruleset = [&](const SExpr& n) {
      const std::string& r = symbol(n, "a ruleset name");
      if (!g_.has_ruleset(r)) error(n, "unknown ruleset '", r, "'");
      return r;
    };
    if (s.is_symbol()) return Schedule::run(ruleset(s));
    const std::string& h = s.head();
    std::vector<Schedule> body;
    if (h == "run") {
      std::string rs;
      uint64_t n = 1;
      for (size_t k = 1; k < s.items.size(); ++k) {
        if (s.items[k].kind == SExpr::Kind::Int && s.items[k].i >= 0) n = static_cast<uint64_t>(s.items[k].i);
        else rs = ruleset(s.items[k]);
      }
      return Schedule::run(rs, n);
    }
    size_t first = h == "repeat" ? 2 : 1;
    for (size_t k = first; k < s.items.size(); ++k) body.push_back(schedule(s.items[k]));
    if (h == "seq") return Schedule::seq(std::move(body));
    if (h == "saturate") return Schedule::saturate(std::move(body));
    if (h == "repeat") {
      if (s.items.size() < 2 || s.items[1].kind != SExpr::Kind::Int || s.items[1].i < 0)
        error(s, "expected (repeat N schedule...)");
      return Schedule::repeat(static_cast<uint64_t>(s.items[1].i), std::move(body));
    }
    error(s, "expected a schedule: a ruleset name, (run R [n]), (repeat n ...), (saturate ...) or (seq ...)");
  }

  EGraph& g_;
  std::string file_;
};

void EGraph::load_string(std::string_view text, const std::string& filename) {
  Loader(*this, filename).load(text);
}

void EGraph::load_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, ": cannot open rule file");
  std::stringstream ss;
  ss << in.rdbuf();
  load_string(ss.str(), path);
}

ClassId EGraph::add_term(std::string_view text) { return Loader(*this, "<term>").term_value(text); }

}  // namespace luminal::egraph
