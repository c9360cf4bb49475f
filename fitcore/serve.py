"""`fitcore serve [streamlit flags]`: the dashboard, as `streamlit run app.py [flags]` runs it in a checkout.

It runs the app.py that fitcore.paths finds (the installed package's, or the checkout's), from that app's
folder so that Streamlit reads the project's .streamlit/config.toml (theme, headless, upload limit) there;
every flag goes to `streamlit run` as it is (`--server.port 8502`, `--server.address 127.0.0.1`).
"""

from __future__ import annotations

import os
import sys

from fitcore import paths


def command(argv: list[str]) -> list[str]:
    """The command line that serves the page: this interpreter's streamlit on the app, then argv."""
    return [sys.executable, "-m", "streamlit", "run", str(paths.APP), *argv]


def main(argv: list[str]) -> int:
    """Become `streamlit run <app.py> argv`: Ctrl-C, signals and the exit status are Streamlit's own."""
    os.chdir(paths.APP_ROOT)
    sys.stdout.flush()
    os.execv(sys.executable, command(argv))
    return 1  # not reached: execv replaces this process or raises
