"""Factories: ready-made jobs declared over the public API (``job()``, ``ctx.step``), each
returning an ordinary job handle, so enqueue, retries, cancel, dead letters, the manifest and
both operator surfaces treat them like any other job. Nothing here is a new primitive, and no
worker or supervisor knows a factory from a hand-written job."""
