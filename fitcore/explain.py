"""The page's explanations, in Markdown: how each strategy trains, next to one another."""

DATAPARALLEL_MARKDOWN = """\
`nn.DataParallel(model, device_ids=[0, 1, ...])` runs in one process. On every forward call it:

1. **scatter** — cuts the batch along its first dimension with `tensor.chunk(len(device_ids))` and copies
   chunk *i* to device *i*. Chunks have `ceil(B / K)` rows and the last one fewer, so 200 rows on 3 devices
   are 67 / 67 / 66, and a small batch uses fewer devices than selected (5 rows on 8 devices: 5 chunks of 1).
2. **replicate** — copies the module's current parameters from `device_ids[0]` to every device that got a
   chunk, again on every step.
3. **parallel_apply** — runs replica *i* on chunk *i*, one thread per replica, all at once. Each replica's
   forward sees only its chunk: the tutorial's `In Model: input size torch.Size([100, 2])` lines.
4. **gather** — concatenates the replicas' outputs on `device_ids[0]`: the `Outside` line shows the whole
   batch again. The loss is computed there, and backward sums every replica's gradients into the one
   original set of parameters, which the optimizer then updates once.

**Virtual devices** do steps 1, 3 and 4 exactly on the CPU and make step 2 free (the replicas share the
parameters), so the numbers are those of one device: the lesson is the split, not a speed-up.

**`.to(device)`**: `tensor.to(device)` returns a *copy* on that device and leaves the original where it was,
so write `x = x.to(device)`. `model.to(device)` moves the module's parameters *in place* (and returns the same
module), so `model.to(device)` on its own is enough.
"""

DDP_MARKDOWN = """\
**DataParallel** (`nn.DataParallel`) is *one process* driving several devices with threads. On every
forward call it **scatters** the batch from device 0 (`tensor.chunk(K)`), **replicates** the model onto
every device (again on every step), runs the replicas in parallel threads and **gathers** their outputs back
onto device 0, where the loss is computed. In backward the replicas' gradients are summed onto the one
model on device 0, and one optimizer step updates it. Device 0 does extra work every step, and the threads
share one Python interpreter.

**DistributedDataParallel** (`DistributedDataParallel`, the `ddp` strategy) is *one process per device*
(a *rank*). Each rank builds its own copy of the model once; DDP broadcasts rank 0's parameters when it
wraps the model, so all copies start equal. Each rank reads **its own shard** of the data: a
`DistributedSampler` deals the epoch's order out round-robin, `ceil(N / K)` rows per rank, repeating the
first rows of the order to pad the last shards when `N` does not divide by `K` (those rows count twice
that epoch). Each rank runs forward and its loss on its own rows only: **nothing is scattered and no
output is gathered**. During backward, DDP **all-reduces** the gradients (in buckets, overlapping with
the rest of backward), so every rank gets the same averaged gradient and takes the same optimizer step:
the parameters stay identical without ever being copied again.

Here each rank takes `ceil(batch size / K)` rows of its shard per step, so a step's global batch is `K`
times that; with equal rows on every rank the averaged gradient is the gradient of the mean loss over the
global batch, and DDP learns what one process would learn on the same rows.
"""
