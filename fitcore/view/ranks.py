"""The page's panels of ranks that each take their own rows (DistributedSampler's shards: DDP and FSDP):
each rank's shard of the dataset (a table and a grid), each rank's shapes in a step, the planned first step.

A strategy's view (fitcore.strategies.<name>.view) puts these beside its own panels, with its own sentences
(RankWords).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from fitcore.core.chunks import columns
from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.events import Replica, RunStarted, Step
from fitcore.core.i18n import count, t
from fitcore.core.shards import Layout, epoch_shards, epoch_value, first_epoch_value, row_shards
from fitcore.core.text import plural
from fitcore.engine.rank import rank_labels
from fitcore.protocols.mesh import DP, TP, grid
from fitcore.runs.console import final_lines, group_line
from fitcore.runs.recording import GROUP
from fitcore.runs.runner import Snapshot
from fitcore.view.common import Section, shape_text, shown

PREVIEW_INDICES = 12  # dataset indices listed per rank in the shard table; the counts stay exact

# The shard grid: one colour per rank, dark enough for white numbers on it (contrast >= 4.5 against white).
COLOURS = ("#1f6feb", "#c2410c", "#2f7d32", "#9333ea", "#b45309", "#0e7490", "#be185d", "#4d7c0f")
INK = "#111418"  # the page's text colour
# large, dark type in the page's own font: the page is projected in a classroom
FONT = dict(family='"Source Sans", "Source Sans Pro", sans-serif', size=16, color=INK)
AXIS = dict(showline=True, linecolor="#8a94a0", gridcolor="#e3e7ec", zeroline=False, tickfont=dict(size=15))
MAX_SHARD_PICTURE_ROWS = 2000  # dataset rows the shard grid draws one cell each; above, the table only
MAX_CELL_NUMBERS = 40  # rows up to which each cell shows its dataset row number


# ---------------------------------------------------------------------------------------------------------
# Each rank's shard of the dataset.

# the run's own Detail('shards') is built by the same function, so the plan is what the run reports
_planned_shards = functools.lru_cache(maxsize=8)(first_epoch_value)


def planned_shards(cfg: FitConfig, plan: DevicePlan) -> dict:
    """Detail('shards').value that a ddp run of cfg (on `plan`, its checked devices) will report for its first
    epoch, before it starts."""
    return _planned_shards(cfg, rank_labels(cfg, plan))


def shard_table(source: Any, which: str = "latest") -> list[dict]:
    """Rank -> rows, for the split panel: one dict per rank with its count, first/last and padded indices.

    Args:
        source: a Snapshot, a Snapshot.extra dict, or Detail('shards').value.
        which: "first" or "latest" epoch.
    """
    value = _shards_of(source)
    if not value:
        return []
    epoch = value[which]
    return [
        {
            "rank": r["rank"],
            "device": r["device"],
            "epoch": epoch["epoch"],
            "rows": r["count"],
            "first": r["first"],
            "last": r["last"],
            "padded": list(r["padded"]),
            "indices": list(r["indices"]),
            "truncated": r["truncated"],
        }
        for r in epoch["ranks"]
    ]


def row_owners(source: Any, which: str = "latest") -> list[tuple[int, ...]] | None:
    """For each dataset row, the ranks that got it that epoch (two for a padded row); None if truncated."""
    value = _shards_of(source)
    if not value:
        return None
    epoch = value[which]
    if any(r["truncated"] for r in epoch["ranks"]):
        return None
    owners: list[tuple[int, ...]] = [()] * value["data_size"]
    for r in epoch["ranks"]:
        for index in r["indices"]:
            owners[index] = owners[index] + (r["rank"],)
    return owners


def _shards_of(source: Any) -> dict | None:
    extra = getattr(source, "extra", source)
    if isinstance(extra, Mapping) and "ranks" not in extra and "shards" in extra:
        return extra["shards"]
    return extra if isinstance(extra, Mapping) and "first" in extra else None


def shards_title(value: dict, which: str = "latest") -> str:
    """What the shard picture shows: the epoch, the sampler's rule and its padding."""
    epoch = value[which]
    n, k, per = value["data_size"], value["world_size"], value["rows_per_rank"]
    grouped = len(epoch["ranks"]) > k  # a dp x tp mesh: a shard per dp coordinate, shared by a tp group
    takers = count("view.count.dp_coordinate" if grouped else "view.count.rank", k)
    text = t(
        "view.shards.deal", epoch=epoch["epoch"], set_epoch=epoch["set_epoch"], shuffle=value["shuffle"],
        rows=count("view.count.dataset_row", n), ranks=takers, n=n, k=k, per=per,
    )  # fmt: skip
    if grouped:
        text += t("view.shards.groups", tp=len(epoch["ranks"]) // k)
    if value["padding"]:
        rows = ", ".join(map(str, epoch["repeated"]))
        text += t("view.shards.padding", padded=count("view.count.row", value["padding"]), rows=rows)
    return text


def _preview(indices: Sequence[int], total: int) -> str:
    text = ", ".join(map(str, indices[:PREVIEW_INDICES]))
    return text + (t("view.shards.more", n=total - PREVIEW_INDICES) if total > PREVIEW_INDICES else "")


def shard_rows(value: dict, which: str = "latest") -> list[dict[str, Any]]:
    """One row per rank: how many dataset rows it got this epoch, which ones (in its order), the padding."""
    return [
        {
            t("view.col.rank"): r["rank"],
            t("view.col.device"): r["device"],
            t("view.col.dataset_rows"): r["rows"],
            t("view.col.rank_order"): _preview(r["indices"], r["rows"]),
            t("view.col.padded"): ", ".join(map(str, r["padded"])) or t("view.none"),
        }
        for r in shard_table(value, which)
    ]


def layout(height: int, **more: Any) -> dict:
    """A figure's layout in the page's colours and type (drawn with theme=None so that these sizes hold)."""
    base = dict(
        template="none",
        height=height,
        margin=dict(l=10, r=10, t=10, b=10),
        font=FONT,
        paper_bgcolor="#ffffff",
        plot_bgcolor="#ffffff",
    )
    return base | more


def shard_grid(ranks: list[dict], data_size: int) -> dict:
    """DDP's shards as a grid: a row per rank, a cell per dataset row, coloured where the rank got it.

    Args:
        ranks: one dict per rank, in order: {"rank", "rows", "indices", "padded"} as shard_table gives
            (the dataset rows the rank got this epoch, and those repeated to pad its shard).
        data_size: rows in the dataset.

    Returns a plotly figure dict {"data": [...], "layout": {...}}. Each cell that shows a number shows it in
    white on the rank's colour, or in the page's ink on a pale padding cell: readable on every colour.
    """
    n, k = data_size, len(ranks)
    names = [t("view.grid.rank", rank=r["rank"], rows=count("view.count.row", r["rows"])) for r in ranks]
    own = [[None] * n for _ in range(k)]  # (K, N): the rank's number where it got the row, else a gap
    pad = [[None] * n for _ in range(k)]  # the same for the rows repeated to pad its shard
    for r in ranks:
        for i in r["indices"]:
            own[r["rank"]][i] = r["rank"]
        for i in r["padded"]:
            own[r["rank"]][i], pad[r["rank"]][i] = None, r["rank"]
    # one flat colour per rank: value r falls in the band [r / K, (r + 1) / K] of the colour scale
    scale = [[(r + edge) / k, COLOURS[r % len(COLOURS)]] for r in range(k) for edge in (0, 1)]
    numbers = n <= MAX_CELL_NUMBERS
    # each cell's number written once: white on a rank's colour, the page's ink on a gap or a pale padding
    # cell (both traces cover every cell, so a number in both would print ink over white)
    white = [["" if v is None else str(i) for i, v in enumerate(row)] for row in own]
    ink = [[str(i) if v is None else "" for i, v in enumerate(row)] for row in own]
    data = []
    for z, text, opacity, colour, what in ((own, white, 1.0, "#ffffff", "got"), (pad, ink, 0.3, INK, "pad")):
        data.append(dict(
            type="heatmap",
            x=list(range(n)), y=names, z=z, zmin=-0.5, zmax=k - 0.5, colorscale=scale, showscale=False,
            opacity=opacity, xgap=1 if n <= 400 else 0, ygap=4, hoverongaps=False,
            text=text, texttemplate="%{text}" if numbers else None, textfont=dict(color=colour, size=15),
            hovertemplate=t(f"view.grid.hover.{what}", x="%{x}", y="%{y}") + "<extra></extra>",
        ))  # fmt: skip
    # where every cell shows its row number, tick labels under the grid would only repeat them
    rows_axis = AXIS | dict(
        range=[-0.5, n - 0.5], showgrid=False, showline=False, ticks="", automargin=True,
        showticklabels=not numbers, title=dict(text=t("view.grid.axis") if not numbers else "", standoff=4),
    )  # fmt: skip
    return dict(
        data=data,
        layout=layout(
            (36 if numbers else 60) + 36 * k,
            showlegend=False,
            margin=dict(l=10, r=10, t=4, b=6),
            xaxis=rows_axis,
            yaxis=AXIS | dict(autorange="reversed", showgrid=False, showline=False, automargin=True),
        ),
    )


# ---------------------------------------------------------------------------------------------------------
# Each rank's shapes in a step.


def _local_loss(replica: Any) -> float | None:
    """A rank's own loss in the step, where the strategy reports one (a `loss` on its Replica)."""
    loss = getattr(replica, "loss", None)
    return None if loss is None else float(loss)


def rank_table(step: Step) -> list[dict[str, Any]]:
    """Each rank's input and output shape in the step; the last row adds them up (nothing is gathered).

    With each rank's own loss reported, a "Local loss" column holds it, and the last row their mean: the
    loss that is charted.
    """
    losses = [_local_loss(r) for r in step.replicas]
    with_loss = any(loss is not None for loss in losses)
    rank_, device, rows_ = t("view.col.rank"), t("view.col.device"), t("view.col.rows")
    inp, out, local = t("view.col.input_shape"), t("view.col.output_shape"), t("view.col.local_loss")
    rows = []
    for rank, (r, loss) in enumerate(zip(step.replicas, losses)):
        row = {
            rank_: rank,
            device: r.device,
            rows_: r.rows,
            inp: shape_text(r.input_shape),
            out: shape_text(r.output_shape),
        }
        if with_loss:
            row[local] = "" if loss is None else f"{loss:.6g}"
        rows.append(row)
    total = {
        rank_: t("view.ranks.all"),
        device: t("view.ranks.together"),
        rows_: step.input_shape[0],
        inp: shape_text(step.input_shape),
        out: shape_text(step.output_shape),
    }
    if with_loss:
        total[local] = t("view.ranks.mean", loss=f"{step.loss:.6g}")
    return rows + [total]


def planned_step(cfg: FitConfig, plan: DevicePlan) -> tuple[Step, tuple[str, ...]]:
    """(a ddp run's first step before any run: ceil(batch / K) rows of each shard per rank, the ranks)."""
    value = planned_shards(cfg, plan)
    labels = [r["device"] for r in value["first"]["ranks"]]
    dims = dict(cfg.mesh_dims)
    if TP in dims and DP in dims:  # a 2-D mesh: each rank its dp coordinate's rows, its tp one's columns
        at_rank = grid(cfg.mesh_dims)
        rows = Layout(cfg.data_size, dims[DP], cfg.batch_size).local_rows(1)
        cuts = columns(cfg.n_features, dims[TP])
        replicas = []
        for i, label in enumerate(labels):
            at = at_rank[i]
            (lo, hi), start = cuts[at[TP]], at[DP] * rows
            replicas.append(Replica(label, start, start + rows, (rows, hi - lo), (rows, 1), columns=(lo, hi)))
        k = dims[DP]
    else:
        rows = Layout.of(cfg).local_rows(1)
        replicas = [
            Replica(label, i * rows, (i + 1) * rows, (rows, cfg.n_features), (rows, 1))
            for i, label in enumerate(labels)
        ]
        k = len(replicas)
    step = Step(1, 1, 1, math.nan, (k * rows, cfg.n_features), (k * rows, 1), tuple(replicas), (), 0.0, 0.0)
    return step, tuple(labels)


def planned_rank_table(cfg: FitConfig, plan: DevicePlan) -> list[dict[str, Any]]:
    """rank_table of a ddp run's first step, before any run: ceil(batch / K) rows of each shard per rank."""
    return rank_table(planned_step(cfg, plan)[0])


# ---------------------------------------------------------------------------------------------------------
# The page's panels, how the run ran, its console lines.


def _shards_source(
    snap: Snapshot | None, config: FitConfig | None, plan: DevicePlan | None
) -> tuple[str, dict, str] | None:
    """(title, Detail('shards') value, which epoch): the shards of the epoch of the step the picture
    shows, or epoch 1's before a run. The run reports its first and last epoch's; any other is
    DistributedSampler's own, drawn again for that epoch (a seeded permutation): a paused step's table is
    its own step's."""
    if snap is not None and snap.extra.get("shards"):
        value = snap.extra["shards"]
        epoch = snap.latest.epoch if snap.latest is not None else value["latest"]["epoch"]
        if epoch != value["latest"]["epoch"]:
            value = {**value, "latest": shards_of_epoch(snap.config, tuple(snap.devices), value, epoch)}
        return t("view.shards.actual", rule=shards_title(value, "latest")), value, "latest"
    if config is None or plan is None:
        return None
    value = planned_shards(config, plan)
    return t("view.shards.planned", rule=shards_title(value, "first")), value, "first"


def shards_of_epoch(cfg: FitConfig, labels: tuple[str, ...], value: dict, epoch: int) -> dict:
    """One epoch's shards as the run's Detail('shards') gives its first and last: DistributedSampler's."""
    k, ranks = value["world_size"], value["latest"]["ranks"]  # k shards of the rows, one entry per rank
    layout = Layout(value["data_size"], k, cfg.batch_size)
    labels = labels if len(labels) == len(ranks) else tuple(r["device"] for r in ranks)
    shards = epoch_shards(value["data_size"], k, value["shuffle"], value["seed"], epoch)
    return epoch_value(layout, labels, epoch, shards, row_shards(cfg.mesh_dims, len(labels)))


@dataclass(frozen=True)
class RankWords:
    """The catalog keys of the rank panels' sentences: DDP's, or another strategy's with ranks (FSDP's),
    which shows the same panels and says what its own ranks do."""

    caption: str = "view.ranks.caption"  # a step's sentence under each rank's shapes
    pale: str = "view.shards.pale"  # what the padding cells are


def _shards_section(title: str, value: dict, which: str, words: RankWords = RankWords()) -> Section:
    """A strip per rank over the dataset's rows: a cell where the rank got the row, pale for padding."""
    n = value["data_size"]
    figure, notes = None, []
    if row_owners(value, which) is None or n > MAX_SHARD_PICTURE_ROWS:
        notes.append(t("view.shards.too_many", n=n))
    else:
        figure = shard_grid(shard_table(value, which), n)
    if value["padding"]:
        notes.append(t(words.pale))
    return Section("shards", heading=title, figure=figure, notes=tuple(notes))


def _ranks_section(
    snap: Snapshot | None, config: FitConfig | None, value: dict, which: str, plan: DevicePlan | None,
    words: RankWords,
) -> Section:
    """Each rank's dataset rows this epoch, and each rank's shapes in the latest step (or the planned one)."""
    if snap is not None and snap.latest is not None:
        step = snap.latest
        rows = rank_table(step)
        caption = t(words.caption, step=step.step, loss=f"{step.loss:.6g}")
    else:
        rows = planned_rank_table(config, plan) if config is not None and plan is not None else []
        mesh = config is not None and {DP, TP} <= dict(config.mesh_dims).keys()
        caption = t("view.ranks.planned_mesh" if mesh else "view.ranks.planned")
    return Section(
        "ranks",
        title=t("view.ranks.title"),
        tables=(shard_rows(value, which), rows),
        text_columns=(t("view.col.rank"),),
        notes=(caption,),
    )


def rank_sections(
    snap: Snapshot | None, cfg: FitConfig | None, plan: DevicePlan | None, words: RankWords = RankWords()
) -> list[Section]:
    """The split of a strategy with ranks: which dataset rows each rank got from the sampler this epoch
    (padding marked), then each rank's rows and shapes; `words` are the sentences of the strategy shown."""
    config, plan = shown(snap, cfg, plan)  # the run's config and plan, or the controls'
    source = _shards_source(snap, config, plan)
    if source is None:
        return []
    title, value, which = source
    ranks = _ranks_section(snap, config, value, which, plan, words)
    return [_shards_section(title, value, which, words), ranks]


def ranks_words(cfg: FitConfig, started: RunStarted) -> str:
    """ "2 ranks, gloo": gloo on the CPU, nccl with one GPU per rank (every strategy with ranks says so)."""
    backend = "nccl" if cfg.devices.startswith("cuda") else "gloo"
    return f"{plural(len(started.devices), 'rank')}, {backend}"


def console_frame(
    snap: Snapshot, own: str | None = None, lines: Callable[[dict], list[str]] | None = None
) -> tuple[list[str], list[str]]:
    """What the command line prints around a ranked run's steps: the process group first, then the
    strategy's own layout (`lines` of its Detail `own`: FSDP's shards, TP's columns), and once the run has
    ended every rank's final parameters."""
    head = [group_line(snap.extra[GROUP])] if GROUP in snap.extra else []
    if own is not None and lines is not None and own in snap.extra:
        head += lines(snap.extra[own])
    tail = final_lines(snap.extra["final"]) if "final" in snap.extra and not snap.active else []
    return head, tail
