"""The watcher's local backend: the embedded "cluster" on one machine (:mod:`.backend`).

Layers, one way only: ``objects`` / ``statuses`` / ``pods`` / ``processes`` / ``run_files``
<- ``finishes`` <- ``runs`` <- ``backend``; ``grouping`` serves ``backend`` alone.
"""
