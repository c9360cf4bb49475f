"""GET /fitcore/static/<name>: the live view's modules and plotly.js from the app's own route (no CDN).

It answers only frontend/'s own .js and .css files and the plotly wheel's plotly.min.js, gzipped where the
browser takes it, with an ETag and the cache rule each kind of file needs.
"""

from __future__ import annotations

import asyncio
import gzip
import re
from pathlib import Path

import pytest
from starlette.requests import Request

from fitcore import api

ROOT = Path(__file__).resolve().parents[1]
FILES = api.static_files()


def get(name: str, headers: dict[str, str] | None = None, files=FILES, path: str = api.STATIC_PATH):
    """GET <path>/<name> from a static route serving `files` (frontend/'s, or api.drawer_files)."""
    scope = {"type": "http", "method": "GET", "path": f"{path}/{name}", "query_string": b"",
             "path_params": {"name": name},
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]}  # fmt: skip
    return asyncio.run(api.static_handler(files)(Request(scope)))


def test_it_serves_every_module_the_view_imports_and_nothing_else():
    modules = {p.name for p in (ROOT / "frontend").glob("*.js")} | {"live.css"}
    assert set(FILES) == modules | {"plotly.min.js"}
    # every relative import in a module names a file the route serves
    for name in modules - {"live.css"}:
        text = (ROOT / "frontend" / name).read_text(encoding="utf-8")
        for imported in re.findall(r'from "\./([a-z_]+\.js)"', text):
            assert imported in FILES, (name, imported)


@pytest.mark.parametrize(
    "name", ["preview.py", "preview.html", "package.json", "..%2Fapp.py", "x.js", "tests"]
)
def test_any_other_name_is_404_with_one_line(name):
    response = get(name)
    assert response.status_code == 404
    assert b"allowed: one of the live view's files" in response.body


def test_a_module_is_checked_again_on_every_page_and_answers_304_while_unchanged():
    response = get("mount.js")
    assert response.status_code == 200
    assert response.body == (ROOT / "frontend" / "mount.js").read_bytes()
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache"
    again = get("mount.js", {"If-None-Match": response.headers["etag"]})
    assert (again.status_code, again.body) == (304, b"")


def test_plotly_js_is_the_wheels_own_file_gzipped_and_kept_a_week():
    response = get("plotly.min.js", {"Accept-Encoding": "gzip, deflate"})
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "gzip"
    assert response.headers["cache-control"] == "public, max-age=604800, immutable"
    body = gzip.decompress(response.body)
    assert body == api.plotly_js().read_bytes()
    assert b"window.Plotly = Plotly" in body
    assert len(response.body) < len(body) / 2  # what a classroom's network carries: under half
    assert re.fullmatch(r"/fitcore/static/plotly\.min\.js\?v=[0-9][0-9.]*", api.plotly_url())
