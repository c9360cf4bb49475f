"""The live view as one ES module, for a notebook's widget: frontend/'s modules, unchanged, inside one file.

A widget's module runs from a blob: address, where `import "./dom.js"` resolves to nothing, and Jupyter
serves no file of a package (its /files/ route answers 403 outside the notebook's folder). So the bundle
carries each module's text and, in the browser, makes each a blob: of its own, dependencies first, with its
relative imports rewritten to those blobs' addresses. The modules run as they are, in their own scopes; no
bundler (esbuild, a node toolchain) is needed to build or to check it, and a change to frontend/ is in the
next widget made, as the bundle is built when fitcore.notebook is first used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path

from fitcore.core.paths import FRONTEND

ENTRY = "widget.js"
# every relative import the modules make: `from "./name.js"` (one line or the end of a multi-line import)
IMPORT = re.compile(r'\bfrom\s+"\./([a-z_]+\.js)"')
# any relative specifier at all, to refuse one the browser-side rewrite would miss (`import "./x.js"`)
RELATIVE = re.compile(r'["\']\./[^"\']*["\']')

LOADER = """\
// fitcore's live view for a notebook's widget: frontend/'s modules in one file (fitcore/notebook/bundle.py).
// Each module becomes a blob: of its own, dependencies first, its `from "./x.js"` pointed at x's blob; the
// modules are made once per page, whichever widget comes first.
const SOURCES = %(sources)s;
const ORDER = %(order)s;
const KEY = "fitcoreBundle-%(digest)s";

function load() {
  if (!globalThis[KEY]) {
    const urls = {};
    for (const name of ORDER) {
      const text = SOURCES[name]
        .replace(/\\bfrom\\s+"\\.\\/([a-z_]+\\.js)"/g, (_, dep) => `from "${urls[dep]}"`);
      urls[name] = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
    }
    globalThis[KEY] = import(urls[%(entry)s]);
  }
  return globalThis[KEY];
}

export default {
  async render(context) {
    const widget = await load();
    return widget.default.render(context);
  },
};
"""


class BundleError(RuntimeError):
    """frontend/'s modules cannot be bundled this way: an import the rewrite would miss, or a circle."""


def imports(text: str) -> list[str]:
    """The modules `text` imports by relative path, in order; any other relative specifier is refused."""
    found = IMPORT.findall(text)
    if len(RELATIVE.findall(text)) != len(found):
        raise BundleError('a relative import not of the form `from "./name.js"`')
    return found


def order(frontend: Path = FRONTEND, entry: str = ENTRY) -> list[str]:
    """The modules `entry` needs, each after every module it imports (a depth-first post-order)."""
    done: list[str] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in visiting:
            raise BundleError(f"an import circle: {' -> '.join(visiting + [name])}")
        visiting.append(name)
        for dep in imports((frontend / name).read_text(encoding="utf-8")):
            visit(dep)
        visiting.pop()
        done.append(name)

    visit(entry)
    return done


def build(frontend: Path = FRONTEND, entry: str = ENTRY) -> str:
    """The bundle's text: the loader, with every module `entry` needs."""
    names = order(frontend, entry)
    sources = {name: (frontend / name).read_text(encoding="utf-8") for name in names}
    text = json.dumps(sources, ensure_ascii=False, sort_keys=True)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]  # a new build is a new set of blobs
    return LOADER % {
        "sources": text,
        "order": json.dumps(names),
        "digest": digest,
        "entry": json.dumps(entry),
    }


@functools.cache
def bundle() -> str:
    """build(), once per kernel."""
    return build()


@functools.cache
def styles() -> str:
    """The live view's styles (frontend/live.css), the widget's own rules among them."""
    return (FRONTEND / "live.css").read_text(encoding="utf-8")
