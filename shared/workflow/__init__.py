"""The case workflow on Microsoft Agent Framework, and what makes it safe to resume.

- ``checkpoints``: checkpoint storage partitioned per case, refusing at save what it could not load.
- ``capture``: durable capture of the checkpoint-save failures the framework only logs (rule R7).
"""
