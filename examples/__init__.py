"""Workflows built on the public guard API (``casekeeper``)."""
