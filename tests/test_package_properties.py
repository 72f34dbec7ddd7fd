"""Property tests of the package (hypothesis)."""
