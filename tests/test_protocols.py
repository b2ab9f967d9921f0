"""Behaviour is chosen by protocols (attributes and methods of the site matrix, the prior covariance and the likelihood),
never by comparing a kind label or a class name: an AST scan of the package, with the few label uses that are not
behaviour (serialisation in `io`, `__repr__`/`__str__`) left out and a short explicit allow-list."""
import ast
from pathlib import Path

import numpy as np
import pytest

PKG = Path(__file__).resolve().parents[1] / "vgi_lit"
SKIP_FILES = {"_modidx.py", "io.py"}          # io reads labels to write and read files
SKIP_FUNCS = {"__repr__", "__str__"}
LIK_ATTRS = {"log_concave", "log_link", "curvature_bounded", "param_names", "param_is_log", "params", "width"}
# (file, expression) pairs that branch on a label on purpose; each must still occur (a stale entry fails the test)
ALLOWED = {
    ("apps/cli.py", "model.kind == 'glm'"),            # the command line prints a GLM's coefficients by feature name
    ("apps/cli.py", "model.kind != 'glm'"),
    ("apps/cli.py", "post.model.kind == 'glm'"),
    ("apps/sklearn.py", "model.kind != 'glm'"),         # the estimators' GLM/GP defaults and intercept column
    ("apps/sklearn.py", "post.model.kind == 'glm'"),
    ("apps/sklearn.py", "self.posterior_.model.kind == 'glm'"),
    ("inference.py", "MODEL_METHODS.get(model.kind, METHODS)"),   # the registry of methods per model type
    ("inference.py", "DEFAULT_METHOD.get(model.kind, 'grad')"),
}


def _is_kind(node) -> bool:
    "`x.kind`, but not NumPy's `x.dtype.kind`."
    return (isinstance(node, ast.Attribute) and node.attr == "kind"
            and not (isinstance(node.value, ast.Attribute) and node.value.attr == "dtype"))


def _is_type_name(node) -> bool:
    "`type(x).__name__`"
    return (isinstance(node, ast.Attribute) and node.attr == "__name__" and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "type")


def _is_enum(node) -> bool:
    "Members of a typed enumeration, `EventKind.DAMPED` or a tuple of them (a typed comparison, not a label)."
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)): return bool(node.elts) and all(map(_is_enum, node.elts))
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id[:1].isupper()


class _Scan(ast.NodeVisitor):
    "Branches on a label: `.kind` or `type(x).__name__` (or a name bound to it) compared by value, used as a key, or looked up."
    def __init__(self):
        self.found, self.names = [], [set()]

    def _label(self, node) -> bool:
        return _is_kind(node) or _is_type_name(node) or (isinstance(node, ast.Name) and node.id in self.names[-1])

    def visit_FunctionDef(self, node):
        if node.name in SKIP_FUNCS: return
        self.names.append(set()); self.generic_visit(node); self.names.pop()
    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        if _is_type_name(node.value) or _is_kind(node.value):      # `name = type(x).__name__`, `k = S.kind`
            self.names[-1].update(t.id for t in node.targets if isinstance(t, ast.Name))
        self.generic_visit(node)

    def visit_Compare(self, node):
        ops_by_value = all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
        xs = [node.left, *node.comparators]
        if ops_by_value and any(map(self._label, xs)) and not all(self._label(x) or _is_enum(x) for x in xs):
            self.found.append(node)
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if self._label(node.slice): self.found.append(node)
        self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and node.args and self._label(node.args[0]): self.found.append(node)
        if (isinstance(f, ast.Name) and f.id == "getattr" and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in LIK_ATTRS):
            self.found.append(node)                    # the likelihood protocol has defaults in its base class: read it
        self.generic_visit(node)


def label_branches(source: str):
    "The expressions of `source` that choose behaviour by a label (as source text)."
    s = _Scan(); s.visit(ast.parse(source))
    return [ast.unparse(n) for n in s.found]


def test_the_scan_finds_label_branches():
    "The scan can fail: each pattern it looks for is found in a snippet, and the legitimate uses are not."
    bad = ("if P.kind == 'dense': pass\nif S.kind in ('identity', 'dense'): pass\nf = {'a': 1}[P.kind]\n"
           "def g(lik):\n    name = type(lik).__name__\n    if name == 'Poisson': return 1\n"
           "x = type(lik).__name__ != 'Gaussian'\nv = getattr(lik, 'curvature_bounded', True)\nt = T.get(m.kind, 0)\n"
           "k = S.kind\nif k == 'identity': pass\n")
    assert len(label_branches(bad)) == 8, label_branches(bad)
    ok = ("if X.dtype.kind in 'iuf': pass\nif e.kind is EventKind.DAMPED: pass\nif e.kind in (EventKind.A, EventKind.B): pass\n"
          "raise ValueError(f'{type(x).__name__} has {S.kind} sites')\n"
          "class A:\n    def __repr__(self): return {'a': 'b'}[self.kind]\n")
    assert label_branches(ok) == []


def test_no_behaviour_chosen_by_kind_or_class_name():
    found, seen = [], set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if path.name in SKIP_FILES: continue
        for expr in label_branches(path.read_text()):
            if (rel, expr) in ALLOWED: seen.add((rel, expr))
            else: found.append(f"{rel}: {expr}")
    assert not found, "behaviour chosen by a label (use a protocol attribute or method instead):\n" + "\n".join(found)
    assert seen == ALLOWED, f"allow-list entries no longer in the code: {sorted(ALLOWED - seen)}"


def test_prior_cov_is_one_class_per_structure():
    "PriorCov(cov, d) is the structure's class, still a PriorCov; copies and pickles keep the class and the values."
    import copy, pickle
    from vgi_lit.models import PriorCov, ScalarPriorCov, DiagPriorCov, DensePriorCov
    rng = np.random.default_rng(0); A = rng.normal(size=(3, 3))
    for cov, cls in ((0.5, ScalarPriorCov), (np.array([0.5, 1.0, 2.0]), DiagPriorCov), (A @ A.T + np.eye(3), DensePriorCov)):
        P = PriorCov(cov, 3)
        assert type(P) is cls and isinstance(P, PriorCov) and P.is_dense == (cls is DensePriorCov)
        for Q in (copy.deepcopy(P), pickle.loads(pickle.dumps(P))):
            assert type(Q) is cls and np.array_equal(Q.dense(), P.dense()) and Q.logdet() == P.logdet()
    with pytest.raises(ValueError, match="must be a matrix for a DensePriorCov"): DensePriorCov(0.5, 3)
    with pytest.raises(ValueError, match="ndim=3"): PriorCov(np.ones((2, 2, 2)), 2)
    with pytest.raises(ValueError, match="no variance parameters"): PriorCov(A @ A.T + np.eye(3), 3).variance_names()
