"""List the `#| export` cells of the notebooks that hold several top-level definitions (functions and classes).

    python tools/export_cells.py [--public] [NOTEBOOK ...]     # default: every notebook under nbs/

A notebook reads as a paper section when each export cell holds one definition, placed after its derivation
and check; a small private helper may stay with its single user. `--public` counts only names without a
leading underscore. Prints one line per such cell (notebook, cell index, cell id, names), then the totals.
"""
import argparse, ast, json, re, sys
from pathlib import Path

EXPORT = re.compile(r"#\|\s*export")

def definitions(source: str) -> list:
    "The names of the top-level functions and classes in a cell's source (IPython magics and shell lines skipped)."
    lines = ["#" + l if l.lstrip().startswith(("%", "!")) else l for l in source.splitlines()]
    return [n.name for n in ast.parse("\n".join(lines)).body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]

def export_cells(path: Path):
    "(index, id, source) of every code cell of the notebook at `path` with an `#| export` directive."
    for i, c in enumerate(json.loads(path.read_text())["cells"]):
        if c["cell_type"] != "code": continue
        src = "".join(c["source"])
        if any(EXPORT.match(l.strip()) for l in src.splitlines() if l.strip().startswith("#|")):
            yield i, c.get("id"), src

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path)
    p.add_argument("--public", action="store_true", help="count only public names")
    a = p.parse_args(argv)
    paths = a.notebooks or sorted(Path(__file__).resolve().parent.parent.joinpath("nbs").rglob("*.ipynb"))
    total = several = 0
    for path in paths:
        for i, cid, src in export_cells(path):
            total += 1
            names = [n for n in definitions(src) if not (a.public and n.startswith("_"))]
            if len(names) > 1:
                several += 1
                print(f"{path}\tcell {i}\t{cid}\t{' '.join(names)}")
    print(f"{several} of {total} export cells hold several {'public ' if a.public else ''}definitions", file=sys.stderr)
    return 0

if __name__ == "__main__": sys.exit(main())
