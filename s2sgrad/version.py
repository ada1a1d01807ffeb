"""The package version (read by the disk cache's keys as well as by users)."""
__version__ = "0.1.0"
