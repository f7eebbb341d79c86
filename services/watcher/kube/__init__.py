"""The watcher's Kubernetes backend: list-watch the API, patch workloads, mirror Kueue config.

Layers, one way only: ``errors`` <- ``api`` <- ``watching`` / ``patching`` <- ``backend``;
``webhook`` stands apart. Nothing here imports the other services.
"""
