"""An uploaded object's bytes are freed as soon as its upload returns.

A slice task uploads objects of up to `object_bytes` one after another, and a Spark Python
worker runs task after task. The HTTP request keeps its body in reference cycles, which only
Python's cyclic GC frees, and that GC hardly runs in a task (its few allocations are large):
whatever the body held stayed alive, one more object after each upload (a W2 task's peak was
4.2x `object_bytes`, and a worker's RSS grew by an object after each task).
"""

from __future__ import annotations

import gc
import os
import sys


def test_after_an_upload_nothing_holds_the_objects_bytes(swift):
    data = os.urandom(1_000_000)
    gc_was_on = gc.isenabled()
    gc.disable()  # as during a task: what only the cyclic GC frees is then still held
    try:
        with swift.store() as store:
            store.check()
            held = sys.getrefcount(data)
            store.put("object", data)
            assert sys.getrefcount(data) == held, "the upload kept a reference to the object's bytes"
            assert store.get("object") == data
    finally:
        if gc_was_on:
            gc.enable()
