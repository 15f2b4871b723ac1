// Private helpers of the Expression implementation, shared with its tests.
#pragma once

#include "luminal/expression.hpp"

namespace luminal::detail {

// Re-canonicalise `e` from scratch, bottom-up, ignoring every cached simplify()
// result. Used by tests to check that the canonical form is a true fixpoint
// (simplify() on an already-canonical node returns immediately from its cache).
Expression resimplify_uncached(const Expression& e);

// Number of nodes in the global interner (for tests and diagnostics).
size_t interned_node_count();

}  // namespace luminal::detail
