"""The strategies' packages, one each (`dataparallel`, `ddp`, `fsdp`, `tp`, `pp`), peers that import none of
the others. Each package's `__init__.py` holds its `STRATEGY`; the registry they are entered in is
fitcore.protocols.registry, and fitcore/__init__.py's `BUILTIN` is the list that enters them."""
