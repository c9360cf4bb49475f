"""fitcore in a notebook: `from fitcore.notebook import Live; Live(devices="virtual:3")` shows the dashboard's
live view of a run as a widget (fitcore/notebook/widget.py), with its Start, Pause, Step, Stop and Reset.

It needs the `notebook` extra (`pip install "fitcore[notebook]"`: anywidget and ipykernel); the dashboard
does not, so the widget's module is imported only when `Live` is asked for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Live"]


def __getattr__(name: str) -> Any:
    if name != "Live":
        raise AttributeError(f"module 'fitcore.notebook' has no attribute {name!r}")
    try:
        from fitcore.notebook.widget import Live
    except ModuleNotFoundError as exc:
        if exc.name not in ("anywidget", "ipywidgets", "traitlets"):
            raise
        from fitcore.core.i18n import t

        raise ImportError(t("notebook.missing")) from None
    return Live
