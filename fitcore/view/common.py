"""What every view module shares: shapes and parameter names as the page writes them, and a panel as data."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from fitcore.core.devices import label_parts
from fitcore.core.i18n import t
from fitcore.core.text import format_bytes

if TYPE_CHECKING:
    from fitcore.core.config import FitConfig
    from fitcore.core.devices import DevicePlan
    from fitcore.runs.runner import Snapshot


def shape_text(shape: Sequence[int]) -> str:
    """A shape as the page's tables write it: [67, 2]."""
    return "[" + ", ".join(str(n) for n in shape) + "]"


def device_text(label: str) -> str:
    """A device's label as the tables write it: "virtual:0 (emulated on CPU)", in the page's language."""
    device, on = label_parts(label)
    return t("view.device.emulated", device=device, on=on) if on else label


def escape_markdown(text: str) -> str:
    """Text shown through a Markdown element exactly as written (no emphasis, links or code from it).

    GitHub's Markdown (Streamlit's) also links bare `http://...`, `www.` and `name@host` after parsing, so
    an escape does not stop it: an invisible word joiner (U+2060) inside each mark does, and a link given
    as a value shows as text, not as a link inside the error box.
    """
    special = "\\`*_[]<>#|~$"
    escaped = "".join("\\" + c if c in special else c for c in text)
    return _AUTOLINK.sub(lambda m: m[0][:-1] + WORD_JOINER + m[0][-1], escaped)


WORD_JOINER = "\u2060"
_AUTOLINK = re.compile(r"(?i)://|www\.|\w@")  # the character before each mark's last one gets the joiner


def parameter_names(n_features: int) -> list[str]:
    """w1 ... wd, b: the parameters' names in tables, CSV columns and the live view's chart."""
    return [f"w{i}" for i in range(1, n_features + 1)] + ["b"]


def fitted_names(cfg: Any) -> list[str]:
    """The parameters as a reader knows them: a CSV run's feature columns (area, rooms, age) and b, the
    synthetic data's w1 ... wd and b."""
    if cfg.data and len(cfg.features) == cfg.n_features:
        return list(cfg.features) + ["b"]
    return parameter_names(cfg.n_features)


def data_words(cfg: Any) -> str:
    """ "houses.csv: price from area, rooms, age" for a CSV run, "" for the synthetic data."""
    if not cfg.data:
        return ""
    name = cfg.data.replace("\\", "/").rsplit("/", 1)[-1]
    return t("live.run.data", file=name, target=cfg.target, features=", ".join(cfg.features))


def memory_rows(
    labels: Sequence[str], memory: Sequence[dict], extra: dict[int, dict[str, str]] | None = None
) -> list[dict[str, Any]]:
    """One row per device or rank: the bytes of its parameters, gradients and optimizer state, and the
    columns `extra` adds to some rows (DataParallel's device 0: what it gathers; "none" in the others: a
    table's cells are Markdown, where a lone "-" draws a bullet)."""
    rows = [
        {
            t("view.col.rank"): i,
            t("view.col.device"): device_text(label),
            t("view.memory.parameters"): format_bytes(held["parameters"]),
            t("view.memory.gradients"): format_bytes(held["gradients"]),
            t("view.memory.optimizer_state"): format_bytes(held["optimizer_state"]),
            **allocated_cell(held),
            **(extra or {}).get(i, {}),
        }
        for i, (label, held) in enumerate(zip(labels, memory))
    ]
    keys = list(dict.fromkeys(key for row in rows for key in row))
    return [{key: row.get(key, t("view.none")) for key in keys} for row in rows]


def allocated_cell(held: dict) -> dict[str, str]:
    """A memory table's cell of a GPU's allocated bytes, where the row has them (a CUDA run's)."""
    return {t("view.memory.allocated"): format_bytes(held["allocated"])} if "allocated" in held else {}


def allocated_note(memory: Sequence[dict] | None) -> tuple[str, ...]:
    """What a GPU's allocated bytes are, where a row of the table has them."""
    return (t("view.memory.allocated_note"),) if any("allocated" in m for m in memory or ()) else ()


def memory_notes(memory: Sequence[dict], measured: bool) -> tuple[str, ...]:
    """The notes under a memory table: measured or by the formula, and what a GPU's allocated bytes are where
    a row has them."""
    return (t("view.memory.measured" if measured else "view.memory.planned"), *allocated_note(memory))


def shown(
    snap: Snapshot | None, cfg: FitConfig | None, plan: DevicePlan | None
) -> tuple[FitConfig | None, DevicePlan | None]:
    """The config a strategy's panels describe and its device plan: the run's, with the plan its start checked
    (Snapshot.plan), else the controls', with the plan the page checked them to (`plan`). Nothing below the
    page reads the devices string again."""
    return (snap.config, snap.plan) if snap is not None else (cfg, plan)


@dataclass(frozen=True)
class Section:
    """One panel below the live view, as plain data; app.py draws its parts in this order.

    A strategy's view module gives its panels as Sections (`sections(snap, cfg, plan)`), so that the page
    draws any strategy's panels without asking which strategy it is.
    """

    name: str  # a stable key: the figure's widget key is f"{name}_chart"
    title: str = ""  # a subheader
    heading: str = ""  # a bold line, shown exactly as written
    figure: dict[str, Any] | None = None  # a plotly figure as a dict
    tables: tuple[list[dict[str, Any]], ...] = ()  # each a list of rows
    text_columns: tuple[str, ...] = ()  # columns shown as text (a "Rank" of 0, 1 and "all")
    notes: tuple[str, ...] = ()  # captions beneath


def ranks_memory(
    labels: Sequence[str], measured: Sequence[dict] | None, planned: Sequence[dict], note: str
) -> Section:
    """The ranks' memory panel: what each rank held, measured where the run reported every rank's, else by
    the strategy's formula (`planned`), with the notes that say which and the strategy's own `note`."""
    memory = measured if measured and len(measured) == len(labels) else planned
    return Section(
        "memory",
        title=t("view.memory.title.ranks"),
        tables=(memory_rows(labels, memory),),
        text_columns=(t("view.col.rank"),),
        notes=(*memory_notes(memory, bool(measured)), note),
    )
