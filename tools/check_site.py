"""Check the rendered documentation site in a real browser.

    python tools/check_site.py [SITE_DIR] [--chromium PATH] [--screenshots DIR]

SITE_DIR is the rendered site (default `_docs`, made by `python tools/build_site.py`). The check

1. reads every page's HTML and asserts that every relative `href`/`src` (and every link to the
   site's own public address, which nbdev writes for backticked names) points to a file that
   exists, that every `#anchor` exists in the page it points to, that every image file
   exists, is non-empty and starts with the signature of its format, and that no page loads a
   script or stylesheet from outside the site (KaTeX ships in the site's `katex/` folder);
2. serves the site on a free local port (http.server);
3. opens every page in headless Chromium (`--dump-dom` after a virtual-time budget, so the
   page's scripts have run) and asserts that the page loaded, that every `.math` element was
   typeset by KaTeX, that no `.katex-error` element is left, that no raw TeX (`$…$`, `\\(…\\)`,
   `\\[…\\]` or a `\\command`) is left in the visible text, no stray superscript or subscript
   (pandoc's reading of `^…^` and `~…~` in prose) is left, and that every `<img>` the page has
   after its scripts ran points to an image the server delivered; every request the browser made
   to the server must have succeeded;
4. opens every page again from the file system (`file://`) with the network cut off (a proxy
   that refuses every connection and a host resolver that resolves nothing) and asserts that it
   loaded and that every formula was typeset, as for a reader of `_docs/` without network.

With `--screenshots DIR` it also saves full-width screenshots of the pages named by `--shoot`.
Exit status 0 when every check passes; otherwise the problems are printed, one per line.
"""
import argparse, base64, functools, http.server, os, re, shutil, socketserver, subprocess, sys
import tempfile, threading, urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
SIGNATURES = {".png": [b"\x89PNG\r\n\x1a\n"], ".jpg": [b"\xff\xd8\xff"], ".jpeg": [b"\xff\xd8\xff"],
              ".gif": [b"GIF87a", b"GIF89a"], ".svg": [b"<?xml", b"<svg"], ".webp": [b"RIFF"], ".ico": [b"\x00\x00\x01\x00"]}
# Text inside these elements is code or already typeset: TeX there is not a rendering failure.
SKIP_TEXT = {"script", "style", "code", "pre", "kbd", "samp", "textarea", "noscript"}
RAW_TEX = [re.compile(r"\$[^$\s][^$]*\$"), re.compile(r"\\\(|\\\)|\\\[|\\\]"),
           re.compile(r"\\(?:frac|tfrac|sum|mathrm|mathbb|mathcal|operatorname|top|sqrt|log|partial|le|ge|alpha|beta|gamma|lambda|sigma|Sigma|theta|nabla|cdot|left|right|begin|end)\b")]


def site_address(root):
    "The public address nbdev writes into the pages (doc_host + doc_baseurl from settings.ini), or None."
    ini = root / "settings.ini"
    if not ini.exists(): return None
    vals = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", ini.read_text(), re.M))
    host, base = vals.get("doc_host"), vals.get("doc_baseurl", "")
    return (host.rstrip("/") + "/" + base.strip("/") + "/").replace(":/", "://").replace(":///", "://") if host else None


def external_problems(site):
    "Pages that load a script or a stylesheet from outside the site: such a page does not read offline."
    bad = []
    for page in pages(site):
        soup = BeautifulSoup((site / page).read_text(errors="replace"), "html.parser")
        for tag, attr in [("script", "src"), ("link", "href")]:
            for el in soup.find_all(tag, attrs={attr: True}):
                if tag == "link" and not {"stylesheet", "preload", "modulepreload"} & set(el.get("rel") or []): continue
                url = el[attr].strip()
                if urllib.parse.urlsplit(url).scheme in ("http", "https") or url.startswith("//"):
                    bad.append(f"{page}: <{tag} {attr}={url!r}> loads from outside the site")
    return bad


def find_chromium(explicit=None):
    for c in [explicit, os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"]:
        if c and shutil.which(c): return shutil.which(c)
    return None


def pages(site):
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if "site_libs" not in p.parts)


def _ids(path, cache={}):
    if path not in cache:
        soup = BeautifulSoup(path.read_text(errors="replace"), "html.parser")
        cache[path] = {t.get("id") for t in soup.find_all(id=True)} | {t.get("name") for t in soup.find_all("a", attrs={"name": True})}
    return cache[path]


def _check_image_file(path):
    if not path.is_file(): return "missing"
    data = path.read_bytes()[:16]
    if not data: return "empty"
    sigs = SIGNATURES.get(path.suffix.lower())
    if sigs and not any(data.startswith(s) or (path.suffix == ".svg" and s in path.read_bytes()[:500]) for s in sigs):
        return f"not a {path.suffix} file"
    return None


def static_problems(site, address=None):
    "Broken relative links, missing anchors and bad image files in the built HTML (no browser needed)."
    bad = []
    for page in pages(site):
        path = site / page
        soup = BeautifulSoup(path.read_text(errors="replace"), "html.parser")
        for tag, attr in [("a", "href"), ("link", "href"), ("img", "src"), ("script", "src"), ("source", "src")]:
            for el in soup.find_all(tag, attrs={attr: True}):
                url = el[attr].strip()
                if address and url.startswith(address): url = os.path.relpath(site / url[len(address):], path.parent) if url[len(address):] else "index.html"
                parts = urllib.parse.urlsplit(url)
                if parts.scheme or url.startswith("//") or url.startswith("mailto:"):
                    if parts.scheme == "data" and tag == "img":
                        head, _, payload = url.partition(",")
                        try: ok = len(base64.b64decode(payload) if ";base64" in head else payload) > 0
                        except ValueError: ok = False
                        if not ok: bad.append(f"{page}: empty or undecodable data image")
                    continue
                target = path if not parts.path else (path.parent / urllib.parse.unquote(parts.path)).resolve()
                if target.is_dir(): target = target / "index.html"
                if tag == "img":
                    why = _check_image_file(target)
                    if why: bad.append(f"{page}: image {url} {why}")
                    continue
                if not target.exists():
                    bad.append(f"{page}: <{tag} {attr}={url!r}> points to a missing file"); continue
                frag = urllib.parse.unquote(parts.fragment)
                if frag and target.suffix == ".html" and frag not in _ids(target):
                    bad.append(f"{page}: <{tag} {attr}={url!r}> anchor #{frag} not in {target.relative_to(site.resolve()) if target.is_relative_to(site.resolve()) else target}")
        if "<code>](" in path.read_text(errors="replace"):
            bad.append(f"{page}: a code span holds markdown link text ('<code>](...)'): a linked name inside double backticks")
    return bad


class _Handler(http.server.SimpleHTTPRequestHandler):
    "Serves the site and records every request."
    def __init__(self, *a, site, log, **kw):
        self.site, self.log = site, log
        super().__init__(*a, directory=str(site), **kw)

    def log_message(self, *a): pass

    def do_GET(self):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        f = (self.site / path.lstrip("/")).resolve()
        if f.is_dir(): f = f / "index.html"
        return self._send(f)

    def _send(self, f):
        if not f.is_file():
            self.log.append((self.path, 404)); self.send_error(404); return
        data = f.read_bytes()
        ctype = self.guess_type(str(f))
        self.log.append((self.path, 200))
        self.send_response(200); self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def serve(site):
    "Start the local server on a free port; return (server, base_url, request_log)."
    log = []
    srv = _Server(("127.0.0.1", 0), functools.partial(_Handler, site=site.resolve(), log=log))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/", log


# No network at all: every connection goes to a proxy on the discard port, where nothing listens, and no host name
# resolves; file:// pages still load their local files.
OFFLINE = ["--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--host-resolver-rules=MAP * ~NOTFOUND"]


def _chromium_args(chromium, profile, offline=False):
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
            "--hide-scrollbars", "--virtual-time-budget=15000"] + (OFFLINE if offline else [])


def dump_dom(chromium, url, timeout=120, offline=False):
    with tempfile.TemporaryDirectory() as prof:
        r = subprocess.run(_chromium_args(chromium, prof, offline) + ["--dump-dom", url], capture_output=True, text=True, timeout=timeout)
    return r.stdout


def screenshot(chromium, url, out, width=1280, height=1600, timeout=120):
    with tempfile.TemporaryDirectory() as prof:
        subprocess.run(_chromium_args(chromium, prof) + [f"--window-size={width},{height}", f"--screenshot={out}", url],
                       capture_output=True, text=True, timeout=timeout)
    return Path(out).exists() and Path(out).stat().st_size > 0


def _visible_text(soup):
    for s in soup.find_all(string=True):
        if s.find_parent(lambda t: t.name in SKIP_TEXT or "katex" in (t.get("class") or []) or "math" in (t.get("class") or [])
                         or t.name == "head"):
            continue
        yield s


def dom_problems(page, dom, served):
    """Problems in the DOM of one page after its scripts ran. `served` is the set of paths the server delivered (None: a page
    read from the file system; its images are not checked here)."""
    if not dom or "</html>" not in dom: return [f"{page}: did not load (empty DOM)"]
    soup = BeautifulSoup(dom, "html.parser")
    bad = []
    if not soup.find("main") and not soup.find(id="quarto-content"): bad.append(f"{page}: no main content")
    math = soup.select(".math")
    untyped = [m for m in math if not m.select_one(".katex")]
    if untyped: bad.append(f"{page}: {len(untyped)} of {len(math)} equations not typeset, e.g. {untyped[0].get_text()[:80]!r}")
    for err in soup.select(".katex-error"):
        bad.append(f"{page}: KaTeX error: {err.get('title', '')[:120]} in {err.get_text()[:80]!r}")
    for s in _visible_text(soup):
        for rx in RAW_TEX:
            m = rx.search(s)
            if m: bad.append(f"{page}: raw TeX in the text: {s.strip()[:100]!r}"); break
    for sup in soup.find_all(["sup", "sub"]):
        if sup.find_parent(lambda t: t.name == "a" or "katex" in (t.get("class") or []) or t.name in SKIP_TEXT): continue
        bad.append(f"{page}: stray <{sup.name}> (a ^ or ~ outside $…$?): {sup.parent.get_text()[:100]!r}")
    for img in soup.find_all("img") if served is not None else []:
        src = img.get("src", "")
        if src.startswith("data:"):
            if len(src.partition(",")[2]) < 16: bad.append(f"{page}: empty data image")
            continue
        p = urllib.parse.urlsplit(src)
        if p.scheme in ("http", "https") and p.hostname == "127.0.0.1":
            if p.path not in served: bad.append(f"{page}: image {src} was not delivered")
        elif p.scheme: bad.append(f"{page}: image from outside the site: {src}")
    return bad


def offline_problems(site, chromium, names=None, workers=2):
    """Open pages (default: every page) from the file system with the network cut off (OFFLINE); the problems of
    `dom_problems` without the image checks: a page that did not load, formulas not typeset, KaTeX errors, raw TeX."""
    names = pages(site) if names is None else list(names)
    def visit(page): return page, dump_dom(chromium, (site / page).resolve().as_uri(), offline=True)
    with ThreadPoolExecutor(workers) as ex:
        doms = list(ex.map(visit, names))
    return [f"offline, {b}" for page, dom in doms for b in dom_problems(page, dom, None)]


def browser_problems(site, chromium, workers=2, screenshots=None, shoot=()):
    srv, base, log = serve(site)
    try:
        names = pages(site)
        def visit(page):
            dom = dump_dom(chromium, base + page)
            return page, dom
        with ThreadPoolExecutor(workers) as ex:
            doms = list(ex.map(visit, names))
        served = {urllib.parse.urlsplit(p).path for p, code in log if code == 200}
        # resolve images relative to the page so the delivered-set check sees absolute paths
        bad = []
        for page, dom in doms:
            soup_base = base + page
            dom = re.sub(r'(<img[^>]*\bsrc=")(?!data:|https?:)([^"]+)"', lambda m: m.group(1) + urllib.parse.urljoin(soup_base, m.group(2)) + '"', dom or "")
            bad += dom_problems(page, dom, served)
        bad += [f"request failed ({code}): {p}" for p, code in log if code != 200 and p != "/favicon.ico"]
        if screenshots:
            Path(screenshots).mkdir(parents=True, exist_ok=True)
            for page in shoot:
                out = Path(screenshots) / (page.replace("/", "_").replace(".html", ".png"))
                if not screenshot(chromium, base + page, out): bad.append(f"{page}: screenshot failed")
        return bad, len(names)
    finally:
        srv.shutdown()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site", nargs="?", default=str(ROOT / "_docs"))
    ap.add_argument("--chromium", help="Chromium executable")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--screenshots", help="folder for screenshots of the --shoot pages")
    ap.add_argument("--shoot", nargs="*", default=["index.html", "get_started.html", "which_method.html",
                                                   "methods/fixed_point.html", "experiments/fp_experiments.html"])
    a = ap.parse_args(argv)
    site = Path(a.site)
    if not (site / "index.html").exists(): sys.exit(f"no rendered site at {site} (build it with python tools/build_site.py)")
    chromium = find_chromium(a.chromium)
    if chromium is None: sys.exit("no Chromium found: install the chromium package or pass --chromium")
    bad = static_problems(site, site_address(ROOT)) + external_problems(site)
    more, n = browser_problems(site, chromium, a.workers, a.screenshots, a.shoot)
    bad += more + offline_problems(site, chromium, workers=a.workers)
    for b in bad: print(b)
    print(f"{n} pages checked, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
