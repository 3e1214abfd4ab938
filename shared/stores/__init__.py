"""Storage backends: one module per vendor, each implementing ``shared.core.ports.DocumentStore``."""
