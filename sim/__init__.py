"""The deterministic, seeded simulator of Casekeeper's world (``casekeeper sim``): see docs/simulator.md.

Not deployed (``.funcignore``) and imported by no other package (the import contracts in pyproject.toml).
"""
