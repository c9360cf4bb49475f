"""Predict, then reveal: one multiple-choice question about the step the picture is about to show.

Every answer is read off the run's own events: the snapshot's Step (its replicas and its recorded phases)
and the ranks' Detail('shards'). Each strategy asks its own (its `questions` hook: DataParallel's in
fitcore/strategies/dataparallel/quiz.py, TP's in its package); the questions of ranks on shards of their
own (DistributedSampler's, DDP's and FSDP's) are here, as their panels are in fitcore.view.ranks. The
distractors come from the mistakes a student makes with the plan's rules (tensor.chunk's sizes, the byte
formulas), so they are plausible, and they are distinct from the answer and from each other. Nothing is
random: a step always asks the same question, in the same order.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from typing import Any, Callable, NamedTuple, Sequence

from fitcore.core import i18n
from fitcore.core.config import FitConfig
from fitcore.core.events import Step
from fitcore.kit.live import short_label
from fitcore.protocols import registry
from fitcore.protocols.mesh import DP

MAX_CHOICES = 4
KINDS = ("rows", "idle", "meet", "gather_bytes", "padded")


class Text(NamedTuple):
    """A text to show in the reader's language: a catalog key and its fields, or a count (i18n.count)."""

    key: str
    fields: tuple[tuple[str, Any], ...] = ()
    n: int | None = None

    def say(self, lang: str | None = None) -> str:
        if self.n is not None:
            return i18n.count(self.key, self.n, lang, **dict(self.fields))
        return i18n.t(self.key, lang, **dict(self.fields))


def text(key: str, **fields: Any) -> Text:
    return Text(key, tuple(fields.items()))


class Question(NamedTuple):
    """One question about one step: its text, its choices, which one is right and why."""

    kind: str  # one of KINDS
    step: int  # the step it asks about
    text: Text
    choices: tuple[Text, ...]
    answer: int  # index of the right choice
    explanation: Text
    value: Any  # the right answer as data (rows, device labels, bytes, ranks): what the tests compare


def _question(
    kind: str, step: Step, ask: Text, value: Any, others: Sequence, show: Callable, why: Text, order=None
) -> Question:
    """A Question whose choices are `value` and the first three distinct `others`, sorted by `order`
    (numbers ascending, lists of devices by length): the right one's place depends on the step, not on us."""
    picked: list = []
    for option in others:
        if option != value and option not in picked:
            picked.append(option)
    options = sorted([value] + picked[: MAX_CHOICES - 1], key=order or _order)
    return Question(kind, step.step, ask, tuple(show(o) for o in options), options.index(value), why, value)


def _order(option: Any) -> Any:
    """Numbers ascending; lists of devices by how many, then by their first one's place."""
    if isinstance(option, tuple):
        return (len(option), option)
    return (0, option)


# ---------------------------------------------------------------------------------------------------------
# The questions. labels: the selected devices (or ranks), as RunStarted lists them.


def asked_rows(step: Step, labels: Sequence[str]) -> tuple[Any, list[int]]:
    """The replica a question of rows asks about (each step in turn another), and the counts a student
    mistakes for its rows: ceil and floor of B / K, the whole batch, one off, the others' rows."""
    replica = step.replicas[step.step % len(step.replicas)]
    batch, k = step.input_shape[0], len(labels)
    size = math.ceil(batch / k)
    others = [size, batch // k, batch, size - 1, size + 1, batch - replica.rows, replica.rows + 1]
    return replica, [n for n in others if n > 0]


def rows_question(step: Step, cfg: FitConfig, labels: Sequence[str]) -> Question:
    """How many rows a given rank gets: ceil(B / K) of its own shard, the replica's rows in the Step."""
    replica, others = asked_rows(step, labels)
    batch, k, device = step.input_shape[0], len(labels), short_label(replica.device)
    dims = dict(cfg.mesh_dims)
    if len(dims) > 1:  # a 2-D mesh: the rows are cut over dp only; a tp group's ranks share theirs
        dp = dims[DP]
        ask = text("classroom.q.rows_mesh", step=step.step, batch=batch, dp=dp, device=device)
        why = text("classroom.why.rows_mesh", dp=dp, batch_size=cfg.batch_size, rows=replica.rows,
                   size=math.ceil(cfg.batch_size / dp), device=device)  # fmt: skip
        return _question("rows", step, ask, replica.rows, others, lambda n: Text("count.row", n=n), why)
    ask = text("classroom.q.rows_shard", step=step.step, batch=batch, k=k, device=device)
    per_rank = math.ceil(cfg.batch_size / k)  # one process per rank: each takes ceil(B / K) of its own shard
    why = text("classroom.why.rows_shard", k=k, batch_size=cfg.batch_size, size=per_rank, device=device,
               rows=replica.rows)  # fmt: skip
    return _question("rows", step, ask, replica.rows, others, lambda n: Text("count.row", n=n), why)


def padded_question(step: Step, cfg: FitConfig, labels: Sequence[str], shards: dict) -> Question:
    """Which ranks hold a padded duplicate this epoch: those whose shard in Detail('shards') has one."""
    # the ranks that pad are the same every epoch (positions N ... K*ceil(N/K)-1); the step's epoch if kept
    same = [shards[w] for w in ("latest", "first") if shards[w]["epoch"] == step.epoch]
    epoch = same[0] if same else shards["latest"]
    padded = tuple(r["rank"] for r in epoch["ranks"] if r["padded"])
    k, p = len(epoch["ranks"]), shards["padding"]
    ranks = tuple(range(k))
    others = [ranks[:p], ranks[: p + 1], ranks[k - p - 1 :], (), ranks]
    others = [o for o in others if len(o) < k]
    ask = text("classroom.q.padded", step=step.step, epoch=step.epoch, n=shards["data_size"], k=k)
    why = text("classroom.why.padded", n=shards["data_size"], k=k, total=shards["total_size"],
               size=shards["rows_per_rank"], padding=p, ranks=_ranks(padded))  # fmt: skip
    show = lambda o: text("classroom.c.ranks", ranks=_ranks(o)) if o else text("classroom.c.no_rank")  # noqa: E731
    return _question("padded", step, ask, padded, others, show, why)


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(f"rank {r}" for r in ranks)


def questions(step: Step, cfg: FitConfig, labels: Sequence[str], extra: dict | None = None) -> list[Question]:
    """Every question this step can answer from its events, in KINDS' order.

    Args:
        step: the Step the picture is about to show.
        cfg: the run's config.
        labels: the selected devices or ranks (RunStarted.devices / Snapshot.devices).
        extra: Snapshot.extra, where DDP's shards are.
    """
    return registry.of(cfg).questions(step, cfg, labels, extra)


def shard_questions(step: Step, cfg: FitConfig, labels: Sequence[str], extra: dict | None = None) -> list:
    """Ranks with shards of their own: each rank's rows, and which ranks hold the padded duplicates."""
    out = [rows_question(step, cfg, labels)] if step.replicas else []
    shards = (extra or {}).get("shards")
    if shards and shards["padding"] and len(labels) > 1:
        out.append(padded_question(step, cfg, labels, shards))
    return out


def question_for(
    step: Step, cfg: FitConfig, labels: Sequence[str], extra: dict | None = None
) -> Question | None:
    """The one question a step asks: each step in turn takes the next kind it can answer."""
    found = questions(step, cfg, labels, extra)
    return found[step.step % len(found)] if found else None


def question_key(question: Question) -> str:
    """A room's name for a question: its kind, its step and its choices, the same on every page of the class
    (the teacher's page asks it; the students' pages, following the teacher's run, find it again)."""
    choices = "|".join(c.say("en") for c in question.choices)
    return f"{question.kind}/{question.step}/{hashlib.sha256(choices.encode()).hexdigest()[:12]}"


def question_view(question: Question, lang: str | None = None) -> dict:
    """A question as a page shows it, in its language (the page's own without one): the teacher's veil
    over the projector and the students' pages (fitcore.follow) show the same key, words and choices."""
    return {
        "key": question_key(question),
        "text": question.text.say(lang),
        "choices": [c.say(lang) for c in question.choices],
    }


# ---------------------------------------------------------------------------------------------------------
# Right answers, for each browser on its own.


class Scores:
    """Each browser's answers, by its owner id: a page reads and writes its own owner's only.

    An answer counts once per question (a rerun, a reload or a second click does not count it again).
    """

    def __init__(self, owners: int = 10_000, answers: int = 500):
        self._lock = threading.Lock()
        self._owners = owners  # the least recently seen owner is forgotten beyond this many
        self._answers = answers  # remembered choices per owner; the tally keeps counting
        self._by_owner: OrderedDict[str, dict] = OrderedDict()

    def _entry(self, owner: str) -> dict:
        entry = self._by_owner.setdefault(owner, {"right": 0, "asked": 0, "chosen": OrderedDict()})
        self._by_owner.move_to_end(owner)
        while len(self._by_owner) > self._owners:
            self._by_owner.popitem(last=False)
        return entry

    def answer(self, owner: str, question_id: str, choice: int, right: bool) -> bool:
        """Record owner's first answer to a question; False if it had answered it already."""
        with self._lock:
            entry = self._entry(owner)
            if question_id in entry["chosen"]:
                return False
            entry["chosen"][question_id] = choice
            entry["right"] += bool(right)
            entry["asked"] += 1
            while len(entry["chosen"]) > self._answers:
                entry["chosen"].popitem(last=False)
            return True

    def chosen(self, owner: str, question_id: str) -> int | None:
        """The choice owner gave to a question, or None if it has not answered it."""
        with self._lock:
            entry = self._by_owner.get(owner)
            return None if entry is None else entry["chosen"].get(question_id)

    def tally(self, owner: str) -> tuple[int, int]:
        """(right answers, questions answered) of this owner."""
        with self._lock:
            entry = self._by_owner.get(owner)
            return (0, 0) if entry is None else (entry["right"], entry["asked"])
