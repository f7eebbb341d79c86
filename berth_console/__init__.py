"""Berth's web console: live pages of queues, workloads, managed jobs and events.

A bus client like the CLI: it imports only ``shared/``, reads the event stream (one ordered
consumer for every browser), the ``berth-jobs`` and ``berth-config`` buckets and the
services' query APIs, and never writes a decision. Pages are rendered on the server and kept
live with server-sent events. ``python -m berth_console`` starts it (see ``settings.py``).
"""
