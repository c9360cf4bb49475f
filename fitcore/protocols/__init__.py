"""What a strategy plugs into, below everything that reads it: the registry's `Strategy` record and the
table `register` fills (registry.py), and the two leaves a record names, the run's `Mesh` of named
dimensions (mesh.py) and the `Split` of a batch's rows and columns over it (split.py). Nothing here imports
a strategy or the config."""
