#include "luminal/atomic_file.hpp"
#include "luminal/program_cache.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include <unordered_map>

#include "luminal/error.hpp"

namespace luminal {
namespace {

// Bumped whenever the byte layout below, ops.def's order of kinds or ExprKind changes.
constexpr std::string_view kGraphMagic = "LMGRAPH2";
constexpr std::string_view kProgramMagic = "LMPROG2\n";

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  void f64(double v) { raw(&v, sizeof v); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void expr(const Expression& e) {
    u8(static_cast<uint8_t>(e.kind()));
    switch (e.kind()) {
      case ExprKind::Num: i64(e.constant_value()); return;
      case ExprKind::Var: str(e.var_name()); return;
      default:
        u32(static_cast<uint32_t>(e.children().size()));
        for (const auto& c : e.children()) expr(c);
    }
  }
  void exprs(std::span<const Expression> es) {
    u32(static_cast<uint32_t>(es.size()));
    for (const auto& e : es) expr(e);
  }
  void view(const ShapeTracker& v) {
    u32(static_cast<uint32_t>(v.rank()));
    for (const auto& d : v.dims()) {
      expr(d.size);
      expr(d.offset);
      expr(d.valid);
    }
    expr(v.base_offset());
    expr(v.base_valid());
  }
  std::string take() { return std::move(out_); }

 private:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  uint32_t u32() { return pod<uint32_t>(); }
  int64_t i64() { return pod<int64_t>(); }
  double f64() { return pod<double>(); }
  std::string str() {
    uint32_t n = u32();
    return std::string(take(n));
  }
  Expression expr(int depth = 0) {
    LUMINAL_CHECK(depth < 512, "program cache: expression nested too deeply");
    auto kind = static_cast<ExprKind>(u8());
    LUMINAL_CHECK(static_cast<uint8_t>(kind) <= static_cast<uint8_t>(ExprKind::Not), "program cache: bad expression kind");
    if (kind == ExprKind::Num) return Expression(i64());
    if (kind == ExprKind::Var) return Expression::var(str());
    uint32_t n = u32();
    LUMINAL_CHECK(n <= remaining(), "program cache: truncated expression");
    std::vector<Expression> children;
    children.reserve(n);
    for (uint32_t k = 0; k < n; ++k) children.push_back(expr(depth + 1));
    return Expression::raw(kind, children);
  }
  std::vector<Expression> exprs() {
    uint32_t n = u32();
    LUMINAL_CHECK(n <= remaining(), "program cache: truncated expression list");
    std::vector<Expression> es;
    for (uint32_t k = 0; k < n; ++k) es.push_back(expr());
    return es;
  }
  ShapeTracker view() {
    uint32_t rank = u32();
    LUMINAL_CHECK(rank <= remaining(), "program cache: truncated view");
    std::vector<ViewDim> dims;
    for (uint32_t d = 0; d < rank; ++d) {
      ViewDim vd;
      vd.size = expr();
      vd.offset = expr();
      vd.valid = expr();
      dims.push_back(std::move(vd));
    }
    Expression offset = expr();
    Expression valid = expr();
    return ShapeTracker::from_parts(std::move(dims), offset, valid);
  }
  void expect(std::string_view magic) {
    LUMINAL_CHECK(take(magic.size()) == magic, "program cache: not a ", magic.substr(0, 7), " entry");
  }
  size_t remaining() const { return in_.size() - pos_; }
  std::string_view take(size_t n) {
    LUMINAL_CHECK(n <= remaining(), "program cache: truncated entry");
    auto s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  template <class T>
  T pod() {
    T v;
    std::memcpy(&v, take(sizeof v).data(), sizeof v);
    return v;
  }
  std::string_view in_;
  size_t pos_ = 0;
};

enum class AttrTag : uint8_t { I64, F64, Str, Expr, ExprList };

OpKind parse_op(std::string_view name) {
  static const auto table = [] {
    std::unordered_map<std::string_view, OpKind> t;
#define LUMINAL_OP(op, ...) t.emplace(op_name(OpKind::op), OpKind::op);
#include "luminal/ops.def"
#undef LUMINAL_OP
    return t;
  }();
  auto it = table.find(name);
  LUMINAL_CHECK(it != table.end(), "program cache: unknown op '", name, "'");
  return it->second;
}

void write_graph(Writer& w, const Graph& g) {
  w.str(kGraphMagic);
  w.u32(static_cast<uint32_t>(g.dim_map().size()));
  for (const auto& [name, value] : g.dim_map()) {
    w.str(name);
    w.i64(value);
  }
  w.u32(static_cast<uint32_t>(g.size()));
  for (const Node& n : g.nodes()) {
    w.str(op_name(n.op));
    w.str(dtype_name(n.dtype));
    w.exprs(n.shape);
    w.u32(static_cast<uint32_t>(n.inputs.size()));
    for (const auto& in : n.inputs) {
      w.u32(in.node);
      w.view(in.view);
    }
    w.str(n.label);
    w.f64(n.constant);
    w.expr(n.iota_expr);
    w.i64(n.axis);
    w.u8(n.persist);
    w.u32(n.updates);
    w.str(n.user_op);
    w.u8(n.backend != nullptr);
    if (!n.backend) continue;
    w.str(n.backend->name);
    w.u32(static_cast<uint32_t>(n.backend->attrs.size()));
    for (const auto& a : n.backend->attrs) {
      if (auto* i = std::get_if<int64_t>(&a)) w.u8(static_cast<uint8_t>(AttrTag::I64)), w.i64(*i);
      else if (auto* d = std::get_if<double>(&a)) w.u8(static_cast<uint8_t>(AttrTag::F64)), w.f64(*d);
      else if (auto* s = std::get_if<std::string>(&a)) w.u8(static_cast<uint8_t>(AttrTag::Str)), w.str(*s);
      else if (auto* e = std::get_if<Expression>(&a)) w.u8(static_cast<uint8_t>(AttrTag::Expr)), w.expr(*e);
      else w.u8(static_cast<uint8_t>(AttrTag::ExprList)), w.exprs(std::get<std::vector<Expression>>(a));
    }
  }
}

Graph read_graph(Reader& r) {
  LUMINAL_CHECK(r.str() == kGraphMagic, "program cache: not a graph (format ", kGraphMagic, " expected)");
  Graph g;
  uint32_t ndims = r.u32();
  for (uint32_t k = 0; k < ndims; ++k) {
    std::string name = r.str();
    g.set_dim(name, r.i64());
  }
  uint32_t nodes = r.u32();
  LUMINAL_CHECK(nodes <= r.remaining(), "program cache: truncated graph");
  for (uint32_t k = 0; k < nodes; ++k) {
    Node n;
    n.op = parse_op(r.str());
    n.dtype = parse_dtype(r.str());
    n.shape = r.exprs();
    uint32_t ninputs = r.u32();
    LUMINAL_CHECK(ninputs <= r.remaining(), "program cache: truncated node");
    for (uint32_t i = 0; i < ninputs; ++i) {
      NodeInput in;
      in.node = r.u32();
      in.view = r.view();
      n.inputs.push_back(std::move(in));
    }
    n.label = r.str();
    n.constant = r.f64();
    n.iota_expr = r.expr();
    n.axis = static_cast<int>(r.i64());
    n.persist = r.u8() != 0;
    n.updates = r.u32();
    n.user_op = r.str();
    if (r.u8()) {
      auto call = std::make_shared<BackendOpCall>();
      call->name = r.str();
      uint32_t nattrs = r.u32();
      LUMINAL_CHECK(nattrs <= r.remaining(), "program cache: truncated backend op");
      for (uint32_t a = 0; a < nattrs; ++a) {
        switch (static_cast<AttrTag>(r.u8())) {
          case AttrTag::I64: call->attrs.emplace_back(r.i64()); break;
          case AttrTag::F64: call->attrs.emplace_back(r.f64()); break;
          case AttrTag::Str: call->attrs.emplace_back(r.str()); break;
          case AttrTag::Expr: call->attrs.emplace_back(r.expr()); break;
          case AttrTag::ExprList: call->attrs.emplace_back(r.exprs()); break;
          default: fail("program cache: bad backend attribute tag");
        }
      }
      n.backend = std::move(call);
    }
    LUMINAL_CHECK(n.updates == kNoNode || n.updates < g.size(), "program cache: Output updates a later node");
    g.add_node(std::move(n));
  }
  return g;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return {};
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

}  // namespace

std::string content_hash(std::string_view bytes) {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : bytes) {
    a = (a ^ c) * 0x100000001b3ull;
    b = (b ^ c) * 0x100000001b3ull;
    b ^= b >> 29;
  }
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

std::optional<std::string> serialize_graph(const Graph& g) {
  for (const Node& n : g.nodes())
    if (n.op == OpKind::CustomOp) return std::nullopt;
  Writer w;
  write_graph(w, g);
  return w.take();
}

Graph parse_graph(std::string_view bytes) {
  Reader r(bytes);
  Graph g = read_graph(r);
  LUMINAL_CHECK(r.remaining() == 0, "program cache: ", r.remaining(), " trailing bytes after the graph");
  return g;
}

std::filesystem::path ProgramCache::default_dir() {
  if (const char* dir = std::getenv("LUMINAL_CACHE_DIR"); dir && *dir) return std::filesystem::path(dir) / "programs";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "luminal" / "programs";
}

ProgramCache::ProgramCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

std::optional<search::SegmentProgram> ProgramCache::load(const std::string& key) const {
  std::string bytes = read_file(dir_ / (key + ".prog"));
  if (bytes.empty()) return std::nullopt;
  try {
    Reader r(bytes);
    r.expect(kProgramMagic);
    LUMINAL_CHECK(r.str() == key, "program cache: entry holds another key");
    search::SegmentProgram p;
    p.program = read_graph(r);
    uint32_t n = r.u32();
    LUMINAL_CHECK(n == p.program.size(), "program cache: io map does not match the program");
    for (uint32_t k = 0; k < n; ++k) p.io_of.push_back(r.u32());
    LUMINAL_CHECK(r.remaining() == 0, "program cache: trailing bytes");
    return p;
  } catch (const Error&) {
    return std::nullopt;  // foreign, truncated or stale: recompile
  }
}

void ProgramCache::store(const std::string& key, const search::SegmentProgram& program) const {
  auto graph = serialize_graph(program.program);
  if (!graph) return;
  std::string bytes(kProgramMagic);
  Writer body;
  body.str(key);
  bytes += body.take();
  bytes += *graph;
  Writer io;
  io.u32(static_cast<uint32_t>(program.io_of.size()));
  for (NodeId id : program.io_of) io.u32(id);
  bytes += io.take();

  write_file_atomically(dir_ / (key + ".prog"), bytes);  // best effort: a miss only costs a search
}

const std::string& build_identity() {
  static const std::string id = [] {
    std::string s = std::string("built ") + __DATE__ + " " + __TIME__;
    static const char anchor = 0;  // an object inside this library's image
    Dl_info info{};
    if (dladdr(&anchor, &info) != 0 && info.dli_fname) {
      struct stat st{};
      if (::stat(info.dli_fname, &st) == 0)
        s += std::string(";") + info.dli_fname + ";" + std::to_string(st.st_size) + ";" +
             std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    }
    return s;
  }();
  return id;
}

}  // namespace luminal
