"""Build the documentation site: `nbdev_docs` into `_docs/`, failing on any warning or error.

    python tools/build_site.py [--check] [--screenshots DIR]
    python tools/build_site.py --sidebar      # only rewrite nbs/sidebar.yml

Needs (the README's "Developing" section lists them):
- Quarto on PATH, or installed by `../shared/tools/quarto/install_quarto.sh` in its default place,
  `~/.local/quarto-1.7.34/bin`, which is then put on PATH;
- the `dev` extra (`pip install -e ".[dev]"`: nbdev and what the notebooks import);
- a KaTeX copy: `$VGI_LIT_KATEX` naming a KaTeX `dist` folder, else the one this command installs
  once with `npm install katex@KATEX_VERSION` into `~/.cache/vgi_lit/` (so npm on the first build).

The notebooks are executed for the site (`execute_notebooks`, in a copy of the tracked files with `../shared` beside it), so
every page shows what its cells print now, not the outputs stored when a notebook was last saved; a cell that fails
fails the build. Cells with the `# pytest: slow` line are not run (minutes of experiments and timings; `pytest -m slow`
runs them) and show one line saying so. `--stored` renders the stored outputs instead (quicker, for layout work).

The site reads offline: the pages are rendered with KaTeX's CDN address (`_quarto.yml`, so a plain
`nbdev_preview` works online), then every page's KaTeX script and stylesheet are pointed at the copy
this command ships in `_docs/katex/` (relative links, so `_docs/` opened from the file system
typesets every formula without network).

The sidebar (`nbs/sidebar.yml`, committed; `custom_sidebar = True` in settings.ini so nbdev keeps it)
is written by `sidebar_yaml`: the newcomer pages first, then one section per tier (foundation,
methods, experiments, benchmarks, apps). Every build rewrites it; `tests/test_site.py` checks that the
committed file is the current one.

README.md is written by hand and is its own source: settings.ini sets `readme_nb = ../README.md`,
so the README step of `nbdev_docs` (which would otherwise render `nbs/index.ipynb` over README.md)
finds README.md up to date and does nothing. This command also checks that README.md is byte for
byte unchanged afterwards.

With `--check` it then runs `tools/check_site.py` on the result (the browser check).
"""
import argparse, json, os, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUARTO_HOME = Path.home() / ".local/quarto-1.7.34/bin"
KATEX_VERSION = "0.16.47"          # the release shipped with the site (and named in _quarto.yml's CDN address)
KATEX_CDN = re.compile(r"https://cdn\.jsdelivr\.net/npm/katex@[^/\"']+/dist/")
KATEX_FILES = ["katex.min.js", "katex.min.css", "fonts"]   # what the pages load (the stylesheet loads the fonts)
# Lines in nbdev's or Quarto's output that mean the site is not clean.
PROBLEM = re.compile(r"warn|error|could not|not found|unable to|failed", re.I)


def quarto_env():
    "Environment with Quarto on PATH, or None when Quarto is not installed."
    env = dict(os.environ)
    if not shutil.which("quarto") and (QUARTO_HOME / "quarto").exists():
        env["PATH"] = f"{QUARTO_HOME}{os.pathsep}{env.get('PATH', '')}"
    return env if shutil.which("quarto", path=env["PATH"]) else None


def find_katex(explicit=None, install=True):
    """The `dist` folder of a KaTeX copy of release KATEX_VERSION's major.minor line: `explicit`, else `$VGI_LIT_KATEX`,
    else `~/.cache/vgi_lit/katex-KATEX_VERSION`, installed there by npm when missing and `install`. Raises if none."""
    cache = Path.home() / f".cache/vgi_lit/katex-{KATEX_VERSION}"
    for c in [explicit, os.environ.get("VGI_LIT_KATEX"), cache / "node_modules/katex/dist"]:
        if not c: continue
        dist = Path(c)
        if not (dist / "katex.min.js").exists():
            if c is explicit or c == os.environ.get("VGI_LIT_KATEX"): raise FileNotFoundError(f"no katex.min.js in {dist} (a KaTeX dist folder)")
            continue
        return _katex_release_checked(dist)
    if not install: raise FileNotFoundError(f"no KaTeX copy in {cache} (run python tools/build_site.py once, or set VGI_LIT_KATEX)")
    if not shutil.which("npm"):
        raise FileNotFoundError(f"KaTeX is not installed and npm is missing: install Node.js/npm, or set VGI_LIT_KATEX to a KaTeX {KATEX_VERSION} dist folder")
    cache.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["npm", "install", "--prefix", str(cache), "--no-audit", "--no-fund", f"katex@{KATEX_VERSION}"],
                       capture_output=True, text=True)
    dist = cache / "node_modules/katex/dist"
    if r.returncode != 0 or not (dist / "katex.min.js").exists():
        raise RuntimeError(f"npm install katex@{KATEX_VERSION} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return _katex_release_checked(dist)


def _katex_release_checked(dist):
    "`dist` if its package.json names a release of KATEX_VERSION's major.minor line (what the pages were checked with)."
    pkg = Path(dist).parent / "package.json"
    version = json.loads(pkg.read_text()).get("version", "") if pkg.exists() else ""
    if version.split(".")[:2] != KATEX_VERSION.split(".")[:2]:
        raise ValueError(f"the KaTeX copy in {dist} is release {version or '(unknown: no package.json beside it)'}, not {KATEX_VERSION}")
    return Path(dist)


def ship_katex(site, dist):
    """Copy KaTeX (scripts, stylesheet, fonts, licence) into `site`/katex and point every page's KaTeX links at it by a
    relative path; return the problem lines (pages that still load anything from a CDN)."""
    site, dst = Path(site), Path(site) / "katex"
    shutil.rmtree(dst, ignore_errors=True); dst.mkdir(parents=True)
    for name in KATEX_FILES:
        src = Path(dist) / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst / name)
    lic = Path(dist).parent / "LICENSE"
    if lic.exists(): shutil.copy2(lic, dst / "LICENSE")
    problems = []
    for page in site.rglob("*.html"):
        if dst in page.parents: continue
        text = page.read_text()
        rel = os.path.relpath(dst, page.parent).replace(os.sep, "/") + "/"
        new = KATEX_CDN.sub(rel, text)
        if new != text: page.write_text(new)
        if "cdn.jsdelivr.net" in new: problems.append(f"{page.relative_to(site)} still loads from cdn.jsdelivr.net")
    return problems


TIER_SECTIONS = [("foundation", "Foundation"), ("models", "Models"), ("methods", "Methods"), ("experiments", "Experiments"), ("bench", "Benchmarks"),
                 ("apps", "Apps")]
GET_STARTED = ["index.ipynb", "get_started.ipynb", "which_method.ipynb"]   # the newcomer pages, first in the sidebar, in this order


def _module_tier(mod):
    "Sidebar section of a module name relative to vgi_lit ('methods.fpi' -> 'methods', 'models.lgm' -> 'models' (foundation tier, its own section), 'linalg' -> 'foundation', '__main__' -> 'apps')."
    head = mod.split(".")[0]
    return "apps" if head == "__main__" else head if head in dict(TIER_SECTIONS) else "foundation"


def notebook_tier(nb_path, nbs):
    """The sidebar section of a notebook: its folder (methods/, experiments/, bench/, apps/); for a notebook at the top of
    nbs/, the tier of the module it exports (`#| default_exp`), else the highest tier it imports from."""
    rel = Path(nb_path).relative_to(nbs)
    if len(rel.parts) > 1: return rel.parts[0]
    src = "\n".join("".join(c["source"]) for c in json.loads(Path(nb_path).read_text())["cells"] if c["cell_type"] == "code")
    m = re.search(r"^#\|\s*default_exp\s+(\S+)", src, re.M)
    if m: return _module_tier(m.group(1))
    order = [t for t, _ in TIER_SECTIONS]
    tiers = [_module_tier(x) for x in re.findall(r"^\s*(?:from|import)\s+vgi_lit\.([\w.]+)", src, re.M)]
    return max(tiers, key=order.index, default="foundation")


def sidebar_yaml(nbs=ROOT / "nbs"):
    "The text of nbs/sidebar.yml: the GET_STARTED pages, then one collapsible section per tier, notebooks by file name."
    nbs = Path(nbs)
    books = sorted((p.relative_to(nbs).as_posix() for p in nbs.rglob("*.ipynb")
                    if not any(part.startswith((".", "_")) for part in p.relative_to(nbs).parts)), key=lambda b: (Path(b).name, b))
    missing = [g for g in GET_STARTED if g not in books]
    if missing: raise FileNotFoundError(f"sidebar: {missing} not in {nbs}")
    groups = {t: [] for t, _ in TIER_SECTIONS}
    for b in books:
        if b in GET_STARTED: continue
        t = notebook_tier(nbs / b, nbs)
        if t not in groups: raise ValueError(f"sidebar: {b} is in a folder of no tier ({t}/)")
        groups[t].append(b)
    lines = ["# Written by tools/build_site.py (sidebar_yaml): edit that, then run `python tools/build_site.py --sidebar`.",
             "website:", "  sidebar:", "    collapse-level: 1", "    contents:"]
    lines += [f"      - {b}" for b in GET_STARTED]
    for t, title in TIER_SECTIONS:
        if groups[t]: lines += [f'      - section: "{title}"', "        contents:"] + [f"          - {b}" for b in groups[t]]
    return "\n".join(lines) + "\n"


PRIVATE_CODE_LINK = re.compile(r"<code>\[</code>([^<]*)<code>\]\([^)<]*\)</code>")

def plain_private_names(site):
    """Undo nbdev's link inside a double-backtick code span: prose writes a private name in double backticks so that it
    is shown as code and not linked, but nbdev's linker still rewrites the inner name into markdown link text, which
    pandoc then shows literally over three code spans ('[', the name, '](url)'). Each such triple becomes the one code
    span it was meant to be. Returns how many were mended."""
    n = 0
    for page in Path(site).rglob("*.html"):
        text = page.read_text()
        new, k = PRIVATE_CODE_LINK.subn(r"<code>\1</code>", text)
        if k: page.write_text(new); n += k
    return n


SLOW_CELL = "# pytest: slow"   # conftest.SLOW_CELL: such cells run only with `pytest -m slow`
SLOW_NOTE = "(a slow check: not run for the site; `pytest -m slow` runs it)\n"
ANSI = re.compile(r"\x1b\[[0-9;]*m")   # the colours of a kernel's traceback


def _slow(source):
    return any(l.strip() == SLOW_CELL or l.strip().startswith(SLOW_CELL + " ") for l in source.splitlines())


def execute_notebooks(nbs, timeout=1200, log=None):
    """Run every notebook under `nbs` (hidden and `_` folders aside) in place, each in its own kernel started in its folder,
    cell by cell: outputs replaced by this run's, slow cells (`SLOW_CELL`) left unrun with `SLOW_NOTE` as their output.
    Returns the problem lines (a cell that raised, named by notebook and cell)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    problems, env_keep = [], {k: os.environ.get(k) for k in ("MPLBACKEND", "OPENBLAS_NUM_THREADS")}
    os.environ.setdefault("MPLBACKEND", "Agg"); os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # as the test run (conftest.py)
    try:
        for path in sorted(Path(nbs).rglob("*.ipynb")):
            if any(part.startswith((".", "_")) for part in path.relative_to(nbs).parts): continue
            for attempt in range(3):                                     # a kernel can die at start (a port taken meanwhile): start it again
                nb, t0 = nbformat.read(path, as_version=4), time.time()
                client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
                try:
                    with client.setup_kernel():
                        for i, cell in enumerate(nb.cells):
                            if cell.cell_type != "code": continue
                            cell.outputs, cell.execution_count = [], None
                            if _slow(cell.source):
                                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=SLOW_NOTE)]; continue
                            try: client.execute_cell(cell, i)
                            except CellExecutionError as e:
                                problems.append(f"{path.relative_to(nbs)}: cell {i} failed: {ANSI.sub('', str(e)).strip().splitlines()[-1][:300]}"); break
                    break
                except RuntimeError as e:                                # "Kernel died before replying to kernel_info"
                    if attempt == 2: problems.append(f"{path.relative_to(nbs)}: the kernel did not start: {e}")
            for cell in nb.cells:
                if cell.cell_type == "code": cell.execution_count = None
            nbformat.write(nb, path)
            if log: log(f"executed {path.relative_to(nbs)} in {time.time() - t0:.1f} s")
    finally:
        for k, v in env_keep.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v
    return problems


def build_executed(root=ROOT, log=None, katex=None, echo=print):
    """The site with freshly executed notebooks: the tracked files of `root` copied into a temporary folder (with `../shared`
    beside it when `root` has one), their notebooks executed (`execute_notebooks`), the site built there (`build`) and
    its `_docs` moved to `root`/_docs. `root`/nbs is not touched (but for nbs/sidebar.yml, which `build` writes)."""
    (root / "nbs" / "sidebar.yml").write_text(sidebar_yaml(root / "nbs"))
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout.split("\0")
    with tempfile.TemporaryDirectory(prefix="vgi_lit_site_") as tmp:
        copy = Path(tmp) / root.name
        for f in filter(None, files):
            src, dst = root / f, copy / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_symlink(): os.symlink(os.readlink(src), dst)
            elif src.exists(): shutil.copy2(src, dst)
        shared = root.parent / "shared"
        if shared.exists(): os.symlink(shared.resolve(), Path(tmp) / "shared")
        echo(f"executing the notebooks in {copy} ...")
        problems = execute_notebooks(copy / "nbs", log=echo)
        if problems: return problems
        problems = build(copy, log=log, katex=katex)
        if (copy / "_docs").exists():
            shutil.rmtree(root / "_docs", ignore_errors=True); shutil.move(str(copy / "_docs"), str(root / "_docs"))
        return problems


def build(root=ROOT, log=None, katex=None):
    """Write nbs/sidebar.yml, run nbdev_docs in `root`, ship KaTeX into the site; return the list of problem lines
    (empty when the build is clean). `katex`: a KaTeX dist folder (default: `find_katex()`)."""
    env = quarto_env()
    if env is None:
        return ["Quarto is not installed: run ../shared/tools/quarto/install_quarto.sh (see its header)"]
    try: katex = find_katex(katex)
    except (OSError, RuntimeError, ValueError) as e: return [f"KaTeX: {e}"]
    (root / "nbs" / "sidebar.yml").write_text(sidebar_yaml(root / "nbs"))
    env.setdefault("MPLBACKEND", "Agg")
    readme = root / "README.md"
    before = readme.read_bytes() if readme.exists() else None
    shutil.rmtree(root / "_proc", ignore_errors=True)   # nbdev re-processes only changed notebooks: warnings of the others would be hidden
    nbdev_docs = Path(sys.executable).with_name("nbdev_docs")
    cmd = [str(nbdev_docs)] if nbdev_docs.exists() else ["nbdev_docs"]
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    out = r.stdout + r.stderr
    if log: Path(log).write_text(out)
    problems = [l.strip() for l in out.splitlines() if PROBLEM.search(l)]
    if r.returncode != 0: problems.append(f"nbdev_docs exited with status {r.returncode}")
    if before is not None and readme.read_bytes() != before:
        readme.write_bytes(before)
        problems.append("nbdev_docs rewrote README.md (restored): settings.ini must keep readme_nb = ../README.md")
    if not (root / "_docs" / "index.html").exists(): problems.append("no _docs/index.html was produced")
    else:
        plain_private_names(root / "_docs")
        problems += ship_katex(root / "_docs", katex)
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="run tools/check_site.py on the built site")
    ap.add_argument("--screenshots", help="with --check: folder for screenshots")
    ap.add_argument("--log", help="write the full nbdev_docs output here")
    ap.add_argument("--sidebar", action="store_true", help="only rewrite nbs/sidebar.yml")
    ap.add_argument("--stored", action="store_true", help="render the outputs stored in the notebooks (do not execute them)")
    a = ap.parse_args(argv)
    if a.sidebar:
        (ROOT / "nbs" / "sidebar.yml").write_text(sidebar_yaml()); print(f"wrote {ROOT / 'nbs' / 'sidebar.yml'}"); return 0
    problems = build(log=a.log) if a.stored else build_executed(log=a.log, echo=lambda m: print(m, flush=True))
    for p in problems: print(p)
    if problems:
        print(f"site build: {len(problems)} problem lines"); return 1
    print(f"site built in {ROOT / '_docs'} without warnings")
    if a.check:
        sys.path.insert(0, str(Path(__file__).parent))
        import check_site
        return check_site.main([str(ROOT / "_docs")] + (["--screenshots", a.screenshots] if a.screenshots else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
