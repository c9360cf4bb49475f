"""What the strategies build on, above the engine: the live view's payload (live.py), `fitcore check`'s
rows (check.py), the training flags (flags.py), the lab's arithmetic (labmath.py, equivalence.py) and the
2-D mesh's compare row (compare_mesh.py). A strategy's package imports these; they import no strategy."""
