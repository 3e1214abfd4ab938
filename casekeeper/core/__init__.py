"""The policy core: imports only the standard library and itself."""
