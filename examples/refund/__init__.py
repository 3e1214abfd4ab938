"""The customer-refund example: a second workflow on the public guard API (see README.md here)."""
