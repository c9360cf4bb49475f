"""Where the dashboard's own files are: beside fitcore/ in a source tree, or inside the installed package.

A wheel carries them under fitcore/app/ (app.py, dashboard/, frontend/, examples/, .streamlit/), copied
there by setup.py's build step, so that `fitcore serve` runs the installed page; a checkout (or an editable
install) reads them where they are.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # fitcore/, above this module's folder (fitcore/core/)
INSTALLED = _PACKAGE / "app"  # only a built wheel has it
APP_ROOT = INSTALLED if (INSTALLED / "app.py").is_file() else _PACKAGE.parent
APP = APP_ROOT / "app.py"  # what `fitcore serve` hands to `streamlit run`
FRONTEND = APP_ROOT / "frontend"  # the live view's modules and styles
EXAMPLES = APP_ROOT / "examples"  # houses.csv and the recordings
