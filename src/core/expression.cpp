// Symbolic integer expressions: hash-consed nodes, a canonicalising simplifier,
// interval bounds, evaluation and C emission. See docs/EXPRESSIONS.md.
#include "luminal/expression.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <limits>
#include <mutex>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "expression_internal.hpp"
#include "luminal/error.hpp"

namespace luminal {

namespace {
__extension__ typedef __int128 i128;

constexpr i128 kInf = static_cast<i128>(1) << 100;
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Wrapping arithmetic for constant folding (no UB; eval() reports overflow).
int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
int64_t wrap_neg(int64_t a) { return static_cast<int64_t>(0 - static_cast<uint64_t>(a)); }

// Floor division / modulo for b != 0 and not (a == INT64_MIN && b == -1).
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
i128 floor_div128(i128 a, i128 b) {
  i128 q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int kind_rank(ExprKind k) {
  switch (k) {
    case ExprKind::Var: return 0;
    case ExprKind::Mul: return 1;
    case ExprKind::Div: return 2;
    case ExprKind::Mod: return 3;
    case ExprKind::CeilDiv: return 4;
    case ExprKind::Min: return 5;
    case ExprKind::Max: return 6;
    case ExprKind::Add: return 7;
    case ExprKind::Lt: return 8;
    case ExprKind::Eq: return 9;
    case ExprKind::And: return 10;
    case ExprKind::Or: return 11;
    case ExprKind::Not: return 12;
    case ExprKind::Num: return 13;
  }
  return 14;
}

const char* kind_name(ExprKind k) {
  switch (k) {
    case ExprKind::Num: return "Num";
    case ExprKind::Var: return "Var";
    case ExprKind::Add: return "Add";
    case ExprKind::Mul: return "Mul";
    case ExprKind::Div: return "Div";
    case ExprKind::Mod: return "Mod";
    case ExprKind::Min: return "Min";
    case ExprKind::Max: return "Max";
    case ExprKind::CeilDiv: return "CeilDiv";
    case ExprKind::Lt: return "Lt";
    case ExprKind::Eq: return "Eq";
    case ExprKind::And: return "And";
    case ExprKind::Or: return "Or";
    case ExprKind::Not: return "Not";
  }
  return "?";
}
}  // namespace

struct ExprNode {
  ExprKind kind;
  int64_t value = 0;  // Num
  std::string name;   // Var
  std::vector<Expression> kids;
  size_t hash = 0;
  uint64_t var_mask = 0;  // one bit per variable-name hash: cheap "may depend on"
  bool has_lo = false, has_hi = false;
  int64_t lo = 0, hi = 0;
  // simplify() result; points to the node itself for canonical nodes.
  mutable std::atomic<const ExprNode*> simplified{nullptr};
};

namespace {

struct Iv {
  i128 lo, hi;
};

Iv iv_of(const ExprNode* n) { return {n->has_lo ? i128(n->lo) : -kInf, n->has_hi ? i128(n->hi) : kInf}; }
Iv iv_of(const Expression& e) { return iv_of(e.node()); }

i128 sat(i128 v) { return v >= kInf ? kInf : (v <= -kInf ? -kInf : v); }
i128 mul_ext(i128 a, i128 b) {
  if (a == 0 || b == 0) return 0;
  if (a >= kInf || a <= -kInf || b >= kInf || b <= -kInf) return ((a > 0) == (b > 0)) ? kInf : -kInf;
  return sat(a * b);
}
// floor(a / n) for finite nonzero n; infinities keep their (adjusted) sign.
i128 div_ext(i128 a, i128 n) {
  if (a >= kInf || a <= -kInf) return ((a > 0) == (n > 0)) ? kInf : -kInf;
  return floor_div128(a, n);
}
// floor(a / b) with b >= 1 possibly infinite.
i128 div_pos_ext(i128 a, i128 b) {
  if (a >= kInf || a <= -kInf) return a > 0 ? kInf : -kInf;
  if (b >= kInf) return a >= 0 ? 0 : -1;
  return floor_div128(a, b);
}

Iv div_bounds(Iv a, Iv b) {
  if (b.lo == b.hi && b.lo > -kInf && b.lo < kInf) {
    i128 n = b.lo;
    if (n == 0) return {-kInf, kInf};
    i128 x = div_ext(a.lo, n), y = div_ext(a.hi, n);
    return {std::min(x, y), std::max(x, y)};
  }
  if (b.lo >= 0 || b.hi <= 0) {
    bool neg = b.hi <= 0 && b.lo < 0;
    if (neg) {  // a/b == (-a)/(-b)
      a = {-a.hi, -a.lo};
      b = {-b.hi, -b.lo};
    }
    i128 blo = std::max<i128>(b.lo, 1), bhi = b.hi;
    if (bhi < blo) return {-kInf, kInf};
    i128 c[4] = {div_pos_ext(a.lo, blo), div_pos_ext(a.lo, bhi), div_pos_ext(a.hi, blo), div_pos_ext(a.hi, bhi)};
    return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
  }
  if (a.lo > -kInf && a.hi < kInf) {
    i128 m = std::max(-a.lo, a.hi);
    if (m < 0) m = 0;
    return {-m, m};
  }
  return {-kInf, kInf};
}

Iv mod_bounds(Iv a, Iv b) {
  if (b.lo == b.hi && b.lo > -kInf && b.lo < kInf) {
    i128 n = b.lo;
    if (n == 0) return {-kInf, kInf};
    if (a.lo > -kInf && a.hi < kInf) {
      i128 k = floor_div128(a.lo, n);
      if (floor_div128(a.hi, n) == k) {
        i128 x = a.lo - k * n, y = a.hi - k * n;
        return {std::min(x, y), std::max(x, y)};
      }
    }
    if (n > 0) return {0, a.lo >= 0 ? std::min(n - 1, a.hi) : n - 1};
    return {a.hi <= 0 ? std::max(n + 1, a.lo) : n + 1, 0};
  }
  if (b.lo >= 0) {
    i128 hi = b.hi >= kInf ? kInf : b.hi - 1;
    if (a.lo >= 0) hi = std::min(hi, a.hi);
    return {0, std::max<i128>(hi, 0)};
  }
  if (b.hi <= 0) {
    i128 lo = b.lo <= -kInf ? -kInf : b.lo + 1;
    if (a.hi <= 0) lo = std::max(lo, a.lo);
    return {std::min<i128>(lo, 0), 0};
  }
  if (b.lo > -kInf && b.hi < kInf) {
    i128 m = std::max(-b.lo, b.hi) - 1;
    return {-m, m};
  }
  return {-kInf, kInf};
}

Iv compute_bounds(ExprKind kind, int64_t value, const std::vector<Expression>& kids) {
  switch (kind) {
    case ExprKind::Num: return {value, value};
    case ExprKind::Var: return {0, kInf};
    case ExprKind::Add: {
      Iv r{0, 0};
      for (const auto& k : kids) {
        Iv b = iv_of(k);
        r.lo = sat(r.lo + b.lo);
        r.hi = sat(r.hi + b.hi);
      }
      return r;
    }
    case ExprKind::Mul: {
      Iv r{1, 1};
      for (const auto& k : kids) {
        Iv b = iv_of(k);
        i128 c[4] = {mul_ext(r.lo, b.lo), mul_ext(r.lo, b.hi), mul_ext(r.hi, b.lo), mul_ext(r.hi, b.hi)};
        r = {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
      }
      return r;
    }
    case ExprKind::Div: return div_bounds(iv_of(kids[0]), iv_of(kids[1]));
    case ExprKind::Mod: return mod_bounds(iv_of(kids[0]), iv_of(kids[1]));
    case ExprKind::CeilDiv: {
      Iv a = iv_of(kids[0]);
      Iv r = div_bounds({-a.hi, -a.lo}, iv_of(kids[1]));
      return {-r.hi, -r.lo};
    }
    case ExprKind::Min:
    case ExprKind::Max: {
      Iv r = iv_of(kids[0]);
      for (size_t i = 1; i < kids.size(); ++i) {
        Iv b = iv_of(kids[i]);
        if (kind == ExprKind::Min) r = {std::min(r.lo, b.lo), std::min(r.hi, b.hi)};
        else r = {std::max(r.lo, b.lo), std::max(r.hi, b.hi)};
      }
      return r;
    }
    case ExprKind::Lt:
    case ExprKind::Eq:
    case ExprKind::And:
    case ExprKind::Or:
    case ExprKind::Not: return {0, 1};
  }
  return {-kInf, kInf};
}

}  // namespace

// ---------------------------------------------------------------------------
// Interner
// ---------------------------------------------------------------------------

struct ExprInterner {
  struct Key {
    ExprKind kind;
    int64_t value;
    std::string_view name;
    std::span<const Expression> kids;
    size_t hash;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(const ExprNode* n) const { return n->hash; }
    size_t operator()(const Key& k) const { return k.hash; }
  };
  struct Eq {
    using is_transparent = void;
    static bool same(ExprKind k1, int64_t v1, std::string_view n1, std::span<const Expression> c1, ExprKind k2,
                     int64_t v2, std::string_view n2, std::span<const Expression> c2) {
      if (k1 != k2 || v1 != v2 || c1.size() != c2.size() || n1 != n2) return false;
      for (size_t i = 0; i < c1.size(); ++i)
        if (!(c1[i] == c2[i])) return false;
      return true;
    }
    bool operator()(const ExprNode* a, const ExprNode* b) const { return a == b; }
    bool operator()(const Key& k, const ExprNode* n) const {
      return same(k.kind, k.value, k.name, k.kids, n->kind, n->value, n->name, n->kids);
    }
    bool operator()(const ExprNode* n, const Key& k) const { return (*this)(k, n); }
  };

  std::mutex mu;
  std::unordered_set<const ExprNode*, Hash, Eq> table;

  static ExprInterner& get() {
    static ExprInterner* instance = new ExprInterner();  // never freed, like its nodes
    return *instance;
  }

  static Expression wrap(const ExprNode* n) { return Expression(n); }

  static Expression intern(ExprKind kind, int64_t value, std::string_view name, std::span<const Expression> kids) {
    uint64_t h = mix64(static_cast<uint64_t>(kind) + 0x51ULL);
    h = mix64(h ^ static_cast<uint64_t>(value));
    if (!name.empty()) h = mix64(h ^ fnv1a(name));
    for (const auto& k : kids) h = mix64(h ^ k.node()->hash);
    Key key{kind, value, name, kids, static_cast<size_t>(h)};
    ExprInterner& in = get();
    std::lock_guard<std::mutex> lock(in.mu);
    auto it = in.table.find(key);
    if (it != in.table.end()) return Expression(*it);
    auto* n = new ExprNode();
    n->kind = kind;
    n->value = value;
    n->name = std::string(name);
    n->kids.assign(kids.begin(), kids.end());
    n->hash = static_cast<size_t>(h);
    if (kind == ExprKind::Var) n->var_mask = 1ULL << (fnv1a(name) % 64);
    for (const auto& k : kids) n->var_mask |= k.node()->var_mask;
    Iv b = compute_bounds(kind, value, n->kids);
    n->has_lo = b.lo >= kI64Min && b.lo <= kI64Max && b.lo > -kInf;
    n->has_hi = b.hi <= kI64Max && b.hi >= kI64Min && b.hi < kInf;
    if (n->has_lo) n->lo = static_cast<int64_t>(b.lo);
    if (n->has_hi) n->hi = static_cast<int64_t>(b.hi);
    in.table.insert(n);
    return Expression(n);
  }
};

namespace detail {
size_t interned_node_count() {
  ExprInterner& in = ExprInterner::get();
  std::lock_guard<std::mutex> lock(in.mu);
  return in.table.size();
}
}  // namespace detail

namespace {

void mark_canonical(const Expression& e) { e.node()->simplified.store(e.node(), std::memory_order_release); }

Expression make_num(int64_t v) {
  Expression e = ExprInterner::intern(ExprKind::Num, v, {}, {});
  mark_canonical(e);
  return e;
}

struct SmallConsts {
  static constexpr int64_t kLo = -256, kHi = 1024;
  std::vector<Expression> table;
  SmallConsts() {
    table.reserve(kHi - kLo);
    for (int64_t v = kLo; v < kHi; ++v) table.push_back(make_num(v));
  }
};

Expression num(int64_t v) {
  static const SmallConsts consts;
  if (v >= SmallConsts::kLo && v < SmallConsts::kHi) return consts.table[static_cast<size_t>(v - SmallConsts::kLo)];
  return make_num(v);
}

// Structural three-way comparison (stable across runs).
int compare(const Expression& a, const Expression& b) {
  if (a == b) return 0;
  const ExprNode* x = a.node();
  const ExprNode* y = b.node();
  int rx = kind_rank(x->kind), ry = kind_rank(y->kind);
  if (rx != ry) return rx < ry ? -1 : 1;
  switch (x->kind) {
    case ExprKind::Num: return x->value < y->value ? -1 : (x->value > y->value ? 1 : 0);
    case ExprKind::Var: {
      int c = x->name.compare(y->name);
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    default: break;
  }
  size_t n = std::min(x->kids.size(), y->kids.size());
  for (size_t i = 0; i < n; ++i) {
    int c = compare(x->kids[i], y->kids[i]);
    if (c != 0) return c;
  }
  if (x->kids.size() != y->kids.size()) return x->kids.size() < y->kids.size() ? -1 : 1;
  return 0;
}

bool expr_less(const Expression& a, const Expression& b) { return compare(a, b) < 0; }

bool lo_ge(const Expression& e, int64_t v) { return e.node()->has_lo && e.node()->lo >= v; }
bool hi_le(const Expression& e, int64_t v) { return e.node()->has_hi && e.node()->hi <= v; }
bool is_bool(const Expression& e) { return lo_ge(e, 0) && hi_le(e, 1); }
bool known_nonzero(const Expression& e) { return lo_ge(e, 1) || hi_le(e, -1); }
std::optional<int64_t> const_of(const Expression& e) {
  if (e.node()->kind == ExprKind::Num) return e.node()->value;
  return std::nullopt;
}

// Intern a canonical node; fold it to a constant if its bounds are a point.
Expression finish(ExprKind kind, const std::vector<Expression>& kids) {
  Expression e = ExprInterner::intern(kind, 0, {}, kids);
  const ExprNode* n = e.node();
  if (n->has_lo && n->has_hi && n->lo == n->hi) return num(n->lo);
  mark_canonical(e);
  return e;
}

// ---- memo of binary builder results ----
// Builders are pure functions of their (canonical, interned) arguments, so their results
// can be cached by argument identity; views rebuild the same expressions very often.
enum class MemoOp : uint8_t { Add, Sub, Mul, Div, Mod, Min, Max, CeilDiv, Lt, Eq };

class BuildMemo {
 public:
  template <class F>
  Expression get(MemoOp op, const Expression& a, const Expression& b, F&& compute) {
    Key k{a.node(), b.node(), op};
    Shard& s = shards_[mix64(reinterpret_cast<uintptr_t>(k.a) * 31 + reinterpret_cast<uintptr_t>(k.b)) % kShards];
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.map.find(k);
      if (it != s.map.end()) return it->second;
    }
    Expression r = compute();
    std::lock_guard<std::mutex> lock(s.mu);
    s.map.emplace(k, r);
    return r;
  }

 private:
  struct Key {
    const ExprNode* a;
    const ExprNode* b;
    MemoOp op;
    bool operator==(const Key& o) const { return a == o.a && b == o.b && op == o.op; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return static_cast<size_t>(mix64(reinterpret_cast<uintptr_t>(k.a) ^ (reinterpret_cast<uintptr_t>(k.b) << 1) ^
                                       static_cast<uint64_t>(k.op)));
    }
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<Key, Expression, KeyHash> map;
  };
  static constexpr size_t kShards = 16;
  Shard shards_[kShards];
};

BuildMemo& memo() {
  static BuildMemo* m = new BuildMemo();  // never freed, like the nodes it refers to
  return *m;
}

// ---- builders (all arguments must be canonical) ----
Expression b_add(std::vector<Expression> xs);
Expression b_mul(std::vector<Expression> xs);
Expression b_div(const Expression& a, const Expression& b);
Expression b_mod(const Expression& a, const Expression& b);
Expression b_ceildiv(const Expression& a, const Expression& b);
Expression b_minmax(ExprKind kind, std::vector<Expression> xs);
Expression b_lt(const Expression& a, const Expression& b);
Expression b_eq(const Expression& a, const Expression& b);
Expression b_logic(ExprKind kind, std::vector<Expression> xs);
Expression b_not(const Expression& a);

Expression b_neg(const Expression& a) { return b_mul({a, num(-1)}); }
Expression b_sub(const Expression& a, const Expression& b) { return b_add({a, b_neg(b)}); }

// A linear view of a canonical expression: sum(coeff_i * base_i) + k.
struct Term {
  Expression base;
  int64_t coeff;
};
struct Linear {
  std::vector<Term> terms;
  int64_t k = 0;
};

// Split a canonical non-constant, non-Add expression into base * coeff.
Term split_term(const Expression& e) {
  const ExprNode* n = e.node();
  if (n->kind == ExprKind::Mul && n->kids.back().node()->kind == ExprKind::Num) {
    int64_t c = n->kids.back().node()->value;
    if (n->kids.size() == 2) return {n->kids[0], c};
    std::vector<Expression> rest(n->kids.begin(), n->kids.end() - 1);
    return {finish(ExprKind::Mul, rest), c};
  }
  return {e, 1};
}

void add_to_linear(Linear& l, const Expression& e) {
  const ExprNode* n = e.node();
  if (n->kind == ExprKind::Num) l.k = wrap_add(l.k, n->value);
  else if (n->kind == ExprKind::Add)
    for (const auto& c : n->kids) add_to_linear(l, c);
  else l.terms.push_back(split_term(e));
}

Linear linear(const Expression& e) {
  Linear l;
  add_to_linear(l, e);
  return l;
}

Expression term_expr(const Term& t) {
  if (t.coeff == 1) return t.base;
  return b_mul({t.base, num(t.coeff)});
}

Expression from_linear(const std::vector<Term>& terms, int64_t k) {
  std::vector<Expression> xs;
  xs.reserve(terms.size() + 1);
  for (const auto& t : terms) xs.push_back(term_expr(t));
  xs.push_back(num(k));
  return b_add(std::move(xs));
}

// gcd(|a|, |b|); 1 when either is INT64_MIN, so callers never normalise such terms
// (dividing INT64_MIN by -1 is undefined).
int64_t gcd_abs(int64_t a, int64_t b) {
  if (a == kI64Min || b == kI64Min) return 1;
  uint64_t x = a < 0 ? 0 - static_cast<uint64_t>(a) : static_cast<uint64_t>(a);
  uint64_t y = b < 0 ? 0 - static_cast<uint64_t>(b) : static_cast<uint64_t>(b);
  uint64_t g = std::gcd(x, y);
  return g > static_cast<uint64_t>(kI64Max) ? 0 : static_cast<int64_t>(g);
}

// ---- Add ----
Expression b_add(std::vector<Expression> xs) {
  Linear l;
  for (const auto& x : xs) add_to_linear(l, x);
  auto& terms = l.terms;
  std::stable_sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) { return expr_less(a.base, b.base); });
  std::vector<Term> merged;
  merged.reserve(terms.size());
  for (const auto& t : terms) {
    if (!merged.empty() && merged.back().base == t.base) merged.back().coeff = wrap_add(merged.back().coeff, t.coeff);
    else merged.push_back(t);
  }
  merged.erase(std::remove_if(merged.begin(), merged.end(), [](const Term& t) { return t.coeff == 0; }), merged.end());
  auto factors_of = [](const Expression& base) -> std::span<const Expression> {
    if (base.node()->kind == ExprKind::Mul) return base.node()->kids;
    return {&base, 1};
  };
  // A term with coefficient c and the factors in `factors` is divisible by `d` when d
  // is a positive constant dividing c, or its symbolic factors are all in `factors`
  // (they are then removed). Returns the coefficient left over.
  auto divide_out = [&](int64_t c, const Expression& d, std::vector<Expression>& factors) -> std::optional<int64_t> {
    if (auto n = const_of(d)) {
      if (*n <= 0 || c % *n != 0) return std::nullopt;
      return c / *n;
    }
    for (const auto& df : factors_of(d)) {
      auto it = std::find(factors.begin(), factors.end(), df);
      if (df.node()->kind == ExprKind::Num || it == factors.end()) return std::nullopt;
      factors.erase(it);
    }
    return c;
  };
  bool has_mod = false;
  for (const auto& t : merged)
    for (const auto& f : factors_of(t.base)) has_mod |= f.node()->kind == ExprKind::Mod;

  if (has_mod && merged.size() >= 2) {
    // Dim-merge identity: F*c*(A%B) + F*c*B*(A/B) -> F*c*A. `partner` is the part that
    // must already be present in the sum (exact coefficients) next to term i; the pair
    // is replaced by `whole` (partner + term i == whole).
    auto try_merge = [&](size_t i, const Expression& partner, const Expression& whole) -> std::optional<Expression> {
      Linear p = linear(partner);
      if (p.terms.empty()) return std::nullopt;
      std::vector<bool> used(merged.size(), false);
      used[i] = true;
      for (const auto& pt : p.terms) {
        bool found = false;
        for (size_t j = 0; j < merged.size() && !found; ++j) {
          if (!used[j] && merged[j].base == pt.base && merged[j].coeff == pt.coeff) used[j] = found = true;
        }
        if (!found) return std::nullopt;
      }
      std::vector<Expression> next;
      for (size_t j = 0; j < merged.size(); ++j)
        if (!used[j]) next.push_back(term_expr(merged[j]));
      next.push_back(num(wrap_add(l.k, wrap_neg(p.k))));
      next.push_back(whole);
      return b_add(std::move(next));
    };
    for (size_t i = 0; i < merged.size(); ++i) {
      std::span<const Expression> fs = factors_of(merged[i].base);
      int64_t c = merged[i].coeff;
      for (size_t f = 0; f < fs.size(); ++f) {
        const ExprNode* m = fs[f].node();
        if (m->kind != ExprKind::Mod && m->kind != ExprKind::Div) continue;
        std::vector<Expression> rest;
        for (size_t g = 0; g < fs.size(); ++g)
          if (g != f) rest.push_back(fs[g]);
        const Expression& A = m->kids[0];
        const Expression& B = m->kids[1];
        if (m->kind == ExprKind::Mod) {
          // From the modulo side: look for F*c*B*(A/B).
          std::vector<Expression> partner = rest, whole = rest;
          partner.insert(partner.end(), {b_div(A, B), B, num(c)});
          whole.insert(whole.end(), {A, num(c)});
          if (auto r = try_merge(i, b_mul(std::move(partner)), b_mul(std::move(whole)))) return *r;
          // Partial merge: F*k*D*((X/D)%B) + F*k*(X%D) -> F*k*(X%(D*B)).
          if (A.node()->kind == ExprKind::Div) {
            const Expression& X = A.node()->kids[0];
            const Expression& D = A.node()->kids[1];
            std::vector<Expression> r2 = rest;
            auto kd = divide_out(c, D, r2);
            if (!kd) continue;
            int64_t k = *kd;
            std::vector<Expression> p2 = r2, w2 = r2;
            p2.insert(p2.end(), {b_mod(X, D), num(k)});
            w2.insert(w2.end(), {b_mod(X, b_mul({D, B})), num(k)});
            if (auto r = try_merge(i, b_mul(std::move(p2)), b_mul(std::move(w2)))) return *r;
          }
          continue;
        }
        // From the division side: F*k*B*(A/B) + F*k*(A%B), where A%B may have been
        // canonicalised to a congruent numerator, e.g. (z*3 + 1)%2 -> (z + 1)%2.
        auto kb = divide_out(c, B, rest);
        if (!kb) continue;
        int64_t k = *kb;
        std::vector<Expression> partner = rest, whole = rest;
        partner.insert(partner.end(), {b_mod(A, B), num(k)});
        whole.insert(whole.end(), {A, num(k)});
        if (auto r = try_merge(i, b_mul(std::move(partner)), b_mul(std::move(whole)))) return *r;
      }
    }
  }

  std::vector<Expression> kids;
  kids.reserve(merged.size() + 1);
  for (const auto& t : merged) kids.push_back(term_expr(t));
  if (l.k != 0) kids.push_back(num(l.k));
  if (kids.empty()) return num(0);
  if (kids.size() == 1) return kids[0];
  return finish(ExprKind::Add, kids);
}

// ---- Mul ----
// Policy (confluent by construction): a constant times a single sum is distributed
// (2*(a + b) -> a*2 + b*2); a sum multiplied by other non-constant factors is kept
// as a factor, normalised to its primitive part (gcd of its coefficients and sign
// of its first term moved into the product's constant): (a*2 + 4)*x -> (a + 2)*x*2.
Expression b_mul(std::vector<Expression> xs) {
  int64_t c = 1;
  std::vector<Expression> fs;
  fs.reserve(xs.size());
  for (const auto& x : xs) {
    const ExprNode* n = x.node();
    if (n->kind == ExprKind::Num) c = wrap_mul(c, n->value);
    else if (n->kind == ExprKind::Mul) {
      for (const auto& k : n->kids) {
        if (k.node()->kind == ExprKind::Num) c = wrap_mul(c, k.node()->value);
        else fs.push_back(k);
      }
    } else fs.push_back(x);
  }
  if (c == 0) return num(0);
  if (fs.empty()) return num(c);
  if (fs.size() == 1) {
    if (c == 1) return fs[0];
    if (fs[0].node()->kind == ExprKind::Add) {
      std::vector<Expression> terms;
      for (const auto& t : fs[0].node()->kids) terms.push_back(b_mul({t, num(c)}));
      return b_add(std::move(terms));
    }
  } else {
    for (auto& f : fs) {
      if (f.node()->kind != ExprKind::Add) continue;
      Linear l = linear(f);
      int64_t g = gcd_abs(0, l.k);
      for (const auto& t : l.terms) g = gcd_abs(g, t.coeff);
      if (g == 0) continue;
      if (!l.terms.empty() && l.terms[0].coeff < 0) {
        bool has_min = l.k == kI64Min;
        for (const auto& t : l.terms) has_min |= t.coeff == kI64Min;
        if (!has_min) g = -g;
      }
      if (g == 1) continue;
      for (auto& t : l.terms) t.coeff /= g;
      f = from_linear(l.terms, l.k / g);
      c = wrap_mul(c, g);
    }
  }
  std::sort(fs.begin(), fs.end(), expr_less);
  if (c != 1) fs.push_back(num(c));
  return finish(ExprKind::Mul, fs);
}

// ---- Div / Mod ----
// Does the canonical term base `t` contain the factor `f`? If so return t / f.
std::optional<Expression> strip_factor(const Expression& t, const Expression& f) {
  if (t == f) return num(1);
  const ExprNode* tn = t.node();
  if (tn->kind != ExprKind::Mul) return std::nullopt;
  std::vector<Expression> rest(tn->kids.begin(), tn->kids.end());
  std::vector<Expression> need;
  if (f.node()->kind == ExprKind::Mul) need = f.node()->kids;
  else need = {f};
  for (const auto& x : need) {
    if (x.node()->kind == ExprKind::Num) return std::nullopt;
    auto it = std::find(rest.begin(), rest.end(), x);
    if (it == rest.end()) return std::nullopt;
    rest.erase(it);
  }
  return b_mul(std::move(rest));
}

Expression b_div_impl(const Expression& a, const Expression& b) {
  auto bc = const_of(b);
  auto ac = const_of(a);
  if (bc) {
    int64_t n = *bc;
    if (n == 0) return finish(ExprKind::Div, {a, b});
    if (ac) {
      if (*ac == kI64Min && n == -1) return finish(ExprKind::Div, {a, b});
      return num(floor_div(*ac, n));
    }
    if (n == 1) return a;
    if (n < 0) {
      if (n == kI64Min) return finish(ExprKind::Div, {a, b});
      return b_div(b_neg(a), num(-n));
    }
    // Bounds decide the quotient.
    const ExprNode* an = a.node();
    if (an->has_lo && an->has_hi && floor_div(an->lo, n) == floor_div(an->hi, n)) return num(floor_div(an->lo, n));
    // (x / m) / n -> x / (m*n)  (m a positive constant, or symbolic and >= 0: then m >= 1 where defined)
    if (an->kind == ExprKind::Div) {
      if (auto m = const_of(an->kids[1])) {
        if (*m > 0 && *m <= kI64Max / n) return b_div(an->kids[0], num(*m * n));
      } else if (lo_ge(an->kids[1], 0)) {
        return b_div(an->kids[0], b_mul({an->kids[1], b}));
      }
    }
    // (x % m) / n -> (x / n) % (m / n) when n | m (m constant, or symbolic m = base*c with n | c)
    if (an->kind == ExprKind::Mod) {
      if (auto m = const_of(an->kids[1])) {
        if (*m > 0 && *m % n == 0) return b_mod(b_div(an->kids[0], num(n)), num(*m / n));
      } else if (an->kids[1].kind() != ExprKind::Add) {
        Term t = split_term(an->kids[1]);
        if (t.coeff > 0 && t.coeff % n == 0 && lo_ge(t.base, 0))
          return b_mod(b_div(an->kids[0], num(n)), b_mul({t.base, num(t.coeff / n)}));
      }
    }
    Linear l = linear(a);
    int64_t g = n;
    for (const auto& t : l.terms) g = gcd_abs(g, t.coeff);
    g = gcd_abs(g, l.k);
    if (g > 1) {
      for (auto& t : l.terms) t.coeff /= g;
      return b_div(from_linear(l.terms, l.k / g), num(n / g));
    }
    // Extract the multiples of n: (n*Q + R) / n -> Q + R / n.
    std::vector<Term> q, r;
    for (const auto& t : l.terms) {
      if (t.coeff % n == 0) q.push_back({t.base, t.coeff / n});
      else r.push_back(t);
    }
    int64_t kq = floor_div(l.k, n), kr = floor_mod(l.k, n);
    if (!q.empty() || kq != 0) {
      Expression rest = b_div(from_linear(r, kr), b);
      std::vector<Expression> xs;
      for (const auto& t : q) xs.push_back(term_expr(t));
      xs.push_back(num(kq));
      xs.push_back(rest);
      return b_add(std::move(xs));
    }
    return finish(ExprKind::Div, {a, b});
  }
  // Symbolic divisor.
  if (ac && *ac == 0) return num(0);
  if (a == b) return num(1);
  const ExprNode* an = a.node();
  if (an->kind == ExprKind::Mod && an->kids[1] == b) return num(0);  // (x % b) / b == 0
  if (lo_ge(b, 0)) {  // b >= 1 wherever the division is defined
    // (x / m) / b -> x / (m*b) for m >= 1
    if (an->kind == ExprKind::Div && (lo_ge(an->kids[1], 1) || (!an->kids[1].is_constant() && lo_ge(an->kids[1], 0))))
      return b_div(an->kids[0], b_mul({an->kids[1], b}));
    // (x % (q*b)) / b -> (x / b) % q for q >= 1
    if (an->kind == ExprKind::Mod) {
      if (auto q = strip_factor(an->kids[1], b); q && lo_ge(*q, 0) && !(q->is_constant() && q->constant_value() == 0))
        return b_mod(b_div(an->kids[0], b), *q);
    }
  }
  if (lo_ge(a, 0) && b.node()->has_lo && an->has_hi && an->hi < b.node()->lo) return num(0);
  Linear l = linear(a);
  std::vector<Expression> q, r;
  for (const auto& t : l.terms) {
    if (auto s = strip_factor(t.base, b)) q.push_back(b_mul({*s, num(t.coeff)}));
    else r.push_back(term_expr(t));
  }
  if (!q.empty()) {
    r.push_back(num(l.k));
    q.push_back(b_div(b_add(std::move(r)), b));
    return b_add(std::move(q));
  }
  return finish(ExprKind::Div, {a, b});
}

Expression b_mod_impl(const Expression& a, const Expression& b) {
  auto bc = const_of(b);
  auto ac = const_of(a);
  if (bc) {
    int64_t n = *bc;
    if (n == 0) return finish(ExprKind::Mod, {a, b});
    if (n == 1 || n == -1) return num(0);
    if (ac) return num(floor_mod(*ac, n));
    if (n < 0) {
      if (n == kI64Min) return finish(ExprKind::Mod, {a, b});
      return b_neg(b_mod(b_neg(a), num(-n)));
    }
    const ExprNode* an = a.node();
    if (an->has_lo && an->has_hi) {
      int64_t k = floor_div(an->lo, n);
      if (floor_div(an->hi, n) == k) return k == 0 ? a : b_add({a, num(wrap_neg(wrap_mul(k, n)))});
    }
    if (an->kind == ExprKind::Mod) {
      if (auto m = const_of(an->kids[1])) {
        if (*m > 0 && *m % n == 0) return b_mod(an->kids[0], b);
      } else if (an->kids[1].kind() != ExprKind::Add && split_term(an->kids[1]).coeff % n == 0) {
        return b_mod(an->kids[0], b);  // (x % (s*c)) % n -> x % n when n | c
      }
    }
    Linear l = linear(a);
    bool changed = false;
    std::vector<Term> terms;
    for (const auto& t : l.terms) {
      Term u = t;
      // (x % m) inside a sum taken mod n, with n | m: drop the inner mod.
      if (u.base.node()->kind == ExprKind::Mod) {
        if (auto m = const_of(u.base.node()->kids[1]); m && *m > 0 && *m % n == 0) {
          u.base = u.base.node()->kids[0];
          changed = true;
        }
      }
      int64_t c = floor_mod(u.coeff, n);
      if (c != u.coeff) changed = true;
      if (c == 0) continue;
      u.coeff = c;
      terms.push_back(u);
    }
    int64_t k = floor_mod(l.k, n);
    if (k != l.k) changed = true;
    if (changed) return b_mod(from_linear(terms, k), b);
    int64_t g = n;
    for (const auto& t : terms) g = gcd_abs(g, t.coeff);
    g = gcd_abs(g, k);
    if (g > 1) {
      for (auto& t : terms) t.coeff /= g;
      return b_mul({b_mod(from_linear(terms, k / g), num(n / g)), num(g)});
    }
    return finish(ExprKind::Mod, {a, b});
  }
  if (ac && *ac == 0) return num(0);
  if (a == b) return num(0);
  const ExprNode* an = a.node();
  if (an->kind == ExprKind::Mod && an->kids[1] == b) return a;
  // (x % (q*b)) % b -> x % b
  if (an->kind == ExprKind::Mod && strip_factor(an->kids[1], b)) return b_mod(an->kids[0], b);
  if (lo_ge(a, 0) && b.node()->has_lo && an->has_hi && an->hi < b.node()->lo) return a;
  Linear l = linear(a);
  std::vector<Expression> r;
  bool changed = false;
  for (const auto& t : l.terms) {
    if (strip_factor(t.base, b)) changed = true;
    else r.push_back(term_expr(t));
  }
  if (changed) {
    r.push_back(num(l.k));
    return b_mod(b_add(std::move(r)), b);
  }
  return finish(ExprKind::Mod, {a, b});
}

Expression b_div(const Expression& a, const Expression& b) {
  return memo().get(MemoOp::Div, a, b, [&] { return b_div_impl(a, b); });
}
Expression b_mod(const Expression& a, const Expression& b) {
  return memo().get(MemoOp::Mod, a, b, [&] { return b_mod_impl(a, b); });
}

Expression b_ceildiv(const Expression& a, const Expression& b) {
  auto bc = const_of(b);
  if (bc) {
    int64_t n = *bc;
    if (n == 0 || n == kI64Min) return finish(ExprKind::CeilDiv, {a, b});
    if (auto ac = const_of(a)) {
      if (*ac == kI64Min) return finish(ExprKind::CeilDiv, {a, b});
      if (n == -1 && *ac == kI64Min + 1) return finish(ExprKind::CeilDiv, {a, b});
      return num(-floor_div(-*ac, n));
    }
    // ceil(a/n) == floor((a + n - 1)/n) for n > 0, floor((a + n + 1)/n) for n < 0.
    return b_div(b_add({a, num(n > 0 ? n - 1 : n + 1)}), b);
  }
  if (auto ac = const_of(a); ac && *ac == 0) return num(0);
  if (a == b) return num(1);
  return finish(ExprKind::CeilDiv, {a, b});
}

// ---- Min / Max ----
// A canonical expression as (non-constant terms, constant offset), without interning.
std::pair<std::span<const Expression>, int64_t> split_offset(const Expression& e) {
  const ExprNode* n = e.node();
  if (n->kind == ExprKind::Num) return {{}, n->value};
  if (n->kind == ExprKind::Add) {
    std::span<const Expression> kids = n->kids;
    if (kids.back().node()->kind == ExprKind::Num) return {kids.first(kids.size() - 1), kids.back().node()->value};
    return {kids, 0};
  }
  return {std::span<const Expression>(&e, 1), 0};
}

Expression b_minmax(ExprKind kind, std::vector<Expression> xs) {
  bool is_min = kind == ExprKind::Min;
  std::vector<Expression> args;
  std::optional<int64_t> c;
  auto take = [&](const Expression& e) {
    if (auto v = const_of(e)) c = c ? (is_min ? std::min(*c, *v) : std::max(*c, *v)) : *v;
    else args.push_back(e);
  };
  for (const auto& x : xs) {
    if (x.node()->kind == kind)
      for (const auto& k : x.node()->kids) take(k);
    else take(x);
  }
  if (c) args.push_back(num(*c));
  std::sort(args.begin(), args.end(), expr_less);
  args.erase(std::unique(args.begin(), args.end()), args.end());
  // `dominates(p, q)`: p is always the answer over q (p <= q for min).
  auto dominates = [&](const Expression& p, const Expression& q) {
    const ExprNode* pn = p.node();
    const ExprNode* qn = q.node();
    if (is_min ? (pn->has_hi && qn->has_lo && pn->hi <= qn->lo) : (pn->has_lo && qn->has_hi && pn->lo >= qn->hi))
      return true;
    // Same non-constant part: compare the constant offsets (min(x, x + 1) -> x).
    auto [ps, pk] = split_offset(p);
    auto [qs, qk] = split_offset(q);
    if (ps.empty() || ps.size() != qs.size() || !std::equal(ps.begin(), ps.end(), qs.begin())) return false;
    return is_min ? pk <= qk : pk >= qk;
  };
  std::vector<Expression> kept;
  for (const auto& x : args) {
    bool dominated = false;
    for (const auto& k : kept)
      if (dominates(k, x)) {
        dominated = true;
        break;
      }
    if (dominated) continue;
    kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const Expression& k) { return dominates(x, k); }),
               kept.end());
    kept.push_back(x);
  }
  if (kept.size() == 1) return kept[0];
  std::sort(kept.begin(), kept.end(), expr_less);
  return finish(kind, kept);
}

// ---- comparisons ----
// a < b is decided from the bounds of d = a - b when possible; otherwise it is
// normalised to P < N + k (P: positive terms of d, N: negated negative terms), with
// the term coefficients divided by their gcd g (T*g + k < 0 <=> T + floor(k/g) < 0).
// Eq is normalised the same way, with the sign fixed by the first term.
// A comparison of `sum(terms) + k` against 0, rewritten with positive coefficients on
// both sides: positive terms on the left, negated terms and -k on the right.
std::pair<Expression, Expression> split_sides(const Linear& l) {
  std::vector<Term> pos, neg;
  for (const auto& t : l.terms) {
    if (t.coeff > 0) pos.push_back(t);
    else neg.push_back({t.base, wrap_neg(t.coeff)});
  }
  return {from_linear(pos, 0), from_linear(neg, wrap_neg(l.k))};
}

Expression b_lt(const Expression& a, const Expression& b) {
  Expression d = b_sub(a, b);
  if (auto v = const_of(d)) return num(*v < 0 ? 1 : 0);
  if (hi_le(d, -1)) return num(1);
  if (lo_ge(d, 0)) return num(0);
  Linear l = linear(d);
  int64_t g = 0;
  for (const auto& t : l.terms) g = gcd_abs(g, t.coeff);
  if (g > 1) {
    for (auto& t : l.terms) t.coeff /= g;
    l.k = floor_div(l.k, g);  // t*g + k < 0  <=>  t + floor(k/g) < 0
  }
  auto [lhs, rhs] = split_sides(l);
  if (g > 1) return b_lt(lhs, rhs);
  return finish(ExprKind::Lt, {lhs, rhs});
}

Expression b_eq(const Expression& a, const Expression& b) {
  Expression d = b_sub(a, b);
  if (auto v = const_of(d)) return num(*v == 0 ? 1 : 0);
  if (known_nonzero(d)) return num(0);
  Linear l = linear(d);
  int64_t g = 0;
  for (const auto& t : l.terms) g = gcd_abs(g, t.coeff);
  if (g > 1) {
    if (l.k % g != 0) return num(0);
    for (auto& t : l.terms) t.coeff /= g;
    l.k /= g;
  }
  if (!l.terms.empty() && l.terms[0].coeff < 0) {
    for (auto& t : l.terms) t.coeff = wrap_neg(t.coeff);
    l.k = wrap_neg(l.k);
  }
  auto [lhs, rhs] = split_sides(l);
  if (g > 1) return b_eq(lhs, rhs);
  return finish(ExprKind::Eq, {lhs, rhs});
}

// ---- logic ----
Expression b_not(const Expression& a) {
  if (auto v = const_of(a)) return num(*v == 0 ? 1 : 0);
  if (known_nonzero(a)) return num(0);
  const ExprNode* an = a.node();
  if (an->kind == ExprKind::Not && is_bool(an->kids[0])) return an->kids[0];
  if (an->kind == ExprKind::Lt) return b_lt(an->kids[1], b_add({an->kids[0], num(1)}));
  return finish(ExprKind::Not, {a});
}

Expression b_logic(ExprKind kind, std::vector<Expression> xs) {
  bool is_and = kind == ExprKind::And;
  std::vector<Expression> args;
  auto take = [&](Expression e) -> bool {  // returns true if the result is decided
    // Only truthiness matters inside And/Or: !!x -> x.
    while (e.node()->kind == ExprKind::Not && e.node()->kids[0].node()->kind == ExprKind::Not)
      e = e.node()->kids[0].node()->kids[0];
    if (auto v = const_of(e)) return is_and ? (*v == 0) : (*v != 0);
    if (known_nonzero(e)) return !is_and;
    args.push_back(e);
    return false;
  };
  for (const auto& x : xs) {
    if (x.node()->kind == kind) {
      for (const auto& k : x.node()->kids)
        if (take(k)) return num(is_and ? 0 : 1);
    } else if (take(x)) {
      return num(is_and ? 0 : 1);
    }
  }
  std::sort(args.begin(), args.end(), expr_less);
  args.erase(std::unique(args.begin(), args.end()), args.end());
  if (args.empty()) return num(is_and ? 1 : 0);
  if (args.size() == 1) {
    if (is_bool(args[0])) return args[0];
    return b_not(b_not(args[0]));
  }
  return finish(kind, args);
}

Expression build(ExprKind kind, const std::vector<Expression>& k) {
  switch (kind) {
    case ExprKind::Add: return b_add(k);
    case ExprKind::Mul: return b_mul(k);
    case ExprKind::Div: return b_div(k[0], k[1]);
    case ExprKind::Mod: return b_mod(k[0], k[1]);
    case ExprKind::CeilDiv: return b_ceildiv(k[0], k[1]);
    case ExprKind::Min:
    case ExprKind::Max: return b_minmax(kind, k);
    case ExprKind::Lt: return b_lt(k[0], k[1]);
    case ExprKind::Eq: return b_eq(k[0], k[1]);
    case ExprKind::And:
    case ExprKind::Or: return b_logic(kind, k);
    case ExprKind::Not: return b_not(k[0]);
    case ExprKind::Num:
    case ExprKind::Var: break;
  }
  LUMINAL_ASSERT(false, "build: leaf kind");
  return num(0);
}

Expression canon(const Expression& e) { return e.simplify(); }

Expression resimplify_rec(const Expression& e, std::unordered_map<const ExprNode*, Expression>& memo) {
  const ExprNode* n = e.node();
  if (n->kind == ExprKind::Num || n->kind == ExprKind::Var) return e;
  if (auto it = memo.find(n); it != memo.end()) return it->second;
  std::vector<Expression> kids;
  kids.reserve(n->kids.size());
  for (const auto& k : n->kids) kids.push_back(resimplify_rec(k, memo));
  Expression r = build(n->kind, kids);
  memo.emplace(n, r);
  return r;
}

}  // namespace

namespace detail {
Expression resimplify_uncached(const Expression& e) {
  std::unordered_map<const ExprNode*, Expression> memo;
  return resimplify_rec(e, memo);
}
}  // namespace detail

// ---------------------------------------------------------------------------
// Expression API
// ---------------------------------------------------------------------------

Expression::Expression() : Expression(num(0)) {}
Expression::Expression(int64_t value) : Expression(num(value)) {}

Expression Expression::var(std::string_view name) {
  LUMINAL_CHECK(!name.empty(), "Expression::var: empty variable name");
  Expression e = ExprInterner::intern(ExprKind::Var, 0, name, {});
  mark_canonical(e);
  return e;
}

Expression Expression::index() {
  static const Expression z = var(kIndexName);
  return z;
}

Expression Expression::raw(ExprKind kind, std::span<const Expression> children) {
  switch (kind) {
    case ExprKind::Num:
    case ExprKind::Var:
      fail("Expression::raw: ", kind_name(kind), " is a leaf; use Expression(value) or Expression::var");
    case ExprKind::Add:
    case ExprKind::Mul:
    case ExprKind::Min:
    case ExprKind::Max:
    case ExprKind::And:
    case ExprKind::Or:
      LUMINAL_CHECK(!children.empty(), "Expression::raw: ", kind_name(kind), " needs at least one operand");
      break;
    case ExprKind::Div:
    case ExprKind::Mod:
    case ExprKind::CeilDiv:
    case ExprKind::Lt:
    case ExprKind::Eq:
      LUMINAL_CHECK(children.size() == 2, "Expression::raw: ", kind_name(kind), " needs 2 operands, got ",
                    children.size());
      break;
    case ExprKind::Not:
      LUMINAL_CHECK(children.size() == 1, "Expression::raw: Not needs 1 operand, got ", children.size());
      break;
  }
  return ExprInterner::intern(kind, 0, {}, children);
}

Expression Expression::simplify() const {
  const ExprNode* c = node_->simplified.load(std::memory_order_acquire);
  if (c) return Expression(c);
  std::vector<Expression> kids;
  kids.reserve(node_->kids.size());
  for (const auto& k : node_->kids) kids.push_back(k.simplify());
  Expression r = build(node_->kind, kids);
  node_->simplified.store(r.node_, std::memory_order_release);
  return r;
}

ExprKind Expression::kind() const { return node_->kind; }
std::span<const Expression> Expression::children() const { return node_->kids; }
std::optional<int64_t> Expression::as_constant() const { return const_of(*this); }
int64_t Expression::constant_value() const {
  LUMINAL_ASSERT(is_constant(), "constant_value() on non-constant expression ", to_string());
  return node_->value;
}
const std::string& Expression::var_name() const {
  LUMINAL_ASSERT(kind() == ExprKind::Var, "var_name() on non-variable expression ", to_string());
  return node_->name;
}

// ---- evaluation ----
namespace {

struct EvalCtx {
  const DimMap& dims;
  const int64_t* z;
  const Expression& root;
};

[[noreturn]] void overflow(const EvalCtx& c) { fail("integer overflow evaluating expression ", c.root.to_string()); }

int64_t ev(const ExprNode* n, const EvalCtx& c) {
  switch (n->kind) {
    case ExprKind::Num: return n->value;
    case ExprKind::Var: {
      if (c.z && n->name == Expression::kIndexName) return *c.z;
      auto it = c.dims.find(std::string_view(n->name));
      if (it == c.dims.end()) fail("unbound variable '", n->name, "' in expression ", c.root.to_string());
      return it->second;
    }
    case ExprKind::Add: {
      int64_t r = ev(n->kids[0].node(), c);
      for (size_t i = 1; i < n->kids.size(); ++i)
        if (__builtin_add_overflow(r, ev(n->kids[i].node(), c), &r)) overflow(c);
      return r;
    }
    case ExprKind::Mul: {
      int64_t r = ev(n->kids[0].node(), c);
      for (size_t i = 1; i < n->kids.size(); ++i)
        if (__builtin_mul_overflow(r, ev(n->kids[i].node(), c), &r)) overflow(c);
      return r;
    }
    case ExprKind::Div:
    case ExprKind::Mod:
    case ExprKind::CeilDiv: {
      int64_t a = ev(n->kids[0].node(), c);
      int64_t b = ev(n->kids[1].node(), c);
      if (b == 0)
        fail(n->kind == ExprKind::Mod ? "modulo" : "division", " by zero evaluating expression ", c.root.to_string());
      if (a == kI64Min && b == -1) overflow(c);
      if (n->kind == ExprKind::Div) return floor_div(a, b);
      if (n->kind == ExprKind::Mod) return floor_mod(a, b);
      if (a == kI64Min) overflow(c);
      return -floor_div(-a, b);
    }
    case ExprKind::Min:
    case ExprKind::Max: {
      int64_t r = ev(n->kids[0].node(), c);
      for (size_t i = 1; i < n->kids.size(); ++i) {
        int64_t v = ev(n->kids[i].node(), c);
        r = n->kind == ExprKind::Min ? std::min(r, v) : std::max(r, v);
      }
      return r;
    }
    case ExprKind::Lt: return ev(n->kids[0].node(), c) < ev(n->kids[1].node(), c) ? 1 : 0;
    case ExprKind::Eq: return ev(n->kids[0].node(), c) == ev(n->kids[1].node(), c) ? 1 : 0;
    case ExprKind::And:
    case ExprKind::Or: {
      bool is_and = n->kind == ExprKind::And;
      bool r = is_and;
      for (const auto& k : n->kids) {
        bool v = ev(k.node(), c) != 0;
        r = is_and ? (r && v) : (r || v);
      }
      return r ? 1 : 0;
    }
    case ExprKind::Not: return ev(n->kids[0].node(), c) == 0 ? 1 : 0;
  }
  return 0;
}

}  // namespace

int64_t Expression::eval(const DimMap& dims) const {
  EvalCtx c{dims, nullptr, *this};
  return ev(node_, c);
}

int64_t Expression::eval(const DimMap& dims, int64_t index_value) const {
  EvalCtx c{dims, &index_value, *this};
  return ev(node_, c);
}

std::optional<int64_t> Expression::try_eval(const DimMap& dims) const {
  try {
    return eval(dims);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// ---- substitution / variables ----
namespace {
uint64_t name_bit(std::string_view name) { return 1ULL << (fnv1a(name) % 64); }

Expression subst_rec(const Expression& e, const std::map<std::string, Expression, std::less<>>& values, uint64_t mask,
                     std::unordered_map<const ExprNode*, Expression>& memo) {
  const ExprNode* n = e.node();
  if ((n->var_mask & mask) == 0) return e;
  if (n->kind == ExprKind::Var) {
    auto it = values.find(std::string_view(n->name));
    return it == values.end() ? e : it->second;
  }
  if (auto it = memo.find(n); it != memo.end()) return it->second;
  std::vector<Expression> kids;
  kids.reserve(n->kids.size());
  bool changed = false;
  for (const auto& k : n->kids) {
    kids.push_back(subst_rec(k, values, mask, memo));
    changed |= !(kids.back() == k);
  }
  Expression r = changed ? build(n->kind, kids) : e;
  memo.emplace(n, r);
  return r;
}
}  // namespace

Expression Expression::substitute(std::string_view name, const Expression& value) const {
  std::map<std::string, Expression, std::less<>> m;
  m.emplace(std::string(name), value);
  return substitute(m);
}

Expression Expression::substitute(const std::map<std::string, Expression, std::less<>>& values) const {
  Expression base = simplify();
  if (values.empty()) return base;
  std::map<std::string, Expression, std::less<>> canon_values;
  uint64_t mask = 0;
  for (const auto& [k, v] : values) {
    canon_values.emplace(k, canon(v));
    mask |= name_bit(k);
  }
  std::unordered_map<const ExprNode*, Expression> memo;
  return subst_rec(base, canon_values, mask, memo);
}

bool Expression::depends_on(std::string_view name) const {
  uint64_t bit = name_bit(name);
  std::vector<const ExprNode*> stack{node_};
  std::unordered_set<const ExprNode*> seen;
  while (!stack.empty()) {
    const ExprNode* n = stack.back();
    stack.pop_back();
    if ((n->var_mask & bit) == 0) continue;
    if (n->kind == ExprKind::Var && n->name == name) return true;
    if (!seen.insert(n).second) continue;
    for (const auto& k : n->kids) stack.push_back(k.node());
  }
  return false;
}

std::vector<std::string> Expression::variables() const {
  std::set<std::string> names;
  std::vector<const ExprNode*> stack{node_};
  std::unordered_set<const ExprNode*> seen;
  while (!stack.empty()) {
    const ExprNode* n = stack.back();
    stack.pop_back();
    if (n->var_mask == 0 || !seen.insert(n).second) continue;
    if (n->kind == ExprKind::Var) names.insert(n->name);
    for (const auto& k : n->kids) stack.push_back(k.node());
  }
  return {names.begin(), names.end()};
}

std::optional<int64_t> Expression::lower_bound() const {
  if (node_->has_lo) return node_->lo;
  return std::nullopt;
}
std::optional<int64_t> Expression::upper_bound() const {
  if (node_->has_hi) return node_->hi;
  return std::nullopt;
}

// ---- printing ----
namespace {

void print(std::ostream& os, const ExprNode* n);

void print_factor(std::ostream& os, const Expression& e) {
  const ExprNode* n = e.node();
  bool paren = n->kind == ExprKind::Div || n->kind == ExprKind::Mod || (n->kind == ExprKind::Num && n->value < 0);
  if (paren) os << '(';
  print(os, n);
  if (paren) os << ')';
}

void print(std::ostream& os, const ExprNode* n) {
  switch (n->kind) {
    case ExprKind::Num: os << n->value; return;
    case ExprKind::Var: os << n->name; return;
    case ExprKind::Add: {
      os << '(';
      for (size_t i = 0; i < n->kids.size(); ++i) {
        const Expression& k = n->kids[i];
        const ExprNode* kn = k.node();
        // Print "a - b*3" rather than "a + b*-3" for negative coefficients.
        bool neg_num = kn->kind == ExprKind::Num && kn->value < 0 && kn->value != kI64Min;
        bool neg_coeff = kn->kind == ExprKind::Mul && kn->kids.back().node()->kind == ExprKind::Num &&
                         kn->kids.back().node()->value < 0 && kn->kids.back().node()->value != kI64Min;
        if (i > 0) os << ((neg_num || neg_coeff) ? " - " : " + ");
        else if (neg_num || neg_coeff) os << '-';
        if (neg_num) os << -kn->value;
        else if (neg_coeff) {
          int64_t c = -kn->kids.back().node()->value;
          for (size_t j = 0; j + 1 < kn->kids.size(); ++j) {
            if (j) os << '*';
            print_factor(os, kn->kids[j]);
          }
          if (c != 1) os << '*' << c;
        } else print(os, kn);
      }
      os << ')';
      return;
    }
    case ExprKind::Mul:
      for (size_t i = 0; i < n->kids.size(); ++i) {
        if (i) os << '*';
        print_factor(os, n->kids[i]);
      }
      return;
    case ExprKind::Div:
    case ExprKind::Mod: {
      const ExprNode* l = n->kids[0].node();
      bool lp = l->kind == ExprKind::Num && l->value < 0;
      if (lp) os << '(';
      print(os, l);
      if (lp) os << ')';
      os << (n->kind == ExprKind::Div ? '/' : '%');
      const ExprNode* r = n->kids[1].node();
      bool rp = !(r->kind == ExprKind::Var || r->kind == ExprKind::Add || (r->kind == ExprKind::Num && r->value >= 0));
      if (rp) os << '(';
      print(os, r);
      if (rp) os << ')';
      return;
    }
    case ExprKind::CeilDiv:
    case ExprKind::Min:
    case ExprKind::Max: {
      os << (n->kind == ExprKind::CeilDiv ? "ceil_div" : (n->kind == ExprKind::Min ? "min" : "max")) << '(';
      for (size_t i = 0; i < n->kids.size(); ++i) {
        if (i) os << ", ";
        print(os, n->kids[i].node());
      }
      os << ')';
      return;
    }
    case ExprKind::Lt:
    case ExprKind::Eq:
      os << '(';
      print(os, n->kids[0].node());
      os << (n->kind == ExprKind::Lt ? " < " : " == ");
      print(os, n->kids[1].node());
      os << ')';
      return;
    case ExprKind::And:
    case ExprKind::Or:
      os << '(';
      for (size_t i = 0; i < n->kids.size(); ++i) {
        if (i) os << (n->kind == ExprKind::And ? " && " : " || ");
        print(os, n->kids[i].node());
      }
      os << ')';
      return;
    case ExprKind::Not: {
      ExprKind k = n->kids[0].node()->kind;
      bool bracketed = k == ExprKind::Lt || k == ExprKind::Eq || k == ExprKind::And || k == ExprKind::Or ||
                       k == ExprKind::Add || k == ExprKind::Not || k == ExprKind::Var;
      os << (bracketed ? "!" : "!(");
      print(os, n->kids[0].node());
      if (!bracketed) os << ')';
      return;
    }
  }
}

void emit_c(std::ostream& os, const ExprNode* n, const std::function<std::string(const std::string&)>& var_name,
            const std::function<std::string(const Expression&)>& divisor) {
  auto kid = [&](size_t i) { emit_c(os, n->kids[i].node(), var_name, divisor); };
  switch (n->kind) {
    case ExprKind::Num:
      if (n->value == kI64Min) os << "(-9223372036854775807LL - 1LL)";
      else if (n->value < 0) os << "(" << n->value << "LL)";
      else os << n->value << "LL";
      return;
    case ExprKind::Var:
      os << "((long long)(" << (var_name ? var_name(n->name) : n->name) << "))";
      return;
    case ExprKind::Add:
    case ExprKind::Mul: {
      // Left-to-right, fully parenthesised: ((a + b) + c).
      for (size_t i = 1; i < n->kids.size(); ++i) os << '(';
      kid(0);
      for (size_t i = 1; i < n->kids.size(); ++i) {
        os << (n->kind == ExprKind::Add ? " + " : " * ");
        kid(i);
        os << ')';
      }
      return;
    }
    case ExprKind::Div:
    case ExprKind::Mod:
    case ExprKind::CeilDiv:
      // By a power of two (a constant 2^k, k >= 1): floor division is an arithmetic shift and
      // floor modulo a mask, exactly, for every sign of the dividend. The helpers' sign tests
      // kept such index arithmetic (RoPE's halves, heads) from vectorising.
      if (n->kind != ExprKind::CeilDiv && n->kids[1].kind() == ExprKind::Num && n->kids[1].constant_value() > 1 &&
          std::has_single_bit(static_cast<uint64_t>(n->kids[1].constant_value()))) {
        const int64_t b = n->kids[1].constant_value();
        os << '(';
        kid(0);
        if (n->kind == ExprKind::Div) os << " >> " << std::countr_zero(static_cast<uint64_t>(b)) << ')';
        else os << " & " << b - 1 << "LL)";
        return;
      }
      if (n->kind != ExprKind::CeilDiv && divisor) {
        if (const std::string name = divisor(n->kids[1]); !name.empty()) {
          os << (n->kind == ExprKind::Div ? "lm_floordiv_inv(" : "lm_floormod_inv(");
          kid(0);
          os << ", " << name << ')';
          return;
        }
      }
      os << (n->kind == ExprKind::Div ? "lm_floordiv(" : (n->kind == ExprKind::Mod ? "lm_floormod(" : "lm_ceildiv("));
      kid(0);
      os << ", ";
      kid(1);
      os << ')';
      return;
    case ExprKind::Min:
    case ExprKind::Max: {
      const char* f = n->kind == ExprKind::Min ? "lm_min(" : "lm_max(";
      for (size_t i = 1; i < n->kids.size(); ++i) os << f;
      kid(0);
      for (size_t i = 1; i < n->kids.size(); ++i) {
        os << ", ";
        kid(i);
        os << ')';
      }
      return;
    }
    case ExprKind::Lt:
    case ExprKind::Eq:
      os << "((long long)(";
      kid(0);
      os << (n->kind == ExprKind::Lt ? " < " : " == ");
      kid(1);
      os << "))";
      return;
    case ExprKind::And:
    case ExprKind::Or:
      os << "((long long)(";
      for (size_t i = 0; i < n->kids.size(); ++i) {
        if (i) os << (n->kind == ExprKind::And ? " && " : " || ");
        os << '(';
        kid(i);
        os << " != 0LL)";
      }
      os << "))";
      return;
    case ExprKind::Not:
      os << "((long long)(";
      kid(0);
      os << " == 0LL))";
      return;
  }
}

}  // namespace

std::string Expression::to_string() const {
  std::ostringstream os;
  print(os, node_);
  return os.str();
}

std::string Expression::to_c(const std::function<std::string(const std::string&)>& var_name,
                             const std::function<std::string(const Expression&)>& divisor) const {
  std::ostringstream os;
  emit_c(os, node_, var_name, divisor);
  return os.str();
}

std::string Expression::c_prelude() {
  return R"(#ifndef LUMINAL_EXPR_PRELUDE
#define LUMINAL_EXPR_PRELUDE
#if defined(__CUDACC__) || defined(__HIPCC__)
#define LM_EXPR_FN static __host__ __device__ inline
#else
#define LM_EXPR_FN static inline
#endif
/* Floor division / modulo (Python semantics: the modulo has the sign of the divisor).
   Branch-free: a select inside a vector loop (the causal mask's p + row % s) stopped GCC
   from vectorising it. */
LM_EXPR_FN long long lm_floordiv(long long a, long long b) {
  const long long q = a / b, r = a - q * b;
  return q - (long long)((r != 0) & ((r ^ b) < 0));
}
LM_EXPR_FN long long lm_floormod(long long a, long long b) {
  const long long r = a % b;
  return r + (b & -(long long)((r != 0) & ((r ^ b) < 0)));
}
LM_EXPR_FN long long lm_ceildiv(long long a, long long b) { return -lm_floordiv(-a, b); }
LM_EXPR_FN long long lm_min(long long a, long long b) { return a < b ? a : b; }
LM_EXPR_FN long long lm_max(long long a, long long b) { return a > b ? a : b; }
#endif
)";
}

size_t Expression::hash() const { return node_->hash; }

bool operator<(const Expression& a, const Expression& b) { return compare(a, b) < 0; }

// ---- operators (always canonicalise) ----
namespace {
template <class F>
Expression memo2(MemoOp op, const Expression& a, const Expression& b, F&& f) {
  Expression x = canon(a), y = canon(b);
  return memo().get(op, x, y, [&] { return f(x, y); });
}
}  // namespace

Expression operator+(const Expression& a, const Expression& b) {
  return memo2(MemoOp::Add, a, b, [](const Expression& x, const Expression& y) { return b_add({x, y}); });
}
Expression operator-(const Expression& a, const Expression& b) {
  return memo2(MemoOp::Sub, a, b, [](const Expression& x, const Expression& y) { return b_sub(x, y); });
}
Expression operator-(const Expression& a) { return a * Expression(-1); }
Expression operator*(const Expression& a, const Expression& b) {
  return memo2(MemoOp::Mul, a, b, [](const Expression& x, const Expression& y) { return b_mul({x, y}); });
}
Expression operator/(const Expression& a, const Expression& b) { return b_div(canon(a), canon(b)); }
Expression operator%(const Expression& a, const Expression& b) { return b_mod(canon(a), canon(b)); }
Expression min(const Expression& a, const Expression& b) {
  return memo2(MemoOp::Min, a, b, [](const Expression& x, const Expression& y) { return b_minmax(ExprKind::Min, {x, y}); });
}
Expression max(const Expression& a, const Expression& b) {
  return memo2(MemoOp::Max, a, b, [](const Expression& x, const Expression& y) { return b_minmax(ExprKind::Max, {x, y}); });
}
Expression ceil_div(const Expression& a, const Expression& b) {
  return memo2(MemoOp::CeilDiv, a, b, [](const Expression& x, const Expression& y) { return b_ceildiv(x, y); });
}
Expression lt(const Expression& a, const Expression& b) {
  return memo2(MemoOp::Lt, a, b, [](const Expression& x, const Expression& y) { return b_lt(x, y); });
}
Expression le(const Expression& a, const Expression& b) { return lt(a, b + Expression(1)); }
Expression gt(const Expression& a, const Expression& b) { return lt(b, a); }
Expression ge(const Expression& a, const Expression& b) { return lt(b, a + Expression(1)); }
Expression eq(const Expression& a, const Expression& b) {
  return memo2(MemoOp::Eq, a, b, [](const Expression& x, const Expression& y) { return b_eq(x, y); });
}
Expression ne(const Expression& a, const Expression& b) { return b_not(eq(a, b)); }
Expression logical_and(const Expression& a, const Expression& b) {
  return b_logic(ExprKind::And, {canon(a), canon(b)});
}
Expression logical_or(const Expression& a, const Expression& b) { return b_logic(ExprKind::Or, {canon(a), canon(b)}); }
Expression logical_not(const Expression& a) { return b_not(canon(a)); }

Expression product(std::span<const Expression> xs) {
  std::vector<Expression> v;
  v.reserve(xs.size());
  for (const auto& x : xs) v.push_back(canon(x));
  return b_mul(std::move(v));
}

std::ostream& operator<<(std::ostream& os, const Expression& e) {
  print(os, e.node());
  return os;
}

}  // namespace luminal
