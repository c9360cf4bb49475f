"""The phase vocabulary, the bytes formulas, the specs of a step, and the clocks that time it."""

from __future__ import annotations

import math

import pytest

from fitcore.core.chunks import chunk_sizes
from fitcore.core.phases import (
    BACKWARD_END,
    FORWARD_END,
    LOADED,
    LOSS_END,
    OPTIMIZER_END,
    START,
    CudaClock,
    HostClock,
    Phase,
    PhaseRecorder,
    PhaseSpec,
    assemble,
    gather_bytes,
    scatter_bytes,
    step_bytes,
    used_slots,
)
from fitcore.strategies.dataparallel.phases import (
    DATAPARALLEL_PHASES,
    backward_bytes,
    dataparallel_bytes,
    dataparallel_specs,
    replicate_bytes,
)
from fitcore.strategies.ddp.phases import (
    ALLREDUCE_END,
    ALLREDUCE_START,
    DDP_PHASES,
    DDP_SLOTS,
    MESH_PHASES,
    TP_ALLREDUCE_END,
    TP_PARTIAL_END,
    allreduce_bytes,
    ddp_bytes,
    ddp_specs,
)

LABELS = tuple(f"dev:{i}" for i in range(8))


def test_vocabularies_in_the_order_of_a_step():
    assert DATAPARALLEL_PHASES == (
        "scatter",
        "replicate",
        "parallel_apply",
        "gather",
        "loss",
        "backward",
        "reduce",
        "optimizer",
    )
    assert DDP_PHASES == ("load", "forward", "loss", "backward", "allreduce", "optimizer")


def test_the_tutorial_step_200_rows_on_2_devices_float32():
    # d = 2 features, float32: 100 rows each. DataParallel: scatter 100*2*4 = 800, replicate 3*4 = 12,
    # gather 100*4 = 400, backward's output gradients 100*4 = 400, reduce 3*4 = 12: 1624 in all.
    # DDP: each of the 2 ranks sends 2*(2-1)/2 * 3*4 = 12 bytes: 24 in all.
    # FSDP (ZeRO-3): shards of ceil(2/2) + ceil(1/2) = 2 numbers; each rank sends 1 shard in each of its two
    # all-gathers and its reduce-scatter: 3 * 8 = 24 bytes, 48 in all.
    # TP: each rank all-reduces its partial output (200, 1), 800 bytes: 2*(2-1)/2 * 800 = 800, 1600 in all;
    # it grows with the rows, where DDP's does not.
    # PP (1F1B, 2 stages, layers of width d): each of the 200 rows' activations (d = 2 numbers) down the one
    # link and their gradients back: 2 * 1 * 200 * 2 * 4 = 3200
    assert step_bytes(200, 2, 2, 4) == {"dataparallel": 1624, "ddp": 24, "fsdp": 48, "tp": 1600, "pp": 3200}
    assert step_bytes(200, 2, 2, 8) == {"dataparallel": 3248, "ddp": 48, "fsdp": 96, "tp": 3200, "pp": 6400}
    assert step_bytes(400, 2, 2, 4)["tp"] == 2 * 1600 and step_bytes(400, 2, 2, 4)["ddp"] == 24


@pytest.mark.parametrize(
    "rows, k, d, itemsize, dataparallel, ddp",
    [
        # 67/67/66 rows: scatter (67+66)*2*4 = 1064, replicate 2*12 = 24, gather 133*4 = 532,
        # backward 532, reduce 24 -> 2176; DDP 3 * round(2*2/3*12) = 3*16 = 48
        (200, 3, 2, 4, 2176, 48),
        # 5 rows on 8 devices: 5 busy. scatter 4*1*3*8 = 96, replicate 4*32 = 128, gather 4*8 = 32,
        # backward 32, reduce 128 -> 416; DDP: all 8 ranks, 8 * round(2*7/8*32) = 8*56 = 448
        (5, 8, 3, 8, 416, 448),
        (64, 1, 4, 4, 0, 0),  # one device moves nothing
        # 10/10/10 rows, d = 1: scatter 2*40 = 80, replicate 2*8 = 16, gather 80, backward 80, reduce 16;
        # DDP: 2*2/3 * 2*4 = 10.67 rounds to 11 per rank
        (30, 3, 1, 4, 272, 33),
    ],
)
def test_step_bytes_table(rows, k, d, itemsize, dataparallel, ddp):
    # FSDP: every rank sends (k - 1) padded shards of ceil(d / k) + ceil(1 / k) numbers in each collective
    fsdp = k * 3 * (k - 1) * (math.ceil(d / k) + 1) * itemsize
    # TP: every rank all-reduces the (rows, 1) partial output: 2(k-1)/k of rows * itemsize, rounded
    tp = k * round(2 * (k - 1) * rows * itemsize / k)
    # PP: k stages, each row's activations (d numbers) down k - 1 links and their gradients back
    pp = 2 * (k - 1) * rows * d * itemsize
    expected = {"dataparallel": dataparallel, "ddp": ddp, "fsdp": fsdp, "tp": tp, "pp": pp}
    assert step_bytes(rows, k, d, itemsize) == expected


def test_per_device_formulas():
    assert scatter_bytes(67, 3, 4, first=False) == 67 * 3 * 4
    assert scatter_bytes(67, 3, 4, first=True) == 0
    assert replicate_bytes(3, 8, first=False) == 32 and replicate_bytes(3, 8, first=True) == 0
    assert gather_bytes(66, 8, first=False) == 528 and gather_bytes(66, 8, first=True) == 0
    assert backward_bytes((67, 67, 66), 4) == 133 * 4
    assert allreduce_bytes(1, 5, 4) == 0
    assert allreduce_bytes(4, 3, 4) == 24  # 2 * 3/4 * 16
    assert dataparallel_bytes((100,), 2, 4) == 0
    assert ddp_bytes(2, 2, 4) == 24


def fake_bounds(i):
    """Distinct slots per device, laid out like the emulation's: apply slots after the shared ones."""
    return START, 4, 5, 7 + 2 * i, 8 + 2 * i, 6


@pytest.mark.parametrize("itemsize", [4, 8])
def test_dataparallel_specs_one_per_busy_device_with_the_formulas(itemsize):
    d, sizes = 3, chunk_sizes(5, 8)  # 5 rows on 8 devices: five chunks of 1, three devices idle
    specs = dataparallel_specs(LABELS, sizes, d, itemsize, fake_bounds, gathered=23)
    names = [s.name for s in specs]
    assert names == ["scatter"] * 5 + ["replicate"] * 5 + ["parallel_apply"] * 5 + ["gather"] * 5 + [
        "loss",
        "backward",
    ] + ["reduce"] * 5 + ["optimizer"]
    for name in ("scatter", "replicate", "parallel_apply", "gather", "reduce"):
        assert [s.device for s in specs if s.name == name] == list(LABELS[:5])
    by = {(s.name, s.device): s.bytes for s in specs}
    assert [by["scatter", dev] for dev in LABELS[:5]] == [0] + [1 * d * itemsize] * 4
    assert [by["replicate", dev] for dev in LABELS[:5]] == [0] + [(d + 1) * itemsize] * 4
    assert [by["gather", dev] for dev in LABELS[:5]] == [0] + [itemsize] * 4
    assert [by["reduce", dev] for dev in LABELS[:5]] == [0] + [(d + 1) * itemsize] * 4
    assert by["backward", "dev:0"] == 4 * itemsize
    assert by["loss", "dev:0"] == by["optimizer", "dev:0"] == 0
    assert sum(s.bytes for s in specs) == step_bytes(5, 8, d, itemsize)["dataparallel"]
    # the slots: each device's own apply slots, the shared gather and the loop's marks
    assert [(s.start, s.stop) for s in specs if s.name == "parallel_apply"] == [
        (7 + 2 * i, 8 + 2 * i) for i in range(5)
    ]
    assert [(s.start, s.stop) for s in specs if s.name in ("loss", "backward", "optimizer")] == [
        (23, LOSS_END),
        (LOSS_END, BACKWARD_END),
        (BACKWARD_END, OPTIMIZER_END),
    ]
    assert used_slots(specs) == (0, 1, 2, 3, 4, 5, 6) + tuple(range(7, 17)) + (23,)


def test_ddp_specs_for_one_rank():
    specs = ddp_specs("rank 1", 4, 2, 8)
    assert [s.name for s in specs] == list(DDP_PHASES)
    assert all(s.device == "rank 1" for s in specs)
    assert [s.bytes for s in specs] == [0, 0, 0, 0, round(2 * 3 / 4 * 3 * 8), 0]
    assert [(s.start, s.stop) for s in specs] == [
        (START, LOADED),
        (LOADED, FORWARD_END),
        (FORWARD_END, LOSS_END),
        (LOSS_END, BACKWARD_END),
        (ALLREDUCE_START, ALLREDUCE_END),
        (BACKWARD_END, OPTIMIZER_END),
    ]
    assert max(used_slots(specs)) == ALLREDUCE_END  # a 2-D mesh's two slots are not a 1-D step's


def test_ddp_specs_on_a_2d_mesh_name_the_tp_all_reduce_apart():
    # 3 columns of W and b over a dp group of 2; the tp group's all-reduce of 100 rows' outputs, 400 B
    specs = ddp_specs("rank 1", 2, 3, 4, tp_sent=400)
    assert [s.name for s in specs] == list(MESH_PHASES) == [
        "load", "forward", "tp_allreduce", "loss", "backward", "allreduce", "optimizer",
    ]  # fmt: skip
    assert [s.bytes for s in specs] == [0, 0, 400, 0, 0, round(2 * 1 / 2 * 4 * 4), 0]
    assert [(s.start, s.stop) for s in specs][1:4] == [
        (LOADED, TP_PARTIAL_END), (TP_PARTIAL_END, TP_ALLREDUCE_END), (TP_ALLREDUCE_END, LOSS_END),
    ]  # fmt: skip
    assert max(used_slots(specs)) == DDP_SLOTS - 1


def test_assemble_counts_from_the_step_start():
    specs = (PhaseSpec("scatter", "a", 8, 0, 2), PhaseSpec("loss", "a", 0, 2, 1))
    times = (10.0, 10.5, 10.25)
    assert assemble(specs, times) == (Phase("scatter", "a", 0.0, 0.25, 8), Phase("loss", "a", 0.25, 0.25, 0))


class FakeEvent:
    """torch.cuda.Event's four calls, on a clock the test sets; remembers the stream it was recorded on."""

    now = 0.0  # seconds, set by the test
    made = 0

    def __init__(self):
        FakeEvent.made += 1
        self.t = None
        self.stream = None
        self.synced = False

    def record(self, stream):
        self.t, self.stream, self.synced = FakeEvent.now, stream, False

    def synchronize(self):
        self.synced = True

    def elapsed_time(self, end):
        assert self.synced and end.synced, "elapsed_time before synchronize"
        return (end.t - self.t) * 1000.0  # milliseconds, as CUDA gives them


def test_cuda_clock_counts_each_device_from_its_own_start_and_reuses_events():
    FakeEvent.made = 0
    # slots 0, 1 on device 5; slot 2 unused; slots 3, 4 on device 7 (its start is slot 3)
    clock = CudaClock([5, 5, None, 7, 7], event=FakeEvent, stream=lambda device: f"stream of {device}")
    for step in range(2):
        for slot, t in ((0, 100.0), (3, 100.002), (1, 100.010), (4, 100.007)):
            FakeEvent.now = t + step
            clock.mark(slot)
        times = clock.resolve((0, 1, 3, 4))
        assert times == pytest.approx((0.0, 0.010, 0.0, 0.0, 0.005), abs=1e-9)
    assert FakeEvent.made == 4  # one event per used slot, made once
    assert [e.stream if e else None for e in clock._events] == [
        "stream of 5",
        "stream of 5",
        None,
        "stream of 7",
        "stream of 7",
    ]


def test_host_clock_marks_perf_counter_into_its_slots():
    clock = HostClock(3)
    clock.mark(2)
    clock.mark(0)
    times = clock.resolve((0, 2))
    assert len(times) == 3 and times[1] == 0.0 and times[0] >= times[2] > 0
    clock.mark(1, at=times[2] - 0.25)  # a time read before (a pipeline's shared zero): kept as it is
    assert clock.resolve((0, 1, 2))[1] == times[2] - 0.25


def test_a_cuda_clock_refuses_a_host_time():
    clock = CudaClock([0], event=FakeEvent, stream=lambda device: device)
    with pytest.raises(ValueError, match="not at a host time"):
        clock.mark(0, at=1.0)


@pytest.mark.parametrize("make_clock", ["host", "cuda"])
def test_recorder_builds_specs_once_per_split_and_takes_each_step_once(make_clock):
    slots = 6
    clock = (
        HostClock(slots)
        if make_clock == "host"
        else CudaClock([0] * slots, event=FakeEvent, stream=lambda d: d)
    )
    recorder = PhaseRecorder(clock)
    builds = []

    def build(rows):
        builds.append(rows)
        return (PhaseSpec("scatter", "a", rows, START, 4), PhaseSpec("loss", "a", 0, 4, LOSS_END))

    for step, rows in enumerate((10, 10, 7)):
        for order, slot in enumerate((START, 4, LOSS_END)):
            FakeEvent.now = step + order / 10
            recorder.mark(slot)
        recorder.use(rows, build, rows)
        taken = recorder.take()
        phases = taken.phases()
        assert [p.name for p in phases] == ["scatter", "loss"] and phases[0].bytes == rows == taken.bytes
        assert phases[0].start == 0.0 and all(p.duration >= 0 for p in phases)
        assert phases[1].start >= phases[0].start
        if make_clock == "cuda":  # the fake events' times, exactly
            assert [t for p in phases for t in (p.start, p.duration)] == pytest.approx([0.0, 0.1, 0.1, 0.1])
        assert recorder.take() is None  # nothing new since
    assert builds == [10, 7]
