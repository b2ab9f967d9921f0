"""The documentation site: README.md and the site's home page agree and nbdev cannot overwrite README.md;
the sidebar is the committed, current one, grouped by tier; KaTeX ships with the site; the checker in
tools/check_site.py finds what it is meant to find; and (slow) the whole site builds without warnings,
passes the browser check in headless Chromium, and reads from the file system with the network off.

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


def test_home_page_outputs_are_current():
    """The site shows the outputs stored in nbs/index.ipynb (nbval runs the page but does not compare them): every
    cell that prints has its output stored, and the stored method list is today's `vgi_lit.METHODS`."""
    import vgi_lit
    cells = [c for c in json.loads((ROOT / "nbs/index.ipynb").read_text())["cells"] if c["cell_type"] == "code"]
    text = lambda c: "".join("".join(o.get("text", "")) for o in c["outputs"] if o["output_type"] == "stream")
    for c in cells:
        if "print(" in "".join(c["source"]): assert text(c).strip(), f"cell {c['id']} prints but has no stored output: re-run the page"
    listing = [c for c in cells if "sorted(vgi_lit.METHODS)" in "".join(c["source"])]
    assert len(listing) == 1 and str(sorted(vgi_lit.METHODS)) in text(listing[0]), "stale method list on the home page: re-run nbs/index.ipynb"


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


def test_a_linked_name_inside_double_backticks_is_found_and_made_one_code_span(tmp_path):
    """nbdev links the name inside a double-backtick span, which pandoc shows as `[`, the name and `](url)` in three code
    spans: the static check names the page, and the build's `plain_private_names` turns it into the one code span."""
    site = tmp_path / "site"; site.mkdir()
    (site / "index.html").write_text(_page('<p>see <code>[</code>_learn_wide<code>](https://example.org/x.html#_learn_wide)</code> and '
                                           '<code>[</code>HyperParams.grad<code>](https://example.org/x.html#hyperparams.grad)</code></p>'))
    assert any("markdown link text" in b for b in check_site.static_problems(site))
    assert build_site.plain_private_names(site) == 2
    text = (site / "index.html").read_text()
    assert "<code>_learn_wide</code>" in text and "<code>HyperParams.grad</code>" in text and "](" not in text
    assert check_site.static_problems(site) == []


def test_external_check_finds_scripts_and_stylesheets_from_outside_the_site(tmp_path):
    site = tmp_path / "site"; (site / "sub").mkdir(parents=True)
    (site / "a.html").write_text(_page('<script src="katex/katex.min.js"></script><link rel="stylesheet" href="katex/katex.min.css">'
                                       '<a href="https://example.org/">a link is not a resource</a>'
                                       '<link rel="canonical" href="https://example.org/a.html">'))
    assert check_site.external_problems(site) == []
    (site / "sub/b.html").write_text(_page('<script src="https://cdn.jsdelivr.net/npm/katex@0.16.47/dist/katex.min.js"></script>'
                                           '<link rel="stylesheet" href="//cdn.example.org/x.css">'))
    bad = check_site.external_problems(site)
    assert len(bad) == 2 and all(b.startswith("sub/b.html") for b in bad), bad


def _fake_katex(root, version="0.16.47"):
    dist = root / "node_modules/katex/dist"; (dist / "fonts").mkdir(parents=True)
    (dist / "katex.min.js").write_text("/* js */"); (dist / "katex.min.css").write_text("/* css */")
    (dist / "fonts/KaTeX_Main-Regular.woff2").write_bytes(b"wOF2"); (dist / "katex.mjs").write_text("not shipped")
    (dist.parent / "package.json").write_text(json.dumps({"version": version})); (dist.parent / "LICENSE").write_text("MIT")
    return dist


def test_katex_ships_with_the_site_by_relative_links(tmp_path):
    site = tmp_path / "site"; (site / "methods").mkdir(parents=True); (site / "site_libs").mkdir()
    cdn = ('<script defer src="https://cdn.jsdelivr.net/npm/katex@0.16.47/dist/katex.min.js"></script>'
           '<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/katex@0.16.47/dist/katex.min.css">')
    (site / "index.html").write_text(_page(cdn)); (site / "methods/page.html").write_text(_page(cdn))
    dist = _fake_katex(tmp_path / "k")
    assert build_site.ship_katex(site, dist) == []
    assert sorted(p.relative_to(site / "katex").as_posix() for p in (site / "katex").rglob("*") if p.is_file()) == \
        ["LICENSE", "fonts/KaTeX_Main-Regular.woff2", "katex.min.css", "katex.min.js"]
    assert 'src="katex/katex.min.js"' in (site / "index.html").read_text()
    assert 'src="../katex/katex.min.js"' in (site / "methods/page.html").read_text()
    assert 'href="../katex/katex.min.css"' in (site / "methods/page.html").read_text()
    assert check_site.static_problems(site) == [] and check_site.external_problems(site) == []
    (site / "other.html").write_text(_page('<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>'))
    assert build_site.ship_katex(site, dist) == ["other.html still loads from cdn.jsdelivr.net"]


def test_katex_copy_of_another_release_is_refused(tmp_path):
    assert build_site.find_katex(_fake_katex(tmp_path / "a")) == tmp_path / "a/node_modules/katex/dist"
    with pytest.raises(ValueError, match="release 0.15.2"):
        build_site.find_katex(_fake_katex(tmp_path / "b", "0.15.2"))
    with pytest.raises(FileNotFoundError, match="no katex.min.js"):
        build_site.find_katex(tmp_path)


def test_pages_name_the_shipped_katex_release():
    "_quarto.yml's CDN address (what nbdev_preview loads online) names the release tools/build_site.py ships."
    import yaml
    url = yaml.safe_load((ROOT / "_quarto.yml").read_text())["format"]["html"]["html-math-method"]["url"]
    assert build_site.KATEX_CDN.fullmatch(url) and f"katex@{build_site.KATEX_VERSION}/" in url, url


def test_readme_states_the_site_prerequisites():
    "README.md's Developing section names what `python tools/build_site.py --check` needs, with the KaTeX release it ships."
    text = (ROOT / "README.md").read_text()
    dev = text[text.index("## Developing"):]
    for what in ["tools/build_site.py --check", "install_quarto.sh", '".[dev]"', "npm", f"KaTeX {build_site.KATEX_VERSION}",
                 "VGI_LIT_KATEX", "Chromium", "_docs/katex/"]:
        assert what in dev, f"README.md's Developing section does not mention {what}"


def test_sidebar_is_committed_current_and_grouped_by_tier():
    "nbs/sidebar.yml is what tools/build_site.py writes: the newcomer pages first, then one section per tier, every notebook once."
    import yaml
    assert _settings().get("custom_sidebar") == "True", "settings.ini: custom_sidebar = True, or nbdev_docs overwrites nbs/sidebar.yml"
    committed = (ROOT / "nbs/sidebar.yml").read_text()
    assert committed == build_site.sidebar_yaml(), "nbs/sidebar.yml is stale: run python tools/build_site.py --sidebar and commit it"
    contents = yaml.safe_load(committed)["website"]["sidebar"]["contents"]
    assert contents[:3] == ["index.ipynb", "get_started.ipynb", "which_method.ipynb"]
    sections = [c for c in contents if isinstance(c, dict)]
    assert [c["section"] for c in sections] == ["Foundation", "Models", "Methods", "Experiments", "Benchmarks", "Apps"]
    listed = [e for e in contents if isinstance(e, str)] + [e for c in sections for e in c["contents"]]
    books = [p.relative_to(ROOT / "nbs").as_posix() for p in (ROOT / "nbs").rglob("*.ipynb")
             if not any(part.startswith((".", "_")) for part in p.relative_to(ROOT / "nbs").parts)]
    assert sorted(listed) == sorted(books) and len(set(listed)) == len(listed)
    tier = {c["section"]: c["contents"] for c in sections}
    assert all(e.startswith("methods/") for e in tier["Methods"]) and "methods/11_fixed_point.ipynb" in tier["Methods"]
    assert "00_linalg.ipynb" in tier["Foundation"] and "09_main.ipynb" in tier["Apps"] and "bench/98_bench.ipynb" in tier["Benchmarks"]


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



def test_the_site_build_executes_notebooks_and_leaves_slow_cells_unrun(tmp_path):
    """`execute_notebooks`: every notebook run in its own folder, outputs replaced by this run's (a stale stored output
    goes), slow cells unrun with a note, a failing cell named with its notebook; hidden and `_` folders left alone."""
    import nbformat
    nbs = tmp_path / "nbs"; (nbs / "sub").mkdir(parents=True); (nbs / "_proc").mkdir()
    def write(path, *sources):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="stale\n")]
        nbformat.write(nb, path)
    (nbs / "sub" / "data.txt").write_text("here")
    write(nbs / "sub" / "a.ipynb", "print(open('data.txt').read(), 6 * 7)", "# pytest: slow\nprint('long')")
    write(nbs / "b.ipynb", "raise ValueError('broken on purpose')", "print('after')")
    write(nbs / "_proc" / "c.ipynb", "raise ValueError('never run')")
    problems = build_site.execute_notebooks(nbs, timeout=120)
    assert problems == ["b.ipynb: cell 0 failed: ValueError: broken on purpose"], problems
    a = nbformat.read(nbs / "sub" / "a.ipynb", as_version=4)
    assert [o["text"] for o in a.cells[0].outputs] == ["here 42\n"] and a.cells[1].outputs[0]["text"] == build_site.SLOW_NOTE
    assert nbformat.read(nbs / "_proc" / "c.ipynb", as_version=4).cells[0].outputs[0]["text"] == "stale\n"

# --- the real site --------------------------------------------------------------------------------------

def _copy_project(dst):
    "The project with ../shared beside it, as in a CI clone (the build must not touch the working tree)."
    shared = ROOT.parent / "shared"
    if shared.exists(): (dst / "shared").symlink_to(shared)
    repo = dst / "repo"; repo.mkdir()
    for name in ["settings.ini", "setup.py", "_quarto.yml", "README.md"]:
        shutil.copy2(ROOT / name, repo / name)
    ignore = shutil.ignore_patterns(".ipynb_checkpoints", "_proc", "nbdev.yml", "__pycache__")
    for d in ["nbs", "vgi_lit", "tools"]:
        shutil.copytree(ROOT / d, repo / d, symlinks=True, ignore=ignore)
    return repo


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    "The site built once from a copy of the project (or $VGI_LIT_SITE, an already built one), and Chromium."
    if build_site.quarto_env() is None: pytest.skip("Quarto is not installed (../shared/tools/quarto/install_quarto.sh installs it)")
    chromium = check_site.find_chromium()
    if chromium is None: pytest.skip("Chromium is not installed (Debian package chromium)")
    try: build_site.find_katex()
    except (OSError, RuntimeError, ValueError) as e: pytest.skip(f"no KaTeX copy to ship with the site: {e}")
    if os.environ.get("VGI_LIT_SITE"):
        site = Path(os.environ["VGI_LIT_SITE"]).resolve()
    else:
        tmp_path = tmp_path_factory.mktemp("site")
        repo = _copy_project(tmp_path)
        readme = (repo / "README.md").read_bytes()
        problems = build_site.build(repo, log=tmp_path / "nbdev_docs.log")
        assert not problems, "site build:\n" + "\n".join(problems[:40])
        assert (repo / "README.md").read_bytes() == readme
        site = repo / "_docs"
    assert (site / "index.html").exists()
    return site, chromium


@pytest.mark.slow
def test_site_builds_and_passes_the_browser_check(built_site):
    site, chromium = built_site
    bad = check_site.static_problems(site, check_site.site_address(ROOT)) + check_site.external_problems(site)
    more, n = check_site.browser_problems(site, chromium, workers=2)
    bad += more
    assert n >= 30, f"only {n} pages rendered"
    assert not bad, f"{len(bad)} problems on {n} pages:\n" + "\n".join(bad[:60])


@pytest.mark.slow
def test_site_reads_from_the_file_system_with_the_network_off(built_site, tmp_path):
    """Every page opened as a file (file://) in Chromium with no network typesets every formula; a copy of a page that
    loads KaTeX from the CDN instead typesets none under the same settings, so the network really was off."""
    site, chromium = built_site
    bad = check_site.offline_problems(site, chromium, workers=2)
    assert not bad, f"{len(bad)} problems reading the site offline:\n" + "\n".join(bad[:60])
    from bs4 import BeautifulSoup
    page = site / "methods/fixed_point.html"
    math = BeautifulSoup(check_site.dump_dom(chromium, page.as_uri(), offline=True), "html.parser").select(".math")
    assert len(math) >= 20 and all(m.select_one(".katex") for m in math), f"{len(math)} formulas on {page.name}"
    cdn = page.with_name("fixed_point_cdn.html")
    cdn.write_text(page.read_text().replace('"../katex/', f'"https://cdn.jsdelivr.net/npm/katex@{build_site.KATEX_VERSION}/dist/'))
    try:
        control = check_site.dom_problems(cdn.name, check_site.dump_dom(chromium, cdn.as_uri(), offline=True), None)
    finally:
        cdn.unlink()
    assert any("not typeset" in b for b in control), control
