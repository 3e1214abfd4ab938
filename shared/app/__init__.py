"""The app's wiring: settings read once, the composition root, telemetry and alerts."""
