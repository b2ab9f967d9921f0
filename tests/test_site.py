"""The documentation site: README.md and the site's home page agree and nbdev cannot overwrite README.md;
the checker in tools/check_site.py finds what it is meant to find; and (slow) the whole site builds
without warnings and passes the browser check in headless Chromium.

    pytest -m slow tests/test_site.py      # builds the site (minutes), then opens every page
    VGI_LIT_SITE=_docs pytest -m slow tests/test_site.py   # checks an already built site
"""
import base64, json, os, re, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_site, check_site  # noqa: E402


def _settings():
    return dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", (ROOT / "settings.ini").read_text(), re.M))


def test_readme_is_its_own_source():
    "nbdev_docs renders settings.ini's readme_nb over README.md unless README.md is newer: pointing it at README.md itself makes that step a no-op."
    assert _settings().get("readme_nb") == "../README.md"
    assert (ROOT / "nbs" / _settings()["readme_nb"]).resolve() == (ROOT / "README.md").resolve()


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)\n```", text, re.S)


def test_index_page_shows_the_readme_commands():
    "The site's home page (nbs/index.ipynb) and README.md give the same install-and-run and test commands."
    cmds = _readme_commands()
    assert len(cmds) >= 2, "README.md must show the install + main job and install + tests commands in ```bash blocks"
    index = "".join("".join(c["source"]) for c in json.loads((ROOT / "nbs/index.ipynb").read_text())["cells"])
    missing = [c for c in cmds[:2] if c not in index]
    assert not missing, f"nbs/index.ipynb lacks README.md's commands: {missing}"


def test_newcomer_pages_in_the_navigation():
    quarto = (ROOT / "_quarto.yml").read_text()
    for page in ["get_started.ipynb", "which_method.ipynb"]:
        assert (ROOT / "nbs" / page).exists() and f"href: {page}" in quarto, page
    import yaml
    formats = set(yaml.safe_load(quarto)["format"])
    assert formats == {"html"}, f"{formats}: a second (commonmark) format makes pandoc warn on every formula it cannot turn into text"


# --- the checker itself, on a small hand-made site: each kind of fault must be reported -----------------

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def _page(body): return f"<html><head></head><body><main>{body}</main></body></html>"


def test_static_check_finds_broken_links_anchors_and_images(tmp_path):
    site = tmp_path / "site"; (site / "sub").mkdir(parents=True)
    (site / "fig.png").write_bytes(PNG); (site / "empty.png").write_bytes(b""); (site / "fake.png").write_text("hello")
    (site / "index.html").write_text(_page('<h2 id="here">x</h2><a href="sub/page.html#there">ok</a> <a href="#here">ok</a>'
                                           '<img src="fig.png"> <a href="https://example.org/base/sub/page.html#there">ok</a>'))
    (site / "sub/page.html").write_text(_page(
        '<p id="there">y</p><a href="../index.html#nowhere">bad anchor</a> <a href="../missing.html">bad file</a>'
        '<img src="../empty.png"> <img src="../fake.png"> <img src="../absent.png"> <a href="https://example.org/base/index.html#gone">bad</a>'
        '<a href="https://elsewhere.org/x.html">external, not checked</a>'))
    bad = check_site.static_problems(site, "https://example.org/base/")
    assert len(bad) == 6, bad
    for what in ["#nowhere", "missing.html", "empty.png empty", "fake.png not a .png", "absent.png missing", "#gone"]:
        assert any(what in b for b in bad), (what, bad)


def test_katex_version_check(tmp_path):
    site, dist = tmp_path / "site", tmp_path / "katex" / "dist"
    site.mkdir(); dist.mkdir(parents=True)
    (dist.parent / "package.json").write_text('{"version": "0.16.47"}')
    cdn = '<script src="https://cdn.jsdelivr.net/npm/katex@{}/dist/katex.min.js"></script>'
    (site / "a.html").write_text(_page(cdn.format("0.16")))
    assert check_site.katex_version_problems(site, dist) == []
    (site / "b.html").write_text(_page(cdn.format("0.15.2")))
    assert len(check_site.katex_version_problems(site, dist)) == 1


def test_dom_check_finds_untypeset_math_katex_errors_raw_tex_and_missing_images():
    good = _page('<p>The bound <span class="math inline"><span class="katex">x</span></span> holds; '
                 'costs $5 or more.</p><pre>$a$ \\frac</pre><img src="http://127.0.0.1:1/fig.png">')
    assert check_site.dom_problems("good.html", good, {"/fig.png"}) == []
    bad = _page('<p><span class="math inline">\\(x^2\\)</span> and $y_1$ and \\(z\\) and \\sqrt{2}</p>'
                '<span class="math display"><span class="katex-error" title="ParseError: bad">\\frac{</span></span>'
                '<img src="http://127.0.0.1:1/lost.png"><p>e<sup>f</sup></p>')
    found = check_site.dom_problems("bad.html", bad, set())
    for what in ["not typeset", "KaTeX error", "raw TeX", "lost.png was not delivered", "stray <sup>"]:
        assert any(what in b for b in found), (what, found)
    assert check_site.dom_problems("empty.html", "", set()) == ["empty.html: did not load (empty DOM)"]


# --- the real site --------------------------------------------------------------------------------------

def _copy_project(dst):
    "The project with ../shared beside it, as in a CI clone (the build must not touch the working tree)."
    shared = ROOT.parent / "shared"
    if shared.exists(): (dst / "shared").symlink_to(shared)
    repo = dst / "repo"; repo.mkdir()
    for name in ["settings.ini", "setup.py", "_quarto.yml", "README.md"]:
        shutil.copy2(ROOT / name, repo / name)
    ignore = shutil.ignore_patterns(".ipynb_checkpoints", "_proc", "sidebar.yml", "nbdev.yml", "__pycache__")
    for d in ["nbs", "vgi_lit", "tools"]:
        shutil.copytree(ROOT / d, repo / d, symlinks=True, ignore=ignore)
    return repo


@pytest.mark.slow
def test_site_builds_and_passes_the_browser_check(tmp_path):
    if build_site.quarto_env() is None: pytest.skip("Quarto is not installed (../shared/tools/quarto/install_quarto.sh installs it)")
    chromium = check_site.find_chromium()
    if chromium is None: pytest.skip("Chromium is not installed (Debian package chromium)")
    katex = check_site.find_katex()
    if katex is None: pytest.skip("no local KaTeX copy (npm install katex@0.16; set VGI_LIT_KATEX to its dist folder)")
    if os.environ.get("VGI_LIT_SITE"):
        site = Path(os.environ["VGI_LIT_SITE"]).resolve()
    else:
        repo = _copy_project(tmp_path)
        readme = (repo / "README.md").read_bytes()
        problems = build_site.build(repo, log=tmp_path / "nbdev_docs.log")
        assert not problems, "site build:\n" + "\n".join(problems[:40])
        assert (repo / "README.md").read_bytes() == readme
        site = repo / "_docs"
    assert (site / "index.html").exists()
    bad = check_site.static_problems(site, check_site.site_address(ROOT)) + check_site.katex_version_problems(site, katex)
    more, n = check_site.browser_problems(site, katex, chromium, workers=2)
    bad += more
    assert n >= 30, f"only {n} pages rendered"
    assert not bad, f"{len(bad)} problems on {n} pages:\n" + "\n".join(bad[:60])
