"""Runnable jobs built on olympia: ``python -m olympia.jobs.orders`` is the
main job of the README (a PySpark pipeline on an embedded catalog)."""
