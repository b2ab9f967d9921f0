"""Lists and tables in the notebooks' markdown render as lists and tables on the site.

Pandoc's markdown (what Quarto renders) starts a list or a pipe table only after a blank line (or a
heading): without one the lines join the paragraph above, and the site shows " - item - item" run
into the text and a table as a line of pipes. These checks read the markdown cells of every notebook.
"""
import json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d+[.)])\s+\S")     # a bullet or numbered list item
ROW = re.compile(r"^ {0,3}\|")                            # a pipe-table row
FENCE = re.compile(r"^\s*(?:```|~~~)")


def unseparated_blocks(src):
    """(line number, kind, line) of every list or table in the markdown `src` that follows a text line with no blank
    line between; lines in code fences and in $$ … $$ display math are not markdown and are skipped."""
    bad, fence, math, block, prev = [], False, False, None, ""
    for k, line in enumerate(src.split("\n")):
        if FENCE.match(line): fence = not fence; prev = line; continue
        if fence: prev = line; continue
        if math or line.count("$$") % 2:
            if line.count("$$") % 2: math = not math
            prev = line; continue
        if not line.strip(): block = None
        else:
            kind = "list" if ITEM.match(line) else "table" if ROW.match(line) else None
            if kind and block != kind and block != "list":
                if prev.strip() and not prev.lstrip().startswith("#"): bad.append((k, kind, line))
                block = kind
        prev = line
    return bad


def _notebooks():
    return sorted(p for p in (ROOT / "nbs").rglob("*.ipynb") if not {"_proc", ".ipynb_checkpoints"} & set(p.parts))


def test_the_check_finds_lists_and_tables_run_into_a_paragraph():
    assert unseparated_blocks("Text:\n\n- a\n- b\n  continued\n- c\n\n1. one\n2. two") == []
    assert unseparated_blocks("## Heading\n- a\n\n| x |\n|---|\n| 1 |") == []
    assert unseparated_blocks("```\ntext\n- not markdown\n```\n$$ a\n - b $$\n$$\nx\n+ y\n$$") == []
    bad = unseparated_blocks("Text:\n- a\n- b\n\nMore:\n1. one\n\nA table:\n| x |\n|---|\n\n- item\n  sub:\n  - nested")
    assert [(k, kind) for k, kind, _ in bad] == [(1, "list"), (5, "list"), (8, "table")], bad


def test_every_list_and_table_starts_after_a_blank_line():
    bad = []
    for nb in _notebooks():
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "markdown": continue
            for k, kind, line in unseparated_blocks("".join(cell["source"])):
                bad.append(f"{nb.relative_to(ROOT)} cell {cell.get('id')} line {k}: {kind} after a text line: {line.strip()[:80]!r}")
    assert not bad, (f"{len(bad)} lists or tables without a blank line before them (pandoc runs them into the paragraph):\n"
                     + "\n".join(bad))
