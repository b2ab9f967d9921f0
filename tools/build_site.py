"""Build the documentation site: `nbdev_docs` into `_docs/`, failing on any warning or error.

    python tools/build_site.py [--check] [--screenshots DIR]

Needs Quarto on PATH (or installed by `../shared/tools/quarto/install_quarto.sh` in its default
place, `~/.local/quarto-1.7.34/bin`, which is then put on PATH). Notebooks are not executed: the
pages show the outputs stored in the notebooks (`pytest` runs them).

README.md is written by hand and is its own source: settings.ini sets `readme_nb = ../README.md`,
so the README step of `nbdev_docs` (which would otherwise render `nbs/index.ipynb` over README.md)
finds README.md up to date and does nothing. This command also checks that README.md is byte for
byte unchanged afterwards.

With `--check` it then runs `tools/check_site.py` on the result (the browser check).
"""
import argparse, os, re, shutil, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUARTO_HOME = Path.home() / ".local/quarto-1.7.34/bin"
# Lines in nbdev's or Quarto's output that mean the site is not clean.
PROBLEM = re.compile(r"warn|error|could not|not found|unable to|failed", re.I)


def quarto_env():
    "Environment with Quarto on PATH, or None when Quarto is not installed."
    env = dict(os.environ)
    if not shutil.which("quarto") and (QUARTO_HOME / "quarto").exists():
        env["PATH"] = f"{QUARTO_HOME}{os.pathsep}{env.get('PATH', '')}"
    return env if shutil.which("quarto", path=env["PATH"]) else None


def build(root=ROOT, log=None):
    "Run nbdev_docs in `root`; return the list of problem lines (empty when the build is clean)."
    env = quarto_env()
    if env is None:
        return ["Quarto is not installed: run ../shared/tools/quarto/install_quarto.sh (see its header)"]
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
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="run tools/check_site.py on the built site")
    ap.add_argument("--screenshots", help="with --check: folder for screenshots")
    ap.add_argument("--log", help="write the full nbdev_docs output here")
    a = ap.parse_args(argv)
    problems = build(log=a.log)
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
