"""An independent reference of asgdsim's training engines on real processes (README.md)."""
