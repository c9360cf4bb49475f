"""The wheel's build step: pyproject.toml says what fitcore is; this copies the dashboard's files into it.

app.py, dashboard/, frontend/'s modules and styles, examples/ and .streamlit/config.toml go to fitcore/app/ in
the built package, where fitcore.core.paths finds them, so that an installed `fitcore serve` runs the same
page as `streamlit run app.py` in a checkout. An editable install reads them from the checkout instead.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

APP_FILES = (  # relative to the repository root; the same paths under fitcore/app/
    "app.py",
    ".streamlit/config.toml",
    "dashboard/*.py",
    "frontend/*.js",
    "frontend/*.css",
    "examples/*.csv",
    "examples/*.fitrec",
    "examples/*.ipynb",
)


class BuildWithApp(build_py):
    """build_py, then the dashboard's files under fitcore/app/."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "fitcore" / "app"
        for pattern in APP_FILES:
            for source in sorted(Path().glob(pattern)):
                dest = target / source
                self.mkpath(str(dest.parent))
                self.copy_file(str(source), str(dest))


setup(cmdclass={"build_py": BuildWithApp})
